"""What building any IR shares: dependency order, the names a generated module prints (checked distinct), the
marking of recipe text as prose, and the host conditions under which a program reads its inputs."""
from __future__ import annotations

import dataclasses
from typing import NoReturn, TypeVar

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.text import Prose
from blr_derive.core.types import Assignment, Expr, Sym
from blr_derive.core.yamlio import LDict
from blr_derive.ir.model import Block, Constant, FactorizedIR, UpdateIR

AnyIR = TypeVar("AnyIR", UpdateIR, FactorizedIR)


def toposort(items: list[Assignment]) -> list[Assignment]:
    """Stable topological order of [(symbol, expr)] by the symbols each expression uses."""
    defined = {s for s, _ in items}
    done: set[Sym] = set()
    out: list[Assignment] = []
    pending = list(items)
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


def seal_text(ir: AnyIR) -> AnyIR:
    """Mark every piece of recipe or family text in an IR as :class:`~blr_derive.core.text.Prose` (principle 4): the
    code generators must render it through their escaping filters, never paste it.  Returns ``ir``."""
    ir.title, ir.paper, ir.description = Prose(ir.title), Prose(ir.paper), Prose(ir.description)
    ir.source, ir.family = Prose(ir.source), Prose(ir.family)
    ir.equations = [Prose(x) for x in ir.equations]
    for v in ir.state + ir.data:
        v.description = Prose(v.description)
    for h in ir.hyperparameters:
        h.description = Prose(h.description)
    if isinstance(ir, UpdateIR):
        ir.oracles = [(name, Prose(desc)) for name, desc in ir.oracles]
        ir.oracle_calls = [c._replace(description=Prose(c.description)) for c in ir.oracle_calls]
        eps = ir.entry_points
        if eps is not None:
            ir.entry_points = dataclasses.replace(
                eps, title=Prose(eps.title), notes=[Prose(x) for x in eps.notes],
                constants=[(name, _prose(value)) for name, value in eps.constants],
                functions=[dataclasses.replace(f, doc=Prose(f.doc)) for f in eps.functions])
        obj = getattr(ir, "objective", None)
        if obj is not None:
            ir.objective = dataclasses.replace(
                obj, title=Prose(obj.title), notes=[Prose(x) for x in obj.notes],
                constants=[(name, _prose(value)) for name, value in obj.constants],
                functions=[dataclasses.replace(f, doc=Prose(f.doc)) for f in obj.functions])
    else:
        ir.blocks = [Block(b.name, Prose(b.candidate), b.scope, Prose(b.rho), Prose(b.approximation))
                     for b in ir.blocks]
        if ir.plate is not None:
            ir.plate["data"] = [v._replace(description=Prose(v.description)) for v in ir.plate["data"]]
    return ir


def _prose(value: Constant) -> Constant:
    if isinstance(value, dict):
        return {Prose(k): Prose(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(Prose(x) for x in value)
    return Prose(value)


def check_printed_names(ir: UpdateIR | FactorizedIR, recipe) -> None:
    """Distinct quantities of an update must print as distinct names: a declared hyperparameter or data name that
    the derivation also uses for one of its own quantities (``g`` next to the gradient ``g``, ``H`` next to the
    Hessian), or two different symbols under one name, is a located error — never two values under one name in
    the generated code, nor two quantities merged into one sympy symbol."""
    declared: dict[str, tuple[str, str]] = {}
    for h in ir.hyperparameters:
        for s_ in h.symbols:
            declared[str(s_)] = ("hyperparameter", h.name)
    for v in ir.data:
        declared[str(v.symbol)] = ("data", v.name)
    defined = [s_ for s_, _ in ir.assignments]
    if isinstance(ir, UpdateIR):
        defined += [c.symbol for c in ir.oracle_calls]
        sm = ir.sampling
        if sm is not None:
            defined += [sm.eps, sm.theta] + [k for k, _ in sm.calls] + [a for a, _ in sm.stats]
            defined += [r for r, _ in sm.reductions] + [x for c in sm.chained for x in (c.symbol, c.point)]
    for sym in defined:
        if str(sym) in declared:
            _name_clash(declared[str(sym)], recipe)
    defined_names = {str(s_) for s_ in defined}
    for v in ir.state:          # a state (a rule's ``state:``) sharing a name with another quantity
        if str(v.symbol) in declared or v.name in declared:
            _name_clash(("state", v.name), recipe, declared.get(str(v.symbol), declared.get(v.name)))
        if str(v.symbol) in defined_names or v.name in defined_names:
            _name_clash(("state", v.name), recipe)
    seen: dict[str, Sym] = {}
    exprs = [e for pair in ir.assignments for e in pair] + defined
    for sym in set().union(*[e.free_symbols | e.atoms(sp.MatrixSymbol) for e in exprs if isinstance(e, sp.Basic)]):
        if not isinstance(sym, (sp.Symbol, sp.MatrixSymbol)):
            continue
        name = str(sym)
        if name in seen and seen[name] != sym:
            _name_clash(declared.get(name, ("declaration", name)), recipe)
        seen[name] = sym


def _name_clash(what: tuple[str, str], recipe, other: tuple[str, str] | None = None) -> NoReturn:
    kind, name = what
    file, spec, line = recipe.file, recipe.spec, None
    if isinstance(spec, LDict):         # a recipe built from a plain mapping has no lines
        if kind == "hyperparameter" and isinstance(spec.get("hyperparameters"), LDict):
            line = spec["hyperparameters"].line_of(name)
        elif kind == "state" and "approximations" in spec:
            line = spec.line_of("approximations")
        elif "loss" in spec:
            line = spec.line_of("loss")
    also = f"{other[0]} '{other[1]}'" if other else "used by the derivation for another quantity"
    raise SpecError(f"the name '{name}' is also {also}; rename the {kind}", file, line)


def camel(name: str) -> str:
    return "".join(w.capitalize() for w in name.split("_"))


def usage_condition(expr: Expr, sym: Sym) -> Expr:
    """A host condition under which evaluating ``expr`` needs ``sym`` (sound, not minimal)."""
    if expr == sym:
        return sp.true
    if not isinstance(expr, sp.Basic) or not expr.has(sym):
        return sp.false
    if isinstance(expr, sp.Piecewise):
        if any(c.has(sym) for _, c in expr.args):
            return sp.true                       # conditions are evaluated whenever the expression is
        out: list[Expr] = []
        earlier: list[Expr] = []
        for e, c in expr.args:
            u = usage_condition(e, sym)
            if u != sp.false:
                out.append(sp.And(c, u, *[sp.Not(x) for x in earlier]))
            earlier.append(c)
        return sp.Or(*out) if out else sp.false
    return sp.Or(*[usage_condition(a, sym) for a in expr.args])


def need_conditions(assignments: list[Assignment], outputs: list[tuple[str, Sym]],
                    inputs: list[Sym]) -> dict[Sym, Expr]:
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
