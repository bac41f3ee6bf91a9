"""The contract of the generated torch optimizers that have a torch.optim peer (SGD, RMSprop, Adam, AdamW,
Adagrad, Adamax, NAdam, Adadelta), numerically: the peer's full constructor signature; every CPU configuration
of torch's optim_db (maximize, tensor lr, ... included) plus a few more, in float32 and float64, parameter and
state step for step; foreach=False/True; per-parameter step counts with intermittent and late gradients;
complex parameters; state_dicts that move between torch and the generated optimizer both ways (also with a
plain-number ``step``).  Ported from PyTorch's test/test_optim.py (TestOptimRenewed); helpers in
contract_helpers.py."""
import copy
import inspect

import pytest
import torch

from contract_helpers import (CONFIG_CASES, CONFIG_IDS, PEER_NAMES, PEERS, RICH, Problem, assert_moved,
                              assert_params_close, assert_state_matches, configs, default_dtype,
                              generated_class, peer_signature, train)

STEPS = 12


@pytest.mark.parametrize("name", PEER_NAMES)
def test_constructor_has_the_peers_full_signature(name):
    """Every argument of the peer (foreach, maximize, capturable, differentiable, fused, decoupled_weight_decay
    included) with the peer's default, kind and position; the only argument allowed beyond the peer's is a
    keyword-only ``fused`` (the generated compiled-kernel switch) on peers that have none."""
    ours = inspect.signature(generated_class(name).__init__).parameters
    theirs = peer_signature(name)
    missing = [a for a in theirs if a not in ours]
    assert not missing, f"arguments of torch.optim.{PEERS[name].__name__} missing: {missing}"
    extra = [a for a in ours if a not in theirs and not (a == "fused" and ours[a].kind == ours[a].KEYWORD_ONLY)]
    assert not extra, f"arguments torch.optim.{PEERS[name].__name__} does not have: {extra}"
    for arg, p in theirs.items():
        assert ours[arg].kind == p.kind, (arg, str(ours[arg].kind), str(p.kind))
        assert ours[arg].default == p.default, (arg, ours[arg].default, p.default)
    positional = [a for a, p in theirs.items() if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert [a for a, p in ours.items() if p.kind == p.POSITIONAL_OR_KEYWORD] == positional


def _run_pair(name, kwargs, problem, steps=STEPS, mask=None, groups=None, compare_each_step=False, **train_kw):
    """The generated optimizer and its peer side by side from the same start; returns both (opt, params)."""
    params, ref_params = problem.params(), problem.params()
    build = groups or (lambda ps: ps)
    opt = generated_class(name)(build(params), **copy.deepcopy(kwargs))
    ref = PEERS[name](build(ref_params), **copy.deepcopy(kwargs))
    for k in range(steps):
        train(name, ref, ref_params, problem, 1, start=k, mask=mask, **train_kw)
        train(name, opt, params, problem, 1, start=k, mask=mask, **train_kw)
        if compare_each_step:
            assert_params_close(params, ref_params, what=f"step {k}: parameter")
    return (opt, params), (ref, ref_params)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name,index", CONFIG_CASES, ids=CONFIG_IDS)
def test_every_torch_configuration_matches_the_peer(name, index, dtype):
    desc, kwargs = configs(name)[index]
    with default_dtype(dtype):
        problem = Problem(dtype)
        (opt, params), (ref, ref_params) = _run_pair(name, kwargs, problem)
        assert_params_close(params, ref_params)
        assert_state_matches(opt, params, ref, ref_params)
        assert_moved(ref_params, problem.init)


@pytest.mark.parametrize("name,index", CONFIG_CASES, ids=CONFIG_IDS)
def test_param_groups_hold_the_peers_hyperparameters(name, index):
    """Every key of torch's param groups (maximize, foreach, capturable, differentiable, fused,
    decoupled_weight_decay, ...) with torch's value -- what a state_dict carries to the other side.  For
    foreach and fused, None (torch's 'choose for me') and False are the same on CPU."""
    desc, kwargs = configs(name)[index]
    p = torch.nn.Parameter(torch.randn(2))
    opt = generated_class(name)([p], **copy.deepcopy(kwargs))
    ref = PEERS[name]([torch.nn.Parameter(p.detach().clone())], **copy.deepcopy(kwargs))
    ours, theirs = opt.param_groups[0], ref.param_groups[0]
    missing = sorted(set(theirs) - set(ours))
    assert not missing, f"param group keys missing: {missing}"
    for key, want in theirs.items():
        got = ours[key]
        if key == "params":
            continue
        if key in ("foreach", "fused") and not want:
            assert not got, f"param group {key!r}: {got!r}, torch has {want!r}"
        elif torch.is_tensor(want):
            assert torch.is_tensor(got) and torch.equal(got, want), f"param group {key!r}: {got!r}, torch has {want!r}"
        else:
            assert got == want, f"param group {key!r}: {got!r}, torch has {want!r}"


@pytest.mark.parametrize("foreach", [False, True], ids=["foreach_False", "foreach_True"])
@pytest.mark.parametrize("name", PEER_NAMES)
def test_foreach_flag_matches_the_peer(name, foreach):
    kwargs = dict(RICH[name], foreach=foreach)
    with default_dtype(torch.float64):
        (opt, params), (ref, ref_params) = _run_pair(name, kwargs, Problem())
        assert_params_close(params, ref_params)
        assert_state_matches(opt, params, ref, ref_params)
        assert opt.param_groups[0]["foreach"] is foreach


def _intermittent(k, i):
    """Parameter 0 has a gradient at every step but 5 (when no parameter has one), parameter 1 only from step 3
    on, parameter 2 at the steps k % 3 != 1; parameter 3 never."""
    if k == 5 or i == 3:
        return False
    return {0: True, 1: k >= 3, 2: k % 3 != 1}[i]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", PEER_NAMES)
def test_per_parameter_step_counts_with_intermittent_gradients(name, dtype):
    """torch counts steps per parameter: a parameter whose gradient is None is skipped and its counter stays."""
    with default_dtype(dtype):
        problem = Problem(dtype, shapes=((3, 2), (4,), (), (2,)))
        (opt, params), (ref, ref_params) = _run_pair(name, RICH[name], problem, steps=10, mask=_intermittent,
                                                     compare_each_step=True)
        assert_state_matches(opt, params, ref, ref_params)
        assert params[3].detach().equal(problem.init[3])          # never a gradient: never moved


def _complex_problem(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    real = dtype.to_real()
    init = [torch.randn(5, 4, generator=g, dtype=dtype), torch.randn(4, generator=g, dtype=dtype),
            torch.randn(3, generator=g, dtype=real)]            # the last one real: complex and real mixed
    grads = [[torch.randn(t.shape, generator=g, dtype=t.dtype) for t in init] for _ in range(6)]
    return init, grads


@pytest.mark.parametrize("name,index", CONFIG_CASES, ids=CONFIG_IDS)
def test_complex_parameters_match_the_peer(name, index):
    """torch treats a complex parameter as its view_as_real; complex128 (and one float64 parameter) to 1e-12."""
    desc, kwargs = configs(name)[index]
    with default_dtype(torch.float64):
        init, grads = _complex_problem(torch.complex128, index)
        params = [torch.nn.Parameter(t.clone()) for t in init]
        ref_params = [torch.nn.Parameter(t.clone()) for t in init]
        opt = generated_class(name)(params, **copy.deepcopy(kwargs))
        ref = PEERS[name](ref_params, **copy.deepcopy(kwargs))
        for step_grads in grads:
            for o, ps in ((opt, params), (ref, ref_params)):
                for p, g in zip(ps, step_grads):
                    p.grad = g.clone()
                o.step()
        assert_params_close(params, ref_params)
        assert_state_matches(opt, params, ref, ref_params)
        assert_moved(ref_params, init)


def _two_groups(kwargs):
    lr = kwargs.get("lr", 1e-3)
    return lambda ps: [{"params": ps[:2]}, {"params": ps[2:], "lr": lr * 0.5}]


def _plain_steps(state_dict):
    for st in state_dict["state"].values():
        if torch.is_tensor(st.get("step")):
            st["step"] = st["step"].item()
    return state_dict


@pytest.mark.parametrize("direction", ["torch_to_generated", "generated_to_torch", "torch_to_generated_plain_step"])
@pytest.mark.parametrize("name", PEER_NAMES)
def test_state_dict_moves_between_torch_and_generated(name, direction):
    """6 steps with one optimizer, its state_dict loaded into the other kind, 6 more steps: equal to the peer
    running all 12 steps.  ``plain_step``: the loaded ``step`` values are Python numbers (older checkpoints)."""
    kwargs = RICH[name]
    gen, peer = generated_class(name), PEERS[name]
    first, second = (gen, peer) if direction == "generated_to_torch" else (peer, gen)
    groups = _two_groups(kwargs)
    with default_dtype(torch.float64):
        problem = Problem()
        ref_params = problem.params()
        ref = peer(groups(ref_params), **kwargs)
        train(name, ref, ref_params, problem, 12)
        params = problem.params()
        opt = first(groups(params), **kwargs)
        train(name, opt, params, problem, 6)
        sd = copy.deepcopy(opt.state_dict())
        if direction.endswith("plain_step"):
            sd = _plain_steps(sd)
        opt2 = second(groups(params), **kwargs)
        opt2.load_state_dict(sd)
        train(name, opt2, params, problem, 6, start=6)
        assert_params_close(params, ref_params)
        assert_state_matches(opt2, params, ref, ref_params)


@pytest.mark.parametrize("name", PEER_NAMES)
def test_load_state_dict_without_the_newer_flags(name):
    """test_can_load_older_state_dict: a state_dict whose param groups lack the flags torch added later
    (foreach, maximize, capturable, differentiable, fused) loads and steps like torch's."""
    flags = ("foreach", "differentiable", "fused", "maximize", "capturable", "decoupled_weight_decay")
    with default_dtype(torch.float64):
        problem = Problem()
        runs = []
        for cls in (generated_class(name), PEERS[name]):
            params = problem.params()
            opt = cls(params, **RICH[name])
            train(name, opt, params, problem, 3)
            sd = copy.deepcopy(opt.state_dict())
            for group in sd["param_groups"]:
                for flag in flags:
                    group.pop(flag, None)
            opt.load_state_dict(sd)
            train(name, opt, params, problem, 3, start=3)
            runs.append((opt, params))
        (opt, params), (ref, ref_params) = runs
        assert_params_close(params, ref_params)
        assert_state_matches(opt, params, ref, ref_params)


def test_every_configuration_is_collected():
    """Guards the parametrization: torch's optim_db gives at least 5 CPU configurations per peer."""
    assert all(len(configs(n)) >= 5 for n in PEER_NAMES)
    assert len(CONFIG_CASES) == sum(len(configs(n)) for n in PEER_NAMES)
