"""Heavy-ball momentum on the mean step (Eq. 75; Eq. 80 for a fixed-covariance Gaussian), in buffer form
b ← γb + (1-d)·direction, m ← m - ρ·b.  dampening d, Nesterov's look-ahead and starting the buffer at
the first direction are torch.optim conventions."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import add_aux, cond, mean_direction, record, set_update, step


class HeavyBallMomentum(Rule):
    name = 'heavy_ball_momentum'
    kind = 'pass'
    equation = 'Eqs. 75, 80'
    summary = 'heavy-ball momentum on the mean step (buffer form)'

    def rewrite(self, ctx):
        D = ctx.D
        gamma = ctx.expr("momentum")
        damp = ctx.expr("dampening", sp.Integer(0))
        nesterov = ctx.expr("nesterov", sp.false, logic=True) if "nesterov" in ctx.args else sp.false
        when = ctx.when()
        name = ctx.name("state", "momentum_buffer")
        ctx.done()
        rho, mean, m, d = mean_direction(ctx)
        t = step(D)
        b, b_new = add_aux(ctx, name, sp.Integer(0), "momentum buffer")
        b_rule = sp.Piecewise((d, sp.Eq(t, 1)), (gamma * b + (1 - damp) * d, True))
        D.updates.insert(0, (name, b_new, cond(when, b_rule, b)))
        step_dir = sp.Piecewise((d + gamma * b_new, nesterov), (b_new, True)) if nesterov != sp.false else b_new
        set_update(D, mean, cond(when, m - rho * step_dir, m - rho * d))
        record(ctx, "Heavy-ball momentum", "Momentum on the mean step (Eq. 75; the BLR with momentum, Eq. 80, "
                "reduces to it for a fixed covariance).", [(b_new, b_rule, r"\leftarrow")])


register(HeavyBallMomentum())
