"""What ``check`` remembers or builds more cheaply gives the same numbers as the plain computation: the product grid of
the quadrature in several coordinates (against numpy's meshgrid), the DE coordinates of the drawn nodes (against the
full table), and the 30-digit K_ν and its derivatives in ν (against mpmath directly, at each working precision)."""
from __future__ import annotations

import mpmath
import numpy as np
import pytest

from blr_derive.verify.hunt import _mp_besselk_at, _mp_dbesselk
from blr_derive.verify.quadrature import de_rule, product_grid


@pytest.mark.parametrize("d, h", [(2, 1 / 32), (3, 1 / 20), (4, 1 / 4)])
def test_product_grid_is_meshgrid_raveled(d, h):
    z, lw1 = de_rule(h)
    Z, lw = product_grid(z, lw1, d)
    want_Z = np.array([g.ravel() for g in np.meshgrid(*([z] * d), indexing="ij")])
    want_lw = sum(w.ravel() for w in np.meshgrid(*([lw1] * d), indexing="ij"))
    assert Z.shape == want_Z.shape == (d, len(z) ** d)
    assert np.array_equal(Z, want_Z) and np.array_equal(lw, want_lw)     # bit for bit, order included
    # the DE coordinates of drawn nodes, read off each axis (Quadrature.sample), are the full table's columns
    t1 = np.arcsinh(np.arcsinh(z) * 2 / np.pi)
    table = np.array([g.ravel() for g in np.meshgrid(*([t1] * d), indexing="ij")])
    idx = np.random.default_rng(3).integers(0, len(z) ** d, 5000)
    at = np.array([t1[k] for k in np.unravel_index(idx, (len(z),) * d)])
    assert np.array_equal(at, table[:, idx])


def test_remembered_besselk_equals_mpmath():
    _mp_besselk_at.cache_clear()
    for nu, x in [(-1.25, 0.3)]:
        with mpmath.workdps(30):
            nu_, x_ = mpmath.mpf(nu), mpmath.mpf(x)
            want = [mpmath.besselk(nu_, x_)] + [mpmath.diff(lambda v: mpmath.besselk(v, x_), nu_, n) for n in (1, 2)]
            for _ in range(2):          # the second time from memory
                got = [_mp_dbesselk(n, nu_, x_) for n in (0, 1, 2)]
                assert got == want
        # another precision is another entry: 15 digits are not the 30-digit value rounded
        with mpmath.workdps(15):
            low = _mp_dbesselk(0, mpmath.mpf(nu), mpmath.mpf(x))
            assert low == mpmath.besselk(mpmath.mpf(nu), mpmath.mpf(x))
            assert low.context.prec == mpmath.mp.prec
    assert _mp_besselk_at.cache_info().hits > 0
