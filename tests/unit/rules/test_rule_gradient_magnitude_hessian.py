"""gradient_magnitude_hessian (bSAM's curvature, Moellenhoff & Khan 2023 Alg. 1): E_q[∇²ℓ] ≈ c·mean_k |ĝ_k| with
ĝ_k the gradients at the samples θ_k = m + ε_k/√s of q.

Checked numerically (numpy target, the same draws on both sides):

* the variational online Newton step with the rule: s ← (1 − ρ)s + ρ c mean_k|ĝ_k|, m ← m − ρ mean_k ĝ_k / s_{t+1};
* it is Price's estimator (``price_estimator``: mean_k ĝ_k ε_k √s) with ε_k ĝ_k replaced by |ĝ_k|: for c = √s and
  draws ε_k = ±1 whose sign is that of ĝ_k the two steps are equal;
* without samples of q it is a located error.
"""
import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError

RTOL = 1e-13


def recipe(approx, hp):
    return yaml.safe_dump({"name": "gmh_test", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)


def compile_(approx, hp=None):
    return api.derive(recipe(approx, hp or {"lr": 0.1, "c": 1.0, "n": {"default": 1, "type": "int"}})).compile("numpy")


def problem(seed=0, n=6):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), lambda x: a * (x - c) + 0.3 * np.sin(x)


class Draws:
    def __init__(self, draws):
        self.draws = list(draws)

    def standard_normal(self, shape):
        return self.draws.pop(0)


@pytest.mark.parametrize("n", [1, 3])
def test_hand_formula(n):
    mod = compile_([{"monte_carlo": {"samples": "n"}}, {"gradient_magnitude_hessian": {"scale": "c"}}])
    m0, s0, grad = problem(1)
    lr, c = 0.3, 0.8
    state, m, s = mod.init(m=m0, s=s0), m0.copy(), s0.copy()
    rng = np.random.default_rng(5)
    for _ in range(8):
        eps = [rng.standard_normal(m.shape) for _ in range(n)]
        state = mod.step(state, oracles={"grad": grad}, rng=Draws(eps), lr=lr, c=c, n=n)
        gs = [grad(m + e / np.sqrt(s)) for e in eps]
        s = (1 - lr) * s + lr * c * np.mean(np.abs(gs), axis=0)
        m = m - lr * np.mean(gs, axis=0) / s
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-15)


def test_is_price_with_the_sign_of_the_draw_matching_the_gradient():
    """c = √s, ε_k = sign(ĝ_k): ĝ_k ε_k √s = |ĝ_k| √s, Price's estimate is the rule's."""
    mag = api.derive(recipe([{"monte_carlo": {"samples": 1}}, {"gradient_magnitude_hessian": {"scale": "sqrt(s)"}}],
                            {"lr": 0.1})).compile("numpy")
    price = api.derive(recipe([{"monte_carlo": {"samples": 1}}, "price_estimator"], {"lr": 0.1})).compile("numpy")
    m0, s0, grad = problem(2)
    a, b = mag.init(m=m0, s=s0), price.init(m=m0, s=s0)
    for _ in range(6):
        # the sign of ĝ at θ = m ± 1/√s does not change for these small steps: draw ε = sign of the gradient there
        sign = np.sign(grad(a["m"] + np.sign(grad(a["m"])) / np.sqrt(a["s"])))
        eps = np.where(np.sign(grad(a["m"] + sign / np.sqrt(a["s"]))) == sign, sign, np.nan)
        assert not np.isnan(eps).any()
        a = mag.step(a, oracles={"grad": grad}, rng=Draws([eps]), lr=0.1)
        b = price.step(b, oracles={"grad": grad}, rng=Draws([eps]), lr=0.1)
        np.testing.assert_allclose(a["s"], b["s"], rtol=1e-14, atol=0)
        np.testing.assert_allclose(a["m"], b["m"], rtol=1e-14, atol=1e-15)


def test_needs_samples_of_q():
    with pytest.raises(SpecError, match="needs gradients at samples of q") as exc:
        api.derive(recipe(["delta", {"gradient_magnitude_hessian": {"scale": "c"}}], {"lr": 0.1, "c": 1.0}))
    assert exc.value.line is not None
    with pytest.raises(SpecError, match="missing argument 'scale'"):
        api.derive(recipe([{"monte_carlo": {"samples": 1}}, "gradient_magnitude_hessian"], {"lr": 0.1}))
