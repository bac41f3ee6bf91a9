"""running_max (AMSGrad's convention, not a BLR step): precondition with max_{τ≤t} s_τ instead of s_t.

The BLR over the mean-field Gaussian with the delta method is online Newton with a diagonal scale s (Sec. 4.2,
Eq. 37); with the squared-gradient Hessian and square-root scaling it is Adam (Eqs. 36-38).  ``running_max`` is
Reddi et al.'s AMSGrad: a state s_max (initialised to 0) with s_max ← max(s_max, s_{t+1}) used in place of
s_{t+1}.  Checked numerically:

* the generated step equals the hand-written AMSGrad recursion, on a trajectory where s falls (so the max bites);
* the catalog's Adam with ``amsgrad`` equals torch.optim.Adam(amsgrad=True) in float64;
* the step WITH the rule equals the step WITHOUT it on transformed inputs: from the state s_max, the no-rule update
  with its scale oracle raised to H' = max(H, (s_max − (1 − ρ)s)/ρ) (so that its s_{t+1} is the running max);
* when s never decreases the max is s itself (the rule is the identity), and ``when`` false is the update without
  the rule, bit for bit.
"""
import functools

import numpy as np
import torch
import yaml

from blr_derive import api

# Deterministic identities in float64 (max is exact; the rest is the same closed form grouped differently):
# 1e-12 relative is a wide margin for ≤ 30 steps, while dropping the max changes the step by O(1) relative
# on the chosen trajectories.
RTOL = 1e-12


@functools.lru_cache(maxsize=None)
def online_newton(with_rule=True):
    """m ← m − ρ g/s_used, s ← (1 − ρ)s + ρH, s_used = max over time of s (when ``flag``)."""
    approx = ["delta"] + ([{"running_max": {"param": "s", "when": "flag"}}] if with_rule else [])
    hp = {"lr": 0.1, **({"flag": True} if with_rule else {})}
    text = yaml.safe_dump({"name": "running_max_test", "family": "gaussian_diag", "loss": "abstract",
                           "learning_rate": "lr", "hyperparameters": hp, "approximations": approx}, sort_keys=False)
    return api.derive(text).compile("numpy")


@functools.lru_cache(maxsize=None)
def adam():
    return api.derive("adam").compile("numpy")


def problem(seed=0, n=6):
    rng = np.random.default_rng(seed)
    m0 = rng.normal(size=n)
    s0 = rng.uniform(1.0, 3.0, size=n)
    # the Hessian oracle alternates between large and small values: s rises and falls
    H_big, H_small = rng.uniform(4.0, 6.0, size=n), rng.uniform(0.2, 0.5, size=n)
    hess_at = lambda t: H_big if t % 4 < 2 else H_small
    grad = lambda x: 1.5 * (x - 0.3) + 0.2 * np.sin(3 * x)
    return m0, s0, grad, hess_at


def test_hand_formula_amsgrad_recursion():
    mod = online_newton()
    m0, s0, grad, hess_at = problem(1)
    lr = 0.3
    state = mod.init(m=m0, s=s0)
    np.testing.assert_array_equal(state["s_max"], 0.0)          # zero-initialised, as AMSGrad's v̂₀ = 0
    m, s, s_max = m0.copy(), s0.copy(), np.zeros_like(m0)
    below = 0
    for t in range(12):
        H = hess_at(t)
        state = mod.step(state, oracles={"grad": grad, "hess": lambda x, H=H: H}, lr=lr, flag=True)
        g = grad(m)
        s = (1 - lr) * s + lr * H
        s_max = np.maximum(s_max, s)
        m = m - lr * g / s_max
        below += int(np.any(s < s_max))
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["s_max"], s_max, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)
    assert below >= 4                     # the running max differed from s on several steps


def test_with_the_rule_equals_without_it_on_a_raised_scale_oracle():
    """One step from (m, s, s_max): with the rule s_used = max(s_max, (1 − ρ)s + ρH); the no-rule step from (m, s)
    with H' = max(H, (s_max − (1 − ρ)s)/ρ) has s_{t+1} = max((1 − ρ)s + ρH, s_max) and hence the same mean."""
    with_, without = online_newton(), online_newton(with_rule=False)
    m0, s0, grad, _ = problem(2)
    rng = np.random.default_rng(7)
    lr = 0.25
    s_max = s0 * rng.uniform(0.5, 2.0, size=s0.shape)           # some coordinates above s_{t+1}, some below
    H = rng.uniform(0.5, 4.0, size=s0.shape)
    H_raised = np.maximum(H, (s_max - (1 - lr) * s0) / lr)
    a = with_.step(with_.init(m=m0, s=s0, s_max=s_max), oracles={"grad": grad, "hess": lambda x: H}, lr=lr, flag=True)
    b = without.step(without.init(m=m0, s=s0), oracles={"grad": grad, "hess": lambda x: H_raised}, lr=lr)
    s_plain = (1 - lr) * s0 + lr * H
    assert np.any(s_max > s_plain) and np.any(s_max < s_plain)
    # the raised oracle reproduces max(s_{t+1}, s_max) only up to one rounding of the division and product
    np.testing.assert_allclose(a["s_max"], b["s"], rtol=RTOL, atol=0)
    np.testing.assert_allclose(a["m"], b["m"], rtol=RTOL, atol=0)
    np.testing.assert_allclose(a["s"], s_plain, rtol=RTOL, atol=0)     # s itself is not touched by the rule


def test_nondecreasing_scale_and_false_condition_are_the_update_without_the_rule():
    """A Hessian oracle that only grows keeps s nondecreasing from s_max = s₀: the max is s itself; and
    ``when`` false takes the no-rule branch.  Both exactly (max of equal numbers and the else branch are exact)."""
    with_, without = online_newton(), online_newton(with_rule=False)
    m0, s0, grad, _ = problem(3)
    hess_t = lambda t: s0 + 0.5 * t                       # ≥ s at every step, so (1 − ρ)s + ρH ≥ s
    a = with_.init(m=m0, s=s0, s_max=s0)
    off = with_.init(m=m0, s=s0)
    b = without.init(m=m0, s=s0)
    for t in range(8):
        o = {"grad": grad, "hess": lambda x, t=t: hess_t(t)}
        a = with_.step(a, oracles=o, lr=0.2, flag=True)
        off = with_.step(off, oracles=o, lr=0.2, flag=False)
        b = without.step(b, oracles=o, lr=0.2)
        np.testing.assert_array_equal(a["s_max"], b["s"])
        for k in ("m", "s"):
            np.testing.assert_array_equal(a[k], b[k])
            np.testing.assert_array_equal(off[k], b[k])
    np.testing.assert_array_equal(off["s_max"], 0.0)      # the state is not updated when the rule is off


def test_catalog_adam_amsgrad_equals_torch_optim_adam_amsgrad_in_float64():
    mod = adam()
    rng = np.random.default_rng(4)
    n = 6
    m0 = rng.normal(size=n)
    a, c = rng.uniform(0.5, 3.0, size=n), rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)       # gradients shrink near the optimum: s falls, the max bites
    kw = dict(lr=0.05, betas=(0.8, 0.9), eps=1e-6)
    p = torch.tensor(m0, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([p], amsgrad=True, foreach=False, **kw)
    state = plain = mod.init(m=m0)
    for _ in range(30):
        p.grad = torch.tensor(grad(p.detach().numpy().copy()))
        opt.step()
        state = mod.step(state, oracles={"grad": grad}, amsgrad=True, **kw)
        plain = mod.step(plain, oracles={"grad": grad}, amsgrad=False, **kw)
        # torch divides √max by √(1 − β₂^t) instead of dividing the max first: a few roundings apart
        np.testing.assert_allclose(state["m"], p.detach().numpy(), rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(state["s_max"], opt.state[p]["max_exp_avg_sq"].numpy(), rtol=RTOL, atol=0)
    assert np.any(state["s_max"] > state["s"] * 1.5)      # AMSGrad really differed from Adam here
    assert np.abs(state["m"] - plain["m"]).max() > 1e-3


def test_the_recorded_step_is_a_convention():
    text = yaml.safe_dump({"name": "rm", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": {"lr": 0.1}, "approximations": ["delta", {"running_max": {"param": "s"}}]})
    d = api.derive(text)
    (st,) = d.steps_for("running_max")
    assert st.equation == "AMSGrad convention"
    _, rhs = st.equations[0][:2]
    for s_max, s_new in ((2.0, 3.5), (4.0, 1.5)):          # the recorded s_max ← max(s_max, s_{t+1}) at numbers
        vals = {x: {"s_max": s_max, "s_new": s_new}[x.name] for x in rhs.free_symbols}
        assert float(rhs.subs(vals)) == max(s_max, s_new)
