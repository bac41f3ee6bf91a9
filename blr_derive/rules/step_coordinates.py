"""``step_coordinates`` — take the natural-gradient step in other coordinates of q (Wierstra et al., JMLR 2014,
Secs. 2.3 and 3.3: NES's "exponential parameterization"; Amari 1998: the natural gradient is a tangent vector,
the same direction whatever the coordinates).

The BLR (Eq. 6) is an Euler step of the natural-gradient flow written in the natural parameters λ: the new
parameters p_{t+1}(ρ) are those of λ_t − ρ(∇̃…).  The same flow stepped in coordinates ξ = ξ(p) (one invertible
function of each parameter) moves ξ along the tangent of that curve at ρ = 0:

    ξ(p_{t+1}) = ξ(p_t) + ρ ξ'(p_t) · d p_{t+1}/dρ |_{ρ=0},       p_{t+1} = ξ⁻¹(…)

which agrees with Eq. 6 to first order in ρ and differs at O(ρ²).  Every parameter of the candidate is stepped
this way: a parameter named with ``log(s)`` moves multiplicatively (s ← s·exp(ρ ṡ/s), always positive), one not
named moves along its own tangent (m ← m + ρ ṁ: the mean's step then uses the current precision, as NES does,
not λ_{t+1}'s).  Auxiliary state (momentum buffers …) is left as derived.

Recipe: ``step_coordinates: {s: log(s)}`` (before ``separate_learning_rates``, which then scales each tangent).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import invert, record, scalar, set_update


def expanded(D, expr, own):
    """``expr`` with the program's definitions and the other updates' new values written out (the tangent in ρ
    must see every ρ the update depends on); ``own`` is the update's own new symbol (never inside it)."""
    new_values = {sym: e for _, sym, e in D.updates if sym != own}
    defs = dict(D.defs)
    for _ in range(len(new_values) + len(defs) + 1):
        nxt = expr.xreplace(new_values).xreplace(defs)
        if nxt == expr:
            return expr
        expr = nxt
    return expr


class StepCoordinates(Rule):
    name = "step_coordinates"
    kind = "pass"
    equation = "Eq. 6 stepped in coordinates ξ(p); Wierstra et al. (2014) Secs. 2.3, 3.3"
    summary = ("take the natural-gradient step in coordinates ξ(p) of the candidate's parameters (e.g. log s): "
               "the tangent of Eq. 6 at ρ = 0, equal to it to first order")

    def rewrite(self, ctx):
        D = ctx.D
        fam = D.recipe.family
        if D.recipe.learning_rate is None:
            raise ctx.fail("the step needs a learning rate (the recipe's learning_rate)")
        rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
        coords = {}
        for pname in list(ctx.args):
            if pname not in fam.params:
                raise ctx.fail(f"'{pname}' is not a parameter of family '{fam.name}' "
                               f"(parameters: {', '.join(fam.params)})")
            p = scalar(fam.params[pname].symbol)   # the update is written coordinate-wise
            syms = {**ctx.symbols(), pname: p}
            try:
                xi = parse_expression(ctx.args.pop(pname), syms, what=f"step_coordinates.{pname}")
            except SpecError as exc:
                raise exc.located(D.recipe.file, ctx.approx.line) from None
            if not xi.has(p) or (xi.free_symbols - {p}):
                raise ctx.fail(f"the coordinate of '{pname}' must be a function of {pname} alone, got {xi}")
            coords[pname] = xi
        ctx.done()
        eqs = []
        tangents = {}                   # parameter name -> (its new symbol, d p_{t+1}/dρ at ρ = 0)
        for name, sym, expr in D.updates:
            if name not in fam.params:
                continue
            p = scalar(fam.params[name].symbol)
            full = expanded(D, expr, sym)
            if not full.has(rho):
                raise ctx.fail(f"the update of '{name}' does not depend on the learning rate {rho}")
            at0 = sp.simplify(full.xreplace({rho: 0}) - p)
            if at0 != 0:
                raise ctx.fail(f"the update of '{name}' is not a step from {name} (at {rho} = 0 it is "
                               f"{name} + {at0})")
            tangents[name] = sym, sp.simplify(sp.diff(full, rho).xreplace({rho: 0}))
        for name, (sym, tangent) in tangents.items():
            p = scalar(fam.params[name].symbol)
            xi = coords.get(name, p)
            moved = xi + rho * sp.diff(xi, p) * tangent
            new = moved if xi == p else sp.simplify(invert(xi, p, moved, ctx.fail)[0])
            set_update(D, name, new)
            eqs.append((sym, new, r"\leftarrow"))
        record(ctx, "Step in other coordinates",
               "Eq. 6 is an Euler step of the natural-gradient flow in λ; the flow's tangent at ρ = 0 is stepped in "
               "the coordinates " + ", ".join(f"{k} ↦ {v}" for k, v in coords.items()) + " (others: the parameter "
               "itself), which agrees with Eq. 6 to first order in ρ (Wierstra et al. 2014, Secs. 2.3, 3.3).", eqs)


register(StepCoordinates())
