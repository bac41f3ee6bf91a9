"""decoupled_weight_decay (AdamW's convention, not a BLR step): m ← m − ρδm added to the mean update, outside the
preconditioner.

The coupled prior δ‖θ‖²/2 (Eqs. 1, 34; the ``weight_decay`` rule) adds δm to the gradient and δ to the Hessian,
so under a preconditioner its shrinkage is divided by the scale; Loshchilov & Hutter's AdamW applies the
prior's pull on the mean directly.  Checked numerically:

* the generated step equals the hand formula m_{t+1} = m − ρ g/s_{t+1} − ρδm (online Newton, Eq. 37);
* the step WITH the rule equals the step WITHOUT it followed by the shrink −ρδm_t, and the scale is untouched;
* over N(m, I) (SGD, Sec. 1.3.1: no preconditioner) decoupled and coupled weight decay coincide:
  m − ρ(g + δm); under a preconditioner they differ;
* the catalog's AdamW equals torch.optim.AdamW in float64, step for step;
* δ = 0 is the update without the rule, bit for bit.
"""
import functools

import numpy as np
import pytest
import torch
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError

# Deterministic identities in float64 (the same sums and products grouped differently, a few roundings of ~1e-16):
# 1e-12 relative is a wide margin over ≤ 30 steps, while a missing or doubled shrink is an O(ρδ) change.
RTOL = 1e-12


@functools.lru_cache(maxsize=None)
def compiled(family="gaussian_diag", rule="decoupled_weight_decay"):
    approx = ["delta"] + ([{rule: {"coefficient": "wd"}}] if rule else [])
    hp = {"lr": 0.1, **({"wd": 0.1} if rule else {})}
    text = yaml.safe_dump({"name": "dwd_test", "family": family, "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)
    return api.derive(text).compile("numpy")


@functools.lru_cache(maxsize=None)
def adamw():
    return api.derive("adamw").compile("numpy")


def problem(seed=0, n=6):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)
    hess = lambda x: a + 0.3 * np.cos(x)
    return 2.0 * rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), grad, hess


def test_hand_formula_online_newton():
    mod = compiled()
    m0, s0, grad, hess = problem(1)
    lr, wd = 0.2, 0.3
    state, m, s = mod.init(m=m0, s=s0), m0.copy(), s0.copy()
    for _ in range(8):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=lr, wd=wd)
        s = (1 - lr) * s + lr * hess(m)
        m = m - lr * grad(m) / s - lr * wd * m
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)


def test_with_the_rule_is_the_step_without_it_then_the_shrink():
    with_, without = compiled(), compiled(rule=None)
    m0, s0, grad, hess = problem(2)
    lr, wd = 0.2, 0.3
    oracles = {"grad": grad, "hess": hess}
    a = with_.init(m=m0, s=s0)
    for _ in range(8):
        b = without.step(without.init(m=a["m"], s=a["s"]), oracles=oracles, lr=lr)
        m_t = a["m"]
        a = with_.step(a, oracles=oracles, lr=lr, wd=wd)
        np.testing.assert_allclose(a["m"], b["m"] - lr * wd * m_t, rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(a["s"], b["s"], rtol=0, atol=0)       # the scale never sees δ


def test_without_a_preconditioner_decoupled_equals_coupled_weight_decay():
    dec, coup = compiled("gaussian_fixed_cov"), compiled("gaussian_fixed_cov", rule="weight_decay")
    m0, s0, grad, hess = problem(3)
    lr, wd = 0.1, 0.4
    a, b, m = dec.init(m=m0), coup.init(m=m0), m0.copy()
    for _ in range(10):
        a = dec.step(a, oracles={"grad": grad}, lr=lr, wd=wd)
        b = coup.step(b, oracles={"grad": grad}, lr=lr, wd=wd)
        m = m - lr * (grad(m) + wd * m)
        np.testing.assert_allclose(a["m"], m, rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(a["m"], b["m"], rtol=RTOL, atol=1e-14)
    # under the online-Newton preconditioner the two priors give different steps
    dn, cn = compiled(), compiled(rule="weight_decay")
    o = {"grad": grad, "hess": hess}
    x = dn.step(dn.init(m=m0, s=s0), oracles=o, lr=0.2, wd=wd)
    y = cn.step(cn.init(m=m0, s=s0), oracles=o, lr=0.2, wd=wd)
    assert np.abs(x["m"] - y["m"]).max() > 1e-2


def test_a_zero_coefficient_is_the_update_without_the_rule():
    with_, without = compiled(), compiled(rule=None)
    m0, s0, grad, hess = problem(4)
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    for _ in range(5):
        a = with_.step(a, oracles={"grad": grad, "hess": hess}, lr=0.2, wd=0.0)
        b = without.step(b, oracles={"grad": grad, "hess": hess}, lr=0.2)
        for k in ("m", "s"):
            np.testing.assert_array_equal(a[k], b[k])      # adding ρ·0·m = ±0.0 is exact


def test_catalog_adamw_equals_torch_optim_adamw_in_float64():
    mod = adamw()
    m0, _, grad, _ = problem(5)
    kw = dict(lr=0.02, betas=(0.85, 0.99), eps=1e-6, weight_decay=0.5)
    p = torch.tensor(m0, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.AdamW([p], foreach=False, **kw)
    state = plain = mod.init(m=m0)
    for _ in range(30):
        p.grad = torch.tensor(grad(p.detach().numpy().copy()))
        opt.step()
        state = mod.step(state, oracles={"grad": grad}, **kw)
        plain = mod.step(plain, oracles={"grad": grad}, **{**kw, "weight_decay": 0.0})
        # torch shrinks p by (1 − ρδ) first, then steps: the same terms summed in another order
        np.testing.assert_allclose(state["m"], p.detach().numpy(), rtol=RTOL, atol=1e-14)
    assert np.abs(state["m"] - plain["m"]).max() > 1e-2


def test_the_recorded_step_adds_the_shrink_to_the_mean_update():
    d = api.derive(yaml.safe_dump({"name": "d", "family": "gaussian_fixed_cov", "loss": "abstract",
                                   "learning_rate": "lr", "hyperparameters": {"lr": 0.1, "wd": 0.1},
                                   "approximations": ["delta", {"decoupled_weight_decay": {"coefficient": "wd"}}]}))
    (st,) = d.steps_for("decoupled_weight_decay")
    assert st.equation == "AdamW convention"
    _, rhs = st.equations[0][:2]
    vals = {"lr": 0.5, "wd": 0.25, "m": 2.0, "g": 1.0}
    got = float(rhs.subs({x: vals[x.name] for x in rhs.free_symbols}))
    assert got == 2.0 - 0.5 * 1.0 - 0.5 * 0.25 * 2.0          # m − ρg − ρδm, exact in binary


def test_multiplicative_form_shrinks_after_the_step():
    """form: multiplicative is m ← (m − ρg/s)(1 − ρδ) (pytorch-optimizer's order: the step, then p·(1 − lr·wd)),
    which differs from the additive form by ρδ·(ρ g/s)."""
    hp = {"rho": {"default": 0.3}, "wd": {"default": 0.2}}
    spec = {"name": "dwd_mult", "family": "gaussian_diag", "loss": "abstract", "hyperparameters": hp,
            "approximations": ["delta", {"decoupled_weight_decay": {"coefficient": "wd", "form": "multiplicative"}}]}
    mod = api.derive(yaml.safe_dump(spec)).compile("numpy")
    rng = np.random.default_rng(7)
    m, s = rng.normal(size=4), rng.uniform(0.5, 2, size=4)
    g, h = rng.normal(size=4), rng.uniform(0.5, 2, size=4)
    out = mod.step(mod.init(m=m, s=s), oracles={"grad": lambda x: g, "hess": lambda x: h})
    s_new = 0.7 * s + 0.3 * h
    np.testing.assert_allclose(out["m"], (m - 0.3 * g / s_new) * (1 - 0.3 * 0.2), rtol=RTOL)
    np.testing.assert_allclose(out["s"], s_new, rtol=RTOL)
    spec["approximations"][1]["decoupled_weight_decay"]["form"] = "after"
    with pytest.raises(SpecError, match="form must be additive or multiplicative"):
        api.derive(yaml.safe_dump(spec))
