"""fused=True for the generated optimizers whose peer has a fused CPU implementation (SGD, Adam, AdamW,
Adagrad; test_fused_matches_forloop of test/test_optim.py): one small run per optimizer over five parameter
groups with different hyperparameters (flags included) and parameters of many shapes -- zero-size, 0-d,
3-d -- in float32 and float64, mixed within a group, with gradients missing from some parameters at some steps
and an lr that changes at every step.  The generated fused optimizer must equal torch's fused optimizer
(parameters and state) and the generated non-fused optimizer (parameters).  The variety is the point: it
needs more than torch.compile's default recompile limit (8) of distinct argument signatures, the limit a
fullgraph kernel specialised per shape and dtype used to hit.  Each test loads its own copy of the generated
module, so that its compile cache starts empty."""
import copy
import warnings

import pytest
import torch

from conftest import load_generated
from contract_helpers import (FUSED_PEERS, PEERS, RICH, assert_params_close, assert_state_matches, default_dtype,
                              generated_class)

F32, F64 = torch.float32, torch.float64
# a group of its own in a flag or hyperparameter (not Adagrad's initial_accumulator_value: torch ignores a
# group's own value and uses the constructor's)
FLAG = {"sgd": dict(momentum=0.9, nesterov=True, dampening=0.0), "adam": dict(amsgrad=False),
        "adamw": dict(amsgrad=False), "adagrad": dict(lr_decay=0.0, eps=1e-8)}


def _layout(name):
    lr = RICH[name]["lr"]
    return [({}, [((3,), F64), ((2, 5), F64)]),
            ({"lr": lr * 0.5, "weight_decay": 0.1}, [((4, 1, 3), F32), ((0,), F32), ((), F32)]),
            ({"maximize": True}, [((7,), F64), ((2, 2, 2), F32)]),
            (FLAG[name], [((5,), F32), ((1, 6), F64)]),
            ({"lr": lr * 2.0, "weight_decay": 0.0}, [((6,), F64), ((3, 3), F64), ((2, 0, 2), F64)])]


# (step, flat parameter index): no gradient for that parameter at that step
MISSING = {(1, 1), (3, 5), (4, 4), (5, 7), (6, 9)}
STEPS = 7


def _run(cls, name, fused):
    g = torch.Generator().manual_seed(0)
    groups, params = [], []
    for kw, specs in _layout(name):
        ps = [torch.nn.Parameter(torch.randn(s, generator=g, dtype=F64).to(d)) for s, d in specs]
        params += ps
        groups.append({"params": ps, **kw})
    kwargs = dict(RICH[name], fused=True) if fused else dict(RICH[name], foreach=False)
    opt = cls(groups, **copy.deepcopy(kwargs))
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    for k in range(STEPS):
        for i, p in enumerate(params):
            grad = torch.randn(p.shape, generator=g, dtype=F64).to(p.dtype)
            p.grad = None if (k, i) in MISSING else grad
        opt.step()
        sched.step()
    return opt, params


@pytest.mark.parametrize("name", FUSED_PEERS)
def test_fused_matches_torch_fused_and_the_unfused_generated_optimizer(name):
    with default_dtype(F64):
        ref, ref_params = _run(PEERS[name], name, fused=True)
        plain, plain_params = _run(generated_class(name), name, fused=False)
        opt, params = _run(generated_class(name, fresh=True), name, fused=True)
    assert all(g["fused"] is True for g in opt.param_groups)
    assert_params_close(params, ref_params)
    assert_state_matches(opt, params, ref, ref_params)
    assert_params_close(params, plain_params, what="fused against unfused generated: parameter")


def _layouts(g):
    """(name, parameter, gradient maker) for parameters whose memory layout differs from contiguous, from their
    gradient's, or both: what the fused kernel once failed on (it laid a contiguous gradient out flat next to a
    strided parameter, could not compile, warned and left the fused path for the rest of the process)."""
    def same(p, x):             # the gradient laid out as the parameter is (what autograd gives a dense leaf)
        return torch.empty_like(p, memory_format=torch.preserve_format).copy_(x)

    out = []
    for d in (F32, F64):
        t = torch.randn(8, 6, generator=g, dtype=F64).to(d)
        c = torch.randn(3, 4, 5, 2, generator=g, dtype=F64).to(d)
        big = torch.randn(7, 9, generator=g, dtype=F64).to(d)
        out += [("transposed, contiguous gradient", t.t(), lambda p, x: x),
                ("channels_last, channels_last gradient", c.to(memory_format=torch.channels_last), same),
                ("channels_last, contiguous gradient", c.to(memory_format=torch.channels_last).clone(), lambda p, x: x),
                ("slice of a larger tensor, contiguous gradient", big[1:6, 2:7], lambda p, x: x)]
    return out


def _layout_run(cls, name, kwargs, contiguous):
    g = torch.Generator().manual_seed(0)
    layouts = _layouts(g)
    params = [torch.nn.Parameter(p.contiguous() if contiguous else p) for _, p, _ in layouts]
    strides = [p.stride() for p in params]
    opt = cls(params, **copy.deepcopy(kwargs))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)      # no "could not be compiled" and no fallback
        for k in range(3):
            for p, (_, _, grad) in zip(params, layouts):
                x = torch.randn(p.shape, generator=g, dtype=F64).to(p.dtype)
                p.grad = x if contiguous else grad(p, x)
            opt.step()
    assert [p.stride() for p in params] == strides          # updated in place, in their own layout
    return opt, params, [n for n, _, _ in layouts]


#: the layouts reach the kernel through one target-level function (runtime ``_flat``) whatever the recipe: two
#: optimizers, one with a state per parameter and a step count (adam) and one with a first-step-only buffer (sgd),
#: carry it (each case compiles kernels for four layouts and two dtypes: 15 s with an empty inductor cache)
LAYOUT_PEERS = [n for n in FUSED_PEERS if n in ("adam", "sgd")]


@pytest.mark.slow
@pytest.mark.parametrize("name", LAYOUT_PEERS)
def test_fused_any_memory_layout(name):
    """Parameters that are transposed, channels_last (4-d), slices and strided views of larger tensors, with
    gradients laid out as the parameter is or contiguous, float32 and float64 in one group: the generated fused
    optimizer compiles and stays fused (no warning) and gives every parameter and state the bits it gives the
    same values laid out contiguously; it equals torch's for-loop optimizer to the suite's tolerance, as the
    generated unfused optimizer does.  (torch 2.13's own fused CPU optimizers are not the reference here: where a
    parameter and its gradient are laid out differently, or the parameter is not dense, they read the memory as
    if it were laid out alike, and their values differ from their for-loop's by 0.06-0.9 after four steps.)"""
    mod = load_generated(name, "torch")
    cls = next(v for k, v in vars(mod).items() if k.lower() == name and isinstance(v, type))
    with default_dtype(F64):
        opt, params, names = _layout_run(cls, name, dict(RICH[name], fused=True), contiguous=False)
        flat, flat_params, _ = _layout_run(cls, name, dict(RICH[name], fused=True), contiguous=True)
        ref, ref_params, _ = _layout_run(PEERS[name], name, dict(RICH[name], foreach=False), contiguous=False)
        plain, plain_params, _ = _layout_run(generated_class(name), name, dict(RICH[name], foreach=False),
                                             contiguous=False)
    assert not mod._COMPILED.get("failed") and all(gr["fused"] is True for gr in opt.param_groups)
    for i, (p, q) in enumerate(zip(params, flat_params)):
        assert torch.equal(p, q), names[i]
        for key, value in opt.state[p].items():
            assert torch.equal(value, flat.state[q][key]), (names[i], key)
    assert_params_close(params, ref_params)
    assert_state_matches(opt, params, ref, ref_params)
    assert_params_close(params, plain_params, what="fused against unfused generated: parameter")
