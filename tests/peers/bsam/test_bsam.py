"""Generated bSAM and SAM (numpy, torch and triton) against the hand-written torch reference of the official code
(team-approx-bayes/bayesian-sam optim.py, tests/peers/bsam/reference.py), with the same noise draws (the triton
modules through the interpreter, TRITON_INTERPRET=1 as tests/conftest.py sets it, given the Philox draws that
their ``noise()`` regenerates).

The oracle is a logistic-regression loss with one sub-batch per ``msharpness`` index; the generated code calls the
gradient oracle twice per sample (at θ_k, then at the adversarial point), in the reference's order, so the test's
oracle tells the sub-batch from the number of calls so far.  The generated state ``s_ex`` is the official
per-example precision s (a change of variable of the precision of q, ess*s_ex)."""
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import load_generated, load_module_from_path

ref = load_module_from_path(Path(__file__).with_name("reference.py"), "_bsam_peer_reference")

N_DATA = 300
SHAPES = [(3, 4), (4,)]          # a weight matrix and a bias: the global norm of SAM spans both


def problem(m, seed=0):
    """m sub-batches of a two-layer-free logistic regression with inputs (x, 1) -> W x + b summed."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(m, 16, 3, generator=g, dtype=torch.float64)
    y = (torch.randn(m, 16, 4, generator=g, dtype=torch.float64) > 0).double()
    return X, y


def loss_k(params, X, y, k):
    W, b = params
    logits = X[k] @ W + b
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, y[k].to(logits.dtype)) \
        + 0.05 * (W ** 4).sum() + 0.05 * torch.sin(b).sum()


def grad_fn(X, y):
    def fn(params, k):
        ps = [p.detach().clone().requires_grad_(True) for p in params]
        return list(torch.autograd.grad(loss_k(ps, X, y, k), ps))
    return fn


def start(dtype, seed=3):
    g = torch.Generator().manual_seed(seed)
    return [0.5 * torch.randn(*s, generator=g, dtype=torch.float64).to(dtype) for s in SHAPES]


BSAM_HP = dict(lr=0.2, beta1=0.9, beta2=0.99, wdecay=0.01, rho=0.05, damping=0.1, s_init=2.0)


def bsam_reference(w0, m):
    return ref.BSAMReference(w0, Ndata=N_DATA, learningrate=BSAM_HP["lr"], beta1=BSAM_HP["beta1"],
                             beta2=BSAM_HP["beta2"], wdecay=BSAM_HP["wdecay"], rho=BSAM_HP["rho"], msharpness=m,
                             s_init=BSAM_HP["s_init"], damping=BSAM_HP["damping"])


def flat(ts):
    return torch.cat([t.reshape(-1) for t in ts])


class Draws:
    """A numpy 'rng' that hands out given standard-normal draws in order."""

    def __init__(self, draws):
        self.draws = list(draws)

    def standard_normal(self, shape):
        out = self.draws.pop(0)
        assert out.shape == tuple(shape)
        return out


def counting_oracle(fn, sizes, shapes):
    """The numpy oracle: flat parameters -> flat gradient of sub-batch (calls so far) // 2."""
    calls = []

    def grad(theta):
        k = len(calls) // 2
        calls.append(k)
        parts = [torch.tensor(x).reshape(s) for x, s in zip(np.split(theta, np.cumsum(sizes)[:-1]), shapes)]
        return flat(fn(parts, k)).numpy()
    return grad, calls


@pytest.mark.parametrize("m", [1, 3])
def test_numpy_bsam_equals_reference(m):
    mod = load_generated("bsam")
    X, y = problem(m)
    fn = grad_fn(X, y)
    w0 = start(torch.float64)
    sizes = [t.numel() for t in w0]
    peer = bsam_reference(w0, m)
    hp = dict(BSAM_HP, ess=float(N_DATA), msharpness=m)
    state = mod.init(hyperparameters=hp, m=flat(w0).numpy())
    rng = np.random.default_rng(11)
    for _ in range(8):
        noise = [rng.standard_normal(sum(sizes)) for _ in range(m)]
        peer.step(fn, [[torch.tensor(x).reshape(t.shape) for x, t in
                        zip(np.split(n, np.cumsum(sizes)[:-1]), w0)] for n in noise])
        oracle, calls = counting_oracle(fn, sizes, SHAPES)
        state = mod.step(state, oracles={"grad": oracle}, rng=Draws(noise), **hp)
        assert calls == [k for k in range(m) for _ in range(2)]
        np.testing.assert_allclose(state["m"], flat(peer.w).numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(state["s_ex"], flat(peer.s).numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(state["gm"], flat(peer.gm).numpy(), rtol=0, atol=1e-12)
    assert np.abs(state["m"] - flat(w0).numpy()).max() > 1e-2       # it moved


def torch_bsam_run(m, dtype, steps, use_closure):
    """The generated torch BSAM and the reference from the same start and the same torch.randn draws."""
    mod = load_generated("bsam", "torch")
    X, y = problem(m)
    X, y = X.to(dtype), y.to(dtype)
    w0 = start(dtype)
    params = [torch.nn.Parameter(t.clone()) for t in w0]
    opt = mod.BSAM([{"params": params[:1]}, {"params": params[1:]}], ess=N_DATA, msharpness=m, **BSAM_HP)
    peer = bsam_reference(w0, m)
    fn = grad_fn(X, y)
    calls = []

    def closure():
        k = len(calls) // 2
        calls.append(k)
        with opt.sampled_params(train=True):
            opt.zero_grad()
            loss = loss_k(params, X, y, k)
            loss.backward()
        return loss
    for i in range(steps):
        torch.manual_seed(100 + i)
        calls.clear()
        if use_closure:
            opt.step(closure)
        else:
            for _ in range(2 * m):
                closure()
            opt.step()
        assert calls == [k for k in range(m) for _ in range(2)]
        torch.manual_seed(100 + i)                  # the draws of the generated step: one flat draw per group
        noise = [[torch.randn(t.numel(), dtype=dtype).reshape(t.shape) for t in w0] for _ in range(m)]
        peer.step(fn, noise)
    return opt, params, peer


@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)], ids=["f64", "f32"])
def test_torch_bsam_equals_reference(m, dtype, tol):
    opt, params, peer = torch_bsam_run(m, dtype, 8, use_closure=m == 1)
    for p, w, s, gm in zip(params, peer.w, peer.s, peer.gm):
        torch.testing.assert_close(p.detach(), w, rtol=0, atol=tol)
        torch.testing.assert_close(opt.state[p]["s_ex"], s, rtol=0, atol=tol)
        torch.testing.assert_close(opt.state[p]["gm"], gm, rtol=0, atol=tol)
    assert max((p.detach() - w).abs().max().item() for p, w in zip(params, start(dtype))) > 1e-2


SAM_HP = dict(lr=0.1, momentum=0.9, wdecay=0.01, rho=0.05)


def sam_reference(w0, m):
    return ref.SAMReference(w0, learningrate=SAM_HP["lr"], momentum=SAM_HP["momentum"], wdecay=SAM_HP["wdecay"],
                            rho=SAM_HP["rho"], msharpness=m)


@pytest.mark.parametrize("m", [1, 3])
def test_numpy_sam_equals_reference(m):
    mod = load_generated("sam")
    X, y = problem(m)
    fn = grad_fn(X, y)
    w0 = start(torch.float64)
    sizes = [t.numel() for t in w0]
    peer = sam_reference(w0, m)
    hp = dict(SAM_HP, msharpness=m)
    state = mod.init(m=flat(w0).numpy())
    for _ in range(8):
        peer.step(fn)
        oracle, calls = counting_oracle(fn, sizes, SHAPES)
        state = mod.step(state, oracles={"grad": oracle}, **hp)       # a point mass: no rng
        assert calls == [k for k in range(m) for _ in range(2)]
        np.testing.assert_allclose(state["m"], flat(peer.w).numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(state["momentum_buffer"], flat(peer.gm).numpy(), rtol=0, atol=1e-12)
    assert np.abs(state["m"] - flat(w0).numpy()).max() > 1e-2


@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)], ids=["f64", "f32"])
def test_torch_sam_equals_reference(m, dtype, tol):
    mod = load_generated("sam", "torch")
    X, y = problem(m)
    X, y = X.to(dtype), y.to(dtype)
    w0 = start(dtype)
    params = [torch.nn.Parameter(t.clone()) for t in w0]
    # two groups: the ascent step's norm is global over both
    opt = mod.SAM([{"params": params[:1]}, {"params": params[1:]}], msharpness=m, **SAM_HP)
    peer = sam_reference(w0, m)
    fn = grad_fn(X, y)
    calls = []

    def closure():
        k = len(calls) // 2
        calls.append(k)
        with opt.sampled_params(train=True):
            opt.zero_grad()
            loss = loss_k(params, X, y, k)
            loss.backward()
        return loss
    for _ in range(8):
        calls.clear()
        opt.step(closure)
        assert calls == [k for k in range(m) for _ in range(2)]
        peer.step(fn)
        for p, w in zip(params, peer.w):
            torch.testing.assert_close(p.detach(), w, rtol=0, atol=tol)
    for p, gm in zip(params, peer.gm):
        torch.testing.assert_close(opt.state[p]["momentum_buffer"], gm, rtol=0, atol=tol)
    assert max((p.detach() - w).abs().max().item() for p, w in zip(params, start(dtype))) > 1e-2


def test_torch_step_refuses_an_incomplete_sample():
    mod = load_generated("bsam", "torch")
    X, y = problem(1)
    params = [torch.nn.Parameter(t.clone()) for t in start(torch.float64)]
    opt = mod.BSAM(params, ess=N_DATA, msharpness=1, **BSAM_HP)
    before = [p.detach().clone() for p in params]
    with opt.sampled_params(train=True):
        assert any((p - b).abs().max() > 0 for p, b in zip(params, before))     # at the sample θ_k
        loss_k(params, X, y, 0).backward()
    for p, b in zip(params, before):
        assert torch.equal(p.detach(), b)                                        # the mean is restored
    with pytest.raises(RuntimeError, match="incomplete"):
        opt.step()


def triton_run(name, m, steps, use_closure):
    """The generated triton bSAM/SAM and the reference, float32, from the same start; bSAM's reference gets the
    Philox draws of each sample (``noise(i)`` inside the sample's first point)."""
    mod = load_generated(name, "triton")
    X, y = problem(m)
    X, y = X.float(), y.float()
    w0 = start(torch.float32)
    params = [torch.nn.Parameter(t.clone()) for t in w0]
    groups = [{"params": params[:1]}, {"params": params[1:]}]     # SAM's norm is global over both
    if name == "bsam":
        opt, peer = mod.BSAM(groups, ess=N_DATA, msharpness=m, **BSAM_HP), bsam_reference(w0, m)
    else:
        opt, peer = mod.SAM(groups, msharpness=m, **SAM_HP), sam_reference(w0, m)
    fn = grad_fn(X, y)
    calls, noise = [], []

    def closure():
        k = len(calls) // 2
        first = len(calls) % 2 == 0
        calls.append(k)
        with opt.sampled_params(train=True):
            if name == "bsam" and first:
                noise.append([opt.noise(i).view(s) for i, s in enumerate(SHAPES)])
            opt.zero_grad()
            loss = loss_k(params, X, y, k)
            loss.backward()
        return loss
    worst = 0.0
    for _ in range(steps):
        calls.clear()
        noise.clear()
        if use_closure:
            opt.step(closure)
        else:
            for _ in range(2 * m):
                closure()
            opt.step()
        assert calls == [k for k in range(m) for _ in range(2)]
        if name == "bsam":
            peer.step(fn, noise)
        else:
            peer.step(fn)
        worst = max(worst, max(float((p.detach() - w).abs().max()) for p, w in zip(params, peer.w)))
    return opt, params, peer, worst


# masked lanes of a ragged block divide zeros by zeros in the interpreter; their results are never stored
INTERPRETER_LANES = pytest.mark.filterwarnings("ignore:(divide by zero|invalid value):RuntimeWarning")


@INTERPRETER_LANES
@pytest.mark.parametrize("m", [1, 3])
def test_triton_bsam_equals_reference(m):
    opt, params, peer, worst = triton_run("bsam", m, 8, use_closure=m == 1)
    assert worst < 1e-6, worst
    for p, w, s, gm in zip(params, peer.w, peer.s, peer.gm):
        torch.testing.assert_close(p.detach(), w, rtol=0, atol=1e-6)
        torch.testing.assert_close(opt.state[p]["s_ex"], s, rtol=0, atol=1e-6)
        torch.testing.assert_close(opt.state[p]["gm"], gm, rtol=0, atol=1e-6)
    assert max((p.detach() - w).abs().max().item() for p, w in zip(params, start(torch.float32))) > 1e-2


@INTERPRETER_LANES
@pytest.mark.parametrize("m", [1, 3])
def test_triton_sam_equals_reference(m):
    opt, params, peer, worst = triton_run("sam", m, 8, use_closure=m == 3)
    assert worst < 1e-6, worst
    for p, gm in zip(params, peer.gm):
        torch.testing.assert_close(opt.state[p]["momentum_buffer"], gm, rtol=0, atol=1e-6)
    assert max((p.detach() - w).abs().max().item() for p, w in zip(params, start(torch.float32))) > 1e-2


@INTERPRETER_LANES
@pytest.mark.parametrize("name", ["bsam", "sam"])
def test_triton_step_refuses_an_incomplete_sample_and_restores_the_mean(name):
    mod = load_generated(name, "triton")
    X, y = problem(1)
    X, y = X.float(), y.float()
    params = [torch.nn.Parameter(t.clone()) for t in start(torch.float32)]
    opt = mod.BSAM(params, ess=N_DATA, msharpness=1, **BSAM_HP) if name == "bsam" else \
        mod.SAM(params, msharpness=1, **SAM_HP)
    before = [p.detach().clone() for p in params]
    with opt.sampled_params(train=True):
        if name == "bsam":
            assert any((p - b).abs().max() > 0 for p, b in zip(params, before))     # at the sample θ_k
        loss_k(params, X, y, 0).backward()
    for p, b in zip(params, before):
        assert torch.equal(p.detach(), b)                                        # the mean is restored
    with pytest.raises(RuntimeError, match="incomplete"):
        opt.step()
    g = [p.grad.clone() for p in params]
    with opt.sampled_params(train=True):       # the second point: the ascent step from the kept gradient
        moved = [p.detach() - b for p, b in zip(params, before)]
    if name == "sam":
        norm = torch.sqrt(sum((x ** 2).sum() for x in g))
        for d, x in zip(moved, g):
            torch.testing.assert_close(d, SAM_HP["rho"] * x / norm, rtol=1e-5, atol=1e-7)
    for p, b in zip(params, before):
        assert torch.equal(p.detach(), b)
