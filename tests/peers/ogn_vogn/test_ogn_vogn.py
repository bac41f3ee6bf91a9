"""OGN and VOGN against references written from Eqs. 44-46 of Khan & Rue (2023), and the torch
classes against their numpy twins (per-example gradients from torch.func)."""
import numpy as np
import pytest
import torch

from conftest import load_generated

N, D, M = 64, 4, 16


def data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    y = (X @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.3 * rng.normal(size=N) > 0).astype(float)
    return X, y


def per_example_grads(theta, Xb, yb):
    p = 1 / (1 + np.exp(-Xb @ theta))
    return (p - yb)[:, None] * Xb            # ∇ℓ_i for the logistic loss


def oracles(Xb, yb):
    return {"grad": lambda th: per_example_grads(th, Xb, yb).mean(0),
            "ggn": lambda th: (per_example_grads(th, Xb, yb) ** 2).mean(0)}


HP = dict(lr=0.2, beta=0.1, ess=float(N), prior_precision=0.5)


def test_ogn_matches_eqs_44_45():
    mod = load_generated("ogn")
    X, y = data()
    theta = np.zeros(D)
    s = np.full(D, N * HP["prior_precision"])
    state = mod.init(hyperparameters=HP, m=theta)   # s defaults to ess * prior_precision
    np.testing.assert_allclose(state["s"], s)
    for t in range(40):
        b = slice((t % 4) * M, (t % 4 + 1) * M)
        G = per_example_grads(theta, X[b], y[b])
        ghat = N / M * G.sum(0) + HP["prior_precision"] * theta                  # Eq. 34 with R
        hhat = N / M * (G ** 2).sum(0) + HP["prior_precision"]                   # Eq. 45
        s = (1 - HP["beta"]) * s + HP["beta"] * hhat                              # Eq. 44 (Eq. 36 rates)
        theta = theta - HP["lr"] * ghat / s
        state = mod.step(state, oracles=oracles(X[b], y[b]), **HP)
        np.testing.assert_allclose(state["m"], theta, rtol=0, atol=1e-12)
        np.testing.assert_allclose(state["s"], s, rtol=0, atol=1e-9)


@pytest.mark.parametrize("samples", [1, 3])
def test_vogn_matches_eq46_with_the_same_noise(samples):
    mod = load_generated("vogn")
    X, y = data()
    theta = np.zeros(D)
    s = np.full(D, N * HP["prior_precision"])
    state = mod.init(hyperparameters=HP, m=theta)
    ref_rng, gen_rng = np.random.default_rng(7), np.random.default_rng(7)
    for t in range(40):
        b = slice((t % 4) * M, (t % 4 + 1) * M)
        gs, hs = [], []
        for _ in range(samples):                                                 # weight perturbation
            th = theta + ref_rng.standard_normal(D) / np.sqrt(s)
            G = per_example_grads(th, X[b], y[b])
            gs.append(G.mean(0))
            hs.append((G ** 2).mean(0))
        ghat = N * np.mean(gs, 0) + HP["prior_precision"] * theta
        hhat = N * np.mean(hs, 0) + HP["prior_precision"]
        s = (1 - HP["beta"]) * s + HP["beta"] * hhat                              # Eq. 46
        theta = theta - HP["lr"] * ghat / s
        state = mod.step(state, oracles=oracles(X[b], y[b]), rng=gen_rng, mc_samples=samples, **HP)
        np.testing.assert_allclose(state["m"], theta, rtol=0, atol=1e-12)
        np.testing.assert_allclose(state["s"], s, rtol=0, atol=1e-9)


def torch_oracles(p, Xb, yb):
    """p.grad = mean per-example gradient; p.ggn = mean squared per-example gradient (torch.func)."""
    def loss(w, x, t):
        return torch.nn.functional.binary_cross_entropy_with_logits(x @ w, t)
    G = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(p.detach(), Xb, yb)
    p.grad = G.mean(0)
    p.ggn = (G ** 2).mean(0)


class TorchNoise:
    def standard_normal(self, shape):
        return torch.randn(int(np.prod(shape)), dtype=torch.float64).numpy().reshape(shape)


@pytest.mark.parametrize("name", ["ogn", "vogn"])
def test_torch_equals_numpy_twin(name):
    tmod, nmod = load_generated(name, "torch"), load_generated(name, "numpy")
    cls = getattr(tmod, name.upper())
    X, y = data()
    Xt, yt = torch.tensor(X), torch.tensor(y)
    p = torch.nn.Parameter(torch.zeros(D, dtype=torch.float64))
    opt = cls([p], **HP)
    state = nmod.init(hyperparameters=HP, m=np.zeros(D))
    for t in range(30):
        b = slice((t % 4) * M, (t % 4 + 1) * M)
        torch.manual_seed(t)
        if name == "vogn":
            with opt.sampled_params(train=True):
                torch_oracles(p, Xt[b], yt[b])
        else:
            torch_oracles(p, Xt[b], yt[b])
        opt.step()
        torch.manual_seed(t)
        kw = {"rng": TorchNoise()} if name == "vogn" else {}
        state = nmod.step(state, oracles=oracles(X[b], y[b]), **kw, **HP)
        np.testing.assert_allclose(p.detach().numpy(), state["m"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(opt.state[p]["s"].numpy(), state["s"], rtol=0, atol=1e-9)
    assert np.abs(state["m"]).max() > 0.1


def test_missing_ggn_attribute_is_a_clear_error():
    mod = load_generated("ogn", "torch")
    p = torch.nn.Parameter(torch.zeros(3))
    opt = mod.OGN([p], ess=10.0)
    p.grad = torch.ones(3)
    with pytest.raises(RuntimeError, match="p.ggn"):
        opt.step()
