"""Building the update IR (``blr_derive/ir/model.py``) from a derivation record: the program in dependency
order after common-subexpression elimination, the state with its initial values, and the names the generated
code will print (checked to be distinct)."""
from __future__ import annotations

from typing import Callable

import sympy as sp

from blr_derive import __version__
from blr_derive.core.errors import SpecError
from blr_derive.core.exprfuncs import function_depth
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.matexpr import is_mat
from blr_derive.core.specialfns import scaled_exp1
from blr_derive.core.types import Assignment, Expr, Sym, Text
from blr_derive.core.yamlio import LDict
from blr_derive.ir.common import camel, check_printed_names, seal_text, toposort
from blr_derive.ir.federated import federated_entry_points
from blr_derive.ir.mixture_axis import with_component_axis
from blr_derive.ir.mixture_objective import mixture_objective_entry_points
from blr_derive.ir.objective import objective_entry_points, objective_parts
from blr_derive.ir.objective_notes import update_note
from blr_derive.ir.model import IR, Dim, FamilyMaps, HyperVar, UpdateIR, Var
from blr_derive.ir.product import build_product_ir
from blr_derive.ir.sensitivities import sensitivity_entry_points
from blr_derive.ir.validity import server_checks, state_checks
from blr_derive.rules.base import Derivation, OracleCall, Sampling
from blr_derive.rules.product import FactorizedDerivation
from blr_derive.rules.program import scalar_expr
from blr_derive.spec.peer import Peer
from blr_derive.spec.recipe import Recipe


#: a rewriting of one expression into the same function of its symbols (the code generators' numerical lowering)
Lowering = Callable[[Expr], Expr]


def _kind(sym: Sym, elementwise: bool) -> str:
    if is_mat(sym):
        return "matrix" if sym.shape[1] != 1 else "vector"
    return "elementwise" if elementwise else "scalar"


def build_ir(D: Derivation, source: str = "", lower: Lowering | None = None) -> IR:
    """The IR of a derivation record (an :class:`UpdateIR`, or a :class:`FactorizedIR` for a product candidate);
    ``source`` labels the recipe in generated headers.  ``lower`` rewrites each scalar expression of the program
    before common-subexpression elimination (:func:`_program`); the code generators pass their numerical lowering
    (``blr_derive.codegen.printing.numeric_lowering``), which this layer does not import."""
    if isinstance(D, FactorizedDerivation):
        return build_product_ir(D, source)
    return build_update_ir(D, source, lower)


def _state(D: Derivation[Recipe], r: Recipe, elementwise: bool) -> list[Var]:
    """The state: the family's parameters (renamed by a change of variable) then the rules' auxiliary state, each
    with its initial value (``state_init``, else the rule's; a copy of a family state when it is one)."""
    fam, hsyms = r.family, r.hyper_symbols()

    def init_of(name: str) -> Expr | None:
        if name not in r.state_init:
            return None
        try:
            value = parse_expression(r.state_init[name], hsyms, what=f"state_init.{name}")
        except SpecError as exc:
            raise exc.located(r.file, r.state_init.line_of(name)) from None
        if is_mat(value) and not value.free_symbols:
            # eye(3) for a vector or elementwise state: a shape the state does not have (the code printed 'I')
            raise SpecError(f"state_init.{name}: a number or an expression of hyperparameters, not a matrix",
                            r.file, r.state_init.line_of(name))
        return value

    renamed = {new: old for old, (new, _, _) in D.renamed.items()}
    for k in r.state_init:
        if k not in fam.params and k not in {a.name for a in D.aux_state} and k not in renamed:
            raise SpecError(f"state_init names unknown state '{k}'", r.file, r.state_init.line_of(k))
    state = []
    for p in fam.params.values():
        if p.name in D.renamed:
            new, nsym, value = D.renamed[p.name]
            state.append(Var(new, nsym, _kind(nsym, elementwise), f"{p.name} = {value}", init_of(new), True))
        else:
            state.append(Var(p.name, p.symbol, _kind(p.symbol, elementwise), p.description, init_of(p.name), True,
                             fixed=p.fixed))
    # a rule's auxiliary state has the shape of what it stores: elementwise for a scalar, its own for a matrix
    # (natural_momentum over the full Gaussian keeps S_prev of shape (P, P))
    state += [Var(a.name, a.symbol, _kind(a.symbol, True), a.description,
                  init_of(a.name) if a.name in r.state_init else a.init, False) for a in D.aux_state]
    by_symbol = {p.symbol: p.name for p in fam.params.values()}
    for v in state:
        if v.init is not None and v.init in by_symbol:
            v.init_state = by_symbol[v.init]
    return state


def _dims(variables: list[Var]) -> list[Dim]:
    """(dimension symbol, the variable that binds it, axis) of every symbolic dimension, first use first."""
    dims: list[Dim] = []
    seen = set()
    for v in variables:
        if is_mat(v.symbol):
            for axis, s in enumerate(v.symbol.shape):
                if isinstance(s, sp.Symbol) and s not in seen:
                    seen.add(s)
                    dims.append(Dim(s, v.name, axis))
    return dims


def _oracles(calls: list[OracleCall], sampling: Sampling | None) -> list[tuple[str, Text]]:
    """(oracle name, description) of every oracle the update calls, first use first."""
    oracles: list[tuple[str, Text]] = []
    for c in calls:
        if c.oracle not in [o[0] for o in oracles]:
            oracles.append((c.oracle, c.description))
    if sampling is not None:
        for o in [o for _, o in sampling.calls] + [c.oracle for c in sampling.chained]:
            if o not in [x[0] for x in oracles]:
                oracles.append((o, f"{o} of ℓ at samples θ_k of q (Monte Carlo)"))
    return oracles


#: the deepest nesting of functions in an expression that common-subexpression elimination looks into
CSE_MAX_DEPTH = 8


def _program(D: Derivation, lower: Lowering | None = None) -> list[Assignment]:
    """The definitions and updates in dependency order after common-subexpression elimination (scalar programs).

    ``lower`` (the code generators' numerical lowering: log-sum-exps, sums of exponentials normalized by the largest,
    expm1 for differences, ``blr_derive.codegen.printing.numeric_lowering``) is applied to every expression that CSE
    takes apart, *before* it does: a printer lowers each printed expression, but it recognizes a pattern only where
    the pattern is whole, and CSE names its pieces apart (the exact step of a tilted family on (0, 1), T = θ, loss
    θ², holds 1/(r²e^{2r} − 2r²e^{r} + r²) and exp(3r) as separate temporaries: NaN for r ≥ 700, and 1e-8 relative
    errors just outside the log-partition's Taylor guard, where lowered first it is 6e-12 and finite)."""
    program = toposort(list(D.defs) + [(sym, e) for _, sym, e in D.updates])
    syms = [s for s, _ in program]
    # e^x E1(x) as one scaled function before CSE would take e^x and E1(x) apart (core/specialfns.py scaled_exp1)
    exprs = [scaled_exp1(e) for _, e in program]
    assignments: list[Assignment] = []
    if not any(is_mat(e) for e in exprs):
        # an expression whose functions nest deeply, or that the derivation keeps verbatim (a nested loss at the
        # points of a finite support), is left out: sympy's common-subexpression search substitutes into it in time
        # that grows steeply with the depth
        # A scalar expression that holds vectors (a data sum Σ_n f(v_n) at the points of a finite support) is left out
        # too: the search would name a common vector v by a scalar temporary and rebuild the sum around it ("DataSum(f,
        # v) needs ... a column vector", an unlocated error for a loss such as sum(softplus(x1*theta1 + x2*theta2)))
        deep = {i: e for i, e in enumerate(exprs) if syms[i] in D.verbatim or function_depth(e) > CSE_MAX_DEPTH
                or any(is_mat(a) for a in e.free_symbols)}
        if lower is not None:
            exprs = [e if i in deep else lower(e) for i, e in enumerate(exprs)]
        reps, shallow = sp.cse([e for i, e in enumerate(exprs) if i not in deep], symbols=sp.numbered_symbols("t_"),
                               optimizations=None)
        it = iter(shallow)
        exprs = [deep[i] if i in deep else next(it) for i in range(len(exprs))]
        # a temporary for a bare negation or a symbol saves nothing: put it back
        trivial = {t: e for t, e in reps if e.is_Symbol or (e.is_Mul and len(e.args) == 2 and e.args[0] == -1
                                                             and e.args[1].is_Symbol)}
        if trivial:
            reps = [(t, e.xreplace(trivial)) for t, e in reps if t not in trivial]
            exprs = [e.xreplace(trivial) for e in exprs]
        assignments.extend(reps)
    assignments.extend(zip(syms, exprs))
    return toposort(assignments)      # CSE temporaries may use values the program computes


def _used_symbols(D: Derivation, assignments: list[Assignment], state: list[Var]) -> set[Sym]:
    """Every symbol the generated module reads (the program, the sampler, initial values, other entry points)."""
    used = set()
    for _, e in assignments:
        used |= e.free_symbols
    sm = D.sampling
    if sm is not None:
        used |= sm.theta_expr.free_symbols | sp.sympify(sm.samples).free_symbols
        for _, e in sm.stats:
            used |= e.free_symbols
        for _, e in sm.reductions:
            used |= e.free_symbols
        for c in sm.chained:
            used |= c.point_expr.free_symbols
    for v in state:
        if v.init is not None and v.init_state is None:
            used |= v.init.free_symbols
    if D.federated is not None:
        for _, e in D.federated.dual + D.federated.message + D.federated.server:
            used |= e.free_symbols
    if D.sensitivities is not None:
        for _, e in D.sensitivities.program:
            used |= e.free_symbols
    return used


def _scalar_data(d) -> Var:
    """A vector data item of an update written with scalars (``Derivation.scalar_data``): read coordinate-wise, as
    the update reads it, an array of the state's shape."""
    init = d.default
    if init is not None and is_mat(init):
        init = scalar_expr(init)
    return Var(d.name, sp.Symbol(d.name, real=True), "elementwise", d.description, init)


def build_update_ir(D: Derivation[Recipe], source: str = "", lower: Lowering | None = None) -> UpdateIR:
    r = D.recipe
    fam = r.family
    elementwise = fam.elementwise or D.elementwise
    state = _state(D, r, elementwise)
    data = [Var(d.name, d.symbol, _kind(d.symbol, False) if d.shape else "scalar", d.description, d.default)
            if d.name not in D.scalar_data else _scalar_data(d) for d in r.data]
    scalarized = D.elementwise and not any(is_mat(e) for _, _, e in D.updates)
    if scalarized:
        for v in state:
            v.kind = "elementwise"
    dims = _dims(([] if scalarized else state) + data)
    calls = list(D.oracle_calls)
    assignments = _program(D, lower)
    outputs = [(name, sym) for name, sym, _ in D.updates] + [(p.name, p.symbol) for p in fam.params.values()
                                                             if p.fixed]
    used = _used_symbols(D, assignments, state)
    for d in data:                      # a data item's default (kept as state by the optimizer targets) reads them too
        if d.init is not None:
            used |= d.init.free_symbols
    if r.peer is not None:
        _check_peer_states(r, r.peer, state)
        used |= {x for c in (r.peer.checks or []) + (r.peer.sparse_checks or []) for x in c.condition.free_symbols}
    hyper = [HyperVar(h.name, h.kind, h.default, h.description,
                      (h.symbol,) if h.symbol is not None else tuple(es for _, es in h.elements),
                      tuple(c for c, _ in h.elements) if h.kind == "choice" else (), h.keyword_only) for h in r.hyper]
    hyper = [h for h in hyper if any(s in used for s in h.symbols)]
    mean = next((p.name for p in fam.params.values() if fam.gaussian_mean is not None
                 and p.symbol == fam.gaussian_mean), None)
    own = r.parameter is None or r.parameter == fam.gaussian_mean
    equations: list[Text] = list(D.update_lines())
    ir = UpdateIR(
        recipe=r.name, title=r.title, family=fam.name, class_name=r.class_name or camel(r.name),
        engine_version=__version__, source=source, elementwise=elementwise, state=state,
        hyperparameters=hyper, data=data, dims=dims, oracles=_oracles(calls, D.sampling), oracle_calls=calls,
        assignments=assignments, outputs=outputs, equations=equations,
        step_symbol=D.step_symbol, sampling=D.sampling, mean=mean if own else None,
        parameter=None if own else r.parameter, paper=r.paper, description=r.description,
        family_maps=_family_maps(fam),
        entry_points=federated_entry_points(D.federated, state, hyper, dims) if D.federated is not None else
        sensitivity_entry_points(D.sensitivities, state, hyper, dims) if D.sensitivities is not None else None,
    )
    ir.peer = r.peer
    ir.checks = state_checks(D, fam)
    # a vector family whose program runs one coordinate at a time (scalarized): E_q[ℓ] and H(q) are the vector's
    # totals (traces of vector products, the dimension P), one number each, not terms summed over coordinates
    whole = any(is_mat(p.symbol) for p in fam.params.values())
    ir.objective = (objective_entry_points(D, state, hyper, data, elementwise and not whole, dims)
                    or mixture_objective_entry_points(D, state, hyper, data, elementwise, dims))
    ir.objective_parts = objective_parts(D, state, hyper, data, dims)
    if ir.objective is None and ir.objective_parts is None:
        ir.objective_note = update_note(D)
    if D.federated is not None and ir.entry_points is not None:
        server = next(f for f in ir.entry_points.functions if f.name == "server_step")
        server.checks = server_checks(D, fam, {str(s): s for s, _ in server.assignments or ()})
    sym = {str(x) for x in fam.symmetric} | {d.name for d in r.data if d.symmetric}
    sym |= {str(c.symbol) for c in calls if c.oracle == "hess" and is_mat(c.symbol)}
    names = {v.name for v in state} | {v.name for v in data} | {str(c.symbol) for c in calls}
    ir.symmetric = frozenset(n for n in sym if n in names)
    check_printed_names(ir, r)
    _check_defined(ir, r)
    if D.component_axis is not None:      # a mixture with the components as an array axis
        with_component_axis(ir, D.component_axis)
    return seal_text(ir)


def _check_defined(ir: UpdateIR, r: Recipe) -> None:
    """An update that sympy reduced to ∞/0 or NaN (a family whose maps leave their domain, e.g. λ = exp(exp(α)))
    cannot be printed as code: one located error, not a printer's KeyError."""
    for s_, e in ir.assignments:
        if isinstance(e, sp.Basic) and e.has(sp.zoo, sp.nan):
            spec = r.spec
            line = spec.line_of("approximations") if isinstance(spec, LDict) and "approximations" in spec else None
            raise SpecError(f"the derived update of '{s_}' is undefined (it contains ∞/0 or NaN): the family's maps "
                            "or the loss leave their domain; check natural_parameters against the parameters' "
                            "domains", r.file, line)


def _check_peer_states(r: Recipe, peer: Peer, state: list[Var]) -> None:
    """``peer.state_names`` may only rename state the update keeps."""
    known = {v.name for v in state}
    for name, stored in peer.state_names.items():
        if name not in known:
            raise SpecError(f"peer: state_names names unknown state '{name}' (known: {', '.join(sorted(known))})",
                            r.file, peer.state_lines.get(name))
        if stored in known and stored != name:
            # a checkpoint saved under the states' own names is renamed on load: {u: s, s: u} would load each
            # state into the other
            raise SpecError(f"peer: state_names stores '{name}' under '{stored}', the name of another state of this "
                            "update; choose a key that is no state's own name", r.file, peer.state_lines.get(name))


def family_ir(fam, source: str = "") -> UpdateIR | None:
    """The module of a family alone: the parameter maps a recipe's module carries for a family without a closed-form
    μ → λ map (``natural_parameters``, ``log_partition``, ``expectation_parameters``, ``fisher_information``,
    ``ordinary_from_natural``, ``ordinary_from_expectation``), here for any family with scalar natural parameters,
    printed by a target's own printer and templates, and an ``init``/``step`` whose step keeps the state.  What
    ``blr-derive check`` runs at its hard points (``blr_derive/verify/hunt.py``): the same printing of A, μ and F
    as in every generated module, so that a fault of the printed code shows up there.  None for matrix blocks."""
    maps = _family_maps(fam, always=True)
    if maps is None:
        return None
    state = [Var(p.name, p.symbol, _kind(p.symbol, False), p.description, None, True, fixed=p.fixed)
             for p in fam.params.values()]
    ir = UpdateIR(
        recipe=f"{fam.name}_maps", title=f"The parameter maps of family {fam.name}", family=fam.name,
        class_name=camel(f"{fam.name}_maps"), engine_version=__version__, source=source, elementwise=False,
        state=state, hyperparameters=[], data=[], dims=_dims(state), oracles=[], oracle_calls=[],
        assignments=[], outputs=[(p.name, p.symbol) for p in fam.params.values()], equations=[],
        family_maps=maps, description=fam.description or "")
    return seal_text(ir)


def _family_maps(fam, always: bool = False) -> FamilyMaps | None:
    """For families whose μ → λ map has no closed form (digamma etc.): what the generated module needs to
    solve ∇A(λ) = μ by Newton's method (λ(ordinary), μ(λ), F(λ) = ∇²A, ordinary(λ), Ω, a starting λ); for every
    family with scalar natural parameters when ``always`` (:func:`family_ir`)."""
    if (not always and fam.mu_inverse != "numeric") or any(is_mat(l) for l in fam.lam):
        return None
    start = {}
    simplex = [p for p in fam.params.values() if p.domain == "simplex"]
    for p in fam.params.values():
        # the simplex's coordinates together: 1/K each (1/2 each put p3 = 1 - p1 - p2 = 0 on the boundary at K = 3)
        start[p.symbol] = (sp.Rational(1, len(simplex) + 1) if p.domain == "simplex" else sp.Rational(1, 2)
                           if p.domain == "unit_interval" else sp.sympify(p.greater_than) + 1
                           if p.greater_than is not None else sp.Integer(1))
    lam0 = [sp.nsimplify(e.xreplace(start)) for e in fam.eta]
    conds = [(name, expr, domain) for name, expr, domain in fam.domain_conditions()]
    return {
        "lam": list(fam.lam), "eta": list(fam.eta), "mu": list(fam.mu_of_lam), "fisher": fam.fisher_matrix(),
        "A": fam.A,
        "ordinary": [(p.name, fam.ord_from_nat[p.symbol]) for p in fam.free_params], "lam0": lam0,
        "conditions": conds, "params": [p for p in fam.params.values()],
        # a family whose μ → ordinary map is closed (a module of check's, family_ir) solves it in that form, as the
        # engine does, not by Newton's method (which stalled at a near-singular bivariate Gaussian precision)
        "ordinary_mu": None if fam.mu_inverse == "numeric" else
        [(p.name, fam.ord_from_mu[p.symbol]) for p in fam.free_params],
        "mu_symbols": list(fam.mu),
    }

