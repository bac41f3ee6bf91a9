"""hessian_damping (Levenberg–Marquardt; bSAM's γ, Moellenhoff & Khan 2023 Alg. 1): γ is added to the Hessian
estimate only.

Checked numerically (numpy target): online Newton with the rule equals online Newton on the Hessian oracle
H(θ) + γ bit for bit, and matches the hand formula s ← (1 − ρ)s + ρ(H + γ), m ← m − ρ(g + δm)/s_{t+1} with a
prior δ (the prior adds δ to both, the damping to the Hessian alone); ``when`` switches it off.
"""
import functools

import numpy as np
import yaml

from blr_derive import api

RTOL = 1e-13


def recipe(approx, hp):
    return yaml.safe_dump({"name": "damping_test", "family": "gaussian_diag", "loss": "abstract",
                           "learning_rate": "lr", "hyperparameters": hp, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def online_newton(rule=True, decay=False):
    approx = ["delta"] + ([{"weight_decay": {"coefficient": "delta"}}] if decay else [])
    hp = {"lr": 0.1, **({"delta": 0.1} if decay else {})}
    if rule:
        approx.append({"hessian_damping": {"value": "gamma", "when": "damp"}})
        hp.update(gamma=0.1, damp=True)
    return api.derive(recipe(approx, hp)).compile("numpy")


def problem(seed=0, n=6):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    return (rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), lambda x: a * (x - c) + 0.3 * np.sin(x),
            lambda x: a + 0.3 * np.cos(x))


def test_with_the_rule_is_without_it_on_the_damped_hessian_oracle():
    with_, without = online_newton(), online_newton(rule=False)
    m0, s0, grad, hess = problem(1)
    gamma = 0.25
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    for _ in range(10):
        a = with_.step(a, oracles={"grad": grad, "hess": hess}, lr=0.3, gamma=gamma)
        b = without.step(b, oracles={"grad": grad, "hess": lambda x: hess(x) + gamma}, lr=0.3)
        for k in ("m", "s"):
            np.testing.assert_array_equal(a[k], b[k])


def test_hand_formula_with_a_prior_and_the_switch():
    mod = online_newton(decay=True)
    m0, s0, grad, hess = problem(2)
    lr, delta, gamma = 0.2, 0.3, 0.5
    for damp in (True, False):
        state, m, s = mod.init(m=m0, s=s0), m0.copy(), s0.copy()
        for _ in range(8):
            state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=lr, delta=delta, gamma=gamma,
                             damp=damp)
            s = (1 - lr) * s + lr * (hess(m) + delta + (gamma if damp else 0.0))
            m = m - lr * (grad(m) + delta * m) / s
            np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
            np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-15)
