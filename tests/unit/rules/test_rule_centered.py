"""centered (centered RMSprop's convention, not a BLR step): precondition with s − ḡ², an estimate of the gradient's
variance, instead of its second moment s.

The BLR over the mean-field Gaussian with the delta method, the squared-gradient Hessian and a separate rate for
the scale is RMSprop (Sec. 4.2, Eqs. 36-38); ``centered`` adds a state ḡ (initialised to 0),
ḡ ← αḡ + (1 − α)g, and uses s_{t+1} − ḡ_{t+1}² in place of s_{t+1} (Graves 2013; torch.optim.RMSprop(centered=True)).
Checked numerically:

* the generated step equals the hand-written centered-RMSprop recursion;
* the step WITH the rule equals the step WITHOUT it on a transformed state: from s' = s − ḡ_{t+1}²/α the no-rule
  scale update gives αs' + (1 − α)g² = s_{t+1} − ḡ_{t+1}², hence the same mean;
* the catalog's RMSprop with ``centered`` equals torch.optim.RMSprop(centered=True) in float64;
* ``when`` false is the update without the rule, bit for bit, and leaves ḡ untouched.
"""
import functools

import numpy as np
import torch
import yaml

from blr_derive import api

# Deterministic identities in float64 (the same closed forms, a few roundings grouped differently): 1e-12 relative
# is a wide margin over ≤ 30 steps, while dropping the centering changes the step by O(1) relative here.
RTOL = 1e-12


@functools.lru_cache(maxsize=None)
def rmsprop_no_root(with_rule=True):
    """m ← m − ρ g/s_c with s ← αs + (1 − α)g² and s_c = s − ḡ² (with the rule, when ``flag``)."""
    approx = ["delta", "squared_gradient_hessian", {"separate_learning_rates": {"s": "1 - alpha"}}]
    hp = {"lr": 0.1, "alpha": 0.9}
    if with_rule:
        approx.append({"centered": {"param": "s", "rate": "alpha", "when": "flag"}})
        hp["flag"] = True
    text = yaml.safe_dump({"name": "centered_test", "family": "gaussian_diag", "loss": "abstract",
                           "learning_rate": "lr", "hyperparameters": hp, "approximations": approx}, sort_keys=False)
    return api.derive(text).compile("numpy")


@functools.lru_cache(maxsize=None)
def rmsprop():
    return api.derive("rmsprop").compile("numpy")


def problem(seed=0, n=6):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x) + 0.5        # a nonzero mean gradient: centering matters
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), grad


def test_hand_formula_centered_rmsprop():
    mod = rmsprop_no_root()
    m0, s0, grad = problem(1)
    lr, alpha = 0.05, 0.8
    state = mod.init(m=m0, s=s0)
    np.testing.assert_array_equal(state["grad_avg"], 0.0)
    m, v, gbar = m0.copy(), s0.copy(), np.zeros_like(m0)
    for _ in range(10):
        state = mod.step(state, oracles={"grad": grad}, lr=lr, alpha=alpha, flag=True)
        g = grad(m)
        v = alpha * v + (1 - alpha) * g ** 2
        gbar = alpha * gbar + (1 - alpha) * g
        m = m - lr * g / (v - gbar ** 2)
        np.testing.assert_allclose(state["s"], v, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["grad_avg"], gbar, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)


def test_with_the_rule_equals_without_it_from_a_shifted_scale():
    with_, without = rmsprop_no_root(), rmsprop_no_root(with_rule=False)
    m0, s0, grad = problem(2)
    rng = np.random.default_rng(5)
    lr, alpha = 0.05, 0.7
    gbar0 = 0.3 * rng.normal(size=m0.shape)
    gbar1 = alpha * gbar0 + (1 - alpha) * grad(m0)
    a = with_.step(with_.init(m=m0, s=s0, grad_avg=gbar0), oracles={"grad": grad}, lr=lr, alpha=alpha, flag=True)
    b = without.step(without.init(m=m0, s=s0 - gbar1 ** 2 / alpha), oracles={"grad": grad}, lr=lr, alpha=alpha)
    plain = without.step(without.init(m=m0, s=s0), oracles={"grad": grad}, lr=lr, alpha=alpha)
    np.testing.assert_allclose(a["grad_avg"], gbar1, rtol=RTOL, atol=0)
    np.testing.assert_allclose(a["s"] - a["grad_avg"] ** 2, b["s"], rtol=RTOL, atol=0)
    np.testing.assert_allclose(a["m"], b["m"], rtol=RTOL, atol=0)
    np.testing.assert_allclose(a["s"], plain["s"], rtol=RTOL, atol=0)     # the stored s stays the second moment
    assert np.abs(a["m"] - plain["m"]).max() > 1e-3


def test_a_false_condition_is_the_update_without_the_rule():
    with_, without = rmsprop_no_root(), rmsprop_no_root(with_rule=False)
    m0, s0, grad = problem(3)
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    for _ in range(6):
        a = with_.step(a, oracles={"grad": grad}, lr=0.05, alpha=0.9, flag=False)
        b = without.step(b, oracles={"grad": grad}, lr=0.05, alpha=0.9)
        for k in ("m", "s"):
            np.testing.assert_array_equal(a[k], b[k])           # the 'else' branch: the same operations exactly
    np.testing.assert_array_equal(a["grad_avg"], 0.0)


def test_catalog_rmsprop_centered_equals_torch_optim_in_float64():
    mod = rmsprop()
    m0, _, grad = problem(4)
    kw = dict(lr=0.01, alpha=0.9, eps=1e-6)
    p = torch.tensor(m0, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.RMSprop([p], centered=True, foreach=False, **kw)
    state = plain = mod.init(m=m0)
    for _ in range(30):
        p.grad = torch.tensor(grad(p.detach().numpy().copy()))
        opt.step()
        state = mod.step(state, oracles={"grad": grad}, centered=True, **kw)
        plain = mod.step(plain, oracles={"grad": grad}, centered=False, **kw)
        np.testing.assert_allclose(state["m"], p.detach().numpy(), rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(state["grad_avg"], opt.state[p]["grad_avg"].numpy(), rtol=RTOL, atol=1e-15)
    assert np.abs(state["m"] - plain["m"]).max() > 1e-2          # centering really changed the trajectory


def test_the_recorded_step_subtracts_the_squared_mean():
    text = yaml.safe_dump({"name": "c", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": {"lr": 0.1, "alpha": 0.9},
                           "approximations": ["delta", {"centered": {"param": "s", "rate": "alpha"}}]})
    d = api.derive(text)
    (st,) = d.steps_for("centered")
    assert st.equation == "centered RMSprop convention"
    _, rhs = st.equations[0][:2]
    vals = {x: {"s_new": 3.0, "grad_avg_new": 1.5}[x.name] for x in rhs.free_symbols}
    assert float(rhs.subs(vals)) == 3.0 - 1.5 ** 2
