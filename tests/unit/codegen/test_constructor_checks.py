"""Every target of a recipe refuses the same hyperparameters (codegen/validation.py: one description, rendered by
codegen/templates/_validate.py.j2).  For every catalog recipe with a torch and a Triton artifact, hyperparameters
across the valid/invalid boundary are given to the torch and Triton optimizers and to the jax target's optax
factory (where the recipe has one): all of them accept, or all refuse with the same exception and message; where
the recipe's peer is a torch.optim class (``checked_against: torch.optim.<Class>``), what the peer refuses they
refuse, with the peer's message where the recipe's ``peer: validate`` gives it.  The Triton optimizer used to skip
the recipe's checks: ``betas=(1.5, 0.999)`` drifted, ``betas=(0.9, 1.0)`` divided by zero at the first step and
``rho=5`` passed a ``rho <= 1`` recipe.  The one difference allowed: a check the recipe restricts to the jax
target (``targets: [jax]``, Adam's ``amsgrad``, which optax reads as optax.amsgrad) refuses there alone.

The recipes, their hyperparameters and their peers are read from the catalog (``catalog/generated/`` and the
recipe files), never listed here."""
import functools
import math
import re

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import CATALOG, GENERATED, load_generated

RECIPES = sorted(p.stem for p in (GENERATED / "torch").glob("*.py")
                 if p.stem != "__init__" and (GENERATED / "triton" / p.name).exists())

#: numbers at and around the boundaries of the catalog's conditions (0 and 1; NaN fails every comparison and the
#: infinities pass some), as floats and as ints, and one that is not a number
BOUNDARY = (-1.0, -1e-12, -0.0, 0.0, 1e-12, 0.5, 1.0 - 1e-12, 1.0, 1.0 + 1e-12, 1.5, 5.0, 1e6,
            math.nan, math.inf, -math.inf, -1, 0, 1, 2)
NOT_A_NUMBER = "0.5"


def _optimizer_class(mod):
    return next(v for v in vars(mod).values()
                if isinstance(v, type) and issubclass(v, torch.optim.Optimizer) and v.__module__ == mod.__name__)


@functools.lru_cache(maxsize=None)
def _recipe(name):
    """The recipe's hyperparameters [(name, kind, default, choices or tuple length, required)], its torch.optim
    peer (or None) and the messages of its ``peer: validate`` checks as patterns."""
    spec = yaml.safe_load((CATALOG / f"{name}.yaml").read_text(encoding="utf-8"))
    hypers = []
    for h, decl in (spec.get("hyperparameters") or {}).items():
        decl = decl if isinstance(decl, dict) else {"default": decl}
        default = decl.get("default")
        if decl.get("required"):
            kind = decl.get("type", "float")
        elif "choices" in decl:
            kind = "choice"
        elif isinstance(default, bool):
            kind = "bool"
        elif isinstance(default, list):
            kind = "tuple"
        else:
            kind = decl.get("type", "float")
        extra = decl["choices"] if kind == "choice" else len(default) if kind == "tuple" else None
        hypers.append((h, kind, tuple(default) if kind == "tuple" else default, extra, bool(decl.get("required"))))
    m = re.match(r"torch\.optim\.(\w+)\b", str(spec.get("checked_against", "")))
    pattern = lambda c: re.compile(".*".join(re.escape(t) for t in re.split(r"\{\w+\}", c["message"])) + r"\Z")
    checks = (spec.get("peer") or {}).get("validate", [])
    messages = [pattern(c) for c in checks if "torch" in c.get("targets", ["torch"])]
    jax_only = [pattern(c) for c in checks if c.get("targets") is not None and "torch" not in c["targets"]]
    return hypers, getattr(torch.optim, m.group(1)) if m else None, messages, jax_only


class Targets:
    """A recipe's constructors: torch, triton, the jax factory (None where jax writes plain functions), the peer."""

    def __init__(self, name):
        self.hypers, self.peer, self.messages, self.jax_only = _recipe(name)
        self.torch = _optimizer_class(load_generated(name, "torch"))
        self.triton = _optimizer_class(load_generated(name, "triton"))
        jax_mod = load_generated(name, "jax")
        self.jax = getattr(jax_mod, jax_mod.RECIPE, None)          # the optax factory, if the module has one
        self.required = {h: (1 if kind == "int" else 1.0) for h, kind, _, _, req in self.hypers if req}

    def check(self, kw, params):
        """Construct with every target; assert they agree, and that what the peer refuses they refuse.  Returns
        the torch target's outcome (None: accepted)."""
        got = _outcome(lambda: self.torch(params(), **kw))
        assert _outcome(lambda: self.triton(params(), **kw)) == got, kw
        if self.jax is not None:
            jax_got = _outcome(lambda: self.jax(**kw))
            if jax_got != got:      # only a check the recipe makes in the jax target alone (targets: [jax])
                assert got is None and jax_got[0] == "ValueError", (kw, jax_got)
                assert any(m.match(jax_got[1]) for m in self.jax_only), (kw, jax_got)
        if self.peer is not None:
            peer_got = _outcome(lambda: self.peer(params(), **kw))
            if peer_got is not None and not _int_in_float_tuple(kw, peer_got):
                assert got is not None, (kw, peer_got)
            if (peer_got and got and len(kw) == 1 and got[0] == "ValueError"
                    and any(m.match(got[1]) for m in self.messages)):
                assert got == peer_got, kw          # one hyperparameter off, refused by a check the peer makes
        return got


def _int_in_float_tuple(kw, peer_got):
    """torch.optim.Adam (and AdamW) refuse a tuple that mixes ints and floats ("betas must be either both floats or
    both Tensors", a test of Python types, not of values: Adamax and NAdam take the same tuple); the generated
    optimizers take an int as the number it is (test_int_tuple_elements_are_numbers)."""
    return peer_got == ("ValueError", "betas must be either both floats or both Tensors") and any(
        isinstance(v, tuple) and any(type(x) is int for x in v) for v in kw.values())


def _outcome(build):
    """None when ``build()`` accepts the hyperparameters, else (exception type, message)."""
    try:
        build()
    except Exception as exc:  # noqa: BLE001  (any refusal is the observation)
        return type(exc).__name__, str(exc)
    return None


def _empty():
    return [{"params": []}]       # a group without parameters: the constructor's checks, no kernel launch


def _single_deviations(t):
    """Every hyperparameter at every boundary value (a tuple: each element in turn, and one element too few or
    too many), the others at their defaults."""
    for h, kind, default, extra, _ in t.hypers:
        if kind in ("float", "int"):
            values = BOUNDARY + (NOT_A_NUMBER,)
        elif kind == "bool":
            values = (True, False)
        elif kind == "choice":
            values = tuple(extra) + ("not_a_choice", 1.0)
        else:
            values = [default[:i] + (v,) + default[i + 1:] for i in range(extra) for v in BOUNDARY + (NOT_A_NUMBER,)]
            values += [default[:-1], default + (0.5,), (), default[0]]
        for v in values:
            yield {**t.required, h: v}


@pytest.fixture(scope="module")
def targets():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = Targets(name)
        return cache[name]
    return get


@pytest.mark.parametrize("name", RECIPES)
def test_every_single_hyperparameter_off_its_default(name, targets):
    assert len(RECIPES) >= 10
    t = targets(name)
    outcomes = [t.check(kw, _empty) for kw in _single_deviations(t)]
    assert any(o is None for o in outcomes) and any(o is not None for o in outcomes)
    assert t.check(dict(t.required), _empty) is None                     # the defaults are valid


def _value(kind, extra):
    number = st.one_of(st.sampled_from(BOUNDARY), st.floats(-2.0, 3.0))
    if kind == "int":
        return st.sampled_from((-1, 0, 1, 2, 3, 0.0, 1.0, 1.5, math.nan, math.inf))
    if kind == "float":
        return number
    if kind == "bool":
        return st.booleans()
    if kind == "choice":
        return st.sampled_from(list(extra) + ["not_a_choice"])
    return st.one_of(st.lists(number, min_size=extra, max_size=extra),
                     st.lists(number, min_size=max(extra - 1, 0), max_size=extra + 1)).map(tuple)


@st.composite
def _drawn(draw):
    """A recipe and several of its hyperparameters drawn at once (the required ones always)."""
    name = draw(st.sampled_from(RECIPES))
    hypers, _, _, _ = _recipe(name)
    required = {h: _value(kind, extra) for h, kind, _, extra, req in hypers if req}
    optional = {h: _value(kind, extra) for h, kind, _, extra, req in hypers if not req}
    return name, draw(st.fixed_dictionaries(required, optional=optional))


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(_drawn())
def test_hyperparameters_drawn_together(targets, case):
    """Several hyperparameters off at once, on optimizers of a real parameter (the Triton optimizers of a recipe
    whose parameter holds an expression of the state write it at construction)."""
    name, kw = case
    targets(name).check(kw, lambda: [torch.nn.Parameter(torch.zeros(3))])


def test_int_tuple_elements_are_numbers():
    """torch.optim.Adam refuses ``betas=(0, 0.5)`` for the type of 0 (Adamax and NAdam take it); the generated
    Adam takes the int as a number, in every target, and steps as torch.optim.Adam does with ``(0.0, 0.5)``: a
    wider contract, not a silent one."""
    init = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64)
    outs = []
    for cls, betas, dtype in ((_optimizer_class(load_generated("adam", "torch")), (0, 0.5), torch.float64),
                              (_optimizer_class(load_generated("adam", "triton")), (0, 0.5), torch.float32),
                              (torch.optim.Adam, (0.0, 0.5), torch.float64)):
        p = torch.nn.Parameter(init.to(dtype))           # the Triton kernels update float32 (or lower) tensors
        opt = cls([p], lr=0.1, betas=betas)
        for k in range(3):
            p.grad = (torch.arange(5, dtype=p.dtype) - 2.0) * (k + 1)
            opt.step()
        outs.append(p.detach().double())
    assert torch.allclose(outs[0], outs[2], rtol=0, atol=1e-12)
    assert torch.allclose(outs[1], outs[2], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="both floats"):
        torch.optim.Adam([torch.nn.Parameter(init.clone())], betas=(0, 0.5))
    load_generated("adam", "jax").adam(betas=(0, 0.5))
