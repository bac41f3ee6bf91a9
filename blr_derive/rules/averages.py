"""Reading an exponential moving average off the update program (shared by ``accumulated_sum``,
``infinity_norm`` and ``nesterov_lookahead``; registers no rule).

Eq. 37 updates the scale as s ← (1 − ρ)s + ρh and EMA momentum (App. F, Eq. 77) the gradient average as
u ← γu + (1 − γ)ĝ.  Any state p whose update is affine in p, p ← a·p + b, *forgets* at the rate a and *tracks*
its fixed point x = b/(1 − a): the value p would keep if it were fed x at every step (x = h for Eq. 37, x = ĝ
for Eq. 77).  Rules read (a, x) this way from whatever earlier passes produced (separate learning rates, a
squared-gradient Hessian, weight decay ...), never by matching the printed algebra.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.program import scalar, update_of


def state_symbol(D, name):
    """The symbol of state ``name`` at step t (a family parameter or a state added by a rule)."""
    fam = D.recipe.family
    if name in fam.params:
        return scalar(fam.params[name].symbol)
    for a in D.aux_state:
        if a.name == name:
            return a.symbol
    return None


def moving_average(ctx, name):
    """(symbol of the new value, p, a, x) for the update p ← a·p + (1 − a)·x of state ``name``; a located error if
    the update is not affine in p with a forgetting rate a ≠ 1 free of the state."""
    D = ctx.D
    sym, expr = update_of(D, name)
    p = state_symbol(D, name)
    if p is None:
        raise ctx.fail(f"'{name}' is not a state of this update")
    a = sp.diff(expr, p)
    if a.has(p) or a == 1 or a.has(sp.Piecewise):
        raise ctx.fail(f"the update of '{name}' is not an average {name} <- a*{name} + (1 - a)*x with a fixed "
                       f"rate a != 1 (it is {name} <- {expr})")
    x = (expr - a * p) / (1 - a)
    if x.has(p):                                  # (b·ρ − ρp − (1 − ρ)p + p)/ρ: the p terms cancel
        x = sp.cancel(x)
    if x.has(p):
        raise ctx.fail(f"the update of '{name}' is not an average {name} <- a*{name} + (1 - a)*x (it is "
                       f"{name} <- {expr})")
    return sym, p, a, x
