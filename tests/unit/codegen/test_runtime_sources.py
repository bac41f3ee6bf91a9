"""The runtime sources (issue 38, item 1): what every generated module of a target shares is ordinary Python in
codegen/runtime/ and codegen/backends/<target>/runtime.py, copied into the generated text by codegen/source.py.
Here the copy is the source byte for byte, and the helpers are tested as functions against independent values
(the generated modules' behaviour is tested through them elsewhere: tests/golden, tests/peers)."""
from __future__ import annotations

import ast
import inspect
import math
from pathlib import Path

import jax
import numpy as np
import pytest
import scipy.special
import torch

from blr_derive.codegen import source
from blr_derive.codegen.backends.jax import runtime as jax_rt
from blr_derive.codegen.backends.numpy import runtime as numpy_rt
from blr_derive.codegen.backends.torch import runtime as torch_rt
from blr_derive.codegen.backends.triton import runtime as triton_rt
from blr_derive.codegen.runtime import arrays as arrays_rt
from blr_derive.codegen.runtime import sampling as sampling_rt
from blr_derive.core.errors import CodegenError

MODULES = (torch_rt, triton_rt, numpy_rt, jax_rt, arrays_rt, sampling_rt)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 2)[-2])
def test_a_copied_definition_is_its_source_text(module):
    """Every top-level function and class: the copy equals what Python itself reads as its source."""
    path = Path(module.__file__)
    names = [n.name for n in ast.parse(path.read_text(encoding="utf-8")).body
             if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert names
    for name in names:
        obj = getattr(module, name)
        want = inspect.getsource(obj.fn if hasattr(obj, "fn") and not inspect.isclass(obj) else obj)
        assert source.definition(path, name) + "\n" == want, name


def test_assignments_methods_and_renamed_variants():
    path = Path(torch_rt.__file__)
    assert source.definition(path, "_COMPILED") == "_COMPILED = {}"
    layout = Path(triton_rt.__file__)
    method = source.definition(layout, "_Layout.buffer")
    assert method.startswith("    def buffer(self, name):") and "torch.zeros(self.total" in method
    plain = source.definition(path, "_buckets_plain as _buckets")
    assert plain.startswith("def _buckets(states, foreach") and "_buckets_plain" not in plain
    assert source.definitions(path, "_sub", "_flat") == source.definition(path, "_sub") + "\n\n\n" + \
        source.definition(path, "_flat")


def test_unknown_names_are_refused():
    path = Path(torch_rt.__file__)
    with pytest.raises(CodegenError, match="defines no '_nothing'"):
        source.definition(path, "_nothing")
    with pytest.raises(CodegenError, match="names no definition"):
        source.definition(path, "_sub as")
    with pytest.raises(CodegenError, match="not a function or class"):
        source.definition(path, "_COMPILED as _other")
    with pytest.raises(CodegenError, match="no runtime source 'elsewhere'"):
        source.Sources({"own": path})("elsewhere", "_sub")


# ----------------------------------------------------------------------------- the helpers as functions

def test_torch_dtype_policy_and_complex_views():
    h = torch.ones(3, dtype=torch.float16)
    f = torch.ones(3, dtype=torch.float64)
    out = torch_rt._work([h, f])
    assert out[0].dtype == torch.float32 and out[1] is f
    z = torch.tensor([1 + 2j, 3 - 4j])
    r = torch_rt._real([z, None, f])
    assert r[0].tolist() == [[1.0, 2.0], [3.0, -4.0]] and r[1] is None and r[2] is f
    # _complex decides for a whole step whether any list needs _real: a complex parameter or gradient anywhere
    assert torch_rt._complex([f, None], [h]) is False and torch_rt._complex([f], [None, z]) is True
    plain = [f, None]
    assert torch_rt._real(plain, False) is plain and torch_rt._real([z], True)[0].shape == (2, 2)
    assert torch_rt._start(0.5, z) == complex(0.5, 0.5) and torch_rt._start(0.5, f) == 0.5
    assert torch_rt._scalar(torch.tensor(2.5)) == 2.5 and torch_rt._scalar(3) == 3


def test_torch_buckets_group_by_step_and_host_numbers():
    states = [{"step": torch.tensor(3.0), "mu": torch.tensor(0.5)}, {"step": torch.tensor(1.0), "mu": 0.5},
              {"step": torch.tensor(3.0), "mu": torch.tensor(0.25)}]
    assert torch_rt._buckets(states, None, scalars=("mu",)) == [(3, [0]), (1, [1]), (3, [2])]
    assert torch_rt._buckets_plain(states, None) == [(3, [0, 2]), (1, [1])]
    assert torch_rt._buckets_plain(states[:1] * 2, None) == [(3, None)]
    assert torch_rt._buckets_plain(states, False) == [(3, [0]), (1, [1]), (3, [2])]
    assert torch_rt._buckets_plain(states, None, fresh=[True, False, True]) == [(1, [0, 2]), (2, [1])]
    torch_rt._set_host_value(states, "mu", 0.75)
    assert [torch_rt._host_value(st["mu"]) for st in states] == [0.75, 0.75, 0.75]
    assert states[1]["mu"].dim() == 0


def test_torch_multi_tensor_helpers():
    a, b = [torch.tensor([1.0, -2.0]), torch.tensor([3.0])], [torch.tensor([0.0, 0.0]), torch.tensor([5.0])]
    assert [t.tolist() for t in torch_rt._foreach_bound("maximum", a, b)] == [[1.0, 0.0], [5.0]]
    torch_rt._foreach_bound_("minimum", a, 0.5)
    assert [t.tolist() for t in a] == [[0.5, -2.0], [0.5]]
    dst = [torch.zeros(2), torch.zeros(1)]
    torch_rt._copy_back(dst, [torch.ones(2), dst[1]])
    assert dst[0].tolist() == [1.0, 1.0]
    assert torch_rt._sub([10, 20, 30], [2, 0]) == [30, 10] and torch_rt._sub(None, [1]) is None
    steps = [{"step": torch.tensor(1.0)}, {"step": torch.tensor(4.0)}]
    torch_rt._count_step(steps)
    assert [s["step"].item() for s in steps] == [2.0, 5.0]


def test_oracle_values_are_checked_before_use():
    p = torch.zeros(2)
    p.hess = torch.ones(3)
    with pytest.raises(ValueError, match=r"p.hess has shape \(3,\), the parameter \(2,\)"):
        torch_rt._oracle([p], lambda q: q.hess, "hess")
    with pytest.raises(ValueError, match=r"p.hess has shape \(3,\)"):
        triton_rt._oracle(p, lambda q: q.hess, "hess")
    with pytest.raises(RuntimeError, match="needs p.fisher"):
        triton_rt._oracle(p, lambda q: q.fisher, "fisher")


def test_ranks_lowest_first_ties_in_order_nan_last():
    assert sampling_rt._ranks([3.0, 1.0, math.nan, 1.0, 2.0]) == [4, 1, 5, 2, 3]


def test_triton_layout_aligns_every_parameter():
    params = [torch.zeros(5), torch.zeros(2, 10), torch.zeros(0)]
    lay = triton_rt._Layout(params)
    assert lay.offsets == [0, 16, 48] and lay.total == 48
    assert lay.buffer("m").shape == (48,) and lay.buffer("m") is lay.buffer("m")
    chunks = lay.chunks([0, 1])
    assert chunks.tolist() == [[0, 0, 5, 0], [1, 0, 20, 16]]
    with pytest.raises(RuntimeError, match="float32, bfloat16 or float16"):
        triton_rt._Layout([torch.zeros(2, dtype=torch.float64)])


def test_array_checks_and_solves():
    numpy_rt.SHAPES.update({"m": ("d",), "S": ("d", "d")})
    numpy_rt.SYMMETRIC = frozenset({"S"})
    try:
        dims = {}
        assert numpy_rt._array("m", [1.0, 2.0], dims).shape == (2,) and dims == {"d": 2}
        with pytest.raises(ValueError, match="S has shape"):
            numpy_rt._array("S", np.eye(3), dims)
        with pytest.raises(ValueError, match="must be symmetric"):
            numpy_rt._array("S", [[1.0, 2.0], [0.0, 1.0]], dims)
        with pytest.raises(ValueError, match="oracle 'hess' returned NaN at S\\[0, 1\\]"):
            numpy_rt._array("S", [[1.0, math.nan], [math.nan, 1.0]], dims, oracle="hess")
    finally:
        numpy_rt.SHAPES.clear()
        numpy_rt.SYMMETRIC = frozenset()
    A = np.array([[4.0, 1.0], [1.0, 3.0]])
    b = np.array([1.0, 2.0])
    assert np.allclose(A @ numpy_rt._spd_solve(A, b), b, rtol=0, atol=1e-14)
    assert np.allclose(np.asarray(jax_rt._spd_solve(A, b)), np.linalg.solve(A, b), rtol=1e-6)
    # a symmetric matrix that is not positive definite (a sum of sites: the federated server's −Σ⁻¹/2 block) is
    # solved too, eagerly and under jit (before: scipy's Cholesky raised, jax's returned NaN)
    for N in (-A, np.array([[1.0, 2.0], [2.0, 1.0]])):
        assert np.allclose(N @ numpy_rt._spd_solve(N, b), b, rtol=0, atol=1e-14)
        assert np.allclose(np.asarray(jax_rt._spd_solve(N, b)), np.linalg.solve(N, b), rtol=1e-6)
        assert np.allclose(np.asarray(jax.jit(jax_rt._spd_solve)(N, b)), np.linalg.solve(N, b), rtol=1e-6)
    assert np.allclose(np.asarray(jax.jit(jax_rt._spd_solve)(A, b)), np.linalg.solve(A, b), rtol=1e-6)
    L = np.linalg.cholesky(A)
    assert np.allclose(L.T @ numpy_rt._tri_solve(L, b, 1), b, rtol=0, atol=1e-14)
    w, V = np.linalg.eigh(A)
    assert np.allclose(numpy_rt._expm_sym(A), V @ np.diag(np.exp(w)) @ V.T, rtol=1e-13)


def test_quadrature_and_gauss_hermite():
    u, w = arrays_rt._tanh_sinh(41)
    assert abs(w.sum() - 1) < 1e-15 and np.all((0 < u) & (u < 1))
    assert abs(w @ u**2 - 1 / 3) < 1e-14                      # ∫_0^1 u² du (double-exponential convergence)
    mean, var = np.array([0.5, -1.0]), np.array([2.0, 0.25])
    assert np.allclose(numpy_rt._gauss_hermite(lambda x: x**2, mean, var, 10), mean**2 + var, rtol=1e-12)
    assert np.allclose(numpy_rt._gauss_hermite_stein(lambda x: x**3, mean, var, 10), 3 * (mean**2 + var), rtol=1e-12)
    with pytest.raises(TypeError, match="step\\(\\) needs data y"):
        arrays_rt._need({"x": 1}, ["x", "y"], "data")


@pytest.mark.parametrize("nodes", [40, 300, 301, 400, 1000])
def test_gauss_hermite_with_many_nodes_matches_scipys_rule(nodes, x64):
    """A `nodes` hyperparameter above ~360 gave NaN weights (numpy's hermegauss recurrence overflows), so the step
    of a gauss_hermite recipe (Student-t regression) was NaN; above 300 the runtimes use Golub-Welsch.  Reference:
    scipy.special.roots_hermitenorm; E[log(1 + x²/3)] for x ~ N(1.9, 7.84) (observed agreement 6e-15)."""
    import scipy.special
    mean, var = np.array([1.9]), np.array([7.84])
    f = lambda x: np.log1p(x * x / 3)                                   # noqa: E731
    z, w = scipy.special.roots_hermitenorm(nodes)
    want = f(1.9 + 2.8 * z) @ w / math.sqrt(2 * math.pi)
    want_stein = f(1.9 + 2.8 * z) @ (w * z) / math.sqrt(2 * math.pi) / 2.8
    for rt in (numpy_rt, jax_rt):
        assert abs(float(rt._gauss_hermite(f, mean, var, nodes)[0]) - want) < 1e-13
        assert abs(float(rt._gauss_hermite_stein(f, mean, var, nodes)[0]) - want_stein) < 1e-13


def test_gauss_hermite_nodes_are_computed_once_per_count_and_kept_read_only():
    """The 1001-node rule's dense eigendecomposition took 19 s on a loaded 2-core machine and a step read it twice
    (ten steps of a 30-row logistic regression: 285 s, 18 s with the rule kept).  Kept per count, read-only, and
    the same numbers as scipy's rule (5e-14 here at 1001 nodes: the Golub-Welsch branch)."""
    import scipy.special
    first = arrays_rt._hermite_nodes(1001)
    again = arrays_rt._hermite_nodes(1001.0)
    assert again[0] is first[0] and again[1] is first[1]
    assert not first[0].flags.writeable and not first[1].flags.writeable
    z, w = scipy.special.roots_hermitenorm(1001)
    assert np.max(np.abs(first[0] - z)) < 1e-10 and abs(first[1].sum() - math.sqrt(2 * math.pi)) < 1e-12
    assert np.max(np.abs(first[1] - w)) < 1e-13 * np.max(w)
    small = arrays_rt._hermite_nodes(12)
    assert small[0] is not first[0] and len(small[0]) == 12
    assert np.allclose(small[1], np.polynomial.hermite_e.hermegauss(12)[1], rtol=0, atol=0)


def test_jax_gammaincinv_against_scipy():
    a = np.array([0.3, 1.0, 2.5, 40.0])
    p = np.array([1e-6, 0.3, 0.7, 0.999])
    got = np.asarray(jax_rt._gammaincinv(a, p))
    assert np.allclose(got, scipy.special.gammaincinv(a, p), rtol=1e-5)


def test_jax_conditions_pick_in_python_unless_traced():
    import jax
    import jax.numpy as jnp
    assert jax_rt._where(True, "a", "b") == "a" and jax_rt._and(True, False) is False and jax_rt._not(False) is True
    assert jax_rt._or(False, True) is True
    traced = jax.jit(lambda c, x: jax_rt._where(jax_rt._and(c, jax_rt._not(c < 0)), x, -x))
    assert traced(jnp.array(1.0) > 0, jnp.array([2.0])).tolist() == [2.0]
    tree = {"a": jnp.zeros(2), "b": [jnp.ones(1)]}
    treedef = jax.tree_util.tree_structure(tree)
    assert jax_rt._leaves(treedef, None) == [None, None]
    assert jax_rt._tree(treedef, [None, None]) is None
    back = jax_rt._tree(treedef, jax_rt._leaves(treedef, tree))
    assert back["b"][0].tolist() == [1.0]


@pytest.mark.parametrize("rt", [numpy_rt, jax_rt], ids=["numpy", "jax"])
def test_domain_checks_name_the_value_component_and_step(rt):
    """_check_domain: silent inside the domain; outside, a FloatingPointError naming the value, its entry or
    component and the step (the smallest eigenvalue of a matrix that is not positive definite); CHECK_DOMAINS = False
    switches it off."""
    rt._check_domain("s", [1.0, 2.0], "positive", None, 3, "hint")
    rt._check_domain("S", [[2.0, 1.0], [1.0, 2.0]], "positive_definite", None, 3, "hint")
    with pytest.raises(FloatingPointError, match=r"^step\(\): the new s is not positive \(value -0\.5 at index "
                                                 r"\(1,\)\) at step 3: the update left the family; hint$"):
        rt._check_domain("s", [1.0, -0.5], "positive", None, 3, "hint")
    with pytest.raises(FloatingPointError, match=r"the new s of component 2 is not a number \(value nan\).*gave NaN.*; hint$"):
        rt._check_domain("s", math.nan, "positive", 2, None, "hint")
    stack = np.array([np.eye(2), [[1.0, 2.0], [2.0, 1.0]]])           # eigenvalues of the second: 3 and -1
    with pytest.raises(FloatingPointError, match=r"^server_step\(\): the new S of component 2 \(of 2\) is not "
                                                 r"positive definite \(smallest eigenvalue -1\)"):
        rt._check_domain("S", stack, "positive_definite", "axis", None, "hint", where="server_step")
    rt.CHECK_DOMAINS = False
    try:
        rt._check_domain("s", [-1.0], "positive", None, None, "hint")
    finally:
        rt.CHECK_DOMAINS = True


class _TorchArrays:
    """The torch runtime's eigenbasis helpers on numpy arrays (float64 tensors in, numpy arrays out)."""

    def __getattr__(self, name):
        fn = getattr(torch_rt, name)
        return lambda *a: fn(*[torch.from_numpy(np.asarray(x)) for x in a]).numpy()


@pytest.mark.parametrize("rt", [numpy_rt, jax_rt, _TorchArrays()], ids=["numpy", "jax", "torch"])
def test_eigenbasis_helpers(rt, x64):
    """_eigenbasis: eigenvectors by decreasing eigenvalue; _power_basis: the Q factor of the QR of S Q with the
    columns in the order of decreasing diag(Qᵀ S Q) (checked as Q R = S Q Π with R upper triangular, and by
    iterating it to the eigenbasis); _reordered: rows and columns in those orders."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5, 7))
    S = X @ X.T
    Q = rt._eigenbasis(S)
    w = np.linalg.eigvalsh(S)[::-1]
    np.testing.assert_allclose(np.asarray(S @ Q), np.asarray(Q) * w, atol=1e-12)
    Q0 = np.linalg.qr(rng.normal(size=(5, 5)))[0]
    P = S @ Q0
    order = np.argsort(-np.diag(Q0.T @ S @ Q0))
    np.testing.assert_array_equal(np.asarray(rt._rayleigh_order(S, Q0)), order)
    Qp = np.asarray(rt._power_basis(S, Q0))
    Rf = Qp.T @ P[:, order]
    np.testing.assert_allclose(np.tril(Rf, -1), 0, atol=1e-12)
    np.testing.assert_allclose(Qp.T @ Qp, np.eye(5), atol=1e-13)
    Qi = Q0
    for _ in range(300):
        Qi = np.asarray(rt._power_basis(S, Qi))
    np.testing.assert_allclose(np.abs(Qi), np.abs(np.asarray(Q)), atol=1e-8)
    Y = rng.normal(size=(5, 3))
    SR = np.diag([1.0, 3.0, 2.0])
    np.testing.assert_array_equal(np.asarray(rt._reordered(Y, S, Q0, SR, np.eye(3))), Y[order][:, [1, 2, 0]])


def test_torch_ufunc_on_tensors_and_host_numbers():
    """_ufunc: torch's function where an argument is a tensor (numbers as tensors of its dtype), the host's where all
    are numbers (a condition on hyperparameters and the step count stays a Python bool)."""
    x = torch.tensor([0.25, 4.0], dtype=torch.float64)
    assert torch_rt._ufunc("sqrt", 2.25) == 1.5 and isinstance(torch_rt._ufunc("sqrt", 2.25), float)
    assert torch_rt._ufunc("equal", torch_rt._ufunc("mod", 6, 3), 0) is True
    assert torch_rt._ufunc("greater", 0.0, 0) is False
    np.testing.assert_array_equal(torch_rt._ufunc("sqrt", x).numpy(), [0.5, 2.0])
    m = torch_rt._ufunc("minimum", 1.0, x)
    assert m.dtype == torch.float64 and m.tolist() == [0.25, 1.0]
    w = torch_rt._ufunc("where", x > 1, 7.0, x)
    assert w.dtype == torch.float64 and w.tolist() == [0.25, 7.0]
    assert torch_rt._ufunc("logaddexp", 0.0, 0.0) == pytest.approx(math.log(2.0), abs=1e-15)
    assert set(torch_rt._UFUNC_HOST) <= set(torch_rt._UFUNC_TORCH)
