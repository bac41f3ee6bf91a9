"""Discrete families declared directly in a real natural parameter (found by the user corpus): the log-partition
is a power series in e^λ, Σ h(k) e^{λk}, which sympy sums once e^{λ} is a positive placeholder u (Σ u^k/k! = e^u,
Σ u^k = 1/(1 − u)); each is checked against the textbook normaliser and by `check`."""
import math

import pytest

from blr_derive import api
from blr_derive.verify.family import check_family

POISSON_W = """
name: poisson_lograte
variable: k
support: nonnegative_integers
parameters:
  w: {domain: real}
sufficient_statistics: [k]
base_measure: 1/factorial(k)
natural_parameters: [w]
"""

GEOMETRIC_W = """
name: geometric_w
variable: k
support: nonnegative_integers
parameters:
  w: {domain: real}
sufficient_statistics: [k]
natural_parameters: [-exp(w)]
"""


@pytest.mark.parametrize("text, A", [
    (POISSON_W, lambda lam: math.exp(lam)),                          # Σ e^{λk}/k! = exp(e^λ)
    (GEOMETRIC_W, lambda lam: -math.log1p(-math.exp(lam))),          # Σ e^{λk} = 1/(1 − e^λ), λ < 0
])
def test_log_partition_is_the_textbook_one_and_check_passes(text, A):
    fam = api.family(text)
    (lam,) = fam.lam
    for value in (-2.0, -0.3, 0.7):
        if text is GEOMETRIC_W and value >= 0:
            continue
        assert float(fam.evaluate(fam.A, {lam: value})) == pytest.approx(A(value), rel=1e-14)
    assert all(c.passed for c in check_family(fam, points=2, seed=2, mc_samples=5000))
