"""The Gauss–Hermite rule's own error reported by ``check`` (blr_derive/verify/quadrature_rule.py): measured against
an independent reference (mpmath's adaptive quadrature at 40 digits here, the logistic function written out), it
names the spreads where it is large and says nothing for recipes without the rule."""
from pathlib import Path

import mpmath
import numpy as np
import pytest
import sympy as sp

from blr_derive.derive.driver import derive_file
from blr_derive.verify.quadrature_rule import gauss_hermite_notes, rule_error
from blr_derive.core.nodes import U, expit, gauss_hermite_rule

CATALOG = Path(__file__).resolve().parents[3] / "catalog"


def _reference(m, s, stein):
    with mpmath.workdps(40):
        f = lambda x: 1 / (1 + mpmath.exp(-x))                                       # noqa: E731
        g = (lambda t: f(m + s * t) * t * mpmath.npdf(t) / s) if stein else (lambda t: f(m + s * t) * mpmath.npdf(t))
        return mpmath.quad(g, [-mpmath.inf, -mpmath.mpf(m) / s, 0, mpmath.inf])


@pytest.mark.parametrize("nodes,m,s,stein,want", [
    (64, 5.0, 30.0, False, 3.7e-2), (64, 0.3, 10.0, True, 2.5e-3), (64, 0.3, 1.0, False, 1e-16),
    (32, 5.0, 10.0, False, 1.2e-2)])
def test_the_rule_error_is_the_rule_against_a_40_digit_reference(nodes, m, s, stein, want):
    """rule_error against the 64-/32-node rule evaluated here and mpmath at 40 digits: the ~4e-2 in m that an ncvi
    recipe with 64 nodes makes at inputs of scale 30 (the brief's measurement) is the rule's own error."""
    z, w = gauss_hermite_rule(nodes)
    fx = 0.5 * (1 + np.tanh((m + s * z) / 2))
    got = float(np.dot(fx, w * z)) / s if stein else float(np.dot(fx, w))
    ref = float(_reference(m, s, stein))
    independent = abs(got - ref) / abs(ref)
    assert rule_error(expit(U), stein, nodes, m, s) == pytest.approx(independent, rel=1e-6, abs=1e-15)
    assert independent == pytest.approx(want, rel=0.1, abs=1e-15)


def test_check_warns_where_the_rule_error_is_large():
    recipe, D = derive_file(str(CATALOG / "ncvi.yaml"))
    (note,) = gauss_hermite_notes(recipe, D)
    assert "32-node" in note and "WARNING" in note
    assert "1.2e-02 at s = 10" in note and "1.0e-01 at s = 30" in note and "s = 1," not in note


def test_no_note_without_the_rule():
    recipe, D = derive_file(str(CATALOG / "vogn.yaml"))
    assert gauss_hermite_notes(recipe, D) == []


@pytest.mark.parametrize("s", [1.0, 3.0, 10.0])
def test_an_exponential_f_against_its_closed_form(s):
    """E[e^x] = e^{m + s²/2} exactly (a Poisson regression's f): the reference finds the mass far out at t = s."""
    z, w = gauss_hermite_rule(32)
    exact = float(mpmath.exp(mpmath.mpf(0.3) + mpmath.mpf(s) ** 2 / 2))
    independent = abs(float(np.dot(np.exp(0.3 + s * z), w)) - exact) / exact
    assert rule_error(sp.exp(U), False, 32, 0.3, s) == pytest.approx(independent, rel=1e-6, abs=1e-15)
