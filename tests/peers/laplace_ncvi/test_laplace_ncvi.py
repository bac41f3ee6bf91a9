"""Laplace's method, non-conjugate VI and non-conjugate VMP for Bayesian logistic regression
(catalog/laplace.yaml, ncvi.yaml, ncvmp.yaml; Khan & Rue 2023, Sec. 4.4 and Sec. 5.4, Eqs. 58-60).

The references here are written by hand from the paper's equations and the model:
Newton's method for the MAP with the Hessian at the MAP as precision (Laplace), and the ELBO
E_q[loss] - H(q) with the same Gauss-Hermite quadrature maximized directly over (m, Cholesky
factor of the covariance) with scipy.optimize and its exact gradient (reparameterization
through the quadrature nodes, not Price's theorem as in the engine).
"""
import numpy as np
import pytest
import scipy.optimize
import sympy as sp

from blr_derive.api import derive_file
from blr_derive.core.nodes import DataSum, gauss_hermite_rule
from blr_derive.core.errors import SpecError
from blr_derive.families.symbolic import evaluate
from conftest import CATALOG, load_generated

ALPHA = 0.7
NODES = 32


def logistic_data(seed=0, N=120, P=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, P))
    X[:, 0] = 1.0                                      # an intercept column
    theta = rng.normal(size=P) * 1.5
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ theta))).astype(float)
    return X, y


def sigmoid(u):
    return 0.5 * (1 + np.tanh(u / 2))


# ------------------------------------------------------------------------------------ Laplace

def newton_map(X, y, alpha, iters=50):
    """MAP of the logistic regression with prior N(0, I/alpha) by Newton's method, and the Hessian there."""
    th = np.zeros(X.shape[1])
    for _ in range(iters):
        p = sigmoid(X @ th)
        g = X.T @ (p - y) + alpha * th
        H = X.T @ (X * (p * (1 - p))[:, None]) + alpha * np.eye(X.shape[1])
        th = th - np.linalg.solve(H, g)
    p = sigmoid(X @ th)
    return th, X.T @ (X * (p * (1 - p))[:, None]) + alpha * np.eye(X.shape[1])


def test_laplace_equals_newton_map_and_hessian():
    X, y = logistic_data(0)
    mod = load_generated("laplace")
    assert mod.DATA == ("X", "y") and mod.ORACLES == () and "rho" not in mod.HYPERPARAMETERS
    st = mod.init(m=np.zeros(3), S=np.eye(3))
    th = np.zeros(3)
    for _ in range(12):                                # step by step equal to Newton's iterates
        st = mod.step(st, data={"X": X, "y": y}, alpha=ALPHA)
        p = sigmoid(X @ th)
        H = X.T @ (X * (p * (1 - p))[:, None]) + ALPHA * np.eye(3)
        th = th - np.linalg.solve(H, X.T @ (p - y) + ALPHA * th)
        np.testing.assert_allclose(st["m"], th, rtol=0, atol=1e-10)
        np.testing.assert_allclose(st["S"], H, rtol=0, atol=1e-10)
    th_map, H_map = newton_map(X, y, ALPHA)
    np.testing.assert_allclose(st["m"], th_map, rtol=0, atol=1e-10)
    # at convergence the precision is the Hessian at the MAP: q = N(theta_MAP, H(theta_MAP)^-1)
    st = mod.step(st, data={"X": X, "y": y}, alpha=ALPHA)
    np.testing.assert_allclose(st["S"], H_map, rtol=0, atol=1e-10)
    g = X.T @ (sigmoid(X @ st["m"]) - y) + ALPHA * st["m"]
    assert np.max(np.abs(g)) < 1e-10


def test_laplace_and_ncvi_stay_finite_for_large_margins():
    """|xᵀm| beyond 709: the logistic function is printed as scipy.special.expit, not as e^(-x)/(1 + e^(-x))²."""
    X, y = logistic_data(6, 40, 3)
    m = np.array([0.0, 900.0, -900.0])
    for name, hp in (("laplace", {}), ("ncvi", {"nodes": 8})):
        new = load_generated(name).step({"m": m, "S": np.eye(3)}, data={"X": X, "y": y}, alpha=ALPHA, **hp)
        assert np.all(np.isfinite(new["m"])) and np.all(np.isfinite(new["S"]))
    p = sigmoid(X @ m)
    H = X.T @ (X * (p * (1 - p))[:, None]) + ALPHA * np.eye(3)
    new = load_generated("laplace").step({"m": m, "S": np.eye(3)}, data={"X": X, "y": y}, alpha=ALPHA)
    np.testing.assert_allclose(new["S"], H, rtol=1e-12, atol=1e-12)


def test_laplace_derivation_uses_delta_method_on_the_derived_derivatives():
    recipe, D = derive_file(CATALOG / "laplace.yaml")
    assert isinstance(recipe.loss.atoms(DataSum).pop(), DataSum)
    rules = [s.rule for s in D.steps]
    assert rules.index("bonnet") < rules.index("price") < rules.index("delta") < rules.index("unit_learning_rate")
    assert D.oracle_calls == []
    text = D.to_markdown()
    assert "Eqs. 13, 65-66" in text and "Eq. 10" in text and "Eq. 11" in text
    names = [n for n, _, _ in D.updates]
    assert names == ["S", "m"]


# ------------------------------------------------------------------------------ quadrature ELBO

def expected_loss(X, y, alpha, m, C, nodes=NODES):
    """E_q[sum softplus(Xθ) - yᵀXθ + α/2 θᵀθ] for q = N(m, C), the softplus terms by Gauss-Hermite."""
    z, w = gauss_hermite_rule(nodes)
    s = np.sqrt(np.einsum("ij,jk,ik->i", X, C, X))
    u = (X @ m)[:, None] + s[:, None] * z
    return float(np.sum(np.logaddexp(0, u) @ w) - y @ X @ m + 0.5 * alpha * (m @ m + np.trace(C)))


def elbo_reference(X, y, alpha, nodes=NODES):
    """argmin over (m, L) of E_q[loss] - log|det L| (= -ELBO up to a constant), C = L Lᵀ with L lower
    triangular (log-diagonal), by BFGS with the exact gradient of the quadrature objective (through the
    nodes u = xᵀm + σ z)."""
    P = X.shape[1]
    z, w = gauss_hermite_rule(nodes)
    il = np.tril_indices(P, -1)

    def unpack(v):
        L = np.diag(np.exp(v[P:2 * P]))
        L[il] = v[2 * P:]
        return v[:P], L

    def f(v):
        m, L = unpack(v)
        XL = X @ L
        s = np.sqrt(np.sum(XL * XL, axis=1))
        u = (X @ m)[:, None] + s[:, None] * z
        val = np.sum(np.logaddexp(0, u) @ w) - y @ X @ m + 0.5 * alpha * (m @ m + np.sum(L * L)) \
            - np.sum(v[P:2 * P])
        sg = sigmoid(u)
        gm = X.T @ (sg @ w) - X.T @ y + alpha * m
        ds = (sg * z) @ w                                   # d/dσ_n of the quadrature sum
        gL = X.T @ ((ds / s)[:, None] * XL) + alpha * L
        return val, np.concatenate([gm, np.diag(gL) * np.diag(L) - 1, gL[il]])

    res = scipy.optimize.minimize(f, np.zeros(2 * P + len(il[0])), jac=True, method="BFGS",
                                  options={"gtol": 1e-11, "maxiter": 5000})
    # the objective is strongly convex near the optimum (Hessian >= alpha I in m), so a gradient below 1e-7
    # puts (m, L) within about 1e-7 / alpha of it
    assert np.max(np.abs(f(res.x)[1])) < 1e-7
    m, L = unpack(res.x)
    return m, L @ L.T


def run_to_convergence(mod, X, y, tol=1e-13, max_iter=500, **hp):
    st = mod.init(m=np.zeros(X.shape[1]), S=np.eye(X.shape[1]))
    for it in range(max_iter):
        new = mod.step(st, data={"X": X, "y": y}, **hp)
        delta = max(np.max(np.abs(new["m"] - st["m"])), np.max(np.abs(new["S"] - st["S"])))
        st = new
        if delta < tol:
            return st, it + 1
    raise AssertionError(f"{mod.RECIPE}: no convergence in {max_iter} steps (last change {delta:.3g})")


@pytest.mark.parametrize("seed,N,P", [(0, 120, 3), (1, 60, 2), (2, 200, 3)])
def test_ncvi_and_ncvmp_reach_the_elbo_optimum(seed, N, P):
    X, y = logistic_data(seed, N, P)
    m_ref, C_ref = elbo_reference(X, y, ALPHA)
    for name, hp in (("ncvi", {"rho": 0.5}), ("ncvmp", {})):
        st, _ = run_to_convergence(load_generated(name), X, y, alpha=ALPHA, nodes=NODES, **hp)
        np.testing.assert_allclose(st["m"], m_ref, rtol=0, atol=1e-6)
        np.testing.assert_allclose(np.linalg.inv(st["S"]), C_ref, rtol=0, atol=1e-6)
    # the variational mean differs from the MAP (Bayesian averaging, Sec. 4.4)
    th_map, H_map = newton_map(X, y, ALPHA)
    assert np.max(np.abs(m_ref - th_map)) > 1e-3


def test_ncvmp_is_the_rho_one_ncvi_step():
    """Eq. 60 with ρ = 1 (NCVMP) is one BLR step of Eq. 58 with ρ = 1."""
    X, y = logistic_data(3, 80, 3)
    rng = np.random.default_rng(3)
    B = rng.normal(size=(3, 3))
    st = {"m": rng.normal(size=3), "S": B @ B.T + 3 * np.eye(3)}
    a = load_generated("ncvmp").step(st, data={"X": X, "y": y}, alpha=ALPHA, nodes=20)
    b = load_generated("ncvi").step(st, data={"X": X, "y": y}, alpha=ALPHA, nodes=20, rho=1.0)
    for k in ("m", "S"):
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-12)


def _mu_to_ordinary(mu1, mu2):
    C = mu2 - np.outer(mu1, mu1)
    return mu1, C


@pytest.mark.parametrize("seed", [0, 1])
def test_generated_natural_gradient_equals_finite_differences_of_the_quadrature_elbo(seed):
    """With ρ = 1 the BLR step returns λ_{t+1} = -∇_μ E_q[ℓ] (Eq. 6, constant h): compare it with central
    differences of the quadrature E_q[ℓ] in μ = (m, S⁻¹ + m mᵀ)."""
    X, y = logistic_data(10 + seed, 50, 3)
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(3, 3))
    m, S = rng.normal(size=3) * 0.5, B @ B.T + 2 * np.eye(3)
    new = load_generated("ncvmp").step({"m": m, "S": S}, data={"X": X, "y": y}, alpha=ALPHA, nodes=NODES)
    grad_mu1 = -new["S"] @ new["m"]            # λ1 = S m
    grad_mu2 = new["S"] / 2                    # λ2 = -S/2
    mu1, mu2 = m, np.linalg.inv(S) + np.outer(m, m)

    def E(a, b):
        return expected_loss(X, y, ALPHA, *_mu_to_ordinary(a, b))
    h = 1e-5
    fd1 = np.array([(E(mu1 + h * e, mu2) - E(mu1 - h * e, mu2)) / (2 * h) for e in np.eye(3)])
    np.testing.assert_allclose(grad_mu1, fd1, rtol=0, atol=1e-6)
    fd2 = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            Eij = np.zeros((3, 3))
            Eij[i, j] = Eij[j, i] = 0.5 if i != j else 1.0       # symmetric direction; ∂/∂μ2_ij
            fd2[i, j] = (E(mu1, mu2 + h * Eij) - E(mu1, mu2 - h * Eij)) / (2 * h)
    np.testing.assert_allclose(grad_mu2, fd2, rtol=0, atol=1e-6)


def test_symbolic_natural_gradient_equals_finite_differences_of_its_expected_loss():
    """The engine's ∇_μ E_q[ℓ] (written in μ, quadrature nodes included) against central differences of
    its own E_q[ℓ](μ)."""
    recipe, D = derive_file(CATALOG / "ncvi.yaml")
    fam = recipe.family
    E = D.expected_loss
    grads = D.natural_gradient.grads
    X, y = logistic_data(4, 6, 2)
    rng = np.random.default_rng(4)
    B = rng.normal(size=(2, 2))
    m, C = rng.normal(size=2), np.linalg.inv(B @ B.T + 2 * np.eye(2))
    env = {recipe.data[0].symbol: X, recipe.data[1].symbol: y, recipe.hyper_symbol("alpha"): ALPHA,
           recipe.hyper_symbol("nodes"): 12}
    dims = {fam.dim: 2, recipe.data[0].shape[0]: 6}
    mu1, mu2 = fam.mu
    point = {mu1: m, mu2: C + np.outer(m, m)}
    g1 = evaluate(grads[0], {**env, **point}, dims).ravel()
    g2 = evaluate(grads[1], {**env, **point}, dims)
    np.testing.assert_allclose(g2, g2.T, atol=1e-12)

    def f(pt):
        return evaluate(E, {**env, **pt}, dims)
    h = 1e-6
    for i in range(2):
        e = np.eye(2)[i]
        fd = (f({**point, mu1: m + h * e}) - f({**point, mu1: m - h * e})) / (2 * h)
        assert abs(fd - g1[i]) < 1e-6
        Eii = np.outer(e, e)
        fd = (f({**point, mu2: point[mu2] + h * Eii}) - f({**point, mu2: point[mu2] - h * Eii})) / (2 * h)
        assert abs(fd - g2[i, i]) < 1e-6
    # and the same E_q[ℓ] as the hand-written quadrature
    assert abs(f(point) - expected_loss(X, y, ALPHA, m, C, nodes=12)) < 1e-10


def test_ncvmp_messages_sum_to_the_new_natural_parameter():
    """Eq. 60 with ρ = 1: λ_{t+1} = Σ_f λ̃_f, the messages listed by the derivation (the polynomial part's
    message is the conjugate one, (Xᵀy, -αI/2))."""
    recipe, D = derive_file(CATALOG / "ncvmp.yaml")
    (step,) = [s_ for s_ in D.steps if s_.rule == "factor_messages"]
    msgs = [rhs for _, rhs in step.equations]
    assert len(msgs) == 4
    X_, y_, alpha = recipe.data[0].symbol, recipe.data[1].symbol, recipe.hyper_symbol("alpha")
    assert msgs[0] == X_.T * y_ and msgs[1] == sp.MatMul(-alpha / 2, sp.Identity(recipe.family.dim))
    X, y = logistic_data(5, 7, 3)
    rng = np.random.default_rng(5)
    B = rng.normal(size=(3, 3))
    m, S = rng.normal(size=3), B @ B.T + 3 * np.eye(3)
    fam = recipe.family
    params = {p.name: p.symbol for p in fam.params.values()}
    env = {X_: X, y_: y, alpha: ALPHA, recipe.hyper_symbol("nodes"): 16, params["m"]: m, params["S"]: S}
    for s_, e in D.defs:
        if s_.name.startswith("eta"):
            env[s_] = evaluate(e, env, {fam.dim: 3, X_.shape[0]: 7}).ravel()
    val = [evaluate(e, env, {fam.dim: 3, X_.shape[0]: 7}) for e in msgs]
    lam1, lam2 = val[0].ravel() + val[2].ravel(), val[1] + val[3]
    new = load_generated("ncvmp").step({"m": m, "S": S}, data={"X": X, "y": y}, alpha=ALPHA, nodes=16)
    np.testing.assert_allclose(lam1, new["S"] @ new["m"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(lam2, -new["S"] / 2, rtol=0, atol=1e-10)


def test_explain_shows_quadrature_bonnet_price_and_equations():
    for name in ("ncvi", "ncvmp"):
        recipe, D = derive_file(CATALOG / f"{name}.yaml")
        rules = [s.rule for s in D.steps]
        assert rules.index("chain_rule_gaussian") < rules.index("bonnet") < rules.index("price") \
            < rules.index("gauss_hermite")
        assert ("unit_learning_rate" in rules) == (name == "ncvmp")
        text = D.to_markdown()
        assert "Sec. 5.4" in text and "Gauss" in text
    gen = (CATALOG / "generated" / "numpy" / "ncvi.py").read_text()
    assert "hermegauss" in gen and "_spd_solve" in gen and "numpy.linalg.inv" not in gen


# ------------------------------------------------------------------------------- grammar and errors

def test_sum_grammar_and_errors(tmp_path):
    from blr_derive.core.exprparse import parse_expression
    X = sp.MatrixSymbol("X", sp.Symbol("N", integer=True, positive=True), sp.Symbol("P", integer=True, positive=True))
    th = sp.MatrixSymbol("theta", X.shape[1], 1)
    e = parse_expression("sum(softplus(X*theta)) + sum(X*theta)", {"X": X, "theta": th})
    assert len(e.atoms(DataSum)) == 2
    for bad in ("sum(X)", "sum(softplus(X*theta), 2)"):
        with pytest.raises(SpecError):
            parse_expression(bad, {"X": X, "theta": th})
    # a scalar function of the rows of one column vector is a data sum (fdf59c4: sum(g(v)) with g any formula):
    # sum(theta.T*theta) is the sum of theta's squared entries (= theta.T*theta), sum(lgamma(X*theta)) the sum of
    # lgamma over the rows of X*theta (its domain is checked where the update is evaluated, as any loss's)
    u = sp.Symbol("u")
    e = parse_expression("sum(theta.T*theta)", {"X": X, "theta": th})
    assert isinstance(e, DataSum) and e.vec == th and sp.simplify(e.fn(u) - u**2) == 0
    e = parse_expression("sum(lgamma(X*theta))", {"X": X, "theta": th})
    assert isinstance(e, DataSum) and e.vec == X * th and e.fn(u) == sp.loggamma(u)
    text = (CATALOG / "laplace.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("sum(softplus(X*theta))", "sum(softplus(X*theta))*theta.T*theta"))
    with pytest.raises(SpecError, match="bad.yaml"):
        derive_file(bad)
    bad.write_text(text.replace("  - delta\n", "  - gauss_hermite: {}\n"))
    with pytest.raises(SpecError, match="missing argument 'nodes'"):
        derive_file(bad)


@pytest.mark.parametrize("rule", ["gauss_hermite: {nodes: nodes}", "delta"])
def test_two_data_sums_with_offsets_against_symbolic_update_and_finite_differences(tmp_path, rule):
    """A loss with two data sums (an offset inside one, a coefficient on the other): the generated step
    equals the symbolic one, and the quadrature natural gradient equals finite differences of E_q[ℓ](μ)
    (blr_derive.verify.recipe.check_recipe_updates)."""
    from blr_derive.verify.check import check_recipe_updates
    from blr_derive.candidates.load import load_recipe
    path = tmp_path / "two_sums.yaml"
    path.write_text(f"""name: two_sums
family: gaussian_full
loss:
  expression: sum(softplus(X*theta + b)) + 0.5*sum(exp(Z*theta)) - y.T*X*theta + 0.5*alpha*theta.T*theta
  data:
    X: {{shape: [N, P]}}
    b: {{shape: [N]}}
    y: {{shape: [N]}}
    Z: {{shape: [K, P]}}
hyperparameters:
  alpha: {{default: 1.0}}
  nodes: {{default: 40, type: int}}
approximations:
  - {rule}
""")
    recipe = load_recipe(path)
    checks = {c.name: c for c in check_recipe_updates(recipe)}
    assert checks["generated update vs symbolic update"].passed
    assert checks["generated update vs symbolic update"].value < 1e-10
    if rule == "delta":
        assert "natural gradient vs finite differences" not in checks
    else:
        assert checks["natural gradient vs finite differences"].value < 1e-6
    from blr_derive.derive.driver import derive
    D = derive(recipe)
    names = [s_.name for s_, _ in D.defs]
    assert names[:2] == ["eta1", "eta_var1"] if rule != "delta" else names[:2] == ["eta1", "eta2"]
