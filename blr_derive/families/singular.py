"""Removable singularities of a log-partition: points inside the natural-parameter domain Ω where the closed form of
A(λ) (or of μ = ∇A, F = ∇²A) is 0/0, although the function is analytic there (A is analytic on the interior of Ω,
Sec. 1.2), and points of Ω's boundary where the closed form is 0/0 but extends analytically through them (its Taylor
polynomial exists and is accurate: a truncated exponential whose rate is declared positive, next to rate 0).  The continuous Bernoulli's A(λ) = log((e^λ − 1)/λ) at λ = 0 (p = 1/2, its uniform point) and a
truncated exponential at λ → 0 are such points: floating point gives NaN at the point and loses digits near it
(2.6e-3 at p = 0.5001).

:func:`guard_removable` finds them and replaces A by ``near_point(A, S, λ_i, c, r)``
(``blr_derive/core/specialfns.py``): S is the Taylor polynomial of A about λ_i = c, used where |λ_i − c| < r.  The
order of S and the radius r are chosen so that A, μ and F from the node agree with the function to ~1e-13
(compared at 40 digits) just inside r, and the closed form in float64 agrees to 1e-12 from r outwards; μ and F are
then derived from the guarded A by differentiation as before, so every target prints the same select."""
from __future__ import annotations

import itertools

import mpmath
import numpy as np
import sympy as sp

from blr_derive.core.budget import StepTimeout, step_limit
from blr_derive.core.errors import SpecError
from blr_derive.core.matexpr import is_mat
from blr_derive.core.specialfns import near_point
from blr_derive.core.yamlio import where
from blr_derive.families.numeric import MODULES

#: radii tried (exact dyadic numbers: they print exactly), smallest first: the smallest at which the closed form is
#: accurate needs the fewest Taylor terms
RADII = tuple(sp.Rational(1, 2 ** k) for k in range(6, 0, -1))
#: the highest order of a Taylor polynomial (its degree); a family that needs more gets a located error
MAX_ORDER = 30
#: accuracy of the series branch against the function (40 digits), relative to max(1, |value|), for A, μ and F
SERIES_TOL = 1e-13
#: accuracy of the closed form in float64 outside the radius, relative to max(1, |value|) (the promise is 1e-12;
#: the radius is chosen with a margin of 5 over the sampled points)
GENERAL_TOL = 2e-13
SOLVE_SECONDS = 5
SERIES_SECONDS = 30


def _bases(e):
    """Expressions whose zeros make ``e``'s closed form singular: bases of negative powers and arguments of logs."""
    out = set()
    for n in sp.preorder_traversal(e):
        if isinstance(n, sp.Pow) and n.exp.is_number and n.exp.is_negative:
            out.add(n.base)
        elif isinstance(n, sp.log):
            num, den = sp.fraction(sp.together(n.args[0]))
            out.update((num, den))
    return out


def candidate_points(A, lam):
    """(λ_i, c) with c a real constant where a factor of a denominator or of a log's argument of A or of ∇A vanishes
    as a function of λ_i alone."""
    exprs = [A] + [sp.diff(A, l) for l in lam]
    factors = set()
    for e in exprs:
        for b in _bases(e):
            if b.is_number:
                continue
            for f in sp.Mul.make_args(sp.factor_terms(b)):
                if not f.is_number:
                    factors.add(f.base if isinstance(f, sp.Pow) and f.exp.is_positive else f)
    out = []
    for f in sorted(factors, key=sp.default_sort_key):
        syms = f.free_symbols & set(lam)
        if len(syms) != 1 or (f.free_symbols - syms):
            continue
        (l,) = syms
        try:
            with step_limit(SOLVE_SECONDS):
                sols = sp.solveset(f, l, domain=sp.S.Reals)
        except (StepTimeout, NotImplementedError, ValueError, TypeError):
            continue
        if not isinstance(sols, sp.FiniteSet):
            continue
        for c in sols:
            if c.is_number and c.is_real and (l, c) not in out:
                out.append((l, c))
    return out


def _lam_samples(fam, rng_seed=23, n=3):
    """Values of λ (and of the fixed parameters) at valid parameters: the default point and random ones."""
    rng = np.random.default_rng(rng_seed)
    pts = [fam.default_params()] + [fam.sample_params(rng, 2) for _ in range(n)]
    out = []
    for vals in pts:
        row = {}
        for l, e in zip(fam.lam, fam.eta):
            row[l] = float(fam.evaluate(e, vals))
        for p in fam.fixed_params:
            row[p.symbol] = float(vals[p.symbol])
        out.append(row)
    return out


def _valid_at(fam, row, l, v):
    """Whether the ordinary parameters of ``row`` with λ_i = v are valid."""
    r = dict(row)
    r[l] = float(v)
    try:
        vals = {s: float(fam.evaluate(e, r)) for s, e in fam.ord_from_nat.items()}
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return False
    vals.update({p.symbol: row[p.symbol] for p in fam.fixed_params})
    return bool(fam.params_valid(vals))


def _interior(fam, l, c, rows):
    """Rows of λ values with λ_i = c (and λ_i = c ± a little) inside Ω: the ordinary parameters of each are valid."""
    return [row for row in rows if all(_valid_at(fam, row, l, c + dc) for dc in (0.0, 1e-3, -1e-3))]


def _on_boundary(fam, l, c, rows):
    """Rows with λ_i = c outside Ω and λ_i = c + a little or c − a little inside it: c is a point of Ω's boundary
    (a truncated exponential's λ = 0 where its rate is declared positive)."""
    return [row for row in rows if not _valid_at(fam, row, l, c)
            and (_valid_at(fam, row, l, c + 1e-3) or _valid_at(fam, row, l, c - 1e-3))]


class _Quantities:
    """A, ∇A and ∇²A of an expression in λ: float64 functions and 40-digit mpmath functions."""

    def __init__(self, fam, e):
        self.args = list(fam.lam) + [p.symbol for p in fam.fixed_params]
        grad = [sp.diff(e, l) for l in fam.lam]
        hess = [sp.diff(g, l) for g in grad for l in fam.lam]
        self.exprs = [e] + grad + hess
        self.f64 = sp.lambdify(self.args, self.exprs, modules=MODULES)
        try:
            self.mp = sp.lambdify(self.args, self.exprs, modules="mpmath")
        except Exception:  # noqa: BLE001 - a function mpmath does not name: sympy's own evaluation instead
            self.mp = None

    def float_values(self, row):
        with np.errstate(all="ignore"):
            try:
                return np.array([complex(v) for v in self.f64(*[np.float64(row[a]) for a in self.args])])
            except (TypeError, ValueError, ZeroDivisionError, OverflowError):
                return None

    def exact_values(self, row):
        with mpmath.workdps(40):
            if self.mp is not None:
                try:
                    return np.array([complex(v) for v in self.mp(*[mpmath.mpf(row[a]) for a in self.args])])
                except (TypeError, ValueError, ZeroDivisionError, OverflowError):
                    pass
        reps = {a: sp.Float(row[a], 40) for a in self.args}
        try:
            return np.array([complex(sp.N(x.xreplace(reps), 40)) for x in self.exprs])
        except (TypeError, ValueError):
            return None


def _close(got, want, tol):
    if got is None or want is None or not (np.all(np.isfinite(got)) and np.all(np.isfinite(want))):
        return False
    return bool(np.all(np.abs(got - want) <= tol * np.maximum(1.0, np.abs(want))))


def _singular_here(q, l, c, rows):
    """Whether the closed form in float64 is not finite or not accurate (1e-9) at λ_i = c or next to it."""
    for row in rows:
        for dc in (0.0, 1e-7, -1e-7):
            r = dict(row)
            r[l] = float(c) + dc
            got = q.float_values(r)
            if got is None or not np.all(np.isfinite(got)):
                return True
            if dc and not _close(got, q.exact_values(r), 1e-9):
                return True
    return False


def guard_removable(fam, A, spec=None):
    """A with each removable singularity inside Ω replaced by a Taylor polynomial near it (module docstring); A
    unchanged when there is none.  A singular point whose Taylor polynomial does not reach the accuracy is a
    located SpecError (declare a log-partition that is finite there)."""
    if any(is_mat(l) for l in fam.lam) or is_mat(A) or not isinstance(A, sp.Basic):
        return A
    if any(p.shape != "scalar" for p in fam.fixed_params):
        return A
    if A.free_symbols - set(fam.lam) - {p.symbol for p in fam.fixed_params}:
        return A                     # a dimension symbol: nothing to evaluate at numbers here
    try:
        points = candidate_points(A, fam.lam)
    except (StepTimeout, NotImplementedError, ValueError, TypeError):
        return A
    if not points:
        return A
    try:
        rows = _lam_samples(fam)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return A                     # λ of the sampled parameters is not a number (e.g. it depends on a dimension)
    base = _Quantities(fam, A)
    out = A
    for l, c in points:
        inside = _interior(fam, l, c, rows)
        if inside:
            if _singular_here(base, l, c, inside):
                out = _guard(fam, out, A, base, l, c, inside, spec)
            continue
        # a point of Ω's boundary where the closed form is 0/0 although A extends analytically through it: its Taylor
        # polynomial serves the side inside Ω as well (a truncated exponential with a positive rate b next to b = 0,
        # whose F = 1/λ² − e^λ/(1 − e^λ)² is 1e16 − 1e16 = 0 for 1/12 at b = 1e-8); where A does not extend (a pole,
        # a logarithm: −log(−λ)) or the polynomial is not accurate, A is left as it is
        try:
            edge = _on_boundary(fam, l, c, rows)
            sides = tuple(sd for sd in (1, -1) if all(_valid_at(fam, row, l, c + sd * 1e-3) for row in edge))
            if edge and sides and _singular_here(base, l, c, edge) and _extends(base, l, c, edge, sides):
                out = _guard(fam, out, A, base, l, c, edge, spec, sides)
        except (SpecError, StepTimeout, NameError, NotImplementedError, TypeError, ValueError, ZeroDivisionError,
                OverflowError):
            continue          # (a function numpy does not name, e.g. dbesselk: nothing evaluated here)
    return out


def _extends(base, l, c, rows, sides):
    """Whether A, μ and F (40 digits) settle as λ_i approaches the boundary point c from inside Ω, as an analytic
    function's do: their steps between the distances 1e-3, 1e-5 and 1e-7 shrink like the distances (by ~100; at
    most by 10 is required).  A pole or a logarithm does not settle (log: equal steps of log 100; a pole: growing
    ones), and sympy's series of it can take its whole time limit (a Gamma family's log Γ(λ₁ + 1) at λ₁ = −1, its
    shape 0: 30 s, for a Taylor polynomial that cannot exist)."""
    for row, s in itertools.product(rows, sides):
        values = [base.exact_values(_at(row, l, c + s * d)) for d in (1e-3, 1e-5, 1e-7)]
        if any(v is None or not np.all(np.isfinite(v)) for v in values):
            return False
        far, mid, near = values
        if np.any(np.abs(near - mid) > 0.1 * np.abs(mid - far) + 1e-25 * np.maximum(1.0, np.abs(mid))):
            return False
    return True


def _taylor(A, l, c, order):
    """The Taylor polynomial of A about λ_i = c to ``order`` as {power: coefficient}, or None (a pole, a logarithmic
    term, or sympy gives up within SERIES_SECONDS)."""
    t = sp.Dummy("t", real=True)
    try:
        with step_limit(SERIES_SECONDS):
            full = sp.series(A.xreplace({l: c + t}), t, 0, order + 1).removeO()
    except (StepTimeout, NotImplementedError, ValueError, TypeError, ZeroDivisionError):
        return None
    full = sp.expand(full)
    if full.has(sp.log(t), sp.Order) or any(p.exp.is_negative or not p.exp.is_Integer
                                             for p in full.atoms(sp.Pow) if p.base == t):
        return None
    try:
        poly = sp.Poly(full, t)
    except sp.PolynomialError:
        return None
    return {m[0]: k for m, k in poly.terms()}


#: orders of the Taylor polynomials sympy computes (a longer one only when a shorter one is not accurate enough)
ORDERS = (12, 20, MAX_ORDER)


def _guard(fam, current, A, base, l, c, rows, spec, sides=(1, -1)):
    """``current`` with the point λ_i = c guarded (module docstring); ``sides``: the directions from c into Ω (both
    inside it, one at its boundary), where the closed form and the polynomial are compared."""
    # the smallest radius at which the closed form is accurate: it needs the shortest polynomial
    r = next((r for r in RADII if _general_ok(base, l, c, r, rows, sides)), None)
    if r is None:
        raise _fail(fam, l, c, spec, f"the closed form is not accurate even at a distance of {RADII[-1]} from it")
    done = -1
    for top in ORDERS:
        coeffs = _taylor(A, l, c, top)
        if coeffs is None:
            raise _fail(fam, l, c, spec, "sympy finds no Taylor series there")
        for order in range(max(done + 1, 2), top + 1):
            series = sp.Add(*[coeffs.get(k, 0) * (l - c) ** k for k in range(order + 1)])
            q = _Quantities(fam, series)
            if all(_close(q.exact_values(_at(row, l, c + s * 0.999 * float(r))),
                          base.exact_values(_at(row, l, c + s * 0.999 * float(r))), SERIES_TOL)
                   for row in rows for s in sides):
                return near_point(current, sp.Tuple(*[coeffs.get(k, sp.Integer(0)) for k in range(order + 1)]), l, c, r)
        done = top
    raise _fail(fam, l, c, spec, f"no Taylor polynomial of degree ≤ {MAX_ORDER} meets the accuracy at the radius "
                                 f"{r} where the closed form is accurate")


def _general_ok(base, l, c, r, rows, sides=(1, -1)):
    """The closed form in float64 within GENERAL_TOL of its 40-digit value at |λ_i − c| = r, 1.5r, 2r, 4r on both sides
    (or on the ``sides`` given; points where the exact value is not a finite real number lie outside Ω and are
    skipped)."""
    for row, s, k in itertools.product(rows, sides, (1, 1.5, 2, 4)):
        at = _at(row, l, c + s * k * float(r))
        want = base.exact_values(at)
        if want is None or not np.all(np.isfinite(want)) or np.any(np.abs(want.imag) > 1e-30):
            continue
        if not _close(base.float_values(at), want, GENERAL_TOL):
            return False
    return True


def _at(row, l, v):
    r = dict(row)
    r[l] = float(v)
    return r


def _fail(fam, l, c, spec, why):
    f, line = where(spec, "sufficient_statistics") if spec is not None else (fam.file, None)
    return SpecError(f"the log-partition's closed form is 0/0 at {l} = {c} inside the parameter domain and {why}; "
                     "declare log_partition in a form that is finite there", f, line)
