"""Rules ``bonnet`` (Eq. 10, App. D), ``price`` (Eq. 11, App. D) and ``chain_rule_gaussian`` (App. D).

For q = N(m, C) the engine writes ∇_μ E_q[f] through m(μ) = μ⁽¹⁾ and C(μ) = μ⁽²⁾ − μ⁽¹⁾μ⁽¹⁾ᵀ (chain rule, App. D:
∇_μ⁽¹⁾ = ∇_m − 2(∇_C)m, ∇_μ⁽²⁾ = ∇_C) and then replaces ∇_m E_q[f] = E_q[∇f] (Bonnet, Eq. 10) and
∇_C E_q[f] = ½ E_q[∇²f] (Price, Eq. 11), which gives Eqs. 10-11 of the paper in μ.

Everything is checked with numbers on the non-polynomial f(θ) = softplus(aᵀθ) + sin(θ₁)cos(θ₂/2) + ½θᵀBθ:

* E_q[f], E_q[∇f], E_q[∇²f] by tensor Gauss-Hermite quadrature (60² nodes, converged to ~1e-14 for this smooth f);
  ∇f and ∇²f written out by hand and checked against central differences of f;
* ∇_m E_q[f], ∇_C E_q[f] and ∇_μ E_q[f] by central finite differences of the quadrature;
* the steps the engine records (the chain rule's expressions, Bonnet's and Price's right-hand sides, and the
  resulting natural gradient) evaluated with those numbers;
* end to end: the generated non-conjugate VI step (``gauss_hermite``, full Gaussian, logistic loss) against the
  BLR step of Eq. 6 built from finite differences of E_q[ℓ] in μ, and the generated Monte Carlo step (diagonal
  Gaussian) against E_q[∇f], E_q[∇²f] with a 5-sigma bound from the sample standard errors.
"""
import functools

import numpy as np
import yaml

from blr_derive import api
from blr_derive.families.symbolic import evaluate

RULES_CHECKED = ("bonnet", "price", "chain_rule_gaussian")

A_VEC = np.array([0.8, -1.1])
B_MAT = np.array([[1.2, 0.3], [0.3, 0.7]])
GH_X, GH_W = np.polynomial.hermite_e.hermegauss(60)      # probabilists' Gauss-Hermite
GH_W = GH_W / GH_W.sum()


def f_np(T):                                         # T: (..., 2)
    return (np.logaddexp(0, T @ A_VEC) + np.sin(T[..., 0]) * np.cos(0.5 * T[..., 1])
            + 0.5 * np.einsum("...i,ij,...j->...", T, B_MAT, T))


def grad_np(T):
    sig = 1 / (1 + np.exp(-(T @ A_VEC)))
    t0, t1 = T[..., 0], T[..., 1]
    trig = np.stack([np.cos(t0) * np.cos(t1 / 2), -0.5 * np.sin(t0) * np.sin(t1 / 2)], -1)
    return sig[..., None] * A_VEC + trig + T @ B_MAT


def hess_np(T):
    sig = 1 / (1 + np.exp(-(T @ A_VEC)))
    t0, t1 = T[..., 0], T[..., 1]
    off = -0.5 * np.cos(t0) * np.sin(t1 / 2)
    trig = np.stack([np.stack([-np.sin(t0) * np.cos(t1 / 2), off], -1),
                     np.stack([off, -0.25 * np.sin(t0) * np.cos(t1 / 2)], -1)], -2)
    return (sig * (1 - sig))[..., None, None] * np.outer(A_VEC, A_VEC) + trig + B_MAT


def nodes2(m, C):
    L = np.linalg.cholesky(C)
    Z = np.stack(np.meshgrid(GH_X, GH_X, indexing="ij"), -1).reshape(-1, 2)
    return m + Z @ L.T, np.outer(GH_W, GH_W).ravel()


def expect2(fn, m, C):
    """E_{N(m, C)}[fn(θ)] by 60 x 60 Gauss-Hermite quadrature."""
    pts, w = nodes2(m, C)
    return np.tensordot(w, fn(pts), axes=1)


def Phi(m, C):
    """E_q[f] as a function of (m, C); C is symmetrized so that ∇_C is the symmetric gradient."""
    return expect2(f_np, m, (C + C.T) / 2)


def Psi(u1, u2):
    """E_q[f] as a function of the expectation parameters μ = (m, C + mmᵀ)."""
    return Phi(u1, (u2 + u2.T) / 2 - np.outer(u1, u1))


H_FD = 1e-5


def fd_vec(F, x):
    return np.array([(F(x + H_FD * e) - F(x - H_FD * e)) / (2 * H_FD) for e in np.eye(len(x))])


def fd_sym(F, X):
    """Gradient of F on symmetric matrices: G_ii = ∂F/∂X_ii, G_ij = ½ ∂F/∂(X_ij = X_ji)."""
    n = X.shape[0]
    G = np.zeros((n, n))
    for i in range(n):
        for j in range(i, n):
            E = np.zeros((n, n))
            E[i, j] = E[j, i] = H_FD
            d = (F(X + E) - F(X - E)) / (2 * H_FD)
            G[i, j] = G[j, i] = d if i == j else d / 2
    return G


# E_q[f] is smooth (the 60-node rule agrees with 90 nodes to ~1e-14); central differences with h = 1e-5 have
# truncation error ~h²·|f'''| ≈ 1e-10 and rounding error ~1e-16·|E_q f|/h ≈ 1e-11: 1e-7 is a wide margin, while
# a wrong coefficient (Price without ½, a missing −2(∇_C)m) is an O(1) error.
RTOL, ATOL = 1e-7, 1e-8

M0 = np.array([0.3, -0.5])
C0 = np.array([[0.5, 0.15], [0.15, 0.35]])


@functools.lru_cache(maxsize=None)
def derivation(family):
    return api.derive(f"name: bp_{family}\nfamily: {family}\nloss: abstract\napproximations: [delta]\n"
                      "hyperparameters: {rho: 0.1}\n")


def symbols(*exprs):
    out = {}
    for e in exprs:
        out.update({str(s): s for s in e.free_symbols})
    return out


def full_env():
    d = derivation("gaussian_full")
    return d, d.recipe.family, {"Eg": expect2(grad_np, M0, C0), "EH": expect2(hess_np, M0, C0)}


def test_reference_derivatives_agree_with_finite_differences_of_f():
    """The hand-written derivatives used as references, against central differences of f itself at a few
    points (truncation ~h²·|third derivative| ~ 1e-10, rounding ~1e-11)."""
    for t in (np.array([0.4, -0.9]), np.array([-1.3, 2.2]), np.array([2.0, 0.1])):
        np.testing.assert_allclose(grad_np(t), fd_vec(f_np, t), rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(hess_np(t), np.array([fd_vec(lambda x: grad_np(x)[i], t) for i in range(2)]),
                                   rtol=1e-7, atol=1e-9)
        x = t[0]
        np.testing.assert_allclose(df1(x), (f1(x + H_FD) - f1(x - H_FD)) / (2 * H_FD), rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(d2f1(x), (df1(x + H_FD) - df1(x - H_FD)) / (2 * H_FD), rtol=1e-7, atol=1e-9)


def test_bonnet_step_gradient_of_the_mean_is_the_expected_gradient():
    d, fam, env = full_env()
    (lhs, rhs), = d.step("bonnet").equations
    assert str(lhs) == "grad_m_E"
    s = symbols(rhs)
    value = evaluate(rhs, {s["E_grad"]: env["Eg"]}, {fam.dim: 2}).ravel()
    ref = fd_vec(lambda m: Phi(m, C0), M0)                  # ∇_m E_q[f] by finite differences
    np.testing.assert_allclose(value, ref, rtol=RTOL, atol=ATOL)
    assert np.abs(ref).min() > 0.1                           # a non-trivial gradient


def test_price_step_gradient_of_the_covariance_is_half_the_expected_hessian():
    d, fam, env = full_env()
    lhs, rhs = d.step("price").equations[0][:2]
    assert str(lhs) == "grad_C_E"
    s = symbols(rhs)
    value = evaluate(rhs, {s["E_hess"]: env["EH"]}, {fam.dim: 2})
    ref = fd_sym(lambda C: Phi(M0, C), C0)                   # ∇_C E_q[f] by finite differences
    np.testing.assert_allclose(value, ref, rtol=RTOL, atol=ATOL)
    assert np.abs(ref - env["EH"]).max() > 0.1               # the ½ matters: E_q[∇²f] itself is far off


def test_chain_rule_through_mean_and_covariance_full():
    """The chain-rule step with ∇_m, ∇_C from finite differences in (m, C) equals finite differences in μ."""
    d, fam, _ = full_env()
    eqs = d.step("chain_rule_gaussian").equations
    (g1,), (g2,) = ([e[1] for e in eqs if r"\mu^{(%d)}" % i in str(e[0])] for i in (1, 2))
    s = symbols(g1, g2)
    gm = fd_vec(lambda m: Phi(m, C0), M0)
    GC = fd_sym(lambda C: Phi(M0, C), C0)
    U1, U2 = M0, C0 + np.outer(M0, M0)
    vals = {s["grad_m_E"]: gm, s["grad_C_E"]: GC, s["mu1"]: U1}
    if "mu2" in s:
        vals[s["mu2"]] = U2
    v1 = evaluate(g1, vals, {fam.dim: 2}).ravel()
    v2 = evaluate(g2, {k: v for k, v in vals.items() if k in g2.free_symbols}, {fam.dim: 2})
    np.testing.assert_allclose(v1, fd_vec(lambda u: Psi(u, U2), U1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(v2, fd_sym(lambda u: Psi(U1, u), U2), rtol=RTOL, atol=ATOL)
    # the −2(∇_C)m term is really there: ∇_m alone differs from ∇_μ⁽¹⁾
    assert np.abs(gm - v1).max() > 0.05


def test_natural_gradient_full_gaussian_equals_finite_differences_in_mu():
    """After Bonnet and Price: ∇_μ⁽¹⁾ = E[∇f] − E[∇²f]m, ∇_μ⁽²⁾ = ½E[∇²f] (Eqs. 10-11) with quadrature values."""
    d, fam, env = full_env()
    ng = d.natural_gradient
    U1, U2 = M0, C0 + np.outer(M0, M0)
    vals = {ng.Eg: env["Eg"], ng.EH: env["EH"], fam.mu[0]: U1, fam.mu[1]: U2}
    v1 = evaluate(ng.grads[0], vals, {fam.dim: 2}).ravel()
    v2 = evaluate(ng.grads[1], {k: v for k, v in vals.items() if k in ng.grads[1].free_symbols}, {fam.dim: 2})
    np.testing.assert_allclose(v1, fd_vec(lambda u: Psi(u, U2), U1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(v2, fd_sym(lambda u: Psi(U1, u), U2), rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------------- scalar (diagonal) family

def f1(t):
    return np.logaddexp(0, 1.3 * t) + np.sin(2 * t) + 0.1 * t ** 4


def df1(t):
    return 1.3 / (1 + np.exp(-1.3 * t)) + 2 * np.cos(2 * t) + 0.4 * t ** 3


def d2f1(t):
    sig = 1 / (1 + np.exp(-1.3 * t))
    return 1.69 * sig * (1 - sig) - 4 * np.sin(2 * t) + 1.2 * t ** 2


def expect1(fn, m, c):
    return np.sum(GH_W * fn(m + np.sqrt(c) * GH_X))


def test_diagonal_family_steps_with_quadrature_values():
    d = derivation("gaussian_diag")
    fam = d.recipe.family
    grad, hess = df1, d2f1
    m, c = 0.4, 0.3
    Eg, EH = expect1(grad, m, c), expect1(hess, m, c)
    # Bonnet and Price, step by step
    bon = d.step("bonnet").equations[0][1]
    pri = d.step("price").equations[0][1]
    sb, sp_ = symbols(bon), symbols(pri)
    dm = (expect1(f1, m + H_FD, c) - expect1(f1, m - H_FD, c)) / (2 * H_FD)
    dc = (expect1(f1, m, c + H_FD) - expect1(f1, m, c - H_FD)) / (2 * H_FD)
    np.testing.assert_allclose(evaluate(bon, {sb["E_grad"]: Eg}), dm, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(evaluate(pri, {sp_["E_hess"]: EH}), dc, rtol=RTOL, atol=ATOL)
    # the natural gradient in μ = (m, m² + c)
    u1, u2 = m, m * m + c
    F = lambda a, b: expect1(f1, a, b - a * a)
    fd1 = (F(u1 + H_FD, u2) - F(u1 - H_FD, u2)) / (2 * H_FD)
    fd2 = (F(u1, u2 + H_FD) - F(u1, u2 - H_FD)) / (2 * H_FD)
    ng = d.natural_gradient
    env = {ng.Eg: Eg, ng.EH: EH, fam.mu[0]: u1, fam.mu[1]: u2}
    got = [evaluate(g, {k: v for k, v in env.items() if k in g.free_symbols}) for g in ng.grads]
    np.testing.assert_allclose(got, [fd1, fd2], rtol=RTOL, atol=ATOL)


def test_fixed_covariance_needs_no_price_step():
    """N(m, I): C does not depend on μ, so the natural gradient is E_q[∇f] alone (Bonnet) and no Price step."""
    d = derivation("gaussian_fixed_cov")
    assert [s.rule for s in d.steps].count("price") == 0
    fam = d.recipe.family
    ng = d.natural_gradient
    Eg = expect2(grad_np, M0, np.eye(2))
    got = evaluate(ng.grads[0], {ng.Eg: Eg}, {fam.dim: 2}).ravel()
    np.testing.assert_allclose(got, fd_vec(lambda u: Phi(u, np.eye(2)), M0), rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------------- end to end: generated steps

NCVI = """
name: bp_ncvi
family: gaussian_full
loss:
  expression: sum(softplus(X*theta)) - y.T*X*theta + 0.5*alpha*theta.T*theta
  data: {X: {shape: [N, P]}, y: {shape: [N]}}
hyperparameters: {rho: 0.5, alpha: 1.0, nodes: {default: 64, type: int}}
approximations:
  - gauss_hermite: {nodes: nodes}
"""


@functools.lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


def test_generated_ncvi_step_is_eq6_with_finite_difference_natural_gradients():
    """The generated step (Bonnet/Price with one-dimensional quadrature inside) against Eq. 6 with ∇_μ E_q[ℓ]
    from central differences of E_q[ℓ](μ), E_q[ℓ] computed here by 2-D quadrature of the loss itself."""
    mod = compiled(NCVI)
    rng = np.random.default_rng(5)
    N, alpha, rho = 7, 0.7, 0.6
    X = rng.normal(size=(N, 2))
    y = (rng.random(N) < 0.5).astype(float)
    S0 = np.linalg.inv(C0)

    def loss(T):
        Z = T @ X.T
        return np.logaddexp(0, Z).sum(-1) - Z @ y + 0.5 * alpha * np.einsum("...i,...i->...", T, T)

    def E(u1, u2):
        return expect2(loss, u1, (u2 + u2.T) / 2 - np.outer(u1, u1))
    U1, U2 = M0, C0 + np.outer(M0, M0)
    G1 = fd_vec(lambda u: E(u, U2), U1)
    G2 = fd_sym(lambda u: E(U1, u), U2)
    lam1, lam2 = (1 - rho) * S0 @ M0 - rho * G1, (1 - rho) * (-S0 / 2) - rho * G2     # Eq. 6, h constant
    S_ref = -2 * lam2
    m_ref = np.linalg.solve(S_ref, lam1)
    out = mod.step(mod.init(m=M0, S=S0), data={"X": X, "y": y}, alpha=alpha, rho=rho, nodes=64)
    # 64-node 1-D quadrature of softplus is exact to ~1e-14; the FD reference is good to ~1e-9 (see RTOL)
    np.testing.assert_allclose(out["S"], S_ref, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(out["m"], m_ref, rtol=1e-7, atol=1e-8)


def test_generated_monte_carlo_step_estimates_bonnet_and_price_expectations():
    """Diagonal Gaussian, monte_carlo: the statistics the step uses (read back from its output) are unbiased
    for ∇_m E_q[f] = E_q[∇f] and 2∇_C E_q[f] = E_q[∇²f] (finite differences of quadrature): each coordinate
    within 5 standard errors (estimated from the very samples the step drew)."""
    text = yaml.safe_dump({"name": "bp_mc", "family": "gaussian_diag", "loss": "abstract",
                           "hyperparameters": {"rho": 0.1, "S": {"default": 3, "type": "int"}},
                           "approximations": [{"monte_carlo": {"samples": "S"}}]}, sort_keys=False)
    mod = compiled(text)
    grad, hess = df1, d2f1
    seen_g, seen_h = [], []

    def g_or(t):
        seen_g.append(grad(t))
        return seen_g[-1]

    def h_or(t):
        seen_h.append(hess(t))
        return seen_h[-1]
    m0 = np.array([0.4, -1.0, 1.3])
    s0 = np.array([3.0, 1.5, 8.0])
    rho, n = 0.3, 4000
    out = mod.step(mod.init(m=m0, s=s0), oracles={"grad": g_or, "hess": h_or}, rng=np.random.default_rng(11),
                   rho=rho, S=n)
    h_bar = (out["s"] - (1 - rho) * s0) / rho            # s' = ρ h̄ + (1 − ρ)s
    g_bar = (m0 - out["m"]) * out["s"] / rho               # m' = m − ρ ḡ / s'
    G, Hs = np.array(seen_g), np.array(seen_h)
    assert G.shape == (n, 3)
    c = 1 / s0
    ref_g = np.array([(expect1(f1, a + H_FD, v) - expect1(f1, a - H_FD, v)) / (2 * H_FD) for a, v in zip(m0, c)])
    ref_h = np.array([2 * (expect1(f1, a, v + H_FD) - expect1(f1, a, v - H_FD)) / (2 * H_FD) for a, v in zip(m0, c)])
    se_g, se_h = G.std(0, ddof=1) / np.sqrt(n), Hs.std(0, ddof=1) / np.sqrt(n)
    assert np.all(np.abs(g_bar - ref_g) < 5 * se_g), (g_bar, ref_g, se_g)
    assert np.all(np.abs(h_bar - ref_h) < 5 * se_h), (h_bar, ref_h, se_h)
    # and the bound is informative: without Price's factor 2 the Hessian estimate would be many sigmas off
    assert np.all(np.abs(h_bar - ref_h / 2) > 5 * se_h)
