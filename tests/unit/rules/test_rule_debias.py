"""debias (Adam's convention, not a BLR step): an average x started at zero is used as x / (1 − rate^t).

The BLR over the mean-field Gaussian with the delta method, the squared-gradient Hessian, a separate rate for the
scale and EMA momentum is Adam without its bias corrections (Sec. 4.2, Eqs. 36-38; App. F, Eq. 77); ``debias``
adds Kingma & Ba's correction.  Checked numerically:

* the generated step equals the hand-written formula û = u_t/(1 − β₁^t) (and ŝ = s_t/(1 − β₂^t)) at every t;
* the step WITH the rule equals the step WITHOUT it on transformed inputs: for the momentum the learning rate
  ρ/(1 − β₁^t), for the scale ρ(1 − β₂^t), and for Adam with ε the form of Kingma & Ba (2015, Sec. 2):
  ρ_t = ρ√(1 − β₂^t)/(1 − β₁^t), ε_t = ε√(1 − β₂^t);
* the catalog's Adam (both corrections) equals torch.optim.Adam in float64, step for step;
* rate = 0 (1 − 0^t = 1) and ``when`` false are exactly the update without the rule.
"""
import functools

import numpy as np
import pytest
import torch
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError
from conftest import CATALOG

# Deterministic identities in float64: both sides evaluate the same closed forms with a few roundings grouped
# differently (e.g. lr·(u/c) against (lr/c)·u), ~1e-16 relative per operation; over ≤ 20 steps of a contracting
# iteration 1e-12 relative is a wide margin, while a missing correction changes the step by O(1) relative.
RTOL = 1e-12


def recipe(approx, hp, state_init=None, name="debias_test"):
    d = {"name": name, "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr", "hyperparameters": hp}
    if state_init is not None:
        d["state_init"] = state_init
    d["approximations"] = approx
    return yaml.safe_dump(d, sort_keys=False)


@functools.lru_cache(maxsize=None)
def momentum_module(with_rule=True):
    """Online Newton (Eq. 37) with its own rate r for the scale (Eq. 36), EMA momentum u (Eq. 77) and, with the
    rule, û = u/(1 − κ^t) when ``flag``."""
    approx = ["delta", {"separate_learning_rates": {"s": "r"}}, {"ema_momentum": {"rate": "beta1", "state": "u"}}]
    if with_rule:
        approx.append({"debias": {"param": "u", "rate": "kappa", "when": "flag"}})
    hp = {"lr": 0.1, "r": 0.3, "beta1": 0.9}
    if with_rule:
        hp.update(kappa=0.9, flag=True)
    return api.derive(recipe(approx, hp)).compile("numpy")


@functools.lru_cache(maxsize=None)
def scale_module(with_rule=True):
    """RMSprop-like scale s ← β₂s + (1 − β₂)g² from s = 0, the step ρg/ŝ (no square root), ŝ = s/(1 − β₂^t)."""
    approx = ["delta", "squared_gradient_hessian", {"separate_learning_rates": {"s": "1 - beta2"}}]
    if with_rule:
        approx.append({"debias": {"param": "s", "rate": "beta2"}})
    return api.derive(recipe(approx, {"lr": 0.1, "beta2": 0.9}, state_init={"s": 0})).compile("numpy")


@functools.lru_cache(maxsize=None)
def adam_module(with_rule=True):
    """The catalog's Adam recipe, with or without its two ``debias`` entries."""
    spec = yaml.safe_load((CATALOG / "adam.yaml").read_text(encoding="utf-8"))
    if not with_rule:
        spec["approximations"] = [a for a in spec["approximations"] if not (isinstance(a, dict) and "debias" in a)]
        spec["name"] = "adam_no_debias"
    return api.derive(yaml.safe_dump(spec, sort_keys=False)).compile("numpy")


def problem(seed=0, n=7):
    """A separable non-quadratic loss ℓ(θ) = Σ a(θ − c)²/2 − 0.3 cos θ with its gradient and elementwise Hessian."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)
    hess = lambda x: a + 0.3 * np.cos(x)
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), grad, hess


def test_hand_formula_of_the_momentum_correction():
    mod = momentum_module()
    m0, s0, grad, hess = problem(1)
    lr, r, b1, kappa = 0.2, 0.3, 0.85, 0.7           # a rate for the correction other than β₁: the rule uses its own
    state = mod.init(m=m0, s=s0)
    m, s, u = m0.copy(), s0.copy(), np.zeros_like(m0)
    for t in range(1, 9):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=lr, r=r, beta1=b1, kappa=kappa, flag=True)
        g, H = grad(m), hess(m)
        u = b1 * u + (1 - b1) * g
        s = (1 - r) * s + r * H
        m = m - lr * (u / (1 - kappa ** t)) / s
        assert int(state["step"]) == t
        for k, ref in (("m", m), ("s", s), ("u", u)):
            np.testing.assert_allclose(state[k], ref, rtol=RTOL, atol=0)


def test_momentum_correction_is_a_learning_rate_of_rho_over_one_minus_beta_to_the_t():
    """û = u/(1 − β₁^t) enters the mean step linearly: the step with the rule is the step without it at
    learning rate ρ/(1 − β₁^t) for the mean (the scale has its own rate r, untouched)."""
    with_, without = momentum_module(), momentum_module(with_rule=False)
    m0, s0, grad, hess = problem(2)
    lr, r, b1 = 0.2, 0.3, 0.9
    oracles = {"grad": grad, "hess": hess}
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    plain = without.init(m=m0, s=s0)
    for t in range(1, 11):
        a = with_.step(a, oracles=oracles, lr=lr, r=r, beta1=b1, kappa=b1, flag=True)
        b = without.step(b, oracles=oracles, lr=lr / (1 - b1 ** t), r=r, beta1=b1)
        plain = without.step(plain, oracles=oracles, lr=lr, r=r, beta1=b1)
        for k in ("m", "s", "u"):
            np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=1e-14)
    assert np.abs(a["m"] - plain["m"]).max() > 1e-2          # the correction really changed the trajectory


def test_scale_correction_is_a_learning_rate_of_rho_times_one_minus_beta_to_the_t():
    """ŝ = s/(1 − β₂^t) divides the step, and s has its own rate 1 − β₂: the step with the rule is the step without
    it at learning rate ρ(1 − β₂^t); also the hand formula m ← m − ρ g (1 − β₂^t)/s_t."""
    with_, without = scale_module(), scale_module(with_rule=False)
    m0, _, grad, _ = problem(3)
    lr, b2 = 0.05, 0.8
    a, b = with_.init(m=m0), without.init(m=m0)
    m, s = m0.copy(), np.zeros_like(m0)
    for t in range(1, 11):
        a = with_.step(a, oracles={"grad": grad}, lr=lr, beta2=b2)
        b = without.step(b, oracles={"grad": grad}, lr=lr * (1 - b2 ** t), beta2=b2)
        g = grad(m)
        s = b2 * s + (1 - b2) * g ** 2
        m = m - lr * g / (s / (1 - b2 ** t))
        for k in ("m", "s"):
            np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(a["m"], m, rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(a["s"], s, rtol=RTOL, atol=0)


def test_adam_with_debias_is_adam_without_it_in_kingma_and_ba_form():
    """Kingma & Ba (2015), Sec. 2: m ← m − ρ_t u/(√s + ε_t) with ρ_t = ρ√(1 − β₂^t)/(1 − β₁^t), ε_t = ε√(1 − β₂^t)
    is exactly (up to rounding) Adam with both corrections."""
    with_, without = adam_module(), adam_module(with_rule=False)
    m0, _, grad, _ = problem(4)
    lr, (b1, b2), eps = 0.01, (0.8, 0.95), 1e-3          # an ε large enough that its rescaling matters
    a, b = with_.init(m=m0), without.init(m=m0)
    for t in range(1, 16):
        c2 = np.sqrt(1 - b2 ** t)
        a = with_.step(a, oracles={"grad": grad}, lr=lr, betas=(b1, b2), eps=eps)
        b = without.step(b, oracles={"grad": grad}, lr=lr * c2 / (1 - b1 ** t), betas=(b1, b2), eps=eps * c2)
        for k in ("m", "s", "u"):
            np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=1e-15)


def run_torch(cls, m0, grad, steps, **kw):
    p = torch.tensor(m0, dtype=torch.float64, requires_grad=True)
    opt = cls([p], foreach=False, **kw)
    out = []
    for _ in range(steps):
        p.grad = torch.tensor(grad(p.detach().numpy().copy()), dtype=torch.float64)
        opt.step()
        out.append(p.detach().numpy().copy())
    return out


def test_catalog_adam_equals_torch_optim_adam_in_float64():
    mod = adam_module()
    m0, _, grad, _ = problem(5)
    kw = dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6)
    ref = run_torch(torch.optim.Adam, m0, grad, 20, **kw)
    state = mod.init(m=m0)
    for t in range(20):
        state = mod.step(state, oracles={"grad": grad}, **kw)
        # torch computes (u/c1)/(√s/√c2 + ε) in another order: a few roundings apart
        np.testing.assert_allclose(state["m"], ref[t], rtol=RTOL, atol=1e-14)
    assert np.abs(state["m"] - m0).max() > 0.1


def test_a_zero_rate_and_a_false_condition_are_the_update_without_the_rule():
    with_, without = momentum_module(), momentum_module(with_rule=False)
    m0, s0, grad, hess = problem(6)
    oracles = {"grad": grad, "hess": hess}
    a0 = a1 = with_.init(m=m0, s=s0)
    b = without.init(m=m0, s=s0)
    for _ in range(6):
        a0 = with_.step(a0, oracles=oracles, lr=0.2, beta1=0.9, kappa=0.0, flag=True)    # 1 − 0^t = 1 exactly
        a1 = with_.step(a1, oracles=oracles, lr=0.2, beta1=0.9, kappa=0.9, flag=False)
        b = without.step(b, oracles=oracles, lr=0.2, beta1=0.9)
        for k in ("m", "s", "u"):
            # x/1.0 and the 'else' branch are exact: no rounding at all
            np.testing.assert_array_equal(a0[k], b[k])
            np.testing.assert_array_equal(a1[k], b[k])


def test_the_recorded_step_is_the_correction_and_a_convention():
    d = api.derive(recipe(["delta", {"ema_momentum": {"rate": "beta1", "state": "u"}},
                           {"debias": {"param": "u", "rate": "beta1"}}], {"lr": 0.1, "beta1": 0.9}))
    (st,) = d.steps_for("debias")
    assert st.equation == "Adam convention"
    _, rhs = st.equations[0][:2]
    # the recorded û = u_{t+1}/(1 − β₁^t), evaluated at u_{t+1} = 2, β₁ = 0.9, t = 3
    vals = {x: {"beta1": 0.9, "t": 3, "u_new": 2.0}[x.name] for x in rhs.free_symbols}
    np.testing.assert_allclose(float(rhs.subs(vals)), 2.0 / (1 - 0.9 ** 3), rtol=1e-15)


def test_power_one_half_is_adams_efficient_step_size():
    """debias with power 1/2 on √s + ε (after square_root_scaling): the step ρ û/((√s + ε)/√(1 − β₂ᵗ)) =
    ρ√(1 − β₂ᵗ)/(1 − β₁ᵗ) · u/(√s + ε), Kingma & Ba (2015) Sec. 2's last paragraph, against the hand formula."""
    hp = {"lr": {"default": 0.1}, "b1": {"default": 0.8}, "b2": {"default": 0.9}, "eps": {"default": 1e-3}}
    approx = ["delta", "squared_gradient_hessian", {"separate_learning_rates": {"s": "1 - b2"}},
              {"ema_momentum": {"rate": "b1", "state": "u"}}, {"debias": {"param": "u", "rate": "b1"}},
              {"square_root_scaling": {"param": "s", "eps": "eps"}},
              {"debias": {"param": "s", "rate": "b2", "power": "1/2"}}]
    mod = api.derive(recipe(approx, hp, {"s": 0})).compile("numpy")
    rng = np.random.default_rng(3)
    m = rng.normal(size=5)
    grad = lambda x: np.sin(3 * x) + x                      # noqa: E731
    st = mod.init(m=m)
    u, s = np.zeros(5), np.zeros(5)
    for t in range(1, 8):
        g = grad(m)
        st = mod.step(st, oracles={"grad": grad})
        u, s = 0.8 * u + 0.2 * g, 0.9 * s + 0.1 * g**2
        m = m - 0.1 * np.sqrt(1 - 0.9**t) / (1 - 0.8**t) * u / (np.sqrt(s) + 1e-3)
        np.testing.assert_allclose(st["m"], m, rtol=RTOL)


def test_power_must_be_positive():
    approx = ["delta", {"ema_momentum": {"rate": "0.5", "state": "u"}},
              {"debias": {"param": "u", "rate": "0.5", "power": "-1"}}]
    with pytest.raises(SpecError, match="power must be positive"):
        api.derive(recipe(approx, {"lr": {"default": 0.1}}))
