"""Federated Bayesian ADMM's client and server steps as entry points of the generated module.

The rules ``federated_dual`` and ``federated_server`` derive the dual step, the client message and the server's
solve (a :class:`~blr_derive.rules.base.FederatedSteps` record, in site parameters of the recipe's family); here
they become generic :class:`~blr_derive.ir.model.EntryPoint` functions that any target renders with its entry-point
template (the round driver is ``blr_derive/runtime/fedrun.py``)."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.matexpr import is_mat
from blr_derive.core.nodes import ZerosLike
from blr_derive.core.types import Expr, Sym, Text
from blr_derive.ir.model import Constant, Dim, EntryPoint, EntryPoints, HyperVar, Read, Var
from blr_derive.rules.base import RULES, FederatedSteps


def _hyper_of(exprs: list[Expr], hyper: list[HyperVar]) -> list[str]:
    free = set().union(*[e.free_symbols for e in exprs]) if exprs else set()
    return [h.name for h in hyper if h.kind in ("float", "int", "bool") and h.symbols[0] in free]


def _sym(name: str, like: Expr | None = None) -> Sym:
    return sp.MatrixSymbol(name, *like.shape) if like is not None and is_mat(like) else sp.Symbol(name, real=True)


def federated_entry_points(fed: FederatedSteps, state: list[Var], hyper: list[HyperVar],
                           dims: list[Dim]) -> EntryPoints:
    """``client_data``, ``init_dual``, ``dual_step``, ``client_message``, ``server_step`` of a federated recipe."""
    state_reads = [Read(v.symbol, "state", v.name) for v in state]
    symbols = {v.name: v.symbol for v in state}
    glob = [Read(_sym(g, symbols.get(p)), "global_state", p) for p, g in fed.globals]
    duals = [Read(_sym(d, e), "dual", d) for d, e in fed.eta]
    msgs = [Read(sp.Symbol(m, real=True) if not is_mat(e) else sp.MatrixSymbol(m, *e.shape), "message_sum", m)
            for m, (_, e) in zip(fed.messages, fed.message)]
    server_syms = [(_sym(p, symbols.get(p)), e) for p, e in fed.server]
    server_free = set().union(*[e.free_symbols for _, e in fed.server])
    dim: list[tuple[Sym, Sym]] = []
    if dims and dims[0].symbol in server_free:
        vec = [s for s, _, _ in msgs if is_mat(s) and s.shape[1] == 1]
        dim = [(dims[0].symbol, vec[0] if vec else msgs[0].symbol)]
    # parameters of the family the server reads but does not solve for (fixed ones, e.g. a known precision): q_g
    # shares them with the clients, so server_step reads them from the previous global state and passes them on
    solved = {p for p, _ in fed.server}
    fixed = [v for v in state if v.symbol in server_free and v.name not in solved]
    fixed_reads = [Read(v.symbol, "global_state", v.name) for v in fixed]
    def state_dims(exprs: list[Expr]) -> list[tuple[Sym, Sym]]:
        """The dimensions the expressions read (e.g. I_P in a precision's natural parameter), from the state."""
        free: set = set()
        for e in exprs:         # the symbols and the shapes of inverses (Σ⁻¹ is printed as a solve with I_P)
            free |= e.free_symbols | {x for m in e.atoms(sp.Inverse) for x in m.shape}
        return [(d.symbol, symbols[d.var]) for d in dims if d.axis == 0 and d.var in symbols and d.symbol in free]

    rule = {n: RULES[n] for n in ("federated_local", "federated_dual", "federated_server")}
    functions = [
        EntryPoint("client_data", "The ``data`` of a client's ``step``: the server's broadcast parameters and the "
                   "client's dual.", ["global_state", "dual"], None, glob + duals,
                   returns=[(str(s), s) for s, _, _ in glob + duals]),
        EntryPoint("init_dual", "Zero dual natural parameters, shaped like the natural parameters of ``state``.",
                   ["state"], None, state_reads, returns=[(d, ZerosLike(e)) for d, e in fed.eta],
                   dims=state_dims([e for _, e in fed.eta])),
        EntryPoint("dual_step", f"Dual step (rule federated_dual, {rule['federated_dual'].equation}): "
                   f"{rule['federated_dual'].summary}.", ["state", "global_state", "dual"],
                   _hyper_of([e for _, e in fed.dual], hyper), state_reads + glob + duals,
                   returns=list(fed.dual), dims=state_dims([e for _, e in fed.dual])),
        EntryPoint("client_message", "What a client sends after its dual step: its site η_k + ρ_s λ_k (rule "
                   "federated_server), one array per natural-parameter block.", ["state", "dual"],
                   _hyper_of([e for _, e in fed.message], hyper), state_reads + duals, returns=list(fed.message),
                   dims=state_dims([e for _, e in fed.message])),
        EntryPoint("server_step", f"Server step (rule federated_server, {rule['federated_server'].equation}): "
                   f"{rule['federated_server'].summary}; ``message_sum`` is the sum over the ``clients`` clients "
                   "of client_message" + ("; ``global_state`` is the previous global state, whose fixed parameters "
                                          f"({', '.join(v.name for v in fixed)}) q_g keeps" if fixed else "") + ".",
                   ["message_sum", "clients"] + (["global_state"] if fixed else []),
                   _hyper_of([e for _, e in fed.server], hyper), msgs + fixed_reads, counts=[(fed.count, "clients")],
                   dims=dim, assignments=server_syms,
                   returns=[(p, _sym(p, symbols.get(p))) for p, _ in fed.globals] + [(v.name, v.symbol) for v in fixed]),
    ]
    notes: list[Text] = [f"Derived by the rules {', '.join(rule)}.  One round: the server broadcasts",
             "its parameters; each client runs step(state, oracles=..., data=client_data(global_state, dual)) on",
             "its own loss, then dual = dual_step(...), and sends client_message(state, dual); the server sums",
             "the messages over the K clients and calls server_step(message_sum, K)."]
    constants: list[tuple[str, Constant]] = [
        ("FEDERATED_GLOBALS", dict(fed.globals)), ("FEDERATED_DUALS", tuple(fed.duals)),
        ("FEDERATED_MESSAGES", tuple(fed.messages)), ("FEDERATED_EQUATIONS", tuple(fed.equations))]
    if fixed:
        constants.append(("FEDERATED_FIXED", tuple(v.name for v in fixed)))
        notes.append("The server also reads the fixed parameters of q_g: server_step(message_sum, K, global_state).")
    return EntryPoints("federated Bayesian ADMM", notes, constants, functions)
