"""price_estimator (Eq. 11 with Stein's lemma): under Monte Carlo the Hessian of the update is estimated from the
gradients at the samples, E_q[∇²ℓ] = E_q[∇ℓ(θ)(θ − m)]/σ² ≈ mean_k ∇ℓ(θ_k)(θ_k − m)·s  (q = N(m, 1/s)).

Checked numerically:
* one step equals the hand formula of Eq. 12 with that estimator, written from the θ_k the oracle was called at
  (s_{t+1} = (1 − ρ)s + ρ·mean_k g(θ_k)(θ_k − m)s, m_{t+1} = m − ρ·mean_k g(θ_k)/s_{t+1}), and the Hessian oracle
  is no longer needed;
* the estimate is unbiased for E_q[∇²ℓ]: over 40 000 i.i.d. coordinates its mean agrees with Gauss–Hermite
  quadrature of E_q[ℓ''] within 5 standard errors, while the Hessian at the mean, ℓ''(m), is > 20 standard errors
  away (the test can tell an expectation at samples from the delta method);
* with `when` false the step is the plain Monte Carlo step on the Hessian oracle, bit for bit.
"""
import functools

import numpy as np
import yaml

from blr_derive import api

LR, S_SAMPLES = 0.5, 3


def recipe(rule=True, when=False):
    hp = {"lr": LR, "S": {"default": S_SAMPLES, "type": "int"}}
    approx = [{"monte_carlo": {"samples": "S"}}]
    if rule:
        if when:
            approx.append({"price_estimator": {"when": "flag"}})
            hp["flag"] = {"default": True}
        else:
            approx.append("price_estimator")
    return yaml.safe_dump({"name": "price_test", "family": "gaussian_diag", "loss": "abstract",
                           "learning_rate": "lr", "hyperparameters": hp, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


def grad(x):
    """ℓ'(θ) for ℓ(θ) = log cosh(2θ) + θ²/2 − 0.5 cos θ: a narrow bump of curvature at 0."""
    return np.tanh(2 * x) + x + 0.5 * np.sin(x)


def hess(x):
    return 2 / np.cosh(2 * x) ** 2 + 1 + 0.5 * np.cos(x)


class Recorder:
    """An oracle that remembers where it was called (the θ_k the update drew)."""

    def __init__(self, f):
        self.f, self.calls = f, []

    def __call__(self, x):
        self.calls.append(np.array(x, copy=True))
        return self.f(x)


def test_one_step_is_eq_12_with_the_stein_estimator():
    mod = compiled(recipe())
    assert tuple(mod.ORACLES) == ("grad",)
    rng = np.random.default_rng(0)
    m0, s0 = rng.normal(size=7), rng.uniform(1.0, 4.0, size=7)
    rec = Recorder(grad)
    out = mod.step(mod.init(m=m0, s=s0), oracles={"grad": rec}, rng=np.random.default_rng(1), lr=LR)
    assert len(rec.calls) == S_SAMPLES
    thetas = np.array(rec.calls)
    g_bar = grad(thetas).mean(axis=0)
    h_hat = (grad(thetas) * (thetas - m0)).mean(axis=0) * s0            # Stein: E[ℓ'(θ)(θ − m)]/σ², σ² = 1/s
    s1 = (1 - LR) * s0 + LR * h_hat
    m1 = m0 - LR * g_bar / s1
    # The engine forms θ_k − m as ε/√s; here it is (m + ε/√s) − m, which loses up to one ulp of |m| (~2e-16)
    # per sample, times |g|·s ≲ 10: an absolute error ≲ 1e-14 in ĥ.  rtol 1e-12 with atol 1e-13 is a wide margin;
    # the Hessian at the mean or (mean g)² instead of the Stein estimate change s by O(0.1-1).
    np.testing.assert_allclose(out["s"], s1, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(out["m"], m1, rtol=1e-12, atol=1e-13)
    assert np.abs(s1 - ((1 - LR) * s0 + LR * hess(m0))).max() > 1e-2


def test_the_estimate_is_unbiased_for_the_expected_hessian():
    mod = compiled(recipe())
    n, m, s = 40_000, 0.3, 2.0
    m0, s0 = np.full(n, m), np.full(n, s)          # n independent copies of the same 1-D problem
    out = mod.step(mod.init(m=m0, s=s0), oracles={"grad": grad}, rng=np.random.default_rng(2024), lr=LR)
    h_hat = (out["s"] - (1 - LR) * s0) / LR       # each coordinate's estimate (exact up to ~1e-15)
    # E_q[ℓ''(θ)] by 80-point Gauss–Hermite quadrature (probabilists' weight e^{−x²/2}): ℓ'' is analytic in a strip,
    # so the rule is exact to ~1e-15, far below the Monte Carlo error.
    x, w = np.polynomial.hermite_e.hermegauss(80)
    exact = np.sum(w * hess(m + x / np.sqrt(s))) / np.sqrt(2 * np.pi)
    se = h_hat.std(ddof=1) / np.sqrt(n)
    # 5 standard errors: a false failure has probability ~6e-7 (and the seed is fixed)
    assert abs(h_hat.mean() - exact) < 5 * se, (h_hat.mean(), exact, se)
    assert abs(hess(m) - exact) > 20 * se                     # the delta method's ℓ''(m) would fail this test


def test_when_false_falls_back_to_the_hessian_oracle_bit_for_bit():
    with_, without = compiled(recipe(when=True)), compiled(recipe(rule=False))
    rng = np.random.default_rng(3)
    m0, s0 = rng.normal(size=5), rng.uniform(1.0, 4.0, size=5)
    a = with_.step(with_.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, rng=np.random.default_rng(4),
                   lr=LR, flag=False)
    b = without.step(without.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess},
                     rng=np.random.default_rng(4), lr=LR)
    for k in ("m", "s"):                  # same draws, same h̄ = mean_k ∇²ℓ(θ_k): identical arithmetic
        np.testing.assert_array_equal(a[k], b[k])
    c = with_.step(with_.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, rng=np.random.default_rng(4),
                   lr=LR, flag=True)
    assert np.abs(c["s"] - b["s"]).max() > 1e-3              # and with the flag on, the estimator is used
