"""scipy.special.ive (AMOS) is NaN above x = 2^30: the numpy module of von_mises returned A = NaN at κ = 2e9, and a
count family normalized by a Bessel I_1 (q(k) ∝ r^k/(k!(k+1)!), A = log(I_1(2√r)/√r)) NaN for λ = log r > 40.2.
The numpy printer now writes e^-x I_0, e^-x I_1 as scipy's i0e/i1e (Cephes, finite there) and another order as the
module's _ive (the asymptotic series of DLMF 10.40.1 above 1e8); references in mpmath."""
import mpmath as mp
import numpy as np
import pytest
import types

from blr_derive import api
from blr_derive.codegen.registry import emit
from blr_derive.ir.build import family_ir

BESSEL_COUNT = """
name: bessel_count
description: q(k) proportional to r^k/(k! (k+1)!), normalized by a Bessel I_1
variable: k
support: nonnegative_integers
parameters:
  r: {domain: positive, description: rate}
sufficient_statistics: [k]
base_measure: 1/(factorial(k)*factorial(k+1))
natural_parameters: [log(r)]
"""


def _numpy_module(ref, tmp_path=None):
    if tmp_path is not None:
        p = tmp_path / "bessel_count.yaml"
        p.write_text(ref, encoding="utf-8")
        ref = str(p)
    fam = api.family(ref)
    m = types.ModuleType("fam_module")
    exec(compile(emit(family_ir(fam, ref), "numpy"), ref, "exec"), m.__dict__)
    return m


@pytest.mark.parametrize("nu", [0, 1, 2, 3.5, 10])
@pytest.mark.parametrize("x", [1e7, 9.99e7, 1.01e8, 1e9, 2e9, 1e15])
def test_ive_helper_matches_mpmath(nu, x):
    from blr_derive.codegen.backends.numpy import runtime as nr
    mp.mp.dps = 40
    assert float(nr._ive(nu, np.array([x]))[0]) == pytest.approx(float(mp.besseli(nu, x) * mp.exp(-x)), rel=1e-14)


def test_von_mises_module_log_partition_at_huge_concentration():
    m = _numpy_module("von_mises")
    mp.mp.dps = 40
    for kappa in (1e3, 1e9, 2e9, 1e12):
        want = float(mp.log(2 * mp.pi * mp.besseli(0, kappa)))
        assert m.log_partition(np.array([kappa, 0.0])) == pytest.approx(want, rel=1e-14), kappa
        assert np.asarray(m.expectation_parameters(np.array([kappa, 0.0])))[0] == pytest.approx(
            float(mp.besseli(1, kappa) / mp.besseli(0, kappa)), rel=1e-14)


def test_bessel_normalized_count_family_at_large_natural_parameter(tmp_path):
    m = _numpy_module(BESSEL_COUNT, tmp_path)
    mp.mp.dps = 50
    for lam in (10.0, 40.0, 40.3, 60.0, 100.0, 700.0):
        X = 2 * mp.exp(mp.mpf(lam) / 2)
        A = float(mp.log(mp.besseli(1, X)) - mp.mpf(lam) / 2)
        mu = float(X / 2 * mp.besseli(2, X) / mp.besseli(1, X))
        assert m.log_partition(np.array([lam])) == pytest.approx(A, rel=1e-14), lam
        assert np.asarray(m.expectation_parameters(np.array([lam])))[0] == pytest.approx(mu, rel=1e-13), lam
