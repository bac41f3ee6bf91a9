"""The catalog's Adagrad, Adamax, NAdam and Adadelta (generated torch optimizers) against torch.optim, their
real peers: 100 mini-batch steps of a small MLP with two parameter groups, a StepLR schedule and a state_dict
save/load half-way (``run`` of test_torch_optimizers.py), float64 to 1e-12 and float32 to 1e-6; the per-parameter
state against the peer's; the constructors against the peers' signatures; and each against its numpy twin.

float64 runs set torch's default dtype to float64: torch.optim.NAdam keeps its running product of the momentum
schedule (``mu_product``) as a scalar tensor of the *default* dtype, so under the float32 default the float64
peer rounds that product to float32 at every step (observed |Δθ| ≈ 2e-10 after 100 steps, against ≈ 5e-16 with
a float64 default).  The generated optimizers keep their state in the parameter's dtype.
"""
import copy

import numpy as np
import pytest
import torch

from conftest import load_generated
from test_torch_optimizers import check_constructor, make_problem, run

PEERS = {"adagrad": torch.optim.Adagrad, "adamax": torch.optim.Adamax, "nadam": torch.optim.NAdam,
         "adadelta": torch.optim.Adadelta}

CONFIGS = {
    "adagrad": [dict(lr=0.05), dict(lr=0.05, lr_decay=0.01, weight_decay=0.01),
                dict(lr=0.02, initial_accumulator_value=0.1, eps=1e-8, lr_decay=0.05)],
    "adamax": [dict(lr=0.01), dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05)],
    "nadam": [dict(lr=0.01), dict(lr=0.01, betas=(0.8, 0.99), momentum_decay=0.01, weight_decay=0.05),
              dict(lr=0.005, momentum_decay=0.0, eps=1e-6),
              dict(lr=0.01, weight_decay=0.05, decoupled_weight_decay=True)],
    "adadelta": [dict(lr=1.0), dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.01)],
}
CASES = [(name, i) for name, cfgs in CONFIGS.items() for i in range(len(cfgs))]

# the peer's state names, which the generated optimizers store their state under (the recipes' peer.state_names)
STATE_NAMES = {
    "adagrad": ["sum"],
    "adamax": ["exp_avg", "exp_inf"],
    "nadam": ["exp_avg", "exp_avg_sq", "mu_product"],
    "adadelta": ["square_avg", "acc_delta"],
}


def generated_class(name):
    mod = load_generated(name, "torch")
    return [v for k, v in vars(mod).items() if k.lower() == name and isinstance(v, type)][0]


@pytest.fixture
def default_dtype(request):
    """Run under the given default dtype (the peers' scalar state follows it), restoring it afterwards."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(request.param)
    yield request.param
    torch.set_default_dtype(old)


@pytest.mark.parametrize("default_dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)], ids=["f64", "f32"],
                         indirect=["default_dtype"])
@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_generated_torch_optimizer_equals_torch_optim(name, i, default_dtype, tol):
    dtype = default_dtype
    kw = CONFIGS[name][i]
    X, y, net_ref = make_problem(dtype)
    net_gen = copy.deepcopy(net_ref)
    ref = run(PEERS[name], net_ref, X, y, kw)
    opt = run(generated_class(name), net_gen, X, y, kw)
    for a, b in zip(net_ref.parameters(), net_gen.parameters()):
        assert a.dtype == b.dtype == dtype
        torch.testing.assert_close(b, a, rtol=0, atol=tol)
    moved = max((a - b).abs().max().item() for a, b in zip(net_ref.parameters(), make_problem(dtype)[2].parameters()))
    assert moved > 1e-2          # training really moved the parameters
    # the state: the same tensors under the peer's names (the peer's scalar mu_product against our tensor of it)
    for p_ref, p_gen in zip(net_ref.parameters(), net_gen.parameters()):
        ours, theirs = opt.state[p_gen], ref.state[p_ref]
        assert float(theirs["step"]) == 100
        assert float(ours["step"]) == 100          # one count per parameter, as torch keeps it
        for k in STATE_NAMES[name]:
            want = theirs[k].to(dtype).expand_as(ours[k])
            torch.testing.assert_close(ours[k], want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(PEERS))
def test_constructor_matches_peer(name):
    """Every argument of the peer is accepted with the peer's default, the algorithm's arguments first and in
    the peer's order (NAdam's decoupled_weight_decay included: the recipe chooses between weight_decay and
    decoupled_weight_decay with `when`)."""
    check_constructor(generated_class(name), PEERS[name])


@pytest.fixture
def float64_default():
    """Per-tensor numbers of the state (NAdam's mu_product) are 0-d tensors of torch's scalar dtype, float32
    unless the default dtype is float64 (torch.optim.NAdam's convention): the f64 comparison sets it."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_torch_equals_numpy_twin(name, i, float64_default):
    kw = dict(CONFIGS[name][i])
    np_mod = load_generated(name, "numpy")
    rng = np.random.default_rng(i)
    A = rng.normal(size=(7, 7))
    A = A @ A.T / 7 + np.eye(7)
    c = rng.normal(size=7)

    def grad_np(x):
        return A @ (x - c) + 0.3 * np.sin(x)

    x0 = rng.normal(size=7)
    p = torch.nn.Parameter(torch.tensor(x0, dtype=torch.float64))
    opt = generated_class(name)([p], **kw)
    state = np_mod.init(kw, m=x0)
    for _ in range(30):
        p.grad = torch.tensor(grad_np(p.detach().numpy()))
        opt.step()
        state = np_mod.step(state, oracles={"grad": grad_np}, **kw)
        np.testing.assert_allclose(p.detach().numpy(), state["m"], rtol=0, atol=1e-12)
    own = {stored: name for name, stored in load_generated(name, "torch")._RENAMED.items()}
    for key, v in opt.state[p].items():
        if key == "step":                         # torch counts steps for every stateful optimizer
            assert int(v) == 30 and int(state.get("step", 30)) == 30
        else:
            np.testing.assert_allclose(v.numpy(), state[own.get(key, key)], rtol=0, atol=1e-12)
