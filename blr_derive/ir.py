"""The update IR: what a generated module needs, independent of any target.

state (the family's ordinary parameters), hyperparameters with defaults, data inputs,
dimension bindings, oracle calls (with the state expression they are evaluated at),
random draws (none yet for the deterministic rules), and the assignments of the
update after common-subexpression elimination (``sympy.cse``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from . import __version__
from .derivation import Derivation
from .matcalc import is_mat


@dataclass
class Var:
    name: str
    symbol: object
    kind: str            # scalar | vector | matrix | elementwise
    description: str = ""


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
    state: list
    hyperparameters: list          # [(name, symbol, default, description)]
    data: list                     # [Var]
    dims: list                     # [(dim symbol, var name, axis)]
    oracles: list                  # [(name, description)]
    oracle_calls: list             # [OracleCall]
    random_draws: list             # [] for now
    assignments: list              # [(symbol, expr)] temporaries then new state values
    outputs: list                  # [(state name, symbol holding the new value)]
    equations: list                # plain-text update equations
    paper: str = ""
    description: str = ""
    extra: dict = field(default_factory=dict)


def _kind(sym, elementwise):
    if is_mat(sym):
        return "matrix" if sym.shape[1] != 1 else "vector"
    return "elementwise" if elementwise else "scalar"


def build_ir(D: Derivation, source: str = "") -> UpdateIR:
    r = D.recipe
    fam = r.family
    state = [Var(p.name, p.symbol, _kind(p.symbol, fam.elementwise), p.description) for p in fam.params.values()]
    data = [Var(d.name, d.symbol, _kind(d.symbol, False) if d.shape else "scalar", d.description) for d in r.data]
    hyper = [(h.name, h.symbol, h.default, h.description) for h in r.hyper]

    # dimension bindings: first state/data array carrying each dimension symbol
    dims = []
    seen = set()
    for v in state + data:
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

    # assignments: CSE over the scalar (elementwise) updates; matrix updates are already small
    outputs = [(name, sym) for name, sym, _ in D.updates]
    exprs = [e for _, _, e in D.updates]
    assignments = []
    if not any(is_mat(e) for e in exprs):
        reps, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("t"), optimizations=None)
        assignments.extend(reps)
        exprs = reduced
    for (name, sym, _), e in zip(D.updates, exprs):
        assignments.append((sym, e))
    for p in fam.params.values():
        if p.fixed:
            outputs.append((p.name, p.symbol))
    used = set()
    for _, e in assignments:
        used |= e.free_symbols
    hyper = [h for h in hyper if h[1] in used]

    return UpdateIR(
        recipe=r.name, title=r.title, family=fam.name, class_name=r.class_name or _camel(r.name),
        engine_version=__version__, source=source, elementwise=fam.elementwise, state=state,
        hyperparameters=hyper, data=data, dims=dims, oracles=oracles, oracle_calls=calls, random_draws=[],
        assignments=assignments, outputs=outputs, equations=D.update_lines(), paper=r.paper,
        description=r.description,
    )


def _camel(name):
    return "".join(w.capitalize() for w in name.split("_"))
