"""Generated code against the symbolic update it was rendered from (used by tests and ``blr-derive check``).

Random valid state, hyperparameters, oracle values and data are drawn; the derivation's own program
(definitions and updates in dependency order) is evaluated with sympy; the generated numpy module's
``step`` is run on the same inputs.  The state of a matrix program is drawn as the derivation describes it
(``verify/state.py``: the candidate family's parameters, the state variables rules put in their place).
Monte Carlo recipes get a fixed-noise ``rng`` so that every sample is the same and the averages are known;
rank-shaped ones a draw of their own per sample and a loss that depends on θ (``verify/shaping.py``).
"""
from __future__ import annotations

import numpy as np
from scipy import special
import sympy as sp

from blr_derive.families.symbolic import evaluate
from blr_derive.ir.common import toposort
from blr_derive.rules.product import FactorizedDerivation
from blr_derive.families.axis import AxisFamily
from blr_derive.verify.mixture_axis import compare_component_axis
from blr_derive.verify.sized_axis import compare_sized_axis
from blr_derive.verify.product import compare_product
from blr_derive.verify.shaping import fixed_noise_statistics, shaped_statistics, supports
from blr_derive.verify.state import dimension_sizes, fixed_draw, matrix_state, oracle_value
from blr_derive.core.matexpr import is_mat
from blr_derive.rules.eigenbasis import EntryOf, Entrywise


def _host_value(rng, h):
    if h.kind == "bool":
        return bool(rng.random() < 0.5)
    if h.kind == "int":             # at least 2: one sample makes centred (rank-shaped) estimators vanish
        return int(rng.integers(2, 5))
    if h.kind == "choice":
        return str(rng.choice([c for c, _ in h.elements]))
    if h.kind == "tuple":
        return tuple(float(rng.uniform(0.5, 0.95)) for _ in h.elements)
    return float(rng.uniform(0.1, 0.9))


class FixedNoise:
    """An rng whose every standard-normal draw is 0.37 (so Monte Carlo averages equal one sample)."""

    def standard_normal(self, shape):
        return np.full(shape, 0.37)

    def random(self, shape):
        return np.full(shape, 0.37)

    def finish(self):
        """Nothing to check: any number of draws is the same draw."""


def _random_state(fam, D, rng, P, env, dims):
    """Random valid state: coordinate values for an elementwise update (the simplex drawn jointly), else the
    state of a matrix program as the derivation describes it (``verify/state.py``)."""
    state = {}
    if any(is_mat(e) for _, _, e in D.updates):
        return matrix_state(D, rng, P, env, dims)
    simplex = [p for p in fam.params.values() if p.domain == "simplex"]
    # the simplex coordinates are drawn jointly (they must sum to less than 1), bounded away from the faces
    K = len(simplex) + 1
    on_simplex = dict(zip([p.name for p in simplex], 0.1 + (1 - 0.1 * K) * rng.dirichlet(np.full(K, 4.0)))) if simplex else {}
    for p in fam.params.values():
        v = (float(on_simplex[p.name]) if p.name in on_simplex else float(rng.normal()) if p.domain == "real"
             else float(rng.uniform(0.2, 0.8)) if p.domain == "unit_interval" else float(rng.uniform(0.5, 2.0)))
        state[p.name] = v
        env[p.symbol if not is_mat(p.symbol) else sp.Symbol(p.name, real=True)] = v
    for a in D.aux_state:
        v = float(rng.uniform(0.1, 1.0))
        state[a.name] = v
        env[a.symbol] = v
    for old, (new, nsym, _) in D.renamed.items():
        v = float(rng.uniform(0.5, 2.0))
        state.pop(old, None)
        state[new] = v
        env[nsym] = v
    return state


def _random_oracles(D, rng, dims, env):
    oracle_vals = {}
    for sym, oracle, arg, _ in D.oracle_calls:
        if oracle in oracle_vals:           # one value per oracle (a mixture asks it at every component's mean)
            env[sym] = oracle_vals[oracle]
            continue
        v = oracle_value(rng, sym, dims)
        oracle_vals[oracle] = v
        env[sym] = v
    return oracle_vals


def _random_hyper(recipe, rng, env):
    """Hyperparameter values, and the truth values of boolean and choice symbols (``flags``)."""
    hp, flags = {}, {}
    for h in recipe.hyper:
        v = _host_value(rng, h)
        hp[h.name] = v
        if h.kind == "tuple":
            env.update({es: x for (_, es), x in zip(h.elements, v)})
        elif h.kind == "bool":
            flags[h.symbol] = sp.true if v else sp.false
        elif h.kind == "choice":
            flags.update({cs: (sp.true if c == v else sp.false) for c, cs in h.elements})
        else:
            env[h.symbol] = v
    return hp, flags


def _tanh_sinh_statistics(sm, flags, env, dims, rng, oracle_vals):
    """The averages of tanh-sinh sampling into ``env`` (its oracles' constant values into ``oracle_vals``)."""
    # deterministic nodes: Σ_k w_k e(u_k), the tanh-sinh rule written out again here (u = σ(π sinh t), up to
    # π sinh t = 34) as an independent check of the generated module's helper
    n = int(evaluate(sm.samples.xreplace(flags), env, dims))
    m = max((n - 1) // 2, 1)
    t = np.arange(-m, m + 1) * (np.arcsinh(34 / np.pi) / m)
    u_k = special.expit(np.pi * np.sinh(t))
    w_k = np.arcsinh(34 / np.pi) / m * np.pi * np.cosh(t) * u_k * (1 - u_k)
    w_k = w_k / w_k.sum()
    for k_sym, oracle in sm.calls:
        oracle_vals[oracle] = float(rng.uniform(0.5, 2.0))
        env[k_sym] = oracle_vals[oracle]
    sums = {avg: 0.0 for avg, _ in sm.stats}
    for u, w in zip(u_k, w_k):
        env[sm.eps] = u
        env[sm.theta] = evaluate(sm.theta_expr.xreplace(flags), env, dims)
        for avg, e in sm.stats:
            sums[avg] = sums[avg] + w * evaluate(e.xreplace(flags), env, dims)
    env.update(sums)


def evaluate_entrywise(expr, env, dims):
    """:func:`evaluate`, where elementwise quantities (scalar symbols) may hold arrays (an elementwise program over
    a matrix mean, the eigenbasis candidate's rotated coordinates): a scalar expression of them is worked out entry
    by entry, and an :class:`Entrywise` node of a matrix expression becomes the explicit matrix of its entries."""
    nodes = sorted(expr.atoms(EntryOf), key=str) if isinstance(expr, sp.Basic) else []
    if nodes:                   # the entries of a matrix (a rotated gradient at a sample): its value as an array
        env, reps = dict(env), {}
        for i, n in enumerate(nodes):
            reps[n] = sp.Dummy(f"entries{i}", real=True)
            env[reps[n]] = np.asarray(evaluate_entrywise(n.arg, env, dims), dtype=float)
        expr = expr.xreplace(reps)
    arrays = {k: v for k, v in env.items() if not is_mat(k) and np.ndim(v) > 0}
    if not arrays:
        return evaluate(expr, env, dims)
    rest = {k: v for k, v in env.items() if k not in arrays}

    def entries(x):
        used = sorted(x.free_symbols & arrays.keys(), key=str)
        if not used:
            return evaluate(x, rest, dims)
        shape = np.shape(arrays[used[0]])
        out = np.empty(shape)
        for idx in np.ndindex(*shape):
            out[idx] = evaluate(x, {**rest, **{k: arrays[k][idx] for k in used}}, dims)
        return out

    if not is_mat(expr):
        return entries(expr)
    expr = expr.replace(lambda n: isinstance(n, Entrywise),
                        lambda n: sp.ImmutableMatrix(np.atleast_2d(entries(n.arg)).tolist()))
    return evaluate(expr, rest, dims)


def compare_update(recipe, D, mod, seed=0, P=3):
    """[(state name, generated value, symbolic value)] for one random input.  The module's run-time domain checks
    (``CHECK_DOMAINS``, blr_derive/ir/validity.py) are off meanwhile: this compares the algebra of the step at
    random inputs, some of which it may take outside the family (random data of a conjugate model, a large ρ)."""
    flag = getattr(mod, "CHECK_DOMAINS", None)
    if flag is not None:
        mod.CHECK_DOMAINS = False
    try:
        return _compare_update(recipe, D, mod, seed, P)
    finally:
        if flag is not None:
            mod.CHECK_DOMAINS = flag


def _compare_update(recipe, D, mod, seed=0, P=3):
    if isinstance(D, FactorizedDerivation):
        return compare_product(recipe, D, mod, seed, P)
    if isinstance(recipe.family, AxisFamily):                # a sized family over a run-time axis
        return compare_sized_axis(recipe, D, mod, seed, random_hyper=_random_hyper)
    if D.component_axis is not None:       # a mixture with the components as an array axis
        return compare_component_axis(recipe, D, mod, seed, P, random_hyper=_random_hyper)
    fam = recipe.family
    rng = np.random.default_rng(11 + seed)
    env, data = {}, {}
    dims = dimension_sizes(recipe, D, P)
    state = _random_state(fam, D, rng, P, env, dims)
    if D.step_symbol is not None:
        state["step"] = 3
        env[D.step_symbol] = 4
    oracle_vals = _random_oracles(D, rng, dims, env)
    for d in recipe.data:
        if d.name in D.scalar_data:          # read coordinate-wise with the state (one coordinate drawn, like it)
            v = float(rng.uniform(0.5, 2.0)) if d.symbol.is_positive else float(rng.normal())
            data[d.name] = v
            env[sp.Symbol(d.name, real=True)] = v
            continue
        shape = tuple(P if s_ == fam.dim else 7 for s_ in d.shape)
        v = rng.uniform(0.5, 2.0, size=shape) if d.symbol.is_positive else rng.normal(size=shape)
        if d.symmetric:                      # declared symmetric: a covariance-like SPD matrix
            v = v @ v.T + shape[0] * np.eye(shape[0])
        data[d.name] = v
        env[d.symbol] = v
    hp, flags = _random_hyper(recipe, rng, env)
    hp = {k: v for k, v in hp.items() if k in mod.HYPERPARAMETERS}
    noise, oracle_fns = FixedNoise(), {}
    if D.sampling is not None and D.sampling.draw == "tanh_sinh":
        _tanh_sinh_statistics(D.sampling, flags, env, dims, rng, oracle_vals)
    elif D.sampling is not None:
        sm = D.sampling
        env[sm.eps] = fixed_draw(sm.eps, dims)
        env[sm.theta] = evaluate_entrywise(sm.theta_expr.xreplace(flags), env, dims)
        for k_sym, oracle in sm.calls:
            oracle_vals[oracle] = oracle_value(rng, k_sym, dims)
            env[k_sym] = oracle_vals[oracle]
        for r_sym, e in sm.reductions:          # a sum over the P coordinates of one value each
            env[r_sym] = P * evaluate(e.xreplace(flags), env, dims)
        for k_sym, oracle, point, e in sm.chained:      # the oracles are constants: the same value at any point
            env[point] = evaluate(e.xreplace(flags), env, dims)
            env[k_sym] = oracle_vals[oracle]
        if sm.shaping is None:
            for avg, e in sm.stats:
                env[avg] = evaluate_entrywise(e.xreplace(flags), env, dims)
        elif supports(sm):
            # a draw of its own per sample and a loss that depends on θ: the centred shaped values do not cancel
            noise, oracle_fns = shaped_statistics(sm, flags, env, dims, rng, oracle_vals)
        else:
            fixed_noise_statistics(sm, flags, env, dims)
    oracles = {k: (lambda v: (lambda x: v))(v) for k, v in oracle_vals.items()}
    names = {sym: n for n, sym, _ in D.updates}
    symbolic = []
    for sym, expr in toposort(list(D.defs) + [(sym, e) for _, sym, e in D.updates]):
        val = evaluate_entrywise(expr.xreplace(flags), env, dims)
        env[sym] = val if np.ndim(val) == 0 or val.shape[1] != 1 else val.ravel()
        if sym in names:
            symbolic.append((names[sym], val))
    try:
        out = mod.step(mod.init(hyperparameters=hp, **state), oracles={**oracles, **oracle_fns},
                       data=data or None, rng=noise, **hp)
    except (ArithmeticError, ValueError, TypeError) as exc:
        if all(np.all(np.isfinite(np.asarray(v, dtype=float))) for _, v in symbolic):
            # the symbolic update is finite here: the generated step's failure is the generated code's (an
            # operator read with the wrong precedence, a shape), not an input outside the region, so it is reported
            # rather than skipped as one (blr_derive/verify/recipe.py)
            raise GeneratedStepError(f"the generated step raised {type(exc).__name__}: {exc} where the symbolic "
                                     f"update is finite") from exc
        raise
    noise.finish()
    return [(name, np.reshape(out[name], np.shape(val)), val) for name, val in symbolic]


class GeneratedStepError(RuntimeError):
    """The generated module's ``step`` failed at an input where the symbolic update is finite: a fault of the
    generated code, which ``blr-derive check`` reports as a failed comparison (not an input skipped as outside the
    region where the update is finite)."""
