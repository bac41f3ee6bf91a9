"""``unit_correction`` — Adadelta's correction of units (Zeiler 2012; a convention, not a BLR step): the
preconditioned step of Eq. 38 is multiplied by the root mean square of the past steps.

Eq. 38 divides the gradient by √(v + c) with v the exponential average of ĝ∘ĝ.  Zeiler observes that the
resulting step has no units of θ and multiplies it by RMS[Δθ]_{t−1}, the root of an exponential average of the
squared steps, with both roots written as Zeiler's RMS[y] = √(E[y²] + ε) (ε inside the root, as Eq. 38's c):

    Δ_t = √(a_t + ε)/√(s_{t+1} + ε) · ĝ_t,   a_{t+1} = rate·a_t + (1 − rate)·Δ_t²,   m ← m − ρΔ_t.

The rule replaces ``param`` (the scale s, where the mean step divides by it) by √(s + ε), multiplies the mean's
direction by √(a + ε) and keeps a (initialised to 0) as the state ``state``.  With ρ = 1 (torch's default lr)
this is Adadelta.

Arguments: ``param``, ``rate``, ``eps`` (default 0), ``state`` (default ``acc_delta``), ``when`` (a condition;
when false, the step is the plain one and a is not updated).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import (add_aux, cond, mean_direction, new_def, record, set_update, substitute_def,
                                      update_of)


class UnitCorrection(Rule):
    name = "unit_correction"
    kind = "convention"
    equation = "Adadelta convention (Eq. 38 times RMS of past steps)"
    summary = "multiply the preconditioned step by √(E[Δ²] + ε) and precondition with √(s + ε)"

    def rewrite(self, ctx):
        D = ctx.D
        p = ctx.name("param")
        rate = ctx.expr("rate")
        eps = ctx.expr("eps", sp.Integer(0))
        when = ctx.when()
        name = ctx.name("state", "acc_delta")
        ctx.done()
        v = ctx.view(p)
        rms = substitute_def(D, f"{p}_rms", v, cond(when, sp.sqrt(v + eps), v), skip=(p,))
        D.views.set(p, rms)
        rho, mean, m, d = mean_direction(ctx)
        _, plain = update_of(D, mean)
        acc, acc_new = add_aux(ctx, name, sp.Integer(0), "exponential average of the squared steps")
        dx = new_def(D, f"{name}_step", sp.sqrt(acc + eps) * d)
        D.updates.insert(0, (name, acc_new, cond(when, rate * acc + (1 - rate) * dx**2, acc)))
        set_update(D, mean, cond(when, m - rho * dx, plain))
        D.views.set(name, acc_new)
        record(ctx, "Unit correction", "The preconditioned step is multiplied by the RMS of the past steps "
                "(Adadelta; both RMS with ε inside the root).",
                [(rms, sp.sqrt(v + eps)), (dx, sp.sqrt(acc + eps) * d), (acc_new, rate * acc + (1 - rate) * dx**2,
                                                                          r"\leftarrow")])


register(UnitCorrection())
