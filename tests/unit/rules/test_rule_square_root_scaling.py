"""square_root_scaling (Sec. 4.2, Eq. 38): the scale enters the mean update as √s + c instead of s, which turns
Eq. 36 with the squared-gradient Hessian into RMSprop, θ ← θ − α g/(√v_{t+1} + c), v ← (1 − β)v + βg∘g.
(The paper writes √(v + c); the engine, like torch.optim.RMSprop and Adam, adds c outside the root.)

Checked numerically:
* multi-step against the hand recurrence of Eq. 38 (from v_0 = 0 and from v_0 > 0), and with c = 0 (the default);
* against torch.optim.RMSprop in float64, an independent implementation;
* as a pass: from the same state, the step WITH the rule stores the same scale as the step WITHOUT it (the
  rule changes how s is used, not s), and its mean displacement is the plain one times s_{t+1}/(√s_{t+1} + c);
* with a Hessian oracle (online Newton + square-root scaling, the Hessian-based variant of Eq. 38).
"""
import functools

import numpy as np
import torch
import yaml

from blr_derive import api

# Same arithmetic up to grouping (sqrt is correctly rounded in numpy and torch): a few ulps per step over ≤ 10
# steps.  1e-12 relative is a wide margin; s instead of √s, c inside the root (√(v + c) vs √v + c differ by
# ~c/(2√v) relative ≈ 1e-3 here) or a missing c are all far above it.
RTOL, ATOL = 1e-12, 1e-14
LR, BETA, C = 0.05, 0.1, 1e-3


def recipe(rule=True, sq=True, eps=True):
    hp = {"lr": LR, "beta": BETA}
    approx = ["delta"] + (["squared_gradient_hessian"] if sq else []) + [{"separate_learning_rates": {"s": "beta"}}]
    if rule:
        args = {"param": "s"}
        if eps:
            args["eps"] = "c"
            hp["c"] = C
        approx.append({"square_root_scaling": args})
    return yaml.safe_dump({"name": "sqrt_test", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
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


def test_rmsprop_eq_38_by_hand():
    mod = compiled(recipe())
    th0, v_pos, grad, _ = problem()
    for v0 in (np.zeros_like(th0), v_pos):
        state, th, v = mod.init(m=th0, s=v0), th0.copy(), v0.copy()
        for _ in range(10):
            state = mod.step(state, oracles={"grad": grad}, lr=LR, beta=BETA, c=C)
            g = grad(th)
            v = (1 - BETA) * v + BETA * g * g
            th = th - LR * g / (np.sqrt(v) + C)
            np.testing.assert_allclose(state["s"], v, rtol=RTOL, atol=0)
            np.testing.assert_allclose(state["m"], th, rtol=RTOL, atol=ATOL)


def test_default_eps_is_zero():
    mod = compiled(recipe(eps=False))
    th0, v0, grad, _ = problem(1)
    state, th, v = mod.init(m=th0, s=v0), th0.copy(), v0.copy()
    for _ in range(5):
        state = mod.step(state, oracles={"grad": grad}, lr=LR, beta=BETA)
        g = grad(th)
        v = (1 - BETA) * v + BETA * g * g
        th = th - LR * g / np.sqrt(v)
        np.testing.assert_allclose(state["m"], th, rtol=RTOL, atol=ATOL)


def test_matches_torch_rmsprop():
    mod = compiled(recipe())
    th0, _, grad, _ = problem(2)
    p = torch.nn.Parameter(torch.tensor(th0, dtype=torch.float64))
    opt = torch.optim.RMSprop([p], lr=LR, alpha=1 - BETA, eps=C)
    state = mod.init(m=th0, s=np.zeros_like(th0))
    for _ in range(10):
        opt.zero_grad()
        p.grad = torch.tensor(grad(p.detach().numpy().copy()), dtype=torch.float64)
        opt.step()
        state = mod.step(state, oracles={"grad": grad}, lr=LR, beta=BETA, c=C)
        np.testing.assert_allclose(state["m"], p.detach().numpy(), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(state["s"], opt.state[p]["square_avg"].numpy(), rtol=RTOL, atol=0)


def test_pass_changes_only_how_the_scale_preconditions_the_mean():
    for sq in (True, False):
        with_, without = compiled(recipe(sq=sq)), compiled(recipe(rule=False, sq=sq))
        for seed in range(3):
            m0, s0, grad, hess = problem(10 + seed)
            oracles = {"grad": grad, "hess": hess}
            a = with_.step(with_.init(m=m0, s=s0), oracles=oracles, lr=LR, beta=BETA, c=C)
            b = without.step(without.init(m=m0, s=s0), oracles=oracles, lr=LR, beta=BETA)
            np.testing.assert_array_equal(a["s"], b["s"])            # the stored scale is untouched
            s1 = b["s"]
            # −α g/(√s' + c) = (−α g/s')·s'/(√s' + c); the subtraction m_b − m costs ≲ |m|/|Δm| ≲ 1e2 ulps
            np.testing.assert_allclose(a["m"] - m0, (b["m"] - m0) * s1 / (np.sqrt(s1) + C), rtol=1e-12, atol=1e-14)


def test_hessian_based_scale_by_hand():
    """Online Newton (Eq. 36) preconditioned by √s + c: s ← (1 − β)s + βH, θ ← θ − α g/(√s_{t+1} + c)."""
    mod = compiled(recipe(sq=False))
    th, s, grad, hess = problem(3)
    state = mod.init(m=th, s=s)
    for _ in range(6):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=LR, beta=BETA, c=C)
        s = (1 - BETA) * s + BETA * hess(th)
        th = th - LR * grad(th) / (np.sqrt(s) + C)
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], th, rtol=RTOL, atol=ATOL)
