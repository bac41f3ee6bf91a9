"""Drive the generated functions of a federated recipe (catalog/generated/numpy/fed_*.py).

The generated module holds the derived algorithm (``step`` is the client's BLR step, ``dual_step``,
``client_message``, ``server_step``; see blr_derive/rules/federated.py and blr_derive/ir/federated.py); this
runner only moves data around it:

* :func:`simulate` — every client and the server in one process (quick experiments, tests);
* :func:`run_rank` — one ``torch.distributed`` rank (any backend; gloo on CPU): the clients' messages
  are summed by ``dist.reduce`` to the server rank, which runs ``server_step`` and ``dist.broadcast``-s the
  global parameters back.  With ``dedicated_server=True`` the server rank holds no data (it contributes zero
  messages) and the other ranks are the K clients; otherwise every rank is a client and rank ``server``
  also runs the server step.

A round: the clients start from their previous local state (initially the broadcast global state), or with
``client_start="global"`` from the broadcast global parameters (their other state, momentum and step count, kept:
the official IVON-ADMM's deep-learning runs), or with ``client_start="fresh"`` as new clients at the global
parameters (momentum and step count reset: its toy example, a new optimizer per round); they take ``local_steps``
client steps on their own oracles (``step_hyper(round, local_step)`` may return hyperparameters for that step, a
learning-rate schedule), update their duals, send their messages; the server sums them and solves for the new
global parameters.

The bound per round: with ``client_loss`` (one callable per client in :func:`simulate`, this rank's in
:func:`run_rank`), after every round each client gives ``client_loss(global_state)``, its E_{q_g}[ℓ_k] at the new
global state (its loss at the mean of q_g for the delta method, a mean over samples of q_g for a sampling recipe);
the numbers are summed (``dist.all_reduce`` across ranks) and the module's ``global_objective`` adds the prior's
expectation and subtracts the entropy of q_g: ``callback(..., objective=...)`` receives its mapping
(L(q_g) under ``"objective"``).
"""
from __future__ import annotations

import numpy as np

#: how a client starts a round (see the module docstring)
CLIENT_STARTS = ("previous", "global", "fresh")


def _copy(d):
    return {k: np.array(v, dtype=float, copy=True) for k, v in d.items()}


def _client(mod, global_state, hyper):
    """A client's initial state: the broadcast global parameters, other state (momentum, ...) at its defaults."""
    return _copy(mod.init(hyper, **{k: v for k, v in global_state.items() if k in mod.STATE}))


def _known(mod, hyper):
    """The hyperparameters of the generated module; a name it does not have is an error (it would be ignored)."""
    hyper = dict(hyper or {})
    unknown = sorted(k for k in hyper if k not in mod.HYPERPARAMETERS)
    if unknown:
        raise TypeError(f"{mod.RECIPE}: unknown hyperparameters {unknown}; known: {list(mod.HYPERPARAMETERS)}")
    return hyper


def _start(mod, state, global_state, hyper, how):
    if how not in CLIENT_STARTS:
        raise ValueError(f"client_start must be one of {CLIENT_STARTS}, got {how!r}")
    if how == "previous":
        return state
    if how == "fresh":
        return _client(mod, global_state, hyper)
    return {**state, **_copy({k: v for k, v in global_state.items() if k in state})}


def _server(mod, total, K, g, hyper):
    """The server's step; a family with fixed parameters (FEDERATED_FIXED) reads them from the previous global
    state, which the step passes on."""
    if getattr(mod, "FEDERATED_FIXED", ()):
        return mod.server_step(total, K, g, **hyper)
    return mod.server_step(total, K, **hyper)


def _global_keys(mod):
    """The global state's keys as server_step returns them: the solved parameters, then the fixed ones."""
    return list(mod.FEDERATED_GLOBALS) + list(getattr(mod, "FEDERATED_FIXED", ()))


def _objective(mod, client_loss_sum, g, hyper):
    """The module's global objective at ``g`` from the clients' summed expected losses (a federated module whose
    family's entropy or prior expectation does not close has none: a TypeError says so)."""
    if not hasattr(mod, "global_objective"):
        raise TypeError(f"{mod.RECIPE}: the generated module has no global_objective (the entropy of its family or "
                        "the expectation of its prior has no closed form); run without client_loss")
    return mod.global_objective(g, client_loss_sum, **hyper)


def client_round(mod, state, dual, global_state, oracles, *, local_steps=1, hyper=None, rng=None, data=None,
                 step_hyper=None, round_index=0):
    """One client's part of a round: local BLR steps, the dual step and the message (new state, dual, message).
    ``data``: the client's own data of an explicit loss (its rows X, y, ...), next to the round's prior site;
    ``step_hyper(round, local_step)``: hyperparameters of that local step (a schedule), over ``hyper``."""
    step_hp = _known(mod, hyper)
    data = {**(data or {}), **mod.client_data(global_state, dual)}
    for i in range(local_steps):
        kw = {"rng": rng} if rng is not None else {}
        hp = {**step_hp, **_known(mod, step_hyper(round_index, i))} if step_hyper is not None else step_hp
        state = mod.step(state, oracles=oracles, data=data, **kw, **hp)
    dual = mod.dual_step(state, global_state, dual, **step_hp)
    return state, dual, mod.client_message(state, dual, **step_hp)


def simulate(mod, client_oracles, global_state, *, rounds, local_steps=1, hyper=None, rngs=None, client_states=None,
             callback=None, client_data=None, client_start="previous", step_hyper=None, client_loss=None):
    """Run ``rounds`` rounds with K = len(client_oracles) clients in this process (``client_data``: each client's
    data of an explicit loss, a list of K mappings; ``client_start`` and ``step_hyper``: see the module docstring).

    Returns ``(global_state, client_states, duals)``; ``callback(round, global_state, client_states, duals)``
    is called after every round (e.g. to record iterates).  ``client_loss``: K callables, ``client_loss[k](g)``
    client k's E_{q_g}[ℓ_k] at the global state g; the callback then also gets ``objective=``, the module's
    ``global_objective(g, Σ_k client_loss[k](g))`` after the round (the bound per round)."""
    K = len(client_oracles)
    if client_loss is not None and len(client_loss) != K:
        raise ValueError(f"client_loss has {len(client_loss)} callables for {K} clients")
    hyper = _known(mod, hyper)
    g = _copy(global_state)
    states = [_copy(s) for s in client_states] if client_states is not None else [_client(mod, g, hyper) for _ in range(K)]
    duals = [mod.init_dual(s) for s in states]
    rngs = rngs or [None] * K
    client_data = client_data or [None] * K
    for r in range(rounds):
        total = None
        for k in range(K):
            start = _start(mod, states[k], g, hyper, client_start) if r else states[k]
            states[k], duals[k], msg = client_round(mod, start, duals[k], g, client_oracles[k],
                                                    local_steps=local_steps, hyper=hyper, rng=rngs[k],
                                                    data=client_data[k], step_hyper=step_hyper, round_index=r)
            total = msg if total is None else {n: total[n] + msg[n] for n in msg}
        g = _server(mod, total, K, g, hyper)
        if client_loss is not None:
            objective = _objective(mod, sum(float(np.sum(f(g))) for f in client_loss), g, hyper)
            if callback is not None:
                callback(r, g, states, duals, objective=objective)
        elif callback is not None:
            callback(r, g, states, duals)
    return g, states, duals


def run_rank(mod, oracles, global_state, *, rounds, local_steps=1, hyper=None, rng=None, state=None, server=0,
             dedicated_server=False, callback=None, data=None, client_start="previous", step_hyper=None,
             client_loss=None):
    """This process's part of ``rounds`` rounds over the default ``torch.distributed`` process group.

    ``oracles`` are this rank's (ignored on a dedicated server).  Every rank passes the same initial
    ``global_state``; every rank returns the final global state (broadcast by the server).  ``client_loss``: this
    rank's E_{q_g}[ℓ_k] as a callable of the global state (ignored on a dedicated server, which adds 0); given on
    every rank, the ranks' values are summed by ``dist.all_reduce`` after each round and every rank's
    ``callback(round, global_state, state, dual, objective=...)`` gets the module's ``global_objective``."""
    import torch
    import torch.distributed as dist
    rank, world = dist.get_rank(), dist.get_world_size()
    K = world - 1 if dedicated_server else world
    is_client = not (dedicated_server and rank == server)
    hyper = _known(mod, hyper)
    g = _copy(global_state)
    state = _copy(state) if state is not None else _client(mod, g, hyper)
    dual = mod.init_dual(state)
    zero = {n: np.zeros_like(v) for n, v in mod.client_message(state, dual, **hyper).items()}
    for r in range(rounds):
        if is_client:
            start = _start(mod, state, g, hyper, client_start) if r else state
            state, dual, msg = client_round(mod, start, dual, g, oracles, local_steps=local_steps, hyper=hyper,
                                            rng=rng, data=data, step_hyper=step_hyper, round_index=r)
        else:
            msg = zero
        names = list(mod.FEDERATED_MESSAGES)
        flat = torch.from_numpy(np.concatenate([np.asarray(msg[n], dtype=np.float64).ravel() for n in names]))
        dist.reduce(flat, dst=server, op=dist.ReduceOp.SUM)           # the server sums the clients' messages
        if rank == server:
            parts = np.split(flat.numpy(), np.cumsum([np.size(zero[n]) for n in names])[:-1])
            total = {n: p.reshape(np.shape(zero[n])) for n, p in zip(names, parts)}
            g = _server(mod, total, K, g, hyper)
        keys = _global_keys(mod)            # one order on every rank (a rank's own dict may list them otherwise)
        gflat = torch.from_numpy(np.concatenate([np.asarray(g[n], dtype=np.float64).ravel() for n in keys]))
        dist.broadcast(gflat, src=server)                              # ... and broadcasts q_g
        parts = np.split(gflat.numpy(), np.cumsum([np.size(g[n]) for n in keys])[:-1])
        g = {n: p.reshape(np.shape(g[n])).copy() for n, p in zip(keys, parts)}
        if client_loss is not None:
            own = float(np.sum(client_loss(g))) if is_client else 0.0
            loss = torch.tensor([own], dtype=torch.float64)
            dist.all_reduce(loss, op=dist.ReduceOp.SUM)               # Σ_k E_{q_g}[ℓ_k] over the clients
            objective = _objective(mod, float(loss[0]), g, hyper)
            if callback is not None:
                callback(r, g, state, dual, objective=objective)
        elif callback is not None:
            callback(r, g, state, dual)
    return g
