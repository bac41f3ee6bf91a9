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
