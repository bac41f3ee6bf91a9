"""catalog/soap.yaml's generated torch optimizer (the torch target's per-parameter array program, matrix state in
``opt.state[p]``) against pytorch-optimizer's SOAP (4.1.0) step for step in float64, a 2-D weight and a 1-D bias
in one optimizer, ten steps with three refreshes of the basis, with and without weight decay; and against the
generated numpy module on the same gradients.

The peer spends its first call on the statistics; the generated optimizer starts from that state, set with
``init_state`` (the recipe gives L, R, Q_L, Q_R no initial value).  A 1-D parameter is the recipe's matrix mean
with one column (Q_R = [1]): the peer with ``precondition_1d=True`` (one Kronecker factor, g gᵀ); the peer's
default leaves a 1-D parameter unrotated, which is the recipe without its eigenbasis (test_soap_generated.py).
The peer's float32 cast before its QR is made a no-op (``float64_torch``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_optimizer.optimizer import soap as soap_module

from conftest import load_generated
from test_soap_generated import run_generated
from test_soap_reference import EVERY, HYPER, SHAPES, STEPS, float64_torch, peer_kw, problem, rel

B3 = HYPER["beta2"]          # the peer's shampoo_beta defaults to beta2


class BiasGrads:
    """Gradients of a non-quadratic loss of a vector plus the k-th fixed noise vector on the k-th call."""

    def __init__(self, rng, d, calls):
        self.A, self.b = rng.standard_normal((d, d)), rng.standard_normal(d)
        self.noise = rng.standard_normal((calls, d))
        self.k = 0

    def reset(self):
        self.k = 0
        return self

    def __call__(self, w):
        g = self.A.T @ (self.A @ w - self.b) + w**3 + self.noise[self.k]
        self.k += 1
        return g


def setup(shape, seed):
    grads, W0 = problem(shape, seed)
    rng = np.random.default_rng(100 + seed)
    return grads, W0, BiasGrads(rng, shape[0], STEPS + 1), 0.5 * rng.standard_normal(shape[0])


def run_both(shape, seed, weight_decay):
    """The peer and the generated optimizer on (W, b); per step [(W, b)] of each, and the generated optimizer."""
    grads, W0, bgrads, b0 = setup(shape, seed)
    tensors = lambda: [torch.nn.Parameter(torch.tensor(W0)), torch.nn.Parameter(torch.tensor(b0))]
    pw, pb = tensors()
    peer = soap_module.SOAP([pw, pb], precondition_1d=True, **peer_kw(weight_decay))
    grads.reset(), bgrads.reset()
    pw.grad, pb.grad = torch.tensor(grads(W0)), torch.tensor(bgrads(b0))
    peer.step()                                              # the peer's first call: statistics only
    gw, gb = tensors()
    mod = load_generated("soap", "torch")
    opt = mod.SOAP([gw, gb], lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]), shampoo_beta=B3,
                   eps=HYPER["eps"], weight_decay=weight_decay, precondition_frequency=EVERY)
    sw, sb = peer.state[pw], peer.state[pb]
    opt.init_state(gw, L=sw["GG"][0], R=sw["GG"][1], Q_L=sw["Q"][0], Q_R=sw["Q"][1])
    g0 = torch.tensor(bgrads.reset()(b0))
    opt.init_state(gb, L=sb["GG"][0], R=(1 - B3) * (g0 @ g0).reshape(1, 1), Q_L=sb["Q"][0], Q_R=torch.ones(1, 1))
    grads.reset()(W0), bgrads.reset()(b0)                    # both runs see call k's noise at their step k
    a, b = [], []
    for _ in range(STEPS):
        gW, gB = grads(pw.detach().numpy().copy()), bgrads(pb.detach().numpy().copy())
        pw.grad, pb.grad = torch.tensor(gW), torch.tensor(gB)
        peer.step()
        gw.grad, gb.grad = torch.tensor(gW), torch.tensor(gB)
        opt.step()
        a.append((pw.detach().numpy().copy(), pb.detach().numpy().copy()))
        b.append((gw.detach().numpy().copy(), gb.detach().numpy().copy()))
    assert np.abs(gw.detach().numpy() - W0).max() > 1e-3
    return a, b, opt, gw


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_generated_torch_equals_the_peer_in_float64(monkeypatch, shape, weight_decay):
    monkeypatch.setattr(soap_module, "torch", float64_torch())
    peer, gen, opt, gw = run_both(shape, 1, weight_decay)
    assert rel([w for w, _ in peer], [w for w, _ in gen]) < 1e-13           # the weight
    assert rel([b for _, b in peer], [b for _, b in gen]) < 1e-13           # the bias, one column
    st = opt.state[gw]
    assert int(st["step"]) == STEPS
    np.testing.assert_allclose(st["Q_L"].T @ st["Q_L"], np.eye(shape[0]), atol=1e-13)


def test_generated_torch_equals_the_numpy_module():
    """The same gradients and state: the torch optimizer's weight equals the numpy module's step for step."""
    shape = (5, 3)
    grads, W0 = problem(shape, 4)
    G0 = grads.reset()(W0)
    from soap_reference import eig_desc
    basis = (eig_desc((1 - B3) * G0 @ G0.T), eig_desc((1 - B3) * G0.T @ G0))
    ref, _ = run_generated(load_generated("soap", "numpy"), W0, grads, basis, weight_decay=0.02)
    mod = load_generated("soap", "torch")
    p = torch.nn.Parameter(torch.tensor(W0))
    opt = mod.SOAP([p], lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]), shampoo_beta=B3, eps=HYPER["eps"],
                   weight_decay=0.02, precondition_frequency=EVERY)
    opt.init_state(p, L=(1 - B3) * G0 @ G0.T, R=(1 - B3) * G0.T @ G0, Q_L=basis[0], Q_R=basis[1])
    grads.reset()(W0)
    out = [W0]
    for _ in range(STEPS):
        p.grad = torch.tensor(grads(p.detach().numpy().copy()))
        opt.step()
        out.append(p.detach().numpy().copy())
    assert rel(ref, out) < 1e-12


def test_generated_torch_needs_the_state_the_recipe_does_not_initialise():
    mod = load_generated("soap", "torch")
    p = torch.nn.Parameter(torch.zeros(3, 2, dtype=torch.float64))
    opt = mod.SOAP([p])
    p.grad = torch.ones_like(p)
    with pytest.raises(RuntimeError, match="call init_state"):
        opt.step()
    with pytest.raises(TypeError, match="missing \\['R'"):
        opt.init_state(p, L=torch.eye(3), Q_L=torch.eye(3), Q_R=torch.eye(2))
    with pytest.raises(ValueError, match="L must be symmetric"):
        opt.init_state(p, L=torch.triu(torch.ones(3, 3)), R=torch.eye(2), Q_L=torch.eye(3), Q_R=torch.eye(2))
    with pytest.raises(ValueError, match="Q_R must have shape \\(2, 2\\)"):
        opt.init_state(p, L=torch.eye(3), R=torch.eye(2), Q_L=torch.eye(3), Q_R=torch.eye(3))
    q = torch.nn.Parameter(torch.zeros(2, 2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="not a matrix or a vector"):
        mod.SOAP([q]).init_state(q, L=torch.eye(2), R=torch.eye(2), Q_L=torch.eye(2), Q_R=torch.eye(2))
