"""The optax side of :func:`blr_derive.testing.equivalent`: a user's ``optax.GradientTransformation`` (or a factory
``f(**hyperparameters)`` returning one) against the recipe's generated jax module (the ``jax`` target), on pytrees
of the problem set's losses (convex, non-convex, an MLP on mini-batches, all-zero gradients), with ``jax.grad``.

optax has no parameter groups, no skipped gradients and no ``state_dict``: those problems do not apply.  float64
runs where ``jax_enable_x64`` is on (the caller's choice: it is a process-wide switch), float32 always."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

from blr_derive.testing.problems import PROBLEMS, agree, completed, describe, settings_for
from blr_derive.testing.results import Divergence, Report


def _loss(problem, data):
    """The problem's loss of (params, idx): ``idx`` the rows of the step's mini-batch (:func:`_batch`), a traced
    argument, so that one compiled gradient serves every step (a step count static under jit compiled one program
    per step and per setting)."""
    def f(params, idx):
        if problem.kind == "mlp":
            W1, b1, W2, b2 = params
            h = jnp.tanh(data["X"][idx] @ W1 + b1)
            return jnp.mean((h @ W2 + b2 - data["y"][idx]) ** 2)
        total = 0.0
        for p, a, c in zip(params, data["a"], data["c"]):
            d = p - c
            total = total + jnp.sum(a * d * d) / 2
            if problem.kind == "nonconvex":
                total = total + jnp.sum(jnp.sin(3 * p) + 0.1 * d ** 4)
        return total
    return f


def _batch(problem, data, step):
    """The rows of step ``step``'s mini-batch (the mlp problem's), an index array; 0 where the loss reads none."""
    if problem.kind == "mlp":
        return jnp.asarray(data["batches"][step % len(data["batches"])])
    return jnp.zeros((), jnp.int32)


def _to_jax(problem, dtype, seed):
    """The problem's seeded parameters and data (made with torch generators) as jax arrays."""
    tdtype = torch.float64 if dtype == jnp.float64 else torch.float32
    params = [jnp.asarray(p.detach().numpy(), dtype=dtype) for p in problem.make_params(tdtype, seed)]
    raw = problem.data(tdtype, seed)
    data = {k: ([jnp.asarray(x.numpy(), dtype=dtype) for x in v] if k in ("a", "c") else
                [np.asarray(b.numpy()) for b in v] if k == "batches" else jnp.asarray(v.numpy(), dtype=dtype))
            for k, v in raw.items()}
    return params, data


def _fields(state, prefix="") -> dict:
    """{field name: pytree} of a (nested) optax state: NamedTuple fields by name, tuples (optax.chain) walked."""
    out = {}
    if hasattr(state, "_fields"):
        for name in state._fields:
            value = getattr(state, name)
            if hasattr(value, "_fields") or isinstance(value, tuple) and value and hasattr(value[0], "_fields"):
                out.update(_fields(value))
            else:
                out.setdefault(name, value)
    elif isinstance(state, tuple):
        for s in state:
            out.update(_fields(s))
    return out


def equivalent_optax(derived, tx, *, names: dict, values: dict, settings=None, seed: int = 0) -> Report:
    mod = derived.compile("jax")
    factory = getattr(mod, derived.name)
    label = getattr(tx, "__qualname__", getattr(tx, "__name__", type(tx).__name__))
    report = Report(derived.name, label, equal=True)
    defaults = completed(derived.name, mod.HYPERPARAMETERS, values)
    fixed = hasattr(tx, "init") and hasattr(tx, "update")   # a transformation: hyperparameters already chosen
    if fixed and settings is None:
        settings = [defaults]
    dtypes = [jnp.float64, jnp.float32] if jax.config.jax_enable_x64 else [jnp.float32]
    if not jax.config.jax_enable_x64:
        report.skipped.append("float64 (jax_enable_x64 is off)")
    report.skipped += [f"problem '{p.name}' (optax has no {why})" for p, why in
                       [(p, "skipped gradients" if p.skip else "parameter groups" if p.groups else "scheduler object"
                         if p.scheduler else "state_dict") for p in PROBLEMS
                        if p.skip or p.groups or p.scheduler or p.reload_at is not None]]
    problems = [p for p in PROBLEMS if not (p.skip or p.groups or p.scheduler or p.reload_at is not None)]
    state_names = [n for n, _ in derived.assignments if n != derived.mean]
    # each problem's parameters, data and jitted gradient, made once for every setting (the same program each time)
    made = {}
    for dtype in dtypes:
        for problem in problems:
            params, data = _to_jax(problem, dtype, seed)
            made[dtype, problem.name] = params, data, jax.jit(jax.grad(_loss(problem, data)))
    for setting in (settings if settings is not None else settings_for(defaults)):
        setting = {**defaults, **setting}
        try:
            gen_tx = factory(**setting)
        except ValueError as exc:       # a setting the jax target refuses (a name optax reads otherwise: amsgrad)
            changed = ", ".join(f"{k}={v!r}" for k, v in setting.items() if v != defaults.get(k))
            report.skipped.append(f"{changed or 'the defaults'} (the jax target refuses it: {exc})")
            continue
        user_tx = tx if fixed else tx(**{names.get(k, k): v for k, v in setting.items()})
        gen_update, user_update = jax.jit(gen_tx.update), jax.jit(user_tx.update)
        for dtype in dtypes:
            key = "float64" if dtype == jnp.float64 else "float32"
            for problem in problems:
                params_g, data, grad = made[dtype, problem.name]
                params_g = list(params_g)
                params_u = list(params_g)
                sg, su = gen_tx.init(params_g), user_tx.init(params_u)
                report.runs += 1
                for k in range(problem.steps):
                    idx = _batch(problem, data, k)
                    gg, gu = grad(params_g, idx), grad(params_u, idx)
                    if k in problem.zero_steps:
                        gg = jax.tree_util.tree_map(jnp.zeros_like, gg)
                        gu = jax.tree_util.tree_map(jnp.zeros_like, gu)
                    pre_u, pre_g, pre_su = params_u, params_g, su
                    ug, sg = gen_update(gg, sg, params_g)
                    uu, su = user_update(gu, su, params_u)
                    params_g, params_u = optax.apply_updates(params_g, ug), optax.apply_updates(params_u, uu)
                    report.steps_checked += 1
                    bad = _first(params_u, params_g, pre_u, pre_g, su, sg, pre_su, names, state_names, key)
                    if bad is None:
                        continue
                    report.equal = False
                    i, var, yours, theirs = bad
                    div = Divergence(problem.name, key, setting, k + 1, i, var, *describe(np.asarray(yours),
                                                                                         np.asarray(theirs)))
                    # evaluate the derived step on your state: the generated state with your values put in
                    local = _localize(gen_tx, pre_su, gu, pre_u, params_u, su, names, state_names, key, k,
                                      problem, derived)
                    name = derived.mean if var == "parameter" else next(
                        (n for n in state_names if names.get(n, n) == var), var)
                    if local is not None:
                        name, div.parameter, y2, t2 = local
                        div.variable = "parameter" if name == derived.mean else names.get(name, name)
                        (div.yours, div.derived), div.localized = describe(np.asarray(y2), np.asarray(t2)), True
                    div.assignment, div.rules, div.definitions = derived.explain(name, setting)
                    report.divergence = div
                    return report
    return report


def _first(params_u, params_g, pre_u, pre_g, su, sg, pre_su, names, state_names, key):
    fu, fg = _fields(su), _fields(sg)
    for i, (a, b, pa, pb) in enumerate(zip(params_u, params_g, pre_u, pre_g)):
        if not agree(np.asarray(a), np.asarray(b), key, np.asarray(pa), np.asarray(pb)):
            return i, "parameter", a, b
    for n in state_names:
        un = names.get(n, n)
        if un in fu and n in fg and fg[n] is not None:
            for i, (a, b) in enumerate(zip(jax.tree_util.tree_leaves(fu[un]), jax.tree_util.tree_leaves(fg[n]))):
                if not agree(np.asarray(a), np.asarray(b), key):
                    return i, un, a, b
    return None


def _localize(gen_tx, pre_su, grads, pre_params, params_u, su, names, state_names, key, k, problem,
              derived):
    """The generated update from the user's state before the step (the fields it can map), compared with the
    user's after it, assignment by assignment; None when nothing maps."""
    fu = _fields(pre_su)
    if not any(names.get(n, n) in fu for n in state_names):
        return None
    # rebuild the generated pre-state: its own fields where the user has none, the user's where mapped
    template = gen_tx.init(pre_params)
    replaced = {}
    for f in getattr(template, "_fields", ()):
        uf = names.get(f, f)
        if f == "count" and "count" in fu:
            replaced[f] = fu["count"]
        elif uf in fu and f in state_names:
            replaced[f] = fu[uf]
    if not replaced:
        return None
    count = replaced.get("count", jnp.asarray(k, dtype=jnp.int32))
    state = template._replace(**{**replaced, **({"count": count} if "count" in template._fields else {})})
    upd, new = gen_tx.update(grads, state, pre_params)
    new_params = optax.apply_updates(pre_params, upd)
    fn, fu_after = _fields(new), _fields(su)
    for n, _ in derived.assignments:
        if n == derived.mean:
            for i, (a, b, p) in enumerate(zip(params_u, new_params, pre_params)):
                if not agree(np.asarray(a), np.asarray(b), key, np.asarray(p), np.asarray(p)):
                    return n, i, a, b
            continue
        un = names.get(n, n)
        if un in fu_after and n in fn and fn[n] is not None:
            for i, (a, b, p) in enumerate(zip(jax.tree_util.tree_leaves(fu_after[un]),
                                              jax.tree_util.tree_leaves(fn[n]), jax.tree_util.tree_leaves(fu[un]))):
                if not agree(np.asarray(a), np.asarray(b), key, np.asarray(p), np.asarray(p)):
                    return n, i, a, b
    return None
