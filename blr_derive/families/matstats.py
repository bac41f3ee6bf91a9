"""Losses linear in matrix and vector sufficient statistics: ℓ = c0 + Σ_i <C_i, T_i(θ)> with <C, T> = tr(Cᵀ T)
(Sec. 1.2, Eq. 3's inner product), as for a Wishart's T = (X, log|X|) or a normal–Wishart's T = (Λθ, θᵀΛθ, Λ,
log|Λ|).  Such a loss is conjugate (Sec. 5.1): E_q[ℓ] = c0 + Σ_i <C_i, μ_i>, so ∇_μ E_q[ℓ] = C.

The loss is canonicalized (products distributed, transposes at the leaves, traces rotated); each statistic is then
replaced by a placeholder where it occurs — a scalar statistic as a whole term or trace, a vector or matrix one as
a contiguous run of factors in a trace's (cyclic) product, or its transpose — and the coefficients are the matrix
gradients in the placeholders (``core/matcalc``).  The loss is linear exactly when no variable is left after the
replacement and no placeholder is left in a coefficient; otherwise the answer is None (not recognised)."""
from __future__ import annotations

import sympy as sp

from blr_derive.core import matcalc
from blr_derive.core.errors import DerivationError
from blr_derive.core.matexpr import is_mat, simplify_mat, split_coeff


def linear_in_matrix_statistics(fam, expr):
    """(c0, [C_i]) with expr = c0 + Σ <C_i, T_i(θ)> and θ-free C_i (matrices shaped like T_i, scalars for scalar
    statistics), or None."""
    sym = frozenset(fam.symmetric)
    if not fam.depends_on_variable(expr):
        return expr, [sp.ZeroMatrix(*t.shape) if is_mat(t) else sp.Integer(0) for t in fam.T]
    holders, scalar_stats, words = [], {}, []
    for i, (t, u) in enumerate(zip(fam.T, fam.mu)):
        t = simplify_mat(t, sym)
        if is_mat(t):
            h = sp.MatrixSymbol(f"_stat{i + 1}", *t.shape)
            holders.append(h)
            w = _word(t)
            wt = _word(simplify_mat(t.T, sym))
            words.append((w, h, wt, h.T))
        else:
            h = sp.Dummy(f"stat{i + 1}", real=True)
            holders.append(h)
            scalar_stats[t] = h
    hsym = sym | {h for h, u in zip(holders, fam.mu) if is_mat(h) and u in fam.symmetric}
    try:
        e = simplify_mat(sp.expand(expr), sym)
        e = e.xreplace({t: h for t, h in scalar_stats.items() if not isinstance(t, sp.Trace)})
        traced = {tuple(_word(t.arg)): h for t, h in scalar_stats.items() if isinstance(t, sp.Trace)}
        e = _rewrite(e, traced, sorted(words, key=lambda w: -len(w[0])))
        if fam.depends_on_variable(e):
            return None
        grads = matcalc.gradient(e, holders, hsym)
    except (DerivationError, TypeError, ValueError, AttributeError):
        return None
    if any(g.has(h) for g in grads for h in holders):
        return None                    # not linear: a statistic times another, or a statistic's function
    zero = {h: (sp.ZeroMatrix(*h.shape) if is_mat(h) else sp.Integer(0)) for h in holders}
    c0 = simplify_mat(sp.expand(e.xreplace(zero).doit()), sym)
    return c0, [simplify_mat(g, sym) if is_mat(g) else sp.expand(g) for g in grads]


def _word(m):
    """The matrix factors of a product (scalar coefficients dropped) as a list."""
    if isinstance(m, sp.MatMul):
        return split_coeff(m.args)[1]
    return [m]


def _rewrite(e, traced, words):
    """Replace the statistics in e: a trace whose cyclic word is a scalar statistic's by its placeholder, and in
    every other trace each contiguous (cyclic) run of a vector or matrix statistic's factors, or of its
    transpose's, by the placeholder (or its transpose)."""
    if isinstance(e, sp.Trace):
        arg = e.arg
        if isinstance(arg, sp.MatAdd):
            return sp.Add(*[_rewrite(sp.Trace(a), traced, words) for a in arg.args])
        c, mats = split_coeff(arg.args) if isinstance(arg, sp.MatMul) else (sp.Integer(1), [arg])
        for k in range(len(mats)):
            rot = tuple(mats[k:] + mats[:k])
            if rot in traced:
                return c * traced[rot]
        mats = _replace_runs(list(mats), words)
        return c * sp.Trace(sp.MatMul(*mats).doit() if len(mats) > 1 else mats[0])
    if isinstance(e, (sp.Add, sp.Mul, sp.Pow)) or (isinstance(e, sp.Function) and not is_mat(e)):
        return e.func(*[_rewrite(a, traced, words) for a in e.args])
    return e


def _replace_runs(mats, words):
    changed = True
    while changed:
        changed = False
        for w, h, wt, ht in words:
            for pat, rep in ((w, h), (wt, ht)):
                n = len(pat)
                if n > len(mats):
                    continue
                for k in range(len(mats)):
                    rot = mats[k:] + mats[:k]
                    if rot[:n] == pat:
                        mats = [rep] + rot[n:]
                        changed = True
                        break
                if changed:
                    break
            if changed:
                break
    return mats
