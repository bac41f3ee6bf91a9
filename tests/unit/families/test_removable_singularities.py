"""Removable singularities of derived log-partitions (blr_derive/families/singular.py, core.specialfns.near_point):
points inside Ω where the closed form is 0/0 although A is analytic.  A, μ = ∇A and F = ∇²A must be finite and
correct to ~1e-12 in float64 at the point, on both sides of it and on both sides of the switch to the Taylor
polynomial, in the engine's numeric evaluation and in every target's printed code; references are mpmath at 50
digits (A in closed form, its derivatives by mpmath.diff) and torch.distributions.ContinuousBernoulli (which uses its
own Taylor branch near p = 1/2)."""
import importlib.util
import os

import mpmath
import numpy as np
import pytest
import sympy as sp
import torch
import yaml

from blr_derive import api
from blr_derive.codegen.backends.jax.printer import JaxPrinter
from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
from blr_derive.codegen.backends.torch.printer import ElementwisePrinter, ForeachCompiler
from blr_derive.core.errors import SpecError
from blr_derive.core.specialfns import near_point
from blr_derive.families.library import load_family
from conftest import FUNCTION_TARGETS

mpmath.mp.dps = 50


def _cb_A(x):
    return mpmath.mpf(0) if x == 0 else mpmath.log(mpmath.expm1(x) / x)


def cb_reference(lam):
    """A, A', A'' of log((e^λ − 1)/λ) at 50 digits (derivatives at λ = 0 by mpmath's limit-free differentiation of
    the analytic function: mpmath.diff evaluates around the point, never at it)."""
    x = mpmath.mpf(lam)
    f = lambda t: _cb_A(t) if t != 0 else mpmath.mpf(0)       # noqa: E731
    return np.array([float(f(x)), float(mpmath.diff(f, x, 1)), float(mpmath.diff(f, x, 2))])


#: λ at, next to and on both sides of the singular point 0 and of the switch radius (1/8 for this family)
LAMS = [0.0, 5e-324, -1e-300, 1e-12, -1e-9, 1e-4, -3e-3, 0.124999999, 0.125, 0.1250000001, -0.125, -0.12500001,
        0.2, -0.7, 1.0, -3.0, 12.0, -30.0]


def _err(got, want):
    return float(np.max(np.abs(np.asarray(got, dtype=float) - want) / np.maximum(1.0, np.abs(want))))


@pytest.fixture(scope="module")
def cb():
    return load_family("continuous_bernoulli")


def test_the_continuous_bernoulli_A_is_guarded_at_its_uniform_point(cb):
    (node,) = [n for n in sp.preorder_traversal(cb.A) if isinstance(n, near_point)]
    general, coefficients, x, c, r = node.args
    assert (x, c) == (cb.lam[0], 0) and 0 < r <= sp.Rational(1, 2)
    # the Taylor coefficients of log((e^λ − 1)/λ) = λ/2 + λ²/24 − λ⁴/2880 + ... (Bernoulli numbers B_2k/(2k (2k)!))
    assert list(coefficients[:5]) == [0, sp.Rational(1, 2), sp.Rational(1, 24), 0, sp.Rational(-1, 2880)]
    assert str(cb.A) == "log((exp(lambda1) - 1)/lambda1)"        # the listing shows the closed form
    assert any(w == "removable singularity" for w, _ in cb.steps)


@pytest.mark.parametrize("lam", LAMS)
def test_engine_numeric_A_mu_F_at_and_around_the_point(cb, lam):
    num = cb.numeric()
    got = [num.A([lam]), num.grad([lam])[0], num.hess([lam])[0][0]]
    assert _err(got, cb_reference(lam)) < 1e-12
    exact = [cb.evaluate(cb.A, {cb.lam[0]: lam}), cb.evaluate(cb.mu_of_lam[0], {cb.lam[0]: lam}),
             float(cb.fisher_at({cb.lam[0]: lam})[0, 0])]
    assert _err(exact, cb_reference(lam)) < 1e-13


@pytest.mark.parametrize("p", [0.5, 0.5 + 1e-4, 0.5 - 1e-4, 0.5001, 0.4999999, 0.531, 0.469, 0.9, 0.02])
def test_mean_and_variance_match_torch_at_and_near_p_one_half(cb, p):
    """torch's ContinuousBernoulli switches to its own Taylor expansion for p in (0.499, 0.501)."""
    law = torch.distributions.ContinuousBernoulli(probs=torch.tensor(p, dtype=torch.float64))
    mod = cb.numeric()
    mean = float(cb.evaluate(cb.mu_ord[0], {cb.params["p"].symbol: p}))
    assert mean == pytest.approx(float(law.mean), rel=1e-12, abs=1e-12)
    var = float(mod.hess([float(np.log(p / (1 - p)))])[0][0])
    assert var == pytest.approx(float(law.variance), rel=1e-11, abs=1e-12)


# ---------------------------------------------------------------------------------------------- printed code


def _exprs(fam):
    return [fam.A, fam.mu_of_lam[0], sp.diff(fam.mu_of_lam[0], fam.lam[0])]


def test_numpy_printer(cb):
    pr = BLRNumPyPrinter()
    codes = [pr.doprint(e.xreplace({cb.lam[0]: sp.Symbol("x", real=True)})) for e in _exprs(cb)]
    import scipy.special  # noqa: F401 - the printed code names it
    for lam in LAMS:
        with np.errstate(invalid="raise", divide="raise"):     # the select never computes the 0/0 it discards
            got = [eval(c, {"numpy": np, "scipy": __import__("scipy"), "x": np.float64(lam)}) for c in codes]
        assert _err(got, cb_reference(lam)) < 1e-12, lam


def test_torch_printers(cb):
    x = sp.Symbol("x", real=True)
    exprs = [e.xreplace({cb.lam[0]: x}) for e in _exprs(cb)]
    X = torch.tensor(LAMS, dtype=torch.float64)
    want = np.array([cb_reference(v) for v in LAMS]).T
    for e, w in zip(exprs, want):
        got = eval(ElementwisePrinter().doprint(e), {"torch": torch, "math": __import__("math"), "x": X}).numpy()
        assert _err(got, w) < 1e-12
        comp = ForeachCompiler({x}, indent="")
        out = sp.Symbol("out")
        comp.assign(out, e)
        ns = {"torch": torch, "x": [X[:7], X[7:]], "math": __import__("math")}
        exec("\n".join(comp.lines), ns)
        assert _err(torch.cat(list(ns["out"])).numpy(), w) < 1e-12


@pytest.mark.slow
def test_jax_printer(cb, x64):
    import jax
    import jax.numpy as jnp
    X = jnp.asarray(LAMS, dtype=jnp.float64)
    want = np.array([cb_reference(v) for v in LAMS]).T
    for e, w in zip(_exprs(cb), want):
        code = JaxPrinter().doprint(e.xreplace({cb.lam[0]: sp.Symbol("x", real=True)}))
        got = np.asarray(eval(code, {"jnp": jnp, "jax": jax, "x": X}))
        assert _err(got, w) < 1e-12
        grad = jax.vmap(jax.grad(lambda v: eval(code, {"jnp": jnp, "jax": jax, "x": v})))(X)
        assert np.all(np.isfinite(np.asarray(grad)))          # no NaN gradient from the discarded branch


def test_triton_printer_in_the_interpreter(cb, tmp_path):
    """The Triton target computes in float32 (its correctly rounded tl.div_rn/tl.sqrt_rn take fp32 only): the select
    is finite at the point and next to it, and within float32 rounding of the reference elsewhere (the closed form
    loses ~12 eps32/r² of F just outside the switch radius r = 1/8, which is chosen for float64)."""
    os.environ["TRITON_INTERPRET"] = "1"
    from blr_derive.codegen.backends.triton.printer import HELPERS, TritonPrinter
    X = np.array(LAMS + [0.0] * (32 - len(LAMS)))
    want = np.array([cb_reference(v) for v in X]).T
    for i, (e, tol) in enumerate(zip(_exprs(cb), (2e-6, 2e-6, 2e-4))):
        p = TritonPrinter()
        body = p.doprint(e.xreplace({cb.lam[0]: sp.Symbol("x", real=True)}))
        src = ["import triton", "import triton.language as tl", ""] + [HELPERS[h] for h in sorted(p.helpers)]
        src += ["@triton.jit", "def kernel(X, OUT, N: tl.constexpr):", "    offs = tl.arange(0, N)",
                "    x = tl.load(X + offs)", f"    tl.store(OUT + offs, {body})", ""]
        path = tmp_path / f"_near_point_{i}.py"
        path.write_text("\n".join(src))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        xs = torch.tensor(X, dtype=torch.float32)
        out = torch.empty_like(xs)
        mod.kernel[(1,)](xs, out, N=32)
        got = out.double().numpy()
        assert np.all(np.isfinite(got))
        assert _err(got, want[i]) < tol
        inside = np.abs(X) < 0.1                  # the polynomial branch: float32 rounding only
        assert _err(got[inside], want[i][inside]) < 2e-6


@pytest.mark.slow
def test_generated_numpy_and_jax_modules(x64):
    """log_partition, expectation_parameters and fisher_information of a generated module (numeric μ → λ inverse)
    at the singular point and around it; ordinary_from_expectation finds p = 1/2 from μ = 1/2."""
    recipe = yaml.safe_dump({"name": "cb_quad", "family": "continuous_bernoulli", "loss": {"expression": "theta**2"},
                             "hyperparameters": {"rho": 0.5}, "approximations": [{"quadrature": {"nodes": 33}}]})
    for target in FUNCTION_TARGETS:
        mod = api.derive(recipe).compile(target)
        for lam in LAMS:
            with np.errstate(invalid="raise", divide="raise"):
                got = [float(mod.log_partition([lam])), float(np.asarray(mod.expectation_parameters([lam]))[0]),
                       float(np.asarray(mod.fisher_information([lam]))[0, 0])]
            assert _err(got, cb_reference(lam)) < 1e-12, (target, lam)
        assert float(mod.ordinary_from_expectation([0.5])["p"]) == pytest.approx(0.5, abs=1e-12)


# ---------------------------------------------------------------------------------------------- other families


def _family(tmp_path, text, name="fam.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return load_family(str(path))


TRUNCATED_EXPONENTIAL = """
name: truncated_exponential
description: the exponential law with rate r (any sign) truncated to (0, b) for a known b, in x = theta/b on (0, 1)
variable: x
support: unit_interval
parameters:
  r: {domain: real, description: the rate (any sign; 0 is the uniform law)}
  b: {domain: positive, fixed: true, description: the known end of the support}
sufficient_statistics: [x]
natural_parameters: [-r*b]
base_measure: b
"""


@pytest.fixture(scope="module")
def truncated_exponential(tmp_path_factory):
    return _family(tmp_path_factory.mktemp("trexp"), TRUNCATED_EXPONENTIAL)


@pytest.mark.slow
@pytest.mark.parametrize("b", [0.5, 2.5])
@pytest.mark.parametrize("lam", [0.0, 1e-10, -1e-7, 0.01, -0.049, 0.3, -2.0, 4.0])
def test_truncated_exponential_at_a_vanishing_rate(truncated_exponential, b, lam):
    """A(λ) = log((e^λ − 1)/λ) + log b, λ = −rb: 0/0 at r → 0 for every b; the Taylor polynomial's constant term
    depends on the fixed parameter b."""
    fam = truncated_exponential
    bsym = fam.params["b"].symbol
    want = cb_reference(lam) + np.array([np.log(b), 0.0, 0.0])
    num = fam.numeric()
    got = [num.A([lam], {bsym: b}), num.grad([lam], {bsym: b})[0], num.hess([lam], {bsym: b})[0][0]]
    assert _err(got, want) < 1e-12
    r = -lam / b
    assert fam.evaluate(fam.mu_ord[0], {fam.params["r"].symbol: r, bsym: b}) == pytest.approx(want[1], abs=1e-13)


@pytest.mark.slow
def test_a_removable_singularity_away_from_zero(tmp_path):
    """T = log(1 + θ) on (0, 1): A(λ) = log((2^{λ+1} − 1)/(λ + 1)), 0/0 at λ = −1, the guard is placed there."""
    fam = _family(tmp_path, """
name: log1p_power
variable: theta
support: unit_interval
parameters:
  r: {domain: real}
sufficient_statistics: [log(1 + theta)]
natural_parameters: [r]
""")
    (node,) = [n for n in sp.preorder_traversal(fam.A) if isinstance(n, near_point)]
    assert node.args[3] == -1

    def f(t):
        return mpmath.log(mpmath.quad(lambda th: mpmath.exp(t * mpmath.log1p(th)), [0, 1]))
    num = fam.numeric()
    for lam in (-1.0, -1 + 1e-9, -1 - 2e-5, -0.93, -1.2, 0.5):
        x = mpmath.mpf(lam)
        want = np.array([float(f(x)), float(mpmath.diff(f, x)), float(mpmath.diff(f, x, 2))])
        got = [num.A([lam]), num.grad([lam])[0], num.hess([lam])[0][0]]
        assert _err(got, want) < 1e-12, lam


@pytest.mark.slow
def test_a_singularity_without_a_taylor_series_is_a_located_error(tmp_path, monkeypatch):
    """When no polynomial of the allowed degree reaches the accuracy, the family is refused with its file and line
    (here the degree bound is lowered to make the continuous Bernoulli's series too short)."""
    from blr_derive.families import library, singular
    text = open(load_family("continuous_bernoulli").file).read()
    monkeypatch.setattr(singular, "ORDERS", (2,))
    monkeypatch.setattr(singular, "MAX_ORDER", 2)
    # derived afresh under the lowered bound: not the family the caches hold for the same declaration
    monkeypatch.setattr(library, "_FAMILY_CACHE", type(library._FAMILY_CACHE)())
    monkeypatch.setenv("BLR_DERIVE_CACHE", "0")
    with pytest.raises(SpecError) as err:
        _family(tmp_path, text)
    assert "0/0 at lambda1 = 0" in str(err.value) and "fam.yaml:" in str(err.value)


POSITIVE_RATE = """
name: trunc_exp_positive
variable: x
support: unit_interval
parameters:
  b: {domain: positive, description: the rate}
sufficient_statistics: [x]
natural_parameters: [-b]
"""


@pytest.mark.slow
def test_a_removable_singularity_on_the_boundary_of_the_domain(tmp_path):
    """A rate declared positive puts λ = −b = 0, where A = log((1 − e^λ)/(−λ)) is 0/0, on the boundary of Ω: the
    Taylor polynomial about it serves the side inside Ω (F = 1/λ² − e^λ/(1 − e^λ)² was 1e16 − 1e16 = 0 for 1/12 at
    b = 1e-8 in the closed form), and the closed form stays beyond the radius."""
    fam = _family(tmp_path, POSITIVE_RATE)
    (node,) = [n for n in sp.preorder_traversal(fam.A) if isinstance(n, near_point)]
    assert node.args[2:4] == (fam.lam[0], 0)
    num = fam.numeric()
    for b in (1e-300, 1e-12, 1e-8, 1e-3, 0.02, 0.5, 3.0, 40.0):
        want = cb_reference(-b)
        got = [num.A([-b]), num.grad([-b])[0], num.hess([-b])[0][0]]
        assert _err(got, want) < 1e-12, b


@pytest.mark.slow
def test_a_boundary_singularity_without_a_taylor_series_is_left_as_it_is(tmp_path):
    """An exponential's A = −log(−λ) is singular at its boundary λ = 0 (no Taylor series): no guard, no error."""
    fam = _family(tmp_path, """
name: exponential_rate
variable: x
support: positive
parameters:
  b: {domain: positive}
sufficient_statistics: [x]
natural_parameters: [-b]
""")
    assert not fam.A.has(near_point)
    assert fam.numeric().A([-1e-8]) == pytest.approx(-np.log(1e-8), rel=1e-15)


def test_a_boundary_point_is_guarded_only_where_A_settles_there():
    """singular._extends: as λ approaches a boundary point c from inside Ω, A, μ and F settle where A extends
    analytically through c (the truncated exponential's log((e^λ − 1)/λ) at 0, a removable 0/0), and do not at a
    logarithm (−log(−λ) at 0) or a pole (log Γ(λ + 1) at −1: the Gamma family at shape 0, whose series sympy
    searched for 30 s before this test)."""
    from types import SimpleNamespace

    from blr_derive.families.singular import _extends, _Quantities
    lam = sp.Symbol("lambda1", real=True)
    fam = SimpleNamespace(lam=[lam], fixed_params=[])
    rows = [{lam: 0.0}]
    assert _extends(_Quantities(fam, sp.log((sp.exp(lam) - 1) / lam)), lam, 0, rows, (1, -1))
    assert not _extends(_Quantities(fam, -sp.log(-lam)), lam, 0, rows, (-1,))
    assert not _extends(_Quantities(fam, sp.loggamma(lam + 1)), lam, -1, [{lam: -1.0}], (1,))
    assert not _extends(_Quantities(fam, 1 / lam), lam, 0, rows, (1,))
