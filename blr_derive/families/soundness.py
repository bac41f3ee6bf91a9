"""Numerically sound derived log-partitions (Sec. 1.2): a closed form A(λ) that sympy finds by integration or
summation holds on the parameter domain as a *mathematical* identity, but generated code evaluates it in floating
point, where a form can be NaN or wrong although the function is finite and smooth:

* **reflection products**: Γ of arguments that are negative somewhere in the domain, times sin(πx) (sympy's Meijer-G
  route wrote a beta-prime family's A this way); they are 0·∞ at integers and half-integers, exactly the
  parameters a uniform prior plus counts produces.  :func:`sound_closed_form` rewrites Γ(x) = π/(sin(πx) Γ(1 − x))
  wherever x is not positive on the domain, so that every Γ has a positive argument, and drops the trigonometric
  factor that then multiplies the result when it is a constant (it is 1 for every family we met: the identity
  sin²a − sin²b = sin(a − b) sin(a + b) and its kin);
* **forms valid on part of the domain only**: sympy's ``conds="none"`` drops the conditions of a closed form;
* **removable singularities**: ``singular.py``.

:func:`validate` evaluates A, μ = ∇A and F = ∇²A in float64, as generated code does, at the points where derived
forms are most likely wrong (integer and half-integer parameters, ½ and its neighbours on the unit interval, 0 and
±integers on the line) and compares A with an independent log ∫ h exp(<λ, T>) (adaptive quadrature in an
unconstrained coordinate) or log Σ h exp(<λ, T>) (summation).  A family whose derived form is not finite or not
correct there is a located error that names the point and the quantity, never a silent NaN.  At extreme parameters
(10⁻³ and 10³, the unit interval's ends, ±100 on the line) only finiteness is asked; a form that overflows there is
recorded as a derivation note (the family still loads: declare a log-partition in a stable form to go further)."""
from __future__ import annotations

import math

import numpy as np
import sympy as sp

from blr_derive.core.budget import StepTimeout, step_limit
from blr_derive.core.errors import SpecError
from blr_derive.core.matexpr import is_mat
from blr_derive.core.specialfns import softplus
from blr_derive.core.yamlio import where
from blr_derive.families.numeric import MODULES
from blr_derive.spec.vocabulary import CONTINUOUS_SUPPORTS

#: the most operations a derived A(λ) may have: μ and F are its derivatives and every target prints them (a
#: beta-prime family's A from sympy's Meijer-G route had 2 800, and its generated module was 2.6 MB)
MAX_OPS = 600
#: |A − log Z| / max(1, |log Z|) allowed at the validation points
TOL = 1e-8
SIMPLIFY_SECONDS = 20

#: parameter values at which derived forms are checked against quadrature (core) and for finiteness (extreme)
CORE = {
    "positive": (1, sp.Rational(1, 2), 2, sp.Rational(3, 2), 3, sp.Rational(5, 2), sp.Rational(1, 10), 10),
    "unit_interval": (sp.Rational(1, 2), sp.Rational(1, 4), sp.Rational(3, 4), sp.Rational(1, 10),
                      sp.Rational(9, 10)),
    "real": (0, 1, -1, sp.Rational(1, 2), sp.Rational(-1, 2), 2, -2, sp.Rational(5, 2), -3),
}
EXTREME = {
    "positive": (1e-3, 1e3),
    "unit_interval": (1e-6, 1 - 1e-6),
    "real": (100.0, -100.0),
}


# --------------------------------------------------------------------------- reflection products


def _samples(fam, n=8, seed=29):
    rng = np.random.default_rng(seed)
    pts = [p for p in hard_points(fam) if p] + [fam.sample_params(rng, 2) for _ in range(n)]
    return [{k: float(v) for k, v in p.items() if not is_mat(k)} for p in pts]


def _positive_on_domain(x, samples) -> bool:
    if x.is_positive:
        return True
    if x.free_symbols and not samples:
        return False
    try:
        vals = [float(x.xreplace({k: sp.Float(v) for k, v in s.items()})) for s in samples]
    except (TypeError, ValueError):
        return False
    return all(v > 0 for v in vals)


def _trig_factor(e):
    return e.has(sp.sin, sp.cos, sp.tan, sp.cot, sp.sec, sp.csc)


def sound_closed_form(fam, Z):
    """Z (the integral or sum, in ordinary parameters) with every Γ of an argument that is not positive on the
    domain reflected, Γ(x) = π / (sin(πx) Γ(1 − x)), and the trigonometric factor this leaves dropped when it is a
    constant; None when that does not give a form free of trigonometric functions of the parameters (module
    docstring).  Z itself when it has no such Γ and no trigonometric function."""
    samples = _samples(fam)
    gammas = sorted(Z.atoms(sp.gamma), key=sp.default_sort_key)
    bad = [g for g in gammas if not _positive_on_domain(g.args[0], samples)]
    if not bad and not _trig_factor(Z):
        return Z
    present = {sp.expand(g.args[0]) for g in gammas}
    reps = {}
    for g in bad:
        x = g.args[0]
        partner = sp.expand(1 - x)
        if _positive_on_domain(partner, samples):
            reps[g] = sp.pi / (sp.sin(sp.pi * x) * sp.gamma(partner))
        elif partner in present and sp.gamma(partner) not in reps:
            # Γ(x) Γ(1 − x) with neither argument positive everywhere (x = b − a): the pair is π / sin(πx)
            reps[g] = sp.pi / (sp.sin(sp.pi * x) * sp.gamma(partner))
        elif partner not in present:
            return None                       # neither Γ(x) nor Γ(1 − x) has a positive argument everywhere
    try:
        with step_limit(SIMPLIFY_SECONDS):
            e = sp.simplify(Z.xreplace(reps))
    except (StepTimeout, RecursionError):
        return None
    trig = sp.Mul(*[f for f in sp.Mul.make_args(e) if _trig_factor(f)])
    rest = sp.Mul(*[f for f in sp.Mul.make_args(e) if not _trig_factor(f)])
    if _trig_factor(rest):
        return None
    if trig != 1:
        values = []
        for s in samples:
            try:
                values.append(complex(sp.N(trig.xreplace({k: sp.Float(v, 30) for k, v in s.items()}), 30)))
            except (TypeError, ValueError):
                continue
        values = [v for v in values if np.isfinite(v)]
        if len(values) < 3 or any(abs(v - values[0]) > 1e-12 * abs(values[0]) or abs(v.imag) > 1e-12 * abs(v)
                                  for v in values):
            return None                       # a trigonometric factor that is not constant: no sound form found
        rest = rest * sp.nsimplify(values[0].real, [sp.pi], tolerance=1e-12)
    if any(not _positive_on_domain(g.args[0], samples) for g in rest.atoms(sp.gamma)):
        return None
    return rest


# --------------------------------------------------------------------------- points


def hard_points(fam, extreme: bool = False):
    """Ordinary parameter values {symbol: value} at which derived forms are checked: the default point, each free
    scalar parameter alone at the values of its domain (CORE, or EXTREME) with the others at their default, and
    all of them at the same value where their domains agree.  Fixed and non-scalar parameters keep their default."""
    base = fam.default_params()
    table = EXTREME if extreme else CORE
    free = [p for p in fam.free_params if p.shape == "scalar" and p.domain in table]
    if any(p.shape != "scalar" or p.domain not in table for p in fam.free_params):
        return [] if extreme else [base]
    out = [] if extreme else [base]

    def value(p, v):         # a parameter greater than a bound: the values above it (the bound + a positive value)
        if p.greater_than is not None:
            return float(fam.evaluate(p.greater_than, {}, 2)) + float(abs(v) if v else 1)
        return v

    for p in free:
        for v in table[p.domain]:
            pt = dict(base)
            pt[p.symbol] = value(p, v)
            out.append(pt)
    domains = {p.domain for p in free}
    if len(free) > 1 and len(domains) == 1:
        for v in table[free[0].domain]:
            pt = dict(base)
            pt.update({p.symbol: value(p, v) for p in free})
            out.append(pt)
    return out


# --------------------------------------------------------------------------- evaluation


class _Float64:
    """A, ∇A and ∇²A of an expression in λ, compiled to numpy as generated code evaluates them."""

    def __init__(self, fam, A):
        self.fam = fam
        self.args = list(fam.lam) + [p.symbol for p in fam.fixed_params]
        grad = [sp.diff(A, l) for l in fam.lam]
        self.parts = [("A", [A]), ("μ", grad), ("F", [sp.diff(g, l) for g in grad for l in fam.lam])]
        self.fns = [(name, sp.lambdify(self.args, exprs, modules=MODULES)) for name, exprs in self.parts]

    def at(self, vals):
        """{quantity: numpy array} at ordinary parameters ``vals``; None where λ itself is not finite."""
        row = []
        for l, e in zip(self.fam.lam, self.fam.eta):
            try:
                row.append(float(self.fam.evaluate(e, vals)))
            except (TypeError, ValueError, ZeroDivisionError, OverflowError):
                return None
        row += [float(vals[p.symbol]) for p in self.fam.fixed_params]
        if not all(math.isfinite(v) for v in row):
            return None
        out = {}
        with np.errstate(all="ignore"):
            for name, f in self.fns:
                try:
                    out[name] = np.array([complex(v) for v in f(*[np.float64(v) for v in row])])
                except (TypeError, ValueError, ZeroDivisionError, OverflowError, NameError):
                    # NameError: a function numpy and scipy lack (sympy's meijerg for ∫₀¹ x^(a−1) e^(−bx) dx): no
                    # target computes it either, so it is no value here (it was an internal error)
                    out[name] = np.array([complex("nan")])
        return out


def _describe(fam, vals):
    return ", ".join(f"{p.name} = {float(vals[p.symbol]):.6g}" for p in fam.free_params if p.shape == "scalar")


def _finite_real(v) -> bool:
    return bool(np.all(np.isfinite(v.real)) and np.all(np.isfinite(v.imag)) and np.all(v.imag == 0))


# --------------------------------------------------------------------------- references


def reference_log_partition(fam, vals):
    """log ∫ h exp(<λ, T>) dθ (one continuous scalar variable; adaptive quadrature in an unconstrained coordinate,
    over the region the grid finds within e^-80 of the peak) or log Σ_k h exp(<λ, T>) (one variable on
    {0, 1, 2, …}: summed until the terms are e^-60 below the largest and decreasing), at ordinary parameters
    ``vals``; None where there is no reliable reference (several variables, a finite support: its sum is exact)."""
    if any(is_mat(t) for t in fam.T) or is_mat(fam.theta) or len(fam.components) > 1:
        return None
    fixed = {p.symbol: sp.Float(float(vals[p.symbol]), 30) for p in fam.params.values() if not is_mat(p.symbol)}
    ell = (fam.log_h + sum((e * t for e, t in zip(fam.eta, fam.T)), sp.Integer(0))).xreplace(fixed)
    if fam.component_supports == ["nonnegative_integers"]:
        return _series_reference(ell, fam.components[0])
    if len(fam.components) > 1 or fam.component_supports[0] not in CONTINUOUS_SUPPORTS:
        return None
    x = fam.components[0] if fam.components else fam.theta
    support = fam.component_supports[0]
    f = sp.lambdify([_U], _in_u(ell, x, support), modules=MODULES)
    lo, hi = (-np.pi, np.pi) if support == "circular" else (-np.inf, np.inf)
    log_jac = {"positive": lambda u: u,
               "unit_interval": lambda u: -np.logaddexp(0.0, u) - np.logaddexp(0.0, -u)}.get(support, lambda u: 0.0 * u)
    to_theta = lambda u: u                                                            # noqa: E731 - ell is in u

    def log_g(u):
        with np.errstate(all="ignore"):
            u = np.asarray(u, dtype=float)
            v = np.real(np.asarray(f(to_theta(u)), dtype=complex)) * np.ones_like(u) + log_jac(u)
        return np.where(np.isnan(v), -np.inf, v)

    if math.isinf(lo):
        grid = np.clip(np.sinh(np.linspace(-7.25, 7.25, 4001)), -700, 700)    # |u| ≤ 700, finest near 0
    else:
        grid = np.linspace(lo, hi, 4001)[1:-1]
    lg = log_g(grid)
    if not np.any(np.isfinite(lg)):
        return None
    M = float(np.max(lg))
    if not math.isfinite(M):
        return None
    keep = np.nonzero(lg > M - 80)[0]
    a = grid[max(keep[0] - 1, 0)] if keep[0] > 0 else lo
    b = grid[min(keep[-1] + 1, grid.size - 1)] if keep[-1] < grid.size - 1 else hi
    peak = grid[int(np.argmax(lg))]
    inner = sorted({float(a), float(peak), float(b)} - {float("inf"), float("-inf")})
    from scipy import integrate                # lazy: scipy's import costs every process start

    g = lambda u: float(np.exp(log_g(u) - M))                                       # noqa: E731
    total, err = 0.0, 0.0
    edges = [a] + [p for p in inner if a < p < b] + [b]
    for s, t in zip(edges[:-1], edges[1:]):
        if s == t:
            continue
        val, e = integrate.quad(g, s, t, epsabs=0.0, epsrel=1e-13, limit=400)
        total, err = total + val, err + e
    if not (total > 0 and err < 1e-10 * total):
        return None
    return M + math.log(total)


_U = sp.Dummy("u", real=True)


def _in_u(ell, x, support):
    """log h + <λ, T> in the unconstrained coordinate u, written so that float64 keeps its digits where θ is
    tiny or next to 1: θ = e^u (log θ = u, log(1 + θ) = softplus(u)) on the positive half-line, θ = σ(u)
    (log θ = −softplus(−u), log(1 − θ) = −softplus(u), 1 − θ = σ(−u)) on the unit interval."""
    e = sp.expand_log(ell, force=True)
    if support == "positive":
        e = e.xreplace({sp.log(x): _U, sp.log(x + 1): softplus(_U)}).xreplace({x: sp.exp(_U)})
    elif support == "unit_interval":
        sig = lambda v: 1 / (1 + sp.exp(-v))                                        # noqa: E731
        e = e.xreplace({sp.log(x): -softplus(-_U), sp.log(1 - x): -softplus(_U)})
        e = e.xreplace({1 - x: sig(-_U)}).xreplace({x: sig(_U)})
    else:
        e = e.xreplace({x: _U})
    return e


def _series_reference(ell, k):
    f = sp.lambdify([k], ell, modules=MODULES)
    n = 1024
    while n <= 1 << 22:
        ks = np.arange(n, dtype=float)
        with np.errstate(all="ignore"):
            v = np.real(np.asarray(f(ks), dtype=complex)) * np.ones_like(ks)
        v = np.where(np.isnan(v), -np.inf, v)
        M = float(np.max(v))
        if not math.isfinite(M):
            return None
        if v[-1] < M - 60 and v[-1] <= v[-2]:
            from scipy.special import logsumexp

            return float(logsumexp(v))
        n *= 4
    return None


# --------------------------------------------------------------------------- validation


def problems(fam, A, *, extreme: bool = False, reference: bool = True, limit: int = 1):
    """Up to ``limit`` descriptions of points where A, μ = ∇A or F = ∇²A in float64 is not a finite real number, or
    (``reference``) where A differs from the reference log-partition by more than TOL."""
    if any(is_mat(l) for l in fam.lam) or is_mat(A):
        return []
    if A.free_symbols - set(fam.lam) - {p.symbol for p in fam.fixed_params}:
        return []                    # a dimension symbol: nothing to evaluate at numbers here
    try:
        q = _Float64(fam, A)
    except Exception:  # noqa: BLE001 - an expression numpy cannot compute: nothing to judge here
        return []
    out = []
    for vals in hard_points(fam, extreme):
        if not fam.params_valid(vals):
            continue
        got = q.at(vals)
        if got is None:
            continue
        for name in ("A", "μ", "F"):
            if not _finite_real(got[name]):
                v = got[name]
                bad = ("NaN" if np.any(np.isnan(v)) else COMPLEX if np.all(np.isfinite(v.real)) and
                       np.all(np.isfinite(v.imag)) else "not a finite real number")
                out.append(f"at {_describe(fam, vals)} the derived {name} is {bad}")
                break
        else:
            if reference:
                want = reference_log_partition(fam, vals)
                a = float(got["A"][0].real)
                if want is not None and abs(a - want) > TOL * max(1.0, abs(want)):
                    out.append(f"at {_describe(fam, vals)} the derived A = {a:.12g} but log ∫ h exp(<λ,T>) = "
                               f"{want:.12g} (quadrature)")
        if len(out) >= limit:
            break
    return out


#: how :func:`problems` describes a finite value with an imaginary part
COMPLEX = "complex"


def validate(fam, A, spec, what: str):
    """Raise a located SpecError when the derived A (or its μ, F) is wrong or not finite at a core point; record a
    derivation note when it is not finite at an extreme point (module docstring).  A finite complex value says the
    family itself is not real (log θ on a support with θ < 0), not that its closed form failed."""
    found = problems(fam, A)
    if found and found[0].endswith(f" is {COMPLEX}"):
        raise SpecError("not a real family: the log-partition or its derivatives are not real numbers at valid "
                        f"parameters ({found[0]}; check the support against the sufficient statistics and the base "
                        "measure)", *where(spec, "sufficient_statistics"))
    if found:
        raise SpecError(f"the log-partition derived by {what} is not usable everywhere in the parameter domain: "
                        f"{found[0]}; declare log_partition", *where(spec, "sufficient_statistics"))
    far = problems(fam, A, extreme=True, reference=False)
    if far:
        fam.steps.append(("numerical range", f"float64 limit of the closed form: {far[0]} (a log-partition declared "
                                             "in a stable form goes further)"))
