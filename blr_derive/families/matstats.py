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
    holders, stats = [], []
    for i, t in enumerate(fam.T):
        t = simplify_mat(t, sym)
        h = sp.MatrixSymbol(f"_stat{i + 1}", *t.shape) if is_mat(t) else sp.Dummy(f"stat{i + 1}", real=True)
        holders.append(h)
        stats.append(_describe(fam, t, h, sym))
    # longer words first (θᵀΛθ before Λθ before Λ), so that a statistic is not matched inside a longer one
    stats.sort(key=lambda st: -len(st[2]))
    hsym = sym | {h for h, u in zip(holders, fam.mu) if is_mat(h) and u in fam.symmetric}
    try:
        e = simplify_mat(sp.expand(expr), sym)
        terms = [_rewrite_term(fam, t, stats, sym) for t in sp.Add.make_args(sp.expand(e))]
        if any(t is None for t in terms):
            return None
        e = sp.Add(*terms)
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


def _split(fam, factors):
    """Scalar factors → (the variable's scalar factor, the rest)."""
    dep = sp.Mul(*[f for f in factors if fam.depends_on_variable(f)])
    return dep, sp.Mul(*[f for f in factors if not fam.depends_on_variable(f)])


def _describe(fam, t, h, sym):
    """A statistic as (kind, the variable's scalar factor, word, transposed word, placeholder): kind 'scalar' (no
    matrix factor: τ, log τ, log|Λ|), 'trace' (a scalar factor times tr(word): τ θᵀθ, θᵀΛθ) or 'run' (a factor
    times a vector or matrix product: Λθ, τθ, Λ)."""
    if not is_mat(t):
        traces = [f for f in sp.Mul.make_args(t) if isinstance(f, sp.Trace)]
        if len(traces) == 1:
            dep, _ = _split(fam, [f for f in sp.Mul.make_args(t) if f is not traces[0]])
            return ("trace", dep, _word(traces[0].arg), None, h)
        return ("scalar", t, [], None, h)
    c, mats = split_coeff(t.args) if isinstance(t, sp.MatMul) else (sp.Integer(1), [t])
    dep, _ = _split(fam, sp.Mul.make_args(c))
    return ("run", dep, mats, _word(simplify_mat(sp.MatMul(*mats).T if len(mats) > 1 else mats[0].T, sym)), h)


def _word(m):
    """The matrix factors of a product (scalar coefficients dropped) as a list."""
    if isinstance(m, sp.MatMul):
        return split_coeff(m.args)[1]
    return [m]


def _divides(fam, dep, sdep):
    """dep / sdep when it is free of the variable (sdep the statistic's scalar factor of the variable), else None."""
    q = sp.simplify(dep / sdep) if sdep != 1 else dep
    return None if fam.depends_on_variable(q) else q


def _rewrite_term(fam, term, stats, sym):
    """One term of the canonical loss with its statistic replaced by a placeholder; the term unchanged when it
    does not depend on the variable; None when it is not a multiple of one statistic."""
    if not fam.depends_on_variable(term):
        return term
    factors = sp.Mul.make_args(term)
    traces = [f for f in factors if isinstance(f, sp.Trace) and fam.depends_on_variable(f)]
    if len(traces) > 1:
        return None
    dep, coeff = _split(fam, [f for f in factors if f not in traces])
    if not traces:
        for kind, t, _, _, h in stats:
            if kind == "scalar":
                q = _divides(fam, dep, t)
                if q is not None:
                    return coeff * q * h
        return None
    arg = traces[0].arg
    c, mats = split_coeff(arg.args) if isinstance(arg, sp.MatMul) else (sp.Integer(1), [arg])
    dc, c = _split(fam, sp.Mul.make_args(c))
    dep, coeff = dep * dc, coeff * c
    for kind, sdep, w, wt, h in stats:
        if kind == "trace" and len(w) == len(mats):
            q = _divides(fam, dep, sdep)
            if q is not None and any(list(mats[k:] + mats[:k]) == list(w) for k in range(len(mats))):
                return coeff * q * h
    for kind, sdep, w, wt, h in stats:
        if kind != "run":
            continue
        q = _divides(fam, dep, sdep)
        if q is None:
            continue
        for pat, rep in ((w, h), (wt, h.T)):
            n = len(pat)
            for k in range(len(mats)):
                rot = list(mats[k:] + mats[:k])
                if n <= len(rot) and rot[:n] == list(pat):
                    rest = [rep] + rot[n:]
                    return coeff * q * sp.Trace(sp.MatMul(*rest).doit() if len(rest) > 1 else rest[0])
    return None
