"""Generated code of a product (mean-field) recipe against the derivation's program, evaluated with sympy on
random valid inputs: the per-row program on every plate row, the plate sums, then the global program."""
from __future__ import annotations

import numpy as np

from blr_derive.core.matexpr import is_mat
from blr_derive.families.symbolic import evaluate


def random_inputs(R, D, rng, P, rows):
    """(sympy environment, state, data, hyperparameters): random valid inputs of a product recipe's step."""
    env, state, data = {}, {}, {}
    for b in R.blocks:
        if b.local:
            continue
        if b.family is not None:
            vals = b.family.sample_params(rng, P)
            if b.name in D.message_state:          # Eq. 60: split λ(sampled parameters) among the messages
                lam = [float(evaluate(e, vals)) for e in b.family.eta]
                nf = len({f for _, _, f, _ in D.message_state[b.name]})
                for name, ms, _, i in D.message_state[b.name]:
                    state[name] = lam[i] / nf
                    env[ms] = state[name]
                continue
            for name, s, p in b.state:
                state[name] = float(vals[p])
                env[s] = state[name]
        else:
            for v in b.variables:
                if is_mat(v) and v.shape[1] != 1:
                    A = rng.normal(size=(P, P))
                    val = 0.2 * A @ A.T / P + 0.5 * np.eye(P)
                elif is_mat(v):
                    val = rng.normal(size=P)
                else:
                    val = float(rng.uniform(0.1, 0.3))
                state[str(v)] = val
                env[v] = val
    hp = {}
    for h in R.hyper:
        hp[h.name] = int(rng.integers(5, 9)) if h.kind == "int" else float(rng.uniform(0.5, 1.5))
        env[h.symbol] = hp[h.name]
    for d in R.data:
        v = rng.uniform(0.5, 2.0, size=tuple(P for _ in d.shape)) if d.shape else float(rng.uniform(0.5, 2.0))
        data[d.name] = v
        env[d.symbol] = v
    if R.plate:
        for d in R.plate["data"]:
            data[d.name] = rng.normal(size=(rows,) + tuple(P for _ in d.shape))
    if D.step_symbol is not None:
        state["step"] = 3
        env[D.step_symbol] = 4
    return env, state, data, hp


def compare_product(R, D, mod, seed=0, P=3, rows=6):
    """[(output name, generated value, symbolic value)]: the generated ``step`` against the derivation's program
    evaluated with sympy on random valid inputs (per-row program on each of ``rows`` plate rows)."""
    rng = np.random.default_rng(11 + seed)
    dims = {d: P for d in R.dims.values()}
    env, state, data, hp = random_inputs(R, D, rng, P, rows)
    out = mod.step(mod.init(**state), data=data or None, **hp)
    for s, e in D.prelude:
        env[s] = evaluate(e, env, dims)
    result = []
    if R.plate:
        sums = {s: None for s, _ in D.stats}
        local_vals = {name: [] for name, _ in D.local_outputs}
        for n in range(rows):
            renv = dict(env)
            for d in R.plate["data"]:
                renv[d.symbol] = data[d.name][n]
            for s, e in D.local_assign:
                renv[s] = evaluate(e, renv, dims)
            for name, s in D.local_outputs:
                local_vals[name].append(renv[s])
            for s, e in D.stats:
                val = evaluate(e, renv, dims)
                sums[s] = val if sums[s] is None else sums[s] + val
        for s, _ in D.stats:
            env[s] = sums[s] if np.ndim(sums[s]) == 0 or sums[s].shape[1] != 1 else sums[s].ravel()
        if D.scale is not None:
            env[D.scale[0]] = evaluate(D.scale[1], env, dims)
        for name, vals in local_vals.items():
            result.append((name, np.asarray(out[name]), np.asarray(vals)))
    for s, e in D.assignments:
        val = evaluate(e, env, dims)
        env[s] = val if np.ndim(val) == 0 or val.shape[1] != 1 else val.ravel()
    for name, s in D.outputs:
        result.append((name, np.reshape(out[name], np.shape(env[s])), env[s]))
    return result
