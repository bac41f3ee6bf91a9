"""Federated Bayesian ADMM's client and server steps as entry points of the generated module.

The rules ``federated_dual`` and ``federated_server`` derive the dual step, the client message and the server's
solve (a :class:`~blr_derive.rules.base.FederatedSteps` record, in site parameters of the recipe's family); here
they become generic :class:`~blr_derive.ir.model.EntryPoint` functions that any target renders with its entry-point
template (the round driver is ``blr_derive/runtime/fedrun.py``)."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.matexpr import is_mat
from blr_derive.core.nodes import ArraySum, ZerosLike
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
    objective = _global_objective(fed, state, hyper, dims, fixed)
    if objective is not None:
        functions.append(objective)
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
    if objective is not None:
        constants.append(("GLOBAL_OBJECTIVE_KEYS", GLOBAL_OBJECTIVE_KEYS))
        notes.append("The bound per round: global_objective(global_state, client_loss_sum), client_loss_sum the sum "
                     "of the")
        notes.append("clients' E_{q_g}[loss_k] (each client's loss at the mean of q_g: the delta method).")
    return EntryPoints("federated Bayesian ADMM", notes, constants, functions)


#: the keys of the mapping ``global_objective`` returns
GLOBAL_OBJECTIVE_KEYS = ("objective", "expected_loss", "prior", "entropy")


def _global_objective(fed: FederatedSteps, state: list[Var], hyper: list[HyperVar], dims: list[Dim],
                      fixed: list[Var]) -> EntryPoint | None:
    """``global_objective(global_state, client_loss_sum)``: L(q_g) = Σ_k E_{q_g}[ℓ_k]/τ + E_{q_g}[ℓ_0] − H(q_g)
    from the rule's closed-form terms (``FederatedSteps.prior_expectation``, ``entropy``) and the clients' sum,
    summed over the coordinates of a mean-field state; None where the terms do not close."""
    E0, H = fed.prior_expectation, fed.entropy
    if E0 is None or H is None:
        return None
    symbols = {v.name: v.symbol for v in state}
    used = E0.free_symbols | H.free_symbols | (fed.temperature.free_symbols
                                               if isinstance(fed.temperature, sp.Basic) else set())
    family = [v for v in state if v.family]
    hnames = _hyper_of([E0, H, sp.sympify(fed.temperature)], hyper)
    known = {v.symbol for v in family} | {h.symbols[0] for h in hyper if h.name in hnames}
    dim = [(d.symbol, symbols[d.var]) for d in dims if d.axis == 0 and d.var in symbols and d.symbol in used]
    read = used | {s for _, s in dim}   # the dimensions are read from the arrays of q_g
    reads = [Read(v.symbol, "global_state", v.name) for v in family if v.symbol in read]
    known |= {d for d, _ in dim}
    if not used <= known:
        return None                     # a symbol the module cannot bind (a hyperparameter the update never reads)
    elementwise = not any(is_mat(v.symbol) for v in family)
    first = family[0].symbol
    if elementwise:                     # per coordinate: summed over the state's coordinates (a constant term too)
        E0, H = (ArraySum(ZerosLike(first) + e) for e in (E0, H))
    loss = sp.Symbol("_client_loss", real=True)
    e_sym, p_sym, h_sym = (sp.Symbol(n, real=True) for n in ("_expected_loss", "_prior", "_entropy"))
    total = " summed over the coordinates of the (mean-field) state," if elementwise else ""
    tau = fed.temperature != 1
    doc = ("The global objective of Bayesian ADMM at q_g = global_state, L(q_g) = Σ_k E_{q_g}[ℓ_k]/τ + "
           "E_{q_g}[ℓ_0] − H(q_g) (Khan & Rue 2023, Eq. 2 with the loss Σ_k ℓ_k/τ + ℓ_0; the server's fixed point, "
           "Eq. 60, is its stationary point): ``client_loss_sum`` is Σ_k E_{q_g}[ℓ_k] as the clients give it (with "
           "abstract losses each its loss at the mean of q_g, the delta method, or a mean over samples of q_g; an "
           f"array is summed), divided by the temperature τ{' = ' + str(fed.temperature) if tau else ' (1 here)'}; "
           "E_{q_g}[ℓ_0] is the prior's expectation and H(q_g) = A(λ) − ⟨λ, μ⟩ − E_q[log h] the family's entropy "
           f"(App. B), both derived in closed form in the parameters of q_g,{total} every constant of ℓ_0 as "
           "written kept.  Returns {'objective': L, 'expected_loss': Σ_k E[ℓ_k]/τ + E[ℓ_0], 'prior': E[ℓ_0], "
           "'entropy': H} (GLOBAL_OBJECTIVE_KEYS).")
    return EntryPoint("global_objective", doc, ["global_state", "client_loss_sum"], hnames, reads,
                      numbers=[(loss, "client_loss_sum")], dims=dim,
                      assignments=[(p_sym, E0), (h_sym, H), (e_sym, loss / fed.temperature + p_sym)],
                      returns=[("objective", e_sym - h_sym), ("expected_loss", e_sym), ("prior", p_sym),
                               ("entropy", h_sym)])
