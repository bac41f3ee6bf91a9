"""Mini-batch estimates of the full loss ℓ̄ = Σ_i ℓ_i: N times the mini-batch mean (Eq. 34)."""
from __future__ import annotations

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import record, substitute_def


class Minibatch(Rule):
    name = 'minibatch'
    kind = 'pass'
    equation = 'Eq. 34'
    summary = 'mini-batch estimates scaled by the data-set size N (ess)'

    def rewrite(self, ctx):
        D = ctx.D
        n = ctx.expr("size")
        ctx.done()
        D.loss_model.scale = n * D.loss_model.scale         # the oracles' loss is a mean: ℓ is N times it
        D.loss_model.prior = n * D.loss_model.prior         # (and the terms added before, which it scales too)
        eqs = []
        for key in ("grad", "hess"):
            v = D.views.of(key)
            if v is None:
                continue
            new = substitute_def(D, f"{key}_N", v, n * v)
            D.views.set(key, new)
            eqs.append((new, n * v))
        record(ctx, "Mini-batch estimates", "The oracles return mini-batch means; the BLR needs sums over the N "
                "examples (Eq. 34).", eqs)


register(Minibatch())
