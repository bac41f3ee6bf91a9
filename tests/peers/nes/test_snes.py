"""SNES (Wierstra et al., JMLR 2014, Sec. 5.2) as the BLR: the catalog recipe `snes` against evosax's SNES with the
same draws, and the score-function BLR's expected step against the exact BLR step on a quadratic (a z-test).

evosax (JAX) minimises: ask() draws z ~ N(0, I) and x = mean + std*z, tell() ranks the fitness, takes NES's
utilities u (evosax's get_weights), and sets mean += std*Σ u z (optax.sgd(1.0)), std *= exp(lr_std/2 Σ u (z² − 1)).
"""
import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp                                   # noqa: E402
from evosax.algorithms import SNES                        # noqa: E402
from evosax.algorithms.distribution_based.xnes import get_weights   # noqa: E402

from blr_derive import api                                # noqa: E402
from conftest import load_generated                       # noqa: E402


class Rows:
    """A numpy-Generator stand-in whose standard_normal() returns given draws, one sample at a time."""

    def __init__(self, z):
        self.z = [np.asarray(r, dtype=float) for r in z]

    def standard_normal(self, shape):
        row = self.z.pop(0)
        assert row.shape == tuple(shape)
        return row


def rastrigin_like(x):
    d = np.arange(1, x.size + 1)
    return float(np.sum(d * (x - 1.3) ** 2) + np.sin(3 * x[0]) + 0.5 * np.cos(2 * x[-1]))


@pytest.mark.parametrize("dims, popsize, std_init, seed", [(5, 12, 0.7, 0), (3, 7, 1.0, 1), (10, 20, 0.3, 2)])
def test_generated_snes_equals_evosax_generation_by_generation(dims, popsize, std_init, seed):
    mod = load_generated("snes")
    es = SNES(population_size=popsize, solution=jnp.zeros(dims))
    params = es.default_params.replace(std_init=jnp.asarray(std_init))
    lr_std = float(params.lr_std_init)
    assert lr_std == pytest.approx((3 + np.log(dims)) / (5 * np.sqrt(dims)), rel=1e-15)
    key = jax.random.key(seed)
    m0 = np.linspace(-0.5, 0.4, dims)
    state = es.init(key, jnp.asarray(m0), params)
    ours = mod.init(hyperparameters={"std_init": std_init, "lr_std": lr_std, "popsize": popsize}, m=m0)
    np.testing.assert_array_equal(ours["std"], np.full(dims, std_init))
    worst = 0.0
    for gen in range(30):
        key, k_ask, k_tell = jax.random.split(key, 3)
        population, state = es.ask(k_ask, state, params)
        fitness = jnp.asarray([rastrigin_like(np.asarray(x)) for x in population])
        z = (np.asarray(population) - np.asarray(state.mean)) / np.asarray(state.std)   # evosax's own z (its tell)
        state, _ = es.tell(k_tell, population, fitness, state, params)
        ours = mod.step(ours, oracles={"loss": rastrigin_like}, rng=Rows(z), lr_std=lr_std, popsize=popsize)
        np.testing.assert_allclose(ours["m"], np.asarray(state.mean), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ours["std"], np.asarray(state.std), rtol=1e-12)
        worst = max(worst, float(np.max(np.abs(ours["m"] - np.asarray(state.mean)))))
    assert worst < 1e-12
    # and it optimises: the mean ends near the minimiser (1.3 in every coordinate, moved by the sin/cos terms)
    assert rastrigin_like(ours["m"]) < rastrigin_like(m0) - 1.0


def test_nes_utilities_are_evosax_weights_as_negative_scaled_losses():
    """The shaped loss value of rank r is −S·u_r with evosax's u (so means over samples are NES's sums)."""
    mod = load_generated("snes")
    S = 9
    losses = np.array([3.0, -1.0, 7.5, 0.25, 2.0, 9.0, -4.0, 1.5, 5.0])      # distinct: ranks unambiguous
    z = [np.array([1.0]) for _ in range(S)]
    captured = []

    def loss(theta):
        captured.append(theta.copy())
        return losses[len(captured) - 1]
    out = mod.step({"m": np.zeros(1), "std": np.ones(1)}, oracles={"loss": loss}, rng=Rows(z), lr=1.0, lr_std=0.0,
                   popsize=S)
    # with every z = 1: m' = m + std·Σ_k u_k z_k = Σ u = 0 (the utilities sum to zero)
    np.testing.assert_allclose(out["m"], 0.0, atol=1e-15)
    u = np.asarray(get_weights(S))
    ranks = np.argsort(np.argsort(losses))
    z = np.linspace(-1.0, 1.5, S)
    out = mod.step({"m": np.zeros(1), "std": np.full(1, 2.0)},
                   oracles={"loss": (lambda it: (lambda th: losses[next(it)]))(iter(range(S)))},
                   rng=Rows([np.array([v]) for v in z]), lr=0.5, lr_std=0.0, popsize=S)
    np.testing.assert_allclose(out["m"], 0.5 * 2.0 * np.sum(u[ranks] * z), rtol=1e-13)


QUADRATIC_SCORE = """
name: es_quadratic_check
title: score-function BLR
class_name: ESCheck
family: gaussian_diag
loss: abstract
learning_rate: rho
hyperparameters:
  rho: {default: 0.3, description: learning rate}
  mc_samples: {default: 4, type: int, description: samples}
state_init: {s: 1.0}
approximations:
  - score_function: {samples: mc_samples}
"""

QUADRATIC_EXACT = """
name: exact_quadratic_check
title: exact BLR
class_name: ExactCheck
family: gaussian_diag
loss:
  expression: a*(theta - c)**2/2
learning_rate: rho
hyperparameters:
  rho: {default: 0.3, description: learning rate}
  a: {default: 1.0, description: curvature}
  c: {default: 0.0, description: minimiser}
approximations:
  - exact
"""


def test_expected_score_function_step_is_the_exact_blr_step_on_a_quadratic():
    """λ_{t+1} is linear in the estimate, so its mean over independent steps is the exact Eq. 6 step: z-test."""
    sf, ex = (api.derive(text).compile("numpy") for text in (QUADRATIC_SCORE, QUADRATIC_EXACT))
    sf.CHECK_DOMAINS = False        # single steps may leave s > 0 (an estimate of either sign); their mean is tested
    a, c = np.array([1.0, 3.0, 0.5]), np.array([0.2, -1.0, 2.0])
    m, s = np.array([0.5, 0.0, 1.0]), np.array([2.0, 1.0, 0.5])
    total = lambda th: float(np.sum(a * (th - c) ** 2 / 2))          # a black-box loss of the whole vector
    rho, R = 0.3, 20_000
    rng = np.random.default_rng(7)
    lam = np.empty((R, 2, 3))
    for i in range(R):
        out = sf.step({"m": m, "s": s}, oracles={"loss": total}, rng=rng, rho=rho, mc_samples=4)
        lam[i] = out["s"] * out["m"], -out["s"] / 2
    exact = np.array([[0, 0, 0], [0, 0, 0]], dtype=float)
    for j in range(3):
        o = ex.step({"m": m[j], "s": s[j]}, rho=rho, a=a[j], c=c[j])
        exact[:, j] = o["s"] * o["m"], -o["s"] / 2
    mean, se = lam.mean(axis=0), lam.std(axis=0, ddof=1) / np.sqrt(R)
    zscores = np.abs(mean - exact) / se
    assert zscores.max() < 5, zscores
    # and the test can tell: the exact step at another curvature is many standard errors away
    o = ex.step({"m": m[1], "s": s[1]}, rho=rho, a=1.5 * a[1], c=c[1])
    assert abs(mean[1, 1] - (-o["s"] / 2)) / se[1, 1] > 10


def test_a_collapsed_scale_far_from_the_origin_stays_exact():
    """std = 1e-9 at |m| = 1e3: the statistics are the natural gradient per sample, written in the draws, so the
    step has the rounding of m itself (averaging T(θ_k) − μ first would cancel θ_k² − m² to nothing)."""
    mod = load_generated("snes")
    S, lr, lr_std = 8, 1.0, 0.4
    rng = np.random.default_rng(3)
    z = rng.normal(size=(S, 4))
    m, std = np.array([1e3, -2e3, 5.0, 0.0]), np.full(4, 1e-9)
    losses = rng.normal(size=S)
    it = iter(losses)
    out = mod.step({"m": m, "std": std}, oracles={"loss": lambda th: next(it)}, rng=Rows(z), lr=lr, lr_std=lr_std,
                   popsize=S)
    u = np.asarray(get_weights(S))[np.argsort(np.argsort(losses))]
    m_ref = m + lr * std * (u @ z)                          # Wierstra et al. (2014), Algorithm 6 (SNES)
    std_ref = std * np.exp(lr_std / 2 * (u @ (z ** 2 - 1)))
    np.testing.assert_allclose(out["std"], std_ref, rtol=1e-13)
    np.testing.assert_allclose(out["m"] - m, m_ref - m, rtol=0, atol=4 * np.spacing(np.abs(m)).max())
    assert np.all(np.abs(out["m"] - m)[2:] > 0)
