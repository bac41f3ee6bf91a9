"""Generated code of a product (mean-field) recipe against the derivation's program, evaluated with sympy on
random valid inputs: the per-row program on every plate row, the plate sums, then the global program."""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.core.matexpr import is_mat
from blr_derive.core.nodes import ComponentLogSumExp, ComponentSum
from blr_derive.families.symbolic import evaluate


def random_inputs(R, D, rng, P, rows):
    """(sympy environment, state, data, hyperparameters): random valid inputs of a product recipe's step."""
    env, state, data = {}, {}, {}
    for b in R.blocks:
        if not b.local:
            _block_state(b, D, rng, P, env, state)
    return _rest(R, D, rng, P, rows, env, state, data)


def _block_state(b, D, rng, P, env, state):
    """Random valid parameters of one global block (no component axis), into ``env`` and ``state``."""
    if b.family is not None:
        vals = b.family.sample_params(rng, P)
        if b.name in D.message_state:          # Eq. 60: split λ(sampled parameters) among the messages
            lam = [float(evaluate(e, vals)) for e in b.family.eta]
            nf = len({f for _, _, f, _ in D.message_state[b.name]})
            for name, ms, _, i in D.message_state[b.name]:
                state[name] = lam[i] / nf
                env[ms] = state[name]
            return
        for name, s, p in b.state:
            state[name] = float(vals[p])
            env[s] = state[name]
        return
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


def _rest(R, D, rng, P, rows, env, state, data):
    """Random hyperparameters, data and step counter after the blocks' parameters."""
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
    if R.components is not None:
        return compare_components(R, D, mod, seed, P, rows)
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


# ------------------------------------------------------------------------------ a component axis
REDUCTIONS = (ComponentSum, ComponentLogSumExp)


def _component_state(R, D, rng, P, K):
    """Random valid state of a recipe with a component axis: K values per per-component block."""
    env, state = {}, {}
    for b in R.blocks:
        if b.local:
            continue
        if not b.per_component:                        # a global block with no component axis
            _block_state(b, D, rng, P, env, state)
            continue
        if b.family is not None:
            draws = [b.family.sample_params(rng, P) for _ in range(K)]
            for name, s_, p in b.state:
                state[name] = np.array([float(d[p]) for d in draws])
        elif b.simplex:
            v = b.variables[0]
            if b.approximation == "exact":            # Dirichlet concentrations
                state[b.state[0][0]] = rng.uniform(0.5, 3.0, size=K)
            else:
                w = rng.uniform(0.5, 1.5, size=K)
                state[str(v)] = w / w.sum()
        else:
            v = b.variables[0]
            if is_mat(v) and v.shape[1] != 1:
                A = rng.normal(size=(K, P, P))
                state[str(v)] = 0.2 * np.einsum("kab,kcb->kac", A, A) / P + 0.5 * np.eye(P)
            elif is_mat(v):
                state[str(v)] = rng.normal(size=(K, P))
            else:
                state[str(v)] = rng.uniform(0.1, 0.3, size=K)
        for name, s_, _ in b.state:
            env[s_] = list(state[name])
    return env, state


def compare_components(R, D, mod, seed=0, P=3, rows=6, K=4):
    """The generated step of a recipe with a component axis against the derivation's program evaluated with sympy
    component by component: a quantity with one value per component (a per-component block's parameter, and
    what is computed from one outside a sum over the components) is evaluated for each k with the k-th values, a
    sum over the components (ComponentSum, ComponentLogSumExp) from the values of all K."""
    rng = np.random.default_rng(11 + seed)
    dims = {d: P for d in R.dims.values()}
    vals, state = _component_state(R, D, rng, P, K)       # symbol -> value, or list of K values
    vals, state, data, hp = _rest(R, D, rng, P, rows, vals, state, {})
    out = mod.step(mod.init(**state), data=data or None, **hp)
    carried = {s_ for s_, v in vals.items() if isinstance(v, list)}

    def run(s_, e, env):
        reps = {}
        for r in e.atoms(*REDUCTIONS):
            x = r.args[0]
            if x in env:
                xs = [np.asarray(env[x][k], dtype=float) for k in range(K)]
            else:       # a sum of an expression over the components (the EM bound's Σ_k of a prior factor)
                fixed = {c: v for c, v in env.items() if not isinstance(v, list)}
                xs = [np.asarray(evaluate(x, {**fixed, **{c: env[c][k] for c in carried if c in env}}, dims),
                                 dtype=float) for k in range(K)]
            reps[r] = (sum(xs) if isinstance(r, ComponentSum) else
                       np.log(np.sum(np.exp(np.array(xs) - max(xs)))) + max(xs))
        e = e.xreplace({r: sp.Float(float(v)) for r, v in reps.items()})
        syms = e.free_symbols | e.atoms(sp.MatrixSymbol)
        if syms & carried or s_ in carried:
            carried.add(s_)
            env[s_] = [_vec(evaluate(e, {**env, **{c: env[c][k] for c in carried if c in env}}, dims))
                       for k in range(K)]
        else:
            env[s_] = _vec(evaluate(e, {c: v for c, v in env.items() if not isinstance(v, list)}, dims))

    for s_, e in D.prelude:
        run(s_, e, vals)
    result = []
    if R.plate:
        sums, local_vals = {}, {name: [] for name, _ in D.local_outputs}
        for n in range(rows):
            renv = dict(vals)
            for d in R.plate["data"]:
                renv[d.symbol] = data[d.name][n]
            for s_, e in D.local_assign:
                run(s_, e, renv)
            for name, s_ in D.local_outputs:
                local_vals[name].append(renv[s_])
            for s_, e in D.stats:
                run(s_, e, renv)
                v = renv[s_]
                sums[s_] = v if s_ not in sums else (
                    [a + b for a, b in zip(sums[s_], v)] if isinstance(v, list) else sums[s_] + v)
        vals.update(sums)
        for name, v in local_vals.items():
            result.append((name, np.asarray(out[name]), np.asarray(v)))
        if D.scale is not None:
            run(D.scale[0], D.scale[1], vals)
    for s_, e in D.assignments:
        run(s_, e, vals)
    for name, s_ in D.outputs:
        want = np.asarray(vals[s_])
        result.append((name, np.reshape(out[name], want.shape), want))
    return result


def _vec(v):
    """A value as the generated code holds it (a column vector as a 1-D array)."""
    return v if np.ndim(v) == 0 or np.shape(v)[1] != 1 else np.ravel(v)
