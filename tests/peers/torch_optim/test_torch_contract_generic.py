"""The generic behaviours of PyTorch's test/test_optim.py, each compared with the torch.optim peer step for step
in float64 (parameters to 1e-12, state to torch's names and values): parameter groups with different
hyperparameters, add_param_group, torch's lr schedulers (optim_db's scheduler_inputs), a tensor lr, step with
and without a closure, zero_grad(set_to_none=False) and steps on zero gradients, zero-size parameters,
non-contiguous parameters and gradients, empty parameter groups, gradients None for every parameter.
The peer-independent versions (every generated optimizer) are in test_torch_contract_behaviour.py."""
import copy

import pytest
import torch

from contract_helpers import (INFO, PEER_NAMES, PEERS, RICH, Problem, assert_moved, assert_nested_equal,
                              assert_params_close, assert_state_matches, default_dtype, generated_class, train)


def _pair(name, build, kwargs=None):
    """(generated, peer) factories over param lists, with RICH[name] updated by kwargs."""
    kw = {**RICH[name], **(kwargs or {})}
    return [lambda ps, cls=cls: cls(build(ps), **copy.deepcopy(kw)) for cls in (generated_class(name), PEERS[name])]


def _compare(name, factories, problem, steps=10, mask=None, between=None, **train_kw):
    """Run both optimizers on their own copies of the problem's parameters and compare; ``between(opt, params,
    k)`` runs before step k on each side (add_param_group, lr changes, ...)."""
    runs = []
    for factory in factories:
        params = problem.params()
        opt = factory(params)
        for k in range(steps):
            if between is not None:
                between(opt, params, k)
            train(name, opt, params, problem, 1, start=k, mask=mask, **train_kw)
        runs.append((opt, params))
    (opt, params), (ref, ref_params) = runs
    assert_params_close(params, ref_params)
    assert_state_matches(opt, params, ref, ref_params)
    return runs


# per optimizer: a second group that differs in lr, in a hyperparameter of its own and in maximize
SECOND_GROUP = {
    "sgd": dict(lr=0.02, momentum=0.5, nesterov=True, dampening=0.0, maximize=True),
    "rmsprop": dict(lr=0.005, alpha=0.95, centered=False, momentum=0.0, maximize=True),
    "adam": dict(lr=0.01, betas=(0.9, 0.999), amsgrad=False, weight_decay=0.0, maximize=True),
    "adamw": dict(lr=0.01, weight_decay=0.3, amsgrad=False, maximize=True),
    # (not initial_accumulator_value: torch's Adagrad ignores a group's own value and uses the constructor's)
    "adagrad": dict(lr=0.05, lr_decay=0.0, eps=1e-8, maximize=True),
    "adamax": dict(lr=0.01, betas=(0.9, 0.999), weight_decay=0.0, maximize=True),
    "nadam": dict(lr=0.01, momentum_decay=0.004, decoupled_weight_decay=True, maximize=True),
    "adadelta": dict(lr=1.0, rho=0.95, weight_decay=0.0, maximize=True),
}


@pytest.mark.parametrize("name", PEER_NAMES)
def test_param_groups_with_different_hyperparameters_match_the_peer(name):
    build = lambda ps: [{"params": ps[:2]}, {"params": ps[2:], **SECOND_GROUP[name]}]   # noqa: E731
    with default_dtype(torch.float64):
        problem = Problem(shapes=((5, 4), (4,), (3,), ()))
        (opt, params), _ = _compare(name, _pair(name, build), problem)
        assert_moved(params, problem.init)


@pytest.mark.parametrize("name", PEER_NAMES)
def test_param_groups_lr_leaves_a_near_zero_lr_group_alone_like_the_peer(name):
    """test_param_groups_lr: the outer lr is 1e-28, one group overrides it; the other group barely moves."""
    build = lambda ps: [{"params": ps[:2], "lr": RICH[name]["lr"]}, {"params": ps[2:]}]   # noqa: E731
    with default_dtype(torch.float64):
        problem = Problem(shapes=((5, 4), (4,), (2,)))
        (opt, params), _ = _compare(name, _pair(name, build, dict(lr=1e-28)), problem)
        assert_moved(params[:2], problem.init[:2])
        torch.testing.assert_close(params[2].detach(), problem.init[2], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", PEER_NAMES)
def test_add_param_group_matches_the_peer(name):
    """4 steps over two parameters, then add_param_group with the others and hyperparameters of its own."""
    def between(opt, params, k):
        if k == 4:
            opt.add_param_group({"params": params[2:], **SECOND_GROUP[name]})

    with default_dtype(torch.float64):
        problem = Problem(shapes=((5, 4), (4,), (3,), ()))
        (opt, params), _ = _compare(name, _pair(name, lambda ps: ps[:2]), problem, steps=9, between=between,
                                    mask=lambda k, i: i < 2 or k >= 4)
        assert len(opt.param_groups) == 2
        assert_moved(params[2:], problem.init[2:])


SCHED_CASES = [(n, i) for n in PEER_NAMES for i in range(len(INFO[n].scheduler_inputs))]


@pytest.mark.parametrize("name,index", SCHED_CASES, ids=[f"{n}-{i}" for n, i in SCHED_CASES])
def test_lr_schedulers_match_the_peer(name, index):
    """optim_db's scheduler_inputs (StepLR with ReduceLROnPlateau, ExponentialLR, LinearLR, ConstantLR,
    PolynomialLR, ...) over two parameter groups with different learning rates."""
    build = lambda ps: [{"params": ps[:2]}, {"params": ps[2:], "lr": RICH[name]["lr"] * 0.5}]   # noqa: E731
    with default_dtype(torch.float64):
        problem = Problem()
        runs = []
        for factory in _pair(name, build):
            params = problem.params()
            opt = factory(params)
            schedulers = [make(opt) for make in INFO[name].scheduler_inputs[index]]
            lrs = []
            for k in range(12):
                train(name, opt, params, problem, 1, start=k, schedulers=schedulers)
                lrs.append([g["lr"] for g in opt.param_groups])
            runs.append((opt, params, lrs))
        (opt, params, lrs), (ref, ref_params, ref_lrs) = runs
        assert_params_close(params, ref_params)
        assert_state_matches(opt, params, ref, ref_params)
        assert lrs == ref_lrs
        assert len({tuple(x) for x in ref_lrs}) > 1            # the schedule did change the lr


@pytest.mark.parametrize("name", PEER_NAMES)
def test_tensor_lr_with_a_scheduler_matches_the_peer(name):
    """test_tensor_lr: lr given as a 0-d tensor (foreach=False, where every peer accepts one), decayed by
    ExponentialLR in place; the group keeps a tensor lr like torch's."""
    with default_dtype(torch.float64):
        problem = Problem()
        runs = []
        for cls in (generated_class(name), PEERS[name]):
            params = problem.params()
            opt = cls(params, **{**RICH[name], "lr": torch.tensor(RICH[name]["lr"]), "foreach": False})
            sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.8)
            train(name, opt, params, problem, 10, schedulers=[sched])
            runs.append((opt, params))
        (opt, params), (ref, ref_params) = runs
        assert_params_close(params, ref_params)
        assert_state_matches(opt, params, ref, ref_params)
        assert torch.is_tensor(opt.param_groups[0]["lr"])
        torch.testing.assert_close(opt.param_groups[0]["lr"], ref.param_groups[0]["lr"], rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", PEER_NAMES)
def test_step_with_a_closure_matches_the_peer_and_returns_its_loss(name):
    with default_dtype(torch.float64):
        problem = Problem()
        runs = []
        for cls in (generated_class(name), PEERS[name]):
            params = problem.params()
            opt = cls(params, **RICH[name])
            losses = train(name, opt, params, problem, 6, closure=True)
            runs.append((opt, params, losses))
        (opt, params, losses), (ref, ref_params, ref_losses) = runs
        assert all(torch.is_tensor(v) for v in losses), "step(closure) must return the closure's loss"
        torch.testing.assert_close(torch.stack(losses), torch.stack(ref_losses), rtol=0, atol=1e-12)
        assert_params_close(params, ref_params)
        assert_state_matches(opt, params, ref, ref_params)


@pytest.mark.parametrize("name", PEER_NAMES)
def test_zero_grad_and_steps_on_zero_gradients_match_the_peer(name):
    """zero_grad() leaves None, zero_grad(set_to_none=False) zeros; steps on zero gradients (not None) advance
    the state like torch's (test_step_is_noop_for_zero_grads, with the peer's numbers)."""
    with default_dtype(torch.float64):
        problem = Problem()
        runs = []
        for cls in (generated_class(name), PEERS[name]):
            params = problem.params()
            opt = cls(params, **RICH[name])
            train(name, opt, params, problem, 3)
            opt.zero_grad()
            assert all(p.grad is None for p in params)
            problem.loss(params, 3).backward()
            opt.zero_grad(set_to_none=False)
            assert all(p.grad is not None and not p.grad.any() for p in params)
            for _ in range(3):
                opt.step()
            runs.append((opt, params))
        (opt, params), (ref, ref_params) = runs
        assert_params_close(params, ref_params)
        assert_state_matches(opt, params, ref, ref_params)


@pytest.mark.parametrize("name", PEER_NAMES)
def test_zero_size_parameters_match_the_peer(name):
    """Zero-size parameters ((0,), (2, 0, 3)) next to ordinary ones and a 0-d one, as the last parameter too
    (torch's foreach/fused regression, pytorch#100701)."""
    with default_dtype(torch.float64):
        problem = Problem(shapes=((3, 2), (0,), (), (2, 0, 3)))
        (opt, params), _ = _compare(name, _pair(name, lambda ps: ps), problem, steps=6)
        assert [tuple(p.shape) for p in params] == [(3, 2), (0,), (), (2, 0, 3)]


def _noncontiguous(t):
    """The same values in a non-contiguous layout (every other element of a larger buffer)."""
    buf = torch.zeros(*t.shape, 2, dtype=t.dtype)
    buf[..., 0] = t
    return buf[..., 0]


@pytest.mark.parametrize("name", PEER_NAMES)
def test_non_contiguous_parameters_and_gradients_match_the_peer(name):
    with default_dtype(torch.float64):
        problem = Problem(shapes=((5, 4), (4,), (3, 2)))
        runs = []
        for cls in (generated_class(name), PEERS[name]):
            params = [torch.nn.Parameter(_noncontiguous(t)) for t in problem.init[:2]]
            params.append(torch.nn.Parameter(problem.init[2].t().contiguous().t()))   # transposed strides
            assert not any(p.is_contiguous() for p in params[:2]) and not params[2].is_contiguous()
            opt = cls(params, **RICH[name])
            for k in range(8):
                opt.zero_grad()
                grads = torch.autograd.grad(problem.loss(params, k), params)
                for p, g in zip(params, grads):
                    p.grad = _noncontiguous(g)
                opt.step()
            runs.append((opt, params))
        (opt, params), (ref, ref_params) = runs
        assert not any(p.is_contiguous() for p in params)
        assert_params_close(params, ref_params)
        assert_state_matches(opt, params, ref, ref_params)


@pytest.mark.parametrize("name", PEER_NAMES)
def test_empty_param_groups_match_the_peer(name):
    """An empty group in the constructor and another one added later."""
    def between(opt, params, k):
        if k == 2:
            opt.add_param_group({"params": [], "lr": 0.5})

    build = lambda ps: [{"params": []}, {"params": ps}]   # noqa: E731
    with default_dtype(torch.float64):
        problem = Problem()
        (opt, params), _ = _compare(name, _pair(name, build), problem, steps=6, between=between)
        assert [len(g["params"]) for g in opt.param_groups] == [0, 3, 0]


@pytest.mark.parametrize("name", PEER_NAMES)
def test_gradients_none_everywhere_is_a_no_op_like_the_peer(name):
    """test_step_is_noop_when_params_have_no_grad: no parameter has a gradient, with and without a closure;
    also after some training (state present): the parameters and the state stay as they were."""
    with default_dtype(torch.float64):
        problem = Problem()
        runs = []
        for cls in (generated_class(name), PEERS[name]):
            params = problem.params()
            opt = cls(params, **RICH[name])
            opt.step()
            opt.step(lambda: torch.tensor(1.0))
            assert all(p.detach().equal(t) for p, t in zip(params, problem.init))
            train(name, opt, params, problem, 3)
            before = [p.detach().clone() for p in params]
            state = copy.deepcopy(opt.state_dict()["state"])
            opt.zero_grad()
            opt.step()
            assert all(p.detach().equal(b) for p, b in zip(params, before))
            assert_nested_equal(opt.state_dict()["state"], state)
            runs.append((opt, params))
        (opt, params), (ref, ref_params) = runs
        assert_params_close(params, ref_params)
        assert_state_matches(opt, params, ref, ref_params)
