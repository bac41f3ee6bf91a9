"""Rule ``base_measure`` (App. B, Eq. 64): the term ∇_μ E_q[log h(θ)] of Eq. 6.

With ∇_μ H(q) = −λ − ∇_μ E_q[log h] (Eq. 64), the BLR needs ∇_μ E_q[log h]: zero for a constant h, the
coefficients when log h is linear in T(θ), and for Gaussian families the gradient of the closed-form Gaussian
expectation.  Checked with numbers:

* the recorded E_q[log h] (Gaussian families with a non-constant h: N(m, I), N(m, 1/s) and N(m, S⁻¹) with s, S
  fixed) against Gauss-Hermite quadrature of log h, and the recorded ∇_μ E_q[log h] against central differences of
  that quadrature in μ;
* the Gamma family written with h(θ) = 1/θ (log h = −T₁): the recorded coefficients against
  F(λ)⁻¹∇_λ E_q[log h], with E_q[log h] by scipy ``quad`` and F = ∇²A by second differences of A(λ) (closed form);
* end to end: the generated steps against Eq. 6 with that independently computed term, and the invariance that
  follows from it: the same distribution family with log θ moved from h into λ gives the same update.
"""
import functools

import numpy as np
from scipy import integrate, special, stats

from blr_derive import api
from blr_derive.families.symbolic import evaluate

GH_X, GH_W = np.polynomial.hermite_e.hermegauss(40)
GH_W = GH_W / GH_W.sum()
ZZ = np.stack(np.meshgrid(GH_X, GH_X, indexing="ij"), -1).reshape(-1, 2)
WW = np.outer(GH_W, GH_W).ravel()
H_FD = 1e-5
# log h is a quadratic polynomial: the quadrature is exact, so E_q[log h] agrees to rounding (~1e-15) and its
# central differences in μ are exact up to rounding ~1e-16·|E|/h ≈ 1e-11: 1e-8 is a safe, still tight bound.
TOL = 1e-8


@functools.lru_cache(maxsize=None)
def derivation(family, loss="abstract", approx="delta", hp="{rho: 0.1}"):
    return api.derive(f"name: bm_test\nfamily: {family}\nloss: {loss}\napproximations: [{approx}]\n"
                      f"hyperparameters: {hp}\n")


def recorded(d):
    """(E_q[log h] expression or None, [gradient expressions]) of the base_measure step."""
    eqs = d.step("base_measure").equations
    if not eqs:
        return None, []
    first = eqs[0][0]
    if "log h]" in str(first) and "nabla" not in str(first):
        return eqs[0][1], [e[1] for e in eqs[1:]]
    return None, [e[1] for e in eqs]


def fd_vec(F, x):
    return np.array([(F(x + H_FD * e) - F(x - H_FD * e)) / (2 * H_FD) for e in np.eye(len(x))])


# ------------------------------------------------------------------------------------------ Gaussian families

def log_h_fixed_cov(T):                        # N(m, I): h = (2π)^{-P/2} exp(−θᵀθ/2)
    return -np.log(2 * np.pi) - 0.5 * np.einsum("...i,...i->...", T, T)


S_FIXED = np.array([[2.0, 0.6], [0.6, 1.2]])


def log_h_fixed_precision(T):                  # N(m, S⁻¹): h = det(S)^{1/2} (2π)^{-P/2} exp(−θᵀSθ/2)
    return 0.5 * np.linalg.slogdet(S_FIXED)[1] - np.log(2 * np.pi) - 0.5 * np.einsum("...i,ij,...j->...", T,
                                                                                      S_FIXED, T)


def expect2(fn, m, C):
    return WW @ fn(m + ZZ @ np.linalg.cholesky(C).T)


def test_isotropic_gaussian_expectation_and_gradient_of_log_h():
    d = derivation("gaussian_fixed_cov")
    fam = d.recipe.family
    e_logh, (g,) = recorded(d)
    u = np.array([0.7, -1.4])
    E = lambda m: expect2(log_h_fixed_cov, m, np.eye(2))          # μ = m for N(m, I)
    np.testing.assert_allclose(evaluate(e_logh, {fam.mu[0]: u}, {fam.dim: 2}), E(u), rtol=1e-13)
    np.testing.assert_allclose(evaluate(g, {fam.mu[0]: u}, {fam.dim: 2}).ravel(), fd_vec(E, u), rtol=TOL, atol=TOL)


def test_fixed_precision_gaussian_expectation_and_gradient_of_log_h():
    d = derivation("gaussian_fixed_precision")
    fam = d.recipe.family
    e_logh, (g,) = recorded(d)
    S = fam.params["S"].symbol
    u = np.array([0.3, 0.9])
    C = np.linalg.inv(S_FIXED)
    E = lambda m: expect2(log_h_fixed_precision, m, C)
    vals = {fam.mu[0]: u, S: S_FIXED}
    np.testing.assert_allclose(evaluate(e_logh, vals, {fam.dim: 2}), E(u), rtol=1e-12)
    np.testing.assert_allclose(evaluate(g, vals, {fam.dim: 2}).ravel(), fd_vec(E, u), rtol=TOL, atol=TOL)


def test_diagonal_fixed_precision_expectation_and_gradient_of_log_h():
    d = derivation("gaussian_diag_fixed_precision")
    fam = d.recipe.family
    e_logh, (g,) = recorded(d)
    s = fam.params["s"].symbol
    sv, u = 2.5, -0.8
    E = lambda m: GH_W @ (0.5 * np.log(sv / (2 * np.pi)) - sv * (m + GH_X / np.sqrt(sv)) ** 2 / 2)
    np.testing.assert_allclose(evaluate(e_logh, {fam.mu[0]: u, s: sv}), E(u), rtol=1e-13)
    fd = (E(u + H_FD) - E(u - H_FD)) / (2 * H_FD)
    np.testing.assert_allclose(evaluate(g, {fam.mu[0]: u, s: sv}), fd, rtol=TOL, atol=TOL)


def test_generated_isotropic_step_is_eq6_with_the_base_measure_term():
    """N(m, I), delta method: λ = m, so Eq. 6 reads m' = (1−ρ)m − ρ(g + ∇_μE_q[log h]); with the term from finite
    differences of quadrature this is SGD, m' = m − ρg.  Without the term it would shrink m by (1−ρ)."""
    mod = derivation("gaussian_fixed_cov").compile("numpy")
    m0 = np.array([0.7, -1.4])
    grad = lambda t: np.array([np.sin(t[0]) + t[1], np.tanh(t[1])])
    rho = 0.3
    term = fd_vec(lambda m: expect2(log_h_fixed_cov, m, np.eye(2)), m0)
    ref = (1 - rho) * m0 - rho * (grad(m0) + term)
    out = mod.step(mod.init(m=m0), oracles={"grad": grad}, rho=rho)
    np.testing.assert_allclose(out["m"], ref, rtol=TOL, atol=TOL)
    assert np.abs(out["m"] - ((1 - rho) * m0 - rho * grad(m0))).max() > 0.1


def test_generated_fixed_precision_step_is_eq6_with_the_base_measure_term():
    """N(m, S⁻¹) with S fixed: λ = Sm, m' = S⁻¹[(1−ρ)Sm − ρ(g + ∇_μE_q[log h])] (= m − ρS⁻¹g)."""
    mod = derivation("gaussian_fixed_precision").compile("numpy")
    m0 = np.array([0.3, 0.9])
    grad = lambda t: np.array([np.exp(0.3 * t[0]), t[0] * t[1]])
    rho = 0.45
    term = fd_vec(lambda m: expect2(log_h_fixed_precision, m, np.linalg.inv(S_FIXED)), m0)
    ref = np.linalg.solve(S_FIXED, (1 - rho) * S_FIXED @ m0 - rho * (grad(m0) + term))
    out = mod.step(mod.init(m=m0, S=S_FIXED), oracles={"grad": grad}, rho=rho)
    np.testing.assert_allclose(out["m"], ref, rtol=TOL, atol=TOL)


def test_constant_base_measure_contributes_nothing():
    """gaussian_full has h = (2π)^{-P/2}: the step is recorded as constant and the update is Eq. 12 exactly."""
    d = derivation("gaussian_full")
    assert d.step("base_measure").title == "Constant base measure" and not d.step("base_measure").equations
    mod = d.compile("numpy")
    m0, S0 = np.array([0.2, -0.3]), np.array([[1.5, 0.2], [0.2, 0.8]])
    grad = lambda t: np.array([np.sin(t[0]), t[1] ** 3])
    hess = lambda t: np.diag([np.cos(t[0]), 3 * t[1] ** 2])
    rho = 0.4
    out = mod.step(mod.init(m=m0, S=S0), oracles={"grad": grad, "hess": hess}, rho=rho)
    S1 = (1 - rho) * S0 + rho * hess(m0)
    np.testing.assert_allclose(out["S"], S1, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(out["m"], m0 - rho * np.linalg.solve(S1, grad(m0)), rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------------------------------ log h linear in T

GAMMA_H = """
name: gamma_h
variable: theta
support: positive
parameters:
  alpha: {domain: positive}
  beta: {domain: positive}
sufficient_statistics: [log(theta), theta]
base_measure: 1/theta
natural_parameters: [alpha, -beta]
"""


@functools.lru_cache(maxsize=None)
def gamma_modules():
    common = dict(loss={"expression": "a*theta - b*log(theta)"}, approximations=["exact"],
                  hyperparameters={"rho": 0.1, "a": 1.0, "b": 2.0})
    with_h = api.derive(family=GAMMA_H, name="gamma_with_h", **common)
    plain = api.derive(family="gamma", name="gamma_plain", **common)
    return with_h, plain


def test_linear_log_h_coefficients_are_the_natural_gradient_of_e_log_h():
    """log h = −log θ: ∇_μ E_q[log h] = F(λ)⁻¹∇_λ E_q[log h] (Eq. 4), with E_q[log θ] by quadrature and F by
    second differences of A(λ) = log Γ(λ₁) − λ₁ log(−λ₂)."""
    d, _ = gamma_modules()
    _, grads = recorded(d)
    got = np.array([float(g) for g in grads])

    def e_logh(lam):
        q = stats.gamma(lam[0], scale=-1 / lam[1])
        return integrate.quad(lambda t: -np.log(t) * q.pdf(t), 0, np.inf, epsabs=1e-14, epsrel=1e-13)[0]

    def A(lam):
        return special.gammaln(lam[0]) - lam[0] * np.log(-lam[1])
    lam = np.array([2.3, -1.6])
    grad = fd_vec(e_logh, lam)
    h = 1e-4
    E = np.eye(2) * h
    F = np.array([[(A(lam + E[i] + E[j]) - A(lam + E[i] - E[j]) - A(lam - E[i] + E[j]) + A(lam - E[i] - E[j]))
                   / (4 * h * h) for j in range(2)] for i in range(2)])
    # FD Fisher ~1e-7 relative, FD gradient of quad ~1e-9: 1e-5 absolute on O(1) coefficients
    np.testing.assert_allclose(got, np.linalg.solve(F, grad), rtol=0, atol=1e-5)


def test_moving_log_theta_into_the_base_measure_leaves_the_update_unchanged():
    """Gamma(α, β) as (h = 1, λ = (α−1, −β)) or (h = 1/θ, λ = (α, −β)): one distribution, one BLR step.  The
    base-measure term (−1, 0) exactly compensates the shift of λ₁; without it α' would be off by ρ."""
    with_h, plain = (d.compile("numpy") for d in gamma_modules())
    rng = np.random.default_rng(0)
    for _ in range(5):
        alpha, beta = rng.uniform(0.5, 4.0, size=2)
        a, b, rho = rng.uniform(0.2, 3.0), rng.uniform(0.2, 3.0), rng.uniform(0.05, 0.95)
        x = with_h.step(with_h.init(alpha=alpha, beta=beta), rho=rho, a=a, b=b)
        y = plain.step(plain.init(alpha=alpha, beta=beta), rho=rho, a=a, b=b)
        # both are (1−ρ)α + ρ(b + 1) and (1−ρ)β + ρa, grouped differently: a few roundings
        np.testing.assert_allclose([x["alpha"], x["beta"]], [y["alpha"], y["beta"]], rtol=1e-13)
        np.testing.assert_allclose(x["alpha"], (1 - rho) * alpha + rho * (b + 1), rtol=1e-13)
