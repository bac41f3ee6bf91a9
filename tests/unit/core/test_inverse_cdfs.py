"""The grammar's inverse CDFs gammaincinv(a, y), betaincinv(a, b, y) and ndtri(y) (blr_derive/core/specialfns.py),
with which a family's sampler draws gamma-, beta- and normal-based variables from one uniform draw: values
(evalf, lambdify with scipy, the numpy and torch printers) against scipy.special, derivatives in y against
central differences, and the derivative in a shape left unevaluated (no closed form)."""
import numpy as np
import pytest
import scipy.special as sps
import sympy as sp
import torch

from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
from blr_derive.codegen.backends.torch.printer import ElementwisePrinter
from blr_derive.core.errors import SpecError, UnsupportedTarget
from blr_derive.core.exprparse import parse_expression

a, b = sp.Symbol("a", positive=True), sp.Symbol("b", positive=True)
y = sp.Symbol("y", positive=True)
SYMS = {"a": a, "b": b, "y": y}
CASES = [("gammaincinv(a, y)", lambda A, B, Y: sps.gammaincinv(A, Y)),
         ("betaincinv(a, b, y)", lambda A, B, Y: sps.betaincinv(A, B, Y)),
         ("ndtri(y)", lambda A, B, Y: sps.ndtri(Y))]
POINTS = [(0.3, 2.0, 0.02), (1.7, 0.6, 0.5), (6.0, 3.5, 0.97)]


@pytest.mark.parametrize("text, ref", CASES)
@pytest.mark.parametrize("A, B, Y", POINTS)
def test_value_and_derivative_in_y_match_scipy(text, ref, A, B, Y):
    e = parse_expression(text, SYMS)
    at = {a: A, b: B, y: Y}
    want = ref(A, B, Y)
    assert float(e.subs(at).evalf()) == pytest.approx(want, rel=1e-12)
    f = sp.lambdify([a, b, y], e, modules=["scipy", "numpy"])
    assert float(f(A, B, Y)) == pytest.approx(want, rel=1e-14)
    d = float(sp.diff(e, y).subs(at).evalf())
    h = 1e-6 * min(Y, 1 - Y)
    assert d == pytest.approx((ref(A, B, Y + h) - ref(A, B, Y - h)) / (2 * h), rel=1e-6)


@pytest.mark.parametrize("text", ["gammaincinv(a, y)", "betaincinv(a, b, y)"])
def test_the_derivative_in_a_shape_has_no_closed_form_and_stays_unevaluated(text):
    d = sp.diff(parse_expression(text, SYMS), a)
    assert d.has(sp.Derivative) or d.has(sp.Subs)


def test_the_inverse_cdf_is_a_quantile_function():
    """gammaincinv inverts the regularized lower incomplete gamma function: P(a, gammaincinv(a, y)) = y."""
    e = parse_expression("gammaincinv(a, y)", SYMS)
    for A, _, Y in POINTS:
        x = float(e.subs({a: A, y: Y}).evalf())
        assert float(sp.lowergamma(A, x) / sp.gamma(A)) == pytest.approx(Y, rel=1e-10)
    assert parse_expression("ndtri(1/2)", SYMS) == 0


def test_numpy_and_torch_printers():
    Y = np.array([0.1, 0.5, 0.9])
    for text, ref in CASES:
        code = BLRNumPyPrinter().doprint(parse_expression(text, SYMS))
        assert "scipy.special." in code
        ns = {"numpy": np, "scipy": __import__("scipy.special"), "a": 1.3, "b": 2.2, "y": Y}
        np.testing.assert_allclose(eval(code, ns), ref(1.3, 2.2, Y), rtol=1e-14)
    code = ElementwisePrinter().doprint(parse_expression("ndtri(y)", SYMS))
    assert code == "torch.special.ndtri(y)"
    np.testing.assert_allclose(eval(code, {"torch": torch, "y": torch.tensor(Y)}).numpy(), sps.ndtri(Y), rtol=1e-14)
    with pytest.raises(UnsupportedTarget, match="gammaincinv"):          # torch has no incomplete-gamma inverse
        ElementwisePrinter().doprint(parse_expression("gammaincinv(a, y)", SYMS))


@pytest.mark.parametrize("text, msg", [("gammaincinv(y)", "exactly 2 arguments"),
                                       ("betaincinv(a, y)", "exactly 3 arguments"),
                                       ("ndtri(a, y)", "exactly one argument")])
def test_arity_is_checked(text, msg):
    with pytest.raises(SpecError, match=msg):
        parse_expression(text, SYMS)
