"""Every target prints every special function the families need; each is checked against scipy.special."""
import numpy as np
import pytest
import scipy.special as sps
import sympy as sp
import torch

from blr_derive.core.exprparse import parse_expression
from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
from blr_derive.codegen.backends.torch.printer import ElementwisePrinter, ForeachCompiler

x, y = sp.symbols("x y", real=True)
X = np.linspace(0.3, 6.0, 17)
Y = np.linspace(0.5, 2.0, 17)
CASES = {
    "lgamma(x)": lambda a, b: sps.gammaln(a),
    "digamma(x)": lambda a, b: sps.digamma(a),
    "polygamma(1, x)": lambda a, b: sps.polygamma(1, a),
    "polygamma(2, x)": lambda a, b: sps.polygamma(2, a),
    "gamma(x)": lambda a, b: sps.gamma(a),
    "log1p(x)": lambda a, b: np.log1p(a),
    "softplus(x)": lambda a, b: np.logaddexp(0, a),
    "xlogy(x, y)": lambda a, b: sps.xlogy(a, b),
    "logsumexp(x, y)": lambda a, b: sps.logsumexp(np.stack([a, b]), axis=0),
}


def parsed(text):
    return parse_expression(text, {"x": x, "y": y})


@pytest.mark.parametrize("text", sorted(CASES))
def test_numpy_printer(text):
    pr = BLRNumPyPrinter()
    code = pr.doprint(parsed(text))
    ns = {"numpy": np, "scipy": __import__("scipy"), "x": X, "y": Y}
    __import__("scipy.special")
    np.testing.assert_allclose(eval(code, ns), CASES[text](X, Y), rtol=1e-12)


def torch_rtol(text):
    # torch.polygamma's own float64 accuracy for n = 1 (trigamma) is 4.8e-10 relative to scipy on these
    # points, also when called directly (test_torch_trigamma_accuracy_is_torchs)
    return 1e-9 if text == "polygamma(1, x)" else 1e-12


def test_torch_trigamma_accuracy_is_torchs():
    direct = torch.polygamma(1, torch.tensor(X)).numpy()
    err = np.max(np.abs(direct / sps.polygamma(1, X) - 1))
    assert 1e-12 < err < 1e-9


@pytest.mark.parametrize("text", sorted(CASES))
def test_torch_elementwise_printer(text):
    code = ElementwisePrinter().doprint(parsed(text))
    ns = {"torch": torch, "x": torch.tensor(X), "y": torch.tensor(Y)}
    np.testing.assert_allclose(eval(code, ns).numpy(), CASES[text](X, Y), rtol=torch_rtol(text))


@pytest.mark.parametrize("text", sorted(CASES))
def test_torch_foreach_printer(text):
    comp = ForeachCompiler({x, y}, indent="")
    out = sp.Symbol("out")
    comp.assign(out, parsed(text))
    xs = [torch.tensor(X[:9]), torch.tensor(X[9:])]
    ys = [torch.tensor(Y[:9]), torch.tensor(Y[9:])]
    ns = {"torch": torch, "x": xs, "y": ys, "math": __import__("math")}
    exec("\n".join(comp.lines), ns)
    got = torch.cat(list(ns["out"])).numpy()
    np.testing.assert_allclose(got, CASES[text](X, Y), rtol=torch_rtol(text))


@pytest.mark.parametrize("text,deriv", [("softplus(x)", lambda a: 1 / (1 + np.exp(-a))),
                                         ("xlogy(x, y)", lambda a: np.log(Y)),
                                         ("logsumexp(x, y)", lambda a: np.exp(a) / (np.exp(a) + np.exp(Y)))])
def test_derivatives_of_the_new_functions(text, deriv):
    d = sp.diff(parsed(text), x)
    f = sp.lambdify((x, y), d, "numpy")
    np.testing.assert_allclose(f(X, Y), deriv(X), rtol=1e-12)
