"""Generated torch optimizers against torch.optim (the real peers) and against their
generated numpy twins."""
import copy
import inspect

import numpy as np
import pytest
import torch

from conftest import load_generated

PEERS = {"sgd": torch.optim.SGD, "rmsprop": torch.optim.RMSprop, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}

CONFIGS = {
    "sgd": [dict(lr=0.05), dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01),
            dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.02)],
    "rmsprop": [dict(lr=0.005), dict(lr=0.005, alpha=0.9, eps=1e-6, weight_decay=0.01),
                dict(lr=0.002, momentum=0.9), dict(lr=0.002, centered=True, momentum=0.5, weight_decay=0.01)],
    "adam": [dict(lr=0.01), dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.05), dict(lr=0.01, amsgrad=True),
             dict(lr=0.01, amsgrad=True, weight_decay=0.05, eps=1e-6)],
    "adamw": [dict(lr=0.01), dict(lr=0.01, weight_decay=0.1, amsgrad=True), dict(lr=0.01, betas=(0.85, 0.995))],
}
CASES = [(name, i) for name, cfgs in CONFIGS.items() for i in range(len(cfgs))]


def make_problem(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(160, 6, generator=g, dtype=dtype)
    w = torch.randn(6, 1, generator=g, dtype=dtype)
    y = torch.sin(X @ w) + 0.1 * torch.randn(160, 1, generator=g, dtype=dtype)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(dtype)
    return X, y, net


def groups(net, kw):
    """Two parameter groups with different learning rates."""
    return [{"params": list(net[0].parameters())}, {"params": list(net[2].parameters()), "lr": kw["lr"] * 0.5}]


def run(cls, net, X, y, kw, steps=100, swap_at=50):
    """Mini-batch training with a StepLR schedule and a state_dict save/load half-way."""
    params = groups(net, kw)
    opt = cls(params, **kw)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=20, gamma=0.7)
    for i in range(steps):
        if i == swap_at:
            sd_o, sd_s = copy.deepcopy(opt.state_dict()), copy.deepcopy(sched.state_dict())
            opt = cls(params, **kw)
            opt.load_state_dict(sd_o)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=20, gamma=0.7)
            sched.load_state_dict(sd_s)
        b = slice((i % 10) * 16, (i % 10 + 1) * 16)

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(net(X[b]), y[b])
            loss.backward()
            return loss
        opt.step(closure)
        sched.step()
    return opt


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)], ids=["f64", "f32"])
@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_generated_torch_optimizer_equals_torch_optim(name, i, dtype, tol):
    mod = load_generated(name, "torch")
    kw = CONFIGS[name][i]
    X, y, net_ref = make_problem(dtype)
    net_gen = copy.deepcopy(net_ref)
    run(PEERS[name], net_ref, X, y, kw)
    opt = run(getattr(mod, mod.__dict__[[k for k in mod.__dict__ if k.lower() == name][0]].__name__), net_gen, X, y, kw)
    for a, b in zip(net_ref.parameters(), net_gen.parameters()):
        assert a.dtype == b.dtype == dtype
        torch.testing.assert_close(b, a, rtol=0, atol=tol)
    moved = max((a - b).abs().max().item() for a, b in zip(net_ref.parameters(), make_problem(dtype)[2].parameters()))
    assert moved > 1e-3          # training really moved the parameters
    assert all(st for st in opt.state.values()) or name == "sgd"


#: torch.optim's implementation switches: every generated optimizer accepts all of them (keyword-only), also
#: those a particular torch optimizer lacks (SGD has no capturable), so code written for any peer runs
SWITCHES = {"maximize": False, "foreach": None, "capturable": False, "differentiable": False, "fused": None}


def check_constructor(cls, peer):
    """The generated constructor is a drop-in for the peer's: every argument of the peer is accepted with the
    peer's default, the algorithm's arguments come first and in the peer's order, and torch's switches have
    torch's defaults and the peer's kind (positional or keyword-only: the recipe's ``peer: switches``); the
    generated ``fused`` is keyword-only where the peer has none."""
    ours = inspect.signature(cls.__init__).parameters
    theirs = inspect.signature(peer.__init__).parameters
    for arg, p in ours.items():
        if arg in ("self", "params"):
            continue
        if arg in SWITCHES:
            kind = theirs[arg].kind if arg in theirs else p.KEYWORD_ONLY
            assert p.kind == kind and p.default == SWITCHES[arg], arg
            continue
        assert arg in theirs, arg
        assert p.default == theirs[arg].default, (arg, p.default, theirs[arg].default)
    for arg in theirs:                  # every argument of the peer is accepted: a drop-in
        assert arg in ours, arg
    positional = [a for a, p in theirs.items() if p.kind == p.POSITIONAL_OR_KEYWORD][2:]
    ours_positional = [a for a, p in ours.items() if p.kind == p.POSITIONAL_OR_KEYWORD][2:]
    assert ours_positional == positional[:len(ours_positional)]
    algorithm = [a for a in positional if a not in SWITCHES]
    assert set(algorithm) - set(ours_positional) == set()


@pytest.mark.parametrize("name", sorted(PEERS))
def test_constructor_matches_peer(name):
    mod = load_generated(name, "torch")
    cls = [v for k, v in vars(mod).items() if k.lower() == name][0]
    check_constructor(cls, PEERS[name])


@pytest.mark.parametrize("name", sorted(PEERS))
def test_state_dict_round_trip_includes_step_counters(name):
    mod = load_generated(name, "torch")
    cls = [v for k, v in vars(mod).items() if k.lower() == name][0]
    X, y, net = make_problem(torch.float64)
    kw = CONFIGS[name][-1]
    opt = run(cls, net, X, y, kw, steps=7, swap_at=-1)
    sd = opt.state_dict()
    opt2 = cls(groups(net, kw), **kw)
    opt2.load_state_dict(copy.deepcopy(sd))
    sd2 = opt2.state_dict()
    assert sd2["param_groups"][0]["lr"] == sd["param_groups"][0]["lr"]
    for k, st in sd["state"].items():
        for key, v in st.items():
            assert torch.equal(torch.as_tensor(sd2["state"][k][key]), torch.as_tensor(v))
        if "step" in st:
            assert float(st["step"]) == 7.0


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_torch_equals_numpy_twin(name, i):
    kw = dict(CONFIGS[name][i])
    torch_mod = load_generated(name, "torch")
    np_mod = load_generated(name, "numpy")
    cls = [v for k, v in vars(torch_mod).items() if k.lower() == name][0]
    rng = np.random.default_rng(i)
    A = rng.normal(size=(7, 7))
    A = A @ A.T / 7 + np.eye(7)
    c = rng.normal(size=7)

    def grad_np(x):
        return A @ (x - c) + 0.3 * np.sin(x)

    x0 = rng.normal(size=7)
    p = torch.nn.Parameter(torch.tensor(x0, dtype=torch.float64))
    opt = cls([p], **kw)
    state = np_mod.init(m=x0)
    for _ in range(30):
        p.grad = torch.tensor(grad_np(p.detach().numpy()))
        opt.step()
        state = np_mod.step(state, oracles={"grad": grad_np}, **kw)
        np.testing.assert_allclose(p.detach().numpy(), state["m"], rtol=0, atol=1e-12)
    st = opt.state[p]
    own = {stored: key for key, stored in torch_mod._RENAMED.items()}     # torch's state names -> the recipe's
    for key in st:
        if key == "step":
            assert int(st[key]) == int(state.get("step", st[key]))
        else:
            np.testing.assert_allclose(st[key].numpy(), state[own.get(key, key)], rtol=0, atol=1e-12)
