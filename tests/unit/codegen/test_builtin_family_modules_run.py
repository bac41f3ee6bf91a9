"""Every generated module runs (issue 37, item 3): for every built-in family, the optimizer that the design card's
command suggests for it (``blr-derive FAMILY --target torch`` names the options: an abstract loss and the first
approximations that derive an elementwise optimizer) is written for every target that accepts it, audited for
undefined names with pyflakes, imported, and every function it exposes runs on valid inputs — numpy ``init``/``step``
(and ``parameter``), jax's optax ``init``/``update`` or plain ``init``/``step``, the torch and Triton optimizers'
constructor, ``sampled_params`` and ``step`` — for three steps of a smooth loss, the state staying finite.
(The family's own module — its parameter maps, ``init``, ``step`` — runs at every hard point of every built-in family
in ``blr-derive check``: tests/unit/verify/test_check.py.)"""
from __future__ import annotations

import inspect
import shlex
import types

import numpy as np
import pytest
from pyflakes import api as flakes_api
from pyflakes import messages, reporter

from blr_derive import api
from blr_derive.codegen import TARGET_NAMES
from blr_derive.codegen.registry import emit
from blr_derive.core.errors import UnsupportedTarget
from blr_derive.families.library import builtin_family_names
from blr_derive.ir.build import build_ir


class _Collect(reporter.Reporter):
    def __init__(self):
        self.found = []

    def flake(self, message):
        if isinstance(message, (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)):
            self.found.append(str(message))

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {msg}")


def undefined_names(source):
    rep = _Collect()
    flakes_api.check(source, "<generated>", rep)
    return rep.found


def recipe_for(name):
    """The recipe of the options ``blr-derive NAME --target torch`` suggests, or None."""
    words = api.suggest_options(name, "torch")
    if words is None:
        return None
    approx = [w for k, w in zip(words, words[1:]) if k == "--approx"]
    settings = [shlex.split(w)[0] for k, w in zip(words, words[1:]) if k == "--set"]
    return api.recipe_from_options(name, loss="abstract", approximations=approx, settings=settings)


def _loss_grad(x):
    """A smooth loss: ½|x − 1|² + Σ sin x (its gradient)."""
    return (x - 1) + np.cos(x)


def run_numpy(mod):
    rng = np.random.default_rng(0)
    state = {n: (rng.normal(size=4) if i == 0 else rng.uniform(0.5, 2.0, size=4))
             for i, n in enumerate(mod.REQUIRED_STATE)}
    state = mod.init(**state)
    oracles = {"grad": _loss_grad, "hess": lambda x: np.ones_like(x) - np.sin(x) + 1.0}
    for _ in range(3):
        state = mod.step(state, oracles={k: oracles[k] for k in mod.ORACLES}, rng=np.random.default_rng(1))
    if hasattr(mod, "parameter"):
        assert np.all(np.isfinite(mod.parameter(state)))
    return state


def run_torch(mod, dtype="float64"):
    import torch
    cls = next(v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, torch.optim.Optimizer)
               and v is not torch.optim.Optimizer)
    required = {k: 10.0 for k, v in inspect.signature(cls.__init__).parameters.items()
                if k not in ("self", "params") and v.default is inspect.Parameter.empty
                and v.kind is not inspect.Parameter.VAR_KEYWORD}
    p = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 4, dtype=getattr(torch, dtype)))
    opt = cls([p], **required)

    def closure():
        opt.zero_grad()
        loss = ((p - 1) ** 2).sum() / 2 + torch.sin(p).sum()
        loss.backward()
        return loss
    for _ in range(3):
        if hasattr(opt, "sampled_params"):
            with opt.sampled_params(train=True):
                closure()
            opt.step()
        else:
            opt.step(closure)
    assert torch.all(torch.isfinite(p.detach()))
    for st in opt.state.values():
        for v in st.values():
            if torch.is_tensor(v) and v.is_floating_point():
                assert torch.all(torch.isfinite(v))


def run_jax(mod):
    import jax
    import jax.numpy as jnp
    factory = getattr(mod, mod.RECIPE, None)
    if factory is None:                          # plain jax.numpy functions: the numpy module's API
        state = {n: jnp.asarray(np.linspace(-1, 1, 4) if i == 0 else np.full(4, 1.5))
                 for i, n in enumerate(mod.REQUIRED_STATE)}
        state = mod.init(**state)
        for _ in range(3):
            state = mod.step(state, oracles={"grad": lambda x: (x - 1) + jnp.cos(x),
                                             "hess": lambda x: 2.0 - jnp.sin(x)}, key=jax.random.PRNGKey(0))
        return
    required = {k: 10.0 for k, v in inspect.signature(factory).parameters.items()
                if v.default is inspect.Parameter.empty}
    tx = factory(**required)
    params = {"w": jnp.linspace(-1.0, 1.0, 4)}
    state = tx.init(params)
    for _ in range(3):
        grads = jax.tree_util.tree_map(lambda x: (x - 1) + jnp.cos(x), params)
        updates, state = tx.update(grads, state, params)
        params = jax.tree_util.tree_map(lambda a, b: a + b, params, updates)
    assert bool(jnp.all(jnp.isfinite(params["w"])))


#: the Triton target updates float32 (and lower) parameters, in the interpreter on CPU (tests/conftest.py)
RUN = {"numpy": run_numpy, "torch": run_torch, "triton": lambda mod: run_torch(mod, "float32"), "jax": run_jax}


@pytest.mark.slow
def test_every_builtin_family_optimizer_runs_in_every_target():
    ran = {}
    for name in builtin_family_names():
        r = recipe_for(name)
        if r is None:
            continue
        D = api._derived(r)
        ir = build_ir(D, f"<{name}>")
        for target in TARGET_NAMES:
            try:
                source = emit(ir, target)
            except UnsupportedTarget:
                continue
            assert undefined_names(source) == [], (name, target)
            mod = types.ModuleType(f"_run_{name}_{target}")
            exec(compile(source, f"<{name} {target}>", "exec"), mod.__dict__)
            RUN[target](mod)
            ran.setdefault(name, []).append(target)
    # the families that have an elementwise optimizer (a Gaussian over one coordinate) run in all four targets
    assert {"gaussian_diag", "gaussian_diag_fixed_precision"} <= set(ran)
    assert all(set(ran[n]) == set(TARGET_NAMES) for n in ("gaussian_diag",)), ran
