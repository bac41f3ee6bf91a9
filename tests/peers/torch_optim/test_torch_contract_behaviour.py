"""Peer-independent behaviours of test/test_optim.py for every generated torch optimizer (the eight with a
torch.optim peer and IVON, OGN, VOGN, BayesBiNN, STE): step hooks and state_dict hooks, state_dict
determinism and resumption, deepcopy, pickle, torch.save + torch.load(weights_only=True), plain-number
``step`` values, named parameters, dtype preservation; for the optimizers without a torch peer also: a zero-lr
group stays put, add_param_group, an lr scheduler, the closure, zero-size / non-contiguous parameters and empty
groups change nothing, gradients None everywhere is a no-op; IVON leaves a parameter that never has a
gradient untouched.  The sampling optimizers (IVON, VOGN, BayesBiNN) draw their noise from torch's global
generator, seeded per step, so that two runs that should agree see the same draws."""
import copy
import io
import pickle

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from contract_helpers import (ALL_NAMES, NO_PEER, RICH, SAMPLED, Problem, assert_nested_equal, assert_params_close,
                              default_dtype, generated_class, make, step_once, train)

SEED = 1234


def _fresh(name, problem, **kwargs):
    params = problem.params()
    return make(name, params, **kwargs), params


def _all_params(opt):
    return [p for g in opt.param_groups for p in g["params"]]


def _resume_equal(name, opt_a, params_a, opt_b, params_b, problem, start, steps=4):
    train(name, opt_a, params_a, problem, steps, start=start, seed=SEED)
    train(name, opt_b, params_b, problem, steps, start=start, seed=SEED)
    assert_params_close(params_b, params_a, what="resumed parameter")


@pytest.mark.parametrize("name", ALL_NAMES)
def test_step_hooks_fire_in_order(name):
    """test_step_pre_hook, test_step_post_hook and test_step_all_hooks (global and local hooks, removal)."""
    data = []
    problem = Problem()
    opt, params = _fresh(name, problem)
    other = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))])
    handles = [register_optimizer_step_pre_hook(lambda *a: data.append(0)),
               register_optimizer_step_post_hook(lambda *a: data.append(5)),
               opt.register_step_pre_hook(lambda *a: data.append(1)),
               opt.register_step_post_hook(lambda *a: data.append(2)),
               other.register_step_pre_hook(lambda *a: data.append(3))]
    try:
        step_once(name, opt, params, lambda: problem.loss(params, 0))
        assert data == [0, 1, 2, 5]
        other.step()
        assert data == [0, 1, 2, 5, 0, 3, 5]
        step_once(name, opt, params, lambda: problem.loss(params, 1), closure=True)
        assert data == [0, 1, 2, 5, 0, 3, 5, 0, 1, 2, 5]
    finally:
        for h in handles:
            h.remove()
    step_once(name, opt, params, lambda: problem.loss(params, 2))
    assert data == [0, 1, 2, 5, 0, 3, 5, 0, 1, 2, 5]


@pytest.mark.parametrize("name", ALL_NAMES)
def test_state_dict_and_load_state_dict_hooks(name):
    """test_state_dict_pre_hook / post_hook / pre_post_hook and test_load_state_dict_pre_hook_and_prepend /
    post_hook / pre_post_hook."""
    problem = Problem()
    opt, params = _fresh(name, problem)
    train(name, opt, params, problem, 1, seed=SEED)

    def pre(o):
        o.state["test"] = 1

    def post(o, sd):
        sd["ran_state_dict_pre_hook"] = "test" in sd["state"]
        sd["state"].pop("test", None)
        return sd

    opt.register_state_dict_pre_hook(pre)
    assert opt.state_dict()["state"]["test"] == 1
    opt.register_state_dict_post_hook(post)
    sd = opt.state_dict()
    assert "test" not in sd["state"] and sd["ran_state_dict_pre_hook"] is True
    del opt.state["test"]

    opt2, params2 = _fresh(name, problem)
    opt2.register_load_state_dict_pre_hook(lambda o, s: s["param_groups"][0].__setitem__("lr", 0.002))
    opt2.load_state_dict(copy.deepcopy(sd))
    assert opt2.param_groups[0]["lr"] == 0.002

    def pre2(o, s):
        s = copy.deepcopy(s)
        s["param_groups"][0]["lr"] = 0.003
        return s

    opt2.register_load_state_dict_pre_hook(pre2, prepend=True)
    opt2.load_state_dict(copy.deepcopy(sd))
    assert opt2.param_groups[0]["lr"] == 0.002                  # the prepended hook ran first
    ran = []
    opt2.register_load_state_dict_post_hook(lambda o: ran.append(o.param_groups[0]["lr"]))
    opt2.load_state_dict(copy.deepcopy(sd))
    assert ran == [0.002]


@pytest.mark.parametrize("name", ALL_NAMES)
def test_state_dict_is_deterministic_and_resumes(name):
    """test_state_dict_deterministic: a new optimizer over equal (not identical) parameters that loads the
    state_dict continues exactly like the original; both state_dicts stay equal; repeated groups keep one
    representation."""
    with default_dtype(torch.float64):
        problem = Problem()
        opt, params = _fresh(name, problem)
        train(name, opt, params, problem, 5, seed=SEED)
        params_c = [torch.nn.Parameter(p.detach().clone()) for p in params]
        opt_c = make(name, params_c)
        sd = copy.deepcopy(opt.state_dict())
        opt_c.load_state_dict(copy.deepcopy(sd))
        assert_nested_equal(opt_c.state_dict(), sd)
        _resume_equal(name, opt, params, opt_c, params_c, problem, start=5)
        assert_nested_equal(opt_c.state_dict(), opt.state_dict())
        opt_c.param_groups.extend(opt_c.param_groups)
        assert_nested_equal(opt_c.state_dict()["param_groups"][-1], opt.state_dict()["param_groups"][-1])


@pytest.mark.parametrize("name", ALL_NAMES)
def test_deepcopy_copies_public_attributes_and_resumes(name):
    with default_dtype(torch.float64):
        problem = Problem()
        opt, params = _fresh(name, problem)
        train(name, opt, params, problem, 3, seed=SEED)
        dup = copy.deepcopy(opt)
        public = lambda o: {k for k in o.__dict__ if not k.startswith("_")}   # noqa: E731
        assert public(dup) == public(opt)
        _resume_equal(name, opt, params, dup, _all_params(dup), problem, start=3)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_pickle_round_trip_resumes(name):
    with default_dtype(torch.float64):
        problem = Problem()
        opt, params = _fresh(name, problem)
        train(name, opt, params, problem, 3, seed=SEED)
        back = pickle.loads(pickle.dumps(opt))
        assert type(back) is type(opt)
        _resume_equal(name, opt, params, back, _all_params(back), problem, start=3)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_torch_save_and_weights_only_load_resume(name):
    """test_save_load_equality_with_weights_only: the saved state_dict loads back equal with and without
    weights_only=True, and a new optimizer that loads it resumes like the original."""
    with default_dtype(torch.float64):
        problem = Problem()
        opt, params = _fresh(name, problem)
        train(name, opt, params, problem, 3, seed=SEED)
        sd = opt.state_dict()
        buf = io.BytesIO()
        torch.save(sd, buf)
        buf.seek(0)
        assert_nested_equal(torch.load(buf, weights_only=False), sd)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=True)
        assert_nested_equal(loaded, sd)
        params_c = [torch.nn.Parameter(p.detach().clone()) for p in params]
        opt_c = make(name, params_c)
        opt_c.load_state_dict(loaded)
        _resume_equal(name, opt, params, opt_c, params_c, problem, start=3)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_state_dict_with_plain_number_steps_resumes(name):
    """test_load_nontensor_step: ``step`` values saved as Python numbers (older checkpoints) load and resume."""
    with default_dtype(torch.float64):
        problem = Problem()
        opt, params = _fresh(name, problem)
        train(name, opt, params, problem, 3, seed=SEED)
        sd = copy.deepcopy(opt.state_dict())
        for st in sd["state"].values():
            if torch.is_tensor(st.get("step")):
                st["step"] = st["step"].item()
        params_c = [torch.nn.Parameter(p.detach().clone()) for p in params]
        opt_c = make(name, params_c)
        opt_c.load_state_dict(sd)
        _resume_equal(name, opt, params, opt_c, params_c, problem, start=3)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_named_parameters_state_dict(name):
    """test_can_load_from_to_named_state_dict: named parameters give param_names in the state_dict, and it
    loads into an optimizer built from unnamed parameters, which then steps; repr names the groups."""
    problem = Problem()
    params = problem.params()
    opt = make(name, [(f"p{i}", p) for i, p in enumerate(params)])
    train(name, opt, params, problem, 2, seed=SEED)
    sd = opt.state_dict()
    assert sd["param_groups"][0]["param_names"] == ["p0", "p1", "p2"]
    opt2 = make(name, params)
    opt2.load_state_dict(copy.deepcopy(sd))
    train(name, opt2, params, problem, 1, start=2, seed=SEED)
    assert opt2.state_dict()["param_groups"][0]["param_names"] == ["p0", "p1", "p2"]
    assert "Parameter Group 0" in repr(opt2) and type(opt2).__name__ in repr(opt2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", ALL_NAMES)
def test_parameters_and_state_keep_their_dtype(name, dtype):
    problem = Problem(dtype)
    opt, params = _fresh(name, problem)
    train(name, opt, params, problem, 3, seed=SEED)
    assert all(p.dtype == dtype for p in params)
    for p in params:
        for key, v in opt.state.get(p, {}).items():
            if torch.is_tensor(v) and v.shape == p.shape and v.is_floating_point() and p.dim():
                assert v.dtype == dtype, (key, v.dtype)


# ---- the optimizers without a torch.optim peer: behaviours checked against themselves ----

def _moved(opt, params, before_params, before_state):
    """Did the parameters or their state change?"""
    if any(not p.detach().equal(b) for p, b in zip(params, before_params)):
        return True
    return any(not torch.equal(v, before_state[i][k]) for i, p in enumerate(params)
               for k, v in opt.state.get(p, {}).items() if torch.is_tensor(v) and k in before_state[i])


def _snapshot(opt, params):
    return ([p.detach().clone() for p in params],
            [{k: v.clone() for k, v in opt.state.get(p, {}).items() if torch.is_tensor(v)} for p in params])


@pytest.mark.parametrize("name", NO_PEER)
def test_a_zero_lr_group_stays_put(name):
    with default_dtype(torch.float64):
        problem = Problem(shapes=((5, 4), (4,), (3,), ()))
        params = problem.params()
        opt = make(name, [{"params": params[:2]}, {"params": params[2:], "lr": 0.0}])
        before = _snapshot(opt, params)
        train(name, opt, params, problem, 5, seed=SEED)
        assert all(p.detach().equal(b) for p, b in zip(params[2:], before[0][2:]))
        assert _moved(opt, params[:2], before[0][:2], before[1][:2])


@pytest.mark.parametrize("name", NO_PEER)
def test_add_param_group_takes_effect(name):
    """The added group gets state and moves; for the optimizers that draw no noise the first group's
    trajectory is the one it has without the addition."""
    with default_dtype(torch.float64):
        problem = Problem(shapes=((5, 4), (4,), (3,), ()))
        mask = lambda k, i: i < 2 or k >= 3   # noqa: E731
        runs = []
        for add in (False, True):
            params = problem.params()
            opt = make(name, params[:2])
            train(name, opt, params, problem, 3, mask=mask, seed=SEED)
            if add:
                opt.add_param_group({"params": params[2:], "lr": RICH[name]["lr"] * 0.5})
                before = _snapshot(opt, params[2:])
            train(name, opt, params, problem, 4, start=3, mask=mask, seed=SEED)
            runs.append((opt, params))
        (_, plain), (opt, params) = runs
        assert len(opt.param_groups) == 2
        assert _moved(opt, params[2:], *before)
        assert all(opt.state.get(p) for p in params[2:])
        if name not in SAMPLED:
            assert_params_close(params[:2], plain[:2])


@pytest.mark.parametrize("name", NO_PEER)
def test_lr_scheduler_equals_setting_the_lr_by_hand(name):
    with default_dtype(torch.float64):
        problem = Problem()
        runs = []
        for use_scheduler in (True, False):
            params = problem.params()
            opt = make(name, [{"params": params[:2]}, {"params": params[2:], "lr": 0.02}])
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5) if use_scheduler else None
            for k in range(8):
                if not use_scheduler:
                    for g, base in zip(opt.param_groups, (RICH[name]["lr"], 0.02)):
                        g["lr"] = base * 0.5 ** (k // 2)
                train(name, opt, params, problem, 1, start=k, seed=SEED, schedulers=[sched] if sched else [])
            runs.append(params)
        assert_params_close(runs[0], runs[1], what="scheduled parameter")


@pytest.mark.parametrize("name", NO_PEER)
def test_closure_equals_no_closure(name):
    with default_dtype(torch.float64):
        problem = Problem()
        runs = []
        for closure in (True, False):
            params = problem.params()
            opt = make(name, params)
            losses = train(name, opt, params, problem, 5, seed=SEED, closure=closure)
            runs.append((params, losses))
        assert all(torch.is_tensor(v) for v in runs[0][1]), "step(closure) must return the loss"
        torch.testing.assert_close(torch.stack(runs[0][1]), torch.stack(runs[1][1]), rtol=0, atol=1e-12)
        assert_params_close(runs[0][0], runs[1][0], what="closure-run parameter")


def _same_run(name, make_params, problem_shapes, keep):
    """Two runs that must agree on the parameters ``keep`` selects: (plain parameters, variant parameters)."""
    runs = []
    for variant in (False, True):
        problem = Problem(shapes=problem_shapes(variant))
        params = make_params(problem, variant)
        opt = make(name, params)
        flat = [p for g in params for p in g["params"]] if isinstance(params[0], dict) else params
        train(name, opt, flat, problem, 5, seed=SEED)
        runs.append(keep(flat, variant))
    return runs


@pytest.mark.parametrize("name", NO_PEER)
def test_zero_size_parameters_change_nothing(name):
    with default_dtype(torch.float64):
        shapes = lambda v: ((3, 2), (0,), (4,), (2, 0, 3)) if v else ((3, 2), (4,))   # noqa: E731
        plain, variant = _same_run(name, lambda pr, v: pr.params(), shapes,
                                   lambda ps, v: [p for p in ps if p.numel()] if v else ps)
        assert_params_close(variant, plain)


@pytest.mark.parametrize("name", NO_PEER)
def test_non_contiguous_parameters_and_gradients_change_nothing(name):
    def build(problem, noncontiguous):
        if not noncontiguous:
            return problem.params()
        out = []
        for t in problem.init:
            buf = torch.zeros(*t.shape, 2, dtype=t.dtype)
            buf[..., 0] = t
            out.append(torch.nn.Parameter(buf[..., 0]))
        return out

    with default_dtype(torch.float64):
        plain, variant = _same_run(name, build, lambda v: ((5, 4), (4,), (3, 2)), lambda ps, v: ps)
        assert not any(p.is_contiguous() for p in variant)
        assert_params_close(variant, plain)


@pytest.mark.parametrize("name", NO_PEER)
def test_empty_param_groups_change_nothing(name):
    def build(problem, with_empty):
        ps = problem.params()
        return [{"params": []}, {"params": ps}, {"params": []}] if with_empty else [{"params": ps}]

    with default_dtype(torch.float64):
        plain, variant = _same_run(name, build, lambda v: ((5, 4), (4,), ()), lambda ps, v: ps)
        assert_params_close(variant, plain)


@pytest.mark.parametrize("name", NO_PEER)
def test_gradients_none_everywhere_is_a_no_op(name):
    """No parameter has a gradient (for the sampling optimizers: none after a sample) -- at the start and
    after some training: the parameters stay as they are."""
    with default_dtype(torch.float64):
        problem = Problem()
        opt, params = _fresh(name, problem)
        for trained in (False, True):
            if trained:
                train(name, opt, params, problem, 3, seed=SEED)
            before = [p.detach().clone() for p in params]
            torch.manual_seed(SEED)
            step_once(name, opt, params, lambda: None)
            assert all(p.detach().equal(b) for p, b in zip(params, before)), f"moved (trained={trained})"


def test_ivon_leaves_a_parameter_without_gradient_untouched():
    """A parameter that never receives a gradient (it is not in the loss) is not moved by IVON: not by weight
    decay, not by the momentum, not by the sampling; the others train."""
    with default_dtype(torch.float64):
        problem = Problem(shapes=((5, 4), (4,), (3,)))
        params = problem.params()
        opt = make("ivon", [{"params": params[:2]}, {"params": params[2:]}], weight_decay=0.1)
        train("ivon", opt, params, problem, 6, mask=lambda k, i: i != 1, seed=SEED)
        assert params[1].detach().equal(problem.init[1])
        assert all(not p.detach().equal(t) for p, t in zip(params[::2], problem.init[::2]))


def test_a_state_a_setting_switches_on_later_is_created_then():
    """SGD run with momentum 0, then 0.9 from the fourth step (a group's setting changed mid-run): the momentum
    buffer the later steps need is created at the first step that asks for it, as torch.optim.SGD creates it, and
    the run equals torch's bit for bit.  (The per-parameter state lookup returns at once when every entry the
    group's current settings ask for is there; a setting that asks for one more must still reach its creation.)"""
    def run(cls):
        g = torch.Generator().manual_seed(0)
        ps = [torch.nn.Parameter(torch.randn(5, generator=g, dtype=torch.float64)) for _ in range(3)]
        opt = cls(ps, lr=0.1, momentum=0.0, foreach=False)
        keys = []
        for k in range(6):
            if k == 3:
                opt.param_groups[0]["momentum"] = 0.9
            for p in ps:
                p.grad = torch.randn(5, generator=g, dtype=torch.float64)
            opt.step()
            keys.append(sorted(opt.state[ps[0]]))
        return ps, keys
    ours, our_keys = run(generated_class("sgd"))
    theirs, their_keys = run(torch.optim.SGD)
    assert our_keys == their_keys and our_keys[2] == [] and our_keys[3] == ["momentum_buffer"]
    for p, q in zip(ours, theirs):
        assert torch.equal(p, q)
