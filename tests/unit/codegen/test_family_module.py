"""The module of a family alone (``blr_derive.ir.build.family_ir``): the parameter maps a recipe's module carries for a
numeric μ → λ map, for any family with scalar natural parameters, in numpy and jax (what ``blr-derive check`` runs at
the hard points).  Its maps read the fixed parameters as keyword arguments (the chi's k: a NameError before) and
start Newton's method inside Ω (the categorical's simplex: 1/K each, not 1/2 each, which is p3 = 0)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sps

from blr_derive import api
from blr_derive.codegen.registry import emit
from blr_derive.families.library import load_family
from blr_derive.ir.build import family_ir
from conftest import FUNCTION_TARGETS


def module(name, target):
    ns = {}
    exec(compile(emit(family_ir(load_family(name), name), target), f"<{name} {target}>", "exec"), ns)
    return ns


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_a_fixed_parameter_is_a_keyword_argument_of_the_maps(target, x64):
    """chi with k = 3 degrees of freedom and scale σ: A(λ) = log Γ(k/2) − (k/2) log(−λ) − log 2, λ = −1/(2σ²)."""
    m = module("chi", target)
    sigma, k = 1.7, 3.0
    lam = np.asarray(m["natural_parameters"](sigma, k), dtype=float)
    assert lam[0] == pytest.approx(-1 / (2 * sigma ** 2), rel=1e-15)
    A = float(m["log_partition"](lam, k=k))
    assert A == pytest.approx(sps.gammaln(k / 2) - k / 2 * np.log(-lam[0]) - np.log(2), rel=1e-13)
    mu = np.asarray(m["expectation_parameters"](lam, k=k), dtype=float)
    assert mu[0] == pytest.approx(k * sigma ** 2, rel=1e-13)                   # E[θ²] = kσ²
    F = np.asarray(m["fisher_information"](lam, k=k), dtype=float)
    assert F[0, 0] == pytest.approx(2 * k * sigma ** 4, rel=1e-12)             # Var[θ²] = 2kσ⁴
    assert float(m["ordinary_from_natural"](lam, k=k)["sigma"]) == pytest.approx(sigma, rel=1e-14)
    assert float(m["ordinary_from_expectation"](mu, k=k)["sigma"]) == pytest.approx(sigma, rel=1e-10)
    state = m["init"](sigma=sigma, k=k)
    assert float(m["step"](state)["sigma"]) == sigma and float(m["step"](state)["k"]) == k


def test_newton_starts_inside_the_simplex():
    m = module("categorical", "numpy")
    lam = m["natural_parameters"](0.2, 0.3)
    back = m["ordinary_from_expectation"](m["expectation_parameters"](lam))
    assert float(back["p1"]) == pytest.approx(0.2, rel=1e-10) and float(back["p2"]) == pytest.approx(0.3, rel=1e-10)


def test_families_with_matrix_natural_parameters_have_no_family_module():
    assert family_ir(load_family("wishart")) is None


def module_of_text(text, target):
    fam = api.family(text)
    ns = {}
    exec(compile(emit(family_ir(fam, fam.name), target), f"<{fam.name} {target}>", "exec"), ns)
    return ns


POISSON_0_30 = """\
name: poisson_0_30
variable: theta
support: integers 0..30
parameters:
  r: {domain: positive}
sufficient_statistics: [theta]
base_measure: 1/factorial(theta)
natural_parameters: [log(r)]
"""


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_integer_constants_beyond_int64_are_printed_as_floats(target, x64):
    """A Poisson on 0..30: A = log Σ r^k/k! holds log(30!) (2.7e32), and μ and F the integer coefficients of their
    normalized sums (8.8e30).  Python ints beyond int64 were objects to numpy (numpy.log(30!) raised TypeError: A and
    the Newton solve failed everywhere) and jax refused them (OverflowError in A, μ and F).  Reference: direct
    summation (scipy.special.gammaln, logsumexp)."""
    m = module_of_text(POISSON_0_30, target)
    k = np.arange(31.0)
    for r in (1e-3, 1.0, 7.0, 29.0, 1e3):
        lam = np.array([np.log(r)])
        w = k * lam[0] - sps.gammaln(k + 1)
        A = sps.logsumexp(w)
        p = np.exp(w - A)
        mu = p @ k
        var = p @ (k - mu) ** 2
        assert float(m["log_partition"](lam)) == pytest.approx(A, rel=1e-14, abs=1e-14)
        assert float(np.asarray(m["expectation_parameters"](lam))[0]) == pytest.approx(mu, rel=1e-13)
        assert float(np.asarray(m["fisher_information"](lam))[0, 0]) == pytest.approx(var, rel=1e-10)
        assert float(m["ordinary_from_expectation"](np.array([mu]))["r"]) == pytest.approx(r, rel=1e-9)


def test_big_integers_and_their_logs_print_as_numbers():
    """The printers' rule itself: an integer or a rational with a term of 2^31 or more is a float literal, the log of
    one its value (log(171!) = 709.78 while 171! is no float); smaller ones print as before."""
    import sympy as sp
    from blr_derive.codegen.backends.jax.printer import JaxPrinter
    from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
    x = sp.Symbol("x")
    for printer in (BLRNumPyPrinter(), JaxPrinter()):
        assert printer.doprint(sp.Integer(3) * x) == "3*x"
        assert printer.doprint(sp.factorial(30) * x) == "2.6525285981219107e+32*x"
        assert printer.doprint(sp.Rational(1, 2**40) * x) == f"({2.0 ** -40!r})*x"
        assert printer.doprint(sp.Rational(1, 3) * x) == "(1/3)*x"
        assert float(printer.doprint(sp.log(sp.factorial(171), evaluate=False))) == pytest.approx(
            float(sps.gammaln(172)), rel=1e-15)


BETA_NATURAL = """\
name: beta_natural
variable: theta
support: unit_interval
parameters:
  l1: {domain: real, greater_than: -1}
  l2: {domain: real, greater_than: -1}
sufficient_statistics: [log(theta), log(1 - theta)]
natural_parameters: [l1, l2]
"""


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_the_domain_of_a_parameter_greater_than_a_bound(target, x64):
    """A Beta in its natural parameters l = a − 1 > −1: the module's Ω tested l > 0 (the bound dropped), refused the
    arcsine law λ = (−½, −½) and Newton's own start λ = 0, so ordinary_from_expectation raised at every μ.
    Reference: E[log θ] = ψ(a) − ψ(a + b), E[log(1 − θ)] = ψ(b) − ψ(a + b) (scipy.special)."""
    m = module_of_text(BETA_NATURAL, target)
    assert m["_in_domain"](np.array([-0.5, -0.5])) and m["_in_domain"](np.array([0.0, 3.0]))
    assert not m["_in_domain"](np.array([-1.0, 0.5])) and not m["_in_domain"](np.array([0.5, -1.5]))
    for a, b in [(0.5, 0.5), (1.0, 1.0), (0.001, 2.0), (3.0, 0.01), (40.0, 7.0)]:
        mu = np.array([sps.digamma(a) - sps.digamma(a + b), sps.digamma(b) - sps.digamma(a + b)])
        got = np.asarray(m["expectation_parameters"](np.array([a - 1, b - 1])), dtype=float)
        assert np.max(np.abs(got - mu)) < 1e-12 * np.max(np.abs(mu)) + 1e-13
        back = m["ordinary_from_expectation"](mu)
        assert float(back["l1"]) + 1 == pytest.approx(a, rel=1e-9)
        assert float(back["l2"]) + 1 == pytest.approx(b, rel=1e-9)
