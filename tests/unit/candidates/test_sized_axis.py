"""A sized family over a run-time axis (``components: {index: k, size: K}`` next to ``family: dirichlet`` or
``categorical``; blr_derive/candidates/sized_axis.py, blr_derive/families/axis.py): derived once for a generic
coordinate k, the state one array of length K.  Checked against the unrolled recipes (one state variable per
coordinate) at K = 2 and 3, against the closed-form conjugate posterior at K = 7, 64 and 256, against the BLR
written here in the categorical's minimal parameters (λ_k = log p_k/p_K), against mpmath where the smallest
probability is far below the others' rounding, and the axis family's μ and Fisher against the unrolled family's."""
import mpmath
import numpy as np
import pytest
import sympy as sp

from blr_derive.api import derive_record
from blr_derive.codegen.registry import emit
from blr_derive.core.errors import SpecError
from blr_derive.families.axis import axis_family
from blr_derive.families.library import load_family
from blr_derive.core.resources import families_dir
from blr_derive.core.yamlio import load_yaml_file
from blr_derive.ir.build import build_ir
from blr_derive.rules.mixture import LogSumExpOverComponents, SumOverComponents
from blr_derive.verify.update import compare_update
from conftest import CATALOG, load_generated, load_module_from_path

AXIS = load_generated("dirichlet_categorical")
AXIS_JAX = load_generated("dirichlet_categorical", "jax")

CATEGORICAL = """name: categorical_axis
components: {index: k, size: K}
family: categorical
loss:
  expression: l*theta
  data:
    l: {description: loss of class k}
approximations: [exact]
hyperparameters:
  rho: {default: 0.5}
"""
CATEGORICAL_UNROLLED = """name: categorical_unrolled
sizes:
  K: {default: 3, min: 2, max: 16}
family: {name: categorical, K: "{K}"}
loss:
  expression: "{+ k in 1..K: l{k}*theta{k}}"
  data:
    "l{k} for k in 1..K": {}
approximations: [exact]
hyperparameters:
  rho: {default: 0.5}
"""


def _module(tmp_path, name, text, sizes=None):
    p = tmp_path / f"{name}.yaml"
    p.write_text(text, encoding="utf-8")
    _, D = derive_record(p, sizes)
    out = tmp_path / f"{name}.py"
    out.write_text(emit(build_ir(D, p.name), "numpy"), encoding="utf-8")
    return load_module_from_path(out)


@pytest.fixture(scope="module")
def categorical(tmp_path_factory):
    return _module(tmp_path_factory.mktemp("axis"), "categorical_axis", CATEGORICAL)


# ------------------------------------------------------------------------------------------- Dirichlet-categorical
@pytest.mark.parametrize("K", [2, 3])
def test_axis_step_equals_the_unrolled_step(tmp_path, K):
    p = tmp_path / "unrolled.yaml"
    p.write_text((CATALOG / "dirichlet_categorical_unrolled.yaml").read_text(), encoding="utf-8")
    _, D = derive_record(p, {"K": K})
    (tmp_path / "unrolled.py").write_text(emit(build_ir(D, p.name), "numpy"), encoding="utf-8")
    unrolled = load_module_from_path(tmp_path / "unrolled.py")
    rng = np.random.default_rng(K)
    a, c, a0 = rng.uniform(0.2, 3, K), rng.integers(0, 50, K).astype(float), rng.uniform(0.1, 2, K)
    want = unrolled.step(unrolled.init(**{f"a{k + 1}": a[k] for k in range(K)}),
                         data={f"c{k + 1}": c[k] for k in range(K)}, **{f"a0{k + 1}": a0[k] for k in range(K)})
    got = AXIS.step(AXIS.init(a=a), data={"c": c}, a0=a0)
    np.testing.assert_allclose(got["a"], [want[f"a{k + 1}"] for k in range(K)], rtol=1e-12, atol=0)


@pytest.mark.parametrize("K", [7, 64, 256])
def test_axis_step_is_the_conjugate_posterior(K, x64):
    rng = np.random.default_rng(K)
    z = rng.integers(0, K, size=20 * K)
    c = np.bincount(z, minlength=K).astype(float)
    a0 = rng.uniform(0.1, 3.0, K)
    for mod in (AXIS, AXIS_JAX):
        out = mod.step(mod.init(a=np.full(K, 2.0)), data={"c": c}, a0=a0)
        np.testing.assert_allclose(np.asarray(out["a"]), a0 + c, rtol=1e-12, atol=0)
        out = mod.step(mod.init(a=np.full(K, 2.0)), data={"c": c})          # the default a0 = 1 for every class
        np.testing.assert_allclose(np.asarray(out["a"]), 1.0 + c, rtol=1e-12, atol=0)
    assert AXIS.SHAPES == {"a": ("K",), "c": ("K",)} and AXIS.STATE == ("a",)


def test_counts_of_another_length_are_refused():
    with pytest.raises(ValueError, match="K = 3"):
        AXIS.step(AXIS.init(a=np.ones(3)), data={"c": np.ones(4)})


# ------------------------------------------------------------------------------------------------ the categorical
def _minimal_blr(p, l, rho):
    """Eq. 6 in the categorical's minimal parameters λ_k = log(p_k/p_K), k < K (written here, not derived):
    ∇_μ E_q[ℓ] = l_k − l_K; the new probabilities are the softmax of (λ, 0)."""
    lam = np.log(p[:-1] / p[-1])
    lam = (1 - rho) * lam - rho * (l[:-1] - l[-1])
    full = np.append(lam, 0.0)
    e = np.exp(full - full.max())
    return e / e.sum()


@pytest.mark.parametrize("K", [2, 3])
def test_categorical_axis_step_equals_the_unrolled_step(tmp_path, categorical, K):
    unrolled = _module(tmp_path, "categorical_unrolled", CATEGORICAL_UNROLLED, sizes={"K": K})
    rng = np.random.default_rng(10 + K)
    p, l = rng.dirichlet(np.ones(K)), rng.normal(size=K)
    want = unrolled.step(unrolled.init(**{f"p{k + 1}": p[k] for k in range(K - 1)}),
                         data={f"l{k + 1}": l[k] for k in range(K)}, rho=0.3)
    got = categorical.step(categorical.init(p=p), data={"l": l}, rho=0.3)
    np.testing.assert_allclose(got["p"][:-1], [want[f"p{k + 1}"] for k in range(K - 1)], rtol=1e-12, atol=0)
    np.testing.assert_allclose(got["p"].sum(), 1.0, rtol=1e-14)


@pytest.mark.parametrize("K", [7, 64, 256])
def test_categorical_axis_step_equals_the_minimal_blr(categorical, K):
    rng = np.random.default_rng(K)
    p, l = rng.dirichlet(np.ones(K)), rng.normal(scale=3.0, size=K)
    for rho in (0.3, 1.0):
        got = categorical.step(categorical.init(p=p), data={"l": l}, rho=rho)["p"]
        np.testing.assert_allclose(got, _minimal_blr(p, l, rho), rtol=1e-12, atol=0)


def test_the_smallest_probability_keeps_its_relative_precision(categorical):
    """A class whose loss is 40 above the others: its new probability is about e^-40 ≈ 4e-18, below the rounding of
    1 − Σ others (which gives 0 or a multiple of 1e-16), and exact to ~1e-15 relative here (against mpmath)."""
    K = 5
    p = np.full(K, 1.0 / K)
    l = np.array([0.1, 0.2, 0.3, 0.4, 40.0])
    got = categorical.step(categorical.init(p=p), data={"l": l}, rho=1.0)["p"]
    mpmath.mp.dps = 50
    z = mpmath.fsum(mpmath.exp(-mpmath.mpf(x)) for x in l)
    want = [float(mpmath.exp(-mpmath.mpf(x)) / z) for x in l]
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    implied = 1.0 - got[:-1].sum()
    assert abs(implied - want[-1]) / want[-1] >= 1.0         # by cancellation: no correct digit
    assert abs(got[-1] - want[-1]) / want[-1] < 1e-14


# ------------------------------------------------------------------------------------ the axis family's μ and Fisher
def _at(e, lam, k, K):
    """A generic-coordinate expression at coordinate k of λ (an array): λ_k and the sums over j evaluated."""
    lk, lj = sp.Symbol("lambda_k", real=True), sp.Symbol("lambda_j", real=True)
    e = e.replace(lambda x: isinstance(x, SumOverComponents), lambda x: sp.Add(*[x.args[0].subs(lj, lam[j])
                                                                               for j in range(K)]))
    e = e.replace(lambda x: isinstance(x, LogSumExpOverComponents),
                  lambda x: sp.log(sp.Add(*[sp.exp(x.args[0].subs(lj, lam[j])) for j in range(K)])))
    return float(e.subs({lk: lam[k], sp.Symbol("K", integer=True, positive=True): K}).evalf(30))


@pytest.mark.parametrize("name,lam", [("dirichlet", [0.5, -0.3, 2.0]), ("categorical", [0.2, -1.5, 0.7])])
def test_axis_family_mean_and_fisher_equal_the_sized_family(name, lam):
    """At K = 3, μ_k = ∂A/∂λ_k and F = diag(d) + c uuᵀ of the axis declaration equal the unrolled family's μ and Fisher
    (the categorical's minimal family: λ_k − λ_K as its natural parameters, K − 1 of them)."""
    K = 3
    fam = axis_family(load_yaml_file(families_dir() / f"{name}.yaml"), sp.Symbol("K", integer=True, positive=True))
    nodes = (SumOverComponents, LogSumExpOverComponents)
    lk, lj = sp.Symbol("lambda_k", real=True), sp.Symbol("lambda_j", real=True)
    mu = np.array([_at(fam.mean(lk, lj, nodes), lam, k, K) for k in range(K)])
    d, c, u = fam.fisher(lk, lj, nodes)
    F = np.diag([_at(d, lam, k, K) for k in range(K)]) + _at(c, lam, 0, K) * np.outer(
        [_at(u, lam, k, K) for k in range(K)], [_at(u, lam, k, K) for k in range(K)])
    unrolled = load_family({"name": name, "K": K})
    nat = np.array(lam) if name == "dirichlet" else np.array(lam[:-1]) - lam[-1]
    at = dict(zip(unrolled.lam, nat))
    want_mu = np.array([float(sp.N(e.subs(at), 30)) for e in unrolled.mu_of_lam])
    want_F = np.array(sp.N(sp.Matrix(unrolled.fisher_matrix()).subs(at), 30), dtype=float)
    n = len(nat)
    np.testing.assert_allclose(mu[:n], want_mu, rtol=1e-12)
    np.testing.assert_allclose(F[:n, :n], want_F, rtol=1e-12)


# --------------------------------------------------------------------------------------------------- bad recipes
@pytest.mark.parametrize("change,message", [
    (("family: categorical", "family: gamma"), "declares no 'axis' section"),
    (("expression: l*theta", "expression: l*theta**2"), "not linear in the statistic theta"),
    (("approximations: [exact]", "approximations: [exact, monte_carlo]"), "approximation 'monte_carlo' does not apply"),
])
def test_bad_axis_recipes_are_located_errors(tmp_path, change, message):
    p = tmp_path / "bad.yaml"
    text = CATEGORICAL.replace(*change)
    p.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as ei:
        derive_record(p)
    assert message in ei.value.message
    assert ei.value.file == str(p) and ei.value.line is not None


def test_generated_categorical_equals_its_symbolic_program(tmp_path, categorical):
    """The generic program evaluated with sympy coordinate by coordinate (blr_derive/verify/sized_axis.py)."""
    p = tmp_path / "categorical_axis.yaml"
    p.write_text(CATEGORICAL, encoding="utf-8")
    recipe, D = derive_record(p)
    for seed in range(3):
        for name, got, want in compare_update(recipe, D, categorical, seed):
            assert name == "p"
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
            np.testing.assert_allclose(got.sum(), 1.0, rtol=1e-14)
