"""ε inside the square root: precondition with √(s + ε) instead of √s + ε (optax's RMSprop and Adagrad convention).

optax's ``scale_by_rms`` (``optax.rmsprop``, default ``eps_in_sqrt=True``), ``scale_by_stddev`` (centered) and
``scale_by_rss`` (``optax.adagrad``) scale the gradient by ``rsqrt(s + eps)``: ε regularises the scale before
the root, as in Tieleman & Hinton's RMSprop (2012) and the diag(εI + G)^{-1/2} of Duchi et al. (2011, Sec. 1);
torch.optim and Adam add ε after it (``square_root_scaling: {eps}``).  The rule adds ε to the scale where the
later rules read it; the ``square_root_scaling`` of the same parameter, which the recipe must name after it,
then takes the root of s + ε.  Placed after ``centered`` it gives optax's centered √(s − ū² + ε).

optax's Adagrad also writes ``where(s > 0, rsqrt(s + eps), 0)``.  That guard is not part of this convention:
the sum s includes the current ĝ², so s = 0 only where ĝ = 0, and then both forms give a zero step for any
ε > 0; they differ only at ε = 0 on an all-zero coordinate (optax 0, this rule 0/0).
"""
from __future__ import annotations

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import cond, record, substitute_def


class EpsInsideSqrt(Rule):
    name = 'eps_inside_sqrt'
    kind = 'convention'
    equation = ('optax convention (scale_by_rms eps_in_sqrt=True, scale_by_rss); Tieleman & Hinton (2012); '
                'Duchi et al. (2011)')
    summary = 'precondition with sqrt(s + eps): eps added to the scale before square_root_scaling takes its root'

    def rewrite(self, ctx):
        D = ctx.D
        p = ctx.name("param")
        eps = ctx.expr("eps")
        when = ctx.when()
        ctx.done()
        approx = ctx.r.approximations
        later = approx[next(i for i, a in enumerate(approx) if a is ctx.approx) + 1:]
        if not any(a.name == "square_root_scaling" and dict(a.args).get("param") == p for a in later):
            raise ctx.fail(f"ε goes inside a square root: name 'square_root_scaling: {{param: {p}}}' after it")
        v = ctx.view(p)
        r = substitute_def(D, f"{p}_eps", v, cond(when, v + eps, v), skip=(p,))
        D.views.set(p, r)
        record(ctx, "ε inside the square root", f"{p} enters the square-root scaling as {p} + ε, so the "
               f"preconditioner is √({p} + ε) (optax's RMSprop and Adagrad; a peer's convention).",
               [(r, cond(when, v + eps, v))])


register(EpsInsideSqrt())
