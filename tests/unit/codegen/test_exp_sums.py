"""The printers' lowering of sums of exponentials (codegen/expsums.py): the rewritten expression has the value of the
original (30 digits); a logarithm of a positive sum of exponentials becomes a log-sum-exp (logaddexp, softplus), a
quotient of such sums is normalized by its largest exponent, and nothing else changes; the family modules whose
log-partition is a log of a sum of exponentials (Bernoulli, binomial, categorical, multinomial, continuous Bernoulli)
are finite and right at |λ| = 1e3 and 1e4 in numpy and jax against closed forms in mpmath (precision enough for
e^{±1e4}), and equal to the modules printed without the lowering at moderate λ; torch, Triton and the host print the
same forms."""
import importlib.util
import math
import os
import types

import jax
import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

import blr_derive.codegen.printing as printing
from blr_derive.codegen.backends.triton.printer import TritonPrinter
from blr_derive.codegen.expsums import logaddexp, stable_exp_sums
from blr_derive.codegen.printing import HostPrinter
from blr_derive.codegen.registry import emit
from blr_derive.codegen.torch_elementwise import ElementwisePrinter
from blr_derive.core.specialfns import softplus
from blr_derive.families.library import load_family
from blr_derive.ir.build import family_ir

x = sp.Symbol("x", real=True)
y = sp.Symbol("y", real=True)
c = sp.Symbol("c", positive=True)
E = sp.exp


@pytest.mark.parametrize("expr", [
    sp.log(E(x) + E(-x)), sp.log(1 + E(x)), sp.log(1 + E(x) + E(y)), 3 * sp.log(2 + c * E(2 * x)),
    E(x) / (E(x) + E(-x)), (E(x) - E(-x)) / (E(x) + E(-x)), 10 * E(x) / (E(2 * x) + 2 * E(x) + 1),
    (E(y) + 1) * E(x) / (E(x) + E(y) + 1) ** 2, sp.log((E(x) - 1) / x), (E(x) - E(x) / x + 1 / x) / (E(x) - 1),
    sp.log(x ** 2 * (E(x) + E(y)) / (1 + E(-y))), E(x) * (E(x) + 1) / (E(x) + x ** 2)])
def test_the_rewrite_keeps_the_value(expr):
    got = stable_exp_sums(expr)
    for xv, yv in ((0.7, -1.3), (12.0, 3.5), (-4.0, 0.25)):
        at = {x: sp.Float(xv, 40), y: sp.Float(yv, 40), c: sp.Float(1.7, 40)}
        want, have = expr.xreplace(at).evalf(30), got.xreplace(at).evalf(30)
        assert abs(have - want) <= 1e-25 * abs(want), (expr, got)


def test_logarithms_of_positive_sums_become_log_sum_exps():
    assert stable_exp_sums(sp.log(E(x) + E(-x))) == logaddexp(-x, x)
    assert stable_exp_sums(sp.log(1 + E(x))) == softplus(x)
    assert stable_exp_sums(10 * sp.log(1 + E(x))) == 10 * softplus(x)
    assert stable_exp_sums(sp.log(1 + E(x) + E(y))) == logaddexp(softplus(x), y)
    # a positive coefficient joins the exponent; other factors stay inside the logarithm
    assert stable_exp_sums(sp.log(c * E(x) + 1)) == softplus(x + sp.log(c))
    assert stable_exp_sums(sp.log(x ** 2 * (E(x) + E(y)))) == logaddexp(x, y) + sp.log(x ** 2)


def test_quotients_are_normalized_by_the_largest_exponent():
    m = sp.Max(0, x)
    assert stable_exp_sums(E(x) / (E(x) + 1)) == E(x - m) / (E(x - m) + E(-m))
    assert stable_exp_sums(E(x) / (1 - E(x))) == E(x - m) / (E(-m) - E(x - m))
    assert stable_exp_sums(x / (E(x) + 1)) == x * E(-m) / (E(x - m) + E(-m))
    mx = sp.Max(x, -x)
    assert stable_exp_sums(E(x) / (E(x) + E(-x))) == E(x - mx) / (E(x - mx) + E(-x - mx))
    m2 = sp.Max(0, 2 * x)
    assert stable_exp_sums(1 / (E(2 * x) + 1)) == E(-m2) / (E(2 * x - m2) + E(-m2))
    # multiples k·x of one exponent: the largest is at the extreme k, max(0, x, 2x) = max(0, 2x)
    assert stable_exp_sums(10 * E(x) / (E(2 * x) + 2 * E(x) + 1)) == \
        10 * E(x - m2) / (E(2 * x - m2) + 2 * E(x - m2) + E(-m2))
    # exponents that differ by a number share their largest: e^{x+1} + e^{x} is normalized by x + 1
    assert stable_exp_sums(E(x) / (E(x + 1) + E(x))) == E(-1) / (1 + E(-1))
    # the numerator's sums are normalized too: (e^y + 1)e^x/(e^x + e^y + 1)^2 has e^{x + max(0, y) − 2 max(0, x, y)}
    m3, my = sp.Max(0, x, y), sp.Max(0, y)
    assert stable_exp_sums((E(y) + 1) * E(x) / (E(x) + E(y) + 1) ** 2) == \
        E(x + my - 2 * m3) * (E(y - my) + E(-my)) / (E(x - m3) + E(y - m3) + E(-m3)) ** 2
    assert stable_exp_sums(sp.log((E(x) - 1) / x)) == m + sp.log((E(x - m) - E(-m)) / x)


@pytest.mark.parametrize("expr", [
    E(x), E(x) + E(y), E(x) * (E(x) + 1), sp.log(x + 1), sp.log(2 + E(2)), 1 / (E(2) + 1),
    # positive only where e^x < 1: never overflows where the logarithm is real (log1p keeps its accuracy)
    sp.log(1 - E(x)), -3 * sp.log(1 - E(x)),
    # an exponent that already holds the lowering's functions is not rewritten again
    E(x - sp.Max(0, x)) / (E(-sp.Max(0, x)) + 1), E(x - softplus(x)) / (E(-softplus(x)) + 1)])
def test_what_cannot_overflow_into_inf_over_inf_is_left_as_it_is(expr):
    assert stable_exp_sums(expr) == expr


# ------------------------------------------------------------------------------------------------ family modules
def _dps(lam):
    return int(max(abs(float(v)) for v in lam) / 2.3) + 40        # e^{±|λ|} and 40 more digits


def _bernoulli(lam):
    (l,) = lam
    A = mpmath.log(mpmath.exp(l) + mpmath.exp(-l))
    return A, [mpmath.tanh(l)], [[mpmath.sech(l) ** 2]]


def _binomial(lam, n=10):
    (l,) = lam
    s = 1 / (1 + mpmath.exp(-l))
    return n * mpmath.log(1 + mpmath.exp(l)), [n * s], [[n * s / (1 + mpmath.exp(l))]]


def _categorical(lam, n=1):
    Z = 1 + sum(mpmath.exp(v) for v in lam)
    p = [mpmath.exp(v) / Z for v in lam]
    F = [[n * ((p[i] if i == j else 0) - p[i] * p[j]) for j in range(len(lam))] for i in range(len(lam))]
    return n * mpmath.log(Z), [n * v for v in p], F


def _continuous_bernoulli(lam):
    (l,) = lam
    e = mpmath.exp(l)
    return mpmath.log((e - 1) / l), [e / (e - 1) - 1 / l], [[1 / l ** 2 - e / (e - 1) ** 2]]


def _geometric(lam, r=1):
    (l,) = lam
    e = mpmath.exp(l)
    return -r * mpmath.log(1 - e), [r * e / (1 - e)], [[r * e / (1 - e) ** 2]]


#: family -> (closed forms of A, μ, F in mpmath; extreme λ points (in the natural-parameter space) with finite A)
FAMILIES = {
    "bernoulli_logit": (_bernoulli, [(1e3,), (-1e3,), (1e4,), (-1e4,)]),
    "bernoulli": (_bernoulli, [(1e3,), (-1e4,)]),
    "binomial": (_binomial, [(1e3,), (-1e3,), (1e4,), (-1e4,)]),
    "categorical": (_categorical, [(1e3, 1e3), (1e3, -1e3), (-1e4, 1e4), (-1e3, -1e4), (1e4, 1e4 - 1)]),
    "multinomial": (lambda lam: _categorical(lam, 4), [(1e3, -1e3), (1e4, 1e4)]),
    "continuous_bernoulli": (_continuous_bernoulli, [(1e3,), (-1e3,), (1e4,), (-1e4,)]),
    "geometric": (_geometric, [(-1e3,), (-1e4,)]),
    "negative_binomial": (lambda lam: _geometric(lam, 3), [(-1e3,)]),
}
MODERATE = (-30.0, -8.0, -2.0, -0.7, -0.1, 0.3, 1.1, 3.0, 8.0, 30.0)
#: the quotients' dominant terms are e^0 = 1 exactly (the largest exponent taken out), the others e^{d} of exponent
#: differences: a few units in the last place at any |λ| (measured: 2e-16)
EXTREME_RTOL = 1e-14


def _rel(got, want):
    got, want = np.ravel(np.asarray(got, dtype=float)), np.ravel(np.asarray(want, dtype=float))
    assert np.all(np.isfinite(got)), got
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300))


def _module(name, target, lowered=True, monkeypatch=None):
    fam = load_family(name)
    if not lowered:
        monkeypatch.setattr(printing, "stable_exp_sums", lambda e: e)
    try:
        source = emit(family_ir(fam, fam.name), target)
    finally:
        if not lowered:
            monkeypatch.undo()
    mod = types.ModuleType(f"_expsums_{name}_{target}")
    exec(compile(source, f"<{name} {target}>", "exec"), mod.__dict__)
    return fam, source, mod


def _in_domain(fam, lam):
    return all(v < 0 for v in lam) if fam.name in ("geometric", "negative_binomial") else True


@pytest.mark.parametrize("target", ["numpy", "jax"])
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_module_is_finite_and_right_at_extreme_natural_parameters(name, target, request, monkeypatch):
    if target == "jax":
        request.getfixturevalue("x64")
    reference, points = FAMILIES[name]
    fam, source, m = _module(name, target)
    for lam in points:
        with mpmath.workdps(_dps(lam)):
            A, mu, F = reference([mpmath.mpf(v) for v in lam])
            A, mu, F = float(A), [float(v) for v in mu], [[float(v) for v in row] for row in F]
        at = np.array(lam, dtype=float)
        with np.errstate(over="raise", invalid="raise", divide="raise"):     # no intermediate inf, inf − inf, inf/inf
            assert _rel(m.log_partition(at), A) < EXTREME_RTOL, (lam, m.log_partition(at), A)
            assert _rel(m.expectation_parameters(at), mu) < EXTREME_RTOL, (lam, m.expectation_parameters(at), mu)
        # the geometric's F = 1/(4 sinh²(λ/2)) overflows sinh² on the way to 0 (no exponential sum: not lowered)
        with np.errstate(over="ignore" if name in ("geometric", "negative_binomial") else "raise", invalid="raise"):
            got_F = np.asarray(m.fisher_information(at), dtype=float)
            # F underflows (e^{−1000}): equal to the closed form's float, which is 0 or a subnormal
            assert np.all(np.abs(got_F - np.array(F)) <= EXTREME_RTOL * np.max(np.abs(F)) + 1e-300), (lam, got_F, F)
    # at moderate λ: the module printed without the lowering, within 1e-13 (the continuous Bernoulli's F, whose
    # closed form cancels near λ = 0 in either form, against mpmath within that cancellation: ~1e-13/λ²)
    _, before_source, before = _module(name, target, lowered=False, monkeypatch=monkeypatch)
    assert before_source != source
    for lam in (v for v in _moderate(len(fam.lam)) if _in_domain(fam, v)):
        at = np.array(lam, dtype=float)
        assert _rel(m.log_partition(at), before.log_partition(at)) < 1e-13, lam
        assert _rel(m.expectation_parameters(at), before.expectation_parameters(at)) < 1e-13, lam
        got_F = m.fisher_information(at)
        if name == "continuous_bernoulli":
            # F = (e^{2λ} − λ²e^λ − 2e^λ + 1)/(λ²(e^λ − 1)²): numerator and denominator ~λ⁴, cancelling to ~1e-16/λ⁴
            # relative in double precision in either form (the Taylor polynomial takes over at |λ| < 1/8)
            with mpmath.workdps(40):
                want = float(_continuous_bernoulli([mpmath.mpf(lam[0])])[2][0][0])
            bound = max(1e-14, 5e-15 / lam[0] ** 4)
            assert _rel(got_F, want) < bound and _rel(before.fisher_information(at), want) < bound, lam
        else:
            assert _rel(got_F, before.fisher_information(at)) < 1e-13, lam


def _moderate(d):
    if d == 1:
        return [(v,) for v in MODERATE]
    return [(a, b) for a in MODERATE for b in MODERATE[::3]]


def test_bernoulli_logit_module_text():
    _, source, _ = _module("bernoulli_logit", "numpy")
    assert "return float(numpy.logaddexp(-lambda1, lambda1))" in source
    assert "numpy.exp(lambda1 - numpy.maximum(lambda1, -lambda1))/(numpy.exp(lambda1 - numpy.maximum(lambda1, " \
        "-lambda1)) + numpy.exp(-lambda1 - numpy.maximum(lambda1, -lambda1)))" in source


@pytest.mark.parametrize("name, functions", [("binomial", ("expectation_parameters", "fisher_information")),
                                             ("continuous_bernoulli", ("expectation_parameters", "fisher_information")),
                                             ("geometric", ("expectation_parameters",))])
def test_where_the_largest_exponent_is_zero_the_values_are_the_originals_bit_for_bit(name, functions, monkeypatch):
    """λ < 0: the largest exponent max(0, kλ) is 0, e^{a − 0} is e^{a} exactly, and the normalized sums print their
    terms in the original sums' order (codegen/expsums.py print_order): the same operations as the module printed
    without the lowering, so the same doubles, also where the closed form cancels (the continuous Bernoulli's F just
    outside its Taylor radius 1/8, ~1e-12 off in either form)."""
    _, _, m = _module(name, "numpy")
    _, _, before = _module(name, "numpy", lowered=False, monkeypatch=monkeypatch)
    lams = np.concatenate([-np.geomspace(0.125, 30.0, 60), [-0.12500001, -0.7, -3.0]])
    for fn in functions:
        for lam in lams:
            assert np.array_equal(getattr(m, fn)([lam]), getattr(before, fn)([lam])), (fn, lam)


# ------------------------------------------------------------------------------------ the other targets' printers
LAM = (-1e4, -1e3, -30.0, -0.7, 0.0, 0.3, 8.0, 1e3, 1e4)
FORMS = {
    "A": (sp.log(E(x) + E(-x)), lambda v: abs(v) + math.log1p(math.exp(-2 * abs(v)))),
    "mu": (E(x) / (E(x) + E(-x)) - 1 / (E(2 * x) + 1), math.tanh),
    "softplus": (sp.log(1 + E(x)), lambda v: max(v, 0) + math.log1p(math.exp(-abs(v)))),
    "sigmoid": (E(x) / (1 + E(x)), lambda v: 1 / (1 + math.exp(-v)) if v > -700 else math.exp(v)),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_torch_prints_the_forms(form):
    """torch's elementwise printer: logaddexp of tensors, the largest exponent max(0, x) as torch.clamp (torch.maximum
    takes tensors only), evaluated on float64 tensors."""
    expr, want = FORMS[form]
    text = ElementwisePrinter().doprint(expr)
    assert ("logaddexp" if form in ("A", "softplus") else "torch.clamp") in text
    t = torch.tensor(LAM, dtype=torch.float64)
    got = eval(text, {"torch": torch, "math": math, "x": t}).numpy()            # noqa: S307 -- the printer's output
    np.testing.assert_allclose(got, [want(v) for v in LAM], rtol=4e-16, atol=0)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_triton_prints_the_forms_in_the_interpreter(form, tmp_path):
    """The Triton target's float32 kernels (TRITON_INTERPRET=1): finite at |x| = 1e3, 1e4 where e^x is inf in float32
    from x ≈ 88.7, and within float32 rounding of the float64 values (a few eps32 of |x| ≤ 30 in the exponents)."""
    os.environ["TRITON_INTERPRET"] = "1"
    from blr_derive.codegen.backends.triton.printer import HELPERS
    expr, want = FORMS[form]
    p = TritonPrinter()
    body = p.doprint(expr)
    src = ["import triton", "import triton.language as tl", ""] + [HELPERS[h] for h in sorted(p.helpers)]
    src += ["@triton.jit", "def kernel(X, OUT, N: tl.constexpr):", "    offs = tl.arange(0, N)",
            "    x = tl.load(X + offs)", f"    tl.store(OUT + offs, {body})", ""]
    path = tmp_path / f"_exp_sums_{form}.py"
    path.write_text("\n".join(src))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    X = np.array(LAM + (0.0,) * (16 - len(LAM)))
    xs = torch.tensor(X, dtype=torch.float32)
    out = torch.empty_like(xs)
    mod.kernel[(1,)](xs, out, N=16)
    got = out.double().numpy()
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, [want(v) for v in X], rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_host_prints_the_forms(form):
    expr, want = FORMS[form]
    host = HostPrinter().doprint(expr)
    for v in LAM:
        assert eval(host, {"math": math, "x": v}) == pytest.approx(want(v), rel=1e-15)   # noqa: S307


def test_torch_max_and_min_with_a_number():
    t = torch.tensor([-2.0, 0.5, 3.0], dtype=torch.float64)
    for expr, want in ((sp.Max(x, 0), [0.0, 0.5, 3.0]), (sp.Max(0, x, 2 * x), [0.0, 1.0, 6.0]),
                       (sp.Min(x, 1), [-2.0, 0.5, 1.0])):
        text = ElementwisePrinter().doprint(expr)
        assert "torch.clamp" in text
        assert eval(text, {"torch": torch, "x": t}).tolist() == want      # noqa: S307 -- the printer's output


@pytest.mark.parametrize("name, points", [("bernoulli_logit", [(1e3,), (-1e4,)]), ("binomial", [(1e3,), (-1e3,)]),
                                          ("categorical", [(1e3, -1e3), (1e4, 1e4)]),
                                          ("continuous_bernoulli", [(1e3,), (-1e3,)])])
def test_jax_derivatives_of_the_lowered_forms_are_finite(name, points, x64):
    """jax.grad of the printed A is the printed μ and jax.jacfwd of μ the printed F at extreme λ: no inf/inf in the
    derivatives either (the normalized quotients' exponentials are at most e^0)."""
    import jax
    import jax.numpy as jnp
    _, _, m = _module(name, "jax")
    for lam in points:
        at = jnp.array(lam)
        grad = jax.grad(lambda v: jnp.sum(m.log_partition(v)))(at)
        jac = jax.jacfwd(m.expectation_parameters)(at)
        assert np.all(np.isfinite(grad)) and np.all(np.isfinite(jac)), (lam, grad, jac)
        # jax differentiates logaddexp(x, y) as e^{x − logaddexp(x, y)}: a few units in the last place of |λ|
        assert _rel(grad, m.expectation_parameters(at)) < 1e-15 * max(abs(v) for v in lam), lam
        np.testing.assert_allclose(np.asarray(jac), np.asarray(m.fisher_information(at)), rtol=1e-13, atol=1e-300)


def test_the_largest_of_many_exponents_is_kept_as_written():
    """A 21-point support's normalizer max_k (k·λ₁ + k²λ₂): sympy's Max compares every pair of its arguments by their
    assumptions (70 s over one family's μ and F); above _EVALUATED_MAX arguments the Max is built unevaluated, its
    arguments in canonical order, with the same value."""
    from blr_derive.codegen.expsums import _EVALUATED_MAX, largest_exponent
    l1, l2 = sp.symbols("lambda1 lambda2", real=True)
    terms = [(sp.Integer(1), k * l1 + k * k * l2) for k in range(21)]
    m = largest_exponent(terms)
    assert isinstance(m, sp.Max) and len(m.args) == 21 > _EVALUATED_MAX
    assert list(m.args) == list(sp.ordered([a for _, a in terms]))
    assert m.func(*m.args) == m and len(m.func(*m.args).args) == 21     # a rewrite's rebuild keeps it as it is
    for v1, v2 in ((0.3, -0.05), (300.0, -1.0), (-40.0, -2.0)):
        want = max(k * v1 + k * k * v2 for k in range(21))
        assert float(m.subs({l1: v1, l2: v2})) == pytest.approx(want, rel=1e-15, abs=1e-300)
    few = largest_exponent([(sp.Integer(1), a) for a in (x, -x, 2 * x + y)])
    assert few == sp.Max(x, -x, 2 * x + y)           # a few: evaluated as before (the catalog's forms)


DISCRETE_GAUSSIAN = """\
name: discrete_gaussian
variable: k
support: integers 0..20
parameters:
  a: {domain: real, description: linear}
  b: {domain: positive, description: curvature}
sufficient_statistics: [k, k**2]
natural_parameters: [a, -b]
"""


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_a_large_support_prints_each_normalizer_once(target, tmp_path, request):
    """μ and F of a Gaussian on {0, …, 20} are quotients of 21-term sums, each normalized by a max of 20 exponents
    (above): printed at each use that was 570 000 characters of module (its jax functions took > 90 s to trace in
    check); above MAPS_TEMPS_CHARS each Max is one local, _max0 …, and the values are the sums' (float64 against
    exact sums, at moderate and at extreme λ, where e^{20λ₁} overflows)."""
    if target == "jax":
        request.getfixturevalue("x64")
    path = tmp_path / "discrete_gaussian.yaml"
    path.write_text(DISCRETE_GAUSSIAN)
    fam = load_family(str(path))
    source = emit(family_ir(fam, fam.name), target)
    assert len(source) < 100_000 and "    _max0 = " in source
    if target == "jax":             # the locals are jax too (traceable: jax.grad of μ, jax.jit of F)
        maps = source[source.index("def expectation_parameters"):source.index("def ordinary_from_natural")]
        assert "numpy.maximum" not in maps and "    _max0 = jnp.maximum(" in maps
    mod = types.ModuleType(f"_dg_{target}")
    exec(compile(source, f"<discrete gaussian {target}>", "exec"), mod.__dict__)
    k = [mpmath.mpf(i) for i in range(21)]
    for lam in ((0.3, -0.05), (2.0, -0.2), (1e3, -1.0), (-50.0, -3.0), (40.0, -1e-3)):
        with mpmath.workdps(60):
            w = [mpmath.exp(lam[0] * i + lam[1] * i * i) for i in k]
            z = mpmath.fsum(w)
            mu = [mpmath.fsum(wi * i for wi, i in zip(w, k)) / z, mpmath.fsum(wi * i * i for wi, i in zip(w, k)) / z]
            m3 = mpmath.fsum(wi * i ** 3 for wi, i in zip(w, k)) / z
            m4 = mpmath.fsum(wi * i ** 4 for wi, i in zip(w, k)) / z
            F = [[mu[1] - mu[0] ** 2, m3 - mu[0] * mu[1]], [m3 - mu[0] * mu[1], m4 - mu[1] ** 2]]
            A, m4f = float(mpmath.log(z)), float(m4)
            mu, F = [float(v) for v in mu], np.array([[float(v) for v in row] for row in F])
        at = np.array(lam)
        assert _rel(mod.log_partition(at), A) < 1e-13, lam
        assert _rel(mod.expectation_parameters(at), mu) < 1e-13, lam
        # F = E[TTᵀ] − μμᵀ cancels where q is nearly a point mass (at λ = (1e3, −1) F is 4e-56, the module's 0): its
        # error is a few roundings of E[TTᵀ] (E[k⁴] ≤ 20⁴)
        got_F = np.asarray(mod.fisher_information(at), dtype=float)
        assert np.all(np.isfinite(got_F)), lam
        assert np.all(np.abs(got_F - F) <= 1e-12 * np.max(np.abs(F)) + 8 * 2.0 ** -52 * m4f), (lam, got_F, F)
