"""Improved BLR (Lin et al. 2020, used by IVON): s ← (1−ρ)s + ρT + ρ²(s − T)²/(2s) keeps s > 0."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import record, set_update, update_of


class RiemannianCorrection(Rule):
    name = 'riemannian_correction'
    kind = 'pass'
    equation = 'improved BLR (Lin et al. 2020; IVON)'
    summary = 's <- (1-rho)s + rho*T + rho^2 (s - T)^2 / (2s): keeps the precision positive'

    def rewrite(self, ctx):
        D = ctx.D
        p = ctx.name("param")
        ctx.done()
        rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
        fam = D.recipe.family
        if p not in fam.params:
            raise ctx.fail(f"'{p}' is not a parameter of family '{fam.name}'")
        sym, expr = update_of(D, p)
        s_old = fam.params[p].symbol
        target = sp.simplify((expr - (1 - rho) * s_old) / rho)
        if target.has(rho):
            raise ctx.fail(f"the update of {p} is not of the form (1-ρ){p} + ρT")
        new = expr + rho**2 * (s_old - target) ** 2 / (2 * s_old)
        set_update(D, p, new)
        record(ctx, "Riemannian correction", "The second-order term of the improved BLR keeps the precision positive.",
                [(sym, new, r"\leftarrow")])


register(RiemannianCorrection())
