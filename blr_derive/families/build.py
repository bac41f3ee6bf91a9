"""Deriving a family from its declaration (``blr_derive/spec/family.py``): the engine *derives*, or *verifies
when given*,

1. the map ordinary → natural parameters (declared) and its inverse (solved, ``solve.py``);
2. the log-partition A(λ): declared (checked numerically by ``blr-derive check``), or integrated over a continuous
   support / summed over a discrete one (``partition.py``);
3. the expectation parameters μ = ∇A(λ) (Eq. 4), by matrix differential calculus (declared ones are checked);
4. minimality: the Fisher information ∇²A(λ) must be non-singular;
5. the map μ → ordinary parameters: solved symbolically when a closed form exists, otherwise *numeric*
   (Newton's method on the convex dual problem, ``numeric.py``).

A declaration that is not normalizable or not minimal is a located SpecError.
"""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.core import matcalc
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.matexpr import is_mat
from blr_derive.core.specialfns import limit_safe, log_ndtr, ndtr, near_point, normal_cdf_form
from blr_derive.core.yamlio import where
from blr_derive.families.model import Family
from blr_derive.families.numeric import numeric_fisher
from blr_derive.families.singular import guard_removable
from blr_derive.families.soundness import validate
from blr_derive.families.partition import integrate_log_partition, sum_log_partition, support_points, support_words
from blr_derive.families.solve import solve
from blr_derive.spec.family import FamilyDecl


def _err(msg, container, key=None):
    f, l = where(container, key)
    return SpecError(msg, f, l)


_X, _Y = sp.Wild("x"), sp.Wild("y")


def defined_inverse(e):
    """Forms of a closed-form inverse map that stay defined where sympy's are 0/0: sympy solves
    (κ cos a, κ sin a) = (x, y) for a as the half-angle form −2 atan((x − √(x² + y²))/y), which is atan2(y, x),
    and for κ as a ratio with a radical in the denominator, which rationalised is √(x² + y²)."""
    if not isinstance(e, sp.Basic):
        return e
    if any(isinstance(d, sp.Pow) and d.exp.is_Rational and not d.exp.is_Integer
           for d in sp.preorder_traversal(sp.denom(e))):
        # a radical in the denominator (κ = (λ₁r − r²)/(λ₁ − r), 0/0 on the axis): rationalised, it is r
        tidy = sp.cancel(sp.radsimp(e))
        if sp.count_ops(tidy) < sp.count_ops(e):
            e = tidy
    if not e.has(sp.atan):
        return e

    def swap(node):
        m = node.match(-2 * sp.atan((_X - sp.sqrt(_X**2 + _Y**2)) / _Y))
        return sp.atan2(m[_Y], m[_X]) if m and m.get(_Y, 0) != 0 else node
    return e.replace(lambda n: isinstance(n, sp.Mul) and n.has(sp.atan), swap)


def _limit_safe(sampler):
    """A scalar sampler's x/|x| written sign(x) (``core.specialfns.limit_safe``): the old sign idiom of a sampler,
    (u − ½)/|u − ½|, was 0/0 at u = ½, the middle node of the quadrature rule."""
    if sampler is None or is_mat(sampler) or isinstance(sampler, sp.Tuple):
        return sampler
    return limit_safe(sampler)


def build_family(decl: FamilyDecl) -> Family:
    """The derived :class:`Family` of a declaration (see the module docstring)."""
    spec = decl.spec
    eta, lam, mu, symmetric, vname = decl.eta, decl.lam, decl.mu, decl.symmetric, decl.vname
    fam = Family(
        name=decl.name, description=decl.description, reference=decl.reference, theta=decl.theta, dim=decl.dim,
        support=decl.support, params=decl.params, T=decl.T, h=decl.h, eta=eta, lam=lam, mu=mu, A=None,
        A_given=decl.A is not None, elementwise=decl.elementwise, symmetric=symmetric, file=decl.file,
        variable_kind=decl.variable_kind, components=decl.components, component_supports=decl.component_supports,
        joint_support=decl.joint_support, sizes=decl.sizes, gaussian_mean=decl.gaussian_mean,
        gaussian_cov=decl.gaussian_cov, sampler=_limit_safe(decl.sampler), sampler_accept=decl.sampler_accept, expected_log_h=decl.expected_log_h)

    # 1. ordinary <- natural (solve λ = η(params))
    fam.ord_from_nat = _ord_from_nat(fam, eta, lam, symmetric, spec)
    fam.steps.append(("ordinary from natural", "solved λ = η(params) block by block"))

    # 2. log-partition
    if fam.A_given:
        fam.A = decl.A
        fam.steps.append(("log-partition", "declared; checked numerically by `blr-derive check`"))
    else:
        if fam.is_discrete:
            fam.A = sum_log_partition(fam, spec)
            fam.steps.append(("log-partition", f"A = log Σ h exp(<λ,T>) over the {support_words(fam)} support "
                                               "(symbolic summation)"))
        else:
            # 1 + erf(a) of a Gaussian kernel over a half line as 2Φ(√2 a), its log as log Φ (normal_cdf_form):
            # finite and accurate far in the tail, where the closed form cancels to log(0)
            fam.A = normal_cdf_form(integrate_log_partition(fam, spec))
            fam.steps.append(("log-partition", f"A = log ∫ h exp(<λ,T>) d{vname} over the {support_words(fam)} "
                                               "support (symbolic integration)"))

    # removable singularities of A inside Ω (0/0 of the closed form where A is analytic): a Taylor polynomial near
    # each (singular.py), so that A, μ and F are finite and accurate at and around it in every target
    guarded = guard_removable(fam, fam.A, spec)
    if guarded is not fam.A:
        fam.A = guarded
        points = "; ".join(f"at {n.args[2]} = {n.args[3]}: for |{sp.sstr(n.args[2] - n.args[3])}| < {n.args[4]} A is its "
                           f"Taylor polynomial of degree {len(n.args[1]) - 1}" for n in sp.preorder_traversal(guarded)
                           if isinstance(n, near_point))
        fam.steps.append(("removable singularity", f"the closed form of A is 0/0 inside Ω ({points}; μ and F are its "
                                                   "derivatives)"))
    # the base measure's sign first: a negative h makes the derived A NaN or complex, and that error would blame A
    check_base_measure(fam, spec)
    if not fam.A_given:
        # a derived A (and its μ, F) must be finite and right at the parameters where closed forms fail: integers,
        # half-integers, ½ on the unit interval, 0 on the line (checked against quadrature/summation)
        validate(fam, fam.A, spec, "summation" if fam.is_discrete else "integration")

    # 3. μ = ∇A(λ)  (Eq. 4)
    try:
        fam.mu_of_lam = matcalc.gradient(fam.A, lam, symmetric)
    except DerivationError as exc:
        raise _err(f"cannot differentiate the log-partition: {exc}", spec, "log_partition" if fam.A_given else "name") from None
    sub = dict(zip(lam, eta))
    fam.mu_ord = [clean(fam.simp(m.xreplace(sub).doit())) for m in fam.mu_of_lam]
    fam.steps.append(("expectation parameters", "μ = ∇_λ A(λ) by matrix differential calculus (Eq. 4)"))

    for i, (dexpr, d, (f, l)) in enumerate(decl.mu_decl or ()):
        if not equal_numeric(fam, dexpr, fam.mu_ord[i]):
            raise SpecError(f"declared expectation parameter {i + 1} ({d}) differs from the derived ∇A = {fam.mu_ord[i]}",
                            f, l)
        fam.mu_ord[i] = fam.simp(dexpr)

    # 4. minimality: the Fisher information must be non-singular (the base measure's sign was checked above: a
    # negative h would otherwise break it first, as a misleading "singular")
    check_minimal(fam, spec)

    # 5. ordinary <- expectation: closed form when sympy finds one, else Newton's method (numeric_ord_from_mu)
    reason = None
    free_syms = [p.symbol for p in fam.free_params if not is_mat(p.symbol)]
    if any(m.has(*_TRANSCENDENTAL) for m in fam.mu_ord if not is_mat(m)) or any(
            is_mat(m) and m.has(sp.Sum) for m in fam.mu_ord):
        reason = "μ(ordinary) involves special functions (e.g. digamma)"
    elif any(not is_mat(m) and not m.is_rational_function(*free_syms) for m in fam.mu_ord):
        # closed forms are only sought for rational maps: sympy's solve can run for very long on
        # transcendental systems (e.g. μ = tanh-like functions of an Ising pair)
        reason = "μ(ordinary) is not a rational function of the parameters"
    else:
        try:
            fam.ord_from_mu = solve(fam.mu_ord, mu, fam.free_params, symmetric, fam, "mu")
        except DerivationError as exc:
            reason = str(exc)
    if reason is None:
        fam.steps.append(("ordinary from expectation", "solved μ = ∇A(λ(params)) block by block"))
    else:
        fam.ord_from_mu = {}
        fam.mu_inverse = "numeric"
        fam.steps.append(("ordinary from expectation",
                          f"no closed form ({reason}): numeric, by Newton's method on A(λ) - <λ, μ> "
                          "(Family.numeric_ord_from_mu)"))
    return fam


def _ord_from_nat(fam, eta, lam, symmetric, spec):
    """The ordinary parameters in λ (λ = η(params) solved), or a located error that says why not."""
    try:
        return {k: defined_inverse(v) for k, v in solve(eta, lam, fam.free_params, symmetric, fam, "nat").items()}
    except DerivationError as exc:
        free = [p for p in fam.free_params if p.shape == "scalar"]
        if len(free) == len(fam.free_params) and not any(is_mat(e) for e in eta) and len(eta) > len(free):
            # more natural parameters than free parameters: λ ranges over a curve, not an open set
            raise _err(f"cannot invert the natural parameters: {len(eta)} natural parameters from {len(free)} free "
                       f"parameter{'s' if len(free) != 1 else ''} ({', '.join(p.name for p in free)}); each needs its "
                       "own degree of freedom: the sufficient statistics are dependent (e.g. log(θ²) = 2 log θ) or a "
                       "parameter is missing", spec, "natural_parameters") from None
        raise _err(f"cannot invert the natural parameters: {exc}", spec, "natural_parameters") from None


#: functions whose presence in μ(ordinary) means sympy will not find a closed-form inverse
_TRANSCENDENTAL = (sp.polygamma, sp.loggamma, sp.gamma, sp.Sum, sp.LambertW, sp.erf, sp.erfc, sp.erfi, sp.hyper,
                   sp.meijerg, sp.besseli, sp.besselk, sp.zeta, sp.Piecewise, sp.uppergamma, sp.lowergamma,
                   sp.Ei, sp.expint, near_point, ndtr, log_ndtr)


def clean(e):
    if is_mat(e):
        return e
    e2 = sp.simplify(e) if sp.count_ops(e) < 60 else e
    return e2


def equal_numeric(fam, a, b, trials=3):
    rng = np.random.default_rng(1234)
    for _ in range(trials):
        vals = fam.sample_params(rng, 2)
        x = np.atleast_1d(fam.evaluate(a, vals, 2))
        y = np.atleast_1d(fam.evaluate(b, vals, 2))
        if x.shape != y.shape or not np.allclose(x, y, rtol=1e-9, atol=1e-9):
            return False
    return True


#: the most support points whose base measure is checked one by one
MAX_SIGN_POINTS = 20000


def check_base_measure(fam: Family, spec):
    """h(θ) ≥ 0 at every point of a finite discrete support (a density needs it; a negative h made the
    log-partition complex or the Fisher information singular, and the error blamed the statistics)."""
    pts = support_points(fam)
    if not pts or len(pts) > MAX_SIGN_POINTS or fam.h.is_number or any(p.shape != "scalar" for p in fam.fixed_params):
        return
    vals = fam.sample_params(np.random.default_rng(7), 2)
    fixed = {p.symbol: sp.Float(float(vals[p.symbol])) for p in fam.fixed_params}
    for pt in pts:
        v = fam.h.xreplace(pt).xreplace(fixed)
        if v.is_number and (v.is_extended_negative or v.is_real is False):
            at = ", ".join(f"{k} = {val}" for k, val in pt.items())
            raise SpecError(f"the base measure is negative at {at} (h = {sp.sstr(sp.N(v, 6))}); h(θ) must be ≥ 0 on "
                            "the support", *where(spec, "base_measure"))


def check_minimal(fam: Family, spec):
    rng = np.random.default_rng(7)
    vals = fam.sample_params(rng, 2)
    lam_vals = {}
    for l, e in zip(fam.lam, fam.eta):
        lam_vals[l] = fam.evaluate(e, vals, 2)
    lam_vals.update({p.symbol: vals[p.symbol] for p in fam.fixed_params})
    try:
        F = numeric_fisher(fam, lam_vals, 2)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        # a complex or undefined value (a log of a negative statistic on this support, a complex log-partition)
        raise SpecError("not a real family: the log-partition or its derivatives are not real numbers at valid "
                        "parameters (check the support against the sufficient statistics and the base measure)",
                        *where(spec, "sufficient_statistics")) from None
    ev = np.linalg.eigvalsh(0.5 * (F + F.T))
    if not np.all(np.isfinite(ev)) or ev.min() <= 1e-9 * max(1.0, abs(ev).max()):
        raise SpecError("not minimal: the Fisher information ∇²A(λ) is singular (sufficient statistics are linearly dependent)",
                   *where(spec, "sufficient_statistics"))
