"""Φ and log Φ in the grammar (``ndtr``, ``log_ndtr``, with ``erf``, ``erfc``) and the rewrite that keeps them
accurate in the lower tail (blr_derive/core/specialfns.py ``normal_cdf_form``).

A truncated normal's integrated log-partition is log(1 + erf(a)) (+ a polynomial): it cancels to log(0) = -inf
for a < -27 even in 30 digits, and it made the corpus family ``truncated_normal`` fail ``check`` at m = -30 and its
modules' Newton solve at m = -8.3.  Written log Φ(√2 a), A, μ and F are finite and right at any argument.  A probit
loss -log Φ(z·θ) differentiates to e^{-u²/2 - log Φ(u)}/√(2π) (the inverse Mills ratio), finite where φ and Φ
both underflow.  References: mpmath at 50 digits."""
import math

import mpmath
import numpy as np
import pytest
import scipy.special
import sympy as sp

from blr_derive.core.exprfuncs import LOSS_FUNCTIONS
from blr_derive.core.exprparse import parse_expression as parse
from blr_derive.core.specialfns import log_ndtr, ndtr, normal_cdf_form, softplus

mpmath.mp.dps = 50
x = sp.Symbol("x", real=True)
TAIL = (-1000.0, -100.0, -38.5, -30.0, -21.2, -20.0, -19.9, -8.0, -1.5, 0.0, 0.7, 6.0, 40.0)


def _mp_log_ndtr(v):
    return mpmath.log(mpmath.ncdf(v))


@pytest.mark.parametrize("v", TAIL)
def test_derivatives_are_the_density_and_the_inverse_mills_ratio(v):
    """d/dx Φ = φ and d/dx log Φ = φ/Φ (as e^{-x²/2 - log Φ(x)}/√(2π)), and the second derivative of log Φ, against
    mpmath's derivatives of its own Φ at 50 digits, evaluated in float64 by scipy where φ and Φ underflow apart."""
    d1 = sp.lambdify(x, sp.diff(log_ndtr(x), x), "scipy")(v)
    d2 = sp.lambdify(x, sp.diff(log_ndtr(x), x, 2), "scipy")(v)
    ref1 = mpmath.diff(_mp_log_ndtr, v)
    ref2 = mpmath.diff(_mp_log_ndtr, v, 2)
    # the exponent -x²/2 - log Φ(x) is a difference of two numbers of size x²/2 (rounded to x²/2 ulps): the ratio's
    # relative error is that, 3e-11 at x = -1000, 1e-16 near 0 (an erfcx form would keep it at 1e-16; not printed)
    assert d1 == pytest.approx(float(ref1), rel=max(2e-15, 2.2e-16 * v * v))
    # -1 - (x + r)r/... : the second derivative cancels ~x² in the tail (|x| = 1000: 1e6 ulps)
    assert d2 == pytest.approx(float(ref2), rel=max(1e-14, 2.4e-16 * v ** 4), abs=1e-300)
    dphi = sp.lambdify(x, sp.diff(ndtr(x), x), "scipy")(v)
    assert dphi == pytest.approx(float(mpmath.npdf(v)), rel=max(2e-15, 1.2e-16 * v * v), abs=1e-300)


def test_values_and_special_points():
    assert ndtr(0) == sp.Rational(1, 2) and log_ndtr(0) == -sp.log(2)
    assert float(ndtr(sp.Float(-30)).evalf(30)) == pytest.approx(float(mpmath.ncdf(-30)), rel=1e-14)
    assert float(log_ndtr(sp.Float(-100)).evalf(30)) == pytest.approx(float(_mp_log_ndtr(-100)), rel=1e-14)
    assert ndtr(x).is_positive and log_ndtr(x).is_extended_real


@pytest.mark.parametrize("text,has", [
    ("log(1 + erf(x))", "log_ndtr(sqrt(2)*x)"),           # a truncated normal's A
    ("log(1 - erf(x))", "log_ndtr(-sqrt(2)*x)"),
    ("log(erfc(x)/2)", "log_ndtr(-sqrt(2)*x)"),
    ("log(ndtr(x))", "log_ndtr(x)"),
    ("log(3*ndtr(x)**2)", "2*log_ndtr(x)"),
    ("log1p(erf(x))", "log_ndtr(sqrt(2)*x)"),
])
def test_the_grammar_writes_logs_of_normal_cdfs_as_log_ndtr(text, has):
    e = parse(text, {"x": x})
    assert has in sp.sstr(e) and not e.has(sp.erf, sp.erfc)
    f = sp.lambdify(x, e, "scipy")
    g = sp.lambdify(x, sp.sympify(text.replace("log1p(erf(x))", "log(1 + erf(x))")
                                  .replace("ndtr(x)", "(erfc(-x/sqrt(2))/2)"), locals={"x": x}), "mpmath")
    for v in (-30.0, -8.0, -0.3, 0.0, 0.9, 4.0):
        with mpmath.workdps(600):                       # 1 + erf(-30) keeps its 1e-393 only with 400+ digits
            want = float(g(mpmath.mpf(v)))
        assert f(v) == pytest.approx(want, rel=1e-14, abs=1e-14)


def test_a_lone_erf_stays_an_erf():
    """2Φ(√2 x) - 1 cancels near 0 (erf(1e-10) = 1.13e-10): a lone erf is not rewritten."""
    e = parse("erf(x)", {"x": x})
    assert e == sp.erf(x)
    assert normal_cdf_form(sp.erf(x)) == sp.erf(x)


def test_complement_of_a_normal_cdf():
    e = normal_cdf_form(1 - ndtr(x))
    assert e == ndtr(-x)
    assert normal_cdf_form(2 - 2 * ndtr(x)) == 2 * ndtr(-x)


@pytest.mark.parametrize("a", [-40.0, -30.0, -5.9, -1.0, 0.0, 2.0, 10.0])
def test_truncated_normal_log_partition_in_the_tail(a):
    """log ∫_0^∞ exp(λ₁θ + λ₂θ²) dθ in the form the builder keeps, at λ₂ = -1 and λ₁ = 2a (the argument of the erf
    is a): against mpmath's quadrature.  The closed form sympy integrates to gives log(0) = -inf for a < -27."""
    l1, l2 = sp.symbols("lambda1 lambda2")
    A = -l1 ** 2 / (4 * l2) - sp.log(-l2) / 2 + sp.log(sp.erf(l1 / (2 * sp.sqrt(-l2))) + 1) + sp.log(sp.pi / 4) / 2
    stable = sp.lambdify((l1, l2), normal_cdf_form(A), "scipy")
    ref = mpmath.log(mpmath.quad(lambda t: mpmath.exp(2 * a * t - t * t), [0, 1 / max(1.0, abs(a)), mpmath.inf]))
    assert stable(2 * a, -1.0) == pytest.approx(float(ref), rel=1e-13)
    with np.errstate(divide="ignore"):
        raw = sp.lambdify((l1, l2), A, "scipy")(2 * a, -1.0)
    if a <= -30:
        assert raw == -math.inf                  # what the closed form gave before the rewrite


@pytest.mark.parametrize("v", TAIL)
def test_every_target_prints_them(v):
    """numpy (scipy.special), torch (torch.special) and jax (jax.scipy.special's ndtr; log Φ by the module's
    _log_ndtr, whose series below -20 replaces jax's own, ~2e-11 off there) against mpmath."""
    import torch

    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from blr_derive.codegen.backends.jax.runtime import _log_ndtr
    from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
    from blr_derive.codegen.torch_elementwise import ElementwisePrinter

    ref_log = float(_mp_log_ndtr(v))
    ref = float(mpmath.ncdf(v))
    npr = BLRNumPyPrinter()
    assert npr.doprint(log_ndtr(x)) == "scipy.special.log_ndtr(x)" and npr.doprint(ndtr(x)) == "scipy.special.ndtr(x)"
    assert ElementwisePrinter().doprint(log_ndtr(x)) == "torch.special.log_ndtr(x)"
    assert ElementwisePrinter().doprint(ndtr(x)) == "(0.5*torch.special.erfc(-(x)*0.7071067811865476))"
    assert scipy.special.log_ndtr(v) == pytest.approx(ref_log, rel=1e-15)
    t = torch.tensor(v, dtype=torch.float64)
    env = {"torch": torch, "x": t}
    assert float(eval(ElementwisePrinter().doprint(ndtr(x)), env)) == pytest.approx(ref, rel=2e-13, abs=1e-300)
    assert float(eval(ElementwisePrinter().doprint(log_ndtr(x)), env)) == pytest.approx(ref_log, rel=1e-15)
    # torch's own ndtr is (1 + erf(x/√2))/2: it cancels in the tail, which is why it is not printed
    if v == -8.0:
        assert abs(float(torch.special.ndtr(t)) / ref - 1) > 1e-2
    assert float(_log_ndtr(jnp.float64(v))) == pytest.approx(ref_log, rel=2e-16 * 4, abs=2e-16)
    assert float(jax.grad(_log_ndtr)(jnp.float64(v))) == pytest.approx(float(mpmath.diff(_mp_log_ndtr, v)),
                                                                      rel=1e-9)


@pytest.mark.parametrize("text,want", [
    ("log(1 + exp(x))", "softplus(x)"),
    ("log(sigmoid(x))", "-softplus(-x)"),
    ("log(exp(x)/(1 + exp(x)))", "-softplus(-x)"),
    ("log(exp(2*x)/(1 + exp(x))**2)", "-2*softplus(-x)"),
    ("log(exp(x)/(1 + exp(-x)))", "x - softplus(-x)"),
    ("log(3*(1 + exp(-x))**2)", "2*softplus(-x) + log(3)"),
    ("log1p(exp(x))", "softplus(x)"),
])
def test_logs_of_logistic_factors_in_a_loss_are_softplus(text, want):
    assert sp.sstr(parse("log(2 + exp(x))", {"x": x}, functions=LOSS_FUNCTIONS)) == "log(exp(x) + 2)"      # not a logistic factor: as written
    """blr_derive/core/specialfns.py log_softplus_form through the grammar's log: the same value (against mpmath at
    1000 digits, also where e^x overflows in float64) and a first derivative that is finite where the written form's is
    inf·0."""
    e = parse(text, {"x": x}, functions=LOSS_FUNCTIONS)
    assert sp.sstr(e) == want
    assert not parse(text, {"x": x}).has(softplus)        # a family's expressions keep log(1 + e^x) as written
    f = sp.lambdify(x, e, [{"softplus": lambda v: np.logaddexp(0.0, v)}, "scipy", "numpy"])
    d = sp.lambdify(x, sp.diff(e, x), [{"softplus": lambda v: np.logaddexp(0.0, v)}, "scipy", "numpy"])
    ref = sp.lambdify(x, sp.sympify(text.replace("log1p(exp(x))", "log(1 + exp(x))")
                                    .replace("sigmoid(x)", "(1/(1 + exp(-x)))"), locals={"x": x}), "mpmath")
    for v in (-2000.0, -750.0, -30.0, -1.0, 0.0, 2.5, 40.0, 800.0, 2000.0):
        with mpmath.workdps(1000):                    # e^{-2000}-sized values need ~900 digits to show
            want_v = ref(mpmath.mpf(v))
            want_d = mpmath.diff(ref, mpmath.mpf(v))
        assert f(v) == pytest.approx(float(want_v), rel=1e-15, abs=1e-300)
        with np.errstate(over="ignore"):             # sympy's softplus' = 1/(1 + e^{-x}): 1/inf = 0, right
            assert d(v) == pytest.approx(float(want_d), rel=1e-14, abs=1e-300)
