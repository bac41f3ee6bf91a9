"""The update IR: what a generated module needs, independent of any target.

state (the family's ordinary parameters plus auxiliary state added by passes, each with
an initial value), hyperparameters with defaults (numbers, booleans, tuples), data
inputs, dimension bindings, the step counter, oracle calls (with the state expression
they are evaluated at), random draws, and the assignments of the update in dependency
order after common-subexpression elimination (``sympy.cse``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from blr_derive import __version__
from blr_derive.derive.derivation import Derivation
from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.matcalc import is_mat
from blr_derive.core.text import Prose


@dataclass
class Var:
    name: str
    symbol: object
    kind: str            # scalar | vector | matrix | elementwise
    description: str = ""
    init: object = None  # sympy expression of hyperparameters, or None (must be given)
    family: bool = True  # a parameter of the family (False: auxiliary state)
    init_state: str | None = None   # initialised as a copy of this (family) state instead
    fixed: bool = False  # a fixed parameter of the family (never updated)


@dataclass
class HyperVar:
    name: str
    kind: str            # float | int | bool | tuple | choice
    default: object      # None: required
    description: str
    symbols: tuple       # the scalar symbols it binds (one, one per tuple element, or one boolean per choice)
    choices: tuple = ()


@dataclass
class OracleCall:
    symbol: object
    oracle: str
    argument: object
    description: str


@dataclass
class UpdateIR:
    recipe: str
    title: str
    family: str
    class_name: str
    engine_version: str
    source: str
    elementwise: bool
    state: list                    # [Var] family parameters then auxiliary state
    hyperparameters: list          # [HyperVar]
    data: list                     # [Var]
    dims: list                     # [(dim symbol, var name, axis)]
    oracles: list                  # [(name, description)]
    oracle_calls: list             # [OracleCall]
    random_draws: list             # [] for now
    assignments: list              # [(symbol, expr)] temporaries, definitions and new state values
    outputs: list                  # [(state name, symbol holding the new value)]
    equations: list                # plain-text update equations
    step_symbol: object = None     # the 1-based step counter, when the update uses it
    sampling: object = None        # derivation.Sampling for Monte Carlo recipes
    mean: str | None = None        # the state that is the parameter itself (torch targets)
    parameter: object = None       # else: what the parameter holds, an expression of the state (e.g. sign(lam))
    paper: str = ""
    description: str = ""
    extra: dict = field(default_factory=dict)
    symmetric: frozenset = frozenset()   # names of the symmetric matrices among state, data and oracle values


def _kind(sym, elementwise):
    if is_mat(sym):
        return "matrix" if sym.shape[1] != 1 else "vector"
    return "elementwise" if elementwise else "scalar"


def _toposort(items):
    """Stable topological order of [(symbol, expr)] by the symbols each expression uses."""
    defined = {s for s, _ in items}
    done, out, pending = set(), [], list(items)
    while pending:
        for i, (s, e) in enumerate(pending):
            if all(d in done or d not in defined or d == s for d in e.free_symbols):
                out.append((s, e))
                done.add(s)
                pending.pop(i)
                break
        else:
            raise SpecError("the update program has a dependency cycle: " + ", ".join(str(s) for s, _ in pending))
    return out


def build_ir(D: Derivation, source: str = "") -> UpdateIR:
    if getattr(D, "factorized", False):
        from blr_derive.candidates.product import build_factorized_ir
        return build_factorized_ir(D, source)
    r = D.recipe
    fam = r.family
    elementwise = fam.elementwise or D.elementwise
    hsyms = r.hyper_symbols()

    def init_of(name):
        if name not in r.state_init:
            return None
        try:
            return parse_expression(r.state_init[name], hsyms, what=f"state_init.{name}")
        except SpecError as exc:
            raise exc.located(r.file, r.state_init.line_of(name)) from None

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
    state += [Var(a.name, a.symbol, "elementwise", a.description, init_of(a.name) if a.name in r.state_init else a.init,
                  False) for a in D.aux_state]
    by_symbol = {p.symbol: p.name for p in fam.params.values()}
    for v in state:
        if v.init is not None and v.init in by_symbol:
            v.init_state = by_symbol[v.init]
    data = [Var(d.name, d.symbol, _kind(d.symbol, False) if d.shape else "scalar", d.description) for d in r.data]
    hyper = [HyperVar(h.name, h.kind, h.default, h.description,
                      (h.symbol,) if h.symbol is not None else tuple(es for _, es in h.elements),
                      tuple(c for c, _ in h.elements) if h.kind == "choice" else ()) for h in r.hyper]

    scalarized = D.elementwise and not any(is_mat(e) for _, _, e in D.updates)
    if scalarized:
        for v in state:
            v.kind = "elementwise"
    dims = []
    seen = set()
    for v in ([] if scalarized else state) + data:
        if is_mat(v.symbol):
            for axis, s in enumerate(v.symbol.shape):
                if isinstance(s, sp.Symbol) and s not in seen:
                    seen.add(s)
                    dims.append((s, v.name, axis))

    calls = [OracleCall(s, name, arg, desc) for (s, name, arg, desc) in D.oracle_calls]
    oracles = []
    for c in calls:
        if c.oracle not in [o[0] for o in oracles]:
            oracles.append((c.oracle, c.description))
    if D.sampling is not None:
        for _, o in D.sampling.calls:
            if o not in [x[0] for x in oracles]:
                oracles.append((o, f"{o} of ℓ at samples θ_k of q (Monte Carlo)"))

    outputs = [(name, sym) for name, sym, _ in D.updates]
    program = _toposort(list(D.defs) + [(sym, e) for _, sym, e in D.updates])
    syms = [s for s, _ in program]
    exprs = [e for _, e in program]
    assignments = []
    if not any(is_mat(e) for e in exprs):
        reps, exprs = sp.cse(exprs, symbols=sp.numbered_symbols("t_"), optimizations=None)
        # a temporary for a bare negation or a symbol saves nothing: put it back
        trivial = {t: e for t, e in reps if e.is_Symbol or (e.is_Mul and len(e.args) == 2 and e.args[0] == -1
                                                             and e.args[1].is_Symbol)}
        if trivial:
            reps = [(t, e.xreplace(trivial)) for t, e in reps if t not in trivial]
            exprs = [e.xreplace(trivial) for e in exprs]
        assignments.extend(reps)
    assignments.extend(zip(syms, exprs))
    assignments = _toposort(assignments)      # CSE temporaries may use values the program computes
    for p in fam.params.values():
        if p.fixed:
            outputs.append((p.name, p.symbol))
    used = set()
    for _, e in assignments:
        used |= e.free_symbols
    sampling = D.sampling
    if sampling is not None:
        used |= sampling.theta_expr.free_symbols | sp.sympify(sampling.samples).free_symbols
        for _, e in sampling.stats:
            used |= e.free_symbols
    for v in state:
        if v.init is not None and v.init_state is None:
            used |= v.init.free_symbols
    for key in ("dual", "message", "server") if getattr(D, "federated", None) else ():
        for _, e in D.federated[key]:
            used |= e.free_symbols
    hyper = [h for h in hyper if any(s in used for s in h.symbols)]

    mean = None
    if fam.gaussian_mean is not None:
        for p in fam.params.values():
            if p.symbol == fam.gaussian_mean:
                mean = p.name
    maps = _family_maps(fam)
    ir = UpdateIR(
        recipe=r.name, title=r.title, family=fam.name, class_name=r.class_name or _camel(r.name),
        engine_version=__version__, source=source, elementwise=elementwise, state=state,
        hyperparameters=hyper, data=data, dims=dims, oracles=oracles, oracle_calls=calls, random_draws=[],
        assignments=assignments, outputs=outputs, equations=D.update_lines(), step_symbol=D.step_symbol,
        sampling=sampling,
        mean=mean if r.parameter is None or r.parameter == fam.gaussian_mean else None,
        parameter=None if r.parameter is None or r.parameter == fam.gaussian_mean else r.parameter,
        paper=r.paper, description=r.description, extra={**({"family_maps": maps} if maps else {}),
                                                          **({"federated": D.federated} if getattr(D, "federated", None) else {})},
    )
    sym = {str(x) for x in fam.symmetric} | {d.name for d in r.data if d.symmetric}
    sym |= {str(c.symbol) for c in calls if c.oracle == "hess" and is_mat(c.symbol)}
    names = {v.name for v in state} | {v.name for v in data} | {str(c.symbol) for c in calls}
    ir.symmetric = frozenset(n for n in sym if n in names)
    check_printed_names(ir, r)
    return seal_text(ir)


def seal_text(ir):
    """Mark every piece of recipe or family text in an IR as :class:`~blr_derive.text.Prose` (principle 4): the
    code generators must render it through their escaping filters, never paste it.  Returns ``ir``."""
    for key in ("title", "paper", "description", "source", "family"):
        setattr(ir, key, Prose(getattr(ir, key)))
    ir.equations = [Prose(x) for x in ir.equations]
    for v in list(ir.state) + list(ir.data) + list(ir.hyperparameters):
        v.description = Prose(v.description)
    if hasattr(ir, "oracles"):
        ir.oracles = [(name, Prose(desc)) for name, desc in ir.oracles]
        for c in ir.oracle_calls:
            c.description = Prose(c.description)
    if getattr(ir, "blocks", None):
        ir.blocks = [tuple(Prose(x) if i in (1, 3, 4) else x for i, x in enumerate(b)) for b in ir.blocks]
    if getattr(ir, "plate", None):
        ir.plate["data"] = [(n, s_, k, Prose(d)) for n, s_, k, d in ir.plate["data"]]
    fed = ir.extra.get("federated") if hasattr(ir, "extra") else None
    if fed:
        fed["equations"] = [Prose(x) for x in fed["equations"]]
    return ir


def check_printed_names(ir, recipe):
    """Distinct quantities of an update must print as distinct names: a declared hyperparameter or data name that
    the derivation also uses for one of its own quantities (``g`` next to the gradient ``g``, ``H`` next to the
    Hessian), or two different symbols under one name, is a located error — never two values under one name in
    the generated code, nor two quantities merged into one sympy symbol."""
    declared = {}
    for h in ir.hyperparameters:
        for s_ in h.symbols:
            declared[str(s_)] = ("hyperparameter", h.name)
    for v in ir.data:
        declared[str(v.symbol)] = ("data", v.name)
    defined = [s_ for s_, _ in getattr(ir, "assignments", [])]
    defined += [c.symbol for c in getattr(ir, "oracle_calls", [])]
    sm = getattr(ir, "sampling", None)
    if sm is not None:
        defined += [sm.eps, sm.theta] + [k for k, _ in sm.calls] + [a for a, _ in sm.stats]
    for sym in defined:
        if str(sym) in declared:
            _name_clash(declared[str(sym)], recipe)
    seen = {}
    exprs = [e for pair in getattr(ir, "assignments", []) for e in pair] + defined
    for sym in set().union(*[e.free_symbols | e.atoms(sp.MatrixSymbol) for e in exprs if isinstance(e, sp.Basic)]):
        if not isinstance(sym, (sp.Symbol, sp.MatrixSymbol)):
            continue
        name = str(sym)
        if name in seen and seen[name] != sym:
            _name_clash(declared.get(name, ("declaration", name)), recipe)
        seen[name] = sym


def _name_clash(what, recipe):
    kind, name = what
    file, spec, line = getattr(recipe, "file", None), getattr(recipe, "spec", None), None
    if spec is not None and hasattr(spec, "line_of"):
        if kind == "hyperparameter" and hasattr(spec.get("hyperparameters"), "line_of"):
            line = spec["hyperparameters"].line_of(name)
        elif "loss" in spec:
            line = spec.line_of("loss")
    raise SpecError(f"the name '{name}' is also used by the derivation for another quantity; rename the {kind}",
                    file, line)


def _family_maps(fam):
    """For families whose μ → λ map has no closed form (digamma etc.): what the generated module needs to
    solve ∇A(λ) = μ by Newton's method (λ(ordinary), μ(λ), F(λ) = ∇²A, ordinary(λ), Ω, a starting λ)."""
    if getattr(fam, "mu_inverse", "symbolic") != "numeric" or any(is_mat(l) for l in fam.lam):
        return None
    start = {}
    for p in fam.params.values():
        start[p.symbol] = sp.Rational(1, 2) if p.domain in ("unit_interval", "simplex") else sp.Integer(1)
    lam0 = [sp.nsimplify(e.xreplace(start)) for e in fam.eta]
    conds = [(name, expr, domain) for name, expr, domain in fam.domain_conditions()]
    return {
        "lam": list(fam.lam), "eta": list(fam.eta), "mu": list(fam.mu_of_lam), "fisher": fam.fisher_matrix(),
        "ordinary": [(p.name, fam.ord_from_nat[p.symbol]) for p in fam.free_params], "lam0": lam0,
        "conditions": conds, "params": [p for p in fam.params.values()],
    }


def _camel(name):
    return "".join(w.capitalize() for w in name.split("_"))


def usage_condition(expr, sym):
    """A host condition under which evaluating ``expr`` needs ``sym`` (sound, not minimal)."""
    if expr == sym:
        return sp.true
    if not isinstance(expr, sp.Basic) or not expr.has(sym):
        return sp.false
    if isinstance(expr, sp.Piecewise):
        if any(c.has(sym) for _, c in expr.args):
            return sp.true                       # conditions are evaluated whenever the expression is
        out, earlier = [], []
        for e, c in expr.args:
            u = usage_condition(e, sym)
            if u != sp.false:
                out.append(sp.And(c, u, *[sp.Not(x) for x in earlier]))
            earlier.append(c)
        return sp.Or(*out) if out else sp.false
    return sp.Or(*[usage_condition(a, sym) for a in expr.args])


def need_conditions(assignments, outputs, inputs):
    """For each input symbol, the host condition under which the program reads it."""
    need = {sym: sp.true for _, sym in outputs}
    # one backward sweep over the ordered program: a value is needed where a needed value uses it
    for sym, expr in reversed(assignments):
        n = need.get(sym, sp.false)
        if n == sp.false:
            continue
        for s2 in expr.free_symbols:
            u = usage_condition(expr, s2)
            if u != sp.false:
                need[s2] = sp.Or(need.get(s2, sp.false), sp.And(n, u))
    return {x: sp.simplify_logic(need.get(x, sp.false)) if need.get(x, sp.false) not in (sp.true, sp.false)
            else need.get(x, sp.false) for x in inputs}
