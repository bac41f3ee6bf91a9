"""Precondition with sqrt(s) + eps instead of s (Eq. 38)."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import record, substitute_def


class SquareRootScaling(Rule):
    name = 'square_root_scaling'
    kind = 'pass'
    equation = 'Eq. 38'
    summary = 'precondition with sqrt(s) + eps'

    def rewrite(self, ctx):
        D = ctx.D
        p = ctx.name("param")
        eps = ctx.expr("eps", sp.Integer(0))
        ctx.done()
        v = ctx.view(p)
        r = substitute_def(D, f"{p}_root", v, sp.sqrt(v) + eps, skip=(p,))
        D.views.set(p, r)
        record(ctx, "Square-root scaling", f"{p} enters the other updates as √{p} + ε (Eq. 38; ε outside the root, "
                "as RMSprop and Adam do).", [(r, sp.sqrt(v) + eps)])


register(SquareRootScaling())
