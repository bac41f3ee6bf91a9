"""Rule ``unit_learning_rate`` (Sec. 5.1): ρ_t = 1 in Eq. 6, so λ_{t+1} = −∇_μ E_{q_t}[ℓ̄] (h = 1) and the old
natural parameters drop out; at a fixed point this is Eq. 5, and for a conjugate model (E_q[ℓ] linear in μ) one
step is Bayes' rule.

Checked numerically against computations written here, never against the engine's own formulas:

* Bayesian linear regression: one step from any state is the posterior, computed by Gaussian *conditioning*
  (covariance form Σ₀ − Σ₀Xᵀ(XΣ₀Xᵀ + σ²I)⁻¹XΣ₀), not by the precision form the update takes;
* Beta-Bernoulli: the Beta(a, b) of one step has the posterior mean and E[log θ] of prior × likelihood
  integrated by adaptive quadrature (scipy);
* a non-conjugate quartic loss with exact Gaussian moments: one step lands on λ = −∇_μ E_{q_t}[ℓ], the
  natural gradient taken by central differences of a Gauss-Hermite E_q[ℓ];
* with the delta method the BLR with ρ = 1 is Newton's method (Sec. 1.3.2, Eq. 12 with ρ = 1): the step equals
  θ − ℓ'(θ)/ℓ''(θ) and the iterates reach a minimum found by scipy.optimize;
* the convention: the step with the rule is the step without it at ρ = 1, and does not depend on λ_t.
"""
import functools
import math

import numpy as np
import scipy.integrate
import scipy.optimize
import scipy.special
import yaml

from blr_derive import api


@functools.lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


def recipe(name, family, loss, approx, hyper, data=None):
    spec = {"name": name, "family": family,
            "loss": loss if data is None else {"expression": loss, "data": data},
            "hyperparameters": hyper, "approximations": approx}
    return yaml.safe_dump(spec, sort_keys=False)


# ----------------------------------------------------------------------------- Bayesian linear regression
BLR_LOSS = "0.5*beta*(y - X*theta).T*(y - X*theta) + 0.5*alpha*theta.T*theta"
BLR_DATA = {"X": {"shape": ["N", "P"]}, "y": {"shape": ["N"]}}


def blr(with_rule):
    approx = ["exact"] + (["unit_learning_rate"] if with_rule else [])
    return compiled(recipe(f"ulr_blr_{with_rule}", "gaussian_full", BLR_LOSS, approx,
                           {"alpha": 1.0, "beta": 1.0, "rho": 0.5}, BLR_DATA))


def regression(seed=0, N=15, P=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, P))
    y = X @ rng.normal(size=P) + 0.4 * rng.normal(size=N)
    return X, y


def random_state(rng, P):
    B = rng.normal(size=(P, P))
    return rng.normal(size=P) * 3, B @ B.T + 0.2 * np.eye(P)


def test_one_step_is_the_conjugate_gaussian_posterior_by_conditioning():
    mod = blr(True)
    X, y = regression()
    alpha, beta = 0.7, 2.5
    N, P = X.shape
    # y = Xθ + ε, θ ~ N(0, I/α), ε ~ N(0, I/β): condition the joint Gaussian of (θ, y) on y (covariance form)
    S0 = np.eye(P) / alpha
    K = X @ S0 @ X.T + np.eye(N) / beta
    cov_post = S0 - S0 @ X.T @ np.linalg.solve(K, X @ S0)
    mean_post = S0 @ X.T @ np.linalg.solve(K, y)
    rng = np.random.default_rng(1)
    for _ in range(3):                          # from any state: λ_t drops out
        m0, S_start = random_state(rng, P)
        out = mod.step(mod.init(m=m0, S=S_start), data={"X": X, "y": y}, alpha=alpha, beta=beta)
        # two different O(1)-conditioned linear solves of the same system: agreement to ~1e-13 relative;
        # 1e-10 leaves room for the condition number (< 1e3 here) and is far below any modelling error
        np.testing.assert_allclose(np.linalg.inv(out["S"]), cov_post, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(out["m"], mean_post, rtol=1e-10, atol=1e-12)


def test_the_rule_is_the_plain_step_at_rho_one_and_forgets_the_state():
    with_, without = blr(True), blr(False)
    X, y = regression(2)
    rng = np.random.default_rng(3)
    m0, S_start = random_state(rng, X.shape[1])
    m1, S_other = random_state(rng, X.shape[1])
    a = with_.step(with_.init(m=m0, S=S_start), data={"X": X, "y": y}, alpha=0.3, beta=1.7)
    b = without.step(without.init(m=m0, S=S_start), data={"X": X, "y": y}, alpha=0.3, beta=1.7, rho=1.0)
    c = with_.step(with_.init(m=m1, S=S_other), data={"X": X, "y": y}, alpha=0.3, beta=1.7)
    # the same update up to the (1 - ρ)·λ_t = 0·λ_t terms the plain program still evaluates: a few roundings
    for k in ("m", "S"):
        np.testing.assert_allclose(a[k], b[k], rtol=1e-11, atol=1e-12)
        np.testing.assert_array_equal(a[k], c[k])          # with ρ = 1 the state is not read at all
    d = without.step(without.init(m=m0, S=S_start), data={"X": X, "y": y}, alpha=0.3, beta=1.7, rho=0.5)
    assert np.abs(d["m"] - a["m"]).max() > 1e-2             # ρ = 0.5 is a different step


# ----------------------------------------------------------------------------- Beta-Bernoulli
BETA_LOSS = "-n1*log(theta) - n0*log(1 - theta) - (a0 - 1)*log(theta) - (b0 - 1)*log(1 - theta)"


def test_beta_bernoulli_step_has_the_moments_of_the_quadrature_posterior():
    mod = compiled(recipe("ulr_beta", "beta", BETA_LOSS, ["exact", "unit_learning_rate"],
                          {"a0": 1.0, "b0": 1.0}, {"n1": {}, "n0": {}}))
    n1, n0, a0, b0 = 7, 12, 2.5, 1.5
    out = mod.step(mod.init(a=30.0, b=0.2), data={"n1": n1, "n0": n0}, a0=a0, b0=b0)
    a, b = float(out["a"]), float(out["b"])

    def unnorm(t):          # prior × likelihood, with no Beta function anywhere
        return t ** (a0 - 1) * (1 - t) ** (b0 - 1) * t ** n1 * (1 - t) ** n0

    opts = dict(epsabs=0, epsrel=1e-13, limit=200)
    Z = scipy.integrate.quad(unnorm, 0, 1, **opts)[0]
    mean = scipy.integrate.quad(lambda t: t * unnorm(t), 0, 1, **opts)[0] / Z
    elog = scipy.integrate.quad(lambda t: math.log(t) * unnorm(t), 0, 1, **opts)[0] / Z
    # adaptive quadrature of smooth integrands (the log singularity is integrable, QUADPACK handles it) to
    # ~1e-12 relative; 1e-9 is a safe margin, while a wrong count (a ± 1) changes the mean by ~2e-2
    assert abs(a / (a + b) - mean) < 1e-9 * mean
    assert abs(scipy.special.digamma(a) - scipy.special.digamma(a + b) - elog) < 1e-9 * abs(elog)


# ----------------------------------------------------------------------------- a non-conjugate loss
QUARTIC = "c4*theta**4/4 + theta**2/2 - b1*theta"


def test_non_conjugate_step_is_minus_the_natural_gradient_at_q_t():
    """λ_{t+1} = −∇_μ E_{q_t}[ℓ] for ℓ = c₄θ⁴/4 + θ²/2 − b₁θ, q_t = N(m, 1/s): E_q[ℓ] by 30-point Gauss-Hermite
    (exact for a quartic), ∇_μ by central differences in μ = (m, m² + 1/s)."""
    mod = compiled(recipe("ulr_quartic", "gaussian_diag", QUARTIC, ["exact", "unit_learning_rate"],
                          {"c4": 1.0, "b1": 0.0}, {}))
    c4, b1 = 0.8, 1.3
    m, s = np.array([0.5, -1.2, 2.0]), np.array([3.0, 0.5, 8.0])
    out = mod.step(mod.init(m=m, s=s), c4=c4, b1=b1)
    z, w = np.polynomial.hermite_e.hermegauss(30)
    w = w / math.sqrt(2 * math.pi)

    def expected(u1, u2):
        th = u1 + np.sqrt(u2 - u1 ** 2) * z
        return float(np.dot(w, c4 * th ** 4 / 4 + th ** 2 / 2 - b1 * th))

    h = 1e-5
    for mi, si, m_new, s_new in zip(m, s, out["m"], out["s"]):
        u1, u2 = mi, mi ** 2 + 1 / si
        G1 = (expected(u1 + h, u2) - expected(u1 - h, u2)) / (2 * h)
        G2 = (expected(u1, u2 + h) - expected(u1, u2 - h)) / (2 * h)
        lam1, lam2 = -G1, -G2                                 # Eq. 6 with ρ = 1
        # E_q[ℓ] is a polynomial of degree 2 in μ₂ and 4 in μ₁ here: the central-difference error is
        # O(h²·|∂³E|) ≈ 1e-10 plus rounding ~1e-16/h ≈ 1e-11; 1e-8 relative is a safe bound
        np.testing.assert_allclose(s_new, -2 * lam2, rtol=1e-8)
        np.testing.assert_allclose(m_new, lam1 / (-2 * lam2), rtol=1e-8, atol=1e-10)


# ----------------------------------------------------------------------------- delta: Newton's method
def test_with_the_delta_method_it_is_newtons_method():
    mod = compiled(recipe("ulr_newton", "gaussian_diag", "abstract", ["delta", "unit_learning_rate"], {}))
    assert mod.HYPERPARAMETERS == {} and set(mod.ORACLES) == {"grad", "hess"}
    f = lambda t: np.cosh(t - 0.7) + 0.1 * t ** 4                 # noqa: E731  strictly convex
    g = lambda t: np.sinh(t - 0.7) + 0.4 * t ** 3                  # noqa: E731
    H = lambda t: np.cosh(t - 0.7) + 1.2 * t ** 2                  # noqa: E731
    m = np.array([1.5, -1.0, 0.2])
    state = mod.init(m=m, s=np.ones(3))
    for _ in range(8):
        new = mod.step(state, oracles={"grad": g, "hess": H})
        # one Newton step written by hand: the same two operations, so equal to the last bit or two
        np.testing.assert_allclose(new["m"], state["m"] - g(state["m"]) / H(state["m"]), rtol=1e-15, atol=1e-15)
        np.testing.assert_allclose(new["s"], H(state["m"]), rtol=1e-15)
        state = new
    x_star = scipy.optimize.minimize_scalar(f, bracket=(-1, 2), tol=1e-12).x
    # 8 Newton steps on a strictly convex function converge quadratically: far below 1e-8 (minimize_scalar's
    # Brent solution is itself only ~1e-8 accurate in x, hence this tolerance)
    np.testing.assert_allclose(state["m"], x_star, atol=1e-7)
    assert np.abs(g(state["m"])).max() < 1e-13
