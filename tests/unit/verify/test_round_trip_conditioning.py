"""check's ``round_trip_expectation`` for a numeric μ → ordinary inverse (blr_derive/verify/family.py,
_ill_conditioned_round_trip): where F(λ) = ∂μ/∂λ (Eq. 4) is ill-conditioned, μ in float64 determines λ only to the
move its rounding makes, |F⁻¹|·ε|μ|, which can be far above the check's 1e-8; a round trip within that move that
reproduces μ passes (with μ's round-trip error as its value), one beyond it fails with its parameter error."""
import numpy as np
import pytest

from blr_derive.families.library import load_family
from blr_derive.verify.family import _ill_conditioned_round_trip

ZIPF = """\
name: zipf12
variable: k
support: integers 1..12
parameters:
  r: {domain: real, description: tilt}
  s: {domain: real, description: power}
sufficient_statistics: [k, log(k)]
natural_parameters: [r, s]
"""


@pytest.fixture(scope="module")
def zipf(tmp_path_factory):
    path = tmp_path_factory.mktemp("zipf") / "zipf12.yaml"
    path.write_text(ZIPF)
    return load_family(str(path))


def _round_trip(fam, r, s):
    rs, ss = [p.symbol for p in fam.free_params]
    vals = {rs: r, ss: s}
    lam_vals = {l: fam.evaluate(e, vals, {}) for l, e in zip(fam.lam, fam.eta)}
    mvals = {u: fam.evaluate(m, vals, {}) for u, m in zip(fam.mu, fam.mu_ord)}
    back = fam.numeric_ord_from_mu(dict(mvals), {})
    err = max(abs(back[rs] - r) / max(1, abs(r)), abs(back[ss] - s) / max(1, abs(s)))
    return vals, lam_vals, mvals, back, err, (rs, ss)


@pytest.mark.parametrize("r", [6.0, 10.0])
def test_a_round_trip_as_far_as_mu_determines_it_passes(zipf, r):
    """r = 6: cond F = 6.5e6, the parameters back to 1.7e-6 (above the check's 1e-8) with μ reproduced to 2e-16;
    r = 10 (all but e^-10 of the mass at k = 12): back to 2.5e-3 within μ's rounding move of 6.6e-3."""
    vals, lam_vals, mvals, back, err, _ = _round_trip(zipf, r, 1.0)
    assert err > 1e-8
    value, note = _ill_conditioned_round_trip(zipf, vals, back, mvals, {}, lam_vals, {}, err)
    assert value <= 1e-12 and "as far as μ's rounding determines them" in note, note


def test_a_round_trip_beyond_what_mu_determines_fails(zipf):
    """The same point with r's solution moved by 1e-5 (50 times μ's rounding move there): the error stands."""
    vals, lam_vals, mvals, back, err, (rs, _) = _round_trip(zipf, 6.0, 1.0)
    back = {**back, rs: back[rs] + 1e-5}
    value, note = _ill_conditioned_round_trip(zipf, vals, back, mvals, {}, lam_vals, {}, 1e-5)
    assert value == 1e-5 and "μ reproduced to" in note and "as far as" not in note, note
