"""heavy_ball_momentum (App. F, Eqs. 75-76, 80): momentum on the mean step in buffer form,
b_{t+1} = γ b_t + (1 − d)·direction (b_1 = direction), m_{t+1} = m_t − ρ b_{t+1}.

Checked numerically:
* over N(θ | m, I) with the delta method (SGD), the trajectory is Polyak's heavy ball written from the paper,
  θ_{t+1} = θ_t − α∇ℓ(θ_t) + γ(θ_t − θ_{t−1}) with θ_{−1} = θ_0 (Eq. 75; it is also Eq. 80 for this family,
  whose natural parameter is λ = m), and its unrolled form θ_{t+1} = θ_t − α Σ_k γ^k ∇ℓ(θ_{t−k}) (Eq. 76);
* against torch.optim.SGD (momentum, dampening, Nesterov), an independent implementation of the same
  conventions, in float64;
* over N(m, diag(s)⁻¹) (online Newton, Eq. 37) the buffer acts on the preconditioned direction g/s_{t+1} and
  leaves the precision untouched; the catalog's RMSprop with momentum equals torch.optim.RMSprop;
* `when: momentum != 0` with γ = 0 is the plain update bit for bit.
"""
import functools

import numpy as np
import torch
import yaml

from blr_derive import api

# Same sums and products as the hand recurrences, grouped differently (e.g. θ_t − α g + γ(θ_t − θ_{t−1}) against
# θ_t − α(γ b + g)): a few roundings of ~1e-16 relative per step, accumulated over ≤ 10 steps.  1e-12 relative
# (with an absolute floor of 1e-14 for coordinates that pass near 0) is a wide margin that a wrong γ, a missing
# first-step convention or a dampening applied at step 1 (all O(0.01-1) changes here) can never pass.
RTOL, ATOL = 1e-12, 1e-14

LR, GAMMA, DAMP = 0.1, 0.7, 0.25


def recipe(family="gaussian_fixed_cov", rule=True, when=False):
    hp = {"lr": LR, "gamma": GAMMA, "damp": 0.0, "nest": {"default": False}}
    approx = ["delta"]
    if rule:
        args = {"momentum": "gamma", "dampening": "damp", "nesterov": "nest"}
        if when:
            args["when"] = "gamma != 0"
        approx.append({"heavy_ball_momentum": args})
    else:
        hp = {"lr": LR}
    return yaml.safe_dump({"name": "hb_test", "family": family, "loss": "abstract", "learning_rate": "lr",
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


def test_sgd_momentum_is_polyaks_heavy_ball_eq_75():
    mod = compiled(recipe())
    th0, _, grad, _ = problem()
    state = mod.init(m=th0)
    prev, cur = th0.copy(), th0.copy()           # θ_{−1} = θ_0: the first step has no momentum term
    for _ in range(10):
        state = mod.step(state, oracles={"grad": grad}, lr=LR, gamma=GAMMA)
        prev, cur = cur, cur - LR * grad(cur) + GAMMA * (cur - prev)            # Eq. 75 (= Eq. 80 for λ = m)
        np.testing.assert_allclose(state["m"], cur, rtol=RTOL, atol=ATOL)
    plain = th0.copy()
    for _ in range(10):
        plain = plain - LR * grad(plain)
    assert np.abs(cur - plain).max() > 1e-2                          # momentum really changed the trajectory


def test_unrolled_form_eq_76():
    """θ_{t+1} = θ_t − α Σ_{k=0}^{t} γ^k ∇ℓ(θ_{t−k}): the effective gradient is a decaying sum of past ones."""
    mod = compiled(recipe())
    th0, _, grad, _ = problem(1)
    state, history = mod.init(m=th0), []
    for _ in range(8):
        theta = state["m"]
        history.append(grad(theta))
        state = mod.step(state, oracles={"grad": grad}, lr=LR, gamma=GAMMA)
        t = len(history) - 1
        expected = theta - LR * sum(GAMMA ** k * history[t - k] for k in range(t + 1))
        np.testing.assert_allclose(state["m"], expected, rtol=RTOL, atol=ATOL)


def torch_sgd_trajectory(th0, grad, steps, **kw):
    p = torch.nn.Parameter(torch.tensor(th0, dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=LR, **kw)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        p.grad = torch.tensor(grad(p.detach().numpy().copy()), dtype=torch.float64)
        opt.step()
        out.append(p.detach().numpy().copy())
    return out


def test_matches_torch_sgd_momentum_dampening_nesterov():
    mod = compiled(recipe())
    th0, _, grad, _ = problem(2)
    for damp, nest in [(0.0, False), (DAMP, False), (0.0, True)]:      # torch refuses Nesterov with dampening
        ref = torch_sgd_trajectory(th0, grad, 8, momentum=GAMMA, dampening=damp, nesterov=nest)
        state = mod.init(m=th0)
        for want in ref:
            state = mod.step(state, oracles={"grad": grad}, lr=LR, gamma=GAMMA, damp=damp, nest=nest)
            np.testing.assert_allclose(state["m"], want, rtol=RTOL, atol=ATOL)


def test_dampening_recurrence_by_hand():
    """With dampening d (t ≥ 2): θ_{t+1} = θ_t − α(1 − d)∇ℓ(θ_t) + γ(θ_t − θ_{t−1}); the first step is a plain
    gradient step (the buffer starts at the first direction, undamped)."""
    mod = compiled(recipe())
    th0, _, grad, _ = problem(3)
    state = mod.step(mod.init(m=th0), oracles={"grad": grad}, lr=LR, gamma=GAMMA, damp=DAMP)
    prev, cur = th0, th0 - LR * grad(th0)
    np.testing.assert_allclose(state["m"], cur, rtol=RTOL, atol=ATOL)
    for _ in range(6):
        state = mod.step(state, oracles={"grad": grad}, lr=LR, gamma=GAMMA, damp=DAMP)
        prev, cur = cur, cur - LR * (1 - DAMP) * grad(cur) + GAMMA * (cur - prev)
        np.testing.assert_allclose(state["m"], cur, rtol=RTOL, atol=ATOL)


def test_newton_with_momentum_acts_on_the_preconditioned_direction():
    """N(m, diag(s)⁻¹): s_{t+1} = (1 − ρ)s_t + ρH (unchanged by the rule), b ← γb + g/s_{t+1}, m ← m − ρb."""
    mod = compiled(recipe("gaussian_diag"))
    m0, s0, grad, hess = problem(4)
    state = mod.init(m=m0, s=s0)
    m, s, b = m0.copy(), s0.copy(), None
    for _ in range(6):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=LR, gamma=GAMMA)
        s = (1 - LR) * s + LR * hess(m)
        d = grad(m) / s
        b = d if b is None else GAMMA * b + d
        m = m - LR * b
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=ATOL)


def test_zero_momentum_under_when_is_the_plain_update_bit_for_bit():
    with_, without = compiled(recipe(when=True)), compiled(recipe(rule=False))
    th0, _, grad, _ = problem(5)
    a, b = with_.init(m=th0), without.init(m=th0)
    for _ in range(4):
        a = with_.step(a, oracles={"grad": grad}, lr=LR, gamma=0.0)
        b = without.step(b, oracles={"grad": grad}, lr=LR)
        np.testing.assert_array_equal(a["m"], b["m"])      # the 'else' branch is the same expression: no rounding


def test_catalog_rmsprop_momentum_matches_torch():
    """RMSprop puts the buffer on the preconditioned step g/(√v + ε) (torch.optim.RMSprop's momentum)."""
    mod = compiled("rmsprop")
    th0, _, grad, _ = problem(6)
    hp = dict(lr=0.01, alpha=0.9, eps=1e-8, momentum=0.8)
    p = torch.nn.Parameter(torch.tensor(th0, dtype=torch.float64))
    opt = torch.optim.RMSprop([p], **hp)
    state = mod.init(m=th0)
    for _ in range(8):
        opt.zero_grad()
        p.grad = torch.tensor(grad(p.detach().numpy().copy()), dtype=torch.float64)
        opt.step()
        state = mod.step(state, oracles={"grad": grad}, **hp)
        np.testing.assert_allclose(state["m"], p.detach().numpy(), rtol=RTOL, atol=ATOL)
