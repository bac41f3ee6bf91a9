"""Leave-one-out sensitivities (rule ``memory_perturbation``) as the ``sensitivities`` entry point.

The rule derives, for one example i, the program that maps the trained state and example i's values (a row of
the data plate, or per-example oracle values) to the parameters of the leave-one-out posterior q_{-i}
(:class:`~blr_derive.rules.base.LeaveOneOut`); here that program becomes a generic
:class:`~blr_derive.ir.model.EntryPoint` with a loop over the examples (``rows``), which every target renders with
its entry-point template."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.types import Sym, Text
from blr_derive.ir.model import Constant, Dim, EntryPoint, EntryPoints, HyperVar, Read, Var
from blr_derive.rules.base import RULES, LeaveOneOut


def sensitivity_entry_points(loo: LeaveOneOut, state: list[Var], hyper: list[HyperVar],
                             dims: list[Dim]) -> EntryPoints:
    """``sensitivities(state, *, oracles=None, data=None, **hyperparameters)`` of a recipe with the rule."""
    used = set().union(*[e.free_symbols | {s} for s, e in loo.program]) if loo.program else set()
    for s, e in loo.program:
        used |= e.atoms(sp.MatrixSymbol)
    reads = [Read(v.symbol, "state", v.name) for v in state if v.symbol in used]
    full_of: dict[tuple[str, str], Sym] = {}
    slices: list[tuple[Sym, Sym]] = []
    for sym, argument, key in loo.rows:
        if (argument, key) not in full_of:       # the whole per-example array (an internal ``_`` name)
            full_of[(argument, key)] = sp.Symbol(f"_{argument}_{key}", real=True)
            reads.append(Read(full_of[(argument, key)], argument, key))
        slices.append((sym, full_of[(argument, key)]))
    hyper_names = [h.name for h in hyper if h.kind in ("float", "int") and h.symbols[0] in used]
    bound = {s for s, _, _ in reads}
    dim = [(d, next(v.symbol for v in state if v.name == var)) for d, var, axis in dims
           if d in used and axis == 0 and any(v.name == var and v.symbol in bound for v in state)]
    keys = [k for k, _ in loo.outputs]
    rule = RULES["memory_perturbation"]
    per_example = "; ".join(f"{arg}[{key!r}]: {desc}" for arg, key, desc in loo.inputs)
    doc = (f"Leave-one-out posteriors of every example i (rule memory_perturbation, {rule.equation}): example i's "
           "site λ̃_i = −∇_μ E_q[ℓ_i], by the recipe's expectation rule, is removed from the trained natural "
           "parameters, λ_{-i} = λ − λ̃_i, and λ_{-i} is solved for the family's parameters.  Per example, with a "
           f"leading axis of examples: {per_example}.  Returns a dict of arrays with one leading entry per example: "
           + ", ".join(f"{k!r}" for k in keys)
           + " (the family's parameters of q_{-i}; 'mean_deviation' = mean of q_{-i} − the trained mean).  "
           "A linear predictor f_i = x_iᵀθ moves by x_iᵀ mean_deviation[i] when example i is removed.")
    fn = EntryPoint("sensitivities", doc, ["state"], hyper_names, reads, dims=dim,
                    keywords=["oracles", "data"],
                    rows={"count": loo.count, "slices": slices, "assignments": list(loo.program),
                          "outputs": list(loo.outputs)})
    notes: list[Text] = ["Derived by the rule memory_perturbation: at a fixed point of the BLR the natural parameters are a",
             "sum of per-example sites; sensitivities(state, ...) removes one example's site at a time and maps",
             "the result back to the family's parameters (leave-one-out posteriors to first order, exact for",
             "conjugate models)."]
    constants: list[tuple[str, Constant]] = [("SENSITIVITY_INPUTS", tuple(f"{arg}.{key}" for arg, key, _ in loo.inputs)),
                 ("SENSITIVITY_OUTPUTS", tuple(keys)),
                 ("SENSITIVITY_EQUATIONS", tuple(loo.equations))]
    return EntryPoints("memory perturbation: leave-one-out sensitivities", notes, constants, [fn])

