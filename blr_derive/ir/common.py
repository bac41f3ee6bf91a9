"""What building any IR shares: dependency order, the names a generated module prints (checked distinct), the
marking of recipe text as prose, and the host conditions under which a program reads its inputs."""
from __future__ import annotations

import dataclasses

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.text import Prose


def toposort(items):
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
    eps = getattr(ir, "entry_points", None)
    if eps is not None:
        ir.entry_points = dataclasses.replace(
            eps, title=Prose(eps.title), notes=[Prose(x) for x in eps.notes],
            constants=[(name, _prose(value)) for name, value in eps.constants],
            functions=[dataclasses.replace(f, doc=Prose(f.doc)) for f in eps.functions])
    return ir


def _prose(value):
    if isinstance(value, dict):
        return {Prose(k): Prose(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(Prose(x) for x in value)
    return Prose(value)


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
        defined += [r for r, _ in sm.reductions] + [x for c in sm.chained for x in (c[0], c[2])]
    for sym in defined:
        if str(sym) in declared:
            _name_clash(declared[str(sym)], recipe)
    defined_names = {str(s_) for s_ in defined}
    for v in getattr(ir, "state", []):          # a state (a rule's ``state:``) sharing a name with another quantity
        if str(v.symbol) in declared or v.name in declared:
            _name_clash(("state", v.name), recipe, declared.get(str(v.symbol), declared.get(v.name)))
        if str(v.symbol) in defined_names or v.name in defined_names:
            _name_clash(("state", v.name), recipe)
    seen = {}
    exprs = [e for pair in getattr(ir, "assignments", []) for e in pair] + defined
    for sym in set().union(*[e.free_symbols | e.atoms(sp.MatrixSymbol) for e in exprs if isinstance(e, sp.Basic)]):
        if not isinstance(sym, (sp.Symbol, sp.MatrixSymbol)):
            continue
        name = str(sym)
        if name in seen and seen[name] != sym:
            _name_clash(declared.get(name, ("declaration", name)), recipe)
        seen[name] = sym


def _name_clash(what, recipe, other=None):
    kind, name = what
    file, spec, line = getattr(recipe, "file", None), getattr(recipe, "spec", None), None
    if spec is not None and hasattr(spec, "line_of"):
        if kind == "hyperparameter" and hasattr(spec.get("hyperparameters"), "line_of"):
            line = spec["hyperparameters"].line_of(name)
        elif kind == "state" and "approximations" in spec:
            line = spec.line_of("approximations")
        elif "loss" in spec:
            line = spec.line_of("loss")
    also = f"{other[0]} '{other[1]}'" if other else "used by the derivation for another quantity"
    raise SpecError(f"the name '{name}' is also {also}; rename the {kind}", file, line)


def camel(name):
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
