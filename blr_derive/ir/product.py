"""The IR of a product (mean-field) candidate: the plate of per-row blocks as a first-class axis."""
from __future__ import annotations

import sympy as sp

from blr_derive import __version__
from blr_derive.core import matexpr
from blr_derive.core.matexpr import is_mat
from blr_derive.core.nodes import ComponentLogSumExp, ComponentSum
from blr_derive.core.types import Assignment, Expr, Sym
from blr_derive.ir.common import camel, check_printed_names, seal_text
from blr_derive.ir.model import Block, ComponentAxisIR, Dim, FactorizedIR, HyperVar, Plate, PlateVar, Var
from blr_derive.ir.objective_notes import product_note
from blr_derive.ir.validity import product_checks
from blr_derive.rules.product import BOUND_KEY, FactorizedDerivation
from blr_derive.spec.components import ComponentsSpec
from blr_derive.spec.product import FactorizedRecipe, block_candidate


#: what a factorized module's step says of the bound it returns (rule em_bound)
BOUND_DOC = ("the EM bound at the state the step started from (rule em_bound; Khan & Rue 2023, Sec. 5.2 and "
             "Eq. 2): −L(q) with the global blocks at their points and q(z_n) the exact E-step, Σ_n log Σ_z "
             "exp(−ℓ_n(z, θ)) minus the global factors at θ, which is log p(y, θ) up to the constants the recipe's "
             "factors drop (Gaussian rows written without their −(P/2)·log 2π: log p(y | θ) = bound − (N·P/2)·log 2π); "
             "a float that an EM step never decreases")


#: the keys of the mapping a factorized module's ``objective`` returns (the EM bound's objective)
BOUND_OBJECTIVE_KEYS = ("objective", BOUND_KEY)

#: the docstring of a factorized module's ``objective`` where its step returns the EM bound (rule em_bound)
BOUND_OBJECTIVE_DOC = (
    "The BLR's objective L(q) = E_q[ℓ] − H(q) (Khan & Rue 2023, Eq. 2) of the product candidate at the state, "
    "with the global blocks at their points (q = N(θ_t, I), the delta method, Eq. 55: their entropy, a constant, "
    "is dropped) and each row's q(z_n) the exact E-step at that state (Eq. 56), which minimizes L over q(z_n): "
    "L = Σ_n (c0_n − A(λ_n)) + Σ_f ℓ_f(θ) = −log p(y, θ) up to the constants the recipe's factors drop, i.e. "
    "−bound (rule em_bound).  Any other q(z_n) gives a larger E_q[ℓ] − H(q); an EM step never increases it, so it "
    "is the quantity to monitor per round.  Takes what step() takes (oracles and the random source are accepted "
    "and unused) and runs the step's program once to read the bound (the state is not changed); returns "
    "{'objective': L, 'bound': −L} as floats (OBJECTIVE_KEYS).")


#: what a factorized module's step says of the bound it returns (rule mean_field_bound)
MEAN_FIELD_BOUND_DOC = (
    "the mean-field bound at the state the step started from (rule mean_field_bound; Khan & Rue 2023, Sec. 5.3 "
    "and Eq. 2): −L(q) = Σ_b H(q_b) − Σ_n E_q[ℓ_n] − Σ_f E_q[ℓ_f] under the product of the blocks, the evidence "
    "lower bound up to the constants the recipe's factors drop; a float that a step with ρ = 1 never decreases")

#: the docstring of a factorized module's ``objective`` where its step returns the mean-field bound
MEAN_FIELD_OBJECTIVE_DOC = (
    "The BLR's objective L(q) = E_q[ℓ] − H(q) (Khan & Rue 2023, Eq. 2) of the product candidate q = Π_b q_b at "
    "the state: Σ_n E_q[ℓ_n] + Σ_f E_q[ℓ_f] − Σ_b H(q_b), each factor's expectation under all blocks (it is linear "
    "in each block's statistics, so T_b is replaced by μ_b) and each block's entropy its family's (App. B), i.e. "
    "−bound (rule mean_field_bound): the negative evidence lower bound up to the constants the recipe's factors "
    "drop (a point block's constant entropy is dropped too).  Coordinate-wise exact steps with ρ = 1 (VMP, "
    "Sec. 5.3) never increase it; a smaller ρ need not decrease it at every step.  Takes what step() takes "
    "(oracles and the random source are accepted and unused) and runs the step's program once to read the "
    "bound (the state is not changed); returns {'objective': L, 'bound': −L} as floats (OBJECTIVE_KEYS).")


def build_product_ir(D: FactorizedDerivation, source: str = "") -> FactorizedIR:
    """The IR of a product candidate: the plate's per-row program (its row-invariant parts hoisted), the plate
    statistics and the global program."""
    R = D.recipe
    state: list[Var] = []
    for b in R.blocks:
        if b.local:
            continue
        if b.name in D.message_state:
            state += [Var(name, ms, "scalar", f"message of factor '{f}' to q({b.name}), λ̃^({i + 1}) (Eq. 60)")
                      for name, ms, f, i in D.message_state[b.name]]
            continue
        for name, s, p in b.state:
            desc = (b.family.params[str(p)].description + f" of q({b.name}) ({b.family.name})" if p is not None
                    else b.description or f"point estimate of {b.name}")
            kind = "scalar" if not is_mat(s) else ("vector" if s.shape[1] == 1 else "matrix")
            state.append(Var(name, s, kind, desc))
    used = set()
    for _, e in D.prelude + D.local_assign + D.stats + D.assignments + ([D.scale] if D.scale else []):
        used |= e.free_symbols
    hyper = [HyperVar(h.name, h.kind, h.default, h.description, (h.symbol,)) for h in R.hyper if h.symbol in used]
    data = [Var(d.name, d.symbol, "scalar" if not d.shape else ("vector" if len(d.shape) == 1 else "matrix"),
                d.description) for d in R.data if d.symbol in used]
    dims: list[Dim] = []
    seen = set()
    plate: Plate | None = None
    if R.plate is not None:
        pdata = []
        for d in R.plate["data"]:
            pdata.append(PlateVar(d.name, d.symbol, "scalar" if not d.shape else "vector" if len(d.shape) == 1
                                  else "matrix", d.description))
            for axis, s in enumerate(d.shape):
                if s not in seen:
                    seen.add(s)
                    dims.append(Dim(s, d.name, axis + 1))
        plate = {"index": R.plate["index"], "data": pdata, "local_outputs": list(D.local_outputs),
                 # scalar rows: the per-row program is elementwise, so numpy evaluates it on all rows at once
                 "vectorized": all(not d.shape for d in R.plate["data"])}
    for d in R.data:
        for axis, s in enumerate(d.shape):
            if s not in seen:
                seen.add(s)
                dims.append(Dim(s, d.name, axis))
    pre_loop, local_assign = hoist_invariants(D)
    blocks = [Block(b.name, block_candidate(b), "local" if b.local else "global", b.rho_text, b.approximation)
              for b in R.blocks]
    components = None
    if R.components is not None:
        components = component_axis(R, R.components, D, pre_loop, local_assign)
        first = next(v.name for v in state if v.name in components["state"])
        dims.append(Dim(R.components["size"], first, 0))
    ir = FactorizedIR(
        recipe=R.name, title=R.title, class_name=R.class_name or camel(R.name), engine_version=__version__,
        source=source, paper=R.paper, description=R.description, blocks=blocks, state=state,
        hyperparameters=hyper, data=data, plate=plate, dims=dims, step_symbol=D.step_symbol,
        local_assign=local_assign, pre_loop=pre_loop, prelude=list(D.prelude), stats=list(D.stats), scale=D.scale,
        assignments=list(D.assignments),
        outputs=list(D.outputs), equations=D.update_lines(), family=R.family.name, components=components)
    ir.symmetric = frozenset(str(b.variables[0]) for b in R.blocks if b.symmetric)
    if any(name == BOUND_KEY for name, _ in D.outputs):
        em = D.bound_rule != "mean_field_bound"
        ir.bound = (BOUND_KEY, BOUND_DOC if em else MEAN_FIELD_BOUND_DOC)
        ir.objective_doc = BOUND_OBJECTIVE_DOC if em else MEAN_FIELD_OBJECTIVE_DOC
    ir.objective_note = product_note(D, ir.bound is not None)
    ir.checks = product_checks(D)
    check_printed_names(ir, R)
    return seal_text(ir)


def component_axis(R: FactorizedRecipe, axis: ComponentsSpec, D: FactorizedDerivation,
                   pre_loop: list[Assignment], local_assign: list[Assignment]) -> ComponentAxisIR:
    """Which quantities have one value per component: the per-component blocks' parameters, and every quantity
    computed from one of them outside a sum over the components (ComponentSum, ComponentLogSumExp), in program
    order; those of the per-row program are also per row."""
    carried = {s for b in R.blocks if b.per_component for _, s, _ in b.state}
    reductions = (ComponentSum, ComponentLogSumExp)
    program = list(D.prelude) + list(pre_loop) + list(local_assign) + list(D.stats)
    program += ([D.scale] if D.scale else []) + list(D.assignments)
    for s, e in program:
        outside = e.xreplace({r: sp.Dummy() for r in e.atoms(*reductions)}) if e.has(*reductions) else e
        if (outside.free_symbols | outside.atoms(sp.MatrixSymbol)) & carried:
            carried.add(s)
    rows = {s for s, _ in local_assign} & carried
    state = [name for b in R.blocks if b.per_component and not b.local for name, _, _ in b.state]
    local = [name for name, s in D.local_outputs if s in carried]
    return {"index": axis["index"], "size": str(axis["size"]),
            "carried": frozenset(str(s) for s in carried), "rows": frozenset(str(s) for s in rows),
            "state": state, "local": local}


def hoist_invariants(D: FactorizedDerivation) -> tuple[list[Assignment], list[Assignment]]:
    """Split the per-row program into row-invariant temporaries (computed once before the plate loop) and
    the per-row assignments that use them (loop-invariant code motion; the values are unchanged)."""
    row = set(D.row_symbols) | {s for s, _ in D.local_assign}
    temps: dict[Expr, Sym] = {}
    pre: list[Assignment] = []

    def temp(e):
        if e not in temps:
            t = sp.Symbol(f"row_const{len(temps) + 1}", real=True)
            temps[e] = t
            pre.append((t, e))
        return temps[e]

    def varies(e):
        return bool(e.free_symbols & row)

    def walk(e):
        if is_mat(e):
            return e
        if not varies(e):
            return e if (e.is_Atom or e.is_number) else temp(e)
        if isinstance(e, sp.Trace) and isinstance(e.arg, sp.MatAdd):
            return walk(sp.Add(*[sp.Trace(a) for a in e.arg.args]))
        if isinstance(e, sp.Trace) and isinstance(e.arg, sp.MatMul):
            c, mats = matexpr.split_coeff(e.arg.args)
            if c != 1:
                return walk(c * sp.Trace(sp.MatMul(*mats) if len(mats) > 1 else mats[0]))
        if isinstance(e, (sp.Add, sp.Mul)):
            inv = [a for a in e.args if not varies(a)]
            parts = [walk(a) for a in e.args if varies(a)]
            if inv:
                c = e.func(*inv)
                parts.insert(0, c if (c.is_Atom or c.is_number) else temp(c))
            return e.func(*parts)
        if isinstance(e, (sp.Function, sp.Pow)):
            return e.func(*[walk(a) for a in e.args])
        return e
    return pre, [(s, walk(e)) for s, e in D.local_assign]
