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
