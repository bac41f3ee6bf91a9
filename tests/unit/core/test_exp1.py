"""The grammar's exponential integral exp1(x) = E₁(x) (blr_derive/core/specialfns.py): its value (evalf and
lambdify with scipy) and its derivative -e^{-x}/x against scipy.special.exp1 and central differences."""
import numpy as np
import pytest
import scipy.special as sps
import sympy as sp

from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression

x = sp.Symbol("x", positive=True)


@pytest.mark.parametrize("v", [0.01, 0.7, 2.0, 35.0])
def test_value_and_derivative_match_scipy(v):
    e = parse_expression("exp1(x)", {"x": x})
    assert float(e.subs(x, v).evalf(30)) == pytest.approx(sps.exp1(v), rel=1e-14)
    assert float(sp.lambdify([x], e, modules=["scipy", "numpy"])(v)) == pytest.approx(sps.exp1(v), rel=1e-14)
    d = float(sp.diff(e, x).subs(x, v).evalf(30))
    h = 1e-6 * v
    assert d == pytest.approx((sps.exp1(v + h) - sps.exp1(v - h)) / (2 * h), rel=1e-7)


def test_numpy_target_prints_scipy_exp1():
    pr = BLRNumPyPrinter()
    code = pr.doprint(parse_expression("exp(x)*exp1(x)", {"x": x}))
    assert "scipy.special.exp1(" in code
    ns = {"numpy": np, "scipy": __import__("scipy.special"), "x": np.array([0.3, 4.0])}
    np.testing.assert_allclose(eval(code, ns), np.exp([0.3, 4.0]) * sps.exp1([0.3, 4.0]), rtol=1e-14)


def test_takes_one_scalar_argument():
    with pytest.raises(SpecError, match="exactly one argument"):
        parse_expression("exp1(x, 1)", {"x": x})
