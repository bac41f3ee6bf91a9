"""weight_decay (Eqs. 1, 34): the Gaussian prior R(θ) = δ‖θ‖²/2 adds δm to the gradient and δ to the Hessian.

Checked numerically: the derived step WITH the rule on the oracles (g, H) equals the step WITHOUT it on the oracles
(g + δm, H + δ), under the delta method and under Monte Carlo (where the prior's expected gradient E_q[δθ] is exactly
δm and its Hessian exactly δ); a zero coefficient is the plain update; without a Hessian (N(m, I), SGD) only the
gradient changes.
"""
import functools

import numpy as np
import yaml

from blr_derive import api

# The two programs compute the same sums and products, only grouped differently (e.g. (g + δm)·ρ/s against the
# codegen's own ordering), so they agree up to a few roundings of ~1e-16 relative: 1e-12 is a wide margin that a
# missing δ (an O(0.1) change here) can never pass.
RTOL = 1e-12

WD = 0.3


@functools.lru_cache(maxsize=None)
def compiled(family="gaussian_diag", expectation="delta", with_rule=True):
    approx = [expectation] + ([{"weight_decay": {"coefficient": "wd"}}] if with_rule else [])
    hp = {"lr": 0.2, "wd": WD}
    if expectation != "delta":
        approx[0] = {"monte_carlo": {"samples": "S"}}
        hp["S"] = {"default": 3, "type": "int"}
    text = yaml.safe_dump({"name": "wd_test", "family": family, "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)
    return api.derive(text).compile("numpy")


def problem(seed=0, n=6):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)
    hess = lambda x: a + 0.3 * np.cos(x)
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), grad, hess


def test_the_rule_adds_delta_m_to_the_gradient_and_delta_to_the_hessian():
    with_, without = compiled(), compiled(with_rule=False)
    m0, s0, grad, hess = problem()
    a = with_.init(m=m0, s=s0)
    b = without.init(m=m0, s=s0)
    plain = without.init(m=m0, s=s0)
    for _ in range(5):
        a = with_.step(a, oracles={"grad": grad, "hess": hess}, lr=0.2, wd=WD)
        # delta method: the oracles are evaluated at the mean, so x here is m_t
        b = without.step(b, oracles={"grad": lambda x: grad(x) + WD * x, "hess": lambda x: hess(x) + WD},
                         lr=0.2)
        plain = without.step(plain, oracles={"grad": grad, "hess": hess}, lr=0.2)
        for k in ("m", "s"):
            np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=0)
    assert np.abs(a["m"] - plain["m"]).max() > 1e-2          # the prior really changed the trajectory


def test_hand_formula_one_step():
    mod = compiled()
    m0, s0, grad, hess = problem(1)
    new = mod.step(mod.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, lr=0.2, wd=WD)
    s1 = 0.8 * s0 + 0.2 * (hess(m0) + WD)
    m1 = m0 - 0.2 * (grad(m0) + WD * m0) / s1
    np.testing.assert_allclose(new["s"], s1, rtol=RTOL, atol=0)
    np.testing.assert_allclose(new["m"], m1, rtol=RTOL, atol=0)


def test_a_zero_coefficient_is_the_plain_update_bit_for_bit():
    with_, without = compiled(), compiled(with_rule=False)
    m0, s0, grad, hess = problem(2)
    a = with_.step(with_.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, lr=0.2, wd=0.0)
    b = without.step(without.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, lr=0.2)
    # δ = 0 takes the 'no weight decay' branch for the gradient and adds an exact 0.0 to H: no rounding at all
    np.testing.assert_array_equal(a["m"], b["m"])
    np.testing.assert_array_equal(a["s"], b["s"])


def test_fixed_covariance_gaussian_only_shifts_the_gradient():
    """N(m, I) has no Hessian in its update (SGD): m ← m − ρ(g + δm)."""
    mod = compiled(family="gaussian_fixed_cov")
    assert set(mod.ORACLES) == {"grad"}
    m0, _, grad, _ = problem(3)
    state, m = mod.init(m=m0), m0.copy()
    for _ in range(4):
        state = mod.step(state, oracles={"grad": grad}, lr=0.2, wd=WD)
        m = m - 0.2 * (grad(m) + WD * m)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-15)


def test_under_monte_carlo_the_prior_terms_are_delta_m_and_delta():
    """With gradients at samples θ_k the prior's contribution is its exact expectation: E_q[δθ] = δm, E_q[δ] = δ
    (not δθ_k).  Both runs draw the same ε from generators with the same seed."""
    with_, without = compiled(expectation="mc"), compiled(expectation="mc", with_rule=False)
    m0, s0, grad, hess = problem(4)
    a = with_.step(with_.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, rng=np.random.default_rng(9),
                   lr=0.2, wd=WD)
    b = without.step(without.init(m=m0, s=s0), oracles={"grad": lambda th: grad(th) + WD * m0,
                                                        "hess": lambda th: hess(th) + WD},
                     rng=np.random.default_rng(9), lr=0.2)
    for k in ("m", "s"):
        np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=0)


def test_when_false_is_the_plain_update_bit_for_bit():
    """``when`` (e.g. ``not decoupled_weight_decay`` in NAdam) switches the prior off at run time."""
    text = yaml.safe_dump({"name": "wd_when", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": {"lr": 0.2, "wd": WD, "on": True},
                           "approximations": ["delta", {"weight_decay": {"coefficient": "wd", "when": "on"}}]})
    mod = api.derive(text).compile("numpy")
    without = compiled(with_rule=False)
    m0, s0, grad, hess = problem(4)
    a = mod.step(mod.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, lr=0.2, wd=WD, on=False)
    b = without.step(without.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, lr=0.2)
    np.testing.assert_array_equal(a["m"], b["m"])
    np.testing.assert_array_equal(a["s"], b["s"])
    c = mod.step(mod.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, lr=0.2, wd=WD, on=True)
    d = compiled().step(compiled().init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, lr=0.2, wd=WD)
    np.testing.assert_allclose(c["m"], d["m"], rtol=RTOL)
