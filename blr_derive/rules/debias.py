"""Adam's bias correction x / (1 - rate^t) of an EMA started at zero (a convention, not a BLR consequence).

Optional ``power`` p: x / (1 - rate^t)^p, e.g. 1/2 for the square root of an average (√s + ε corrected as a whole,
the step size √(1 - β₂ᵗ) of Adam's "efficient" form, Kingma & Ba 2015 Sec. 2)."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import cond, rebind, record, step, substitute_def


class Debias(Rule):
    name = 'debias'
    kind = 'convention'
    equation = 'Adam convention'
    summary = 'bias correction x / (1 - rate^t) of zero-initialised averages'

    def rewrite(self, ctx):
        D = ctx.D
        p = ctx.name("param")
        rate = ctx.expr("rate")
        power = ctx.positive("power", sp.Integer(1))
        t = step(D)
        v = ctx.view(p)
        when = ctx.when()
        ctx.done()
        readers = [e for n, _, e in D.updates if n != p] + [e for _, e in D.defs]
        if not any(getattr(e, "has", lambda _: False)(v) for e in readers):
            # nothing else reads it (e.g. the mean, whose update is the step itself): the correction would change
            # nothing, and a silently ignored approximation is worse than a refusal
            raise ctx.fail(f"no other update reads '{p}', so there is nothing to correct: debias applies to a "
                           "zero-initialised average that the update reads (e.g. the momentum of ema_momentum)")
        h = substitute_def(D, f"{p}_hat", v, cond(when, v / (1 - rate**t)**power, v), skip=(p,))
        rebind(D, v, h)
        record(ctx, "Bias correction", "Divide the zero-initialised average by 1 − rate^t (Adam's convention)"
               + ("." if power == 1 else f", to the power {power} (the correction of a root of the average)."),
               [(h, v / (1 - rate**t)**power)])


register(Debias())
