"""Generated code of a mixture whose components are an array axis (``components: K``) against the derivation's
generic program, evaluated with sympy for every component k and every other component j of random valid inputs:
a quantity with the j axis is evaluated for each pair, a sum over j (``SumOverComponents``) adds those values and
``LogSumExpOverComponents`` takes their log-sum-exp (blr_derive/candidates/mixture_axis.py)."""
from __future__ import annotations

import numpy as np
import scipy.special
import sympy as sp

from blr_derive.core.matexpr import is_mat
from blr_derive.families.symbolic import evaluate
from blr_derive.ir.common import toposort
from blr_derive.ir.mixture_axis import axes_of
from blr_derive.rules.mixture import OVER_COMPONENTS, LogSumExpOverComponents


def _store(v):
    return v.ravel() if np.ndim(v) == 2 and v.shape[1] == 1 else v


def compare_component_axis(recipe, D, mod, seed=0, P=3, K=3, random_hyper=None):
    """[(state name, generated value, symbolic value)] for one random input of K components (one coordinate of an
    elementwise family, P coordinates of a vector one)."""
    fam = recipe.family
    base, info = fam.base, D.component_axis
    rng = np.random.default_rng(11 + seed)
    draws = [base.sample_params(rng, P) for _ in range(K)]
    state = {p.name: np.stack([np.asarray(d[p.symbol], dtype=float) for d in draws]) for p in base.free_params}
    env = {fam.K: K}
    hp = {}
    if random_hyper is not None:
        hp, _ = random_hyper(recipe, rng, env)
    hp = {k: v for k, v in hp.items() if k in mod.HYPERPARAMETERS}
    oracle_vals = {}
    for sym, oracle, _, _ in D.oracle_calls:
        if is_mat(sym) and sym.shape[1] != 1:
            A = rng.normal(size=(P, P))
            oracle_vals[oracle] = A @ A.T + P * np.eye(P)
        else:
            oracle_vals[oracle] = rng.normal(size=P) if is_mat(sym) else float(rng.uniform(0.5, 2.0))
    names = {v: p.name for p in base.free_params for v in info.leaves if info.names[v] == p.name}
    dims = {fam.dim: P} if fam.dim is not None else {}
    values, axes = {}, dict(info.leaves)

    def leaf(sym, j, k):
        ax = axes[sym]
        if sym in names:
            return state[names[sym]][j if ax == "j" else k]
        return values[sym][(j if "j" in ax else None, k if "k" in ax else None)]

    def ev(expr, j, k):
        reps = {}
        for node in sorted(expr.atoms(*OVER_COMPONENTS), key=sp.default_sort_key):
            terms = [ev(node.args[0], i, k) for i in range(K)]
            val = scipy.special.logsumexp(terms) if isinstance(node, LogSumExpOverComponents) else sum(terms)
            dummy = sp.MatrixSymbol(f"_sum{len(reps)}", *node.shape) if is_mat(node) else sp.Dummy()
            reps[node] = dummy
            env_val[dummy] = val
        e = expr.xreplace(reps)
        local = {s: leaf(s, j, k) for s in (e.free_symbols | e.atoms(sp.MatrixSymbol)) if s in axes}
        local.update({s: v for s, v in env_val.items() if s in e.free_symbols or s in e.atoms(sp.MatrixSymbol)})
        local.update({s: v for s, v in env.items() if s in e.free_symbols})
        return _store(evaluate(e, local, dims))

    env_val = {}
    for sym, oracle, _, _ in D.oracle_calls:
        values[sym] = {(None, k): oracle_vals[oracle] for k in range(K)}
    for s, v in hp.items():
        env.update({h.symbol: v for h in recipe.hyper if h.name == s})
    out = mod.step(mod.init(**state), oracles={o: (lambda v: (lambda x: v))(v) for o, v in oracle_vals.items()}, **hp)
    by_sym = {sym: name for name, sym, _ in D.updates}
    result = []
    for sym, expr in toposort(list(D.defs) + [(s, e) for _, s, e in D.updates]):
        axes[sym] = ax = axes_of(expr, axes)
        values[sym] = {(j if "j" in ax else None, k if "k" in ax else None): ev(expr, j, k)
                       for j in (range(K) if "j" in ax else [0]) for k in (range(K) if "k" in ax else [0])}
        if sym in by_sym:
            want = np.stack([values[sym][(None, k)] for k in range(K)])
            result.append((by_sym[sym], np.reshape(out[by_sym[sym]], np.shape(want)), want))
    return result
