"""The torch target's flat layout of a sampling recipe's groups (issue 39, item 2): where a group's parameters share
a dtype and device, the draw, the statistics and the update run on one flat tensor per quantity, and every
parameter's state is a view of that tensor.  The per-tensor path (``foreach=False``, which the peers compare with
ivon-opt and the other references) is the reference: the same draws give the same bits, whatever the layout, and
whatever a step changes on the way (parameters without a gradient, a checkpoint loaded, one parameter, bfloat16)."""
import copy

import pytest
import torch

from conftest import load_generated


def _net(dtype=torch.float32, one=False):
    torch.manual_seed(0)
    if one:
        return torch.nn.Sequential(torch.nn.Linear(5, 2, bias=False)).to(dtype)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3),
                               torch.nn.Linear(3, 2, bias=False)).to(dtype)


def _train(name, cls, kw, *, dtype=torch.float32, one=False, steps=5, mc=2, skip=False, resume_at=None, mod=None):
    mod = mod or load_generated(name, "torch")
    net = _net(dtype, one)
    opt = getattr(mod, cls)(net.parameters(), **kw)
    torch.manual_seed(1)
    x, y = torch.randn(16, 5, dtype=dtype), torch.randn(16, 2, dtype=dtype)
    for s in range(steps):
        if s == resume_at:
            saved = copy.deepcopy(opt.state_dict())
            opt = getattr(mod, cls)(net.parameters(), **kw)
            opt.load_state_dict(saved)
        for _ in range(mc):
            with opt.sampled_params(train=True):
                opt.zero_grad()
                last = net[-1]
                out = last(torch.zeros(16, last.in_features, dtype=dtype)) if skip and s % 2 else net(x)
                ((out - y) ** 2).mean().backward()
        opt.step()
    return net, opt


CASES = [("ivon", "IVON", {"lr": 0.1, "ess": 100, "mc_samples": 2}),
         ("bayesbinn", "BayesBiNN", {"lr": 0.01, "momentum": 0.5, "mc_samples": 2})]


def _values(net, opt):
    return [p.detach() for p in net.parameters()] + [v for p in net.parameters()
                                                    for _, v in sorted(opt.state[p].items()) if torch.is_tensor(v)]


@pytest.mark.parametrize("name, cls, kw", CASES)
@pytest.mark.parametrize("case", [{}, {"skip": True}, {"dtype": torch.bfloat16}, {"one": True},
                                  {"resume_at": 3}, {"resume_at": 3, "dtype": torch.bfloat16}])
def test_the_flat_layout_gives_the_per_tensor_paths_bits(name, cls, kw, case):
    flat_net, flat_opt = _train(name, cls, kw, **case)
    ref_net, ref_opt = _train(name, cls, {**kw, "foreach": False}, **case)
    assert flat_opt._flat and not ref_opt._flat           # the flat layout ran, the reference did not
    a, b = _values(flat_net, flat_opt), _values(ref_net, ref_opt)
    assert len(a) == len(b) and all(torch.equal(u, v) for u, v in zip(a, b))


def test_the_state_is_a_view_of_one_flat_tensor_and_the_means_come_back_exactly():
    net, opt = _train("ivon", "IVON", {"lr": 0.1, "ess": 100})
    params = list(net.parameters())
    for key in ("h", "momentum"):
        base = opt.state[params[0]][key].untyped_storage().data_ptr()
        assert all(opt.state[p][key].untyped_storage().data_ptr() == base for p in params)
        assert [opt.state[p][key].shape for p in params] == [p.shape for p in params]
    for one in (False, True):                 # one parameter: torch's flatten returns a view of it, not a copy
        net, opt = _train("ivon", "IVON", {"lr": 0.1, "ess": 100}, one=one, steps=1, mc=1)
        before = [p.detach().clone() for p in net.parameters()]
        with opt.sampled_params():
            moved = [not torch.equal(p, q) for p, q in zip(net.parameters(), before)]
        assert all(moved) and all(torch.equal(p, q) for p, q in zip(net.parameters(), before))


def test_a_parameter_without_gradient_in_every_sample_of_a_step_is_left_as_it_is():
    net, opt = _train("ivon", "IVON", {"lr": 0.1, "ess": 100}, steps=1)
    first = [p.detach().clone() for p in net[0].parameters()]
    last = [p.detach().clone() for p in net[-1].parameters()]
    with opt.sampled_params(train=True):
        opt.zero_grad()
        net[-1](torch.ones(4, 3)).sum().backward()
    opt.step()
    assert all(torch.equal(p, q) for p, q in zip(net[0].parameters(), first))
    assert not any(torch.equal(p, q) for p, q in zip(net[-1].parameters(), last))


def test_a_group_over_the_flat_size_keeps_the_per_tensor_lists(monkeypatch):
    mod = load_generated("ivon", "torch")
    monkeypatch.setattr(mod, "_FLAT_MAX", 50)          # the test network's group has 72 elements
    net, opt = _train("ivon", "IVON", {"lr": 0.1, "ess": 100, "mc_samples": 2}, mod=mod)
    ref_net, ref_opt = _train("ivon", "IVON", {"lr": 0.1, "ess": 100, "mc_samples": 2, "foreach": False})
    assert not opt._flat and sum(p.numel() for p in net.parameters()) == 72
    assert all(torch.equal(u, v) for u, v in zip(_values(net, opt), _values(ref_net, ref_opt)))
