"""The log-partition A(λ) of a family without a declared one: Z = ∫ h exp(<λ, T>) over a continuous support
(sympy's integration, Meijer-G first) or Σ over a discrete one (finite supports directly in λ, infinite ones by
symbolic summation); and expectations by summation over a discrete support."""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import sympy as sp

from blr_derive.core.budget import step_limit
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.matexpr import is_mat
from blr_derive.core.specialfns import besselk_closed, besselk_order_derivative
from blr_derive.core.yamlio import where
from blr_derive.families.numeric import MODULES
from blr_derive.families.soundness import MAX_OPS, sound_closed_form
from blr_derive.families.symbolic import loggamma_form
from blr_derive.spec.vocabulary import CONTINUOUS_SUPPORTS, count_total, integer_range


def _err(msg, container, key=None):
    f, l = where(container, key)
    return SpecError(msg, f, l)


def support_words(fam):
    if fam.joint_support:
        return fam.joint_support
    s = sorted(set(fam.component_supports))
    return s[0] if len(s) == 1 else "×".join(fam.component_supports)


INTEGRATE_SECONDS = 60


def power_form(e, variables):
    """Rewrite exp(c·log g) → g**c and exp(c·loggamma(g)) → Γ(g)**c inside a product.

    ``sympy.integrate`` recognises Gamma and Beta kernels (θ^(a-1) e^(-bθ), θ^(a-1)(1-θ)^(b-1))
    in power form but not as exp(...) of logarithms; ``summation`` needs r**k/k! for the Poisson sum.
    """
    out = sp.Integer(1)
    for f in sp.Mul.make_args(sp.powsimp(e)):
        if not isinstance(f, sp.exp):
            out *= f
            continue
        keep = sp.Integer(0)
        powers = {}               # one power per base: (1 + θ²)^(−ν/2 − 1/2), not (1 + θ²)^(−ν/2) (1 + θ²)^(−1/2)
        for term in sp.Add.make_args(sp.expand(f.args[0])):
            logs = [a for a in sp.Mul.make_args(term) if isinstance(a, (sp.log, sp.loggamma))]
            if len(logs) == 1 and any(term.has(v) for v in variables):
                powers[logs[0]] = powers.get(logs[0], sp.Integer(0)) + term / logs[0]
            else:
                keep += term
        for lg, c in powers.items():
            g = lg.args[0]
            out *= (sp.gamma(g) if isinstance(lg, sp.loggamma) else g) ** sp.factor_terms(c)
        out *= sp.exp(keep)
    return out


def positive_dummies(fam):
    """Integration/summation variables with the assumptions of their supports."""
    reps = {}
    for c, s in zip(fam.components, fam.component_supports):
        if s in ("positive", "unit_interval"):
            reps[c] = sp.Dummy(c.name, positive=True)
        elif s == "nonnegative_integers" or integer_range(s):
            reps[c] = sp.Dummy(c.name, integer=True, nonnegative=True)
        else:
            reps[c] = sp.Dummy(c.name, real=True)
    return reps


def definite_integral(f, x, lo, hi):
    """∫_lo^hi f dx with sympy: Meijer-G first (fast for Gamma/Beta kernels), then the default algorithm."""
    tried = []
    for kw in ({"meijerg": True}, {}):
        try:
            with step_limit(INTEGRATE_SECONDS):
                r = sp.integrate(f, (x, lo, hi), conds="none", **kw)
                if r.has(sp.hyper, sp.meijerg):
                    r = sp.hyperexpand(r)
        except Exception as exc:  # sympy internals, or StepTimeout
            tried.append(type(exc).__name__)
            continue
        if not r.has(sp.Integral, sp.hyper, sp.meijerg):
            return r
        tried.append("no closed form")
    return None


def resolve_piecewise(fam, e):
    """Pick, for each Piecewise in a result, the branch that holds at random valid parameters."""
    if not isinstance(e, sp.Basic) or not e.has(sp.Piecewise):
        return e
    rng = np.random.default_rng(11)
    samples = [fam.sample_params(rng, 2) for _ in range(5)]
    reps = {}
    for pw in e.atoms(sp.Piecewise):
        chosen = None
        for expr, cond in pw.args:
            ok = True
            for vals in samples:
                c = cond.xreplace({k: sp.Float(float(v), 30) for k, v in vals.items() if not is_mat(k)})
                if c not in (sp.true, True):
                    ok = False
                    break
            if ok:
                chosen = expr
                break
        if chosen is None:
            return None
        reps[pw] = chosen
    return e.xreplace(reps)


def finish_log_partition(fam, Z, spec, what):
    if Z is not None:
        Z = resolve_piecewise(fam, Z)
    if Z is None or Z.has(sp.Integral, sp.Sum) or Z.has(sp.oo, -sp.oo, sp.zoo, sp.nan) or Z == 0:
        raise _err(f"not normalizable: {what} over the {support_words(fam)} support diverges or has no closed form "
                   "(declare log_partition)", spec, "sufficient_statistics")
    Z = sp.simplify(Z)
    # Γ of arguments that are negative somewhere in the domain times sin(πx) (reflection products, 0·∞ at integers
    # and half-integers): rewritten so that every Γ has a positive argument (soundness.py)
    Z = sound_closed_form(fam, Z) or Z
    A = _log_partition_of(fam, Z, spec, what)
    ops = sp.count_ops(A)
    if ops > MAX_OPS:
        raise _err(f"the log-partition sympy finds for {what} has {ops} operations (more than {MAX_OPS}): μ and F "
                   "are its derivatives and every target would print them (megabytes of code); declare "
                   "log_partition in a compact form", spec, "sufficient_statistics")
    return A


def _log_partition_of(fam, Z, spec, what):
    """log Z in λ: the expanded log-gamma form when it agrees with log Z in floating point, else log Z whole."""
    A_ord = loggamma_form(sp.expand_log(sp.log(Z), force=True))
    A = sp.simplify(A_ord.xreplace(fam.ord_from_nat))
    A = loggamma_form(sp.expand_log(A, force=True)) if A.has(sp.gamma) else A
    if agrees_with_log(fam, A, Z):
        return A
    # the forced expansion log(a/b) = log a − log b is wrong where a and b are negative (a Beta in mean/precision
    # form got + iπ; e^λ − 1 over λ on (0, 1) was NaN for λ < 0): keep log Z whole
    A = loggamma_form(sp.log(sp.simplify(Z.xreplace(fam.ord_from_nat))))
    bad = not_real_at(fam, A)
    if bad is not None:
        # sympy's closed form holds on part of the parameter domain only (conds="none" drops its conditions): at
        # these valid parameters it is complex or infinite, and generated code would compute NaN there
        finite = _log_integral_at(fam, bad[1])
        if finite is not None:
            # the integral converges there: the family is normalizable, only sympy's closed form is not
            raise _err(f"no closed form of the log-partition: {what} over the {support_words(fam)} support is finite "
                       f"at {bad[0]} (log ∫ = {finite:.6g} by quadrature), but the closed form sympy finds is not a "
                       "real number there; declare log_partition with the expression grammar's functions, or narrow "
                       "the parameters' domains", spec, "sufficient_statistics")
        raise _err(f"not normalizable: {what} over the {support_words(fam)} support has no closed form that holds for "
                   f"every parameter in the declared domains (at {bad[0]} it is not a real number); declare "
                   "log_partition, or narrow the parameters' domains", spec, "sufficient_statistics")
    return A


#: the supports over which :func:`_log_integral_at` integrates, as (lower, upper) bounds
_BOUNDS = {"real": (-np.inf, np.inf), "positive": (0.0, np.inf), "unit_interval": (0.0, 1.0),
           "circular": (-np.pi, np.pi)}


def _log_integral_at(fam, values):
    """log ∫ h exp(<λ(params), T>) dθ at the ordinary parameters ``values`` ({symbol: float}) by adaptive
    quadrature, for one scalar variable on an interval; None where it does not converge, is not finite, or the
    family is not of that kind (then nothing is claimed about it)."""
    x = fam.theta
    if not isinstance(x, sp.Symbol) or not isinstance(fam.support, str) or fam.support not in _BOUNDS:
        return None
    kernel = (fam.log_h + sp.Add(*[e * t for e, t in zip(fam.eta, fam.T)])).xreplace(values)
    if kernel.free_symbols != {x}:
        return None
    from scipy import integrate
    try:
        f = sp.lambdify(x, kernel, modules=["scipy", "numpy"])
        lo, hi = _BOUNDS[fam.support]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")         # a divergent integral's IntegrationWarning: judged below
            grid = [v for v in np.linspace(max(lo, -50.0), min(hi, 50.0), 201)[1:-1]]
            shift = max(float(np.real(f(v))) for v in grid)
            if not np.isfinite(shift):
                return None
            val, err = integrate.quad(lambda t: float(np.exp(np.real(f(t)) - shift)), lo, hi, limit=200)
    except Exception:  # noqa: BLE001 - a kernel quad cannot evaluate: nothing is claimed
        return None
    if not (np.isfinite(val) and val > 0 and err < 1e-6 * val):
        return None
    return float(np.log(val) + shift)


def not_real_at(fam, A, samples: int = 12):
    """Valid ordinary parameters (as text, and as {symbol: value}) at which A(λ(params)), evaluated in floating point as generated code
    evaluates it, is not a finite real number; None where it is at every one of ``samples`` random points, or
    where A cannot be evaluated this way (matrix parameters, functions the numpy printer does not know)."""
    e = A.xreplace(dict(zip(fam.lam, fam.eta)))
    params = sorted(e.free_symbols, key=str)
    if any(is_mat(p) for p in params):
        return None
    try:
        fa = sp.lambdify(params, e, modules=["scipy", "numpy"])
    except Exception:  # noqa: BLE001 - unprintable functions: nothing to judge
        return None
    for args in _valid_points(fam, params, seed=5, samples=samples):
        if not _real(_value_at(fa, args)):
            return ", ".join(f"{p} = {v:.3g}" for p, v in zip(params, args)), dict(zip(params, args))
    return None


def agrees_with_log(fam, A, Z):
    """Whether A(λ(params)), evaluated in real floating point as generated code evaluates it (a log of a negative
    number is NaN there, even where the imaginary parts of two such logs cancel), equals log Z(params) at random
    valid parameters."""
    at_nat = dict(zip(fam.lam, fam.eta))
    params = sorted((A.xreplace(at_nat).free_symbols | Z.free_symbols), key=str)
    if any(is_mat(p) for p in params):
        return True
    try:
        fa = sp.lambdify(params, A.xreplace(at_nat), modules=["scipy", "numpy"])
        fz = sp.lambdify(params, sp.log(Z), modules=["mpmath"])
    except Exception:  # pragma: no cover - unprintable functions: keep the derived form
        return True
    for args in _valid_points(fam, params, seed=3, samples=4):
        a, z = _value_at(fa, args), _value_at(fz, args)
        if a is None or z is None:
            return False
        if not (_real(a) and abs(z.imag) < 1e-12) or abs(a.real - z.real) > 1e-9 * (1 + abs(z.real)):
            return False
    return True


def _valid_points(fam, params, seed: int, samples: int):
    """Float arguments for ``params`` at ``samples`` random valid ordinary parameters (fixed seed); none once a
    parameter is not a scalar."""
    rng = np.random.default_rng(seed)
    for _ in range(samples):
        vals = fam.sample_params(rng, 2)
        args = [vals.get(p, 1.0) for p in params]
        if any(np.ndim(a) for a in args):
            return
        yield [float(x) for x in args]


def _value_at(f, args):
    """f(*args) as a complex number, or None where evaluating it raises; also where the lambdified form names a
    function numpy and scipy do not have (NameError: sympy's ∫₀¹ x^(a−1) e^(cx) dx is a lowergamma of
    c·exp_polar(iπ), which no target computes, and it was an internal error instead of a located one)."""
    with np.errstate(all="ignore"):
        try:
            return complex(f(*args))
        except (TypeError, ValueError, ZeroDivisionError, OverflowError, NameError):
            return None


def _real(a) -> bool:
    return a is not None and bool(np.isfinite(a.real)) and a.imag == 0


def integrate_log_partition(fam, spec):
    if fam.joint_support in ("simplex", "sphere"):
        raise _err(f"log_partition must be given for the {fam.joint_support} support (the engine integrates over products of "
                   "real, positive and unit_interval components only)", spec, "sufficient_statistics")
    reps = positive_dummies(fam)
    xs = [reps[c] for c in fam.components]
    kernel = fam.h * sp.exp(sum((e * t for e, t in zip(fam.eta, fam.T)), sp.Integer(0)))
    integrand = power_form(kernel.xreplace(reps), xs)
    what = f"∫ h exp(<λ,T>) d{fam.theta}"
    Z = integrand
    for x, s in zip(xs, fam.component_supports):
        lo, hi = CONTINUOUS_SUPPORTS[s]
        try:
            Z = definite_integral(Z, x, lo, hi)
        except Exception:  # pragma: no cover - sympy internals
            Z = None
        if Z is None:
            break
        Z = resolve_piecewise(fam, Z)
        if Z is None:
            break
        if len(xs) > 1:
            Z = power_form(sp.simplify(Z), xs)
    return finish_log_partition(fam, Z, spec, what)


def support_points(fam, limit: int | None = None):
    """The points of a finite discrete support as dicts {component symbol: value} (None if infinite)."""
    if fam.joint_support == "categorical":
        K = len(fam.components)
        return [{c: int(i == k) for i, c in enumerate(fam.components)} for k in range(K)]
    if count_total(fam.joint_support) is not None:
        return [dict(zip(fam.components, pt)) for pt in compositions(count_total(fam.joint_support), len(fam.components))]
    sets = []
    for s in fam.component_supports:
        if s == "binary_pm1":
            sets.append((-1, 1))
        elif s == "nonnegative_integers":
            if limit is None:
                return None
            sets.append(tuple(range(limit)))
        elif integer_range(s):
            lo, hi = integer_range(s)
            sets.append(tuple(range(lo, hi + 1)))
        else:
            return None
    return [dict(zip(fam.components, pt)) for pt in itertools.product(*sets)]


#: the most terms (support points times entries of F) that :func:`centred_fisher` writes; above it F stays the
#: simplified ∇²A
CENTRED_MAX_TERMS = 20000


def centred_fisher(fam):
    """F(λ) = ∇²A(λ) = Cov_q[T] (the Hessian of A, Eq. 4 of Khan & Rue 2023) of a log-partition summed over a finite
    support, A = log Z with Z = Σ_i w_i and w_i = h(θ_i) e^{<λ, T(θ_i)>} (:func:`sum_log_partition`), as the corrected
    two-pass sum

        F = Σ_i p_i e_i e_iᵀ − s sᵀ,   e_i = T(θ_i) − μ,   s = Σ_i p_i e_i,   p_i = w_i / Z,   μ = ∇A,

    printed through the lowering of codegen/expsums.py (each p_i and μ normalized by the largest exponent, each
    normalized sum once where the maps are long).  None where A is not that sum (declared, an infinite support,
    matrix natural parameters), where the support has two points (F = w_1 w_2 ΔT ΔTᵀ / Z², one product, which
    simplify writes itself: a Bernoulli's 4e^{2λ}/(e^{2λ} + 1)²), or where it would have more than CENTRED_MAX_TERMS
    terms.

    The simplified ∇²A is E[T Tᵀ] − μμᵀ over a common denominator; where q is concentrated on one point both terms
    are near T(θ_max)² and their difference is the small mass elsewhere: a tilted Zipf law on 1..20 at r = 30 printed
    Var = 1.137e-13 for 9.358e-14, and 0 for 1.9e-22 at r = 50; two ±1 spins at a field of 30 lost 2.2e-6 of
    Var(s1) = 3.5e-26 even in 30 digits.  Here a diagonal entry's first sum has terms of one sign, and the rounding δ
    of μ, which adds δδᵀ to it (Σ_i p_i (T_i − μ) = 0), is taken out by s sᵀ = δδᵀ (the corrected two-pass algorithm
    of Chan, Golub & LeVeque, "Algorithms for computing the sample variance: analysis and recommendations", Am. Stat.
    37 (1983)): without it the spins at fields (30, −20), coupling 5, lost 1.6e-11 of Var(s1) = 7.7e-22 (δ ≈ 1e-16
    of μ ≈ 1).  A form over the pairs of points, Σ_{i<k} w_i w_k (T_i − T_k)(T_i − T_k)ᵀ/Z², is as accurate but
    has N(N − 1)/2 terms in each entry: a 41-point support's check took 113 s instead of 47."""
    if fam.A_given or not isinstance(fam.A, sp.log) or any(is_mat(l) for l in fam.lam):
        return None
    pts = support_points(fam)
    if pts is None or len(pts) <= 2:
        return None
    w = _support_weights(fam, pts)
    Z = fam.A.args[0]
    if sp.Add(*w) != Z:
        return None
    return _centred_sum(fam, w, pts, Z, list(fam.mu_of_lam))


def centred_covariance(fam):
    """Cov_q[T] as the corrected two-pass sum of :func:`centred_fisher` over any finite support (two points or
    more) whatever the form of A: Z = Σ_i w_i written out and μ_j = ∂ log Z/∂λ_j (the same quotient of sums as a
    derived A's μ), so that it does not depend on a declared closed form.  For a closed-form A over a finite support
    (declared, or the two-point sum that simplify rewrites) whose simplified ∇²A cancels where q is concentrated
    (:func:`hessian_loses_digits`), and for F evaluated numerically (Family.fisher_at, the check's 30-digit record).
    None where the support is infinite or not enumerable, the natural parameters are matrices, or it would have more
    than CENTRED_MAX_TERMS terms."""
    if any(is_mat(l) for l in fam.lam):
        return None
    pts = support_points(fam)
    if pts is None or len(pts) < 2:
        return None
    w = _support_weights(fam, pts)
    Z = sp.Add(*w)
    if Z == 0:
        return None
    return _centred_sum(fam, w, pts, Z, [sp.diff(sp.log(Z), l) for l in fam.lam])


def _centred_sum(fam, w, pts, Z, mu):
    """Σ_i p_i e_i e_iᵀ − s sᵀ with p_i = w_i/Z, e_i = T(θ_i) − μ, s = Σ_i p_i e_i (None above CENTRED_MAX_TERMS)."""
    keep = [(wi, [sp.sympify(t).xreplace(pt) for t in fam.T]) for wi, pt in zip(w, pts) if wi != 0]
    n = len(fam.lam)
    if len(keep) * n * (n + 1) // 2 > CENTRED_MAX_TERMS:
        return None
    p = [wi / Z for wi, _ in keep]
    e = [[T[j] - mu[j] for j in range(n)] for _, T in keep]
    s = [sp.Add(*[pi * ei[j] for pi, ei in zip(p, e)]) for j in range(n)]
    F = sp.zeros(n, n)
    for j in range(n):
        for k in range(j, n):
            F[j, k] = F[k, j] = sp.Add(*[pi * ei[j] * ei[k] for pi, ei in zip(p, e)]) - s[j] * s[k]
    return F


#: |λ| along each probe direction at which :func:`hessian_loses_digits` evaluates a closed-form ∇²A: q is
#: concentrated there (a truncated geometric on 0..20 lost 3.4e-12 of its variance at λ = 5, 4.6e-5 at 20, and its
#: exponents e^{23λ} stay finite in float64 up to |λ| = 30)
PROBE_SCALES = (6.0, 18.0)

#: the largest error on F's own scale, max |ΔF_jk|/sqrt(F_jj F_kk), that a closed-form ∇²A may make at the probes
#: (an accurate form makes a few 1e-16; the truncated geometric's simplified form 4.6e-5)
HESSIAN_TOLERANCE = 1e-10


def _probe_directions(n: int):
    """±e_j, ±(1, …, 1) and ±(1, −1, 1, …): the directions in λ along which q concentrates on a point of the
    support (each statistic's extremes, together and against each other)."""
    dirs = []
    for j in range(n):
        dirs.append([float(i == j) for i in range(n)])
    if n > 1:
        dirs.append([1.0] * n)
        dirs.append([(-1.0) ** i for i in range(n)])
    return [d for v in dirs for d in (v, [-x for x in v])]


def hessian_loses_digits(fam, H) -> bool:
    """Whether the closed-form Fisher information H(λ) = ∇²A (a simplified Hessian), evaluated in float64 as
    generated code evaluates it, is wrong on its own scale, |ΔF_jk|/sqrt(F_jj F_kk), by more than HESSIAN_TOLERANCE
    at a point where q is concentrated (:func:`_probe_directions` times PROBE_SCALES), against Cov_q[T] summed over
    the finite support as the corrected two-pass sum of :func:`centred_fisher` with weights normalized by the
    largest (accurate on F's own scale to a few 1e-16 in float64: tests/unit/families/test_centred_fisher.py).  A
    closed form over a common denominator is E[T Tᵀ] − μμᵀ in disguise: the truncated geometric on 0..20 declared
    as A = log((1 − e^{21λ})/(1 − e^λ)) has ∇²A = (e^{22λ} − …)/(−e^{23λ} + …), whose terms cancel to e^{−2λ} of
    their size: its numpy module's variance was wrong by 4.6e-5 at λ = 20 and by a factor of 8e3 at λ = 40.  False
    where the support is not finite or H has other symbols than λ."""
    pts = support_points(fam)
    lam = list(fam.lam)
    if pts is None or any(is_mat(l) for l in lam) or not set().union(*(e.free_symbols for e in H)) <= set(lam):
        return False
    try:
        h = np.array([float(sp.N(fam.h.xreplace(pt), 30)) for pt in pts])
        T = np.array([[float(sp.N(sp.sympify(t).xreplace(pt), 30)) for t in fam.T] for pt in pts])
        fh = sp.lambdify(lam, H, modules=MODULES)
    except (TypeError, ValueError):
        return False
    keep = h > 0
    logh, T = np.log(h[keep]), T[keep]
    n = len(lam)
    for d in _probe_directions(n):
        for scale in PROBE_SCALES:
            x = scale * np.array(d)
            logw = logh + T @ x
            p = np.exp(logw - logw.max())
            p /= p.sum()
            e = T - p @ T
            s = p @ e
            want = (e * p[:, None]).T @ e - np.outer(s, s)
            with np.errstate(all="ignore"):
                try:
                    got = np.array(fh(*[np.float64(xi) for xi in x]), dtype=float).reshape(n, n)
                except (TypeError, ValueError, ZeroDivisionError, OverflowError, NameError):
                    return True
            if not np.all(np.isfinite(got)):
                return True
            size = np.sqrt(np.outer(np.diag(want), np.diag(want)))
            if np.any(np.abs(got - want) > HESSIAN_TOLERANCE * np.where(size > 0, size, 1.0)):
                return True
    return False


def compositions(n: int, k: int):
    """The vectors of k nonnegative integers adding up to n, in lexicographic order."""
    if k == 1:
        return [(n,)]
    return [(i,) + rest for i in range(n + 1) for rest in compositions(n - i, k - 1)]


def _support_weights(fam, pts):
    """h(θ) exp(<λ, T(θ)>) at each point of a finite support: the terms of Z(λ)."""
    return [fam.h.xreplace(pt) * sp.exp(sum((l * t.xreplace(pt) for l, t in zip(fam.lam, fam.T)), sp.Integer(0)))
            for pt in pts]


def sum_log_partition(fam, spec):
    pts = support_points(fam)
    if pts is not None:
        # finite support: Z(λ) = Σ_θ h(θ) exp(<λ, T(θ)>) directly in λ
        Z = sp.Integer(0)
        for w in _support_weights(fam, pts):
            Z += w
        if Z == 0:
            raise _err("not normalizable: h vanishes on the whole support", spec, "base_measure")
        return sp.log(Z)
    reps = positive_dummies(fam)
    xs = [reps[c] for c in fam.components]
    kernel = fam.h * sp.exp(sum((e * t for e, t in zip(fam.eta, fam.T)), sp.Integer(0)))
    Z = power_form(kernel.xreplace(reps), xs)
    Z = Z.rewrite(sp.factorial) if Z.has(sp.gamma) else Z
    Z, back = geometric_form(Z, xs)
    for x in xs:
        try:
            with step_limit(INTEGRATE_SECONDS):
                Z = sp.summation(Z, (x, 0, sp.oo))
        except Exception:  # sympy internals, or StepTimeout
            Z = None
            break
    Z = Z.xreplace(back) if Z is not None else None
    return finish_log_partition(fam, Z, spec, f"Σ h exp(<λ,T>) over {fam.theta}")


def geometric_form(e, variables):
    """exp(a·k + b) → e^b u^k with u = e^a a positive placeholder, for a summation variable k, so that sympy's
    summation sees the power series (Σ e^{wk}/k! = exp(e^w) for a Poisson written in its natural parameter w);
    returns the expression and the map u → e^a to apply to the sum."""
    back = {}

    def split(node):
        arg = sp.expand(node.args[0])
        for k in variables:
            a = sp.diff(arg, k)
            if a != 0 and not a.has(*variables):
                u = sp.Dummy("u", positive=True)
                back[u] = sp.exp(a)
                return sp.exp(sp.expand(arg - a * k)) * u ** k
        return node
    return e.replace(lambda n: isinstance(n, sp.exp) and n.has(*variables), split), back


def discrete_expectation(fam, f):
    """E_q[f(θ)] by summation over a discrete support, in ordinary parameters."""
    logq = fam.log_density()
    pts = support_points(fam)
    if pts is not None:
        return sum((sp.exp(logq.xreplace(pt)) * f.xreplace(pt) for pt in pts), sp.Integer(0))
    if len(fam.components) != 1:
        raise DerivationError("E_q[log h] by summation is implemented for one discrete component")
    k = sp.Dummy("k", integer=True, nonnegative=True)
    (c,) = fam.components
    q = power_form(sp.exp(sp.expand(logq.xreplace({c: k}))), [k])
    return sp.Sum(q * f.xreplace({c: k}), (k, 0, sp.oo))


def tilted_expectation(fam, g):
    """E_q[g(θ)] for a scalar continuous family as the derivative of a tilted log-partition (App. B):
    E_q[g] = d/ds log ∫ h e^{s g} exp(<λ, T>) dθ at s = 0.  For g = log h the tilt is h^{1+s}, an integral of the
    same kind as A's (θ^{a+s}, Γ kernels), e.g. E[log θ] under a Weibull is −(log(−λ) + γ)/k.  None when sympy
    finds no closed form (then the caller reports it)."""
    if len(fam.components) != 1 or fam.component_supports[0] not in CONTINUOUS_SUPPORTS:
        return None
    reps = positive_dummies(fam)
    x = reps[fam.components[0]]
    s = sp.Dummy("s", positive=True)
    tilt = sp.powsimp(sp.expand_power_base(fam.h ** (1 + s), force=True)) if g == fam.log_h else fam.h * sp.exp(s * g)
    kernel = tilt * sp.exp(sum((e * t for e, t in zip(fam.eta, fam.T)), sp.Integer(0)))
    lo, hi = CONTINUOUS_SUPPORTS[fam.component_supports[0]]
    try:
        Z = definite_integral(power_form(kernel.xreplace(reps), [x]), x, lo, hi)
    except Exception:  # pragma: no cover - sympy internals
        return None
    if Z is None or Z.has(sp.Piecewise, sp.oo, -sp.oo, sp.zoo, sp.nan):
        return None
    with step_limit(INTEGRATE_SECONDS):
        Z = besselk_form(Z)
        e = sp.unpolarify(sp.diff(sp.log(Z), s).xreplace({s: 0}))
        e = bessel_order_derivatives(e)
        e = sp.simplify(sp.expand_log(e, force=True))
    if e.has(sp.Integral, sp.Derivative, sp.Subs, sp.oo, -sp.oo, sp.zoo, sp.nan, x):     # e.g. d/dν I_ν
        return None
    return loggamma_form(e)


def besselk_form(e):
    """c·I_ν(z) − c·I_{−ν}(z) → −c·(2/π) sin(νπ) K_ν(z) (DLMF 10.27.4) wherever a sum holds such a pair: sympy's
    integration writes ∫ θ^a e^{−pθ − q/θ} dθ = 2(q/p)^{(a+1)/2} K_{a+1}(2√(pq)) (the generalized inverse Gaussian's
    kernel) as a difference of I's with reflection-formula Γ products, whose derivative in the order has no closed
    form and which cancels catastrophically at large z; in K's form the order derivative is
    :func:`besselk_order_derivative` (closed at half-integer orders, the inverse Gaussian's)."""
    if not isinstance(e, sp.Basic) or not e.has(sp.besseli):
        return e

    def pair(add):
        coeffs, rest = {}, []
        for t in sp.Add.make_args(add):
            Is = [f for f in sp.Mul.make_args(t) if isinstance(f, sp.besseli)]
            if len(Is) != 1:
                rest.append(t)
                continue
            coeffs[Is[0]] = coeffs.get(Is[0], sp.Integer(0)) + t / Is[0]
        out, done = sp.Add(*rest), set()
        for I, c in coeffs.items():
            if I in done:
                continue
            nu, z = I.args
            J = sp.besseli(sp.expand(-nu), z)
            if J in coeffs and J not in done and sp.simplify(sp.gammasimp(c + coeffs[J])) == 0:
                # c I_ν + c_J I_{−ν} = c_J (I_{−ν} − I_ν) = c_J (2/π) sin(νπ) K_ν
                out += sp.simplify(sp.gammasimp(coeffs[J] * 2 * sp.sin(nu * sp.pi) / sp.pi)) * sp.besselk(nu, z)
                done |= {I, J}
            else:
                out += c * I
                done.add(I)
        return out
    return e.replace(lambda n: isinstance(n, sp.Add) and n.has(sp.besseli), pair)


def bessel_order_derivatives(e):
    """Derivatives of K_ν(z) in its order (unevaluated ``Subs(Derivative(besselk(ξ, z), ξ), ξ, ν)`` from the chain
    rule) → :func:`besselk_order_derivative` (closed form at half-integer and integer orders, else the integral
    ``dbesselk(1, ν, z)``); every K_ν(z) → its elementary form at half-integer orders, else ``dbesselk(0, ν, z)``
    (what the grammar's ``besselk`` is and the numpy target prints)."""
    if not isinstance(e, sp.Basic) or not e.has(sp.besselk):
        return e

    def subs_node(n):
        d = n.expr
        if (isinstance(d, sp.Derivative) and isinstance(d.expr, sp.besselk) and len(n.variables) == 1
                and d.variable_count == ((n.variables[0], 1),) and d.expr.args[0] == n.variables[0]):
            return besselk_order_derivative(n.point[0], d.expr.args[1])
        return n
    e = e.replace(lambda n: isinstance(n, sp.Subs), subs_node)
    e = e.replace(lambda n: isinstance(n, sp.Derivative) and isinstance(n.expr, sp.besselk)
                  and n.variable_count == ((n.expr.args[0], 1),) and n.expr.args[0].is_Symbol,
                  lambda n: besselk_order_derivative(n.expr.args[0], n.expr.args[1]))
    return e.replace(lambda n: isinstance(n, sp.besselk), lambda n: besselk_closed(n.args[0], n.args[1]))
