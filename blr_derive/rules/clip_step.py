"""Clip the preconditioned mean step elementwise to [-radius, radius] (IVON's clip_radius)."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import mean_direction, record, set_update, update_of


class ClipStep(Rule):
    name = 'clip_step'
    kind = 'convention'
    equation = 'IVON convention'
    summary = 'clip the preconditioned mean step elementwise'

    def rewrite(self, ctx):
        D = ctx.D
        radius = ctx.expr("radius")
        ctx.done()
        rho, mean, m, d = mean_direction(ctx)
        sym, _ = update_of(D, mean)
        clipped = sp.Min(sp.Max(d, -radius), radius)
        set_update(D, mean, m - rho * clipped)
        record(ctx, "Clipped step", "", [(sym, m - rho * clipped, r"\leftarrow")])


register(ClipStep())
