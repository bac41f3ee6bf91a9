"""Store parameter p through a new state variable: p = value(new)."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.exprparse import parse_expression
from blr_derive.core.pretty import pretty
from blr_derive.rules.base import Renamed, Rule, register
from blr_derive.rules.program import check_new_state, invert, record, update_of


class ChangeVariable(Rule):
    name = 'change_variable'
    kind = 'convention'
    equation = "IVON's parameterization"
    summary = 'store a parameter through an invertible affine map (e.g. s = ess*(h + delta))'

    def rewrite(self, ctx):
        D = ctx.D
        p = ctx.name("param")
        new_name = ctx.name("to")
        fam = D.recipe.family
        if p not in fam.params:
            raise ctx.fail(f"'{p}' is not a parameter of family '{fam.name}'")
        check_new_state(ctx, new_name)
        new_sym = sp.Symbol(new_name, real=True)
        syms = ctx.symbols()
        syms[new_name] = new_sym
        try:
            value = parse_expression(ctx.args.pop("value"), syms, what="change_variable.value")
        except KeyError:
            raise ctx.fail("missing argument 'value'") from None
        ctx.done()
        old = fam.params[p].symbol
        old_sym, old_expr = update_of(D, p)
        # a positive parameter's new variable is taken positive where the map has several inverses (s = sigma**-2)
        target = sp.Dummy("p", positive=True) if old.is_positive else old_sym
        new_update, branches = invert(value, new_sym, target, lambda msg: ctx.fail(f"{p} = {value}: {msg}"),
                                      positive=bool(old.is_positive))
        new_update = new_update.xreplace({target: old_sym})
        if branches > 1:
            # the map has a negative branch too (s = sigma**-2): the new variable is the positive one
            pos = sp.Symbol(new_name, positive=True)
            value, new_update = value.xreplace({new_sym: pos}), new_update.xreplace({new_sym: pos})
            new_sym = pos
        new_new = sp.Symbol(f"{new_name}_new", real=True)
        # p_{t+1} stays a definition (written with the new variable); the state stores new_{t+1} = map⁻¹(p_{t+1})
        reps = {old: value}
        D.updates = [(n, s, e.xreplace(reps)) if n != p else (new_name, new_new, new_update) for n, s, e in D.updates]
        D.defs = [(s, e.xreplace(reps)) for s, e in D.defs] + [(old_sym, old_expr.xreplace(reps))]
        if D.sampling is not None:
            D.sampling.theta_expr = D.sampling.theta_expr.xreplace(reps)
            D.sampling.stats = [(a, e.xreplace(reps)) for a, e in D.sampling.stats]
            D.sampling.reductions = [(r, e.xreplace(reps)) for r, e in D.sampling.reductions]
            D.sampling.chained = [c._replace(point_expr=c.point_expr.xreplace(reps)) for c in D.sampling.chained]
        D.renamed[p] = Renamed(new_name, new_sym, value)
        D.views.set(new_name, new_new)
        D.symbol_names[new_new] = f"{new_name}_{{t+1}}"
        record(ctx, f"Change of variable {p} = {pretty(value)}", "The state stores the new variable; every use of "
                f"{p} is rewritten through the map.", [(new_new, new_update, r"\leftarrow")])


register(ChangeVariable())
