"""momentum_schedule (NAdam's convention, not a BLR step): a momentum coefficient μ_t on a schedule, kept as the
running product P_{t+1} = P_t·μ_t (P_1 = 1) that the bias corrections of ``nesterov_lookahead`` read.

Checked numerically:

* the state is the hand-written product Π_{k≤t} μ_k of Dozat's schedule μ_k = β(1 − ½·0.96^{kψ}) (torch.optim.NAdam),
  and of a constant rate (P = β^t), at every step;
* on its own the rule changes no other update: m, s and u are those of the recipe without it, bit for bit;
* read by ``nesterov_lookahead``, the schedule with a constant rate β is the look-ahead without a schedule
  (Π μ_k = β^t), and the catalog's NAdam keeps torch.optim.NAdam's ``mu_product`` (float64, 30 steps);
* a rate that does not parse (an unknown name) is a located error; the recorded step is a convention.
"""
import functools

import numpy as np
import pytest
import torch
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError

# a product of ≤ 30 factors, each computed with a few roundings on both sides: 1e-13 relative is a wide margin
RTOL = 1e-13
SCHEDULE = "beta1*(1 - 0.5*0.96**(t*psi))"


def recipe(extra, hp):
    approx = ["delta", "squared_gradient_hessian", {"separate_learning_rates": {"s": "1 - beta2"}},
              {"ema_momentum": {"rate": "beta1", "state": "u"}}] + extra
    return yaml.safe_dump({"name": "schedule_test", "family": "gaussian_diag", "loss": "abstract",
                           "learning_rate": "lr", "state_init": {"s": 1},
                           "hyperparameters": {"lr": 0.01, "beta1": 0.9, "beta2": 0.99, **hp},
                           "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def compiled(rate=SCHEDULE, lookahead=False, rule=True):
    extra = [{"momentum_schedule": {"rate": rate, "state": "P"}}] if rule else []
    if lookahead:
        extra.append({"nesterov_lookahead": {"param": "u", **({"schedule": "P"} if rule else {})}})
    return api.derive(recipe(extra, {"psi": 0.004})).compile("numpy")


def grad(x):
    return 1.3 * (x - 0.4) + 0.3 * np.sin(2 * x)


def test_the_state_is_the_product_of_the_schedule():
    mod = compiled()
    m0 = np.linspace(-1, 1, 5)
    beta1, psi = 0.85, 0.3
    state = mod.init(m=m0)
    np.testing.assert_array_equal(state["P"], 1.0)
    P = 1.0
    for t in range(1, 31):
        state = mod.step(state, oracles={"grad": grad}, beta1=beta1, psi=psi)
        P *= beta1 * (1 - 0.5 * 0.96 ** (t * psi))
        np.testing.assert_allclose(state["P"], P, rtol=RTOL, atol=0)
    assert P < 0.85 ** 30 * 0.6 ** 5             # the schedule is far from a constant rate here


def test_a_constant_rate_gives_the_powers():
    mod = compiled(rate="beta1")
    state = mod.init(m=np.ones(3))
    for t in range(1, 21):
        state = mod.step(state, oracles={"grad": grad}, beta1=0.9)
        np.testing.assert_allclose(state["P"], 0.9 ** t, rtol=RTOL, atol=0)


def test_alone_it_changes_no_other_update():
    with_, without = compiled(), compiled(rule=False)
    m0 = np.linspace(-2, 2, 6)
    a, b = with_.init(m=m0), without.init(m=m0)
    for _ in range(10):
        a = with_.step(a, oracles={"grad": grad}, psi=0.2)
        b = without.step(b, oracles={"grad": grad})
        for k in ("m", "s", "u"):
            np.testing.assert_array_equal(a[k], b[k])


def test_a_constant_schedule_is_the_lookahead_without_a_schedule():
    with_, without = compiled(rate="beta1", lookahead=True), compiled(lookahead=True, rule=False)
    m0 = np.linspace(-2, 2, 6)
    a, b = with_.init(m=m0), without.init(m=m0)
    for _ in range(12):
        a = with_.step(a, oracles={"grad": grad}, beta1=0.8)
        b = without.step(b, oracles={"grad": grad}, beta1=0.8)
        np.testing.assert_allclose(a["m"], b["m"], rtol=RTOL, atol=1e-15)
    scheduled = compiled(lookahead=True)
    c = scheduled.init(m=m0)
    for _ in range(12):
        c = scheduled.step(c, oracles={"grad": grad}, beta1=0.8, psi=0.5)
    assert np.abs(c["m"] - a["m"]).max() > 1e-4            # the schedule matters


def test_catalog_nadam_keeps_torchs_mu_product():
    mod = api.derive("nadam").compile("numpy")
    x0 = np.linspace(-1.0, 1.5, 5)
    kw = dict(lr=0.01, betas=(0.8, 0.99), momentum_decay=0.05)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)          # torch keeps mu_product in the default dtype
    try:
        p = torch.nn.Parameter(torch.tensor(x0))
        opt = torch.optim.NAdam([p], foreach=False, **kw)
        state = mod.init(m=x0)
        for _ in range(30):
            p.grad = torch.tensor(grad(p.detach().numpy()))
            opt.step()
            state = mod.step(state, oracles={"grad": grad}, **kw)
            np.testing.assert_allclose(state["mu_product"], float(opt.state[p]["mu_product"]), rtol=RTOL, atol=0)
            np.testing.assert_allclose(state["m"], p.detach().numpy(), rtol=1e-12, atol=1e-14)
    finally:
        torch.set_default_dtype(old)


def test_errors_and_the_recorded_convention():
    with pytest.raises(SpecError, match="unknown symbol 'gamma'") as exc:
        api.derive(recipe([{"momentum_schedule": {"rate": "gamma*t"}}], {}))
    assert exc.value.line is not None
    d = api.derive(recipe([{"momentum_schedule": {"rate": "beta1/t"}}], {}))
    (st,) = d.steps_for("momentum_schedule")
    assert "convention" in st.equation
    (mu, rate), (_, prod) = st.equations[0][:2], st.equations[1][:2]
    vals = {x: {"beta1": 0.9, "t": 3}[x.name] for x in rate.free_symbols}
    assert float(rate.subs(vals)) == pytest.approx(0.3, rel=1e-15)
    assert prod.has(mu)
