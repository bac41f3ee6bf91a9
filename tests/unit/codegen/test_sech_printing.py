"""sech as the numpy, jax and torch printers write it (the Concrete relaxation of BayesBiNN evaluates sech² of
(λ + logit(u)/2)/τ, which is far beyond 710 when τ is small): the value to a few ulps of mpmath's for arguments of
any size, no overflow on the way (notebook 03 printed numpy's "overflow encountered in cosh": sech was printed
as 1/cosh), and a finite derivative where cosh overflows (autodiff of 1/cosh there is inf/inf)."""
import warnings

import mpmath
import numpy as np
import pytest
import sympy as sp

from blr_derive.codegen.backends.jax.functions import JnpPrinter
from blr_derive.codegen.backends.jax.printer import JaxPrinter
from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
from blr_derive.codegen.backends.torch.printer import ElementwisePrinter

X = sp.Symbol("x", real=True)
XS = [0.0, 1e-9, -1e-9, 0.3, -2.5, 20.0, -37.0, 300.0, 709.0, 711.0, -711.0, 750.0, 1e4, -1e300]


def _sech(x):
    return float(mpmath.sech(mpmath.mpf(x)))


def _dsech(x):
    return float(-mpmath.sech(mpmath.mpf(x)) * mpmath.tanh(mpmath.mpf(x)))


def _function(text, header):
    ns = {}
    exec(compile(f"{header}\n\ndef f(x):\n    return {text}\n", "<sech>", "exec"), ns)
    return ns["f"]


def _close(got, want, atol=3e-308):
    """A few ulps of the reference; ``atol`` below the smallest normal number (XLA and torch flush subnormals:
    sech(711) = 3.3e-309 is 0 there)."""
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=8 * 2.2e-16, atol=atol)


#: the derivative's absolute error near 0: autodiff of 2e/(1 + e²) forms −2e(1 + e²) + 4e³, which cancels to
#: −2e(1 − e²) with e² = 1 − 2|x|, an absolute error of a few 1e-16 where the derivative itself is −x
DERIVATIVE_ATOL = 1e-15


def test_numpy_sech_of_any_argument_without_overflow():
    f = _function(BLRNumPyPrinter().doprint(sp.sech(X)), "import numpy")
    x = np.array(XS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # an overflow (or any other) RuntimeWarning fails the test
        with np.errstate(all="warn", under="ignore"):
            got = f(x)
            got_sq = _function(BLRNumPyPrinter().doprint(sp.sech(X) ** 2), "import numpy")(x)
    _close(got, [_sech(v) for v in XS])
    _close(got_sq, [_sech(v) ** 2 for v in XS])


@pytest.mark.parametrize("printer", [JnpPrinter, JaxPrinter])
def test_jax_sech_and_its_derivative_of_any_argument(printer, x64):
    import jax
    import jax.numpy as jnp  # noqa: F401
    f = _function(printer().doprint(sp.sech(X)), "import jax\nimport jax.numpy as jnp")
    x = np.array(XS)
    _close(np.asarray(f(jnp.asarray(x))), [_sech(v) for v in XS])
    d = np.asarray(jax.vmap(jax.grad(f))(jnp.asarray(x[x != 0])))
    _close(d, [_dsech(v) for v in XS if v != 0], DERIVATIVE_ATOL)


def test_torch_sech_and_its_derivative_of_any_argument():
    import torch
    f = _function(ElementwisePrinter().doprint(sp.sech(X)), "import torch")
    x = torch.tensor([v for v in XS if v != 0], dtype=torch.float64, requires_grad=True)
    y = f(x)
    (d,) = torch.autograd.grad(y.sum(), x)
    _close(y.detach().numpy(), [_sech(v) for v in XS if v != 0])
    _close(d.numpy(), [_dsech(v) for v in XS if v != 0], DERIVATIVE_ATOL)
    x32 = torch.tensor([0.5, 60.0, 89.0, 95.0, -200.0], dtype=torch.float32)       # cosh overflows past 89
    np.testing.assert_allclose(f(x32).numpy(), [_sech(float(v)) for v in x32], rtol=4e-7, atol=1e-45)


@pytest.mark.parametrize("printer,header", [(BLRNumPyPrinter, "import numpy"),
                                            (JnpPrinter, "import jax\nimport jax.numpy as jnp"),
                                            (JaxPrinter, "import jax\nimport jax.numpy as jnp")])
def test_a_negative_power_of_cosh_is_printed_as_sech(printer, header, x64):
    """The Bernoulli family's Fisher information cosh(λ)**-2 (the family modules' ``fisher_information``) overflowed
    the same way: a negative power of cosh is printed as the positive power of sech."""
    for e, ref in [(sp.cosh(X) ** -2, lambda v: _sech(v) ** 2), (sp.cosh(X) ** sp.Float(-2.0), lambda v: _sech(v) ** 2),
                   (1 / sp.cosh(X), _sech), (sp.cosh(X) ** -3, lambda v: _sech(v) ** 3)]:
        text = printer().doprint(e)
        assert "cosh" not in text, text
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = np.asarray(_function(text, header)(np.array(XS)))
        _close(got, [ref(v) for v in XS])


@pytest.mark.parametrize("printer,header", [
    (BLRNumPyPrinter, "import numpy"),
    (JnpPrinter, "import jax\nimport jax.numpy as jnp"),
    (JaxPrinter, "import jax\nimport jax.numpy as jnp"),
    (ElementwisePrinter, "import torch"),
])
def test_a_cosh_power_dividing_a_product_prints_as_sech(printer, header, request):
    """(5/2)/cosh(x/2)² -- a binomial's F, after its declared A = 10 log(1 + e^λ) is read as 10 softplus(λ) -- is a
    product whose cosh power the printers write as a divisor, where their _print_Pow never saw it: the module printed
    `(5/2)/numpy.cosh((1/2)*lambda1)**2`, which overflows past |λ| = 1420 (codegen/printing.py cosh_powers_as_sech)."""
    import torch
    if printer is not BLRNumPyPrinter and printer is not ElementwisePrinter:
        request.getfixturevalue("x64")
    e = sp.Rational(5, 2) / sp.cosh(X / 2) ** 2
    text = printer().doprint(e)
    assert "cosh" not in text
    f = _function(text, header)
    for x in (0.0, -3.0, 40.0, 1419.0, 1500.0, -1e4):
        arg = torch.tensor(x, dtype=torch.float64) if printer is ElementwisePrinter else np.float64(x)
        with np.errstate(over="raise", invalid="raise"):
            got = float(f(arg))
        want = float(mpmath.mpf(5) / 2 * mpmath.sech(mpmath.mpf(x) / 2) ** 2)
        _close(got, want)
