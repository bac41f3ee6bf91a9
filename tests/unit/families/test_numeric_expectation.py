"""The two ways E_q[log h] is found when it is not linear in T (App. B), tested on their own:

* ``numint.integral_value``: an ``Integral(g·q, θ)`` evaluated numerically, against closed forms it must reproduce
  (E[log θ] = ψ(α) − log β under a gamma, E[log(1 − θ)] = ψ(b) − ψ(a + b) under a beta, E[θ²] = m² + s² under a
  normal) from shapes 1e-3 (mass at θ = e^{−1000}) to 1e5 (a peak of relative width 3e-3), scales 1e-5 to 1e5 and a
  normal of standard deviation 1e-3 at 1e6; an integral that does not converge is an error, not a number;
* ``besselk_order_derivative``: ∂K_ν(x)/∂ν in closed form at half-integer (E₁ and elementary functions) and
  integer (K₀ … K_{n−1}) orders, against mpmath's numerical derivative; ``besselk_form``: sympy's I-pair form of
  ∫ θ^a e^{−pθ − q/θ} dθ rewritten with K, against mpmath quadrature.
"""
import mpmath as mp
import numpy as np
import pytest
import sympy as sp
from scipy import special

from blr_derive.core.errors import DerivationError
from blr_derive.core.specialfns import besselk_order_derivative, dbesselk
from blr_derive.families.numint import integral_value, numeric_integrals
from blr_derive.families.partition import besselk_form
from blr_derive.families.symbolic import evaluate

x = sp.Symbol("x", positive=True)
y = sp.Symbol("y", real=True)


def F(v):
    return sp.Float(v, 30)


def gamma_case(a, b):
    a, b = F(a), F(b)
    logq = a * sp.log(b) - sp.loggamma(a) + (a - 1) * sp.log(x) - b * x
    return sp.Integral(sp.log(x) * sp.exp(logq), (x, 0, sp.oo)), float(special.digamma(float(a)) - np.log(float(b)))


def beta_case(a, b):
    a, b = F(a), F(b)
    logq = (a - 1) * sp.log(x) + (b - 1) * sp.log(1 - x) - (sp.loggamma(a) + sp.loggamma(b) - sp.loggamma(a + b))
    return (sp.Integral(sp.log(1 - x) * sp.exp(logq), (x, 0, 1)),
            float(special.digamma(float(b)) - special.digamma(float(a + b))))


def normal_case(m, s):
    m, s = F(m), F(s)
    logq = -(y - m) ** 2 / (2 * s ** 2) - sp.log(s) - sp.log(2 * sp.pi) / 2
    return sp.Integral(y ** 2 * sp.exp(logq), (y, -sp.oo, sp.oo)), float(m ** 2 + s ** 2)


CASES = ([(gamma_case, (a, b)) for a in (1e-3, 0.3, 1.0, 7.0, 1e5) for b in (1e-5, 1.0, 1e5)]
         + [(beta_case, (a, b)) for a in (0.01, 0.5, 1e4) for b in (0.02, 1.0, 1e4)]
         + [(normal_case, (m, s)) for m in (0.0, -3.0, 1e6) for s in (1e-3, 1.0, 1e4)])


@pytest.mark.parametrize("make,args", CASES, ids=[f"{m.__name__}{a}" for m, a in CASES])
def test_numeric_integral_reproduces_closed_forms(make, args):
    node, want = make(*args)
    got = integral_value(node)
    # 1e-9: the integrand's own rounding (log q of a gamma of shape 1e5 is 1e5·u − 1e-5·e^u − 2.2e6 in float64)
    assert abs(got - want) <= 1e-9 * max(1.0, abs(want)), (got, want)


def test_integrals_are_replaced_inside_an_expression_and_evaluate_integrates_them():
    node, want = gamma_case(2.5, 0.7)
    e = 3 + 2 * node
    assert float(numeric_integrals(e)) == pytest.approx(3 + 2 * want, rel=1e-12)
    a, b = sp.symbols("a b", positive=True)
    sym = sp.Integral(sp.log(x) * sp.exp(a * sp.log(b) - sp.loggamma(a) + (a - 1) * sp.log(x) - b * x), (x, 0, sp.oo))
    assert evaluate(sym, {a: 2.5, b: 0.7}) == pytest.approx(want, rel=1e-10)


def test_a_divergent_integral_is_an_error_not_a_number():
    with pytest.raises(DerivationError):
        integral_value(sp.Integral(1 / (1 + x), (x, 0, sp.oo)))        # ∫ dθ/(1 + θ) = ∞


ORDERS = [sp.Rational(k, 2) for k in range(-11, 12, 2)] + [sp.Integer(k) for k in range(-5, 6)]


@pytest.mark.parametrize("nu", ORDERS, ids=str)
def test_besselk_order_derivative_in_closed_form(nu):
    xs = sp.Symbol("xs", positive=True)
    e = besselk_order_derivative(nu, xs)
    assert all(a.args[0] == 0 for a in e.atoms(dbesselk))            # K itself only (no order derivative left)
    for v in (0.05, 1.0, 7.5, 30.0):
        want = float(mp.diff(lambda t: mp.besselk(t, v), float(nu)))
        got = evaluate(e, {xs: v})
        assert abs(got - want) <= 1e-12 * max(1.0, abs(want)), (v, got, want)


def test_besselk_order_derivative_elsewhere_is_the_integral():
    xs = sp.Symbol("xs", positive=True)
    assert besselk_order_derivative(sp.Rational(1, 3), xs) == dbesselk(1, sp.Rational(1, 3), xs)
    assert besselk_order_derivative(sp.Rational(27, 2), xs) == dbesselk(1, sp.Rational(27, 2), xs)
    p = sp.Symbol("p", real=True)
    assert besselk_order_derivative(p, xs) == dbesselk(1, p, xs)


@pytest.mark.slow
def test_besselk_form_of_the_gig_kernel_integral():
    """sympy gives ∫ θ^a e^{−pθ − q/θ} dθ as Γ-weighted I_{±(a+1)}; rewritten it is 2(q/p)^{(a+1)/2} K_{a+1}(2√(pq))
    (DLMF 10.32.10), and equals the integral."""
    a = sp.Symbol("a", real=True)
    p, q = sp.symbols("p q", positive=True)
    Z = sp.integrate(x ** a * sp.exp(-p * x - q / x), (x, 0, sp.oo), conds="none", meijerg=True)
    assert Z.has(sp.besseli)
    K = besselk_form(Z)
    assert K.has(sp.besselk) and not K.has(sp.besseli)
    for av, pv, qv in ((0.3, 1.0, 2.0), (-2.7, 0.4, 5.0), (4.0, 3.0, 0.2)):
        got = complex(K.subs({a: av, p: pv, q: qv}).evalf(30))
        want = mp.quad(lambda t: t ** av * mp.exp(-pv * t - qv / t), [0, 1, mp.inf])
        assert abs(got.imag) < 1e-20 and got.real == pytest.approx(float(want), rel=1e-12)
