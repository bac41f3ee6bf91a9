"""The one solver of ∇A(λ) = μ for families whose μ → λ map has no closed form (digamma and the like).

λ minimizes the strictly convex dual φ(λ) = A(λ) − <λ, μ> over the natural-parameter space Ω, so Newton's method
on ∇φ = ∇A(λ) − μ with backtracking (Armijo on φ, steps halved until they stay in Ω) converges from any start in
Ω.  The engine uses :func:`newton_dual` (``blr_derive/families/numeric.py``: round trips, ``blr-derive check``)
and every generated module that needs the map embeds this same function's source
(``codegen/backends/numpy``: ``ordinary_from_expectation``), so the two cannot disagree.  It reads only numpy.
"""
import numpy


def newton_dual(mu, lam, value, grad, hess, in_domain, tol=1e-12, max_iter=200):
    """λ with ∇A(λ) = μ, from a start ``lam`` in Ω: ``value(λ)`` = A(λ), ``grad`` = ∇A, ``hess`` = ∇²A (the Fisher
    information), ``in_domain(λ)`` tells whether λ is in Ω.  Raises ArithmeticError when it does not converge."""
    mu = numpy.asarray(mu, dtype=float)
    lam = numpy.asarray(lam, dtype=float)
    if not in_domain(lam):
        raise ArithmeticError("Newton's method: the starting point is not in the natural-parameter space")
    scale = 1.0 + float(numpy.max(numpy.abs(mu)))
    f = value(lam) - float(lam @ mu)
    for _ in range(max_iter):
        g = grad(lam) - mu
        if numpy.max(numpy.abs(g)) <= tol * scale:
            break
        H = hess(lam)
        try:
            step = numpy.linalg.solve(H, g)
        except numpy.linalg.LinAlgError:
            step = numpy.linalg.lstsq(H, g, rcond=None)[0]
        if not numpy.all(numpy.isfinite(step)) or float(g @ step) <= 0:
            step = g / max(1.0, float(numpy.max(numpy.abs(numpy.diag(H)))))
        t = 1.0
        while t > 1e-14:
            new = lam - t * step
            if in_domain(new):
                f_new = value(new) - float(new @ mu)
                if (f_new <= f - 1e-4 * t * float(g @ step)
                        or numpy.max(numpy.abs(t * step)) <= 1e-15 * (1 + numpy.max(numpy.abs(lam)))
                        # near the solution the decrease of φ (of order |g|²) is below the rounding of A (1e-16 of
                        # |A|): a step that halves the gradient is accepted instead (jax's A rounds differently)
                        or (numpy.max(numpy.abs(g)) <= 1e-6 * scale
                            and numpy.max(numpy.abs(grad(new) - mu)) <= 0.5 * numpy.max(numpy.abs(g)))):
                    break
            t *= 0.5
        else:
            break
        if numpy.max(numpy.abs(new - lam)) <= 1e-16 * (1 + numpy.max(numpy.abs(lam))):
            lam = new
            break
        lam, f = new, f_new
    residual = numpy.max(numpy.abs(grad(lam) - mu))
    if not residual <= max(1e3 * tol, 1e-9) * scale:
        raise ArithmeticError(f"Newton's method did not converge (|∇A(λ) - μ| = {residual:.3g}): is μ inside the "
                              "interior of the expectation-parameter space?")
    return lam
