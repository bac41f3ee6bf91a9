"""The one solver of ∇A(λ) = μ for families whose μ → λ map has no closed form (digamma and the like).

λ minimizes the strictly convex dual φ(λ) = A(λ) − <λ, μ> over the natural-parameter space Ω, so a descent method
on φ that keeps λ in Ω converges from any start in Ω: Newton's method on ∇φ = ∇A(λ) − μ, damped (Levenberg–Marquardt,
with a trust region per coordinate) where F = ∇²A is nearly singular or Ω's boundary is near (Nocedal & Wright,
Numerical Optimization, ch. 4 and 10.3).  −φ is the objective of the Legendre transform A*(μ) = sup_λ' <μ, λ'> −
A(λ') of Khan & Rue 2023, Sec. 2 (the duality μ = ∇A(λ), eq. 4), whose maximizer is the λ of μ.  The engine uses
:func:`newton_dual` (``blr_derive/families/numeric.py``: round trips, ``blr-derive check``) and every generated
module that needs the map embeds this same function's source (``codegen/backends/numpy``:
``ordinary_from_expectation``), so the two cannot disagree.  It reads only numpy.
"""
import numpy


def _newton_polish(lam, g, gradient, hess, in_domain, bound):
    """λ after full Newton steps from a converged one (|∇φ| ≤ ``bound``), each kept only while it lowers |∇φ| (at
    most 64): the stopping test is absolute, and leaves λ off by up to κ(F)·bound, far from what μ determines where
    F is ill-conditioned (a 12-point support with statistics k, log k at r = 10: κ = 3.6e8, r off by 23 % at
    |∇φ| = 7e-12; two more steps: 4e-8) or where μ is far below the bound (T = θ⁻³ of a Fréchet at μ = 1e-15: the
    test holds at λ = −1e12 for the solution −1e15; Newton's steps double λ to it, ten of them)."""
    gmax = float(numpy.max(numpy.abs(g)))
    if not gmax <= bound:
        return lam
    for _ in range(64):
        try:
            H = numpy.asarray(hess(lam), dtype=float)
            new = lam - numpy.linalg.solve(0.5 * (H + H.T), g)
        except (ArithmeticError, ValueError, numpy.linalg.LinAlgError):
            break
        if not (numpy.all(numpy.isfinite(new)) and in_domain(new)):
            break
        g_new = gradient(new)
        g_max = float(numpy.max(numpy.abs(g_new)))
        if not g_max < gmax:
            break
        lam, g, gmax = new, g_new, g_max
    return lam


def newton_dual(mu, lam, value, grad, hess, in_domain, tol=1e-12, max_iter=200):
    """λ with ∇A(λ) = μ, from a start ``lam`` in Ω: ``value(λ)`` = A(λ), ``grad`` = ∇A, ``hess`` = ∇²A (the Fisher
    information), ``in_domain(λ)`` tells whether λ is in Ω.  Raises ArithmeticError when it does not converge.

    Levenberg–Marquardt on φ(λ) = A(λ) − <λ, μ>: the step s solves (F + diag(ν D)) s = ∇φ with D = diag F (floored)
    and ν ≥ 0 per coordinate, adapted by the ratio of the actual to the predicted decrease of φ (ν = 0 is Newton's
    step), and is scaled into a trust region, a bound on each coordinate's move, at first 1 + |λ|∞ (one step from a
    nearly singular start cannot land on a point mass where F vanishes).  A step that does not decrease φ is refused,
    ν raised and the region halved for all coordinates; one that leaves Ω (or where A, ∇A or F are not finite), for
    the coordinates whose own move leaves it, so that a boundary one coordinate runs into does not stop the others.
    Where the decrease of φ is below the rounding of A (1e-16 of |A|), a step that lowers |∇φ| is accepted instead.
    The budget of max_iter steps is extended (to 10 max_iter) while φ keeps decreasing."""
    mu = numpy.asarray(mu, dtype=float)
    lam = numpy.asarray(lam, dtype=float)
    if not in_domain(lam):
        raise ArithmeticError("Newton's method: the starting point is not in the natural-parameter space")
    scale = 1.0 + float(numpy.max(numpy.abs(mu)))
    eye = numpy.eye(lam.size)

    def phi(x):
        try:
            v = float(value(x))
        except (ArithmeticError, ValueError):      # an overflow of the printed A: no value there
            return numpy.nan, numpy.nan
        return v - float(x @ mu), abs(v) + abs(float(x @ mu))

    def gradient(x):
        try:
            return numpy.asarray(grad(x), dtype=float) - mu
        except (ArithmeticError, ValueError):
            return numpy.full(mu.shape, numpy.nan)

    f, size = phi(lam)
    g = gradient(lam)
    nu, limit, it, f_mark = numpy.zeros(lam.size), max_iter, 0, f
    while True:
        gmax = float(numpy.max(numpy.abs(g)))
        if gmax <= tol * scale or not numpy.isfinite(gmax):
            break
        if it >= limit:
            # more steps while φ still decreases by more than its rounding
            if limit >= 10 * max_iter or not f < f_mark - 1e-13 * (1 + size):
                break
            limit, f_mark = limit + max_iter, f
        it += 1
        try:
            H = numpy.asarray(hess(lam), dtype=float)
        except (ArithmeticError, ValueError):      # F overflows here: the scaled gradient step below
            H = numpy.full((lam.size, lam.size), numpy.nan)
        H = 0.5 * (H + H.T)
        d = numpy.abs(numpy.diag(H))
        dmax = float(numpy.max(d)) if numpy.all(numpy.isfinite(d)) else 0.0
        d = numpy.maximum(d, 1e-12 * dmax) if dmax > 0 else numpy.ones_like(d)
        # the trust region, a bound on each coordinate's move: at first 1 + |λ|∞ for all
        cap = numpy.full(lam.size, 1.0 + float(numpy.max(numpy.abs(lam))))
        ok = False
        while True:
            try:
                if not numpy.all(numpy.isfinite(H)):
                    raise numpy.linalg.LinAlgError
                K = H + numpy.diag(nu * d)
                numpy.linalg.cholesky(K)
                step = numpy.linalg.solve(K, g)
                if not numpy.all(numpy.isfinite(step)):
                    raise numpy.linalg.LinAlgError
            except numpy.linalg.LinAlgError:
                if numpy.min(nu) > 1e30 or not numpy.all(numpy.isfinite(H)):   # no usable F: a gradient step
                    H = numpy.zeros_like(H)
                    step = g / (d * numpy.maximum(nu, 1.0))
                else:
                    nu = numpy.maximum(4.0 * nu, 1e-6)
                    continue
            big = float(numpy.max(numpy.abs(step) / cap))
            if big > 1.0:
                step = step / big
            if numpy.all(lam - step == lam):
                break                        # the step no longer moves λ: stalled (or converged in rounding)
            new = lam - step
            pred = float(g @ step) - 0.5 * float(step @ H @ step)
            ok = False
            raise_ = numpy.ones(lam.size, dtype=bool)
            if not in_domain(new):
                # damped more: the coordinates whose own move leaves Ω (all, where none alone does), so that a
                # boundary one coordinate runs into does not shorten the steps of the others
                alone = numpy.array([not in_domain(lam - step[i] * eye[i]) for i in range(lam.size)])
                if alone.any():
                    raise_ = alone
            else:
                f_new, size_new = phi(new)
                if numpy.isfinite(f_new):
                    if f_new <= f - 1e-4 * pred:
                        ok, rho = True, (f - f_new) / pred if pred > 0 else 1.0
                    elif pred <= 1e-13 * (1 + size) or gmax <= 1e-6 * scale:
                        # φ's decrease is below its rounding: accept a step that lowers the gradient
                        if float(numpy.max(numpy.abs(gradient(new)))) <= (0.5 if not nu.any() else 1.0) * gmax:
                            ok, rho = True, 1.0
                    if ok:
                        g_new = gradient(new)
                        ok = bool(numpy.all(numpy.isfinite(g_new)))
            if ok:
                nu = nu * 0.1 if rho > 0.75 else (nu if rho > 0.25 else numpy.maximum(2.0 * nu, 1e-6))
                nu[nu < 1e-4] = 0.0          # Newton's step again (quadratic convergence near the solution)
                break
            nu = numpy.where(raise_, numpy.maximum(4.0 * nu, 1e-6), nu)
            # and the trust region halved: for the coordinates whose own move leaves Ω, each to half its move, else
            # (φ did not decrease, or no coordinate alone leaves Ω) all to half the largest move
            cap = numpy.where(raise_, 0.5 * (numpy.abs(step) if not raise_.all() else numpy.max(numpy.abs(step))), cap)
            if numpy.max(nu) > 1e40:
                break
        if not ok:
            break
        lam, f, size, g = new, f_new, size_new, g_new
    lam = _newton_polish(lam, g, gradient, hess, in_domain, tol * scale)
    residual = numpy.max(numpy.abs(gradient(lam)))
    if not residual <= max(1e3 * tol, 1e-9) * scale:
        raise ArithmeticError(f"Newton's method did not converge (|∇A(λ) - μ| = {residual:.3g}): is μ inside the "
                              "interior of the expectation-parameter space?")
    return lam
