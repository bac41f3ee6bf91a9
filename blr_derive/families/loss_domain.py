"""Is an explicit loss a real, finite number on the candidate family's support?

The BLR's objective E_q[ℓ] − H(q) (Khan & Rue 2023, Eq. 2) and its natural gradient ∇_μE_q[ℓ] (Eq. 6) are
expectations over q, whose density is positive on the whole support of the family: a loss that is complex or
infinite on part of the support has no expectation under any q of the family.  Written as a formula, such a loss
still derives (sympy continues log(−θ) to log θ + iπ, and a finite support's Σ_θ q(θ)ℓ(θ) keeps the i of log(−1)),
so the engine would print an update from a loss the user did not mean (`log(-theta)` under the gamma,
`log(theta)` under the Bernoulli on {−1, +1}).  :func:`loss_off_support` finds one point of the support where the
loss is not a finite real number, so that the recipe is refused at its loss's line instead.

The points: every point of a finite support (at most ``MAX_POINTS``); inside a continuous one a few fixed interior
points (a pole or a zero of a logarithm at one point of a continuous support leaves E_q[ℓ] finite or is the
integrability question `blr-derive check` answers, so no boundary point is taken).  The loss is evaluated with its
hyperparameters at their defaults; a point where it still reads another symbol (data, a family parameter, a
required hyperparameter) is skipped, since its value there is not known before the run."""
from __future__ import annotations

import itertools

import sympy as sp

from blr_derive.core.matexpr import is_mat
from blr_derive.core.nodes import DataSum
from blr_derive.families.partition import support_points

#: interior points of each continuous scalar support (none at a boundary)
INTERIOR = {
    "real": (-2.25, -0.5, 0.375, 1.75),
    "positive": (0.375, 1.25, 4.5),
    "unit_interval": (0.125, 0.5, 0.875),
    "circular": (-2.5, 0.25, 2.0),
}

#: the most support points evaluated (a finite support is enumerated up to this many; product grids likewise)
MAX_POINTS = 64


def _points(fam):
    """[{component symbol: value}] to evaluate the loss at, or [] where the support is not one this module knows."""
    comps = list(getattr(fam, "components", None) or [])
    if not comps or any(is_mat(c) for c in comps):
        return []
    finite = support_points(fam, limit=12)
    if finite is not None:
        return finite[:MAX_POINTS]
    supports = list(getattr(fam, "component_supports", None) or [])
    if len(supports) != len(comps) or any(s not in INTERIOR for s in supports):
        return []
    grid = itertools.product(*[INTERIOR[s] for s in supports])
    return [dict(zip(comps, pt)) for pt in itertools.islice(grid, MAX_POINTS)]


def _value(expr, point):
    """The loss at ``point`` as a sympy number, None where it still reads a symbol (unknown before the run).  The
    point's coordinates are floats, and every subexpression is reduced to one number (complex ones to a + b·i) as
    soon as its arguments are numbers, so that nothing symbolic grows with the loss's depth (exact values were
    simplified symbolically: a sigmoid nested twelve deep at θ = −1 did not finish in 60 s; a log nested sixty
    deep at θ = 0.125 keeps an iπ at each level and did not finish in 120 s).  A value too large for any float
    (exp nested thirty deep overflows mpmath's exponent) is infinite."""
    if expr.free_symbols - set(point):
        return None
    at = {c: sp.Float(x, 30) for c, x in point.items()}
    try:
        v = _reduce(expr, at)
    except (OverflowError, MemoryError):
        return sp.oo
    except (TypeError, ValueError, ArithmeticError, AttributeError):
        return None
    if is_mat(v):
        if v.shape != (1, 1):
            return None
        v = v.as_explicit()[0, 0] if hasattr(v, "as_explicit") else v[0, 0]
    if v.free_symbols:
        return None
    try:
        return sp.N(v, 20)
    except OverflowError:
        return sp.oo
    except (TypeError, ValueError, ArithmeticError):
        return None


def _reduce(expr, at):
    """``expr`` with ``at`` substituted, bottom-up, each scalar subexpression of numbers evaluated to 30 digits."""
    if expr in at:
        return at[expr]
    if not expr.args or not expr.has(*at):
        return expr
    args = [_reduce(a, at) for a in expr.args]
    v = expr.func(*args)
    if isinstance(v, sp.Expr) and not is_mat(v) and v.is_number and not v.is_Number:
        v = v.evalf(30)
    return v


def _terms(expr):
    """The additive terms of the loss, each judged on its own (``_value`` skips one that reads data: a data value
    may make it vanish), so that `w*theta + log(-theta)` is refused though w is not known."""
    return list(sp.Add.make_args(expr))


def _fault(v):
    """'not a real number', 'not finite' or None (a finite real number) for a sympy number ``v``."""
    if v.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
        return "not finite"
    real = v.is_real if v.is_number else None
    if real is False or (real is None and abs(sp.im(v)) > 1e-15):
        return "not a real number"
    return None


def _row_terms(fam, expr):
    """The data sums Σ_n f(v_n) of a loss over a real vector θ whose rows v_n read θ (``sum(log(X*theta))``): each
    v_n = x_nᵀθ + b_n ranges over the real line as θ does (x_n ≠ 0), so f must be real and finite on all of it."""
    theta = getattr(fam, "theta", None)
    if theta is None or not is_mat(theta) or getattr(fam, "components", None) or fam.support != "real":
        return []
    return [n for n in sp.preorder_traversal(expr) if isinstance(n, DataSum) and n.vec.has(theta)]


def loss_off_support(fam, loss, hyper_values: dict | None = None):
    """A text naming a point of ``fam``'s support where ``loss`` is not a finite real number (``hyper_values``:
    symbol → value substituted first, the hyperparameters' defaults), or None where no such point is found."""
    expr = loss.xreplace(hyper_values or {})
    terms = _terms(expr)
    for point in _points(fam):
        faults = [_fault(v) for v in (_value(t, point) for t in terms) if v is not None]
        fault = next((f for f in faults if f is not None), None)
        if fault is not None:
            at = ", ".join(f"{c} = {float(x):g}" for c, x in point.items())
            return f"{fault} at {at}, a point of the support of family '{fam.name}' ({_support_text(fam)})"
    for term in _row_terms(fam, expr):
        f = term.fn
        for u in INTERIOR["real"]:
            v = _value(f.expr, {f.variables[0]: u})
            fault = None if v is None else _fault(v)
            if fault is not None:
                return (f"{fault} at {sp.sstr(f.variables[0])} = {u:g} in the data sum {sp.sstr(term)}, whose rows "
                        f"{sp.sstr(f.variables[0])} = {sp.sstr(term.vec)} take every real value under family "
                        f"'{fam.name}' (support real)")
    return None


def _support_text(fam):
    supports = list(getattr(fam, "component_supports", None) or [])
    return ", ".join(supports) if supports else str(fam.support)
