"""Generated code of a sized family over a run-time axis (``components: {index: k, size: K}`` with ``family: NAME``;
blr_derive/candidates/sized_axis.py) against the derivation's generic program, evaluated with sympy for every
coordinate k of a random valid input: a sum over the generic other coordinate j (``SumOverComponents``) adds the
values at every j and ``LogSumExpOverComponents`` takes their log-sum-exp."""
from __future__ import annotations

import numpy as np
import scipy.special
import sympy as sp

from blr_derive.families.symbolic import evaluate
from blr_derive.ir.common import toposort
from blr_derive.ir.mixture_axis import axes_of
from blr_derive.rules.mixture import OVER_COMPONENTS, LogSumExpOverComponents


def _random_param(fam, rng, K):
    if fam.param.domain == "simplex":
        return rng.dirichlet(np.ones(K))
    if fam.param.domain == "positive":
        return rng.uniform(0.3, 4.0, K)
    return rng.normal(size=K)


def compare_sized_axis(recipe, D, mod, seed=0, K=5, random_hyper=None):
    """[(state name, generated value, symbolic value)] for one random input of K coordinates."""
    fam, info = recipe.family, D.component_axis
    rng = np.random.default_rng(11 + seed)
    arrays = {fam.param.name: _random_param(fam, rng, K)}
    arrays.update({d.name: rng.uniform(0.0, 10.0, K) for d in recipe.data})
    env = {fam.K: K}
    hp = {}
    if random_hyper is not None:
        hp, _ = random_hyper(recipe, rng, env)
    hp = {k: v for k, v in hp.items() if k in mod.HYPERPARAMETERS}
    for s, v in hp.items():
        env.update({h.symbol: v for h in recipe.hyper if h.name == s})
    axes = dict(info.leaves)
    leaf_names = {s: info.names.get(s, str(s)) for s in info.leaves}
    values = {}

    def ev(expr, k):
        reps, local = {}, {}
        for node in sorted(expr.atoms(*OVER_COMPONENTS), key=sp.default_sort_key):
            terms = [ev(node.args[0], j) for j in range(K)]   # the summand in j's symbols: j runs, k is fixed
            d = sp.Dummy()
            reps[node] = d
            local[d] = scipy.special.logsumexp(terms) if isinstance(node, LogSumExpOverComponents) else sum(terms)
        e = expr.xreplace(reps)
        for s in e.free_symbols:
            if s in leaf_names:
                local[s] = arrays[leaf_names[s]][k]            # a leaf read along k, or along j (the caller's k)
            elif s in values:
                local[s] = values[s][k] if axes.get(s) else values[s][0]
            elif s in env:
                local[s] = env[s]
        return float(evaluate(e, local, {}))

    data = {d.name: arrays[d.name] for d in recipe.data}
    out = mod.step(mod.init(**{fam.param.name: arrays[fam.param.name]}), data=data, **hp)
    by_sym = {sym: name for name, sym, _ in D.updates}
    result = []
    for sym, expr in toposort(list(D.defs) + [(s, e) for _, s, e in D.updates]):
        axes[sym] = ax = axes_of(expr, axes)
        values[sym] = [ev(expr, k) for k in (range(K) if ax else [0])]
        if sym in by_sym:
            want = np.broadcast_to(np.array(values[sym]), (K,))
            result.append((by_sym[sym], np.asarray(out[by_sym[sym]], dtype=float), want))
    return result
