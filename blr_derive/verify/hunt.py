"""``blr-derive check`` where derived forms are most likely wrong: the *hard points* of a family.

Random parameter points almost never land where a closed form breaks down: a log-partition that integration left
in a reflection form (Γ(−λ)·Γ(1 + λ)·sin(πλ) products) is NaN at every integer λ and loses its sign between them;
a removable singularity ((e^λ − 1)/λ at λ = 0) is 0/0 at one point and cancels catastrophically near it; a Bessel
function overflows for a concentrated von Mises.  The hunt evaluates the family at

* integer and half-integer values of every scalar parameter, ordinary and natural (where a uniform prior plus
  counts puts a Beta or a Gamma), all at once and one at a time;
* the boundary of each parameter's domain and its neighbourhood, and very small and very large scales;
* the zeros and poles of every special function in A(λ), μ(λ) = ∇A(λ) and F(λ) = ∇²A(λ) — the poles of Γ, log Γ,
  ψ and ψ⁽ⁿ⁾ (0, −1, −2, −3), the zeros of every logarithm's, square root's, fractional power's and denominator's
  argument (0/0 points) — found numerically along each natural parameter, with their neighbours at a relative
  1e-6;

and at each point compares what the engine derived (evaluated in 30 digits: A, μ, F, the entropy, the maps between
ordinary and natural parameters) with log ∫ h·exp(<λ, T>), E_q[T], Cov_q[T] and −∫ q log q by quadrature or
summation (:class:`~blr_derive.verify.quadrature.Quadrature`, scaled by the family's own spread).  For a scalar
continuous variable a disagreement is confirmed in 30-digit arithmetic before it is reported, and where the density's
mass lies beyond double precision (a Gamma with α = 1e-3 has it at θ = e^-1000: ``Quadrature.truncated``) the
30-digit quadrature is the reference (:class:`MpReference`); a variable of several coordinates has no such
reference, so where its grid spans two or more of them its hard points stay 1e-2 away from every boundary (one grid
coordinate next to conditionally Gaussian ones flags mass beyond double precision itself, and takes them all).  Where no reference can be computed (a sum that
needs 1e9 terms) the derived values must still be finite (or refused by the engine with a located error).  It then
runs the **generated module** of the family in every target that writes one (numpy and jax: the parameter maps
``natural_parameters``, ``log_partition``, ``expectation_parameters``, ``fisher_information``,
``ordinary_from_natural`` and ``ordinary_from_expectation`` that a recipe's module carries, printed by the target's
own printer, :func:`blr_derive.ir.build.family_ir`) at the same points, so that a fault of the printed code (an
undefined name, an overflow the symbolic form does not have) fails the check too.

A value that is not finite where the family is defined always fails (no reference needed).  Every failure names the
point (its parameters and why it is hard) and the quantity.
"""
from __future__ import annotations

import functools
import types
from dataclasses import dataclass

import mpmath
import numpy as np
import sympy as sp
from scipy import optimize

from blr_derive.codegen.registry import emit
from blr_derive.core.budget import StepTimeout, step_limit
from blr_derive.core.errors import BLRError, DerivationError
from blr_derive.core.matexpr import is_mat
from blr_derive.core.specialfns import near_point
from blr_derive.families.numeric import MODULES
from blr_derive.ir.build import family_ir
from blr_derive.verify.quadrature import SETTLE_TOL, Quadrature, near_one
from blr_derive.verify.results import HUNT_TOLERANCES

#: at how many hard points (the first) the module's init/step and its Newton solver ordinary_from_expectation run
MODULE_SOLVES = 8
#: the targets whose module of a family carries its parameter maps (family_ir), in check order
MODULE_TARGETS = ("numpy", "jax")

#: the most hard points by the number of coordinates the quadrature integrates (0: a discrete support)
MAX_POINTS = {0: 30, 1: 30, 2: 12, 3: 5}

#: special values of a scalar parameter by its domain: integers and half-integers, the neighbourhood of 0 and of
#: 1 (removable singularities, (e^x − 1)/x), very small and very large scales
REAL_VALUES = (0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1.5, 3.0, 1e-8, -1e-8, 1 + 1e-8, 30.0, -30.0)
POSITIVE_VALUES = (1.0, 2.0, 0.5, 1.5, 3.0, 2.5, 1 + 1e-8, 1e-8 + 2, 10.0, 1e-3, 1e3)
UNIT_VALUES = (0.5, 0.25, 0.75, 0.5 + 1e-8, 1e-3, 1 - 1e-3)
#: offsets above a parameter's lower bound (greater_than)
ABOVE_VALUES = (1.0, 2.0, 0.5, 1.5, 3.0, 1e-3, 1e3)
#: values of a natural parameter (integers and half-integers around its value at the central point, and 0)
NATURAL_OFFSETS = (-2.0, -1.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0)
#: the poles of Γ, log Γ, ψ and ψ⁽ⁿ⁾ that a root search looks for (the zeros of other arguments: 0)
POLES = (0.0, -1.0, -2.0, -3.0)
#: a neighbour of a singular point, at this relative distance
NEAR = 1e-6


@dataclass
class HardPoint:
    vals: dict          # ordinary parameters, free and fixed, keyed by symbol
    why: str            # what makes the point hard


def describe_point(fam, vals) -> str:
    """``a = 2, b = 0.5`` (matrices by their diagonal's range, vectors by their entries' range)."""
    parts = []
    for p in fam.params.values():
        v = np.asarray(vals[p.symbol], dtype=float)
        if v.ndim == 0:
            parts.append(f"{p.name} = {float(v):.10g}")
        else:
            d = np.diag(v) if v.ndim == 2 else v
            parts.append(f"{p.name} = {'I·' if v.ndim == 2 and np.allclose(v, np.diag(d)) else ''}"
                         f"[{float(d.min()):.4g} .. {float(d.max()):.4g}]")
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------------- points


def _valid(fam, vals, dim) -> bool:
    """The ordinary parameters (fixed ones too) lie in their domains."""
    try:
        if not fam.params_valid(vals, dim):
            return False
    except (ValueError, TypeError, ArithmeticError, np.linalg.LinAlgError):
        return False
    for p in fam.fixed_params:
        v = np.asarray(vals[p.symbol], dtype=float)
        if not np.all(np.isfinite(v)):
            return False
        if p.domain in ("positive", "unit_interval") and not np.all(v > 0):
            return False
        if p.domain == "unit_interval" and not np.all(v < 1):
            return False
    return True


def _scalar_values(fam, p, dim):
    if p.greater_than is not None:
        lo = float(fam.evaluate(p.greater_than, {}, dim))
        return [(lo + v, f"{p.name} = {lo + v:.10g} ({'just ' if v < 0.01 else ''}above its bound {lo:g})")
                for v in ABOVE_VALUES]
    values = {"real": REAL_VALUES, "unit_interval": UNIT_VALUES}.get(p.domain, POSITIVE_VALUES)
    return [(v, f"{p.name} = {v:.10g}" + _kind_of_value(v)) for v in values]


def _kind_of_value(v) -> str:
    if v == 0:
        return " (zero)"
    if float(v).is_integer():
        return " (an integer)"
    if float(2 * v).is_integer():
        return " (a half-integer)"
    if abs(v) < 1e-5 or abs(v - round(v)) < 1e-5:
        return " (next to a singular value)"
    if abs(v) >= 30 or abs(v) <= 1e-2:
        return " (a very large or small scale)"
    return ""


def _matrix_values(p, base, dim):
    """Scaled and ill-conditioned versions of a matrix or vector parameter's central value."""
    b = np.asarray(base, dtype=float)
    if b.ndim == 2:
        out = [(b * 1e-3, f"{p.name} = 1e-3·I (a small scale)"), (b * 1e3, f"{p.name} = 1e3·I (a large scale)"),
               (b * 2, f"{p.name} = 2·I (an integer scale)")]
        if p.domain == "positive_definite" and dim >= 2:
            C = np.full((dim, dim), 0.999) + 0.001 * np.eye(dim)
            out.append((C, f"{p.name} nearly singular (correlation 0.999)"))
        return out
    if p.domain == "real":
        return [(np.full(dim, 30.0), f"{p.name} = 30 (a large value)"), (np.full(dim, 1.0), f"{p.name} = 1"),
                (np.full(dim, 0.5), f"{p.name} = 1/2")]
    return [(np.full(dim, 1e-3), f"{p.name} = 1e-3"), (np.full(dim, 1e3), f"{p.name} = 1e3"),
            (np.full(dim, 2.0), f"{p.name} = 2")]


def hard_points(fam, dim: int, rng) -> list:
    """The hard points of a family (see the module docstring), the most likely wrong first, without duplicates."""
    base = fam.default_params(dim)
    singular, integer, boundary = [], [], []

    def add(bucket, vals, why):
        if _valid(fam, vals, dim):
            bucket.append(HardPoint(vals, why))

    scalar = [p for p in fam.params.values() if p.shape == "scalar" and p.domain != "simplex"]
    simplex = [p for p in fam.params.values() if p.domain == "simplex"]
    for p in scalar:
        for v, why in _scalar_values(fam, p, dim):
            bucket = integer if float(2 * v).is_integer() and abs(v) <= 3 else boundary
            add(bucket, {**base, p.symbol: v}, why)
    for p in fam.params.values():
        if p.shape != "scalar":
            for v, why in _matrix_values(p, base[p.symbol], dim):
                add(boundary, {**base, p.symbol: v}, why)
    free_scalar = [p for p in scalar if not p.fixed]
    if len(free_scalar) > 1:                   # all at once: a Beta(2, 2), Gamma(1/2, 1/2) ...
        for v in (1.0, 2.0, 0.5, 1.5, 3.0):
            vals = dict(base)
            for p in free_scalar:
                vals[p.symbol] = v if p.greater_than is None else float(fam.evaluate(p.greater_than, {}, dim)) + v
            add(integer, vals, f"{', '.join(p.name for p in free_scalar)} all = {v:g}")
    if simplex:
        K = len(simplex) + 1
        for w, why in ((np.full(K, 1.0 / K), "uniform probabilities"),
                       (np.r_[1 - 1e-3 * (K - 1), np.full(K - 1, 1e-3)], "probabilities next to a vertex")):
            add(boundary, {**base, **{p.symbol: float(x) for p, x in zip(simplex, w)}}, why)
    if not any(is_mat(l) for l in fam.lam):
        lam0 = _lam_of(fam, base, dim)
        if lam0 is not None:
            for vals, why in _natural_points(fam, lam0, dim):
                add(integer, vals, why)
            for vals, why in _singular_points(fam, lam0, dim):
                add(singular, vals, why)
    # the three kinds in turn (a cap on the number of points keeps some of each), without duplicates
    out, seen = [], set()
    buckets = [singular, integer, boundary]
    for i in range(max(map(len, buckets))):
        for b in buckets:
            if i < len(b):
                hp = b[i]
                key = tuple(np.round(np.asarray(hp.vals[p.symbol], dtype=float).ravel(), 12).tobytes()
                            for p in fam.params.values())
                if key not in seen:
                    seen.add(key)
                    out.append(hp)
    return out


#: how near a boundary of its domain a parameter may be at a hard point of a variable of several coordinates
MULTI_MARGIN = 1e-2


def _near_boundary(fam, vals, dim) -> bool:
    """A scalar parameter within MULTI_MARGIN (relative, for large ones 1/MULTI_MARGIN) of its domain's edge."""
    for p in fam.params.values():
        if p.shape != "scalar":
            continue
        v = float(vals[p.symbol])
        if p.greater_than is not None:
            lo = float(fam.evaluate(p.greater_than, {}, dim))
            if v - lo < MULTI_MARGIN or v - lo > 1 / MULTI_MARGIN:
                return True
        elif p.domain in ("positive", "simplex") and not MULTI_MARGIN <= v <= 1 / MULTI_MARGIN:
            return True
        elif p.domain == "unit_interval" and min(v, 1 - v) < MULTI_MARGIN:
            return True
    return False


def _lam_of(fam, vals, dim):
    try:
        lam = {l: float(fam.evaluate(e, vals, dim)) for l, e in zip(fam.lam, fam.eta)}
    except (BLRError, TypeError, ValueError, ArithmeticError):
        return None
    return lam if all(np.isfinite(v) for v in lam.values()) else None


def _ordinary_of(fam, lam, base, dim):
    """The ordinary parameters at natural parameters ``lam`` (fixed ones from ``base``), or None."""
    fixed = {p.symbol: base[p.symbol] for p in fam.fixed_params}
    try:
        vals = {s: float(fam.evaluate(e, {**lam, **fixed}, dim)) for s, e in fam.ord_from_nat.items()}
    except (BLRError, TypeError, ValueError, ArithmeticError):
        return None
    vals = {**base, **vals}
    back = _lam_of(fam, vals, dim)          # λ(ordinary(λ)) = λ: the point is in Ω (not a branch elsewhere)
    if back is None or any(abs(back[l] - lam[l]) > 1e-9 * max(1.0, abs(lam[l])) for l in lam):
        return None
    return vals


def _natural_points(fam, lam0, dim):
    """Natural parameters at integers and half-integers (one at a time, and all at once) around λ(central)."""
    base = fam.default_params(dim)
    out = []
    for l in fam.lam:
        r = round(lam0[l])
        for off in NATURAL_OFFSETS + (0.0,):
            for v in {r + off, float(off) if abs(off) <= 1 else r + off}:
                vals = _ordinary_of(fam, {**lam0, l: float(v)}, base, dim)
                if vals is not None:
                    out.append((vals, f"{l} = {v:g} (a natural parameter at an {_kind_of_value(v)[2:-1] or 'value'})"))
        for eps in (1e-8, -1e-8):
            vals = _ordinary_of(fam, {**lam0, l: eps}, base, dim)
            if vals is not None:
                out.append((vals, f"{l} = {eps:g} (a natural parameter next to 0)"))
    if len(fam.lam) > 1:
        for shift in (0.0, 0.5, 1.0):
            lam = {l: float(round(v) + shift) for l, v in lam0.items()}
            vals = _ordinary_of(fam, lam, base, dim)
            if vals is not None:
                out.append((vals, f"{', '.join(f'{l} = {v:g}' for l, v in lam.items())} (natural parameters at "
                                  f"{'half-' if shift == 0.5 else ''}integers)"))
    return out


def singular_arguments(exprs) -> list:
    """[(argument, targets, what)]: where a special function of ``exprs`` is singular — the poles of Γ, log Γ, ψ,
    ψ⁽ⁿ⁾ (:data:`POLES`), the zero of a logarithm's, square root's, fractional power's or denominator's argument, of a
    Bessel function's argument."""
    found = {}
    for e in exprs:
        if not isinstance(e, sp.Basic):
            continue
        for node in sp.preorder_traversal(e):
            if isinstance(node, (sp.gamma, sp.loggamma, sp.digamma)):
                found.setdefault((node.args[0], POLES), f"a pole of {type(node).__name__}")
            elif isinstance(node, sp.polygamma):
                found.setdefault((node.args[1], POLES), "a pole of polygamma")
            elif isinstance(node, sp.log):
                found.setdefault((node.args[0], (0.0,)), "a zero of log's argument")
            elif isinstance(node, sp.Pow) and node.exp.is_number and (node.exp < 0 or not node.exp.is_integer):
                found.setdefault((node.base, (0.0,)), "a zero of a denominator or a root's argument"
                                 if node.exp < 0 else "a zero of a root's argument")
            elif isinstance(node, (sp.besseli, sp.besselk)):
                found.setdefault((node.args[1], (0.0,)), f"a zero of {type(node).__name__}'s argument")
    return [(arg, targets, what) for (arg, targets), what in found.items()
            if isinstance(arg, sp.Basic) and arg.free_symbols and not arg.is_number]


def _singular_points(fam, lam0, dim, per_argument=3):
    """Points where an argument of :func:`singular_arguments` of A, μ and F takes a singular value, found along each
    natural parameter from λ(central) (a scan of 481 values over ±12 and a bracketing root finder), with their
    neighbours at a relative :data:`NEAR`; the ``per_argument`` roots nearest λ(central) of each."""
    base = fam.default_params(dim)
    fixed = {p.symbol: float(base[p.symbol]) for p in fam.fixed_params if p.shape == "scalar"}
    exprs = [fam.A] + list(fam.mu_of_lam)
    try:
        exprs += list(fam.fisher_operator(simplified=False)[1]) if any(is_mat(l) for l in fam.lam) else \
            [sp.diff(m, l) for m in fam.mu_of_lam for l in fam.lam]
    except (BLRError, TypeError, ValueError):
        pass
    out = []
    for arg, targets, what in singular_arguments(exprs):
        syms = [l for l in fam.lam if l in arg.free_symbols]
        others = arg.free_symbols - set(fam.lam) - set(fixed)
        if not syms or others:
            continue
        for l in syms:
            rest = {k: v for k, v in {**lam0, **fixed}.items() if k != l}
            g = arg.xreplace({k: sp.Float(v) for k, v in rest.items()})
            try:
                f = sp.lambdify([l], g, modules=MODULES)
            except Exception:                                       # noqa: BLE001 -- a form lambdify cannot write
                continue
            grid = lam0[l] + np.linspace(-12, 12, 481)
            with np.errstate(all="ignore"):
                try:
                    vals = np.array([complex(f(x)) for x in grid])
                except (TypeError, ValueError, ArithmeticError):
                    continue
            ok = np.isfinite(vals) & (np.abs(vals.imag) <= 1e-12 * np.maximum(1, np.abs(vals.real)))
            roots = []
            for t in targets:
                d = vals.real - t
                for i in range(len(grid) - 1):
                    if not (ok[i] and ok[i + 1]):
                        continue
                    if d[i] == 0:
                        roots.append(grid[i])
                    elif (d[i] < 0) != (d[i + 1] < 0) and d[i + 1] != 0:      # a sign change (no product: it can overflow)
                        try:
                            roots.append(optimize.brentq(lambda x: float(np.real(f(x))) - t, grid[i], grid[i + 1],
                                                         xtol=1e-14, rtol=4e-16))
                        except (ValueError, RuntimeError, TypeError):
                            continue
            roots = sorted(set(roots), key=lambda x: abs(x - lam0[l]))[:per_argument]
            for r in roots:
                for x, near in ((r, ""), (r * (1 + NEAR) + NEAR * (r == 0), " (its neighbour)"),
                                (r * (1 - NEAR) - NEAR * (r == 0), " (its neighbour)")):
                    vals = _ordinary_of(fam, {**lam0, l: float(x)}, base, dim)
                    if vals is not None:
                        out.append((vals, f"{l} = {x:.12g}: {what} {sp.sstr(arg)[:60]}{near}"))
    return out


# ------------------------------------------------------------------------------------------- evaluation


def _mp_dbesselk(n, nu, x):
    n = int(n)
    return _mp_besselk(nu, x) if n == 0 else mpmath.diff(lambda v: _mp_besselk(v, x), nu, n)


def _mp_besselk(nu, x):
    """mpmath.besselk(nu, x), remembered per (nu, x, working precision): the derivatives in ν that A, μ and F of
    a Bessel family take at one point evaluate K at the same orders again (mpmath.diff's steps), each 20 ms."""
    return _mp_besselk_at(nu, x, mpmath.mp.prec)


@functools.lru_cache(maxsize=65536)
def _mp_besselk_at(nu, x, prec):
    return mpmath.besselk(nu, x)


#: the engine's own functions (blr_derive/core/specialfns.py) in mpmath, for the symbolic record
MP_FUNCTIONS = {
    "softplus": lambda x: mpmath.log1p(mpmath.exp(x)) if x < 30 else x + mpmath.log1p(mpmath.exp(-x)),
    "xlogy": lambda x, y: mpmath.mpf(0) if x == 0 else x * mpmath.log(y),
    "logsumexp": lambda *a: mpmath.log(mpmath.fsum(mpmath.exp(x) for x in a)),
    "exp1": mpmath.e1, "dbesselk": _mp_dbesselk, "besselk": _mp_besselk, "binary": lambda x: -1 if x < 0 else 1,
    "nan_outside": lambda x, *c: x if all(ci > 0 for ci in c) else mpmath.nan,
    "ndtr": mpmath.ncdf, "log_ndtr": lambda x: mpmath.log(mpmath.ncdf(x)),
    "loggamma": mpmath.loggamma, "polygamma": mpmath.polygamma, "digamma": mpmath.digamma,
}


class SymbolicRecord:
    """What the engine derived for a family with scalar natural parameters, compiled once to mpmath functions
    evaluated at 30 digits, and more where that is not finite or ``settle`` asks for every value (:func:`_settled`;
    sympy's ``evalf`` of the same expressions, without its overhead: F of the generalized inverse Gaussian costs 1.6 s
    per point by ``evalf``): A, μ and F in λ (and the fixed parameters), λ, μ and the entropy
    in the ordinary parameters, the ordinary parameters in λ.  A quantity lambdify cannot write (an unevaluated
    series) is evaluated by ``Family.evaluate`` instead."""

    def __init__(self, fam, H_sym, settle=False):
        self.fam = fam
        self.settle = settle          # every value at increasing precision until it settles (:func:`_settled`)
        fixed = [p.symbol for p in fam.fixed_params]
        ordinary = [p.symbol for p in fam.params.values()]
        lam = list(fam.lam) + fixed
        # F as the engine evaluates it: Cov_q[T] centred over a finite support, else ∇²A (Family.fisher_form)
        F = list(fam.fisher_form())
        self.fns = {
            "A": self._compile(lam, [fam.A]), "mu": self._compile(lam, list(fam.mu_of_lam)),
            "F": self._compile(lam, F), "eta": self._compile(ordinary, list(fam.eta)),
            "mu_ord": self._compile(ordinary, list(fam.mu_ord)),
            "ord": self._compile(lam, [fam.ord_from_nat[p.symbol] for p in fam.free_params]),
            "H": self._compile(ordinary, [H_sym]) if H_sym is not None else None,
        }
        self.exprs = {"A": [fam.A], "mu": list(fam.mu_of_lam), "F": F, "eta": list(fam.eta),
                      "mu_ord": list(fam.mu_ord), "ord": [fam.ord_from_nat[p.symbol] for p in fam.free_params],
                      "H": [H_sym]}
        self.args = {"A": lam, "mu": lam, "F": lam, "ord": lam, "eta": ordinary, "mu_ord": ordinary, "H": ordinary}

    @staticmethod
    def _compile(args, exprs):
        if any(isinstance(e, sp.Basic) and e.has(sp.Sum, sp.Integral, sp.Product) for e in exprs):
            return None
        try:
            return sp.lambdify(args, exprs, modules=[MP_FUNCTIONS, "mpmath"], cse=True)
        except Exception:                                              # noqa: BLE001 -- Family.evaluate instead
            return None

    def __call__(self, key, env) -> np.ndarray:
        """The values of quantity ``key`` at ``env`` (symbol -> number), as floats; raises where the form has no
        value (a pole of Γ: ValueError; a complex value: TypeError)."""
        args = self.args[key]
        fn = self.fns[key]
        if fn is not None:
            try:
                guarded = any(isinstance(e, sp.Basic) and e.has(near_point) for e in self.exprs[key])
                out = _settled(fn, [float(env[a]) for a in args], guarded, self.settle)
                return np.array([_real(x) for x in out], dtype=float)
            except (NameError, AttributeError):          # a function mpmath does not have: evalf instead
                self.fns[key] = None
            except ZeroDivisionError:
                # a removable singularity's select (core.specialfns.near_point) evaluates both of its branches in
                # mpmath, and the closed form is 0/0 at its centre: Family.evaluate selects the Taylor polynomial
                if not any(isinstance(e, sp.Basic) and e.has(near_point) for e in self.exprs[key]):
                    raise
        return np.array([float(self.fam.evaluate(e, {a: env[a] for a in args}, None)) for e in self.exprs[key]],
                        dtype=float)


#: the precisions (decimal digits) a symbolic value is computed at, from the first, until two in a row agree to
#: SETTLED (relative): a form that cancels loses digits to it even in mpmath (a zero-truncated Poisson's
#: A = log(e^{e^λ} − 1) − λ ≈ e^λ/2 keeps none of 30 at e^λ = 1e-20, −2.5e-12 for 5e-21, and is log(0) = −inf at
#: 1e-300, where e^{e^λ} − 1 ≈ 1e-300 must keep 16 digits beyond the 300 it loses and its logarithm's
#: cancellation as many again: 960 digits)
PRECISIONS = (30, 60, 120, 240, 480, 960)
SETTLED = 1e-20


def _settled(fn, args, guarded=False, settle=False) -> list:
    """``fn`` at the float arguments ``args`` at 30 digits where that is finite (and ``settle`` is false: the check's
    points, where 30 digits leave more than its tolerances need and a second evaluation would double the cost of its
    references, 15.7 s → 24.8 s of checking the generalized inverse Gaussian), else evaluated at PRECISIONS until two
    precisions in a row agree (:func:`_agree`), or at the last one as it is (where the value is inf or NaN at every
    precision).  A division by zero at a precision goes on to the next (e^{1e-300} − 1 is 0 in 30 digits); at the last
    it is raised, and at once for a removable singularity's select (``guarded``: its closed form is 0/0 at its centre at
    any precision, and the caller selects the Taylor polynomial)."""
    prev = out = None
    for dps in PRECISIONS:
        try:
            with mpmath.workdps(dps):
                out = list(fn(*[mpmath.mpf(a) for a in args]))
        except ZeroDivisionError:
            if guarded or dps == PRECISIONS[-1]:
                raise
            prev = None
            continue
        if dps == PRECISIONS[0] and not settle and all(mpmath.isfinite(v) for v in out):
            return out
        if prev is not None and all(_agree(a, b) for a, b in zip(prev, out)):
            return out
        prev = out
    return out


def _agree(a, b) -> bool:
    """Two values of one quantity at two precisions agree: equal, or finite and within SETTLED of each other (an
    infinite or NaN value may be a cancellation's log(0) or 0/0, and is computed again at a higher precision)."""
    if not (mpmath.isfinite(a) and mpmath.isfinite(b)):
        return False
    return bool(a == b or abs(a - b) <= SETTLED * abs(b))


def _real(x) -> float:
    """A real mpmath (or Python) number as a float; a complex one with a non-zero imaginary part is a TypeError (the
    form has no real value there, as float(complex) is)."""
    if isinstance(x, mpmath.mpc) or isinstance(x, complex):
        if abs(mpmath.im(x)) > 1e-25 * max(1, abs(mpmath.re(x))):
            raise TypeError(f"the value is complex ({mpmath.nstr(x, 8)})")
        x = mpmath.re(x)
    return float(x)



@dataclass
class Reference:
    """log ∫ h exp(<λ, T>), E_q[T], Cov_q[T] and −∫ q log q at a point (λ coordinates ``c``)."""
    logZ: float
    mean: np.ndarray
    cov: np.ndarray
    entropy: float
    how: str


#: how the notes of a check begin that say where the quadrature did not converge
UNSETTLED_NOTE = "the quadrature did not converge at "


def unsettled_reason(quad, where) -> str:
    """Why a quadrature that does not converge (``Quadrature.unsettled``) is no reference at ``where`` (a
    description of the point): the result that moved most beyond its allowance."""
    moves = quad.unsettled
    what = max(moves, key=lambda k: moves[k] / SETTLE_TOL[k])
    names = {"logZ": "log ∫ h exp(<λ,T>)", "mean": "E_q[T]", "cov": "Cov_q[T]", "entropy": "−∫ q log q"}
    return (f"{UNSETTLED_NOTE}{where}: halving its step moved {names[what]} by {moves[what]:.3g} (more than "
            f"{SETTLE_TOL[what]:.2g}: heavy tails or a funnel that its grid does not resolve), so it is no reference "
            f"there")


def quadrature_reference(model, c, fixed_vals):
    """(Reference by the check's quadrature or summation, the Quadrature); the Reference is None where the
    quadrature misses mass (``Quadrature.truncated``), does not converge (``Quadrature.unsettled``) or its moments
    are not finite."""
    quad = Quadrature(model, c, fixed_vals, 0.0)
    p = quad.p
    ok = p > 0
    entropy = float(quad.logZ - np.sum(p[ok] * quad.g[ok]))
    ref = Reference(quad.logZ, quad.mean, quad.cov, entropy, "summation" if model.discrete else "quadrature")
    if quad.truncated or quad.unsettled or not (np.isfinite(ref.logZ) and _finite(ref.mean) and _finite(ref.cov)):
        ref = None
    return ref, quad


class MpReference:
    """The same moments in 30-digit arithmetic for a scalar continuous variable: adaptive tanh-sinh (mpmath) in the
    check's unconstrained coordinate u, split at the mode and at 1, 4, 16, ... local widths on each side."""

    SUPPORTS = ("real", "positive", "unit_interval", "circular")
    HOW = "30-digit adaptive quadrature (mpmath)"

    def __init__(self, fam):
        self.fam = fam
        th = fam.theta
        fixed = [p.symbol for p in fam.fixed_params]
        self.fixed = fixed
        bar = sp.Dummy("one_minus_theta", positive=True)   # 1 − θ on the unit interval, computed on its own

        def prep(e):
            if fam.component_supports[0] != "unit_interval":
                return e
            e = sp.sympify(e).subs(1 - th, bar)
            return e.xreplace({lg: near_one(lg, th, bar) for lg in e.atoms(sp.log)})
        self.logh = sp.lambdify([th, bar, *fixed], prep(fam.log_h), modules="mpmath")
        self.T = [sp.lambdify([th, bar, *fixed], prep(t), modules="mpmath") for t in fam.T]

    @classmethod
    def applies(cls, fam, model):
        return (not model.discrete and fam.variable_kind == "scalar" and model.ndim_u == 1
                and len(fam.component_supports) == 1 and fam.component_supports[0] in cls.SUPPORTS)

    def __call__(self, c, fixed_vals, quad) -> Reference:
        """The moments at λ coordinates ``c``; ``quad`` (the double-precision Quadrature there) gives the mode, the
        scale and the interval outside of which the density is below e^-MP_DROP of its mode (in double precision),
        so that no node lies where exp(u) is astronomically large."""
        sup = self.fam.component_supports[0]
        fx = [mpmath.mpf(float(fixed_vals[s])) for s in self.fixed]
        cs = [mpmath.mpf(float(x)) for x in c]
        center, scale = float(quad.mode[0]), float(abs(quad.L[0, 0]))

        def parts(u):
            bar = None
            if sup == "real":
                th, logJ = u, mpmath.mpf(0)
            elif sup == "positive":
                th, logJ = mpmath.exp(u), u
            else:
                s_, sb = 1 / (1 + mpmath.exp(-u)), 1 / (1 + mpmath.exp(u))
                th, bar = (s_, sb) if sup == "unit_interval" else (mpmath.pi * (s_ - sb), None)
                logJ = mpmath.log(s_) + mpmath.log(sb) + (mpmath.log(2 * mpmath.pi) if sup == "circular" else 0)
            bar = 1 - th if bar is None else bar
            t = [T(th, bar, *fx) for T in self.T]
            return self.logh(th, bar, *fx) + sum(ci * ti for ci, ti in zip(cs, t)), t, logJ

        with mpmath.workdps(MP_DIGITS):
            g0, _, J0 = parts(mpmath.mpf(center))
            g0 = g0 + J0
            lo, hi = _bracket(parts, g0, center, scale, MP_DROP)
            # pieces that grow geometrically (×4) from the mode to the ends, from each side's own width (where log f
            # has dropped by 2): a long tail (the mass of a Burr XII with k = 1e-3 runs to log θ = 6e4) and a steep
            # side (e^{2 log θ} on its left) are both many pieces, each of which the rule resolves
            wl, wr = (abs(x - center) for x in _bracket(parts, g0, center, scale, 2.0))
            k = len(cs)
            cuts = {center}
            for end, w, sgn in ((lo, wl, -1), (hi, wr, 1)):
                x, step = center, max(w, 1e-12)
                while abs(x - center) < abs(end - center) and len(cuts) < 200:
                    x = center + sgn * step
                    if abs(x - center) < abs(end - center):
                        cuts.add(x)
                    step *= 4
            cuts = sorted(cuts)
            pts = [mpmath.mpf(x) for x in [lo] + cuts + [hi]]

            # one tanh-sinh rule per piece, every moment from the same evaluations (Z, E[T], E[T Tᵀ], E[g])
            sums = None
            for a, b in zip(pts[:-1], pts[1:]):
                for x, w in _tanh_sinh_nodes(a, b):
                    g, t, logJ = parts(x)
                    q = w * mpmath.exp(g + logJ - g0)
                    if q == 0:
                        continue
                    row = [q] + [q * ti for ti in t] + [q * ti * tj for i, ti in enumerate(t) for tj in t[i:]] \
                        + [q * (g - g0)]
                    sums = row if sums is None else [s_ + r for s_, r in zip(sums, row)]
            Z = sums[0]
            m = [x / Z for x in sums[1:1 + k]]
            cov = np.zeros((k, k))
            idx = 1 + k
            for i in range(k):
                for j in range(i, k):
                    cov[i, j] = cov[j, i] = float(sums[idx] / Z - m[i] * m[j])
                    idx += 1
            Eg = sums[-1] / Z                          # E[log h + <c, T>] − g0 (−∫ q log q in θ: no log J)
            logZ = mpmath.log(Z) + g0
            return Reference(float(logZ), np.array([float(x) for x in m]), cov, float(logZ - g0 - Eg), self.HOW)


#: the 30-digit quadrature integrates where the density is above e^-MP_DROP of its value at the mode
MP_DROP = 120.0
#: its working precision (digits; the covariance is E[T Tᵀ] − E[T]E[T]ᵀ, which loses the digits of |E[T]|²/Cov)
MP_DIGITS = 30
#: its tanh-sinh step and reach on each piece: nodes at t = kh, |t| ≤ MP_REACH (1 − tanh(π/2 sinh 3.2) ≈ 1e-26)
MP_STEP, MP_REACH = 1 / 16, 3.2


def _tanh_sinh_nodes(a, b):
    """(x, w) of the tanh-sinh rule on [a, b] (double-exponential: the error falls like exp(−c/h) for an integrand
    analytic inside the interval, whatever it does at its ends)."""
    half, mid = (b - a) / 2, (a + b) / 2
    n = int(MP_REACH / MP_STEP)
    for k in range(-n, n + 1):
        t = k * MP_STEP
        u = mpmath.pi / 2 * mpmath.sinh(t)
        c = mpmath.cosh(u)
        yield mid + half * mpmath.tanh(u), half * MP_STEP * mpmath.pi / 2 * mpmath.cosh(t) / (c * c)


def _bracket(parts, g0, center, scale, drop):
    """(lo, hi): on each side of the mode, the point where log f (in u, 30 digits) has dropped by ``drop``: steps
    that double from ``scale`` until it has, then bisection (so that no node lies where exp(u) is astronomical)."""
    def dropped(x):
        try:
            g, _, logJ = parts(mpmath.mpf(x))
            return not mpmath.isfinite(g + logJ) or g + logJ < g0 - drop
        except (ValueError, ZeroDivisionError, OverflowError, TypeError):
            return True
    out = []
    for sign in (-1.0, 1.0):
        good, step = center, scale
        for _ in range(80):
            x = center + sign * step
            if dropped(x):
                break
            good, step = x, step * 2
        bad = center + sign * step
        for _ in range(60):
            mid = 0.5 * (good + bad)
            if dropped(mid):
                bad = mid
            else:
                good = mid
            if abs(bad - good) <= 1e-3 * abs(bad - center):
                break
        out.append(bad)
    return out[0], out[1]


def rel(got, want) -> float:
    got = np.asarray(got, dtype=float)
    want = np.asarray(want, dtype=float).reshape(got.shape)
    if got.size == 0:
        return 0.0
    with np.errstate(all="ignore"):
        e = np.abs(got - want) / np.maximum(1.0, np.abs(want))
    return float(np.max(np.where(np.isfinite(e), e, np.inf)))


def fisher_rel(got, want) -> float:
    """:func:`rel` for a Fisher information F = Cov_q[T], and its error on the scale of F itself: each entry's error
    over sqrt(F_ii·F_jj) of the reference (the entry's own size for a diagonal one; where the reference has a
    diagonal entry that is not positive and finite, :func:`rel` alone).  Relative to max(1, |F|) a variance of
    1.9e-22 computed as 0, or 9.4e-14 as −3.7e-12 (a lattice of 121 counts concentrated at its end, F = E[T²] − μ²
    in float64), was an error of 1e-12, a pass; the natural gradient F⁻¹∇ divides by it.  ``got`` may come flat (a
    module's ``fisher_information``): it is read in the reference's shape."""
    out = rel(got, want)
    want = np.asarray(want, dtype=float)
    got = np.asarray(got, dtype=float)
    if want.ndim != 2 or got.size != want.size or got.size == 0:
        return out
    got = got.reshape(want.shape)
    d = np.diag(want)
    if not np.all(np.isfinite(d) & (d > 0)):
        return out
    with np.errstate(all="ignore"):
        e = np.abs(got - want) / np.sqrt(np.outer(d, d))
    return max(out, float(np.max(np.where(np.isfinite(e), e, np.inf))))


def _error(key, got, want) -> float:
    """The error of the quantity ``key`` ("A", "mu", "F", "H"): :func:`fisher_rel` for F, :func:`rel` otherwise."""
    return (fisher_rel if key == "F" else rel)(got, want)


# ------------------------------------------------------------------------------------------------ the hunt


class GeneratedModule:
    """A target's module of the family (:func:`~blr_derive.ir.build.family_ir`), rendered and imported; ``problem``
    says why there is none (``na``: the target does not write this family, else a failure)."""

    def __init__(self, fam, target, ir):
        """``ir``: the family's IR (:func:`family_ir`), or the BLRError that building it raised."""
        self.target, self.module, self.problem, self.na = target, None, None, False
        self._x64 = None
        self._jitted = {}
        if isinstance(ir, BLRError):
            self.problem = f"the family's module could not be built: {_msg(ir)}"
            return
        if ir is None:
            self.problem, self.na = "the family has matrix natural parameters (no parameter maps in its module)", True
            return
        if target == "jax":
            try:
                import jax
            except ImportError:
                self.problem, self.na = "jax is not installed", True
                return
            self._jax = jax
        try:
            source = emit(ir, target)
        except BLRError as exc:
            kind = type(exc).__name__
            self.na = kind == "UnsupportedTarget"
            self.problem = (f"the {target} target does not write this family ({_msg(exc)})"
                            if self.na else f"the {target} module was refused: {_msg(exc)}")
            return
        self.size = len(source)
        mod = types.ModuleType(f"_blr_hunt_{target}_{fam.name}")
        try:
            with self.precision():
                exec(compile(source, f"<generated {target} module of {fam.name}>", "exec"), mod.__dict__)
        except Exception as exc:                                       # noqa: BLE001 -- the generated code's fault
            self.problem = f"the {target} module does not import: {type(exc).__name__}: {_msg(exc)}"
            return
        self.module = mod

    def precision(self):
        """float64 for jax (its default is float32), restored afterwards."""
        target = self

        class _Ctx:
            def __enter__(self):
                if target.target == "jax":
                    target._x64 = target._jax.config.jax_enable_x64
                    target._jax.config.update("jax_enable_x64", True)

            def __exit__(self, *exc):
                if target.target == "jax":
                    target._jax.config.update("jax_enable_x64", target._x64)
        return _Ctx()

    def _mapped(self, name):
        """jax.jit(jax.vmap(the module's ``name``)), made once per function: jax compiles it again only for new
        shapes (the round trip maps as many points as the first call; a new function object each time was a new
        trace and compile)."""
        if name not in self._jitted:
            fn = getattr(self.module, name)
            self._jitted[name] = self._jax.jit(self._jax.vmap(lambda *a, **kw: fn(*a, **kw)))
        return self._jitted[name]

    def call(self, name, *args, **kwargs):
        with self.precision():
            return getattr(self.module, name)(*args, **kwargs)

    def values(self, name, args_list, kwargs_list) -> list:
        """``name(*args, **kwargs)`` for each pair, as float arrays (or dicts of them), or the exception each raised.
        The jax module's functions are mapped over all the points at once (jax.vmap: one trace instead of one eager
        dispatch per operation and point), one by one where that fails (to name the point that raises)."""
        if self.target == "jax" and len(args_list) > 1:
            try:
                jnp = self._jax.numpy
                with self.precision():
                    cols = [jnp.asarray(np.array(c, dtype=float)) for c in zip(*args_list)]
                    kws = {k: jnp.asarray(np.array([kw[k] for kw in kwargs_list], dtype=float))
                           for k in (kwargs_list[0] if kwargs_list else {})}
                    out = self._mapped(name)(*cols, **kws)
                    out = self._jax.tree_util.tree_map(np.asarray, out)
                if isinstance(out, dict):
                    return [{k: v[i] for k, v in out.items()} for i in range(len(args_list))]
                return [np.asarray(out[i], dtype=float) for i in range(len(args_list))]
            except Exception:                                          # noqa: BLE001 -- one by one instead
                pass
        results = []
        for args, kwargs in zip(args_list, kwargs_list):
            try:
                v = self.call(name, *args, **kwargs)
                results.append({k: np.asarray(x, dtype=float) for k, x in v.items()} if isinstance(v, dict)
                               else np.asarray(v, dtype=float))
            except Exception as exc:                                   # noqa: BLE001 -- the generated code's fault
                results.append(exc)
        return results


def hunt_family(fam, model, dim, H_sym, record, rng, *, targets=MODULE_TARGETS) -> list:
    """Run the hunt (module docstring), recording the worst error of each check of :data:`HUNT_TOLERANCES` with
    ``record(name, value, note)``; returns lines for the report's notes."""
    points = hard_points(fam, dim, rng)
    outer = 0 if model.discrete else model.ndim_u - len(getattr(model, "gaussian_coords", ()))
    if outer >= 2:
        # a grid over several coordinates cannot integrate a density whose mass runs to the edge of double
        # precision along a direction the mass search does not see, and there is no 30-digit reference in several
        # coordinates: such points stay 1e-2 away from every boundary (a scalar continuous variable has the 30-digit
        # reference and takes them all; so does a grid of one coordinate next to conditionally Gaussian ones, the
        # normal-gamma's log τ with θ integrated exactly given τ, whose rule flags mass beyond double precision,
        # α = 5e-7's τ = e^-2e6, as Quadrature.truncated: no reference there, finite values only)
        points = [hp for hp in points if not _near_boundary(fam, hp.vals, dim)]
    points = points[:MAX_POINTS.get(outer, 4)]
    try:
        mp = MpReference(fam) if MpReference.applies(fam, model) else None
    except Exception:                                                  # noqa: BLE001 -- mpmath cannot write it
        mp = None
    nf = model.nf
    rec = None
    if not any(is_mat(l) for l in fam.lam):
        try:
            rec = SymbolicRecord(fam, H_sym)
        except (BLRError, TypeError, ValueError):
            rec = None
    skipped, probes, unsettled = 0, [], []
    with np.errstate(all="ignore"):
        for hp in points:
            had_reference, probe = _hunt_point(fam, model, nf, dim, hp, H_sym, record, mp, rec, unsettled)
            skipped += not had_reference
            if probe is not None:
                probes.append(probe)
        # the derived forms first (their findings stand even where the module takes too long to write)
        modules = _modules(fam, targets)
        for m in modules:
            if m.module is None and not m.na:      # refused by the audit, not importable, too slow to write
                record(f"generated_{m.target}", float("inf"), m.problem)
        for m in modules:
            if m.module is not None and probes:
                _run_module(fam, m, probes, record)
    notes = [f"{len(points)} hard points: integer and half-integer parameters (ordinary and natural), domain "
             f"boundaries, small and large scales, singular points of A, μ and F"
             + (f" ({skipped} without a quadrature reference: checked for finite values only)" if skipped else "")]
    notes += unsettled
    for m in modules:
        if m.module is not None:
            notes.append(f"the {m.target} module of the family ({m.size} characters) run at every hard point")
        else:
            notes.append(f"{m.target} module: {m.problem}")
    return notes, modules


#: the longest the family's module may take to write (a user family whose integrated log-partition came back as
#: a reflection form wrote a 2.6 MB module in 80 s): beyond, generated_<target> fails and says so
MODULE_SECONDS = 90.0
#: a module of the family larger than this (characters) is run, but not written again for the other targets
MODULE_MAX_CHARS = 1_000_000


def _modules(fam, targets) -> list:
    """The family's module in each target (:class:`GeneratedModule`), written within MODULE_SECONDS in all."""
    modules = []
    try:
        with step_limit(MODULE_SECONDS):
            try:
                ir = family_ir(fam, getattr(fam, "file", None) or fam.name)
            except BLRError as exc:
                ir = exc
            for t in targets:
                big = next((m for m in modules if m.module is not None and m.size > MODULE_MAX_CHARS), None)
                if big is not None:     # the same expressions again, printed for another target: not worth minutes
                    m = GeneratedModule(fam, t, None)
                    m.problem, m.na = (f"not written: the {big.target} module of the family is already "
                                       f"{big.size / 1e6:.1f} MB (A, μ and F are very large expressions)"), True
                    modules.append(m)
                    continue
                modules.append(GeneratedModule(fam, t, ir))
    except StepTimeout:
        done = {m.target for m in modules}
        for t in targets:
            if t not in done:
                m = GeneratedModule(fam, t, BLRError(f"writing it took more than {MODULE_SECONDS:g} s (A, μ and F "
                                                      "are too large to print: simplify or declare log_partition)"))
                modules.append(m)
    return modules


def _finite(x) -> bool:
    try:
        return bool(np.all(np.isfinite(np.asarray(x, dtype=float))))
    except (TypeError, ValueError):
        return False


def _hunt_point(fam, model, nf, dim, hp, H_sym, record, mp, rec, unsettled=None):
    """Every check of the derived forms at one hard point: (whether there was a reference, (ordinary parameters,
    λ, the reference values of A, μ and F, the point's description) for the generated modules, or None); where the
    quadrature does not converge, why is appended to ``unsettled``."""
    vals = hp.vals
    where = f"at {describe_point(fam, vals)} ({hp.why})"
    fixed_vals = {p.symbol: vals[p.symbol] for p in fam.fixed_params}
    d = dim if fam.dim is not None else None
    k = nf.ncoord
    ref = None

    def ev(expr, env):
        return fam.evaluate(expr, env, d)

    def attempt(name, what, fn):
        try:
            return fn()
        except (BLRError, ValueError, TypeError, ArithmeticError, np.linalg.LinAlgError) as exc:
            # where not even the reference can be computed (a sum that needs 1e9 terms), a located refusal of the
            # engine (DerivationError: a series that does not settle) is not a silent wrong number
            if not (ref is None and isinstance(exc, DerivationError)):
                record(name, float("inf"),
                       f"{where}: {what} raised {type(exc).__name__}: {_msg(exc)}")
            return None

    def lam_at(env):
        if rec is not None:
            return dict(zip(fam.lam, rec("eta", env)))
        return {l: ev(e, env) for l, e in zip(fam.lam, fam.eta)}

    lam = attempt("hard_maps", "λ(ordinary)", lambda: lam_at(vals))
    if lam is None:
        return True, None
    if not all(_finite(v) for v in lam.values()):
        if any(np.any(np.abs(np.asarray(v, dtype=float)) == np.inf) for v in lam.values()):
            return False, None             # λ itself beyond double range (exp(1000) ...): nothing to evaluate
        record("hard_maps", float("inf"), f"{where}: λ(ordinary) = {_fmt(list(lam.values()))} is not finite")
        return True, None
    c = nf.coords_of(lam)
    env = {**lam, **fixed_vals}
    quad = None
    try:
        ref, quad = quadrature_reference(model, c, fixed_vals)
    except (BLRError, ValueError, ArithmeticError, np.linalg.LinAlgError):
        pass
    if ref is None and quad is not None and mp is not None:
        try:           # mass beyond double precision (a Gamma with α = 1e-3): the 30-digit quadrature is the reference
            ref = mp(c, fixed_vals, quad)
        except Exception:                                              # noqa: BLE001 -- no reference here
            ref = None
    if quad is not None and quad.unsettled and unsettled is not None and (ref is None or ref.how != MpReference.HOW):
        unsettled.append(unsettled_reason(quad, f"{describe_point(fam, vals)} ({hp.why})"))

    got = {}
    if rec is not None:
        got["A"] = attempt("hard_log_partition", "A(λ)", lambda: float(rec("A", env)[0]))
        got["mu"] = attempt("hard_mu", "μ(λ)", lambda: rec("mu", env))
        got["F"] = attempt("hard_fisher", "F(λ)", lambda: rec("F", env).reshape(k, k))
        if H_sym is not None:
            got["H"] = attempt("hard_entropy", "the entropy", lambda: float(rec("H", vals)[0]))
        got["mu_ord"] = attempt("hard_maps", "μ(ordinary)", lambda: rec("mu_ord", vals))
        got["ord"] = attempt("hard_maps", "ordinary(λ)",
                             lambda: dict(zip([p.symbol for p in fam.free_params], rec("ord", env))))
    else:
        got["A"] = attempt("hard_log_partition", "A(λ)", lambda: float(ev(fam.A, env)))
        got["mu"] = attempt("hard_mu", "μ(λ)",
                            lambda: nf.coords_of({u: ev(m, env) for u, m in zip(fam.mu, fam.mu_of_lam)}))
        got["F"] = attempt("hard_fisher", "F(λ)", lambda: fam.fisher_at(env, d))
        if H_sym is not None:
            got["H"] = attempt("hard_entropy", "the entropy", lambda: float(ev(H_sym, vals)))
        got["mu_ord"] = attempt("hard_maps", "μ(ordinary)",
                                lambda: nf.coords_of({u: ev(m, vals) for u, m in zip(fam.mu, fam.mu_ord)}))
        got["ord"] = attempt("hard_maps", "ordinary(λ)", lambda: {s: ev(e, env) for s, e in fam.ord_from_nat.items()})

    rows = {"A": ("hard_log_partition", "A(λ)", "log ∫ h exp(<λ,T>)", "logZ"),
            "mu": ("hard_mu", "μ(λ)", "E_q[T]", "mean"), "F": ("hard_fisher", "F(λ)", "Cov_q[T]", "cov"),
            "H": ("hard_entropy", "the entropy", "−∫ q log q", "entropy")}
    for key, (name, what, _, _) in rows.items():
        if got.get(key) is not None and not _finite(got[key]):
            record(name, float("inf"), f"{where}: {what} = {_fmt(got[key])} is not finite")

    def compare(r):
        return {key: _error(key, got[key], getattr(r, rows[key][3])) for key in rows
                if got.get(key) is not None and _finite(got[key])}
    if ref is not None:
        errs = compare(ref)
        if mp is not None and ref.how != mp.HOW and any(errs[x] > HUNT_TOLERANCES[rows[x][0]] for x in errs):
            try:          # a disagreement is confirmed in 30 digits before it is reported
                ref = mp(c, fixed_vals, quad)
                errs = compare(ref)
            except Exception:                                          # noqa: BLE001 -- keep the double reference
                pass
        for key, e in errs.items():
            name, what, ref_what, attr = rows[key]
            record(name, e, f"{where}: {what} = {_fmt(got[key])}, {ref_what} = {_fmt(getattr(ref, attr))} ({ref.how})")
    if got["mu_ord"] is not None and got["mu"] is not None and _finite(got["mu"]):
        record("hard_maps", rel(got["mu_ord"], got["mu"]),
               f"{where}: μ(ordinary) = {_fmt(got['mu_ord'])}, μ(λ(ordinary)) = {_fmt(got['mu'])}")
    if got["ord"] is not None:
        # λ(ordinary(λ)) = λ: the ordinary parameters are those of the same q (an angle may come back as itself
        # plus a multiple of 2π, as von Mises's mean direction does)
        back = attempt("hard_maps", "λ(ordinary(λ))", lambda: lam_at({**vals, **got["ord"]}))
        if back is not None:
            record("hard_maps", max(rel(back[l], lam[l]) for l in fam.lam),
                   f"{where}: ordinary(λ) = {_fmt([got['ord'][p.symbol] for p in fam.free_params])}, whose λ is "
                   f"{_fmt([back[l] for l in fam.lam])}, λ = {_fmt([lam[l] for l in fam.lam])}")

    want = {"A": ref.logZ if ref is not None else got["A"], "mu": ref.mean if ref is not None else got["mu"],
            "F": ref.cov if ref is not None else got["F"]}
    return ref is not None, (vals, lam, want, where)


def _run_module(fam, m, probes, record):
    """The generated module's maps at every hard point (``probes``: (ordinary parameters, λ, the reference values,
    the point's description)) against the reference, or the 30-digit derived values where there is none."""
    name = f"generated_{m.target}"
    params = [[float(vals[p.symbol]) for p in fam.params.values()] for vals, _, _, _ in probes]
    lams = [np.array([float(lam[l]) for l in fam.lam]) for _, lam, _, _ in probes]
    # the fixed parameters are keyword arguments of the maps of λ
    fixed = [{p.name: float(vals[p.symbol]) for p in fam.fixed_params} for vals, _, _, _ in probes]

    def check(results, fn, compare):
        for (vals, lam, want, where), v in zip(probes, results):
            if isinstance(v, Exception):
                record(name, float("inf"), f"{where}: {fn} raised {type(v).__name__}: {_msg(v)}")
            else:
                compare(v, lam, want, where)

    got_lam = m.values("natural_parameters", params, [{}] * len(probes))
    check(got_lam, "natural_parameters", lambda v, lam, want, where: record(
        name, rel(v, [lam[l] for l in fam.lam]), f"{where}: natural_parameters = {_fmt(v)}, "
                                                   f"λ = {_fmt([lam[l] for l in fam.lam])}"))
    for fn, key, what in (("log_partition", "A", "A"), ("expectation_parameters", "mu", "E_q[T]"),
                          ("fisher_information", "F", "Cov_q[T]")):
        def compare(v, lam, want, where, fn=fn, key=key, what=what):
            if want.get(key) is not None and _finite(want[key]):
                record(name, _error(key, v, want[key]), f"{where}: {fn} = {_fmt(v)}, {what} = {_fmt(want[key])}")
        check(m.values(fn, [[x] for x in lams], fixed), fn, compare)
    backs = m.values("ordinary_from_natural", [[x] for x in lams], fixed)
    again_args, again_at = [], []
    for i, ((vals, lam, want, where), back) in enumerate(zip(probes, backs)):
        if isinstance(back, Exception):
            record(name, float("inf"), f"{where}: ordinary_from_natural raised {type(back).__name__}: {_msg(back)}")
            continue
        again_args.append([float(np.asarray(back[p.name])) if p.name in back else float(vals[p.symbol])
                           for p in fam.params.values()])
        again_at.append(i)
    _round_trips(fam, m, name, probes, backs, again_args, again_at, record)
    # init and step: the module's state is the ordinary parameters (step keeps them: the family module has no update)
    for i, (vals, lam, want, where) in enumerate(probes[:MODULE_SOLVES]):
        try:
            state = m.call("init", **{p.name: np.asarray(vals[p.symbol], dtype=float) for p in fam.params.values()})
            after = m.call("step", state)
            record(name, max(rel(np.asarray(after[p.name], dtype=float), np.asarray(vals[p.symbol], dtype=float))
                             for p in fam.params.values()), f"{where}: init then step = {_fmt(after)}")
        except Exception as exc:                                       # noqa: BLE001 -- the generated code's fault
            record(name, float("inf"), f"{where}: init/step raised {type(exc).__name__}: {_msg(exc)}")
    # ordinary_from_expectation (the engine's Newton solver in the module) at the reference μ: the expectation
    # parameters of what it returns are μ (not λ itself: where μ saturates, tanh(30) = 1 − 2e-26, double precision
    # cannot tell λ = 30 from λ = 14, and no solver can)
    solves = [(i, pr) for i, pr in enumerate(probes) if pr[2].get("mu") is not None and _finite(pr[2]["mu"])]
    for i, (vals, lam, want, where) in solves[:MODULE_SOLVES]:
        mu = np.asarray(want["mu"], dtype=float)
        try:
            back = m.call("ordinary_from_expectation", mu, **fixed[i])
            again = m.call("natural_parameters", *[float(np.asarray(back[p.name])) if p.name in back
                                                   else float(vals[p.symbol]) for p in fam.params.values()])
            mu_back = np.asarray(m.call("expectation_parameters", again, **fixed[i]), dtype=float)
            record(name, rel(mu_back, mu), f"{where}: ordinary_from_expectation(E_q[T]) = "
                   f"{_fmt([back[p.name] for p in fam.free_params])}, whose expectation parameters are "
                   f"{_fmt(mu_back)}, E_q[T] = {_fmt(mu)}")
        except Exception as exc:                                       # noqa: BLE001 -- the generated code's fault
            record(name, float("inf"), f"{where}: ordinary_from_expectation raised {type(exc).__name__}: {_msg(exc)}")


def _round_trips(fam, m, name, probes, backs, again_args, again_at, record):
    """natural_parameters(ordinary_from_natural(λ)) = λ (an angle may come back shifted by 2π)."""
    if again_args:
        again = m.values("natural_parameters", again_args, [{}] * len(again_args))
        for i, v in zip(again_at, again):
            vals, lam, want, where = probes[i]
            lam_want = [lam[l] for l in fam.lam]
            if isinstance(v, Exception):
                record(name, float("inf"), f"{where}: natural_parameters raised {type(v).__name__}: {_msg(v)}")
                continue
            record(name, rel(v, lam_want), f"{where}: ordinary_from_natural = "
                   f"{_fmt([backs[i][p.name] for p in fam.free_params])}, whose natural_parameters are {_fmt(v)}, "
                   f"λ = {_fmt(lam_want)}")


def _msg(exc) -> str:
    """The first line of an exception's message (its class name where it has none: ZeroDivisionError())."""
    lines = str(exc).splitlines()
    return lines[0][:160] if lines and lines[0].strip() else type(exc).__name__


def _fmt(v):
    if isinstance(v, dict):
        v = list(v.values())
    try:
        a = np.atleast_1d(np.asarray(v, dtype=float)).ravel()
    except (TypeError, ValueError):
        return str(v)[:80]
    return "[" + ", ".join(f"{x:.8g}" for x in a[:6]) + (", ..." if a.size > 6 else "") + "]"
