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

import pytest
import torch

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
