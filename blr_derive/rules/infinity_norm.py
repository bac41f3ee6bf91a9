"""``infinity_norm`` — the exponentially weighted infinity norm p ← max(a·p, x) in place of the average
p ← a·p + (1 − a)·x (Adamax's convention, not a BLR step).

Eq. 36 smooths the scale exponentially, s ← a·s + (1 − a)·x.  Adamax (Kingma & Ba 2015, Sec. 7.1) smooths in
the L^p norm instead, v ← a^p·v + (1 − a^p)|x|^p with s = v^{1/p}, and takes p → ∞:
s ← max(a·s, |x|).  The rule reads a and x off the update of ``param`` (whatever earlier passes made of the
Hessian of Eq. 37, e.g. |ĝ| + ε from ``absolute_gradient_hessian``) and writes the maximum; every other update
keeps reading p_{t+1}.  x is used as it is (pass a non-negative target such as |ĝ|).

Arguments: ``param`` (a state updated as an average), ``when`` (a condition; when false, the average is kept).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.averages import moving_average
from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import cond, record, set_update, update_of


class InfinityNorm(Rule):
    name = "infinity_norm"
    kind = "convention"
    equation = "Adamax convention (Eq. 36 smoothing in the L∞ norm)"
    summary = "p ← max(a·p, x): the exponentially weighted infinity norm"

    def rewrite(self, ctx):
        p = ctx.name("param")
        when = ctx.when()
        ctx.done()
        sym, old, a, x = moving_average(ctx, p)
        _, expr = update_of(ctx.D, p)
        new = cond(when, sp.Max(a * old, x), expr)
        set_update(ctx.D, p, new)
        record(ctx, "Exponentially weighted infinity norm", f"{p} keeps the larger of its decayed value and "
                "the new target (the p → ∞ limit of smoothing in the L^p norm; Adamax).", [(sym, new, r"\leftarrow")])


register(InfinityNorm())
