"""Mixture candidates (Sec. 3.2, App. E): the mixture BLR (Eqs. 27-28) derived by the engine, checked
numerically (the natural gradient against quadrature, Eqs. 69-71 against finite differences of log q), and the
multimodal recipe locating every minimum of functions with several separated minima in one run.  These tests use
the unrolled recipes (one state variable per component, a fixed K); the component-axis recipes (multimodal,
multimodal_exact) are tested against them in test_mixture_components.py."""
import numpy as np
import pytest
import scipy.integrate
import scipy.optimize
import scipy.special

from blr_derive.api import derive_file
from blr_derive.ir.build import build_ir
from blr_derive.codegen.registry import emit
from blr_derive.core.errors import SpecError
from blr_derive.families.symbolic import evaluate
from blr_derive.ir.common import toposort as _toposort
from conftest import CATALOG, load_generated, load_module_from_path

MULTIMODAL = (CATALOG / "multimodal_unrolled.yaml").read_text()



def _derive_and_load(path):
    """(recipe, derivation, generated numpy module) of a recipe file, derived once."""
    recipe, D = derive_file(path)
    out = path.with_suffix(".py")
    out.write_text(emit(build_ir(D, path.name), "numpy"))
    return recipe, D, load_module_from_path(out)


def _variant(tmp_path_factory, K):
    p = tmp_path_factory.mktemp(f"mixture{K}") / f"multimodal{K}.yaml"
    p.write_text(MULTIMODAL.replace("components: 2", f"components: {K}").replace("name: multimodal_unrolled",
                                                                                 f"name: multimodal{K}"))
    return _derive_and_load(p)


@pytest.fixture(scope="module")
def mixture3(tmp_path_factory):
    return _variant(tmp_path_factory, 3)


@pytest.fixture(scope="module")
def exact1d():
    recipe, D = derive_file(CATALOG / "multimodal_exact_unrolled.yaml")
    return recipe, D, load_generated("multimodal_exact_unrolled")


def _run(mod, state, oracles=None, steps=100, **hp):
    state = mod.init(**state)
    for _ in range(steps):
        state = mod.step(state, oracles=oracles, **hp)
    return state


def _refine(g, H, x, iters=30):
    """A minimum to machine precision by Newton's method (the reference, independent of the engine)."""
    x = np.array(x, dtype=float)
    for _ in range(iters):
        x = x - np.linalg.solve(np.atleast_2d(H(x)), np.atleast_1d(g(x))).reshape(x.shape)
    return x


# ------------------------------------------------------------------------------------------- minima
def test_catalog_multimodal_finds_both_minima_of_a_double_well():
    mod = load_generated("multimodal_unrolled")
    f_g = lambda x: 4 * x * (x**2 - 4) + 0.5            # noqa: E731  ℓ = (x² − 4)² + x/2: minima near ±2
    f_H = lambda x: np.atleast_2d(12 * x**2 - 16)       # noqa: E731
    st = _run(mod, {"m1": [-1.5], "S1": [[10.0]], "m2": [1.5], "S2": [[10.0]]}, {"grad": f_g, "hess": f_H}, 80)
    found = sorted([st["m1"][0], st["m2"][0]])
    want = sorted(_refine(f_g, f_H, [x0])[0] for x0 in (-2.0, 2.0))
    np.testing.assert_allclose(found, want, rtol=0, atol=1e-6)
    assert st["S1"][0, 0] > 0 and st["S2"][0, 0] > 0


def test_three_components_find_the_three_minima_of_a_triple_well(mixture3):
    _, _, mod = mixture3
    # ℓ = x²(x² − 9)² + x: three minima near -3, 0, 3
    g = lambda x: 2 * x * (x**2 - 9) ** 2 + 4 * x**3 * (x**2 - 9) + 1        # noqa: E731
    H = lambda x: np.atleast_2d(30 * x**4 - 216 * x**2 + 162)               # noqa: E731
    # start in the three convex basins (the inflection points are at ±0.92 and ±2.52)
    st = _run(mod, {"m1": [-2.7], "S1": [[100.0]], "m2": [0.5], "S2": [[100.0]], "m3": [2.7], "S3": [[100.0]]},
              {"grad": g, "hess": H}, 150, rho=0.3)
    found = sorted(st[f"m{k}"][0] for k in (1, 2, 3))
    want = sorted(_refine(g, H, [x0])[0] for x0 in (-3.0, 0.0, 3.0))
    np.testing.assert_allclose(found, want, rtol=0, atol=1e-6)


def test_four_components_find_the_four_minima_of_himmelblau(tmp_path_factory):
    _, _, mod = _variant(tmp_path_factory, 4)

    def g(x):
        a, b = x[0] ** 2 + x[1] - 11, x[0] + x[1] ** 2 - 7
        return np.array([4 * x[0] * a + 2 * b, 2 * a + 4 * x[1] * b])

    def H(x):
        return np.array([[12 * x[0] ** 2 + 4 * x[1] - 42, 4 * x[0] + 4 * x[1]],
                         [4 * x[0] + 4 * x[1], 4 * x[0] + 12 * x[1] ** 2 - 26]])
    starts = [(2, 2), (-2, 2), (-2, -2), (2, -2)]             # one per quadrant, not at the minima
    state = {}
    for k, s in enumerate(starts, 1):
        state[f"m{k}"], state[f"S{k}"] = np.array(s, float), 100 * np.eye(2)
    st = _run(mod, state, {"grad": g, "hess": H}, 200, rho=0.3)
    want = [_refine(g, H, x0) for x0 in [(3, 2), (-2.8, 3.1), (-3.8, -3.3), (3.6, -1.8)]]
    for k, w in enumerate(want, 1):
        np.testing.assert_allclose(st[f"m{k}"], w, rtol=0, atol=1e-6)
        np.testing.assert_allclose(st[f"S{k}"], H(w), rtol=1e-6)      # the precision tracks the Hessian (Eq. 30)


def test_exact_expectations_of_a_polynomial_loss_find_both_minima(exact1d):
    _, _, mod = exact1d
    st = _run(mod, {"m1": -1.5, "s1": 1e3, "m2": 1.2, "s2": 1e3}, None, 80)
    scale = 1e5
    g = lambda x: scale * 4 * x * (x**2 - 4) + 1                    # noqa: E731
    H = lambda x: np.atleast_2d(scale * (12 * x**2 - 16))          # noqa: E731
    want = sorted(_refine(g, H, [x0])[0] for x0 in (-2.0, 2.0))
    np.testing.assert_allclose(sorted([float(st["m1"]), float(st["m2"])]), want, rtol=0, atol=1e-6)
    # and it is the fixed point of Eqs. 29-30 with exact moments: E_{q_k}[ℓ'] = 0 (the components are separated)
    for k in (1, 2):
        m, s = float(st[f"m{k}"]), float(st[f"s{k}"])
        e_grad = scale * (4 * (m**3 + 3 * m / s) - 16 * m) + 1
        assert abs(e_grad) / s < 1e-12
        assert s == pytest.approx(scale * (12 * (m**2 + 1 / s) - 16), rel=1e-9)


EXACT_2D = """\
name: multimodal_exact_2d
title: Multimodal optimization in 2-D with exact Gaussian expectations of a quartic loss
family: {mixture: gaussian_full, components: 2}
loss:
  expression: scale*((theta.T*theta - 4)**2 + theta.T*B*theta)
  data:
    B: {shape: [P, P], symmetric: true}
approximations: [exact, delta]
hyperparameters:
  rho: {default: 0.5}
  scale: {default: 1.0e+6}
"""


def test_exact_expectations_of_a_quartic_loss_find_both_minima_in_2d(tmp_path):
    """ℓ = scale((θᵀθ − 4)² + θᵀBθ), B = diag(0, 10): minima (±2, 0), saddles on the y axis.  E_{q_k}[ℓ] of the
    quartic by Isserlis' theorem, its gradients in (m_k, C_k) by matrix calculus."""
    p = tmp_path / "multimodal_exact_2d.yaml"
    p.write_text(EXACT_2D)
    _, D, mod = _derive_and_load(p)
    B = np.diag([0.0, 10.0])
    st = mod.init(m1=[-1.5, 0.3], S1=1e3 * np.eye(2), m2=[1.5, -0.3], S2=1e3 * np.eye(2))
    for _ in range(60):
        st = mod.step(st, data={"B": B})
    np.testing.assert_allclose(st["m1"], [-2.0, 0.0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(st["m2"], [2.0, 0.0], rtol=0, atol=1e-6)
    exact = [s_ for s_ in D.steps if s_.rule == "exact"][0]
    assert "scale" in str(exact.equations[0][1]) and mod.DATA == ("B",)


def test_vector_gaussian_expectations_of_cubic_and_quartic_forms_equal_gauss_hermite():
    """Products of two linear or quadratic forms (Isserlis' theorem, blr_derive/core/expect.py) against a tensor
    Gauss-Hermite rule, exact for these degrees."""
    import sympy as sp

    from blr_derive.core.exprparse import parse_expression
    from blr_derive.core.expect import gaussian_expectation
    from blr_derive.families.library import load_family
    fam = load_family("gaussian_full")
    P = 2
    B, b = sp.MatrixSymbol("B", fam.dim, fam.dim), sp.MatrixSymbol("b", fam.dim, 1)
    M, C = sp.MatrixSymbol("M", fam.dim, 1), sp.MatrixSymbol("C", fam.dim, fam.dim)
    rng = np.random.default_rng(0)
    L = rng.normal(size=(P, P)) + 2 * np.eye(P)
    vals = {B: rng.normal(size=(P, P)), b: rng.normal(size=P), M: rng.normal(size=P), C: L @ L.T}
    x, w = np.polynomial.hermite_e.hermegauss(6)
    E1, E2 = np.meshgrid(x, x, indexing="ij")
    W = np.outer(w, w).ravel() / (2 * np.pi)
    pts = vals[M] + (L @ np.stack([E1.ravel(), E2.ravel()])).T
    quad = {"(theta.T*theta - 4)**2 + theta.T*B*theta": lambda t: (t @ t - 4) ** 2 + t @ vals[B] @ t,
            "(theta.T*B*theta)*(b.T*theta) - 3*b.T*theta": lambda t: (t @ vals[B] @ t) * (vals[b] @ t) - 3 * vals[b] @ t,
            "(b.T*theta)*(theta.T*b) + theta.T*B*theta*theta.T*theta": lambda t: (vals[b] @ t) ** 2
            + (t @ vals[B] @ t) * (t @ t)}
    for text, f in quad.items():
        e = gaussian_expectation(parse_expression(text, {"theta": fam.theta, "B": B, "b": b}), fam.theta, M, C + M * M.T,
                                 {C})
        want = sum(wi * f(t) for wi, t in zip(W, pts))
        assert evaluate(e, vals, {fam.dim: P}) == pytest.approx(want, rel=1e-12), text


# ------------------------------------------------------------------------- the derivation, numerically
def test_mixture_natural_gradient_equals_quadrature_of_the_mixture_objective(exact1d):
    """Eqs. 27-28 + 67-68 + Bonnet/Price for mixtures: ∇_{μ_k}(E_q[ℓ] − H(q)) with E_{q_k}[∇f], E_{q_k}[∇²f]
    (f = ℓ + log q) by quadrature, against central differences in μ_k of the objective by quadrature."""
    recipe, D, _ = exact1d
    info = D.mixture_gradient.values
    (Eg_l, Eg_q), (EH_l, EH_q) = info["E_grad"], info["E_hess"]
    scale = 1.0
    loss = lambda t: scale * (t**2 - 4) ** 2 + t                    # noqa: E731
    dloss = lambda t: scale * 4 * t * (t**2 - 4) + 1               # noqa: E731
    d2loss = lambda t: scale * (12 * t**2 - 16)                    # noqa: E731
    pis = np.array([0.3, 0.7])

    def logq(t, ms, ss):
        return scipy.special.logsumexp([np.log(p) + 0.5 * np.log(s / (2 * np.pi)) - 0.5 * s * (t - m) ** 2
                                        for p, m, s in zip(pis, ms, ss)], axis=0)

    def objective(ms, ss):
        q = lambda t: np.exp(logq(t, ms, ss))                      # noqa: E731
        return scipy.integrate.quad(lambda t: q(t) * (loss(t) + logq(t, ms, ss)), -12, 12,
                                    epsabs=1e-13, epsrel=1e-13, limit=400)[0]

    ms, ss = np.array([-1.0, 0.8]), np.array([2.0, 3.0])
    k = 0
    pi = pis[k]
    mu = np.array([pi * ms[k], pi * (1 / ss[k] + ms[k] ** 2)])

    def obj_mu(mu_k):
        m = mu_k[0] / pi
        c = mu_k[1] / pi - m**2
        ms2, ss2 = ms.copy(), ss.copy()
        ms2[k], ss2[k] = m, 1 / c
        return objective(ms2, ss2)
    h = 1e-4
    fd = np.array([(obj_mu(mu + h * e) - obj_mu(mu - h * e)) / (2 * h) for e in np.eye(2)])

    def comp_expect(fn):
        sd = 1 / np.sqrt(ss[k])
        return scipy.integrate.quad(lambda t: fn(t) * np.exp(-0.5 * ((t - ms[k]) / sd) ** 2) / (sd * np.sqrt(2 * np.pi)),
                                    ms[k] - 12 * sd, ms[k] + 12 * sd, epsabs=1e-12, epsrel=1e-12, limit=400)[0]
    def dens(t):          # w_j N_j(t) and its first two derivatives, summed: q, q', q''
        parts = [p * np.sqrt(s / (2 * np.pi)) * np.exp(-0.5 * s * (t - m) ** 2) for p, m, s in zip(pis, ms, ss)]
        d1 = [w * (-s * (t - m)) for w, m, s in zip(parts, ms, ss)]
        d2 = [w * (s * s * (t - m) ** 2 - s) for w, m, s in zip(parts, ms, ss)]
        return sum(parts), sum(d1), sum(d2)
    dlogq = lambda t: dens(t)[1] / dens(t)[0]                                        # noqa: E731
    d2logq = lambda t: dens(t)[2] / dens(t)[0] - (dens(t)[1] / dens(t)[0]) ** 2      # noqa: E731
    vals = {info["mu"][0]: mu[0], info["mu"][1]: mu[1], info["pi"]: pi,
            Eg_l: comp_expect(dloss), EH_l: comp_expect(d2loss),
            Eg_q: comp_expect(dlogq), EH_q: comp_expect(d2logq)}
    derived = np.array([evaluate(gr, vals) for gr in info["grads"]])
    np.testing.assert_allclose(derived, fd, rtol=1e-6, atol=1e-7)
    assert recipe.family.K == 2


def test_log_q_gradient_and_hessian_equal_finite_differences(mixture3):
    """Eqs. 69-71 as generated (responsibilities from the component family's log density) at θ = m_k, with
    components close enough that every responsibility matters, against finite differences of log q."""
    recipe, D, _ = mixture3
    fam = recipe.family
    rng = np.random.default_rng(3)
    P = 2
    env, comps = {}, []
    for c in fam.components:
        m = rng.normal(size=P) * 0.5
        B = rng.normal(size=(P, P))
        S = B @ B.T / 4 + 0.5 * np.eye(P)
        env[c.subs[fam.base.params["m"].symbol]], env[c.subs[fam.base.params["S"].symbol]] = m, S
        comps.append((float(c.weight), m, S))

    def logq(t):
        return scipy.special.logsumexp([np.log(w) - 0.5 * P * np.log(2 * np.pi) + 0.5 * np.linalg.slogdet(S)[1]
                                        - 0.5 * (t - m) @ S @ (t - m) for w, m, S in comps])
    skip = {c[0] for c in D.oracle_calls}      # the precision step's direction reads H_k: not needed here
    for sym, expr in _toposort(list(D.defs)):
        if expr.free_symbols & skip:
            skip.add(sym)
            continue
        v = evaluate(expr, env, {fam.dim: P})
        env[sym] = v.ravel() if np.ndim(v) == 2 and v.shape[1] == 1 else v
    h = 1e-4
    E = np.eye(P)
    for k, (_, m, _) in enumerate(comps, 1):
        g_fd = np.array([(logq(m + h * e) - logq(m - h * e)) / (2 * h) for e in E])
        H_fd = np.array([[(logq(m + h * a + h * b) - logq(m + h * a - h * b) - logq(m - h * a + h * b)
                           + logq(m - h * a - h * b)) / (4 * h * h) for b in E] for a in E])
        gq = next(v for s, v in env.items() if str(s) == f"gq{k}")
        Hq = next(v for s, v in env.items() if str(s) == f"Hq{k}")
        r = [next(v for s, v in env.items() if str(s) == f"r_{j}_{k}") for j in (1, 2, 3)]
        assert min(r) > 1e-4                                    # the components overlap
        np.testing.assert_allclose(gq, g_fd, rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(Hq, H_fd, rtol=1e-5, atol=1e-5)


def test_separated_components_give_one_newton_step_per_component(tmp_path):
    """With r_k(m_k) = 1 (Eq. 74) the entropy term is the component's own (∇log q_k(m_k) = 0, ∇²log q_k = −S_k, both
    derived from the family), so each component takes the online Newton step of Eq. 12 whatever its weight."""
    import types

    from blr_derive.verify.update import compare_update
    p = tmp_path / "separated.yaml"
    p.write_text("name: separated\nfamily: {mixture: gaussian_full, components: 2, weights: [0.3]}\nloss: abstract\n"
                 "approximations: [delta, separated_components]\n")
    recipe, D = derive_file(p)
    _, N = derive_file(CATALOG / "newton.yaml")
    newton = [line for line in N.update_lines() if "<-" in line]
    for k in (1, 2):
        want = [line.replace("S", f"S{k}").replace("m", f"m{k}").replace("H", f"H{k}").replace("g", f"g{k}")
                for line in newton]
        assert [line for line in D.update_lines() if line.startswith((f"S{k} <-", f"m{k} <-"))] == want
    mod = types.ModuleType("separated")
    exec(compile(emit(build_ir(D, "separated"), "numpy"), "separated", "exec"), mod.__dict__)
    for _, generated, symbolic in compare_update(recipe, D, mod, 0):
        np.testing.assert_allclose(generated, symbolic, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------- explain, errors
def test_explain_shows_the_mixture_steps_with_equation_numbers():
    _, D = derive_file(CATALOG / "multimodal.yaml")
    md = D.to_markdown()
    for rule, eq in [("mixture_parameters", "Eq. 27"), ("mixture_blr", "Eq. 28"),
                     ("mixture_chain_rule", "Eqs. 67-68"), ("mixture_bonnet_price", "App. E"),
                     ("delta", "Eqs. 13, 65-66"), ("mixture_score", "Eqs. 69-71"), ("instantiate", "Eqs. 29-30")]:
        assert f"*rule* `{rule}` — *" in md and eq in md, rule
    assert [s.rule for s in D.steps].index("mixture_blr") < [s.rule for s in D.steps].index("mixture_score")
    assert r"\texttt{mixture\_score}" in D.to_latex()
    if hasattr(D, "to_html"):                                # the standalone report shows the component family
        assert "mixture_score" in D.to_html() and "gaussian_full" in D.to_html()


@pytest.mark.parametrize("family, approx, message", [
    ("{mixture: gaussian_full, components: 1}", "[delta]", "components must be an integer from 2"),
    ("{mixture: gaussian_full, components: K, weights: [0.5]}", "[delta]", "equal weights 1/K"),
    ("{mixture: gaussian_diag, components: K, fixed: {2: {m: 0, s: 1}}}", "[delta]", "remove 'fixed'"),
    ("{mixture: gaussian_full, components: 2x}", "[delta]", "or a size name"),
    ("{mixture: gaussian_full, components: 2, weights: [0.5, 0.5]}", "[delta]", "K - 1 = 1 weights"),
    ("{mixture: gaussian_full, components: 2, weights: [1.5]}", "[delta]", "must lie in (0, 1)"),
    ("{mixture: gaussian_full, components: 2, weights: [w]}", "[delta]", "w"),
    ("{mixture: gaussian_diag, components: 2, fixed: {2: {m: 0}}}", "[delta]", "missing a value for 's'"),
    ("{mixture: gaussian_diag, components: 2, fixed: {3: {m: 0, s: 1}}}", "[delta]", "not a component number"),
    ("{mixture: gaussian_diag, components: 2, fixed: {1: {m: 0, s: 1}, 2: {m: 1, s: 1}}}", "[delta]",
     "nothing to learn"),
    ("{mixture: exponential, components: 2}", "[delta]", "Gaussian moments"),
    ("{mixture: gaussian_full, components: 2}", "[]", "needs 'delta'"),
    ("{mixture: gaussian_full, components: 2}", "[delta, monte_carlo]", "does not apply to a mixture"),
    ("{mixture: gaussian_full, components: 2}", "[delta, dropout_masks]", "elementwise"),
    ("gaussian_diag", "[delta, separated_components]", "applies to mixture candidates"),
    ("gaussian_diag", "[delta, dropout_masks]", "applies to mixture candidates"),
])
def test_bad_mixture_declarations_are_one_line_errors(tmp_path, family, approx, message):
    p = tmp_path / "bad.yaml"
    p.write_text(f"name: bad\nfamily: {family}\nloss: abstract\napproximations: {approx}\n")
    with pytest.raises(SpecError) as exc:
        derive_file(p)
    assert message in str(exc.value) and str(exc.value).startswith(str(p))
    assert exc.value.line is not None
