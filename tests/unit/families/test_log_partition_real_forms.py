"""A derived log-partition must be real where the family is defined, as the generated code evaluates it (found by
the user corpus): the forced expansion log(a/b) = log a − log b is wrong where a and b are both negative, which
made a Beta in mean/precision form complex (+iπ) and the exponential tilt on (0, 1) NaN for λ < 0.  The derived A
is now checked against log Z in floating point and kept whole where the expansion is wrong."""
import math

import pytest
from scipy import integrate, special

from blr_derive import api
from blr_derive.verify.family import check_family

BETA_MEAN_PRECISION = """
name: beta_meanprec
variable: p
support: unit_interval
parameters:
  mu_b: {domain: unit_interval, description: mean}
  phi: {domain: positive, description: precision a + b}
sufficient_statistics: [log(p), log(1 - p)]
natural_parameters: [mu_b*phi - 1, (1 - mu_b)*phi - 1]
"""

TILT = """
name: exp_on_unit_interval
variable: x
support: unit_interval
parameters:
  c: {domain: real}
sufficient_statistics: [x]
natural_parameters: [c]
"""


@pytest.mark.parametrize("lam", [(-0.5, 1.5), (2.0, 0.3), (7.0, 9.0)])
def test_beta_in_mean_precision_form(lam):
    fam = api.family(BETA_MEAN_PRECISION)
    got = float(fam.evaluate(fam.A, dict(zip(fam.lam, lam))))
    assert got == pytest.approx(special.betaln(lam[0] + 1, lam[1] + 1), rel=1e-13)


@pytest.mark.parametrize("c", [-2.0, -1e-3, 0.4, 5.0])
def test_exponential_tilt_on_the_unit_interval(c):
    fam = api.family(TILT)
    got = float(fam.evaluate(fam.A, {fam.lam[0]: c}))
    want = math.log(integrate.quad(lambda x: math.exp(c * x), 0, 1, epsabs=0, epsrel=1e-13)[0])
    assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("text", [BETA_MEAN_PRECISION, TILT])
def test_check_passes(text):
    assert all(c.passed for c in check_family(api.family(text), points=3, seed=1, mc_samples=5000))


UNIT_LOG_LINEAR = """
name: unit_log_linear
variable: theta
support: unit_interval
parameters:
  a: {domain: positive}
  c: {domain: real}
sufficient_statistics: [log(theta), theta]
natural_parameters: [a - 1, c]
"""

GAMMA_ON_UNIT = """
name: gamma_on_unit
variable: theta
support: unit_interval
parameters:
  a: {domain: positive}
  b: {domain: positive}
sufficient_statistics: [log(theta), theta]
natural_parameters: [a - 1, -b]
"""


@pytest.mark.parametrize("text, function", [(UNIT_LOG_LINEAR, "exp_polar"), (GAMMA_ON_UNIT, "meijerg")])
def test_a_closed_form_no_target_computes_is_a_located_error(text, function):
    """∫₀¹ θ^(a−1) e^(cθ) dθ is, to sympy, a lowergamma of c·exp_polar(iπ) (c real) or a Meijer G (c = −b < 0): numpy
    and scipy have neither, and evaluating the lambdified form raised NameError, an internal error (exit 3) instead
    of the located one that asks for log_partition (exit 2)."""
    with pytest.raises(api.SpecError) as info:
        api.family(text)
    msg = str(info.value)
    assert msg.startswith("<family>:8: "), msg                    # the sufficient statistics' line
    assert "declare log_partition" in msg and function not in msg and "NameError" not in msg
