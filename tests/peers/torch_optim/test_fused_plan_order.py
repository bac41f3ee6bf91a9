"""The fused kernel computes each element by the default path's operations, in its order (issue 39, item 3).

The kernel of ``fused=True`` is printed from the plan the multi-tensor (default) path is printed from
(codegen/backends/torch/kernel.py): ``lerp_``, ``mul_`` then ``addcmul_``/``addcdiv_``, the host coefficients
folded as the default path folds them, the scaled square root, the quotient first.  So the kernel, run by torch
eagerly instead of compiled, must give the default path's bits -- and the default path gives torch.optim's foreach
bits where torch has the optimizer (checked here too, so the chain ends at an independent reference).  Compiled,
inductor's arithmetic may round otherwise (a correctly rounded square root where ATen's CPU sqrt is not; no fused
multiply-add where ATen's lerp, add(alpha) and addcmul kernels have one): there the generated fused path must differ
from torch's fused path no more often than torch's fused path differs from its foreach path (the yardstick of
BENCHMARKS.md, measured one step at a time from the same parameters, state and gradients).

Before (the derived expressions printed as written) the eager kernel differed from the default path in most
entries after a few steps, and compiled AdamW differed from torch's fused AdamW in 29 % of the entries per step
against torch's own 0.38 %."""
import copy

import pytest
import torch

from contract_helpers import PEERS, generated_class

SHAPES = ((40, 30), (30,), (7, 3, 5))
STEPS = 5

CASES = [
    ("adamw", dict(lr=1e-2, weight_decay=1e-2)),
    ("adamw", dict(lr=1e-2, weight_decay=1e-2, amsgrad=True)),
    ("adam", dict(lr=1e-2, weight_decay=1e-2)),
    ("adam", dict(lr=1e-2, amsgrad=True)),
    ("nadam", dict(lr=1e-2)),
    ("nadam", dict(lr=1e-2, weight_decay=1e-2, decoupled_weight_decay=True)),
    ("rmsprop", dict(lr=1e-2)),
    ("rmsprop", dict(lr=1e-2, momentum=0.9, centered=True, weight_decay=1e-3)),
    ("sgd", dict(lr=1e-2, momentum=0.9, weight_decay=1e-3)),
    ("sgd", dict(lr=1e-2, momentum=0.9, dampening=0.1)),
    ("sgd", dict(lr=1e-2, momentum=0.9, nesterov=True)),
    ("adagrad", dict(lr=1e-2, weight_decay=1e-3)),
    ("adamax", dict(lr=1e-2, weight_decay=1e-2)),
    ("adadelta", dict(lr=1.0, weight_decay=1e-2)),
]


def _params(dtype):
    g = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s, generator=g, dtype=dtype)) for s in SHAPES]


def _run(make, dtype):
    params = _params(dtype)
    opt = make(params)
    gs = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gs, dtype=dtype)
        opt.step()
    return [p.detach().clone() for p in params]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{'-'.join(k for k in kw if k != 'lr') or 'plain'}"
                                                     for n, kw in CASES])
def test_fused_kernel_run_eagerly_is_the_default_path(name, kwargs, dtype):
    cls = generated_class(name, fresh=True)            # a module of its own: its kernel cache is patched below
    module = cls._apply.__globals__
    calls = []

    def eager(*args):                                    # the kernel as printed, run by torch without compiling
        calls.append(1)
        return module["_kernel_group"](*args)
    module["_COMPILED"]["kernel"] = eager
    fused = _run(lambda ps: cls(ps, **kwargs, fused=True), dtype)
    assert len(calls) == STEPS                           # one kernel call per step: the fused path ran
    default = _run(lambda ps: cls(ps, **kwargs), dtype)
    peer = _run(lambda ps: PEERS[name](ps, **kwargs, foreach=True), dtype)
    assert all(not torch.equal(a, b) for a, b in zip(default, _params(dtype)))     # the steps moved them
    assert all(torch.equal(a, b) for a, b in zip(default, peer))          # the default path: torch's foreach bits
    assert all(torch.equal(a, b) for a, b in zip(fused, default)), \
        sum(int((a != b).sum()) for a, b in zip(fused, default))


def _one_step_apart(make_a, make_b, steps=STEPS):
    """Entries in which one step of b differs from one step of a from the same parameters, state and gradients,
    summed over ``steps`` steps (b is put back onto a's parameters and state after each)."""
    pa, pb = _params(torch.float32), _params(torch.float32)
    oa, ob = make_a(pa), make_b(pb)
    gs = torch.Generator().manual_seed(1)
    apart = 0
    for _ in range(steps):
        for p, q in zip(pa, pb):
            p.grad = torch.randn(p.shape, generator=gs)
            q.grad = p.grad.clone()
        oa.step()
        ob.step()
        apart += sum(int((p != q).sum()) for p, q in zip(pa, pb))
        with torch.no_grad():
            for p, q in zip(pa, pb):
                q.copy_(p)
        own = [{k: g[k] for k in ("foreach", "fused") if k in g} for g in ob.param_groups]
        ob.load_state_dict(copy.deepcopy(oa.state_dict()))
        for g, kept in zip(ob.param_groups, own):
            g.update(kept)
    return apart


@pytest.mark.slow
@pytest.mark.parametrize("name,kwargs", [c for c in CASES if c[0] in ("adam", "adamw", "sgd")][:6],
                         ids=lambda v: v if isinstance(v, str) else "-".join(k for k in v if k != "lr"))
def test_compiled_fused_kernel_is_as_close_to_torch_fused_as_torch_fused_to_foreach(name, kwargs):
    ours = generated_class(name, fresh=True)
    peer = PEERS[name]
    yardstick = _one_step_apart(lambda ps: peer(ps, **kwargs, foreach=True), lambda ps: peer(ps, **kwargs, fused=True))
    to_torch = _one_step_apart(lambda ps: peer(ps, **kwargs, fused=True), lambda ps: ours(ps, **kwargs, fused=True))
    assert to_torch <= yardstick, (to_torch, yardstick)
