"""objective(params, state, loss=None, **hyperparameters) of the jax target's optax transformations (issue 42):
L(q) = E_q[ℓ] − H(q) from the transformation's per-leaf state, summed over the leaves of the parameter pytree, equals
the numpy target's objective() of the same recipe on the same state with the leaves concatenated into one vector
(q is a product over every coordinate, so the entropy and the closed terms add up over the leaves).

Every committed optax module with an objective is compared (Monte Carlo: loss values at samples, the standard error
too; delta: the loss at the parameters), at random positive states and random hyperparameters, in float64 (1e-12
relative); the schedule form of a hyperparameter is read at state.count; wrong calls are refused.
"""
import math

import numpy as np
import pytest

from conftest import GENERATED, load_generated

OPTAX_WITH_OBJECTIVE = sorted(p.stem for p in (GENERATED / "jax").glob("*.py")
                              if "\ndef objective(params, state, loss=None" in p.read_text(encoding="utf-8"))


def test_the_optimizers_with_an_objective_have_it_in_the_optax_modules():
    # every optax module (a factory) whose numpy module has the estimated objective gets one
    assert {"ivon", "vogn", "adam", "rmsprop_optax", "ogn", "bayesbinn", "ste"} <= set(OPTAX_WITH_OBJECTIVE)
    assert len(OPTAX_WITH_OBJECTIVE) >= 13


def _hyper(np_mod, rng):
    """Random values in (0.1, 0.9) (rates, probabilities; the data-set size 50 times more) for the numeric hyperparameters (the required ones included), the others at their defaults."""
    out = {}
    for name, default in np_mod.HYPERPARAMETERS.items():
        if default is None or (isinstance(default, float) and not isinstance(default, bool) and math.isfinite(default)):
            out[name] = float(rng.uniform(0.1, 0.9)) * (50.0 if name in ("ess", "N") else 1.0)
    return out


@pytest.mark.parametrize("recipe", OPTAX_WITH_OBJECTIVE)
def test_optax_objective_equals_the_numpy_objective(recipe, x64):
    import jax.numpy as jnp
    jmod, nmod = load_generated(recipe, "jax"), load_generated(recipe)
    rng = np.random.default_rng(abs(hash(recipe)) % 2**32)
    hp = _hyper(nmod, rng)
    factory = getattr(jmod, recipe)
    tx = factory(**{k: v for k, v in hp.items() if nmod.HYPERPARAMETERS[k] is None})    # the required ones
    params = {"w": jnp.asarray(rng.normal(size=(3, 2))), "b": jnp.asarray(rng.normal(size=4))}
    state = tx.init(params)
    leaves_of = {}                            # every per-leaf state: random positive values, the same in numpy
    for field in state._fields:
        value = getattr(state, field)
        if isinstance(value, dict):
            value = {k: jnp.asarray(rng.uniform(0.3, 2.0, size=np.shape(v))) for k, v in value.items()}
            state = state._replace(**{field: value})
            leaves_of[field] = value
    flat = lambda tree: np.concatenate([np.ravel(np.asarray(tree[k])) for k in sorted(tree)])
    np_state = {name: flat(tree) for name, tree in leaves_of.items()}
    # the mean: the parameters (the family's first parameter), unless the optimizer state holds q's parameters (the
    # parameters then hold another function of q, e.g. the sign of a natural parameter)
    np_state.setdefault(nmod.STATE[0], flat(params))
    if jmod.OBJECTIVE_ESTIMATE == "monte_carlo":
        loss = rng.normal(size=5)
    elif jmod.OBJECTIVE_ESTIMATE == "delta":
        loss = float(rng.normal())
    else:
        loss = None
    got = jmod.objective(params, state, loss=loss, **hp)
    want = nmod.objective(np_state, loss=loss, **hp)
    assert set(got) == set(jmod.OBJECTIVE_KEYS) == set(want)
    assert got["estimate"] == want["estimate"] == jmod.OBJECTIVE_ESTIMATE and got["samples"] == want["samples"]
    for key in ("objective", "expected_loss", "entropy", "standard_error"):
        if math.isnan(want[key]):
            assert math.isnan(got[key])
        else:
            assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-12), key
    if "drops the entropy" not in " ".join(jmod.objective.__doc__.split()):
        assert abs(got["entropy"]) > 0.1          # the state is read (not a constant)


def test_schedules_and_refusals(x64):
    import jax.numpy as jnp
    jmod, nmod = load_generated("ivon", "jax"), load_generated("ivon")
    params = [jnp.ones(3), jnp.zeros((2, 2))]
    state = jmod.ivon(lr=0.1, ess=100.0).init(params)
    loss = [1.0, 2.0, 4.0]
    got = jmod.objective(params, state, loss=loss, ess=lambda count: 100.0 + count, weight_decay=0.01)
    want = nmod.objective({"m": np.array([1.0, 1, 1, 0, 0, 0, 0]), "h": np.full(7, 1.0)}, loss=loss, ess=100.0,
                          weight_decay=0.01)
    assert got["objective"] == pytest.approx(want["objective"], rel=1e-12)
    assert got["standard_error"] == pytest.approx(want["standard_error"], rel=1e-12)
    with pytest.raises(TypeError, match="needs the hyperparameter ess"):
        jmod.objective(params, state, loss=loss)
    with pytest.raises(TypeError, match="needs loss"):
        jmod.objective(params, state, ess=100.0)
    with pytest.raises(TypeError, match="unknown hyperparameters"):
        jmod.objective(params, state, loss=loss, ess=1.0, lrr=1.0)
    adam = load_generated("adam", "jax")
    with pytest.raises(ValueError, match="one value"):
        adam.objective(params, adam.adam().init(params), loss=[1.0, 2.0])
