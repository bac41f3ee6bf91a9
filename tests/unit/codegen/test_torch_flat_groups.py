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


def _train_touched(kw, touch, steps=5):
    """_train's loop with ``touch(net, s)`` between the steps: what a training loop may do to the parameters outside
    the optimizer (clip them in place, replace their data)."""
    mod = load_generated("ivon", "torch")
    net = _net()
    opt = mod.IVON(net.parameters(), **kw)
    torch.manual_seed(1)
    x, y = torch.randn(16, 5), torch.randn(16, 2)
    for s in range(steps):
        for _ in range(2):
            with opt.sampled_params(train=True):
                opt.zero_grad()
                ((net(x) - y) ** 2).mean().backward()
        opt.step()
        touch(net, s)
    return net, opt


def _clamp(net, s):
    with torch.no_grad():
        for p in net.parameters():
            p.data.clamp_(-0.3, 0.3)        # in place, through .data: no version bump a cache could see


def _swap(net, s):
    for p in net.parameters():
        p.data = p.data * 0.5 + 0.01 * s   # new storage under the same Parameter


@pytest.mark.parametrize("touch", [_clamp, _swap])
def test_parameters_changed_outside_the_optimizer_are_read_again_at_every_draw_and_step(touch):
    """The flat buffers of the saved means and of step() are reused (their views cached), never their values:
    whatever a loop does to the parameters between steps, the flat layout gives the per-tensor path's bits."""
    kw = {"lr": 0.1, "ess": 100, "mc_samples": 2}
    net, opt = _train_touched(kw, touch)
    ref_net, ref_opt = _train_touched({**kw, "foreach": False}, touch)
    assert any(k[1] == "_saved" for k in opt._flat) and any(k[1] == "_params" for k in opt._flat)
    assert all(torch.equal(u, v) for u, v in zip(_values(net, opt), _values(ref_net, ref_opt)))


def test_step_counts_are_views_of_one_flat_tensor_and_load_back_per_parameter():
    """Every parameter's ``state["step"]`` is a 0-d tensor (torch.optim's layout) viewing one flat count tensor;
    a checkpoint written with torch.save and loaded into a new optimizer continues with the same counts and the
    same bits as an uninterrupted run."""
    import io
    kw = {"lr": 0.1, "ess": 100, "mc_samples": 2}
    net, opt = _train("ivon", "IVON", kw, steps=3)
    steps = [opt.state[p]["step"] for p in net.parameters()]
    assert all(s.ndim == 0 and float(s) == 3.0 for s in steps)
    assert len({s.untyped_storage().data_ptr() for s in steps}) == 1
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert all(v["step"].ndim == 0 and float(v["step"]) == 3.0 for v in loaded["state"].values())
    whole_net, whole_opt = _train("ivon", "IVON", kw, steps=5)
    resumed_net, resumed_opt = _train("ivon", "IVON", kw, steps=5, resume_at=3)
    assert all(float(resumed_opt.state[p]["step"]) == 5.0 for p in resumed_net.parameters())
    assert all(torch.equal(u, v) for u, v in zip(_values(whole_net, whole_opt), _values(resumed_net, resumed_opt)))


def _ptrs(net):
    return [p.data_ptr() for p in net.parameters()]


@pytest.mark.parametrize("name, cls, kw", CASES)
def test_parameters_point_at_the_sample_inside_the_block_and_keep_their_own_storage_outside(name, cls, kw):
    """A group laid out flat hands the parameters the draw's own sample tensor for the block (no copy in, no copy
    back): inside, every parameter is a view of one flat sample and holds its values; on leaving (also when the body
    raises) and after step(), every parameter is back on its own storage, holding the mean bit for bit."""
    net, opt = _train(name, cls, kw, steps=2)
    own = _ptrs(net)
    means = [p.detach().clone() for p in net.parameters()]
    with opt.sampled_params():
        inside = _ptrs(net)
        base = {p.untyped_storage().data_ptr() for p in net.parameters()}
        sample = [p.detach().clone() for p in net.parameters()]
    assert all(a != b for a, b in zip(inside, own)) and len(base) == 1
    assert not all(torch.equal(a, b) for a, b in zip(sample, means))
    assert _ptrs(net) == own and all(torch.equal(p, q) for p, q in zip(net.parameters(), means))
    with pytest.raises(ZeroDivisionError):
        with opt.sampled_params():
            1 / 0
    assert _ptrs(net) == own and all(torch.equal(p, q) for p, q in zip(net.parameters(), means))
    x = torch.randn(4, 5)
    for _ in range(kw["mc_samples"]):
        with opt.sampled_params(train=True):
            opt.zero_grad()
            net(x).pow(2).sum().backward()
    opt.step()
    assert _ptrs(net) == own


def test_a_parameter_that_is_not_contiguous_is_copied_into_with_the_per_tensor_paths_bits():
    """A parameter whose strides a flat view would change (here a transposed weight) keeps its storage for the
    block too (the sample is copied into it, as before), and the run gives the per-tensor path's bits."""
    def run(kw):
        net = _net()
        with torch.no_grad():
            w = net[0].weight
            net[0].weight = torch.nn.Parameter(w.t().contiguous().t())     # same values, transposed strides
        opt = load_generated("ivon", "torch").IVON(net.parameters(), **kw)
        torch.manual_seed(1)
        x, y = torch.randn(16, 5), torch.randn(16, 2)
        own = _ptrs(net)
        for _ in range(3):
            for _ in range(2):
                with opt.sampled_params(train=True):
                    assert _ptrs(net) == own
                    opt.zero_grad()
                    ((net(x) - y) ** 2).mean().backward()
            opt.step()
        return net, opt
    kw = {"lr": 0.1, "ess": 100, "mc_samples": 2}
    (net, opt), (ref_net, ref_opt) = run(kw), run({**kw, "foreach": False})
    assert opt._flat and not net[0].weight.is_contiguous()
    assert all(torch.equal(u, v) for u, v in zip(_values(net, opt), _values(ref_net, ref_opt)))


def _shared_buffer(net):
    """The net's parameters as views of one buffer of their own (as FSDP's flat parameter or a contiguous-gradient
    scheme holds them): none is alone on its storage."""
    params = list(net.parameters())
    buf = torch.cat([p.detach().reshape(-1) for p in params] + [torch.zeros(3)])
    for p, v in zip(params, buf[:-3].split([p.numel() for p in params])):
        p.data = v.view(p.shape)
    return buf


@pytest.mark.parametrize("name, cls, kw", CASES)
@pytest.mark.parametrize("flat", [True, False])
def test_parameters_sharing_a_buffer_keep_it_and_the_copies_give_the_pointed_samples_bits(name, cls, kw, flat,
                                                                                          monkeypatch):
    """Laid out flat and per tensor (a group over _FLAT_MAX; foreach=False), parameters alone on their storage point
    at the sample inside the block and are back on it outside; parameters that are views of a larger buffer are
    copied into instead (the buffer is what something else may read: it holds the sample inside the block, the
    means outside) -- and both give the same bits, step after step."""
    mod = load_generated(name, "torch")
    if not flat:
        monkeypatch.setattr(mod, "_FLAT_MAX", 10)
    def run(shared, kw2):
        net = _net()
        buf = _shared_buffer(net) if shared else None
        opt = getattr(mod, cls)(net.parameters(), **kw2)
        torch.manual_seed(1)
        x, y = torch.randn(16, 5), torch.randn(16, 2)
        own = _ptrs(net)
        for _ in range(3):
            for _ in range(2):
                with opt.sampled_params(train=True):
                    assert (_ptrs(net) == own) == shared
                    if shared:
                        assert torch.equal(buf[:-3], torch.cat([p.detach().reshape(-1) for p in net.parameters()]))
                    opt.zero_grad()
                    ((net(x) - y) ** 2).mean().backward()
                assert _ptrs(net) == own
            opt.step()
        return net, opt
    for kw2 in (kw, {**kw, "foreach": False}):
        (a_net, a_opt), (b_net, b_opt) = run(False, kw2), run(True, kw2)
        assert bool(a_opt._flat) == (flat and "foreach" not in kw2)
        assert all(torch.equal(u, v) for u, v in zip(_values(a_net, a_opt), _values(b_net, b_opt)))
