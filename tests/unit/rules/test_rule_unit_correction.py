"""unit_correction (Adadelta's convention, not a BLR step; Zeiler 2012): the preconditioned step of Eq. 38 is
multiplied by the RMS of the past steps, both RMS with ε inside the root:

    Δ_t = √(a_t + ε)/√(s_{t+1} + ε)·ĝ_t,   a_{t+1} = r·a_t + (1 − r)Δ_t²,   m ← m − ρΔ_t.

Checked numerically:

* RMSprop's derivation (Eqs. 36-38: online Newton, squared-gradient Hessian, scale rate 1 − r) with the rule equals
  Zeiler's Algorithm 1 written by hand (with ρ; ρ = 1 is Adadelta);
* the step WITH the rule equals the step WITHOUT it (online Newton with a Hessian oracle, the scale's rate 1 − r and
  square-root scaling with ε = 0, i.e. m ← m − ρg/√s_{t+1}) on transformed inputs: the state s + ε, the Hessian
  oracle ĝ² + ε and the gradient oracle √(a + ε)·ĝ;
* ``when`` false is the plain Eq. 37 step without a root (to one rounding: the generated code shares g/s between
  the branches); the recorded step is a convention.
"""
import functools

import numpy as np
import yaml

from blr_derive import api

# The same closed forms grouped differently (√(a + ε)·(g/√(s + ε)) against (√(a + ε)g)/√(s + ε), and s + ε
# rounded once more on the transformed side): a few roundings of ~1e-16 relative per step, over ≤ 20 steps.
# A missing correction changes the step by orders of magnitude (√ε against √a).
RTOL = 1e-12


def recipe(approx, hp, state_init=None):
    d = {"name": "unit_correction_test", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
         "hyperparameters": hp}
    if state_init is not None:
        d["state_init"] = state_init
    d["approximations"] = approx
    return yaml.safe_dump(d, sort_keys=False)


@functools.lru_cache(maxsize=None)
def adadelta_like():
    approx = ["delta", "squared_gradient_hessian", {"separate_learning_rates": {"s": "1 - r"}},
              {"unit_correction": {"param": "s", "rate": "r", "eps": "eps", "state": "a", "when": "flag"}}]
    return api.derive(recipe(approx, {"lr": 1.0, "r": 0.9, "eps": 1e-6, "flag": True}, {"s": 0})).compile("numpy")


@functools.lru_cache(maxsize=None)
def rms_newton():
    """m ← m − ρg/√s_{t+1}, s_{t+1} = r·s + (1 − r)H (H from an oracle)."""
    approx = ["delta", {"separate_learning_rates": {"s": "1 - r"}}, {"square_root_scaling": {"param": "s"}}]
    return api.derive(recipe(approx, {"lr": 1.0, "r": 0.9})).compile("numpy")


@functools.lru_cache(maxsize=None)
def plain_newton():
    approx = ["delta", "squared_gradient_hessian", {"separate_learning_rates": {"s": "1 - r"}}]
    return api.derive(recipe(approx, {"lr": 1.0, "r": 0.9}, {"s": 0})).compile("numpy")


def problem(seed=0, n=7):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    return rng.normal(size=n), (lambda x: a * (x - c) + 0.3 * np.sin(x))


def test_zeilers_algorithm_1():
    mod = adadelta_like()
    m0, grad = problem(1)
    lr, r, eps = 0.7, 0.85, 1e-4
    state = mod.init(m=m0)
    m, s, a = m0.copy(), np.zeros_like(m0), np.zeros_like(m0)
    for _ in range(20):
        state = mod.step(state, oracles={"grad": grad}, lr=lr, r=r, eps=eps, flag=True)
        g = grad(m)
        s = r * s + (1 - r) * g * g
        dx = np.sqrt(a + eps) / np.sqrt(s + eps) * g
        a = r * a + (1 - r) * dx * dx
        m = m - lr * dx
        for k, ref in (("s", s), ("a", a), ("m", m)):
            np.testing.assert_allclose(state[k], ref, rtol=RTOL, atol=1e-15)
    assert np.abs(state["m"] - m0).max() > 0.05


def test_with_the_rule_is_rms_scaling_on_shifted_state_and_oracles():
    with_, without = adadelta_like(), rms_newton()
    m0, grad = problem(2)
    lr, r, eps = 0.5, 0.8, 1e-3
    state = with_.init(m=m0)
    for _ in range(15):
        m, s, a = state["m"], state["s"], state["a"]
        b = without.step(without.init(m=m, s=s + eps),
                         oracles={"grad": lambda x: np.sqrt(a + eps) * grad(x), "hess": lambda x: grad(x) ** 2 + eps},
                         lr=lr, r=r)
        state = with_.step(state, oracles={"grad": grad}, lr=lr, r=r, eps=eps, flag=True)
        np.testing.assert_allclose(state["m"], b["m"], rtol=RTOL, atol=1e-15)
        np.testing.assert_allclose(state["s"] + eps, b["s"], rtol=RTOL, atol=0)
        step = (m - state["m"]) / lr
        np.testing.assert_allclose(state["a"], r * a + (1 - r) * step ** 2, rtol=1e-9, atol=1e-18)


def test_a_false_condition_is_the_plain_step():
    with_, without = adadelta_like(), plain_newton()
    m0, grad = problem(3)
    a, b = with_.init(m=m0, s=np.ones_like(m0)), without.init(m=m0, s=np.ones_like(m0))
    for _ in range(6):
        a = with_.step(a, oracles={"grad": grad}, lr=0.1, r=0.9, eps=1e-6, flag=False)
        b = without.step(b, oracles={"grad": grad}, lr=0.1, r=0.9)
        np.testing.assert_array_equal(a["s"], b["s"])
        np.testing.assert_allclose(a["m"], b["m"], rtol=RTOL, atol=1e-15)
    np.testing.assert_array_equal(a["a"], 0.0)             # the state is not updated when the rule is off


def test_the_recorded_step_is_a_convention():
    d = api.derive(recipe(["delta", {"unit_correction": {"param": "s", "rate": "r", "eps": "e"}}],
                          {"lr": 1.0, "r": 0.9, "e": 0.01}))
    (st,) = d.steps_for("unit_correction")
    assert "convention" in st.equation
    rms = st.equations[0][1]
    vals = {x: {"s_new": 0.24, "e": 0.01}[x.name] for x in rms.free_symbols}
    assert float(rms.subs(vals)) == 0.5                     # √(s + ε): ε inside the root
    assert "acc_delta" in d.update
