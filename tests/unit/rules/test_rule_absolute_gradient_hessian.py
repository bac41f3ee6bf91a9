"""absolute_gradient_hessian (Adamax's convention, not a BLR step): the Hessian of Eq. 37 is replaced by
scale·|ĝ| + eps, where Eq. 38 would use ĝ∘ĝ.

Checked numerically:

* online Newton (Eq. 37) with the rule: s ← (1 − ρ)s + ρ(c|g| + ε), m ← m − ρg/s_{t+1} (the hand formula);
* the step WITH the rule equals the step WITHOUT it (online Newton with a Hessian oracle) on the Hessian oracle
  H(θ) = c|∇ℓ(θ)| + ε, bit for bit;
* after coupled weight decay the rule acts on the decayed gradient, |g + δm| (the gradient view, as Adamax);
* a Hessian that is already an average over samples (Monte Carlo) is a located error; the step is a convention.
"""
import functools

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError
from blr_derive.rules.base import RULES

# The same operations in the same order on both sides (the rule substitutes c|g| + ε where the oracle's value
# stood): equal bit for bit; the hand formula groups a few products differently, hence 1e-12 relative there.
RTOL = 1e-12


def recipe(approx, hp, family="gaussian_diag"):
    return yaml.safe_dump({"name": "abs_hess_test", "family": family, "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def online_newton(rule=True, decay=False):
    approx = ["delta"] + ([{"weight_decay": {"coefficient": "delta"}}] if decay else [])
    hp = {"lr": 0.1, **({"delta": 0.1} if decay else {})}
    if rule:
        approx.append({"absolute_gradient_hessian": {"eps": "e", "scale": "c"}})
        hp.update(e=0.01, c=1.0)
    return api.derive(recipe(approx, hp)).compile("numpy")


def problem(seed=0, n=7):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)        # changes sign along the trajectory
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), grad


def test_hand_formula():
    mod = online_newton()
    m0, s0, grad = problem(1)
    lr, e, c = 0.3, 0.05, 1.5
    state, m, s = mod.init(m=m0, s=s0), m0.copy(), s0.copy()
    for _ in range(10):
        state = mod.step(state, oracles={"grad": grad}, lr=lr, e=e, c=c)
        g = grad(m)
        s = (1 - lr) * s + lr * (c * np.abs(g) + e)
        m = m - lr * g / s
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)


def test_with_the_rule_is_without_it_on_the_absolute_gradient_oracle():
    with_, without = online_newton(), online_newton(rule=False)
    m0, s0, grad = problem(2)
    e, c = 0.02, 0.8
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    signs = set()
    for _ in range(12):
        signs |= set(np.sign(grad(a["m"])).tolist())
        a = with_.step(a, oracles={"grad": grad}, lr=0.25, e=e, c=c)
        b = without.step(b, oracles={"grad": grad, "hess": lambda x: c * np.abs(grad(x)) + e}, lr=0.25)
        for k in ("m", "s"):
            np.testing.assert_array_equal(a[k], b[k])
    assert signs == {-1.0, 1.0}                            # the absolute value really acted


def test_after_weight_decay_the_rule_sees_the_decayed_gradient():
    mod = online_newton(decay=True)
    m0, s0, grad = problem(3)
    lr, delta, e = 0.2, 0.3, 0.01
    state, m, s = mod.init(m=m0, s=s0), m0.copy(), s0.copy()
    for _ in range(8):
        state = mod.step(state, oracles={"grad": grad}, lr=lr, delta=delta, e=e, c=1.0)
        g = grad(m) + delta * m
        s = (1 - lr) * s + lr * (np.abs(g) + e)           # the prior's δ on the Hessian is replaced too
        m = m - lr * g / s
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)


def test_a_sampled_hessian_is_a_located_error():
    text = recipe([{"monte_carlo": {"samples": 1}}, "absolute_gradient_hessian"], {"lr": 0.1})
    with pytest.raises(SpecError, match="absolute_gradient_hessian.*average over samples") as exc:
        api.derive(text)
    assert exc.value.line is not None
    with pytest.raises(SpecError, match="no Hessian"):
        api.derive(recipe(["delta", "absolute_gradient_hessian"], {"lr": 0.1}, family="gaussian_fixed_cov"))


def test_the_recorded_step_is_a_convention():
    d = api.derive(recipe(["delta", {"absolute_gradient_hessian": {"eps": "e"}}], {"lr": 0.1, "e": 0.01}))
    (st,) = d.steps_for("absolute_gradient_hessian")
    assert "convention" in st.equation
    assert RULES["absolute_gradient_hessian"].kind == "convention"
    _, rhs = st.equations[0][:2]
    vals = {x: {"g": -2.5, "e": 0.01}[x.name] for x in rhs.free_symbols}
    assert float(rhs.subs(vals)) == 2.51
