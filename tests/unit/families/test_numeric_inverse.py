"""symbolic.evaluate's value of Inverse(M) for a numeric M (mpmath LU at 30 digits, remembered per node) against
sympy's exact rational inverse; a singular matrix is refused as sympy refuses it."""
import sympy as sp
import pytest

from blr_derive.families import symbolic
from blr_derive.families.symbolic import _numeric_inverse, evaluate


def test_inverse_matches_the_exact_rational_inverse_to_30_digits():
    rows = [[sp.Rational(21, 10), sp.Rational(3, 10), 0], [sp.Rational(3, 10), sp.Rational(17, 10), sp.Rational(1, 5)],
            [0, sp.Rational(1, 5), 3]]
    exact = sp.Matrix(rows).inv()                        # rational arithmetic: the reference
    floats = sp.ImmutableMatrix([[sp.Float(x, 30) for x in r] for r in rows])
    got = _numeric_inverse(sp.Inverse(floats))
    assert isinstance(got, sp.ImmutableMatrix) and got.shape == (3, 3)
    assert max(abs(got[i] - exact[i]) for i in range(9)) < sp.Float("1e-28")
    assert _numeric_inverse(sp.Inverse(floats)) is got   # remembered by the node


def test_singular_matrix_raises_as_sympy_does():
    with pytest.raises(ValueError, match="not invertible"):
        _numeric_inverse(sp.Inverse(sp.ImmutableMatrix([[1, 2], [2, 4]])))


def test_evaluate_of_a_quadratic_form_with_an_inverse():
    X = sp.MatrixSymbol("X", 2, 2)
    v = sp.MatrixSymbol("v", 2, 1)
    e = (v.T * sp.Inverse(X) * v)[0, 0]
    symbolic._numeric_inverse.cache_clear()
    got = evaluate(e, {X: [[2.0, 0.5], [0.5, 1.0]], v: [1.0, -1.0]})
    # [1, -1] [[1, -0.5], [-0.5, 2]] / 1.75 [1, -1]ᵀ = (1 + 1 + 2) / 1.75
    assert got == pytest.approx(4 / 1.75, rel=1e-15)
