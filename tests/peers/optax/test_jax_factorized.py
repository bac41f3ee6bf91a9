"""The jax target's factorized (several-block) recipes (plain jax.numpy ``init``/``step`` functions) against the
numpy target's modules: the same steps, on random valid inputs, to 1e-12 in float64, called directly and under
``jax.jit`` (state, data and numeric hyperparameters traced), over a few iterations."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from blr_derive.api import derive_record
from blr_derive.codegen.backends.jax.rows import JnpRowBatchPrinter
from blr_derive.codegen.registry import emit
from blr_derive.core.errors import CodegenError
from blr_derive.ir.build import build_ir
from conftest import CATALOG, load_generated, load_module_from_path

# jax is in the test extra (the jax target's peers): imported, never skipped
RECIPES = ["em_gmm", "em_gmm_unrolled", "svi", "svi_unrolled", "vmp"]
STEPS = 3


def _spd(rng, p):
    a = rng.standard_normal((p, p))
    return a @ a.T / p + np.eye(p)


def _mixture(rng, K, P, N):
    centers = rng.normal(scale=4.0, size=(K, P))
    Y = centers[rng.integers(K, size=N)] + rng.normal(size=(N, P))
    return Y, rng.dirichlet(np.full(K, 5.0)), Y[rng.choice(N, K, replace=False)], np.stack([_spd(rng, P)
                                                                                            for _ in range(K)])


def _em_gmm(rng, K=3):
    Y, w, m, L = _mixture(rng, K, 3, 120)
    return {"pi": w, "m": m, "L": L}, lambda: {"y": Y}, {}


def _em_gmm_unrolled(rng):
    Y, w, m, L = _mixture(rng, 3, 3, 120)
    state = {"pi1": w[0], "pi2": w[1], **{f"m{k + 1}": m[k] for k in range(3)},
             **{f"L{k + 1}": L[k] for k in range(3)}}
    return state, lambda: {"y": Y}, {}


def _svi_inputs(rng, K):
    y = np.concatenate([rng.normal(c, 1.0, 40) for c in np.linspace(-4.0, 5.0, K)])
    a, m, s = 1.0 + rng.random(K), rng.normal(scale=2.0, size=K), 0.5 + rng.random(K)
    hp = {"N": len(y), "sigma2": float(rng.uniform(0.5, 2.0)), "a0": float(rng.uniform(0.5, 2.0)),
          "m0": float(rng.normal()), "s0": float(rng.uniform(0.05, 0.5)), "delay": float(rng.uniform(1.0, 3.0)),
          "forgetting": float(rng.uniform(0.55, 0.95))}
    return y, a, m, s, hp, lambda: {"y": y[rng.choice(len(y), 30, replace=False)]}      # a fresh minibatch


def _svi(rng):
    _, a, m, s, hp, batch = _svi_inputs(rng, 3)
    return {"w_a": a, "mu_m": m, "mu_s": s}, batch, hp


def _svi_unrolled(rng):
    _, a, m, s, hp, batch = _svi_inputs(rng, 3)
    state = {**{f"w_a{k + 1}": a[k] for k in range(3)}, **{f"mu{k + 1}_m": m[k] for k in range(3)},
             **{f"mu{k + 1}_s": s[k] for k in range(3)}}
    return state, batch, hp


def _vmp(rng):
    y = rng.normal(1.5, 0.7, size=40)
    hp = {"m0": float(rng.normal()), "kappa0": float(rng.uniform(0.5, 3.0)), "alpha0": float(rng.uniform(1.0, 3.0)),
          "beta0": float(rng.uniform(0.5, 2.0))}
    state = {"theta_m": float(rng.normal()), "theta_s": float(rng.uniform(0.5, 2.0)),
             "tau_alpha": float(rng.uniform(1.0, 3.0)), "tau_beta": float(rng.uniform(0.5, 2.0))}
    return state, lambda: {"y": y}, hp


INPUTS = {"em_gmm": _em_gmm, "em_gmm_unrolled": _em_gmm_unrolled, "svi": _svi, "svi_unrolled": _svi_unrolled,
          "vmp": _vmp}


def _max_error(ours, ref):
    """The largest difference, relative to max(1, |reference|) per output; every output is finite."""
    assert set(ours) == set(ref)
    err = 0.0
    for k in ref:
        r, o = np.asarray(ref[k], dtype=float), np.asarray(ours[k], dtype=float)
        assert o.shape == r.shape, k
        assert np.all(np.isfinite(r)) and np.all(np.isfinite(o)), k
        err = max(err, float(np.max(np.abs(o - r), initial=0.0) / max(1.0, float(np.max(np.abs(r), initial=0.0)))))
    return err


@functools.lru_cache(maxsize=None)
def _modules(recipe):
    """The numpy and jax modules of a recipe and the jax step under jax.jit (loaded and traced once per test run:
    the state passed to it holds the recipe's state only, so its structure does not change from step to step)."""
    ours = load_generated(recipe, "jax")
    return load_generated(recipe, "numpy"), ours, jax.jit(lambda st, d, hp: ours.step(st, data=d, **hp))


def _compare(recipe, state, batch, hyper, steps=STEPS, modules=None):
    """``steps`` steps of the numpy module, of the jax module and of the jax module under jax.jit, each from its
    own state, on the same data; returns the largest error against numpy."""
    ref, ours, jitted = modules or _modules(recipe)
    want, got, got_jit = ref.init(**state), ours.init(**state), ours.init(**state)
    assert all(isinstance(v, jax.Array) for v in got.values())
    assert all(v.dtype == jnp.float64 for k, v in got.items() if k != "step")
    worst = 0.0
    for _ in range(steps):
        data = batch()
        prev, before = got, {k: np.array(v) for k, v in got.items()}
        want = ref.step(want, data=data, **hyper)
        got = ours.step(got, data=data, **hyper)
        assert all(np.array_equal(np.asarray(prev[k]), v) for k, v in before.items())      # not mutated
        got_jit = jitted({k: got_jit[k] for k in ours.STATE}, data, hyper)
        worst = max(worst, _max_error(got, want), _max_error(got_jit, want))
        assert worst < 1e-12
        assert set(want) <= set(got)
    return worst


@pytest.mark.parametrize("recipe", RECIPES)
def test_jax_factorized_step_equals_numpy_step(recipe, x64):
    ref, ours, _ = _modules(recipe)
    for name in ("STATE", "HYPERPARAMETERS", "ORACLES", "DATA", "EQUATIONS", "SHAPES", "SYMMETRIC", "BLOCKS",
                 "PLATE_DATA", "LOCAL_OUTPUTS"):
        assert getattr(ours, name) == getattr(ref, name), name
    for seed in range(2):
        state, batch, hyper = INPUTS[recipe](np.random.default_rng(seed))
        assert _compare(recipe, state, batch, hyper) < 1e-12


def test_em_gmm_at_seven_components(x64):
    """The component count is an array size at run time: the same module at K = 7."""
    _, ours, _ = _modules("em_gmm")
    state, batch, hyper = _em_gmm(np.random.default_rng(7), K=7)
    assert _compare("em_gmm", state, batch, hyper) < 1e-12
    out = ours.step(ours.init(**state), data=batch())
    assert out["pi"].shape == (7,) and out["m"].shape == (7, 3) and out["L"].shape == (7, 3, 3)
    assert out["z_p"].shape == (120, 7)


def test_shapes_and_symmetry_are_checked_and_the_symmetry_check_is_skipped_under_jit(x64):
    mod = _modules("em_gmm")[1]
    state, batch, _ = _em_gmm(np.random.default_rng(1))
    bad = {**state, "L": state["L"] + np.triu(np.ones((3, 3)), 1)}
    with pytest.raises(ValueError, match="L must be symmetric"):
        mod.init(**bad)
    with pytest.raises(ValueError, match=r"L has shape \(3, 3, 3\), but P = 2"):
        mod.init(**{**state, "m": state["m"][:, :2]})
    with pytest.raises(TypeError, match="the data"):
        mod.step(mod.init(**state))
    with pytest.raises(TypeError, match="unknown hyperparameters"):
        mod.step(mod.init(**state), data=batch(), lr=1.0)
    # a traced L is not checked (its values are not known when the step is traced); the step still runs
    out = _modules("em_gmm")[2](bad, batch(), {})
    assert out["L"].shape == (3, 3, 3) and np.all(np.isfinite(np.asarray(out["L"])))


def test_the_row_loop_fallback_maps_the_rows_with_vmap(x64, monkeypatch, tmp_path):
    """Where the row printer cannot batch a plate (the numpy target then loops over the rows in Python), the jax
    module maps the per-row program over the rows with jax.vmap: the same step, directly and under jit."""
    def refuse(self, e):
        raise CodegenError("not batched")
    monkeypatch.setattr(JnpRowBatchPrinter, "plate_sum", refuse)
    _, D = derive_record(CATALOG / "vmp.yaml")
    text = emit(build_ir(D, "catalog/vmp.yaml"), "jax")
    assert "jax.vmap(_row)" in text and "for n in range" not in text
    path = tmp_path / "vmp_vmap.py"
    path.write_text(text, encoding="utf-8")
    ours = load_module_from_path(path)
    state, batch, hyper = _vmp(np.random.default_rng(3))
    modules = (load_generated("vmp", "numpy"), ours, jax.jit(lambda st, d, hp: ours.step(st, data=d, **hp)))
    assert _compare("vmp", state, batch, hyper, modules=modules) < 1e-12


@pytest.mark.parametrize("name", ["key", "jnp"])
def test_a_name_the_module_binds_is_refused_at_the_blocks(name, tmp_path):
    """The factorized modules bind the same names as the other jax modules (``key``, the unused random key of
    step, and ``jnp``): a hyperparameter with such a name is a located refusal (the numpy target writes it)."""
    from blr_derive.api import generate
    from blr_derive.core.errors import UnsupportedTarget
    text = (CATALOG / "vmp.yaml").read_text(encoding="utf-8")
    line = text.splitlines().index("blocks:") + 1
    path = tmp_path / f"vmp_{name}.yaml"
    path.write_text(text.replace("kappa0", name), encoding="utf-8")
    assert f'{name} = hp["{name}"]' in generate(path, "numpy")
    with pytest.raises(UnsupportedTarget, match=rf"vmp_{name}\.yaml:{line}: recipe 'vmp': the jax target needs "
                                                rf"names other than {name}"):
        generate(path, "jax")
    source = (CATALOG / "generated" / "jax" / "vmp.py").read_text(encoding="utf-8")
    assert "def step(state, *, oracles=None, data=None, key=None, **hyperparameters):" in source
