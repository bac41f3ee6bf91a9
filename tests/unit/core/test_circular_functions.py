"""The grammar's acos(x) and atan2(y, x) (for circular samplers: Best & Fisher's von Mises draws θ = a ± acos f and
wraps it with atan2): values and derivatives against numpy and central differences, the numpy and torch printers
against numpy, the Triton printer's located refusal (no libdevice), and arity."""
import numpy as np
import pytest
import sympy as sp
import torch

from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
from blr_derive.codegen.backends.torch.printer import ElementwisePrinter
from blr_derive.codegen.backends.triton.printer import TritonPrinter
from blr_derive.core.errors import BLRError, SpecError
from blr_derive.core.exprparse import parse_expression

x, y = sp.Symbol("x", real=True), sp.Symbol("y", real=True)
SYMS = {"x": x, "y": y}
CASES = [("acos(x)", lambda X, Y: np.arccos(X)), ("atan2(y, x)", lambda X, Y: np.arctan2(Y, X)),
         ("atan2(sin(y), cos(y))", lambda X, Y: np.arctan2(np.sin(Y), np.cos(Y)))]
POINTS = [(0.3, -2.0), (-0.8, 0.6), (0.05, 4.0)]


@pytest.mark.parametrize("text, ref", CASES)
@pytest.mark.parametrize("X, Y", POINTS)
def test_values_and_derivatives(text, ref, X, Y):
    e = parse_expression(text, SYMS)
    at = {x: X, y: Y}
    assert float(e.subs(at).evalf()) == pytest.approx(ref(X, Y), rel=1e-14, abs=1e-15)
    h = 1e-6
    for s, step in ((x, (h, 0)), (y, (0, h))):
        fd = (ref(X + step[0], Y + step[1]) - ref(X - step[0], Y - step[1])) / (2 * h)
        assert float(sp.diff(e, s).subs(at).evalf()) == pytest.approx(fd, rel=1e-7, abs=1e-8)


def test_numpy_and_torch_printers():
    X, Y = np.array([0.3, -0.8, 0.05]), np.array([-2.0, 0.6, 4.0])
    for text, ref in CASES:
        e = parse_expression(text, SYMS)
        code = BLRNumPyPrinter().doprint(e)
        np.testing.assert_allclose(eval(code, {"numpy": np, "x": X, "y": Y}), ref(X, Y), rtol=1e-15)
        code = ElementwisePrinter().doprint(e)
        got = eval(code, {"torch": torch, "x": torch.tensor(X), "y": torch.tensor(Y)}).numpy()
        np.testing.assert_allclose(got, ref(X, Y), rtol=1e-15)


@pytest.mark.parametrize("text", ["acos(x)", "atan2(y, x)"])
def test_triton_refuses_them(text):
    with pytest.raises(BLRError, match="triton"):
        TritonPrinter().doprint(parse_expression(text, SYMS))


@pytest.mark.parametrize("text, msg", [("atan2(y)", "exactly 2 arguments"), ("acos(x, y)", "exactly one argument")])
def test_arity_is_checked(text, msg):
    with pytest.raises(SpecError, match=msg):
        parse_expression(text, SYMS)
