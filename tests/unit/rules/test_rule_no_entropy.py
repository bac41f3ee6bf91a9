"""Rule ``no_entropy`` (Eq. 2 without −H(q); Sec. 4.5, Eq. 48): minimising E_q[ℓ] alone, the BLR step is
λ_{t+1} = λ_t − ρ∇_μ E_q[ℓ] — no (1 − ρ) shrinkage of λ_t (∇_μ H(q) = −λ − ∇_μ E_q[log h] drops out).

Checked numerically:

* the step against λ_t − ρ∇_μ E_q[ℓ] computed here, with E_q[ℓ] by Gauss-Hermite quadrature and ∇_μ by central
  differences (a quadratic loss, for which the delta method is exact);
* the step WITH the rule minus the step WITHOUT it, in natural parameters, is exactly ρλ_t (the entropy's
  shrinkage) for the diagonal and the full Gaussian, under Monte Carlo with the same draws, and for the
  straight-through Bernoulli (STE, Eq. 48 against the same Eq. 48 with smoothing);
* for N(m, I) the entropy does not depend on m: with and without the rule are the same step;
* the point-estimate limit: on a quadratic loss the precision never forgets, s_T = s_0 + ρTa exactly, so the
  variance 1/s_T → 0 while the mean reaches the minimiser — against the BLR's s → a (the Laplace posterior).
"""
import functools
import math

import numpy as np
import yaml

from blr_derive import api


@functools.lru_cache(maxsize=None)
def compiled(family, expectation="delta", with_rule=True):
    approx = [expectation if expectation != "mc" else {"monte_carlo": {"samples": "S"}}]
    approx += ["no_entropy"] if with_rule else []
    hp = {"rho": 0.1}
    if expectation == "mc":
        hp["S"] = {"default": 3, "type": "int"}
    text = yaml.safe_dump({"name": f"noent_{family}_{with_rule}", "family": family, "loss": "abstract",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)
    return api.derive(text).compile("numpy")


def loss(seed=0, n=5):
    """A separable non-quadratic loss with a positive Hessian."""
    rng = np.random.default_rng(seed)
    a, c = rng.uniform(0.5, 2.0, size=n), rng.normal(size=n)
    return (lambda t: a * (t - c) + 0.3 * np.sin(t)), (lambda t: a + 0.3 * np.cos(t)), a, c


def nat_diag(st):
    return np.array([st["s"] * st["m"], -st["s"] / 2])


# Roundings: the two programs evaluate a few products and one division each; comparing in natural parameters
# (s·m) multiplies ~1e-16 relative errors by O(1) values, so 1e-12 is a wide bound that the ρλ_t difference
# (O(0.1) here) can never pass by accident.
TOL = 1e-12


def test_quadratic_loss_step_is_lambda_minus_rho_natural_gradient_by_quadrature():
    mod = compiled("gaussian_diag")
    a, c = np.array([1.5, 0.4, 3.0]), np.array([0.3, -2.0, 1.0])
    m, s, rho = np.array([1.0, 0.5, -0.7]), np.array([2.0, 0.3, 5.0]), 0.35
    out = mod.step(mod.init(m=m, s=s), oracles={"grad": lambda t: a * (t - c), "hess": lambda t: a + 0 * t},
                   rho=rho)
    z, w = np.polynomial.hermite_e.hermegauss(10)
    w = w / math.sqrt(2 * math.pi)
    h = 1e-4
    for i in range(3):
        def expected(u1, u2):          # E_q[a(θ − c)²/2], q = N(u1, u2 − u1²), by Gauss-Hermite
            th = u1 + math.sqrt(u2 - u1 ** 2) * z
            return float(np.dot(w, a[i] * (th - c[i]) ** 2 / 2))
        u1, u2 = m[i], m[i] ** 2 + 1 / s[i]
        G = [(expected(u1 + h, u2) - expected(u1 - h, u2)) / (2 * h),
             (expected(u1, u2 + h) - expected(u1, u2 - h)) / (2 * h)]
        lam = [s[i] * m[i] - rho * G[0], -s[i] / 2 - rho * G[1]]          # Eq. 6 without the entropy
        # E_q[ℓ] is quadratic in μ₁ and linear in μ₂: central differences are exact up to rounding ~1e-16/h
        np.testing.assert_allclose(out["s"][i], -2 * lam[1], rtol=1e-9)
        np.testing.assert_allclose(out["m"][i], lam[0] / (-2 * lam[1]), rtol=1e-9)


def test_the_difference_with_the_plain_blr_is_rho_lambda_diagonal():
    with_, without = compiled("gaussian_diag"), compiled("gaussian_diag", with_rule=False)
    g, H, _, _ = loss(1)
    rng = np.random.default_rng(2)
    m, s = rng.normal(size=5), rng.uniform(0.5, 3, size=5)
    for rho in (0.05, 0.3, 0.9):
        a = with_.step(with_.init(m=m, s=s), oracles={"grad": g, "hess": H}, rho=rho)
        b = without.step(without.init(m=m, s=s), oracles={"grad": g, "hess": H}, rho=rho)
        np.testing.assert_allclose(nat_diag(a) - nat_diag(b), rho * np.array([s * m, -s / 2]), rtol=1e-11, atol=TOL)


def test_the_difference_with_the_plain_blr_is_rho_lambda_full():
    with_, without = compiled("gaussian_full"), compiled("gaussian_full", with_rule=False)
    rng = np.random.default_rng(3)
    A = rng.normal(size=(4, 3))
    grad = lambda t: A.T @ np.tanh(A @ t) + 0.5 * t                         # noqa: E731
    hess = lambda t: A.T @ np.diag(1 - np.tanh(A @ t) ** 2) @ A + 0.5 * np.eye(3)   # noqa: E731
    m = rng.normal(size=3)
    B = rng.normal(size=(3, 3))
    S = B @ B.T + np.eye(3)
    rho = 0.4
    a = with_.step(with_.init(m=m, S=S), oracles={"grad": grad, "hess": hess}, rho=rho)
    b = without.step(without.init(m=m, S=S), oracles={"grad": grad, "hess": hess}, rho=rho)
    # natural parameters (S m, −S/2): the difference is ρ(S_t m_t, −S_t/2); a linear solve with cond < 1e2
    np.testing.assert_allclose(a["S"] @ a["m"] - b["S"] @ b["m"], rho * S @ m, rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(a["S"] - b["S"], rho * S, rtol=1e-12, atol=TOL)


def test_under_monte_carlo_the_difference_is_still_rho_lambda():
    with_, without = compiled("gaussian_diag", "mc"), compiled("gaussian_diag", "mc", with_rule=False)
    g, H, _, _ = loss(4)
    rng = np.random.default_rng(5)
    m, s = rng.normal(size=5), rng.uniform(0.5, 3, size=5)
    a = with_.step(with_.init(m=m, s=s), oracles={"grad": g, "hess": H}, rng=np.random.default_rng(7), rho=0.2)
    b = without.step(without.init(m=m, s=s), oracles={"grad": g, "hess": H}, rng=np.random.default_rng(7), rho=0.2)
    np.testing.assert_allclose(nat_diag(a) - nat_diag(b), 0.2 * np.array([s * m, -s / 2]), rtol=1e-11, atol=TOL)


def test_straight_through_without_entropy_is_ste_eq_48():
    """STE (Eq. 48): λ ← λ − ρ∇ℓ(sign λ); the BLR with the entropy has (1 − ρ)λ instead."""
    with_ = compiled("bernoulli_logit", "straight_through")
    without = compiled("bernoulli_logit", "straight_through", with_rule=False)
    rng = np.random.default_rng(6)
    W = rng.normal(size=(6, 6))
    grad = lambda w: W @ w + 0.1                                    # noqa: E731  called at the signs ±1
    lam, lr = rng.normal(size=6), 0.25
    a = with_.step(with_.init(lam=lam), oracles={"grad": grad}, rho=lr)
    b = without.step(without.init(lam=lam), oracles={"grad": grad}, rho=lr)
    np.testing.assert_allclose(a["lam"], lam - lr * grad(np.sign(lam)), rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(a["lam"] - b["lam"], lr * lam, rtol=1e-12, atol=TOL)


def test_isotropic_gaussian_entropy_is_constant_so_the_rule_changes_nothing():
    with_, without = compiled("gaussian_fixed_cov"), compiled("gaussian_fixed_cov", with_rule=False)
    g, _, _, _ = loss(8)
    m = np.random.default_rng(9).normal(size=5)
    a, b = with_.init(m=m), without.init(m=m)
    for _ in range(5):
        a = with_.step(a, oracles={"grad": g}, rho=0.3)
        b = without.step(b, oracles={"grad": g}, rho=0.3)
        np.testing.assert_allclose(a["m"], b["m"], rtol=TOL, atol=TOL)


def test_without_entropy_the_variance_vanishes_a_point_estimate():
    with_, without = compiled("gaussian_diag"), compiled("gaussian_diag", with_rule=False)
    a_, c = np.array([0.5, 2.0, 4.0]), np.array([1.0, -3.0, 0.25])
    oracles = {"grad": lambda t: a_ * (t - c), "hess": lambda t: a_ + 0 * t}
    s0, rho, T = np.ones(3), 0.2, 400
    a = with_.init(m=np.zeros(3), s=s0)
    b = without.init(m=np.zeros(3), s=s0)
    for _ in range(T):
        a = with_.step(a, oracles=oracles, rho=rho)
        b = without.step(b, oracles=oracles, rho=rho)
    # no forgetting: the precision is the running sum s_0 + ρ Σ_t a (400 additions: ~400 roundings ≈ 1e-13)
    np.testing.assert_allclose(a["s"], s0 + rho * T * a_, rtol=1e-12)
    # the mean is a preconditioned gradient descent with step ρ/s_{t+1} ~ 1/(t a): it converges to c like
    # s_0/s_T (the error after T steps is |c|·s_0/s_T exactly for this linear recursion; here < 3e-2·|c|)
    np.testing.assert_allclose(a["m"], c * (1 - s0 / a["s"]), rtol=1e-10)
    # the BLR with entropy instead keeps the Laplace/posterior precision a (geometric convergence, (0.8)^400)
    np.testing.assert_allclose(b["s"], a_, rtol=1e-12)
    np.testing.assert_allclose(b["m"], c, rtol=1e-12)
