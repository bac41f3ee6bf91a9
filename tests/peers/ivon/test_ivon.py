"""Generated IVON (torch and numpy) against the ivon-opt package (0.1.3)."""
import copy

import numpy as np
import pytest
import torch

import ivon  # noqa: E402  (a declared test dependency: ivon-opt==0.1.3)

from conftest import load_generated


def problem(dtype):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(128, 5, generator=g, dtype=dtype)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).long()
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to(dtype)
    return X, y, net


def groups(net):
    return [{"params": list(net[0].parameters())}, {"params": list(net[2].parameters()), "lr": 0.05}]


def train(opt, net, X, y, steps, samples, use_closure=False):
    torch.manual_seed(5)
    for i in range(steps):
        b = slice((i % 4) * 32, (i % 4 + 1) * 32)
        if use_closure:
            def closure():
                with opt.sampled_params(train=True):
                    opt.zero_grad()
                    loss = torch.nn.functional.cross_entropy(net(X[b]), y[b])
                    loss.backward()
                return loss
            opt.step(closure)
        else:
            for _ in range(samples):
                with opt.sampled_params(train=True):
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(net(X[b]), y[b]).backward()
            opt.step()


CASES = [dict(hess_approx="price", mc_samples=1), dict(hess_approx="price", mc_samples=3),
         dict(hess_approx="gradsq", mc_samples=1), dict(hess_approx="gradsq", mc_samples=3),
         dict(hess_approx="price", mc_samples=1, clip_radius=0.01, weight_decay=1e-3, beta2=0.999),
         dict(hess_approx="price", mc_samples=2, debias=False, rescale_lr=False, hess_init=0.5)]


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)], ids=["f64", "f32"])
@pytest.mark.parametrize("kw", CASES, ids=[str(i) for i in range(len(CASES))])
def test_generated_ivon_equals_ivon_opt(kw, dtype, tol):
    mod = load_generated("ivon", "torch")
    X, y, net_ref = problem(dtype)
    net_gen = copy.deepcopy(net_ref)
    ref = ivon.IVON(groups(net_ref), lr=0.1, ess=128, **kw)
    gen = mod.IVON(groups(net_gen), lr=0.1, ess=128, **kw)
    train(ref, net_ref, X, y, 50, kw["mc_samples"])
    train(gen, net_gen, X, y, 50, kw["mc_samples"], use_closure=kw["mc_samples"] == 1)
    for a, b in zip(net_ref.parameters(), net_gen.parameters()):
        torch.testing.assert_close(b, a, rtol=0, atol=tol)
    # the Hessian state too (ivon-opt keeps it flat per group)
    for gi, group in enumerate(gen.param_groups):
        h = torch.cat([gen.state[p]["h"].flatten() for p in group["params"]])
        torch.testing.assert_close(h, ref.param_groups[gi]["hess"], rtol=0, atol=tol * 10)
    assert max((a - b).abs().max().item() for a, b in zip(net_gen.parameters(), problem(dtype)[2].parameters())) > 1e-3


def test_constructor_matches_ivon_opt():
    import inspect
    mod = load_generated("ivon", "torch")
    ours = inspect.signature(mod.IVON.__init__).parameters
    theirs = inspect.signature(ivon.IVON.__init__).parameters
    for name in ("lr", "ess", "hess_init", "beta1", "beta2", "weight_decay", "mc_samples", "hess_approx",
                 "clip_radius", "rescale_lr", "debias"):
        assert name in ours
        assert ours[name].default == theirs[name].default, name
    with pytest.raises(ValueError):
        mod.IVON(torch.nn.Linear(2, 2).parameters(), lr=0.1, ess=10, hess_approx="newton")


def test_sampled_params_restores_means_when_the_body_raises():
    mod = load_generated("ivon", "torch")
    X, y, net = problem(torch.float64)
    opt = mod.IVON(net.parameters(), lr=0.1, ess=128)
    before = [p.detach().clone() for p in net.parameters()]
    with pytest.raises(ZeroDivisionError):
        with opt.sampled_params(train=True):
            assert any((p - b).abs().max() > 0 for p, b in zip(net.parameters(), before))   # really perturbed
            1 / 0
    for p, b in zip(net.parameters(), before):
        assert torch.equal(p, b)
    with pytest.raises(RuntimeError, match="sampled_params"):
        opt.step()                       # no sample was collected


def test_state_dict_round_trip():
    mod = load_generated("ivon", "torch")
    X, y, net = problem(torch.float64)
    opt = mod.IVON(groups(net), lr=0.1, ess=128)
    train(opt, net, X, y, 5, 1)
    sd = copy.deepcopy(opt.state_dict())
    opt2 = mod.IVON(groups(net), lr=0.1, ess=128)
    opt2.load_state_dict(sd)
    for p in net.parameters():
        assert torch.equal(opt2.state[p]["h"], opt.state[p]["h"])
        assert float(opt2.state[p]["step"]) == 5.0


class TorchNoise:
    """A numpy 'rng' that returns the torch draws, so the numpy twin sees the same noise."""

    def standard_normal(self, shape):
        return torch.randn(int(np.prod(shape)), dtype=torch.float64).numpy().reshape(shape)


@pytest.mark.parametrize("kw", CASES[:4], ids=[str(i) for i in range(4)])
def test_torch_ivon_equals_numpy_twin_with_the_same_noise(kw):
    torch_mod = load_generated("ivon", "torch")
    np_mod = load_generated("ivon", "numpy")
    rng = np.random.default_rng(0)
    A = rng.normal(size=(6, 6))
    A = A @ A.T / 6 + np.eye(6)
    c = rng.normal(size=6)
    grad = lambda x: A @ (x - c) + 0.2 * np.tanh(x)
    x0 = rng.normal(size=6)
    p = torch.nn.Parameter(torch.tensor(x0))
    opt = torch_mod.IVON([p], lr=0.05, ess=50, **kw)
    state = np_mod.init(m=x0)
    for _ in range(20):
        torch.manual_seed(_)
        for _k in range(kw["mc_samples"]):
            with opt.sampled_params(train=True):
                p.grad = torch.tensor(grad(p.detach().numpy()))
        opt.step()
        torch.manual_seed(_)
        state = np_mod.step(state, oracles={"grad": grad}, rng=TorchNoise(), lr=0.05, ess=50, **kw)
        np.testing.assert_allclose(p.detach().numpy(), state["m"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(opt.state[p]["h"].numpy(), state["h"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_price_statistic_is_ivon_opts_bit_for_bit(dtype):
    """The per-sample statistic ε·g/σ reads the draw's scaled noise ε/σ (kept from the draw) and multiplies it by
    the gradient, one pass, as ivon-opt's ``noise * grad``: from the same draws, the averaged statistic equals
    ivon-opt's bit for bit (two groups, two samples: the running mean's 1/2 is exact, where ivon-opt divides by
    the count and the generated optimizer multiplies by its reciprocal)."""
    mod = load_generated("ivon", "torch")
    X, y, net_ref = problem(dtype)
    net_gen = copy.deepcopy(net_ref)
    ref = ivon.IVON(groups(net_ref), lr=0.1, ess=128, mc_samples=2)
    gen = mod.IVON(groups(net_gen), lr=0.1, ess=128, mc_samples=2)
    for opt, net in ((ref, net_ref), (gen, net_gen)):
        torch.manual_seed(5)
        for _ in range(2):
            with opt.sampled_params(train=True):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(X[:32]), y[:32]).backward()
    got = torch.cat([gen._samples[i]["avg_nxg"][0].reshape(-1) for i in range(2)])
    assert gen._samples[0].get("flat") and torch.equal(got, ref.state["avg_nxg"])
