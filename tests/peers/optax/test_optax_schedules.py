"""Schedules (optax's ScalarOrSchedule) in every generated optax transformation of the catalog.

Every number a generated factory takes (each float hyperparameter and each element of a tuple of numbers) may be a
callable of the step count, evaluated at the count of updates done so far, as optax's ``scale_by_learning_rate``
and ``inject_hyperparams`` evaluate theirs.  The reference is independent of that mechanism: the same factory built
anew at every step with the schedule's value at that step as a plain Python number (eager), carrying the state
along; the scheduled transformation runs under ``jax.jit``.  The recipes are the catalog's jax artifacts that are
optax factories (found on disk, not listed here).  Where optax has the optimizer (``test_optax_peers.PEERS``), the
scheduled learning rate is also compared with optax's optimizer given the same schedule.
"""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import yaml

from conftest import CATALOG, GENERATED, load_generated

STEPS = 8
TOL = {"f64": 1e-12, "f32": 1e-6}


@pytest.fixture(autouse=True, scope="module")
def x64():
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


def _optax_recipes():
    """The catalog recipes whose jax artifact is an optax factory (a function named after the recipe)."""
    out = []
    for path in sorted((GENERATED / "jax").glob("*.py")):
        text = path.read_text()
        if f"\ndef {path.stem}(" in text and "(_init, _update" in text:
            out.append(path.stem)
    return out


RECIPES = _optax_recipes()


def test_the_catalog_has_optax_factories():
    # a guard against an empty parametrization: the catalog's elementwise optimizers are optax factories
    assert {"sgd", "adam", "ivon", "ogn", "rmsprop_optax"} <= set(RECIPES) and len(RECIPES) >= 15


def _learning_rate(recipe):
    return yaml.safe_load((CATALOG / f"{recipe}.yaml").read_text())["learning_rate"]


def _required(mod, factory):
    """Values for the hyperparameters without a default (IVON's ess: a data-set size; the learning rate)."""
    return {k: 0.05 for k, v in mod.HYPERPARAMETERS.items() if v is None}


def _oracles(fn, skip):
    """The oracle arguments besides the gradient that a function of the transformation reads (OGN's ggn)."""
    return [n for n, p in inspect.signature(fn).parameters.items()
            if not n.startswith("_") and n not in skip and p.kind is not p.VAR_KEYWORD]


def _problem(dtype, seed=0):
    """A pytree of parameters and a quadratic loss ½Σ a·θ² + b·θ on it (its gradient a·θ + b; a is also the value
    of any other oracle, a positive curvature)."""
    rng = np.random.default_rng(seed)
    params = {"w": rng.normal(size=(3, 2)), "b": [rng.normal(size=2), rng.normal(size=())]}
    params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype), params)
    a = jax.tree_util.tree_map(lambda p: jnp.asarray(rng.uniform(0.5, 2.0, size=p.shape), dtype), params)
    b = jax.tree_util.tree_map(lambda p: jnp.asarray(rng.normal(size=p.shape), dtype), params)
    return params, a, b


def _step_fn(tx, a, b):
    """One training step of ``tx``: for a Monte Carlo transformation one sample (drawn with ``key``) accumulated,
    then the update; otherwise the update with the gradient at the parameters.  Other oracles get ``a``."""
    grad = lambda p: jax.tree_util.tree_map(lambda ai, bi, pi: ai * pi + bi, a, b, p)
    if hasattr(tx, "sample_parameters"):
        extra = [a] * len(_oracles(tx.accumulate, ()))

        def step(params, state, key):
            sample, noise = tx.sample_parameters(key, params, state)
            state = tx.accumulate(grad(sample), state, noise, params, *extra)
            updates, state = tx.update(None, state, params)
            return optax.apply_updates(params, updates), state
    else:
        extra = {n: a for n in _oracles(tx.update, ())}

        def step(params, state, key):
            updates, state = tx.update(grad(params), state, params, **extra)
            return optax.apply_updates(params, updates), state
    return step


def _run_scheduled(factory, kw, params, a, b):
    tx = factory(**kw)
    step = jax.jit(_step_fn(tx, a, b))
    state, out, key = tx.init(params), [], jax.random.PRNGKey(3)
    for _ in range(STEPS):
        key, k = jax.random.split(key)
        params, state = step(params, state, k)
        out.append(params)
    return out


def _run_fed(factory, kw, params, a, b):
    """The reference: the factory built at every step with each schedule's value at that step given as a number (a
    float array, as the schedule returns it for optax's int32 count), not as a schedule; jitted with those values
    as arguments, so both runs compute in the same dtypes."""
    value = lambda v, i: jax.jit(v)(jnp.asarray(i, jnp.int32))
    at = lambda i: {k: _map(lambda v: value(v, i) if callable(v) else v, v) for k, v in kw.items()}
    fixed = {k: v for k, v in kw.items() if not _scheduled(v)}

    @jax.jit
    def step(params, state, key, values):
        return _step_fn(factory(**fixed, **values), a, b)(params, state, key)

    state, out, key = factory(**at(0)).init(params), [], jax.random.PRNGKey(3)
    for i in range(STEPS):
        key, k = jax.random.split(key)
        params, state = step(params, state, k, {n: v for n, v in at(i).items() if n not in fixed})
        out.append(params)
    return out


def _scheduled(v):
    return callable(v) or isinstance(v, tuple) and any(map(callable, v))


def _map(f, v):
    return tuple(map(f, v)) if isinstance(v, tuple) else f(v)


def _max_error(x, y):
    return max(float(jnp.max(jnp.abs(p - q))) for px, py in zip(x, y)
               for p, q in zip(jax.tree_util.tree_leaves(px), jax.tree_util.tree_leaves(py)))


def _dtype(prec):
    return jnp.float64 if prec == "f64" else jnp.float32


SCHEDULES = {
    "cosine": lambda v: optax.cosine_decay_schedule(v, decay_steps=STEPS - 2, alpha=0.1),
    "linear": lambda v: optax.linear_schedule(v, 0.2 * v, transition_steps=STEPS // 2, transition_begin=2),
}


#: each recipe with a cosine schedule in float64 and a linear one in float32; adam and sgd in the fast tier, the others
#: (each 2-8 s on a shared 2-core machine: two jit compilations of a step) marked slow
FAST = ("adam", "sgd")
CASES = [pytest.param(r, sched, prec, marks=() if r in FAST else pytest.mark.slow)
         for r in RECIPES for sched, prec in (("cosine", "f64"), ("linear", "f32"))]


@pytest.mark.parametrize("recipe,schedule,prec", CASES)
def test_learning_rate_schedule_equals_the_values_fed_step_by_step(recipe, schedule, prec):
    mod = load_generated(recipe, "jax")
    factory = getattr(mod, recipe)
    params, a, b = _problem(_dtype(prec))
    lr = _learning_rate(recipe)
    kw = _required(mod, factory)
    kw[lr] = SCHEDULES[schedule](mod.HYPERPARAMETERS[lr] or 0.05)
    ours = _run_scheduled(factory, kw, params, a, b)
    ref = _run_fed(factory, kw, params, a, b)
    assert _max_error(ours, ref) <= TOL[prec]
    assert _max_error([params], [ours[-1]]) > 1e-3                     # the parameters moved


def _all_numbers_scheduled(mod):
    """Every number of the factory as a linear schedule from its default (or required value) to half of it; a
    tuple's elements each a schedule; infinite and zero defaults stay numbers."""
    kw = {}
    for k, v in mod.HYPERPARAMETERS.items():
        v = 0.05 if v is None else v
        sched = lambda x: optax.linear_schedule(x, 0.5 * x, transition_steps=STEPS - 2) \
            if isinstance(x, float) and np.isfinite(x) and x != 0 else x
        if isinstance(v, tuple):
            kw[k] = tuple(sched(x) for x in v)
        elif isinstance(v, float):
            kw[k] = sched(v)
    return kw


@pytest.mark.parametrize("recipe", [pytest.param(r, marks=() if r in FAST else pytest.mark.slow) for r in RECIPES])
def test_every_number_may_be_a_schedule(recipe):
    """Not only the learning rate: every float hyperparameter and every element of a tuple of numbers (Adam's
    betas, eps, weight decay, IVON's ess and Hessian initialisation read by ``init`` at count 0) as a schedule."""
    mod = load_generated(recipe, "jax")
    factory = getattr(mod, recipe)
    params, a, b = _problem(jnp.float64)
    kw = _all_numbers_scheduled(mod)
    assert any(map(_scheduled, kw.values()))
    ours = _run_scheduled(factory, kw, params, a, b)
    ref = _run_fed(factory, kw, params, a, b)
    assert _max_error(ours, ref) <= TOL["f64"]


def test_a_static_setting_refuses_a_schedule():
    sched = optax.linear_schedule(1.0, 0.0, 10)
    with pytest.raises(ValueError, match="Invalid amsgrad: a schedule .* True or False"):
        load_generated("adam", "jax").adam(amsgrad=sched)
    ivon = load_generated("ivon", "jax")
    with pytest.raises(ValueError, match="Invalid mc_samples: a schedule .* a Python int"):
        ivon.ivon(0.1, 100.0, mc_samples=sched)
    with pytest.raises(ValueError, match="Invalid hess_approx: a schedule .* one of price, gradsq"):
        ivon.ivon(0.1, 100.0, hess_approx=sched)


def test_a_constant_keeps_the_state_without_a_count():
    """Without a schedule a recipe that does not read the step keeps no count (its state's leaves are unchanged);
    with one the count is there, advanced by each update."""
    plain = [r for r in RECIPES if "count: Any          # updates done so far, kept where" in
             (GENERATED / "jax" / f"{r}.py").read_text()]
    assert plain
    for recipe in plain:
        mod = load_generated(recipe, "jax")
        kw = _required(mod, getattr(mod, recipe))
        params, a, b = _problem(jnp.float64)
        assert getattr(mod, recipe)(**kw).init(params).count is None
    kw[_learning_rate(recipe)] = optax.linear_schedule(0.1, 0.01, 5)
    tx = getattr(mod, recipe)(**kw)
    params, state = jax.jit(_step_fn(tx, a, b))(params, tx.init(params), jax.random.PRNGKey(0))
    assert int(state.count) == 1


MINE = """name: mine
family: gaussian_diag
loss: abstract
learning_rate: rate
hyperparameters:
  rate: {default: 0.1}
  decay: {default: [0.5], names: [rho]}
  h0: {default: 2.0}
state_init: {s: h0}
approximations:
  - delta
  - squared_gradient_hessian
  - separate_learning_rates: {s: 1 - rho}
  - square_root_scaling: {param: s, eps: 1.0e-8}
"""


def test_a_recipe_of_ones_own_one_element_tuple_and_a_number_init_reads(tmp_path):
    """Not a catalog recipe: a one-element tuple (decay=(rho,), which the factory unpacked as the tuple itself
    before) and a number the initial state reads (h0, evaluated at count 0), each a schedule."""
    from blr_derive import api
    path = tmp_path / "mine.yaml"
    path.write_text(MINE)
    mod = api.derive(str(path)).compile("jax")
    params, a, b = _problem(jnp.float64)
    kw = dict(rate=optax.linear_schedule(0.1, 0.01, 5), decay=(optax.linear_schedule(0.5, 0.9, 5),),
              h0=optax.linear_schedule(3.0, 1.0, 4))
    assert float(mod.mine(**kw).init(params).s["w"][0, 0]) == 3.0
    ours = _run_scheduled(mod.mine, kw, params, a, b)
    ref = _run_fed(mod.mine, kw, params, a, b)
    assert _max_error(ours, ref) <= TOL["f64"]
    assert _max_error([params], [ours[-1]]) > 1e-2
    assert mod.mine(decay=(0.5,)).init(params).count is None
