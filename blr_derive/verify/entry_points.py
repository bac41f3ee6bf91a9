"""``blr-derive check``: a generated module's other entry points (federated Bayesian ADMM's ``dual_step``,
``client_message``, ``server_step`` and its bound ``global_objective``; Sec. 5.4, Eq. 60 of the paper and
Möllenhoff et al. 2025) against the symbolic expressions they were rendered from, at random inputs.

One round of two clients is played: random valid client states and a random valid global state (drawn as
``compare_update`` draws a state), random duals of the shapes ``init_dual`` gives, random hyperparameters; the
generated ``dual_step`` and ``client_message`` are compared with the derivation's expressions evaluated by sympy
(``families/symbolic.evaluate``) on the same values, then the clients' messages are summed and the generated
``server_step`` (the solve of the global natural parameters for the family's parameters) is compared with the
symbolic solve.  A server state outside the family (the module's domain check raises FloatingPointError, e.g. a
precision made negative by the random duals) or a non-finite symbolic value makes the input skipped, like the
step's own check.  This is what runs the server's solve at all: a solve the printer could not do (a symmetric
matrix that is not positive definite) or a name the step reads unbound fails here, not in a user's run.
"""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.core.matexpr import is_mat
from blr_derive.core.nodes import ArraySum, ZerosLike
from blr_derive.families.symbolic import evaluate
from blr_derive.ir.model import EntryPoint
from blr_derive.verify.state import dimension_sizes
from blr_derive.verify.update import _random_state

CLIENTS = 2


def _symbolic(f: EntryPoint, args: dict, hp: dict, hyper, defaults: dict) -> dict:
    """The entry point's returns evaluated from its IR: reads, counts, dimensions, hyperparameters (flags and
    choices at the module's defaults), then the assignments in order.  Values are bound by name, as the generated
    code binds them (an assigned parameter is read by later expressions under its family's symbol)."""
    env, dims, flags = {}, {}, {}
    for r in f.reads:
        env[str(r.symbol)] = np.asarray(args[r.argument][r.key], dtype=float)
    for sym, arg in f.counts or []:
        env[str(sym)] = int(args[arg])
    for sym, arg in f.numbers or []:
        env[str(sym)] = float(np.sum(args[arg]))
    for d, sym in f.dims or []:
        dims[str(d)] = int(np.shape(env[str(sym)])[0])
    for h in hyper:
        if h.kind == "float" and h.name in hp:
            env[str(h.symbols[0])] = float(hp[h.name])
        elif h.kind == "bool":
            flags[str(h.symbols[0])] = sp.true if defaults.get(h.name) else sp.false
        elif h.kind == "choice":
            flags.update({str(cs): sp.true if c == defaults.get(h.name) else sp.false
                          for c, cs in zip(h.choices, h.symbols)})

    def value(e):
        e = e.xreplace({x: flags[str(x)] for x in e.free_symbols if str(x) in flags})
        # the sum over a mean-field state's coordinates, here of one coordinate (check draws a scalar state)
        e = e.replace(lambda n: isinstance(n, ArraySum), lambda n: n.args[0])
        e = e.replace(lambda n: isinstance(n, ZerosLike), lambda n: sp.Integer(0))
        values = {x: env[str(x)] for x in e.free_symbols if str(x) in env}
        sizes = {x: dims[str(x)] for x in e.free_symbols if str(x) in dims}
        for x, v in list(values.items()):
            # a state written coordinate by coordinate (rules/program.py scalarize_elementwise): a vector symbol
            # holds one coordinate, read as the 1 × 1 matrix of a dimension 1
            if is_mat(x) and np.ndim(v) == 0:
                values[x] = np.reshape(v, (1, 1))
                sizes.update({d: 1 for d in x.shape if not getattr(d, "is_Integer", False)})
        return evaluate(e, values, sizes)
    for var, e in f.assignments or []:
        env[str(var)] = value(e)
    return {key: np.asarray(value(e), dtype=float) for key, e in (f.returns or [])}


def _error(got: dict, want: dict) -> float:
    worst = 0.0
    for key, w in want.items():
        g = np.asarray(got[key], dtype=float).reshape(np.shape(w)) if np.size(got[key]) == np.size(w) else None
        if g is None:
            return float("inf")
        if not np.all(np.isfinite(w)):
            return float("nan")                 # no finite symbolic value: the input is skipped
        err = float(np.max(np.abs(g - w), initial=0.0)) / max(1.0, float(np.max(np.abs(w), initial=0.0)))
        worst = max(worst, err if np.isfinite(err) else float("inf"))
    return worst


def _dual(rng, shape):
    """A random dual natural parameter: small (the clients near q_g), symmetric where it is a square matrix (the
    natural parameter of a precision or a covariance)."""
    x = 0.1 * rng.standard_normal(shape)
    return (x + x.T) / 2 if len(shape) == 2 and shape[0] == shape[1] else x


def federated_error(recipe, D, ir, mod, seed: int):
    """The largest relative error of dual_step, client_message, server_step (and global_objective) at one random
    round; None where the input is skipped (see the module docstring)."""
    fns = {f.name: f for f in ir.entry_points.functions}
    rng = np.random.default_rng(31 + seed)
    dims = dimension_sizes(recipe, D, 3)
    states = [_random_state(recipe.family, D, rng, 3, {}, dims) for _ in range(CLIENTS)]
    glob = _random_state(recipe.family, D, rng, 3, {}, dims)
    hp = {h.name: float(rng.uniform(0.1, 0.9)) for h in ir.hyperparameters if h.kind == "float"}
    duals = [{k: _dual(rng, np.shape(v)) for k, v in mod.init_dual(s).items()} for s in states]
    errors = []

    def compare(name, args):
        """The generated entry point's value at ``args``, its error against the symbolic one recorded."""
        f = fns[name]
        got = getattr(mod, name)(*[args[p] for p in f.params], **({} if f.hyper is None else hp))
        errors.append(_error(got, _symbolic(f, args, hp, ir.hyperparameters, mod.HYPERPARAMETERS)))
        return got
    total = None
    for s, d in zip(states, duals):
        args = {"state": s, "global_state": glob, "dual": d}
        compare("dual_step", args)
        msg = compare("client_message", args)
        total = msg if total is None else {k: total[k] + msg[k] for k in msg}
    compare("server_step", {"message_sum": total, "clients": CLIENTS, "global_state": glob})
    if "global_objective" in fns:       # the bound at the random global state, with a random sum of client losses
        compare("global_objective", {"global_state": glob, "client_loss_sum": float(rng.normal() * 10)})
    return None if any(np.isnan(e) for e in errors) else max(errors)
