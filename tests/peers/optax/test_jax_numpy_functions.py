"""The jax target's matrix recipes (plain jax.numpy ``init``/``step`` functions) against the numpy target's modules:
the same step, on random inputs, to 1e-12 in float64, called directly and under ``jax.jit``."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from blr_derive.api import generate
from blr_derive.core.errors import UnsupportedTarget
from conftest import CATALOG, GENERATED, load_generated

# jax is in the test extra (the jax target's peers): imported, never skipped
#: the catalog recipes the jax target writes as functions (a module without a transformation factory)
FUNCTION_RECIPES = sorted(p.stem for p in (GENERATED / "jax").glob("*.py")
                          if p.stem != "__init__" and "\ndef step(" in p.read_text(encoding="utf-8"))
DIMS = {"P": 3, "N": 7, "K": 2}


@pytest.fixture
def x64():
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


def _spd(rng, n):
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def _value(rng, shape, symmetric):
    if shape in ("*", "?"):
        raise AssertionError("an elementwise value in a matrix recipe")
    dims = tuple(DIMS.get(d, 3) if isinstance(d, str) else d for d in shape)
    if not dims:                                   # counts, degrees of freedom: above the dimension
        return float(rng.uniform(DIMS["P"] + 2, DIMS["P"] + 6))
    if symmetric:
        return _spd(rng, dims[0])
    return rng.standard_normal(dims)


def _inputs(mod, seed):
    """Random state, data, oracles (a linear gradient, a Hessian that varies a little) and hyperparameters."""
    rng = np.random.default_rng(seed)
    shapes, sym = mod.SHAPES, set(mod.SYMMETRIC)
    state = {n: _value(rng, shapes[n], n in sym) for n in mod.STATE if n != "step"}
    data = {n: _value(rng, shapes[n], n in sym) for n in mod.DATA}
    P = DIMS["P"]
    A, b, H0 = _spd(rng, P) / P, rng.standard_normal(P), _spd(rng, P)
    hyper = {k: (float(rng.uniform(0.2, 0.9)) if isinstance(v, float) and 0 < v <= 1 else v)
             for k, v in mod.HYPERPARAMETERS.items()}

    def oracles(xp):
        grad = lambda x: xp.asarray(A) @ x + xp.asarray(b)                      # noqa: E731
        hess = lambda x: xp.asarray(H0) + 0.01 * x[:, None] * x[None, :]       # noqa: E731
        return {"grad": grad, "hess": hess}
    return state, data, oracles, hyper


def _max_error(ours, ref):
    assert set(ours) == set(ref)
    err = 0.0
    for k in ref:
        r, o = np.asarray(ref[k], dtype=float), np.asarray(ours[k], dtype=float)
        assert o.shape == r.shape, k
        assert np.all(np.isfinite(r)), k
        err = max(err, float(np.max(np.abs(o - r), initial=0.0) / max(1.0, float(np.max(np.abs(r), initial=0.0)))))
    return err


def test_the_matrix_subset_is_written_as_functions():
    assert {"newton", "laplace", "ridge", "bayesian_linear_regression"} <= set(FUNCTION_RECIPES)


@pytest.mark.parametrize("recipe", FUNCTION_RECIPES)
def test_jax_step_equals_numpy_step(recipe, x64):
    ref, ours = load_generated(recipe, "numpy"), load_generated(recipe, "jax")
    for name in ("STATE", "HYPERPARAMETERS", "ORACLES", "DATA", "EQUATIONS"):
        assert getattr(ours, name) == getattr(ref, name), name
    jitted = jax.jit(ours.step)
    for seed in range(3):
        state, data, oracles, hyper = _inputs(ref, seed)
        want = ref.step(ref.init(**state), oracles=oracles(np) if ref.ORACLES else None,
                        data=data or None, **hyper)
        s = ours.init(**state)
        assert all(isinstance(v, jax.Array) and v.dtype == jnp.float64 for v in s.values())
        ora = oracles(jnp) if ours.ORACLES else None
        got = ours.step(s, oracles=ora, data=data or None, **hyper)
        assert _max_error(got, want) < 1e-12
        # under jit: the oracles are closed over, the state, data and numeric hyperparameters are traced
        got_jit = jax.jit(lambda st, d, hp: ours.step(st, oracles=ora, data=d, **hp))(s, data or None, hyper)
        assert _max_error(got_jit, want) < 1e-12
        if not ours.ORACLES:
            assert _max_error(jitted(s, data=data or None, **hyper), want) < 1e-12
        assert all(np.array_equal(np.asarray(s[k]), state[k]) for k in state)      # the input is not mutated


def test_step_rejects_unknown_hyperparameters_and_missing_inputs(x64):
    mod = load_generated("ridge", "jax")
    s = mod.init(m=np.zeros(3), S=np.eye(3))
    with pytest.raises(TypeError, match="unknown hyperparameters"):
        mod.step(s, data={"X": np.ones((4, 3)), "y": np.ones(4)}, lr=1.0)
    with pytest.raises(TypeError, match="the data"):
        mod.step(s)


@pytest.mark.parametrize("recipe, message", [
    ("ncvi", r"ncvi\.yaml:\d+: recipe 'ncvi': the jax target .*quadrature"),
    ("ncvmp", r"ncvmp\.yaml:\d+: recipe 'ncvmp': the jax target .*quadrature"),
    ("svi", r"svi\.yaml:\d+: recipe 'svi': factorized"),
    ("fed_admm_full", r"fed_admm_full\.yaml:\d+: recipe 'fed_admm_full': the jax target .*entry points"),
])
def test_recipes_outside_the_subset_are_refused_with_a_located_message(recipe, message):
    with pytest.raises(UnsupportedTarget, match=message):
        generate(CATALOG / f"{recipe}.yaml", "jax")
    assert not (GENERATED / "jax" / f"{recipe}.py").exists()
