"""The Triton target through the interpreter (``TRITON_INTERPRET=1``, set by tests/conftest.py) against torch.optim,
for every generated Triton optimizer with a torch.optim peer: the configuration of the contract suite that switches on
most options (``RICH``), two parameter groups with different learning rates, a StepLR scheduler, a parameter that
receives no gradient on every third step (torch counts steps per parameter), and at step 6 a checkpoint (optimizer and
scheduler state_dict) reloaded into fresh objects — the Triton optimizer's own, the peer's loaded into the Triton
optimizer, and the Triton optimizer's loaded into the peer.  float32, relative to 1e-6 over 12 steps."""
import copy

import pytest
import torch

from contract_helpers import PEERS, RICH
from conftest import load_generated

NAMES = tuple(PEERS)


def optimizer_class(name):
    mod = load_generated(name, "triton")
    return next(v for v in vars(mod).values()
                if isinstance(v, type) and issubclass(v, torch.optim.Optimizer) and v is not torch.optim.Optimizer)


def params():
    g = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(5, 3, generator=g)), torch.nn.Parameter(torch.randn(3, generator=g)),
            torch.nn.Parameter(torch.randn(7, generator=g))]


def groups(ps, cfg):
    return [{"params": ps[:2]}, {"params": ps[2:], "lr": cfg["lr"] * 0.5}]


def gradients(ps, k):
    loss = sum(((p - 0.3) ** 2).sum() * (i + 1) + torch.sin(p).sum() for i, p in enumerate(ps))
    for p in ps:
        p.grad = None
    loss.backward()
    if k % 3 == 1:
        ps[1].grad = None


@pytest.mark.parametrize("checkpoint", ["own", "peer_into_triton", "triton_into_peer"])
@pytest.mark.parametrize("name", NAMES)
def test_triton_optimizer_matches_torch_optim(name, checkpoint):
    cfg, Triton, Peer = dict(RICH[name]), optimizer_class(name), PEERS[name]
    a, b = params(), params()

    def make_peer(ps):
        opt = Peer(groups(ps, cfg), foreach=False, **cfg)
        return opt, torch.optim.lr_scheduler.StepLR(opt, 3, 0.5)

    def make_triton(ps):
        opt = Triton(groups(ps, cfg), **cfg)
        return opt, torch.optim.lr_scheduler.StepLR(opt, 3, 0.5)
    (oa, sa), (ob, sb) = make_peer(a), make_triton(b)
    worst = 0.0
    for k in range(12):
        gradients(a, k)
        gradients(b, k)
        oa.step()
        ob.step()
        sa.step()
        sb.step()
        if k == 5:
            if checkpoint == "own":
                sd, ssd = copy.deepcopy(ob.state_dict()), sb.state_dict()
                ob, sb = make_triton(b)
                ob.load_state_dict(sd)
                sb.load_state_dict(ssd)
            else:
                with torch.no_grad():            # the same parameters on both sides, so the state decides
                    for x, y in zip(a, b):
                        y.copy_(x)
                if checkpoint == "peer_into_triton":
                    sd, ssd = copy.deepcopy(oa.state_dict()), sa.state_dict()
                    ob, sb = make_triton(b)
                    ob.load_state_dict(sd)
                    sb.load_state_dict(ssd)
                else:
                    sd, ssd = copy.deepcopy(ob.state_dict()), sb.state_dict()
                    oa, sa = make_peer(a)
                    oa.load_state_dict(sd)
                    sa.load_state_dict(ssd)
        worst = max(worst, max(float(((x - y).abs() / (1 + y.abs())).max()) for x, y in zip(a, b)))
    assert worst < 1e-6, worst
    assert float(a[0].detach().sub(params()[0]).abs().max()) > 1e-2          # the parameters did move
