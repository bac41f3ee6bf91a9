"""``blr-derive check`` for a family: what the engine derives (or takes as declared) for the family against
quadrature, Monte Carlo and finite differences at random valid parameter points (see
``blr_derive/verify/check.py`` for the table of checks)."""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.core.errors import BLRError, DerivationError, SpecError
from blr_derive.families.numeric import MODULES
from blr_derive.spec.sampler import sampler_draws
from blr_derive.verify.draws import draw_matrix_sampler, matrix_t, mixed_t
from blr_derive.verify.hunt import UNSETTLED_NOTE, describe_point, hunt_family, unsettled_reason
from blr_derive.verify.quadrature import FamilyModel, Quadrature, parameter_point
from blr_derive.verify.results import HUNT_TOLERANCES, TOLERANCES, Check


#: the most coordinates the checks integrate numerically: on a 4-D tanh-sinh grid (h = 1/8, 50⁴ nodes) the
#: integrals reach only ~1e-6, above the checks' tolerances (a correct 4-D family failed normalization at 6e-7)
MAX_QUADRATURE_DIM = 3
#: how many further random points are drawn for one whose quadrature did not converge (Quadrature.unsettled)
REDRAWS = 3


def rel_err(got, want):
    got = np.asarray(got, dtype=float)
    want = np.asarray(want, dtype=float).reshape(got.shape)
    return float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want)))) if got.size else 0.0


class Checks(list):
    """The checks of a family, with ``notes`` for the report (what the hunt evaluated)."""
    notes: list = []


def check_family(fam, *, points: int = 3, seed: int = 0, dim: int = 2, mc_samples: int = 20000,
                 hunt: bool = False) -> Checks:
    """Run every numeric check at ``points`` random parameter points and, with ``hunt`` (what ``blr-derive check``
    and ``check_file`` do), at the family's hard points (blr_derive/verify/hunt.py: integer and half-integer
    parameters, boundaries, scales, singular points; the generated numpy and jax modules too); a list of
    :class:`Check`."""
    rng = np.random.default_rng(seed)
    model = FamilyModel(fam, dim)
    outer = model.ndim_u - len(getattr(model, "gaussian_coords", ()))
    if not model.discrete and outer > MAX_QUADRATURE_DIM:
        sized = None if fam.dim else ", ".join(f"{k} = {v}" for k, v in getattr(fam, "sizes", ()) or ())
        at, option = (f"at size {sized}", "--size") if sized else (f"at dimension {dim}", "--dim")
        raise SpecError(f"the numeric checks integrate over at most {MAX_QUADRATURE_DIM} coordinates accurately; "
                        f"family '{fam.name}' {at} has {outer} (use a smaller {option})", getattr(fam, "file", None))
    nf = model.nf
    d = nf.dim
    worst: dict = {}
    notes: dict = {}
    skipped: dict = {}          # check -> why it was not compared at some points (the quadrature's own failure)

    def skip(name, why):
        skipped.setdefault(name, []).append(why)

    def record(name, value, note=""):
        value = float(value) if np.isfinite(value) else float("inf")
        kind = "min" if name == "fisher_positive_definite" else "max"
        old = worst.get(name)
        if old is None or (value > old if kind == "max" else value < old) or not np.isfinite(value):
            worst[name] = value
            if note:
                notes[name] = note

    def guarded(name, fn):
        try:
            fn()
        except (BLRError, ValueError, ArithmeticError, np.linalg.LinAlgError, TypeError) as exc:
            record(name, float("inf"), f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")

    entropy_na = None
    try:
        H_sym = fam.entropy()
    except DerivationError as exc:
        H_sym = None
        if "no closed form" in str(exc):      # E_q[log h] not derivable: the family is not wrong, the check is moot
            entropy_na = ("E_q[log h] has no closed form for this base measure and the engine integrates it "
                          "numerically over one continuous variable only, so the entropy is not derived "
                          "(declare expected_log_base_measure to derive and check it)")
        else:
            record("entropy_vs_quadrature", float("inf"), str(exc).splitlines()[0][:160])

    # the sampler's draws come from a stream of their own, so that the parameter points do not depend on
    # whether (or with how many draws) a family declares a sampler
    sampler_rng = np.random.default_rng([seed, 1])
    with np.errstate(all="ignore"):      # overflow far in the quadrature tails is expected and handled
        for _ in range(points):
            # a point whose quadrature does not converge is no test of the derived forms against it: those checks
            # are skipped there (with the reason) and another point is drawn for them
            for _ in range(1 + REDRAWS):
                if _check_point(fam, model, rng, d, mc_samples, H_sym, record, guarded, sampler_rng, skip):
                    break

    out = Checks()
    out.notes, na = [], {}
    if hunt:
        out.notes, modules = hunt_family(fam, model, dim, H_sym if entropy_na is None else None, record,
                                         np.random.default_rng([seed, 2]))
        na = {f"generated_{m.target}": m.problem for m in modules if m.module is None and m.na}
        if H_sym is None:
            na["hard_entropy"] = entropy_na or "the entropy is not derived (see entropy_vs_quadrature)"
        unsettled_hard = [n for n in out.notes if n.startswith(UNSETTLED_NOTE)]
        for name in HUNT_TOLERANCES:
            if name not in worst and name not in na:
                na[name] = "not compared: no hard point gave a reference value" + (
                    f" ({unsettled_hard[0][len(UNSETTLED_NOTE):]})" if unsettled_hard else "")
    for name, whys in skipped.items():
        if name not in worst and name not in na:
            na[name] = (f"not compared at any of {len(whys)} random points: {whys[0]}" if len(whys) > 1
                        else f"not compared: {whys[0]}")
    if skipped:
        names = ", ".join(skipped)
        whys = list(dict.fromkeys(w for ws in skipped.values() for w in ws))
        out.notes = out.notes + [f"{names} skipped at {len(whys)} random point(s) where the quadrature is no "
                                 f"reference: " + "; ".join(whys)]
    for name, tol in {**TOLERANCES, **(HUNT_TOLERANCES if hunt else {})}.items():
        if name in na:
            out.append(Check(name, float("nan"), tol, "na", na[name]))
            continue
        if name == "entropy_vs_quadrature" and entropy_na is not None:
            out.append(Check(name, float("nan"), tol, "na", entropy_na))
            continue
        if name not in worst:
            continue
        out.append(Check(name, worst[name], tol, "min" if name == "fisher_positive_definite" else "max",
                         notes.get(name, "")))
    return out


def _outside_omega(fam, lam_vals, fixed_vals, vals, d):
    """Where the quadrature of h·exp(<λ,T>) failed at a random point of the declared domains: a note saying that
    λ(ordinary) is outside the natural-parameter space when ∇²A(λ) is not positive definite there (a bivariate
    Gaussian by its precision entries a1, a2 > 0 and r real: r² > a1·a2 is in the domains and is no distribution), or
    None.  The domains of the file cannot say so; a reparameterization whose every value is a distribution can (a
    precision by a Cholesky factor: a1 = l1², r = l1·l21, a2 = l21² + l2²)."""
    try:
        F = fam.fisher_at({**lam_vals, **fixed_vals}, d)
        low = float(np.linalg.eigvalsh(0.5 * (F + F.T)).min())
    except (BLRError, ValueError, ArithmeticError, np.linalg.LinAlgError, TypeError):
        return None
    if low > 0:
        return None
    at = ", ".join(f"{s} = {float(v):.6g}" if np.ndim(v) == 0 else f"{s} = {fmt(np.asarray(v, dtype=float))}"
                   for s, v in vals.items())
    return (f"at {at}: ∇²A(λ) is not positive definite (smallest eigenvalue {low:.3g}): λ(ordinary) is outside the "
            f"natural-parameter space, so the declared parameter domains admit values that are no distribution of "
            f"the family (a joint constraint the domains cannot state); declare parameters whose every value is one, "
            f"e.g. a precision by a Cholesky factor")


def quadrature_checks(fam, model, H_sym) -> list:
    """The checks at a random point that compare with the density by quadrature (its samples included)."""
    names = ["normalization", "mu_vs_quadrature", "mu_vs_monte_carlo", "fisher_vs_covariance"]
    if H_sym is not None:
        names.append("entropy_vs_quadrature")
    gaussian = fam.is_gaussian and fam.variable_kind in ("scalar", "vector") and len(fam.components) <= 1
    if gaussian:
        names.append("gaussian_vs_density")
    if fam.sampler is not None or gaussian:
        names.append("sampler_vs_density")
        if ks_applies(fam, model):
            names.append("sampler_ks")
    return names


def _check_point(fam, model, rng, d, mc_samples, H_sym, record, guarded, sampler_rng, skip=None) -> bool:
    """All checks at one random parameter point; ``record`` keeps the worst value of each.  Where the quadrature
    does not converge there (``Quadrature.unsettled``), the checks against it are not made: ``skip(name, why)``
    is told why, and the result is False (the checks of the derived forms alone are made all the same)."""
    nf = model.nf
    vals = fam.sample_params(rng, d or 2)
    fixed_vals, lam_vals, c, A, mu_c = parameter_point(fam, nf, vals, d)
    quad = None
    outside = None
    off = []                     # the checks against the quadrature that are not made here: it did not converge
    try:
        quad = Quadrature(model, c, fixed_vals, A)
        if quad.unsettled and skip is not None:
            why = unsettled_reason(quad, describe_point(fam, vals))
            off = quadrature_checks(fam, model, H_sym)
            for n in off:
                skip(n, why)
            quad = None              # the checks below compare with it only where it is a reference
    except (BLRError, ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
        why = f"quadrature failed: {exc}"
        outside = _outside_omega(fam, lam_vals, fixed_vals, vals, d)
        if outside is not None:
            why = f"{why}; {outside}"
        for n in ("normalization", "mu_vs_quadrature", "fisher_vs_covariance", "entropy_vs_quadrature",
                  "mu_vs_monte_carlo"):
            record(n, float("inf"), why)

    if quad is not None:
        Zr = quad.normalization
        record("normalization", abs(Zr - 1.0), f"∫ h exp(<λ,T> - A) = {Zr:.6g}")
        record("mu_vs_quadrature", rel_err(mu_c, quad.mean), f"∇A = {fmt(mu_c)}, E_q[T] = {fmt(quad.mean)}")

        def mc():
            S = quad.sample(rng, mc_samples)
            est = S.mean(axis=0)
            se = S.std(axis=0, ddof=1) / np.sqrt(len(S))
            z = np.abs(est - mu_c) / np.where(se > 0, se, np.inf)
            z = np.where((se == 0) & (np.abs(est - mu_c) > 1e-12 * (1 + np.abs(mu_c))), np.inf, z)
            record("mu_vs_monte_carlo", float(np.max(z)), f"∇A = {fmt(mu_c)}, MC mean = {fmt(est)}")
        guarded("mu_vs_monte_carlo", mc)
        _sampler_checks(fam, model, vals, d, quad, sampler_rng, mc_samples, record, guarded)

    def fd():
        g = np.zeros_like(c)
        for k in range(len(c)):
            eps = 1e-5 * max(1.0, abs(c[k]))
            e = np.zeros_like(c)
            e[k] = eps
            g[k] = (nf.A(c + e, fixed_vals) - nf.A(c - e, fixed_vals)) / (2 * eps)
        record("mu_vs_finite_differences", rel_err(g, mu_c), f"∇A = {fmt(mu_c)}, FD = {fmt(g)}")
    guarded("mu_vs_finite_differences", fd)

    def mu_ord():
        got = nf.coords_of({u: fam.evaluate(m, vals, d) for u, m in zip(fam.mu, fam.mu_ord)})
        record("mu_ordinary", rel_err(got, mu_c), f"μ(ordinary) = {fmt(got)}, ∇A = {fmt(mu_c)}")
    guarded("mu_ordinary", mu_ord)

    def fisher():
        F = fam.fisher_at({**lam_vals, **fixed_vals}, d)
        ev = np.linalg.eigvalsh(0.5 * (F + F.T))
        record("fisher_positive_definite", ev.min() / max(abs(ev).max(), 1e-300),
               f"eigenvalues {fmt(ev)}" + (f"; {outside}" if outside is not None else ""))
        if quad is not None:
            record("fisher_vs_covariance", rel_err(F, quad.cov), f"max |F - Cov| = {np.max(np.abs(F - quad.cov)):.3g}")
    guarded("fisher_positive_definite", fisher)

    if H_sym is not None and quad is not None:
        def entropy():
            H = fam.evaluate(H_sym, vals, d)
            record("entropy_vs_quadrature", rel_err(H, quad.entropy), f"H = {H:.10g}, -∫ q log q = {quad.entropy:.10g}")
        guarded("entropy_vs_quadrature", entropy)

    def rt_nat():
        errs = [rel_err(np.asarray(fam.evaluate(e, {**lam_vals, **fixed_vals}, d)).reshape(np.shape(vals[s]) or ()),
                     vals[s]) for s, e in fam.ord_from_nat.items()]
        record("round_trip_natural", max(errs))
    guarded("round_trip_natural", rt_nat)

    def rt_mu():
        mvals = {u: fam.evaluate(m, vals, d) for u, m in zip(fam.mu, fam.mu_ord)}
        if fam.mu_inverse == "numeric":
            back = fam.numeric_ord_from_mu({**mvals, **fixed_vals}, d)
        else:
            back = {s: fam.evaluate(e, {**mvals, **fixed_vals}, d) for s, e in fam.ord_from_mu.items()}
        errs = [rel_err(np.asarray(back[p.symbol]).reshape(np.shape(vals[p.symbol]) or ()), vals[p.symbol])
                for p in fam.free_params]
        err = max(errs)
        if fam.mu_inverse == "numeric" and err > TOLERANCES["round_trip_expectation"]:
            err, note = _ill_conditioned_round_trip(fam, vals, back, mvals, fixed_vals, lam_vals, d, err)
            record("round_trip_expectation", err, note)
            return
        record("round_trip_expectation", err)
    guarded("round_trip_expectation", rt_mu)
    return not off


def _ill_conditioned_round_trip(fam, vals, back, mvals, fixed_vals, lam_vals, d, err):
    """A numeric μ → ordinary round trip whose parameters came back off by ``err`` (above the tolerance), judged by
    what μ determines in float64: λ moves by F(λ)⁻¹δμ (Eq. 4: F = ∂μ/∂λ) when μ moves by its rounding δμ (a few
    units in the last place of each μ_i), which is far above 1e-8 of λ where F is ill-conditioned or μ sits next to
    the boundary of its space (a 12-point support with statistics k and log k at tilt r = 6: condition number 6.5e6,
    parameters off by 1.7e-6 with μ reproduced to 2e-16).  When the solved parameters reproduce μ to 1e-12 and
    their λ is within 16 such roundings of the true λ (each coordinate), the value is μ's round-trip error with a
    note; otherwise ``err`` stands (a solver that stopped short, a wrong inverse)."""
    free = {p.symbol: back[p.symbol] for p in fam.free_params}
    at = {**vals, **free}
    again = [fam.evaluate(m, at, d) for m in fam.mu_ord]
    mu_err = max(rel_err(np.asarray(a, dtype=float), np.asarray(mvals[u], dtype=float))
                 for a, u in zip(again, fam.mu))
    lam = np.array([float(np.asarray(lam_vals[l], dtype=float)) for l in fam.lam]) \
        if all(np.ndim(lam_vals[l]) == 0 for l in fam.lam) else None
    if lam is None or not mu_err <= 1e-12:
        return err, f"parameters back to {err:.2g}; μ reproduced to {mu_err:.2g}"
    lam_back = np.array([float(np.asarray(fam.evaluate(e, at, d), dtype=float)) for e in fam.eta])
    F = np.atleast_2d(np.asarray(fam.fisher_at({**lam_vals, **fixed_vals}, d), dtype=float))
    mu = np.array([float(np.asarray(mvals[u], dtype=float)) for u in fam.mu])
    try:
        moves = np.abs(np.linalg.inv(F)) @ (np.finfo(float).eps * np.maximum(np.abs(mu), np.finfo(float).tiny))
    except np.linalg.LinAlgError:
        return err, f"parameters back to {err:.2g}; μ reproduced to {mu_err:.2g}, F(λ) singular"
    off = np.abs(lam_back - lam)
    if np.all(np.isfinite(moves)) and np.all(off <= 16 * moves + 1e-8 * np.maximum(1.0, np.abs(lam))):
        return mu_err, (f"parameters back to {err:.2g}, as far as μ's rounding determines them (λ off by "
                        f"{fmt(off)}, μ's rounding moves it by {fmt(moves)}); μ reproduced to {mu_err:.2g}")
    return err, (f"parameters back to {err:.2g} (λ off by {fmt(off)}, μ's rounding moves it by {fmt(moves)}); μ "
                 f"reproduced to {mu_err:.2g}")


def fmt(v):
    v = np.atleast_1d(np.asarray(v, dtype=float)).ravel()
    s = ", ".join(f"{x:.6g}" for x in v[:6])
    return f"[{s}{', ...' if v.size > 6 else ''}]"


def describe(fam):
    how = "declared" if fam.A_given else next((h for w, h in fam.steps if w == "log-partition"), "derived")
    inv = "numeric (Newton's method)" if fam.mu_inverse == "numeric" else "closed form"
    # what the engine did to keep a derived A finite (a Taylor polynomial near a removable singularity) and where its
    # closed form stops being finite in float64 (blr_derive/families/singular.py, soundness.py)
    notes = [f"{what}: {how}" for what, how in fam.steps if what in ("removable singularity", "numerical range")]
    return [f"A(λ): {how}", f"μ → ordinary: {inv}", f"E_q[log h] (entropy): {fam.expect_log_h_method}"] + notes


def _sampler_checks(fam, model, vals, d, quad, rng, n, record, guarded):
    """The declared sampler's moments of T and (continuous scalar variables) its law, against the density, both
    from the same n draws; a gaussian declaration's moments and draws (:func:`_gaussian_checks`)."""
    if fam.is_gaussian:
        _gaussian_checks(fam, model, vals, d, quad, rng, n, record, guarded)
    if fam.sampler is None:
        return
    if fam.variable_kind == "matrix":
        guarded("sampler_vs_density", lambda: _moment_z(
            list(matrix_t(model, draw_matrix_sampler(fam, vals, rng, n, d), quad)), quad, record,
            "draws of the declared matrix sampler"))
        return
    if fam.variable_kind == "mixed":
        guarded("sampler_vs_density", lambda: _moment_z(
            list(mixed_t(model, draw_matrix_sampler(fam, vals, rng, n, d), quad)), quad, record,
            "draws of the declared sampler"))
        return
    drawn = []

    def theta():
        if not drawn:
            drawn.append(_draw_sampler(fam, vals, rng, n))
        return drawn[0]
    guarded("sampler_vs_density", lambda: sampler_moments(fam, theta(), quad, record))
    if ks_applies(fam, model):
        guarded("sampler_ks", lambda: sampler_ks(theta(), quad, record))


#: a rejection sampler gives up after this many rounds of drawing again the rejected ones
MAX_REJECTION_ROUNDS = 1000


def _draw_sampler(fam, vals, rng, n):
    """n values of the declared sampler θ(u, …, z, …) (independent u ~ U(0, 1), z ~ N(0, 1)) at ``vals``; a
    rejection sampler draws every draw again where its acceptance condition fails, until all n are accepted (at
    most MAX_REJECTION_ROUNDS rounds; the values not accepted by then are NaN, which fails the sampler checks)."""
    accept = fam.sampler_accept
    draws = sampler_draws(fam.sampler, accept)
    syms = {d for d, _ in draws}
    free = fam.sampler.free_symbols | (accept.free_symbols if accept is not None else set())
    params = sorted((s for s in free if s not in syms), key=str)
    args = [*[d for d, _ in draws], *params]
    f = sp.lambdify(args, fam.sampler, modules=MODULES)
    pvals = [vals[p] for p in params]

    several = isinstance(fam.sampler, sp.Tuple)      # one value per component (a list in the declaration)

    def draw(m):
        return [rng.random(m) if law == "uniform" else rng.standard_normal(m) for _, law in draws]

    def value(eps, m):
        v = f(*eps, *pvals)
        if several:
            return np.array([np.asarray(x, dtype=float) * np.ones(m) for x in v])
        return np.asarray(v, dtype=float) * np.ones(m)
    if accept is None:
        return value(draw(n), n)
    ok_of = sp.lambdify(args, accept, modules=MODULES)
    out = np.full((len(fam.sampler), n) if several else n, np.nan)
    todo = np.arange(n)
    for _ in range(MAX_REJECTION_ROUNDS):
        eps = draw(len(todo))
        with np.errstate(all="ignore"):
            ok = np.asarray(ok_of(*eps, *pvals), dtype=bool) * np.ones(len(todo), dtype=bool)
            vals_ = value(eps, len(todo))
        out[..., todo[ok]] = vals_[..., ok]
        todo = todo[~ok]
        if not len(todo):
            break
    return out


def ks_applies(fam, model):
    """The Kolmogorov-Smirnov check needs a continuous scalar variable (one quadrature coordinate, in which the
    nodes are in increasing order of θ)."""
    return (not model.discrete and fam.variable_kind == "scalar" and model.ndim_u == 1
            and len(fam.components) == 1)


def sampler_ks(theta, quad, record):
    """Draws ``theta`` of the declared sampler against the density's CDF: Kolmogorov's statistic √n·sup|F_n − F|
    with F the cumulative quadrature weights at the nodes (each node's cell counted half below it), linearly
    interpolated.
    The nodes are spaced ~0.05 standard deviations apart, so F is accurate to ~1e-4, far below the statistic's
    resolution 1/√n; a sampler with the right moments of T but the wrong law (a log-normal for an exponential
    with the same mean and variance) fails here."""
    n = len(theta)
    if not np.all(np.isfinite(theta)):
        record("sampler_ks", float("inf"), "the sampler gave non-finite values")
        return
    x = np.asarray(quad.entries[0], dtype=float) * np.ones(len(quad.p))
    p = quad.p / quad.p.sum()
    ok = np.isfinite(x)
    x, p = x[ok], p[ok]
    cdf = np.cumsum(p) - p / 2
    x = np.maximum.accumulate(x)
    theta = np.sort(theta)
    F = np.interp(theta, x, cdf, left=0.0, right=1.0)
    i = np.arange(1, n + 1)
    D = max(float(np.max(i / n - F)), float(np.max(F - (i - 1) / n)))
    record("sampler_ks", np.sqrt(n) * D, f"{n} draws of the declared sampler, sup|F_n - F| = {D:.3g}")


def _gaussian_checks(fam, model, vals, d, quad, rng, n, record, guarded):
    """A family with a ``gaussian: {mean, covariance}`` declaration and no sampler of its own is sampled through
    the declaration, θ = mean + chol(covariance)·z with z ~ N(0, I) (what the reparameterization and
    Monte Carlo rules draw): the declared mean and covariance against the density's moments of θ by quadrature
    (``gaussian_vs_density``), and draws of θ against the density's moments of T (``sampler_vs_density``) and,
    for one coordinate, its CDF (``sampler_ks``).  A declaration with the wrong covariance (S for S⁻¹) fails."""
    if fam.variable_kind not in ("scalar", "vector") or len(fam.components) > 1:
        return
    mean = np.atleast_1d(np.asarray(fam.evaluate(fam.gaussian_mean, vals, d), dtype=float)).ravel()
    cov = np.atleast_2d(np.asarray(fam.evaluate(fam.gaussian_cov, vals, d), dtype=float))
    if cov.shape != (len(mean), len(mean)):
        cov = cov * np.eye(len(mean)) if cov.size == 1 else cov
    theta_q = np.array([np.broadcast_to(np.asarray(e, dtype=float), quad.p.shape) for e in quad.entries])
    p = quad.p / quad.p.sum()

    def moments():
        m_q = theta_q @ p
        dev = theta_q - m_q[:, None]
        cov_q = (dev * p) @ dev.T
        record("gaussian_vs_density", max(rel_err(mean, m_q), rel_err(cov, cov_q)),
               f"declared mean {fmt(mean)}, covariance {fmt(cov)}; density's {fmt(m_q)}, {fmt(cov_q)}")
    guarded("gaussian_vs_density", moments)

    if fam.sampler is not None:
        return                       # the family's own sampler is checked instead
    drawn = []

    def theta():
        if not drawn:
            L = np.linalg.cholesky(0.5 * (cov + cov.T))
            drawn.append(mean[:, None] + L @ rng.standard_normal((len(mean), n)))
        return drawn[0]

    def t_of_draws():
        _, t = model.evaluate(list(theta()), [], quad.fixed_vals)
        return t
    guarded("sampler_vs_density", lambda: _moment_z(t_of_draws(), quad, record,
                                                    "draws mean + chol(covariance) z of the gaussian declaration"))
    if ks_applies(fam, model):
        guarded("sampler_ks", lambda: sampler_ks(theta()[0], quad, record))


def sampler_moments(fam, theta, quad, record):
    """Draws ``theta`` of the declared sampler against the density: z-scores of the sample means of T_i and
    T_i T_j against E_q[T] and E_q[T Tᵀ] by quadrature (a sampler of the wrong law, scale or location fails;
    every moment of T exists inside Ω)."""
    several = isinstance(fam.sampler, sp.Tuple)
    n = theta.shape[-1]
    args, vals = (list(fam.components), list(theta)) if several else ([fam.theta], [theta])
    ts = [np.asarray(sp.lambdify(args, t, modules=MODULES)(*vals), dtype=float) * np.ones(n) for t in fam.T]
    _moment_z(ts, quad, record, "draws of the declared sampler")


def _moment_z(ts, quad, record, what):
    """z-scores of the sample means of T_i and T_i T_j (``ts``: one array of n values per coordinate of T)
    against E_q[T] and E_q[T Tᵀ] by quadrature; the worst is recorded as ``sampler_vs_density``."""
    n = len(ts[0])
    second = quad.cov + np.outer(quad.mean, quad.mean)
    samples = [(t, quad.mean[i]) for i, t in enumerate(ts)]
    samples += [(ts[i] * ts[j], second[i, j]) for i in range(len(ts)) for j in range(i, len(ts))]
    worst = 0.0
    for x, want in samples:
        if not np.all(np.isfinite(x)):
            worst = float("inf")
            break
        # the standard error, with the quadrature's own accuracy (1e-7 relative, as mu_vs_quadrature) added:
        # a product that is constant (θ·(1/θ) = 1) has no sampling error but the quadrature still has its own
        se = np.hypot(x.std(ddof=1) / np.sqrt(n), TOLERANCES["mu_vs_quadrature"] * (1 + abs(want)))
        z = abs(x.mean() - want) / se
        worst = max(worst, float(z))
    record("sampler_vs_density", worst, f"{n} {what}, E[T] = {fmt(quad.mean)}")