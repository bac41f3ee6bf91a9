"""ema_momentum (App. F, Eqs. 76-78): the mean update sees the exponential moving average
u_{t+1} = γ u_t + (1 − γ) ĝ_t (u_0 = 0) instead of the gradient, θ_{t+1} = θ_t − α u_{t+1}/(scale) (Eq. 77).

Checked numerically:
* over N(m, diag(s)⁻¹) with the delta method (online Newton, Eq. 37) against the hand recurrence
  u ← γu + (1 − γ)g(m), s ← (1 − ρ)s + ρH(m), m ← m − ρu/s_{t+1}; the precision does not depend on γ;
* over N(m, I) against the unrolled EMA θ_{t+1} = θ_t − α(1 − γ) Σ_k γ^k ∇ℓ(θ_{t−k}) (the form of Eq. 76);
* with squared gradients, a separate scale rate and square-root scaling (RMSprop + momentum = Adam without
  bias correction) the trajectory obeys Wilson et al.'s rewriting, Eq. 78 (with √s + c, the engine's and
  torch's convention, in both places);
* the catalog's Adam equals torch.optim.Adam (an independent implementation of Eq. 77 with debiasing);
* γ = 0 is the plain update bit for bit.
"""
import functools

import numpy as np
import torch
import yaml

from blr_derive import api

# Same arithmetic as the references up to the grouping of a few sums and products, accumulated over ≤ 10 steps:
# ~1e-15 relative.  1e-12 is a wide margin; a missing (1 − γ), a u that starts at g instead of 0, or an EMA that
# leaks into the precision are O(0.01-1) changes here.  Eq. 78 is an algebraic rewriting evaluated with other
# roundings (a ratio of square roots, the difference θ_t − θ_{t−1}); its momentum term is a fraction of the step,
# so the cancellation costs at most a few ulps of θ and the same 1e-12 holds.
RTOL, ATOL = 1e-12, 1e-14
LR, GAMMA = 0.1, 0.8


def recipe(family="gaussian_diag", rule=True, rms=False, eps=0.0):
    hp = {"lr": LR}
    approx = ["delta"]
    if rms:
        approx += ["squared_gradient_hessian", {"separate_learning_rates": {"s": "beta"}}]
        hp["beta"] = 0.05
    if rule:
        approx.append({"ema_momentum": {"rate": "gamma", "state": "u"}})
        hp["gamma"] = GAMMA
    if rms:
        approx.append({"square_root_scaling": {"param": "s", "eps": "c"}})
        hp["c"] = eps
    return yaml.safe_dump({"name": "ema_test", "family": family, "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


def problem(seed=0, n=6):
    """A separable, non-quadratic loss: ∇ℓ(θ) = a(θ − c) + 0.3 sin θ, ∇²ℓ = a + 0.3 cos θ > 0."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)
    hess = lambda x: a + 0.3 * np.cos(x)
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), grad, hess


def test_online_newton_with_ema_momentum_by_hand():
    mod = compiled(recipe())
    assert mod.init(m=np.zeros(2), s=np.ones(2))["u"].tolist() == [0.0, 0.0]       # u_0 = 0
    m0, s0, grad, hess = problem()
    state = mod.init(m=m0, s=s0)
    m, s, u = m0.copy(), s0.copy(), np.zeros_like(m0)
    for _ in range(8):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=LR, gamma=GAMMA)
        u = GAMMA * u + (1 - GAMMA) * grad(m)
        s = (1 - LR) * s + LR * hess(m)
        m = m - LR * u / s
        for k, want in (("u", u), ("s", s), ("m", m)):
            np.testing.assert_allclose(state[k], want, rtol=RTOL, atol=ATOL)


def test_the_precision_ignores_the_momentum():
    """The EMA replaces the gradient in the mean update only: from the same state, s_{t+1} is the same for any γ
    (and m_{t+1} is not)."""
    mod = compiled(recipe())
    m0, s0, grad, hess = problem(1)
    state = mod.init(m=m0, s=s0, u=np.random.default_rng(7).normal(size=m0.shape))
    outs = [mod.step(state, oracles={"grad": grad, "hess": hess}, lr=LR, gamma=g) for g in (0.0, 0.5, 0.95)]
    for o in outs[1:]:
        np.testing.assert_array_equal(o["s"], outs[0]["s"])
        assert np.abs(o["m"] - outs[0]["m"]).max() > 1e-3


def test_unrolled_ema_over_fixed_covariance():
    """θ_{t+1} = θ_t − α(1 − γ) Σ_{k=0}^{t} γ^k ∇ℓ(θ_{t−k}) (u_0 = 0)."""
    mod = compiled(recipe("gaussian_fixed_cov"))
    th0, _, grad, _ = problem(2)
    state, history = mod.init(m=th0), []
    for _ in range(10):
        theta = state["m"]
        history.append(grad(theta))
        state = mod.step(state, oracles={"grad": grad}, lr=LR, gamma=GAMMA)
        t = len(history) - 1
        expected = theta - LR * (1 - GAMMA) * sum(GAMMA ** k * history[t - k] for k in range(t + 1))
        np.testing.assert_allclose(state["m"], expected, rtol=RTOL, atol=ATOL)


def test_wilson_rewriting_eq_78():
    """θ_{t+1} = θ_t − α(1 − γ) g_t/(√s_{t+1} + c) + γ (√s_t + c)/(√s_{t+1} + c) (θ_t − θ_{t−1})."""
    c = 1e-3
    mod = compiled(recipe(rms=True, eps=c))
    th0, s0, grad, _ = problem(3)
    state = mod.init(m=th0, s=s0)
    prev = None
    for _ in range(10):
        theta, s = state["m"], state["s"]
        state = mod.step(state, oracles={"grad": grad}, lr=LR, gamma=GAMMA, beta=0.05, c=c)
        s_new = state["s"]
        expected = theta - LR * (1 - GAMMA) * grad(theta) / (np.sqrt(s_new) + c)
        if prev is not None:                                   # u_0 = 0: no momentum term at the first step
            expected = expected + GAMMA * (np.sqrt(s) + c) / (np.sqrt(s_new) + c) * (theta - prev)
        np.testing.assert_allclose(state["m"], expected, rtol=RTOL, atol=ATOL)
        prev = theta


def test_catalog_adam_matches_torch_adam():
    mod = compiled("adam")
    th0, _, grad, _ = problem(4)
    hp = dict(lr=0.05, betas=(0.8, 0.95), eps=1e-8)
    p = torch.nn.Parameter(torch.tensor(th0, dtype=torch.float64))
    opt = torch.optim.Adam([p], **hp)
    state = mod.init(m=th0)
    for _ in range(8):
        opt.zero_grad()
        p.grad = torch.tensor(grad(p.detach().numpy().copy()), dtype=torch.float64)
        opt.step()
        state = mod.step(state, oracles={"grad": grad}, **hp)
        np.testing.assert_allclose(state["m"], p.detach().numpy(), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(state["u"], opt.state[p]["exp_avg"].numpy(), rtol=RTOL, atol=ATOL)


def test_zero_rate_is_the_plain_update_bit_for_bit():
    with_, without = compiled(recipe()), compiled(recipe(rule=False))
    m0, s0, grad, hess = problem(5)
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    for _ in range(4):
        a = with_.step(a, oracles={"grad": grad, "hess": hess}, lr=LR, gamma=0.0)
        b = without.step(b, oracles={"grad": grad, "hess": hess}, lr=LR)
        for k in ("m", "s"):                      # 0·u + 1·g = g exactly
            np.testing.assert_array_equal(a[k], b[k])
