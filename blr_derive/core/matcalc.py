"""Matrix differential calculus on sympy matrix expressions.

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

from typing import Iterable, Mapping

import sympy as sp

from blr_derive.core.errors import DerivationError
from blr_derive.core.matexpr import (_expand_matpow, _matmul, split_coeff, _transpose, is_mat, scalarize, simplify_mat,
                                     tidy_scalar)


def differential(expr, dvars: Mapping):
    """The differential of ``expr``; ``dvars`` maps each variable to its differential symbol."""
    return _d(expr, dvars)


def hessian_from_gradient(grad, theta, symmetric: Iterable = ()):
    """∇²f from ∇f for a vector θ: the Jacobian of the gradient, read off the differential d(∇f) = H dθ.
    Raises DerivationError when a term of the differential is not of the form M dθ."""
    n = theta.shape[0]
    if isinstance(grad, sp.ZeroMatrix):
        return sp.ZeroMatrix(n, n)
    dth = sp.MatrixSymbol("d_" + theta.name, *theta.shape)
    d = simplify_mat(sp.expand(differential(grad, {theta: dth})), symmetric)
    out = []
    for t in (d.args if isinstance(d, sp.MatAdd) else [d]):
        if isinstance(t, sp.ZeroMatrix):
            continue
        coeff, mats = t.as_coeff_mmul()
        mats = list(mats.args) if isinstance(mats, sp.MatMul) else [mats]
        if mats[-1] != dth or any(x.has(dth) for x in mats[:-1]):
            raise DerivationError(f"cannot read the Hessian off the differential term {t}")
        rest = mats[:-1]
        body = sp.MatMul(*rest) if len(rest) > 1 else (rest[0] if rest else sp.Identity(n))
        out.append(coeff * body if coeff != 1 else body)
    if not out:
        return sp.ZeroMatrix(n, n)
    return simplify_mat(sp.MatAdd(*out) if len(out) > 1 else out[0], symmetric)


def _zero_like(e):
    return sp.ZeroMatrix(*e.shape) if is_mat(e) else sp.Integer(0)


def _is_zero(e):
    return (isinstance(e, sp.ZeroMatrix)) or (not is_mat(e) and e == 0)


def _d(e, dv):
    if isinstance(e, sp.MatPow) and not isinstance(e, sp.Inverse):
        return _d(_expand_matpow(e), dv)
    if is_mat(e):
        if isinstance(e, sp.MatrixSymbol):
            return dv.get(e, sp.ZeroMatrix(*e.shape))
        if isinstance(e, (sp.Identity, sp.ZeroMatrix)):
            return sp.ZeroMatrix(*e.shape)
        if not any(s in dv for s in e.free_symbols | _matsyms(e)):
            return sp.ZeroMatrix(*e.shape)
        if isinstance(e, sp.MatAdd):
            parts = [p for p in (_d(a, dv) for a in e.args) if not _is_zero(p)]
            return sp.MatAdd(*parts) if len(parts) > 1 else (parts[0] if parts else _zero_like(e))
        if isinstance(e, sp.MatMul):
            args = list(e.args)
            terms = []
            for i, a in enumerate(args):
                da = _d(a, dv)
                if _is_zero(da):
                    continue
                terms.append(sp.MatMul(*(args[:i] + [da] + args[i + 1:])))
            if not terms:
                return _zero_like(e)
            return sp.MatAdd(*terms) if len(terms) > 1 else terms[0]
        if isinstance(e, sp.Transpose):
            da = _d(e.arg, dv)
            return _zero_like(e) if _is_zero(da) else sp.Transpose(da)
        if isinstance(e, sp.Inverse):
            da = _d(e.arg, dv)
            if _is_zero(da):
                return _zero_like(e)
            return sp.MatMul(-1, e, da, e)
        raise DerivationError(f"cannot differentiate matrix expression of type {type(e).__name__}: {e}")
    # scalar expression: treat Trace/Determinant sub-terms as opaque atoms
    if not any(s in dv for s in e.free_symbols | _matsyms(e)):
        return sp.Integer(0)
    if isinstance(e, sp.Symbol):
        return dv.get(e, sp.Integer(0))
    if isinstance(e, sp.Trace):
        da = _d(e.arg, dv)
        return sp.Integer(0) if _is_zero(da) else sp.Trace(da)
    if isinstance(e, sp.Determinant):
        da = _d(e.arg, dv)
        if _is_zero(da):
            return sp.Integer(0)
        return e * sp.Trace(sp.MatMul(sp.Inverse(e.arg), da))
    atoms = list(e.atoms(sp.Trace, sp.Determinant))
    reps = {a: sp.Dummy(f"t{i}", real=True) for i, a in enumerate(atoms)}     # traces of real matrices are real
    flat = e.xreplace(reps)
    back = {v: k for k, v in reps.items()}
    total = sp.Integer(0)

    def diff(x, t):
        g = sp.diff(x, t)
        if g.has(sp.Derivative, sp.Subs):         # no closed-form derivative (sympy left it unevaluated)
            raise DerivationError(f"cannot differentiate {e}: its derivative has no closed form")
        return g.xreplace(back)
    for a, t in reps.items():
        da = _d(a, dv)
        if not _is_zero(da):
            total += diff(flat, t) * da
    for s in flat.free_symbols:
        if s in dv:
            total += diff(flat, s) * dv[s]
    return total


def _matsyms(e):
    return set(e.atoms(sp.MatrixSymbol)) if isinstance(e, sp.Basic) else set()


# ---------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------

def gradient(f, wrt: list, symmetric: Iterable = ()):
    """Gradients of the scalar ``f`` with respect to each variable in ``wrt``.

    For matrix variables declared symmetric the symmetric gradient ``(G + Gᵀ)/2``
    is returned (the gradient under the trace inner product restricted to
    symmetric matrices), which equals ``G`` whenever ``G`` is symmetric.
    """
    sym = frozenset(symmetric)
    dvars = {}
    for v in wrt:
        if is_mat(v):
            dvars[v] = sp.MatrixSymbol(f"d_{v.name}", *v.shape)
        else:
            dvars[v] = sp.Symbol(f"d_{v.name}")
    df = differential(scalarize(f), dvars)
    df = simplify_mat(df, sym | frozenset(d for v, d in dvars.items() if v in sym))
    return [_extract(df, v, dvars[v], sym) for v in wrt]


def _terms(df):
    """Split a scalar differential into (coefficient, trace-argument-or-None, scalar-part)."""
    out = []
    for term in sp.Add.make_args(sp.expand(df, deep=False) if not df.has(sp.Trace) else df):
        out.extend(_split_term(term))
    return out


def _split_term(term):
    if isinstance(term, sp.Add):
        res = []
        for t in term.args:
            res.extend(_split_term(t))
        return res
    if isinstance(term, sp.Trace):
        arg = term.arg
        if isinstance(arg, sp.MatAdd):
            return [x for t in arg.args for x in _split_term(sp.Trace(t))]
        if isinstance(arg, sp.MatMul):
            c, mats = split_coeff(arg.args)
            if c != 1:
                return [(c * cc, tr) for cc, tr in _split_term(sp.Trace(sp.MatMul(*mats)))]
        return [(sp.Integer(1), arg)]
    if isinstance(term, sp.Mul):
        traces = [a for a in term.args if isinstance(a, sp.Trace) and _has_d(a)]
        if len(traces) == 1:
            rest = sp.Mul(*[a for a in term.args if a is not traces[0]])
            return [(rest * c, tr) for c, tr in _split_term(traces[0])]
        inner = [a for a in term.args if isinstance(a, sp.Add) and _has_d(a)]
        if len(inner) == 1:
            rest = sp.Mul(*[a for a in term.args if a is not inner[0]])
            return [(rest * c, tr) for c, tr in _split_term(inner[0])]
    return [(term, None)]


def _has_d(e):
    return any(s.name.startswith("d_") for s in e.free_symbols | _matsyms(e))


def _extract(df, v, dv, sym):
    if not is_mat(v):
        total = sp.Integer(0)
        for c, tr in _terms(df):
            if tr is None:
                total += sp.diff(c, dv)
            elif tr.has(dv):
                raise DerivationError(f"scalar differential inside a trace: {tr}")
        return tidy_scalar(total)
    grads = []
    for c, tr in _terms(df):
        if tr is None:
            if c.has(dv):
                raise DerivationError(f"cannot bring term to tr(M d{v.name}) form: {c}")
            continue
        if not tr.has(dv):
            continue
        if c.has(dv):
            raise DerivationError(f"non-linear differential term: {c}")
        factors = list(tr.args) if isinstance(tr, sp.MatMul) else [tr]
        cc, factors = split_coeff(factors)
        idx = [i for i, f in enumerate(factors) if f == dv or f == sp.Transpose(dv) or (dv in sym and f == dv)]
        if len(idx) != 1 or any(f.has(dv) for j, f in enumerate(factors) if j != idx[0]):
            raise DerivationError(f"cannot bring term to tr(M d{v.name}) form: {tr}")
        i = idx[0]
        L, R = factors[:i], factors[i + 1:]
        if factors[i] == dv:
            g = _transpose(_matmul(R + L, sym) if (R + L) else sp.Identity(v.shape[0]), sym)
        else:
            g = _matmul(R + L, sym) if (R + L) else sp.Identity(v.shape[0])
        grads.append(sp.MatMul(c * cc, g) if c * cc != 1 else g)
    if not grads:
        return sp.ZeroMatrix(*v.shape)
    G = simplify_mat(sp.MatAdd(*grads) if len(grads) > 1 else grads[0], sym)
    if v in sym:
        Gt = simplify_mat(_transpose(G, sym), sym)
        if Gt != G:
            G = simplify_mat(sp.MatMul(sp.Rational(1, 2), sp.MatAdd(G, Gt)), sym)
    return G
