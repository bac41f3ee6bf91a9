"""``fitness_shaping`` — rank-based utilities in place of the loss values at the samples (a convention of
evolution strategies, not a consequence of the BLR: Wierstra et al., JMLR 2014, Sec. 3.1; Salimans et al. 2017).

The score-function estimate of ∇_λ E_q[ℓ] (Eq. 4) averages ℓ(θ_k)(T(θ_k) − μ) over the S samples of a step.  With
shaping, the loss value of the sample of rank r (r = 1 the lowest loss; ties keep the order of the draws, a NaN
loss ranks last) is replaced by a fixed value that depends only on r and S, which makes the step invariant to
monotone transformations of the loss (and no longer an unbiased estimate of the BLR's natural gradient):

* ``nes`` (Wierstra et al. 2014, Sec. 3.1): u_r = max(0, log(S/2 + 1) − log r) / Σ_j max(0, log(S/2 + 1) − log j)
  − 1/S, and the loss value becomes −S·u_r, so that the step's sample means are NES's sums Σ_k u_k(·) (the best
  sample gets the most negative value; the values sum to zero, which is NES's baseline);
* ``centered_ranks`` (Salimans et al. 2017): (r − 1)/(S − 1) − 1/2, in [−1/2, 1/2].
"""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, Shaping, register
from blr_derive.rules.program import record

r, S = sp.Symbol("r", positive=True, integer=True), sp.Symbol("S", positive=True, integer=True)
w_r, W = sp.Symbol("w_r", real=True), sp.Symbol("W", positive=True)

#: name -> (weight w(r, S), value(w_r, W, S), description)
UTILITIES = {
    "nes": (sp.Max(0, sp.log(S / 2 + 1) - sp.log(r)), 1 - S * w_r / W,
            "NES utilities u_r = w_r/W - 1/S, w_r = max(0, log(S/2 + 1) - log r), as the loss value -S u_r"),
    "centered_ranks": (r, (w_r - 1) / (S - 1) - sp.Rational(1, 2),
                       "centred ranks (r - 1)/(S - 1) - 1/2"),
}


class FitnessShaping(Rule):
    name = "fitness_shaping"
    kind = "convention"
    matrix_programs = True          # shapes the sampled values only (any update)
    equation = "Wierstra et al. (2014) Sec. 3.1; Salimans et al. (2017)"
    summary = "replace the loss values at the samples by rank-based utilities (nes, centered_ranks)"

    def rewrite(self, ctx):
        D = ctx.D
        kind = ctx.args.pop("utilities", "nes")
        ctx.done()
        if not isinstance(kind, str) or kind not in UTILITIES:
            raise ctx.fail(f"utilities must be one of {', '.join(UTILITIES)}, got {kind!r}")
        sm = D.sampling
        calls = [k for k, o in sm.calls if o == "loss"] if sm is not None else []
        if not calls or sm.draw not in ("normal", "uniform"):
            raise ctx.fail("shapes the loss values at random samples of q; this update draws none (use "
                           "'score_function')")
        if sm.shaping is not None:
            raise ctx.fail("the loss values are already shaped")
        weight, value, text = UTILITIES[kind]
        if kind == "centered_ranks" and sm.samples.is_number and sm.samples < 2:
            raise ctx.fail("centred ranks need at least 2 samples")
        sm.shaping = Shaping(calls[0], r, S, weight, W, w_r, value, kind)
        D.symbol_names.update({w_r: "w_r", W: "W"})
        j = sp.Symbol("j")
        eqs = [(w_r, weight)] + ([(W, sp.Sum(weight.xreplace({r: j}), (j, 1, S)))] if value.has(W) else [])
        record(ctx, "Fitness shaping",
               f"The loss value of the sample of rank r among the S = {sm.samples} samples (r = 1: the lowest loss) "
               f"is replaced by {text}: the step depends on the losses only through their order (a convention of "
               "evolution strategies, not of the BLR).",
               eqs + [(calls[0], value, r"\leftarrow")])


register(FitnessShaping())
