"""The compiled (fused=True) path of generated torch optimizers equals their multi-tensor path.

torch.compile turns the generated per-tensor elementwise kernel into one fused loop; the host
scalars are 0-d tensors (one graph for every step) and the flags are specialized."""
import copy

import pytest
import torch

from conftest import load_generated


def problem(seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    X, y = torch.randn(64, 4), torch.randn(64, 1)
    return net, X, y


@pytest.mark.parametrize("name,kw", [("adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
                                     ("sgd", dict(lr=0.05, momentum=0.9, nesterov=True)),
                                     ("ivon", dict(lr=0.1, ess=64.0))])
def test_fused_equals_foreach(name, kw):
    mod = load_generated(name, "torch")
    cls = [v for k, v in vars(mod).items() if k.lower() == name][0]
    net_a, X, y = problem()
    net_b = copy.deepcopy(net_a)
    opt_a, opt_b = cls(net_a.parameters(), **kw), cls(net_b.parameters(), fused=True, **kw)
    for i in range(15):
        for net, opt in ((net_a, opt_a), (net_b, opt_b)):
            torch.manual_seed(i)
            if name == "ivon":
                with opt.sampled_params(train=True):
                    opt.zero_grad()
                    torch.nn.functional.mse_loss(net(X), y).backward()
            else:
                opt.zero_grad()
                torch.nn.functional.mse_loss(net(X), y).backward()
            opt.step()
    for a, b in zip(net_a.parameters(), net_b.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert opt_b.param_groups[0]["fused"] is True


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_host_arguments_one_tensor(dtype):
    """The kernel's host numbers travel as one tensor of the parameters' dtype, each element the number rounded as a
    0-d tensor of its own would be; the flags keep their places as Python bools (None where a number goes)."""
    mod = load_generated("adam", "torch")
    host = (0.1, True, 1 / 3, False, 0.999, 1e-8)
    numbers, flags = mod._host_args(host, dtype, torch.device("cpu"))
    assert flags == (None, True, None, False, None, None)
    assert numbers.dtype == dtype and numbers.shape == (4,)
    for got, v in zip(numbers, (0.1, 1 / 3, 0.999, 1e-8)):
        assert torch.equal(got, torch.tensor(v, dtype=dtype))
    empty, none = mod._host_args((True,), dtype, torch.device("cpu"))
    assert empty.shape == (0,) and none == (True,)


def test_kernel_fuses_loops_of_one_parameter_only():
    """The compiled kernel may fuse at most as many loops as it writes tensors per parameter (Adam: the mean, the
    two moments and the running maximum), so that two parameters of one size keep a loop each."""
    mod = load_generated("adam", "torch")
    assert mod._KERNEL_OUTPUTS == 4
    assert mod._kernel.__code__.co_argcount == 5        # m, s, u, s_max, g: four of them written


def test_fused_equal_sizes_bitwise_per_parameter():
    """Parameters of one size (the case whose loops inductor would fuse into one): each gets the bits it gets when
    it is the only parameter of its optimizer (the loop structure changes no value)."""
    mod = load_generated("adam", "torch")
    torch.manual_seed(0)
    pa = [torch.nn.Parameter(torch.randn(64)) for _ in range(3)]
    pb = [torch.nn.Parameter(p.detach().clone()) for p in pa]
    oa = mod.Adam(pa, lr=0.01, fused=True)
    ob = [mod.Adam([p], lr=0.01, fused=True) for p in pb]
    for i in range(5):
        g = torch.Generator().manual_seed(i)
        grads = [torch.randn(64, generator=g) for _ in pa]
        for p, q, gr in zip(pa, pb, grads):
            p.grad, q.grad = gr.clone(), gr.clone()
        oa.step()
        for o in ob:
            o.step()
    for a, b, o in zip(pa, pb, ob):
        assert torch.equal(a, b)
        assert torch.equal(oa.state[a]["exp_avg_sq"], o.state[b]["exp_avg_sq"])


@pytest.mark.slow
def test_fused_parameter_laid_out_unlike_its_gradient():
    """Issue 39's case: a transposed (non-contiguous) parameter whose gradient from a loss is contiguous, next to a
    channels_last convolution weight and a slice of a larger tensor, their gradients contiguous too.  fused=True once failed to compile here (the
    gradient laid out flat next to the strided parameter), warned and used the multi-tensor path for the rest of
    the process; now it stays fused, keeps every parameter's layout (the slice still writes into its tensor) and
    gives the bits the same values laid out contiguously give, in float32 and float64."""
    import warnings
    mod = load_generated("adam", "torch")

    def run(dtype, contiguous):
        g = torch.Generator().manual_seed(0)
        big = torch.randn(9, 7, generator=g, dtype=dtype)
        w = torch.randn(8, 6, generator=g, dtype=dtype).t()
        k = torch.randn(4, 3, 2, 2, generator=g, dtype=dtype).to(memory_format=torch.channels_last)
        params = [torch.nn.Parameter(x.contiguous() if contiguous else x) for x in (w, k, big[2:8, 1:5])]
        X = torch.randn(5, 3, 4, 4, generator=g, dtype=dtype)
        opt = mod.Adam(params, lr=0.01, weight_decay=0.1, fused=True)
        for _ in range(3):
            # the loss at contiguous copies (a matrix product's rounding depends on its operands' layout; the
            # optimizer's must not), so both runs get the same gradients while their parameters agree
            a, b, c = (p.detach().contiguous().requires_grad_() for p in params)
            out = torch.nn.functional.conv2d(X, b).flatten(1)[:, :8]        # (5, 8)
            loss = (out @ a.t() @ a).square().mean() + c.square().sum()
            grads = torch.autograd.grad(loss, (a, b, c))
            for p, gr in zip(params, grads):
                p.grad = gr.contiguous()        # as a loss's gradient often is (autograd.grad, DDP buckets)
            opt.step()
        return params, opt, big

    for dtype in (torch.float32, torch.float64):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            params, opt, big = run(dtype, contiguous=False)
            flat, flat_opt, _ = run(dtype, contiguous=True)
        assert not any(p.is_contiguous() for p in params)
        assert params[1].is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(big[2:8, 1:5], params[2])
        assert not mod._COMPILED.get("failed")
        for p, q in zip(params, flat):
            assert torch.equal(p, q)
            assert all(torch.equal(v, flat_opt.state[q][n]) for n, v in opt.state[p].items())



@pytest.mark.slow
def test_fused_step_counts_one_flat_tensor():
    """The fused step counts a group's parameters with one add on one flat tensor whose elements the states'
    ``step`` entries are (0-d views), and buckets them with one read: the counts stay torch's per-parameter counts
    (a parameter without a gradient for a step keeps its own), a checkpoint loaded into a new optimizer or back into
    the same one (its counts laid out again) continues as the uninterrupted run does, bit for bit, and both
    follow torch's for-loop Adam."""
    mod = load_generated("adam", "torch")
    g = torch.Generator().manual_seed(0)
    init = [torch.randn(5, generator=g), torch.randn(2, 3, generator=g)]
    grads = [[torch.randn(t.shape, generator=g) for t in init] for _ in range(8)]
    ours = [torch.nn.Parameter(t.clone()) for t in init]
    ref = [torch.nn.Parameter(t.clone()) for t in init]
    opt = mod.Adam(ours, lr=0.01, amsgrad=True, fused=True)
    peer = torch.optim.Adam(ref, lr=0.01, amsgrad=True, foreach=False)

    def step(k, opts):
        for o in opts:
            for i, p in enumerate(o.param_groups[0]["params"]):
                p.grad = None if (k, i) == (3, 1) else grads[k][i].clone()
            o.step()

    for k in range(5):
        step(k, (opt, peer))
    counts = [opt.state[p]["step"] for p in ours]
    assert counts[0]._base is not None and counts[0]._base is counts[1]._base       # one flat tensor
    assert [c.item() for c in counts] == [peer.state[p]["step"].item() for p in ref] == [5.0, 4.0]
    saved = copy.deepcopy(opt.state_dict())
    other_params = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    other = mod.Adam(other_params, lr=0.01, amsgrad=True, fused=True)
    other.load_state_dict(copy.deepcopy(saved))
    opt.load_state_dict(copy.deepcopy(saved))
    for k in range(5, 8):
        step(k, (opt, other, peer))
    for p, q, r in zip(ours, other_params, ref):
        assert torch.equal(p, q)
        assert torch.equal(opt.state[p]["exp_avg_sq"], other.state[q]["exp_avg_sq"])
        assert opt.state[p]["step"].item() == other.state[q]["step"].item() == peer.state[r]["step"].item()
        torch.testing.assert_close(p.detach(), r.detach(), rtol=1.3e-6, atol=1e-6)
    assert [opt.state[p]["step"].item() for p in ours] == [8.0, 7.0]
    assert not mod._COMPILED.get("failed")
