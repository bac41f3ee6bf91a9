"""Expressions that are linear in a family's sufficient statistics: a conjugate loss (Sec. 5.1), or a log base
measure log h = c0 + Σ c_i T_i, whose expectation is then c0 + Σ c_i μ_i (App. B, Eq. 64)."""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.core.errors import DerivationError
from blr_derive.core.exprfuncs import function_depth
from blr_derive.core.matexpr import is_mat, simplify_mat, split_coeff
from blr_derive.core.nodes import DataSum
from blr_derive.core.pretty import pretty
from blr_derive.core.specialfns import softplus
from blr_derive.families.numeric import MODULES
from blr_derive.families.partition import support_points
from blr_derive.spec.vocabulary import count_total, integer_range


class NotLinearInStatistics(DerivationError):
    """An expression that is not c0 + Σ c_i T_i(θ): ``term`` is the first (expanded) term that is not a multiple of
    one statistic and ``part`` its factor that depends on θ; ``inside`` is the matrix expression that holds θ
    inseparably (θ inside an inverse or a determinant of a sum), or None."""

    def __init__(self, term, part, inside=None, statistics=None):
        self.term, self.part, self.inside, self.statistics = term, part, inside, statistics
        super().__init__(self.describe())

    def describe(self, names=None):
        """The reason in words, with symbols renamed by ``names`` (e.g. a family's variable to a block's)."""
        r = (lambda e: pretty(e.xreplace(names))) if names else pretty
        if self.inside is not None:
            why = f"{r(self.inside)} holds the variable inside a matrix expression that does not separate into scalars"
        else:
            why = f"{r(self.part)} is not a multiple of a sufficient statistic"
        stats = f" ({', '.join(r(t) for t in self.statistics)})" if self.statistics else ""
        return f"in the term {r(self.term)}, {why}{stats}"


def _softplus_as_log(e):
    if not isinstance(e, sp.Basic) or not e.has(softplus):
        return e
    return e.replace(lambda x: isinstance(x, softplus), lambda x: sp.log(1 + sp.exp(x.args[0])))


def linear_in_statistics(fam, expr, symmetric=()):
    """(c0, [c_i]) with expr = c0 + Σ c_i T_i(θ) and θ-free c_i, or None (:func:`statistics_decomposition`)."""
    try:
        return statistics_decomposition(fam, expr, symmetric)
    except NotLinearInStatistics:
        return None


def statistics_decomposition(fam, expr, symmetric=()):
    """(c0, [c_i]) with expr = c0 + Σ c_i T_i(θ) and θ-free c_i; raises :class:`NotLinearInStatistics` naming the
    first term that is not a multiple of a statistic.

    Terms of the expanded expression are matched to sufficient statistics by their θ-dependent
    factor (so data and hyperparameters may appear in the coefficients); this is how a conjugate
    loss is recognised (Sec. 5.1: E_q[ℓ] is then linear in μ and its natural gradient is c).  A scalar θ may
    appear inside traces of matrix products (a latent coordinate times a weight vector, ``(y - z*w).T*(y - z*w)``):
    the scalars are first taken out of the traces (:func:`separate_scalars`), and the traces, determinants and
    data sums that are free of θ are coefficients like any other symbol (``symmetric``: the symmetric matrix
    symbols, whose transposes are dropped).  An expression without θ inside a matrix part is matched as written."""
    if any(is_mat(t) for t in fam.T):
        raise NotLinearInStatistics(expr, expr, statistics=fam.T)
    if not fam.depends_on_variable(expr):
        return expr, [sp.Integer(0)] * len(fam.T)
    # a loss reads log(1 + e^a) as softplus(a) (core/exprfuncs.py LOSS_FUNCTIONS), a family's statistics as written:
    # matched in one form (a logit-beta's log(1 + e^θ) statistic under the loss 3 log(1 + e^θ) − 2θ)
    expr, targets = _softplus_as_log(expr), [sp.expand(_softplus_as_log(t)) for t in fam.T]
    cs = [sp.Integer(0)] * len(fam.T)
    c0 = sp.Integer(0)
    back = {"map": {}, "inseparable": []}
    if opaque_matrix_parts(expr, fam.depends_on_variable)[1]["inseparable"]:
        # θ inside a trace (or a determinant, a data sum): the scalars taken out first, and every matrix part then
        # free of θ is an opaque coefficient (sympy's scalar algebra never sees a matrix)
        expr, back = opaque_matrix_parts(separate_scalars(expr, symmetric), fam.depends_on_variable)
    if expr.has(sp.sin, sp.cos):       # cos(θ − b) = cos θ cos b + sin θ sin b (von Mises statistics)
        expr = sp.expand_trig(expr)
    for term in sp.Add.make_args(sp.expand(sp.expand_log(expr, force=True))):
        dep = sp.Mul(*[f for f in sp.Mul.make_args(term) if fam.depends_on_variable(f)])
        coeff = sp.Mul(*[f for f in sp.Mul.make_args(term) if not fam.depends_on_variable(f)])
        if dep == 1:
            c0 += coeff
            continue
        inside = [a for a in back["inseparable"] if dep.has(a)]
        if inside:
            raise NotLinearInStatistics(term.xreplace(back["map"]), dep.xreplace(back["map"]), inside[0], fam.T)
        for i, t in enumerate(targets):
            if t == 0 or _varies(fam, dep / t):
                continue
            ratio = _simplified_ratio(dep / t)
            if ratio is not None and not fam.depends_on_variable(ratio):
                cs[i] += coeff * ratio
                break
        else:
            raise NotLinearInStatistics(term.xreplace(back["map"]), dep.xreplace(back["map"]), statistics=fam.T)
    return c0.xreplace(back["map"]), [sp.expand(c).xreplace(back["map"]) for c in cs]


#: the deepest nesting of functions (core.exprfuncs.function_depth) for which a ratio of a term to a statistic that
#: the numeric screen could not tell is given to ``sp.simplify``: deeper ones (digamma of a sigmoid eight times, whose
#: values are -inf in double precision at every point) get a rational cancellation only, because sympy's simplify
#: walks every nested argument in each of its strategies and took over 120 s
SIMPLIFY_MAX_DEPTH = 8


def _simplified_ratio(r):
    """``r`` simplified enough to show that it is free of θ when it is: ``sp.simplify`` up to
    :data:`SIMPLIFY_MAX_DEPTH`, a rational cancellation (the nested functions as opaque generators) beyond."""
    return sp.simplify(r) if function_depth(r) <= SIMPLIFY_MAX_DEPTH else sp.cancel(r)


def separate_scalars(e, symmetric=()):
    """A scalar expression whose traces hold matrix expressions with scalar factors, with every scalar factor taken
    out and products of sums expanded: tr(z·A + B) = z tr(A) + tr(B) (matrix-canonical order, transposes at the
    leaves), det(cX) = cⁿ det(X) for an n×n X, and Σ_n (c·v + u)_n = c Σ_n v_n + Σ_n u_n for the plain sum of a
    vector's entries.  Expressions without matrices are returned unchanged."""
    if not isinstance(e, sp.Basic) or not any(is_mat(a) for a in sp.preorder_traversal(e)):
        return e
    e = simplify_mat(sp.expand(e), symmetric)
    e = e.replace(lambda x: isinstance(x, sp.Trace), lambda t: _trace_form(t, symmetric))
    e = e.replace(lambda x: isinstance(x, sp.Determinant), _det_scalars)
    e = e.replace(lambda x: isinstance(x, DataSum) and x.fn.expr == x.fn.variables[0], _plain_sum_scalars)
    return sp.expand(e)


def _trace_form(t, symmetric):
    """One form for tr(ABC) = tr(BCA) = tr(CᵀBᵀAᵀ) = ...: the rotations of the product and of its transpose, a 1×1
    product first (tr(wᵀy) rather than tr(y wᵀ): a dot product in the generated code, not an outer product), then
    the first in print order; so tr(w yᵀ) and tr(yᵀ w) are one coefficient."""
    a = t.arg
    mats = list(a.args) if isinstance(a, sp.MatMul) else [a]
    if any(not is_mat(m) for m in mats):
        return t
    flipped = [simplify_mat(sp.Transpose(m), symmetric) for m in reversed(mats)]
    rots = [r for chain in (mats, flipped) for r in (chain[i:] + chain[:i] for i in range(len(chain)))
            if r[0].shape[0] == r[-1].shape[1]]
    if not rots:
        return t
    best = min(rots, key=lambda r: (r[0].shape[0] != 1, str(sp.MatMul(*r)) if len(r) > 1 else str(r[0])))
    return sp.Trace(sp.MatMul(*best) if len(best) > 1 else best[0])


def _det_scalars(d):
    a = d.arg
    if isinstance(a, sp.MatMul):
        c, mats = split_coeff(a.args)
        if c != 1 and mats:
            n = a.shape[0]
            return c ** n * sp.Determinant(sp.MatMul(*mats) if len(mats) > 1 else mats[0])
    return d


def _plain_sum_scalars(d):
    v = simplify_mat(sp.expand(d.vec))
    out = sp.Integer(0)
    for t in (v.args if isinstance(v, sp.MatAdd) else (v,)):
        c, mats = split_coeff(t.args) if isinstance(t, sp.MatMul) else (sp.Integer(1), [t])
        out += c * DataSum(d.fn, sp.MatMul(*mats) if len(mats) > 1 else mats[0])
    return out


def opaque_matrix_parts(e, depends):
    """``e`` with each scalar built from matrices (a trace, a determinant, a data sum) that ``depends`` says is free of
    the variable replaced by a real placeholder, so that only ordinary scalar algebra is left; the parts that do
    depend on it (a variable inside an inverse, say) are kept and listed.  Returns (expression, {'map':
    placeholder -> part, 'inseparable': [part]})."""
    mapping, inseparable, seen = {}, [], {}

    def walk(x):
        if not isinstance(x, sp.Basic) or x.is_Atom or is_mat(x):
            return x
        if any(is_mat(a) for a in x.args) or isinstance(x, DataSum):
            if depends(x):
                inseparable.append(x)
                return x
            if x not in seen:
                d = sp.Dummy("c", real=True)
                seen[x] = d
                mapping[d] = x
            return seen[x]
        new = [walk(a) for a in x.args]
        return x.func(*new) if any(n is not o for n, o in zip(new, x.args)) else x
    return walk(e), {"map": mapping, "inseparable": inseparable}


def _varies(fam, ratio, points: int = 3) -> bool:
    """Whether ``ratio`` takes different values at a few random points of the support (the other symbols fixed at
    random positive values): then it is no θ-free coefficient, and ``sp.simplify`` of it, which can take minutes on
    a deeply nested expression (``sigmoid`` eight deep), is not needed to say so.  The ratio is compiled to numpy
    once and evaluated in double precision: substituting numbers into the tree and ``evalf`` re-evaluate every
    nested argument and take exponential time in the depth.  False when it cannot tell."""
    pts = support_points(fam, limit=points + 1)            # a finite support: its own (distinct) points
    if pts:
        pts = pts[::max(1, len(pts) // (points + 1))][:points + 1]
    else:
        pts = random_support_points(fam, np.random.default_rng(11), points)
    if not pts or len(pts) < 2:
        return False
    variables = sorted(pts[0], key=str)
    others = sorted(ratio.free_symbols - set(variables), key=str)
    try:
        f = sp.lambdify(variables + others, ratio, modules=MODULES)
        with np.errstate(all="ignore"):
            values = [complex(f(*[float(pt[v]) for v in variables], *[0.7 + 0.3 * i for i in range(len(others))]))
                      for pt in pts]
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, NameError, AttributeError):
        return False
    values = [v for v in values if np.isfinite(v)]        # a point where T = 0 (θ = 0 for T = θ) says nothing
    if len(values) < 2:
        # a θ-free ratio is constant wherever it is defined, on the support or off it: a two-point support with
        # T = 0 at one point (bernoulli on {0, 1}) is screened at points next to the support's
        try:
            with np.errstate(all="ignore"):
                values += [complex(f(*[float(pt[v]) + off for v in variables],
                                     *[0.7 + 0.3 * i for i in range(len(others))]))
                           for pt in pts for off in (0.318, 0.577)]
        except (TypeError, ValueError, ZeroDivisionError, OverflowError, NameError, AttributeError):
            return False
        values = [v for v in values if np.isfinite(v)]
    if len(values) < 2:
        return False
    scale = max(1.0, max(abs(v) for v in values))
    return max(abs(v - values[0]) for v in values) > 1e-6 * scale


def log_h_linear(fam):
    """(c0, [c_i]) with log h = c0 + Σ c_i T_i, or None."""
    lh = fam.log_h
    if any(is_mat(t) for t in fam.T) or not fam.components:
        return None
    if not fam.depends_on_variable(lh):
        return lh, [sp.Integer(0)] * len(fam.T)
    direct = linear_in_statistics(fam, lh)
    if direct is not None:
        return direct
    ts = [sp.Dummy(f"t{i}") for i in range(len(fam.T))]
    cand = sp.expand(lh.subs({t: s for t, s in zip(fam.T, ts)}, simultaneous=True))
    if not fam.depends_on_variable(cand):
        try:
            poly = sp.Poly(cand, *ts)
        except sp.PolynomialError:
            poly = None
        if poly is not None and poly.total_degree() <= 1:
            cs = [poly.coeff_monomial(s) for s in ts]
            c0 = poly.coeff_monomial(1)
            if not any(fam.depends_on_variable(c) for c in cs + [c0]):
                return c0, cs
    # numeric least squares at random support points, rationalized and then verified symbolically
    rng = np.random.default_rng(5)
    pts = random_support_points(fam, rng, len(fam.T) + 6)
    if pts is None:
        return None
    rows, rhs = [], []
    for pt in pts:
        try:
            rows.append([1.0] + [float(sp.N(t.xreplace(pt))) for t in fam.T])
            rhs.append(float(sp.N(lh.xreplace(pt))))
        except (TypeError, ValueError):
            return None
    if not (np.all(np.isfinite(rows)) and np.all(np.isfinite(rhs))):
        return None              # log h = -inf somewhere (e.g. a binomial coefficient outside 0..n): not linear
    coef, *_ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
    if np.max(np.abs(np.array(rows) @ coef - np.array(rhs))) > 1e-8 * max(1.0, np.max(np.abs(rhs))):
        return None              # no linear combination fits at the points: do not ask sympy to simplify noise
    cs = [sp.nsimplify(c, rational=True, tolerance=1e-9) for c in coef]
    resid = sp.simplify(lh - cs[0] - sum((c * t for c, t in zip(cs[1:], fam.T)), sp.Integer(0)))
    if fam.depends_on_variable(resid):
        return None
    return cs[0] + resid, cs[1:]


def random_support_points(fam, rng, n):
    if fam.joint_support == "simplex":
        return [dict(zip(fam.components, [sp.Rational(int(v * 10**6), 10**6) or sp.Rational(1, 10**6)
                                          for v in rng.dirichlet(np.ones(len(fam.components)))])) for _ in range(n)]
    if fam.joint_support == "sphere":
        return None             # points on the sphere are not rational: no exact symbolic test points
    if count_total(fam.joint_support) is not None:
        total, K = count_total(fam.joint_support), len(fam.components)
        return [dict(zip(fam.components, map(sp.Integer, rng.multinomial(total, np.full(K, 1 / K)))))
                for _ in range(n)]
    if fam.joint_support == "categorical" or not fam.component_supports:
        return None
    out = []
    for _ in range(n):
        pt = {}
        for c, s in zip(fam.components, fam.component_supports):
            if s == "real":
                v = sp.Rational(int(rng.normal() * 1000), 1000)
            elif s == "positive":
                v = sp.Rational(int(np.exp(rng.normal()) * 1000) + 1, 1000)
            elif s == "unit_interval":
                v = sp.Rational(int(rng.uniform(0.05, 0.95) * 1000), 1000)
            elif s == "circular":
                v = sp.Rational(int(rng.uniform(-3.1, 3.1) * 1000), 1000)
            elif s == "binary_pm1":
                v = sp.Integer(int(rng.choice([-1, 1])))
            elif integer_range(s):
                lo, hi = integer_range(s)
                v = sp.Integer(int(rng.integers(lo, hi + 1)))
            else:
                v = sp.Integer(int(rng.integers(0, 20)))
            pt[c] = v
        out.append(pt)
    return out
