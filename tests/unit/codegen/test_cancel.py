"""The printers' lowering of differences of exponentials (codegen/cancel.py): each rewrite rule, printed by the numpy
target, is accurate to 1e-14 relative of the 30-digit value (mpmath at enough precision for the cancellation) at small
arguments, where the unrewritten expression keeps few or no digits, and equals the unrewritten expression's float64
value to rounding at ordinary arguments; the rewritten forms are the ones the module docstring names, nothing else
changes, and the host, torch and jax printers print the same forms (the Triton interpreter's:
tests/unit/codegen/test_triton_printer_identities.py)."""
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import sympy as sp
import torch

from blr_derive.codegen.backends.jax.printer import JaxPrinter
from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
from blr_derive.codegen.cancel import expm1, log1mexp, stable_differences
from blr_derive.codegen.expsums import stable_exp_sums
from blr_derive.codegen.printing import HostPrinter
from blr_derive.codegen.torch_elementwise import ElementwisePrinter

x = sp.Symbol("x", real=True)
y = sp.Symbol("y", real=True)
c = sp.Symbol("c", positive=True)
p = sp.Symbol("p", positive=True)
E = sp.exp
SYMS = (x, y, c, p)

#: (rule, expression, small arguments {x, y, c, p}, ordinary arguments)
RULES = [
    ("exp_minus_one", E(x) - 1, [dict(x=1e-9), dict(x=-1e-12), dict(x=1e-300), dict(x=-3e-17)],
     [dict(x=0.7), dict(x=-2.5), dict(x=30.0)]),
    ("one_minus_exp", 1 - E(-x), [dict(x=1e-9), dict(x=1e-12), dict(x=1e-300)],
     [dict(x=0.7), dict(x=-2.5), dict(x=30.0)]),
    ("multiple_with_coefficient", c * E(2 * x) - c, [dict(x=1e-9, c=3.0), dict(x=-1e-200, c=0.5)],
     [dict(x=0.7, c=3.0), dict(x=-4.0, c=0.5)]),
    ("perfect_square", 1 - 2 * E(-x) + E(-2 * x), [dict(x=1e-9), dict(x=1e-12), dict(x=-1e-100)],
     [dict(x=0.7), dict(x=-2.5), dict(x=12.0)]),
    ("cube", 1 - 3 * E(x) + 3 * E(2 * x) - E(3 * x), [dict(x=1e-6), dict(x=-1e-9), dict(x=1e-90)],
     [dict(x=0.7), dict(x=-2.5), dict(x=5.0)]),
    ("root_times_quotient", E(2 * x) + E(x) - 2, [dict(x=1e-9), dict(x=-1e-14)],
     [dict(x=0.7), dict(x=-2.5), dict(x=12.0)]),
    ("square_over_sum", (1 - 2 * E(-x) + E(-2 * x)) / (x * (1 + E(-x))), [dict(x=1e-9), dict(x=3e-13)],
     [dict(x=0.7), dict(x=2.5)]),
    ("pair_of_known_order", E(x + p) - E(x), [dict(x=3.0, p=1e-12), dict(x=-700.0, p=1e-9)],
     [dict(x=3.0, p=0.7), dict(x=-2.0, p=4.0)]),
    ("pair_of_unknown_order", E(x) - E(y), [dict(x=0.3 + 2 ** -40, y=0.3), dict(x=-5.0, y=-5.0 + 2 ** -30)],
     [dict(x=0.7, y=-0.4), dict(x=-3.0, y=2.0)]),
    ("log_one_minus_exp", sp.log(1 - E(x)), [dict(x=-1e-9), dict(x=-1e-300), dict(x=-0.5), dict(x=-50.0)],
     [dict(x=-0.7), dict(x=-2.5)]),
    ("log_of_reciprocal", sp.log(1 / (1 - E(x))), [dict(x=-1e-12), dict(x=-40.0), dict(x=-700.0)],
     [dict(x=-0.7), dict(x=-2.5)]),
    ("normalized_square", 1 / (1 - 2 * E(x) + E(2 * x)), [dict(x=1e-9), dict(x=-1e-12), dict(x=1e-100)],
     [dict(x=0.7), dict(x=-2.5)]),
    ("normalized_quotient", E(x) / (1 - E(x)), [dict(x=-1e-9), dict(x=-1e-15), dict(x=1e-12)],
     [dict(x=-0.7), dict(x=2.5)]),
]


def _numpy(expr):
    """The numpy target's printed ``expr`` (every lowering applied), as a function of the symbols' values."""
    text = BLRNumPyPrinter().doprint(expr)
    return lambda at: eval(text, {"numpy": np}, {str(s): np.float64(at[str(s)]) for s in SYMS if str(s) in at})  # noqa: S307


def _exact(expr, at):
    """``expr`` at the float64 arguments ``at``, by mpmath at 800 digits (enough for any cancellation here)."""
    f = sp.lambdify([s for s in SYMS if str(s) in at], expr, "mpmath")
    with mpmath.workdps(800):
        return f(*[mpmath.mpf(at[str(s)]) for s in SYMS if str(s) in at])


@pytest.mark.parametrize("name, expr, small, ordinary", RULES, ids=[r[0] for r in RULES])
def test_rule_is_accurate_at_small_arguments(name, expr, small, ordinary):
    got = _numpy(expr)
    for at in small:
        want = _exact(expr, at)
        have = got(at)
        assert np.isfinite(have), (name, at, have)
        assert abs(have - float(want)) <= 1e-14 * abs(float(want)), (name, at, have, float(want))


@pytest.mark.parametrize("name, expr, small, ordinary", RULES, ids=[r[0] for r in RULES])
def test_the_unrewritten_expression_is_wrong_at_small_arguments(name, expr, small, ordinary):
    """What the rule fixes: the same expression printed without the lowering loses at least 1e-6 of its value (or is
    not finite) at one of the small arguments."""
    plain = sp.lambdify([s for s in SYMS], expr, "numpy")
    worst = 0.0
    for at in small:
        want = float(_exact(expr, at))
        with np.errstate(all="ignore"):
            have = plain(*[np.float64(at.get(str(s), 1.0)) for s in SYMS])
        worst = max(worst, abs(have - want) / abs(want) if np.isfinite(have) else math.inf)
    assert worst > 1e-6, (name, worst)


@pytest.mark.parametrize("name, expr, small, ordinary", RULES, ids=[r[0] for r in RULES])
def test_rule_equals_the_unrewritten_expression_at_ordinary_arguments(name, expr, small, ordinary):
    got = _numpy(expr)
    plain = sp.lambdify([s for s in SYMS], expr, "numpy")
    for at in ordinary:
        want = plain(*[np.float64(at.get(str(s), 1.0)) for s in SYMS])
        assert got(at) == pytest.approx(want, rel=2e-15), (name, at)


def test_the_rewritten_forms():
    assert stable_differences(E(x) - 1) == expm1(x)
    assert stable_differences(1 - E(-x)) == -expm1(-x)
    assert stable_differences(c * E(2 * x) - c) == c * expm1(2 * x)
    assert stable_differences(1 - 2 * E(-x) + E(-2 * x)) == expm1(-x) ** 2
    assert stable_differences(1 - 3 * E(x) + 3 * E(2 * x) - E(3 * x)) == -expm1(x) ** 3
    assert stable_differences(E(2 * x) + E(x) - 2) == expm1(x) * (E(x) + 2)
    assert stable_differences(E(x) - 1 - x) == expm1(x) - x                 # one exponent-free term of two
    assert stable_differences(E(x + p) - E(x)) == -E(x + p) * expm1(-p)    # the larger exponential, known: e^{x+p}
    assert stable_differences(E(x) - E(y)) == sp.sign(y - x) * E(sp.Max(x, y)) * expm1(-sp.Abs(x - y))
    assert stable_differences(sp.log(1 - E(x))) == log1mexp(x)
    assert stable_differences(sp.log(1 / (1 - E(x)))) == -log1mexp(x)
    # after the exponential-sum lowering: the logarithms of the factors' magnitudes and of their signs' product
    assert stable_differences(stable_exp_sums(sp.log(1 / (1 - E(x))))) == (
        -log1mexp(-sp.Abs(x)) - sp.Max(0, x) + sp.log(-1 / sp.sign(x)))
    # the exponential-sum lowering's normalized 1 − 2e^x + e^{2x} (M = max(0, 2x)) is the square of one difference
    # and the normalized e^{−M} − e^{x−M} (M = max(0, x)) one difference with the max that cancels M
    assert stable_differences(stable_exp_sums(1 / (1 - 2 * E(x) + E(2 * x)))).has(sp.Pow(expm1(-sp.Abs(x)), -2))
    assert stable_differences(stable_exp_sums(E(x) / (1 - E(x)))) == E(x - sp.Max(0, x)) / (sp.sign(x) * expm1(-sp.Abs(x)))


@pytest.mark.parametrize("expr", [
    E(x) + 1, E(x) - 2, x * E(x) - 1, E(x) + E(-x), E(2 * x) - 2 * E(x) + 3, E(x) - 2 * E(-x) + 1, sp.log(1 + E(x)),
    sp.log(E(x) - 2), E(x) * E(y) + x, 2 * E(x) - E(x + 1), sp.sin(x) - 1, sp.log(expm1(x)) + E(x)])
def test_nothing_else_changes(expr):
    assert stable_differences(expr) == expr


def test_an_expression_without_exp_is_returned_as_it_is():
    e = x ** 2 - 1
    assert stable_differences(e) is e
    assert stable_differences(3) == 3


def test_log1mexp_evaluates_and_differentiates():
    assert float(log1mexp(sp.Float(-1e-3))) == pytest.approx(math.log(-math.expm1(-1e-3)), rel=1e-15)
    assert sp.diff(log1mexp(x), x).subs(x, -0.5).evalf() == pytest.approx(-math.exp(-0.5) / (1 - math.exp(-0.5)))
    assert log1mexp(x).rewrite(sp.log) == sp.log(1 - E(x))


def _log1mexp(v):
    with np.errstate(divide="ignore"):
        return np.where(v > -math.log(2), np.log(-np.expm1(v)), np.log1p(-np.exp(v)))


FORMS = [(expm1(x), np.expm1), (log1mexp(x), _log1mexp)]
POINTS = np.array([-700.0, -50.0, -2.0, -0.7, -0.69, -1e-3, -1e-9, -1e-300])


@pytest.mark.parametrize("form, want", FORMS, ids=["expm1", "log1mexp"])
def test_host_torch_and_jax_print_the_forms(form, want, x64):
    ref = want(POINTS)
    host = HostPrinter().doprint(form)
    for v, r in zip(POINTS, ref):
        assert eval(host, {"math": math, "x": float(v)}) == pytest.approx(r, rel=1e-15)       # noqa: S307
    text = ElementwisePrinter().doprint(form)
    got = eval(text, {"torch": torch, "math": math, "x": torch.tensor(POINTS, dtype=torch.float64)}).numpy()  # noqa: S307
    np.testing.assert_allclose(got, ref, rtol=1e-15, atol=0)
    text = JaxPrinter().doprint(form)
    got = np.asarray(eval(text, {"jnp": jnp, "jax": jax, "x": jnp.asarray(POINTS)}))        # noqa: S307
    np.testing.assert_allclose(got, ref, rtol=1e-15, atol=0)


def test_jax_derivative_of_log1mexp_is_finite_on_both_branches(x64):
    f = eval("lambda x: " + JaxPrinter().doprint(log1mexp(x)), {"jnp": jnp})                # noqa: S307
    for v in (-1e-9, -0.5, -0.9, -40.0):
        g = float(jax.grad(f)(jnp.float64(v)))
        assert g == pytest.approx(-math.exp(v) / -math.expm1(v), rel=1e-12)
