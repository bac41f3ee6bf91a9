"""Sympy matrix expressions: predicates, canonical simplification (transposes, inverses, traces, products of
symmetric matrices) and scalar views; the calculus on them is ``blr_derive/core/matcalc.py``.

(Originally one module with the calculus:)  Matrix differential calculus on sympy matrix expressions.

sympy's own ``MatrixExpr.diff`` is incomplete (it returns 0 for d log|X| and drops
factors in products of inverses), so the engine uses the differential method of
Magnus & Neudecker instead: compute the differential ``d f`` with the product rule,
``d X⁻¹ = -X⁻¹ dX X⁻¹``, ``d|X| = |X| tr(X⁻¹ dX)``, ``d tr X = tr dX``; bring every
term of a scalar differential to the canonical form ``tr(M dX)``; read the gradient
off as ``Mᵀ`` (and symmetrize it for symmetric matrix variables).

Scalars are handled by the same functions: a plain ``Symbol`` is a 1×1 variable and
``sympy.diff`` is used for scalar sub-expressions.  Every result is cross-checked
numerically in ``tests/unit/core/test_matcalc.py``.
"""
from __future__ import annotations

import functools

from typing import Iterable

import sympy as sp
from sympy.matrices.expressions.matexpr import MatrixExpr

from blr_derive.core.errors import DerivationError


def is_mat(x) -> bool:
    return isinstance(x, MatrixExpr)


def like_symbol(name, ref, **assumptions):
    """A placeholder symbol with the shape of ``ref`` (a real scalar, or a MatrixSymbol of ref's shape)."""
    if is_mat(ref):
        return sp.MatrixSymbol(name, *ref.shape)
    return sp.Symbol(name, real=True, **assumptions)


def scalarize(x):
    """A 1×1 matrix expression as a scalar (its trace); scalars unchanged."""
    if is_mat(x) and x.shape == (1, 1):
        return sp.Trace(x)
    return x


# ---------------------------------------------------------------------------
# Simplification: targeted rewrites only (never sympy.simplify on big trees).
# ---------------------------------------------------------------------------

def tidy_scalar(c):
    c = sp.expand(c)
    if c.has(sp.Trace, sp.Determinant):
        return c
    return sp.factor_terms(c)


def simplify_mat(expr, symmetric: Iterable = ()):
    """Canonicalize a (matrix or scalar) expression.

    Transposes are pushed to the leaves and dropped on symmetric symbols,
    ``Inverse`` of scalar multiples and products is distributed, adjacent
    ``X X⁻¹`` cancel, and like terms of sums are collected with tidy coefficients.
    """
    sym = frozenset(symmetric)
    if isinstance(expr, sp.Basic):
        return _simplified(expr, sym)
    return _simplify_mat(expr, sym)


def _simplify_mat(expr, sym):
    prev = None
    cur = expr
    for _ in range(8):
        if prev is not None and cur == prev:
            break
        prev = cur
        cur = _simp(cur, sym)
    return cur


#: (expression, symmetric symbols) -> simplify_mat's result, the 2048 latest: a pure function of immutable
#: expressions, remembered because a family derived again (a file that differs only in prose, a recipe sharing its
#: family) repeats it
_simplified = functools.lru_cache(maxsize=2048)(_simplify_mat)


def _expand_matpow(e):
    """X**n (integer n) as an explicit product of X or X⁻¹ factors."""
    base, n = e.args
    if not (n.is_Integer and abs(int(n)) <= 16):
        raise DerivationError(f"matrix power with a non-integer or large exponent: {e}")
    n = int(n)
    if n == 0:
        return sp.Identity(base.shape[0])
    f = base if n > 0 else sp.Inverse(base)
    return sp.MatMul(*([f] * abs(n))) if abs(n) > 1 else f


def _simp(e, sym):
    if not isinstance(e, sp.Basic) or e.is_Atom:
        return e
    if isinstance(e, sp.MatPow) and not isinstance(e, sp.Inverse):
        return _simp(_expand_matpow(e), sym)
    if isinstance(e, sp.MatrixSymbol):
        return e
    if isinstance(e, sp.Transpose):
        return _transpose(_simp(e.arg, sym), sym)
    if isinstance(e, sp.Inverse):
        a = _simp(e.arg, sym)
        return _inverse(a, sym)
    if isinstance(e, sp.MatMul):
        return _matmul([_simp(a, sym) for a in e.args], sym)
    if isinstance(e, sp.MatAdd):
        return _matadd([_simp(a, sym) for a in e.args], sym)
    if isinstance(e, sp.Trace):
        a = _simp(e.arg, sym)
        return _trace(a, sym)
    if isinstance(e, sp.Determinant):
        return sp.Determinant(_simp(e.arg, sym))
    if is_mat(e):
        return e.func(*[_simp(a, sym) for a in e.args]) if e.args else e
    # scalar expression
    new_args = [_simp(a, sym) for a in e.args]
    if isinstance(e, (sp.Add, sp.Mul, sp.Pow)) or isinstance(e, sp.Function):
        r = e.func(*new_args)
    else:
        r = e.func(*new_args) if new_args else e
    return r


def _transpose(a, sym):
    if not is_mat(a):
        return a
    if isinstance(a, sp.MatrixSymbol):
        return a if a in sym else sp.Transpose(a)
    if isinstance(a, sp.Transpose):
        return a.arg
    if isinstance(a, (sp.Identity, sp.ZeroMatrix)):
        return a.T
    if isinstance(a, sp.Inverse):
        t = _transpose(a.arg, sym)
        if isinstance(t, sp.Transpose):      # canonical form: (X⁻¹)ᵀ with the transpose outside
            return sp.Transpose(a)
        return _inverse(t, sym)
    if isinstance(a, sp.MatMul):
        c, mats = split_coeff(a.args)
        return _matmul([c] + [_transpose(f, sym) for f in reversed(mats)], sym)
    if isinstance(a, sp.MatAdd):
        return _matadd([_transpose(t, sym) for t in a.args], sym)
    return sp.Transpose(a)


def _inverse(a, sym):
    if not is_mat(a):
        return 1 / a
    if isinstance(a, sp.Inverse):
        return a.arg
    if isinstance(a, sp.Identity):
        return a
    if isinstance(a, sp.Transpose):
        inner = _inverse(a.arg, sym)
        return inner.arg if isinstance(inner, sp.Transpose) else sp.Transpose(inner)
    if isinstance(a, sp.MatMul):
        c, mats = split_coeff(a.args)
        if all(f.is_square for f in mats):
            return _matmul([1 / c] + [_inverse(f, sym) for f in reversed(mats)], sym)
    return sp.Inverse(a)


def split_coeff(args):
    c = sp.Integer(1)
    mats = []
    for f in args:
        if is_mat(f):
            mats.append(f)
        else:
            c = c * f
    return c, mats


def _matmul(args, sym):
    c = sp.Integer(1)
    mats = []
    for f in args:
        if is_mat(f):
            if isinstance(f, sp.MatMul):
                cc, mm = split_coeff(f.args)
                c = c * cc
                mats.extend(mm)
            else:
                mats.append(f)
        else:
            c = c * f
    if any(isinstance(f, sp.ZeroMatrix) for f in mats) or c == 0:
        shape = (mats[0].shape[0], mats[-1].shape[1]) if mats else None
        return sp.ZeroMatrix(*shape) if shape else sp.Integer(0)
    # distribute over a sum factor? no: keep products unexpanded here.
    out = []
    for f in mats:
        if isinstance(f, sp.Identity):
            continue
        if out and _cancels(out[-1], f):
            out.pop()
            continue
        out.append(f)
    if not mats:
        return c
    if not out:
        n = mats[0].shape[0]
        out = [sp.Identity(n)]
    c = tidy_scalar(c)
    if c == 1 and len(out) == 1:
        return out[0]
    return sp.MatMul(c, *out) if c != 1 else sp.MatMul(*out)


def _cancels(a, b):
    """X X⁻¹ or X⁻¹ X, and their transposes Xᵀ (X⁻¹)ᵀ, (X⁻¹)ᵀ Xᵀ (the canonical form writes (Xᵀ)⁻¹ as (X⁻¹)ᵀ)."""
    if isinstance(a, sp.Transpose) and isinstance(b, sp.Transpose):
        a, b = a.arg, b.arg
    return (isinstance(a, sp.Inverse) and a.arg == b) or (isinstance(b, sp.Inverse) and b.arg == a)


def _matadd(terms, sym):
    groups: dict = {}
    order = []
    shape = None
    for t in terms:
        for tt in (t.args if isinstance(t, sp.MatAdd) else (t,)):
            if not is_mat(tt):
                raise DerivationError(f"adding a scalar to a matrix: {tt}")
            shape = tt.shape
            if isinstance(tt, sp.ZeroMatrix):
                continue
            if isinstance(tt, sp.MatMul):
                c, mats = split_coeff(tt.args)
            else:
                c, mats = sp.Integer(1), [tt]
            key = tuple(mats)
            if key not in groups:
                groups[key] = sp.Integer(0)
                order.append(key)
            groups[key] = groups[key] + c
    out = []
    for key in order:
        c = tidy_scalar(groups[key])
        if c == 0:
            continue
        mats = list(key)
        out.append(mats[0] if (c == 1 and len(mats) == 1) else sp.MatMul(c, *mats) if c != 1 else sp.MatMul(*mats))
    if not out:
        return sp.ZeroMatrix(*shape)
    if len(out) == 1:
        return out[0]
    return sp.MatAdd(*out)


def _trace(a, sym):
    if not is_mat(a):
        return a
    if isinstance(a, sp.MatMul) and any(isinstance(f, sp.MatAdd) for f in a.args):
        a = _simp(sp.expand(a), sym)
        if not is_mat(a):
            return a
    if isinstance(a, sp.MatAdd):
        return sp.Add(*[_trace(t, sym) for t in a.args])
    if isinstance(a, sp.MatMul):
        c, mats = split_coeff(a.args)
        if c != 1:
            return c * _trace(_matmul(mats, sym), sym)
    if isinstance(a, sp.ZeroMatrix):
        return sp.Integer(0)
    if isinstance(a, sp.Identity):
        return a.shape[0]
    if isinstance(a, sp.MatMul):
        # cyclic canonical form: tr(ABC) = tr(BCA) = tr(CAB); cancel X X⁻¹ across the ends
        mats = list(a.args)
        rots = [mats[i:] + mats[:i] for i in range(len(mats))]
        rots = [r for r in rots if r[0].shape[0] == r[-1].shape[1]]
        for r in rots:
            red = _matmul(r, sym)
            if not isinstance(red, sp.MatMul) or len(red.args) < len(mats):
                return _trace(red, sym)
        best = min(rots, key=lambda r: (r[0].shape != (1, 1) and r[-1].shape != (1, 1), str(sp.MatMul(*r))))
        return sp.Trace(sp.MatMul(*best))
    return sp.Trace(a)


# ---------------------------------------------------------------------------
# Differentials
# ---------------------------------------------------------------------------
