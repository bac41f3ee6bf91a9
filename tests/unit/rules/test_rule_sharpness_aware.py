"""sharpness_aware (Foret et al. 2021 Eq. 2; Moellenhoff & Khan 2023 Alg. 1): the mean step's gradient taken at
m + ρ·scale·ĝ_k (/‖ĝ_k‖₂), a second oracle call per sample at a point computed from the first.

Checked numerically (numpy target, against hand formulas from the papers' equations):

* the point-mass case (delta): m ← m − lr·∇ℓ(m + ρ g/‖g‖₂), ‖·‖ over every coordinate, and with a scale instead
  of the norm m ← m − lr·∇ℓ(m + ρ c g);
* m-sharpness: ``samples`` sub-batches, the oracle called at (m, then the sub-batch's own ascent point) in turn,
  the gradients at the ascent points averaged;
* ρ = 0 gives the step without the rule, bit for bit;
* with Monte Carlo (diagonal Gaussian, the same draw): the ascent point is around the MEAN, m + ρ c ĝ(θ_k), not
  around θ_k, and a Hessian estimate made before the rule still sees the gradient at the sample;
* bad arguments are located errors.
"""
import functools

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError

RTOL = 1e-13


def recipe(approx, hp, family="gaussian_fixed_cov"):
    return yaml.safe_dump({"name": "sam_rule_test", "family": family, "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def point_mass(norm=True, rule=True):
    args = {"radius": "r", "samples": "n"}
    args.update({"norm": "l2"} if norm else {"scale": "c"})
    hp = {"lr": 0.1, "r": 0.05, "n": {"default": 1, "type": "int"}, "c": 1.0}
    if not norm:
        hp.pop("n")
        args.pop("samples")
    approx = ["delta"] + ([{"sharpness_aware": args}] if rule else [])
    if not rule:
        hp = {"lr": 0.1}
    return api.derive(recipe(approx, hp)).compile("numpy")


def problem(seed=0, n=6, batches=1):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=(batches, n))
    c = rng.normal(size=(batches, n))

    def grad(x, k=0):
        return a[k] * (x - c[k]) + 0.3 * np.sin(x) + 0.1 * x ** 3
    return rng.normal(size=n), grad


def test_point_mass_global_norm_hand_formula():
    mod = point_mass()
    m0, grad = problem(1)
    lr, r = 0.2, 0.3
    state, m = mod.init(m=m0), m0.copy()
    for _ in range(10):
        state = mod.step(state, oracles={"grad": grad}, lr=lr, r=r, n=1)
        g = grad(m)
        m = m - lr * grad(m + r * g / np.sqrt(np.sum(g ** 2)))          # Foret et al., Eq. 2 / Alg. 1
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-15)
    assert np.abs(m - m0).max() > 0.1


def test_point_mass_scaled_hand_formula():
    mod = point_mass(norm=False)
    m0, grad = problem(2)
    lr, r, c = 0.2, 0.3, 0.7
    state, m = mod.init(m=m0), m0.copy()
    for _ in range(10):
        state = mod.step(state, oracles={"grad": grad}, lr=lr, r=r, c=c)
        m = m - lr * grad(m + r * c * grad(m))
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-15)


def test_m_sharpness_calls_each_sub_batch_twice_in_order():
    mod = point_mass()
    m0, grad = problem(3, batches=3)
    lr, r = 0.2, 0.1
    state, m = mod.init(m=m0), m0.copy()
    for _ in range(5):
        calls = []

        def oracle(x):
            k = len(calls) // 2
            calls.append((k, np.array_equal(x, state["m"])))
            return grad(x, k)
        state = mod.step(state, oracles={"grad": oracle}, lr=lr, r=r, n=3)
        # (sub-batch, called at the mean?): the mean, then its own ascent point, for each sub-batch
        assert calls == [(0, True), (0, False), (1, True), (1, False), (2, True), (2, False)]
        ge = [grad(m + r * grad(m, k) / np.linalg.norm(grad(m, k)), k) for k in range(3)]
        m = m - lr * np.mean(ge, axis=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-15)


def test_zero_radius_is_the_step_without_the_rule():
    with_, without = point_mass(norm=False), point_mass(rule=False)
    m0, grad = problem(4)
    a, b = with_.init(m=m0), without.init(m=m0)
    for _ in range(6):
        a = with_.step(a, oracles={"grad": grad}, lr=0.3, r=0.0, c=1.0)
        b = without.step(b, oracles={"grad": grad}, lr=0.3)
        np.testing.assert_array_equal(a["m"], b["m"])


class FixedDraws:
    def __init__(self, draws):
        self.draws = list(draws)

    def standard_normal(self, shape):
        return self.draws.pop(0)


def test_monte_carlo_point_is_around_the_mean():
    # the Hessian estimate made before the rule keeps the gradient at the sample
    text = recipe([{"monte_carlo": {"samples": 1}}, "squared_gradient_hessian",
                   {"sharpness_aware": {"radius": "r", "scale": "1/s"}}], {"lr": 0.1, "r": 0.1}, family="gaussian_diag")
    mod = api.derive(text).compile("numpy")
    m0, grad = problem(5)
    s0 = np.full(m0.shape, 4.0)
    lr, r = 0.2, 0.3
    state, m, s = mod.init(m=m0, s=s0), m0.copy(), s0.copy()
    rng = np.random.default_rng(9)
    for _ in range(6):
        eps = rng.standard_normal(m.shape)
        state = mod.step(state, oracles={"grad": grad}, rng=FixedDraws([eps]), lr=lr, r=r)
        g = grad(m + eps / np.sqrt(s))                     # at the sample θ_k
        ge = grad(m + r * g / s)                           # at the ascent point around the mean
        s = (1 - lr) * s + lr * g ** 2                     # the Hessian estimate keeps the gradient at the sample
        m = m - lr * ge / s
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-15)


@pytest.mark.parametrize("args,match", [
    ({"radius": "r", "norm": "l1"}, "norm must be 'l2'"),
    ({"scale": "c"}, "missing argument 'radius'"),
    ({"radius": "r", "scale": "nope"}, "nope"),
])
def test_bad_arguments_are_located_errors(args, match):
    with pytest.raises(SpecError, match=match) as exc:
        api.derive(recipe(["delta", {"sharpness_aware": args}], {"lr": 0.1, "r": 0.1, "c": 1.0}))
    assert exc.value.line is not None


def test_samples_belong_to_the_delta_method_only():
    text = recipe([{"monte_carlo": {"samples": 2}}, {"sharpness_aware": {"radius": "r", "samples": 3}}],
                  {"lr": 0.1, "r": 0.1}, family="gaussian_diag")
    with pytest.raises(SpecError, match="'samples' is for the delta method") as exc:
        api.derive(text)
    assert exc.value.line is not None
