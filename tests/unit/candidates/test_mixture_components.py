"""Mixture candidates with the components as an array axis (``family: {mixture: F, components: K}``, K a size
name; blr_derive/candidates/mixture_axis.py): the catalog's multimodal and multimodal_exact, derived once for a
generic component k and a generic other component j, against the unrolled recipes (one state variable per
component) at K = 2 and 3, against a vectorized reference of Eqs. 28-30 and 69-71 written here at K = 7, 64 and
256, on the minima of a double well, a triple well and Himmelblau's function, and on the responsibility of a
far-away component (against mpmath, where the naive softmax is 0/0)."""
import mpmath
import numpy as np
import pytest
import scipy.special

from blr_derive.api import derive_file, derive_record
from blr_derive.codegen.registry import emit
from blr_derive.ir.build import build_ir
from blr_derive.verify.update import compare_update
from conftest import CATALOG, load_generated, load_module_from_path

AXIS = load_generated("multimodal")
AXIS_EXACT = load_generated("multimodal_exact")


def _unrolled(tmp_path_factory, name, K):
    """The unrolled recipe ``name`` at K components, derived and generated (numpy)."""
    text = (CATALOG / f"{name}.yaml").read_text()
    p = tmp_path_factory.mktemp(f"unrolled{K}") / f"{name}{K}.yaml"
    p.write_text(text.replace("components: 2", f"components: {K}").replace(f"name: {name}", f"name: {name}{K}"))
    _, D = derive_file(p)
    out = p.with_suffix(".py")
    out.write_text(emit(build_ir(D, p.name), "numpy"))
    return load_module_from_path(out)


def _spd(rng, P, scale=1.0):
    A = rng.normal(size=(P, P))
    return scale * (A @ A.T / P + 0.5 * np.eye(P))


def _oracles(rng, P):
    """A smooth non-quadratic loss: its gradient and Hessian at any point."""
    A, b = _spd(rng, P), rng.normal(size=P)
    return {"grad": lambda x: A @ x - b + 0.3 * np.sin(x), "hess": lambda x: A + np.diag(0.3 * np.cos(x))}


def _state(rng, K, P, spread=1.0):
    return rng.normal(size=(K, P)) * spread, np.stack([_spd(rng, P, 2.0) for _ in range(K)])


# ------------------------------------------------------------------------- against the unrolled recipes
@pytest.mark.parametrize("K", [2, 3])
def test_component_axis_step_equals_the_unrolled_step(tmp_path_factory, K):
    unrolled = _unrolled(tmp_path_factory, "multimodal_unrolled", K)
    rng = np.random.default_rng(K)
    for _ in range(3):
        P = int(rng.integers(1, 4))
        m, S = _state(rng, K, P, spread=0.8)       # close enough that every responsibility matters
        oracles, rho = _oracles(rng, P), float(rng.uniform(0.1, 0.9))
        got = AXIS.step(AXIS.init(m=m, S=S), oracles=oracles, rho=rho)
        flat = {f"{n}{k + 1}": v[k] for n, v in (("m", m), ("S", S)) for k in range(K)}
        want = unrolled.step(unrolled.init(**flat), oracles=oracles, rho=rho)
        for k in range(K):
            np.testing.assert_allclose(got["m"][k], want[f"m{k + 1}"], rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(got["S"][k], want[f"S{k + 1}"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("K", [2, 3])
def test_component_axis_exact_step_equals_the_unrolled_step(tmp_path_factory, K):
    unrolled = _unrolled(tmp_path_factory, "multimodal_exact_unrolled", K)
    rng = np.random.default_rng(10 + K)
    for _ in range(3):
        m, s = rng.normal(size=(K, 5)), rng.uniform(0.5, 3.0, size=(K, 5))   # five coordinates, elementwise
        hp = {"rho": float(rng.uniform(0.1, 0.9)), "scale": float(rng.uniform(0.5, 3.0))}
        got = AXIS_EXACT.step(AXIS_EXACT.init(m=m, s=s), **hp)
        flat = {f"{n}{k + 1}": v[k] for n, v in (("m", m), ("s", s)) for k in range(K)}
        want = unrolled.step(unrolled.init(**flat), **hp)
        for k in range(K):
            np.testing.assert_allclose(got["m"][k], want[f"m{k + 1}"], rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(got["s"][k], want[f"s{k + 1}"], rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------- against a vectorized reference
def _reference_step(m, S, g, H, rho):
    """Eqs. 28-30 with the delta method and the entropy term of Eqs. 69-71, vectorized over the components:
    r[j, k] = π_j N(m_k | m_j, S_j⁻¹) / q(m_k) (π_j = 1/K), ∇log q(m_k) = Σ_j r_jk S_j (m_j − m_k),
    ∇²log q(m_k) = Σ_j r_jk (−S_j + s_jk s_jkᵀ) − ∇log q ∇log qᵀ; the precision step S_k + ρG_k, G_k = H_k +
    ∇²log q(m_k), completed by the improved BLR (riemannian_correction) in Lin et al.'s (2020) sum-of-squares form
    ½(S_k + (S_k + ρG_k) S_k⁻¹ (S_k + ρG_k)); m_k ← m_k − ρ S_k,new⁻¹(g_k + ∇log q(m_k))."""
    K, P = m.shape
    diff = m[:, None, :] - m[None, :, :]                                   # [j, k] = m_j − m_k
    s = np.einsum("jab,jkb->jka", S, diff)                                 # ∇log q_j(m_k)
    logdet = np.linalg.slogdet(S)[1]
    a = np.log(1 / K) + 0.5 * logdet[:, None] - 0.5 * P * np.log(2 * np.pi) - 0.5 * np.einsum("jka,jka->jk", diff, s)
    r = np.exp(a - scipy.special.logsumexp(a, axis=0, keepdims=True))
    gq = np.einsum("jk,jka->ka", r, s)
    Hq = -np.einsum("jk,jab->kab", r, S) + np.einsum("jk,jka,jkb->kab", r, s, s) - np.einsum("ka,kb->kab", gq, gq)
    R = S + rho * (H + Hq)
    S_new = 0.5 * (S + np.einsum("kab,kbc->kac", R, np.linalg.solve(S, R)))
    m_new = m - rho * np.linalg.solve(S_new, (g + gq)[..., None])[..., 0]
    return m_new, S_new


@pytest.mark.parametrize("K", [7, 64, 256])
def test_component_axis_step_equals_a_vectorized_reference(K):
    rng = np.random.default_rng(K)
    P = 3
    m, S = _state(rng, K, P, spread=2.0)
    oracles, rho = _oracles(rng, P), 0.4
    g = np.stack([oracles["grad"](x) for x in m])
    H = np.stack([oracles["hess"](x) for x in m])
    got = AXIS.step(AXIS.init(m=m, S=S), oracles=oracles, rho=rho)
    m_want, S_want = _reference_step(m, S, g, H, rho)
    assert got["m"].shape == (K, P) and got["S"].shape == (K, P, P)
    np.testing.assert_allclose(got["S"], S_want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got["m"], m_want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["multimodal", "multimodal_exact"])
def test_generated_equals_the_generic_program_evaluated_per_component(name):
    """The verifier (blr_derive/verify/mixture_axis.py) evaluates the generic program with sympy for every pair
    (j, k) of K = 3 components: the generated step equals it."""
    recipe, D = derive_record(CATALOG / f"{name}.yaml")
    for seed in range(2):
        pairs = compare_update(recipe, D, load_generated(name), seed)
        assert {n for n, _, _ in pairs} == ({"m", "S"} if name == "multimodal" else {"m", "s"})
        for _, got, want in pairs:
            assert got.shape[0] == 3
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


# ---------------------------------------------------------------------------------------------- minima
def _refine(g, H, x, iters=30):
    x = np.array(x, dtype=float)
    for _ in range(iters):
        x = x - np.linalg.solve(np.atleast_2d(H(x)), np.atleast_1d(g(x))).reshape(x.shape)
    return x


def _run(mod, steps, oracles=None, **kw):
    hp = {k: kw.pop(k) for k in list(kw) if k in mod.HYPERPARAMETERS}
    st = mod.init(**kw)
    for _ in range(steps):
        st = mod.step(st, oracles=oracles, **hp)
    return st


def test_double_and_triple_well_minima_with_one_module_at_any_K():
    g2 = lambda x: 4 * x * (x**2 - 4) + 0.5                                 # noqa: E731
    H2 = lambda x: np.atleast_2d(12 * x**2 - 16)                            # noqa: E731
    st = _run(AXIS, 80, {"grad": g2, "hess": H2}, m=[[-1.5], [1.5]], S=[[[10.0]], [[10.0]]])
    want = sorted(_refine(g2, H2, [x0])[0] for x0 in (-2.0, 2.0))
    np.testing.assert_allclose(sorted(st["m"][:, 0]), want, rtol=0, atol=1e-6)
    g3 = lambda x: 2 * x * (x**2 - 9) ** 2 + 4 * x**3 * (x**2 - 9) + 1      # noqa: E731
    H3 = lambda x: np.atleast_2d(30 * x**4 - 216 * x**2 + 162)             # noqa: E731
    st = _run(AXIS, 150, {"grad": g3, "hess": H3}, m=[[-2.7], [0.5], [2.7]], S=100 * np.ones((3, 1, 1)), rho=0.3)
    want = sorted(_refine(g3, H3, [x0])[0] for x0 in (-3.0, 0.0, 3.0))
    np.testing.assert_allclose(sorted(st["m"][:, 0]), want, rtol=0, atol=1e-6)


def test_himmelblau_minima_with_four_components():
    def g(x):
        a, b = x[0] ** 2 + x[1] - 11, x[0] + x[1] ** 2 - 7
        return np.array([4 * x[0] * a + 2 * b, 2 * a + 4 * x[1] * b])

    def H(x):
        return np.array([[12 * x[0] ** 2 + 4 * x[1] - 42, 4 * x[0] + 4 * x[1]],
                         [4 * x[0] + 4 * x[1], 4 * x[0] + 12 * x[1] ** 2 - 26]])
    st = _run(AXIS, 200, {"grad": g, "hess": H}, m=[(2, 2), (-2, 2), (-2, -2), (2, -2)],
              S=100 * np.stack([np.eye(2)] * 4), rho=0.3)
    for k, x0 in enumerate([(3, 2), (-2.8, 3.1), (-3.8, -3.3), (3.6, -1.8)]):
        w = _refine(g, H, x0)
        np.testing.assert_allclose(st["m"][k], w, rtol=0, atol=1e-6)
        np.testing.assert_allclose(st["S"][k], H(w), rtol=1e-6)


def test_exact_expectations_find_both_minima_of_the_double_well():
    st = _run(AXIS_EXACT, 80, m=[-1.5, 1.2], s=[1e3, 1e3])
    scale = 1e5
    g = lambda x: scale * 4 * x * (x**2 - 4) + 1                            # noqa: E731
    H = lambda x: np.atleast_2d(scale * (12 * x**2 - 16))                  # noqa: E731
    want = sorted(_refine(g, H, [x0])[0] for x0 in (-2.0, 2.0))
    np.testing.assert_allclose(sorted(st["m"]), want, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------- a far-away component's weight
def test_far_away_responsibility_keeps_its_relative_precision():
    """Two components in P = 1000 dimensions, m_1 = 0 and m_2 = d e_1 (d = 30), S_j = I, zero oracles: every
    a_jk = log π_j + log N(m_k | m_j, I) is below −900, so the naive π_j q_j / Σ_i π_i q_i is 0/0; the step moves
    m_1 by −ρ S_new⁻¹ ∇log q(m_1) = −r_2(m_1) d e_1 / (1 + O(r_2 d²)), a responsibility of about 1e-196, which the
    log-softmax keeps to full relative precision (against mpmath at 50 digits)."""
    P, d = 1000, 30.0
    m = np.zeros((2, P))
    m[1, 0] = d
    S = np.stack([np.eye(P)] * 2)
    zero = {"grad": lambda x: np.zeros(P), "hess": lambda x: np.zeros((P, P))}
    out = AXIS.step(AXIS.init(m=m, S=S), oracles=zero, rho=0.5)
    mpmath.mp.dps = 50
    r21 = mpmath.exp(-d * d / 2) / (1 + mpmath.exp(-d * d / 2))
    # S_new,1 = I + ρ(−I + r21 (d² e1e1ᵀ) − r21² d² e1e1ᵀ) = I/2 + O(1e-193): m_new,1 = −ρ (g + r21 d e1) / S_new,1
    s_new = 1 - 0.5 * (1 - float(r21) * d * d + float(r21) ** 2 * d * d)
    want = -0.5 * float(r21 * d) / s_new
    assert want != 0.0 and abs(want) < 1e-190
    assert out["m"][0, 0] == pytest.approx(want, rel=1e-12)
    np.testing.assert_array_equal(out["m"][0, 1:], 0.0)
    # the naive formula loses everything here: every exp underflows
    a = -0.5 * P * np.log(2 * np.pi) + np.log(0.5) - np.array([0.0, d * d / 2])
    with np.errstate(invalid="ignore"):
        assert np.isnan(np.exp(a[1]) / np.exp(a).sum())
