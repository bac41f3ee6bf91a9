"""xNES (Wierstra et al., JMLR 2014, Sec. 3.3, Algorithm 5) as the BLR over the full Gaussian: the catalog recipe
`xnes` against a reference written here from Algorithm 5, the recipe `xnes_evosax` (evosax's entrywise-exponential
convention) against evosax 0.3.2's xNES with the same draws, and the unshaped estimator's expected local step
against the tangent of the exact BLR step on a quadratic (a z-test).

evosax (JAX) minimises: ask() draws z ~ N(0, I), x = mean + std * z @ B; tell() takes NES's utilities u, sets
mean += std * B @ Σ u z (optax.sgd(1.0)), G_M = Σ u (z zᵀ − I), std *= exp(lr_std/2 tr(G_M)/d) and
B *= exp(lr_B/2 (G_M − tr(G_M)/d I)) entrywise (jnp.exp), from B = std_init * I: B stays diagonal.
"""
import jax
import numpy as np
import pytest
import scipy.linalg

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp                                   # noqa: E402
from evosax.algorithms import xNES                        # noqa: E402

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


def rotated_ellipsoid(x):
    d = x.size
    Q = np.linalg.qr(np.cos(np.arange(d * d).reshape(d, d) + 1.0))[0]
    y = Q @ (x - 0.7)
    return float(np.sum(10.0 ** (2 * np.arange(d) / max(d - 1, 1)) * y ** 2))


def rosenbrock(x):
    return float(np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))


def nes_utilities(S):
    """Wierstra et al. (2014) Sec. 3.1: u_r = max(0, log(S/2 + 1) − log r)/Σ_j(...) − 1/S, r = 1 the best."""
    w = np.maximum(0.0, np.log(S / 2 + 1) - np.log(np.arange(1, S + 1)))
    return w / w.sum() - 1 / S


def reference_xnes_step(m, sigma, B, z, losses, eta_m, eta_sigma, eta_B):
    """Algorithm 5 (xNES) of Wierstra et al. (2014), one generation, written from the paper."""
    d = m.size
    u = nes_utilities(len(losses))[np.argsort(np.argsort(losses, kind="stable"), kind="stable")]
    G_delta = u @ z
    G_M = sum(uk * (np.outer(zk, zk) - np.eye(d)) for uk, zk in zip(u, z))
    G_sigma = np.trace(G_M) / d
    G_B = G_M - G_sigma * np.eye(d)
    m = m + eta_m * sigma * B @ G_delta
    sigma = sigma * np.exp(eta_sigma / 2 * G_sigma)
    B = B @ scipy.linalg.expm(eta_B / 2 * G_B)
    return m, sigma, B


def xnes_rate(d):
    return (9 + 3 * np.log(d)) / (5 * d * np.sqrt(d))


@pytest.mark.parametrize("f, dims, popsize, seed", [(rotated_ellipsoid, 2, 6, 0), (rosenbrock, 5, 12, 1),
                                                     (rotated_ellipsoid, 5, 10, 2)])
def test_generated_xnes_equals_algorithm_5_generation_by_generation(f, dims, popsize, seed):
    mod = load_generated("xnes")
    rate = xnes_rate(dims)
    rng = np.random.default_rng(seed)
    m, sigma, B = np.linspace(-0.5, 0.4, dims), 0.8, np.eye(dims)
    ours = mod.init(m=m, A=sigma * B)
    for gen in range(30):
        z = rng.standard_normal((popsize, dims))
        losses = np.array([f(m + sigma * B @ zk) for zk in z])
        m, sigma, B = reference_xnes_step(m, sigma, B, z, losses, 1.0, rate, rate)
        ours = mod.step(ours, oracles={"loss": f}, rng=Rows(z), lr_A=rate, popsize=popsize)
        np.testing.assert_allclose(ours["m"], m, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ours["A"], sigma * B, rtol=1e-12, atol=1e-12 * sigma)
    # it learns correlations: the factor is no longer diagonal (what evosax's entrywise convention never does)
    assert np.abs(ours["A"] - np.diag(np.diag(ours["A"]))).max() > 1e-3


@pytest.mark.parametrize("f, dims, popsize, std_init, seed", [(rotated_ellipsoid, 2, 6, 1.0, 0),
                                                              (rosenbrock, 5, 12, 0.5, 1),
                                                              (rotated_ellipsoid, 5, 10, 1.3, 2)])
def test_generated_xnes_evosax_equals_evosax_generation_by_generation(f, dims, popsize, std_init, seed):
    mod = load_generated("xnes_evosax")
    es = xNES(population_size=popsize, solution=jnp.zeros(dims))
    params = es.default_params.replace(std_init=jnp.asarray(std_init))
    rate = float(params.lr_std_init)
    assert rate == pytest.approx(xnes_rate(dims), rel=1e-15) and float(params.lr_B) == rate
    key = jax.random.key(seed)
    m0 = np.linspace(-0.5, 0.4, dims)
    state = es.init(key, jnp.asarray(m0), params)
    # evosax starts from std = std_init and B = std_init * I: the factor A = std * B
    ours = mod.init(m=m0, A=np.asarray(state.std) * np.asarray(state.B))
    worst = 0.0
    for gen in range(30):
        key, k_ask, k_tell = jax.random.split(key, 3)
        population, state = es.ask(k_ask, state, params)
        fitness = jnp.asarray([f(np.asarray(x)) for x in population])
        z = np.asarray(state.z)
        state, _ = es.tell(k_tell, population, fitness, state, params)
        ours = mod.step(ours, oracles={"loss": f}, rng=Rows(z), lr_A=rate, popsize=popsize)
        A = np.asarray(state.std) * np.asarray(state.B)
        np.testing.assert_allclose(ours["m"], np.asarray(state.mean), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ours["A"], A, rtol=1e-12, atol=0)
        worst = max(worst, float(np.max(np.abs(ours["m"] - np.asarray(state.mean)))))
    assert worst < 1e-12
    assert np.count_nonzero(ours["A"] - np.diag(np.diag(ours["A"]))) == 0     # evosax's B stays diagonal


QUADRATIC_SCORE = """
name: xes_quadratic_check
title: score-function BLR in exponential coordinates
class_name: XESCheck
family: gaussian_full
loss: abstract
learning_rate: rho
hyperparameters:
  rho: {default: 0.3, description: learning rate}
  mc_samples: {default: 4, type: int, description: samples}
approximations:
  - score_function: {samples: mc_samples}
  - no_entropy
  - exponential_coordinates: {S: A}
"""

QUADRATIC_EXACT = """
name: exact_full_quadratic_check
title: exact BLR (delta method on a quadratic)
class_name: ExactFullCheck
family: gaussian_full
loss: abstract
learning_rate: rho
hyperparameters:
  rho: {default: 0.3, description: learning rate}
approximations:
  - delta
  - no_entropy
"""


def test_expected_local_step_is_the_tangent_of_the_exact_blr_step_on_a_quadratic():
    """Without shaping, the step's local coordinates (m_{t+1} − m)/ρ and M = logm(A⁻¹A_{t+1})/ρ are linear in the
    score-function estimate, so their means over independent steps are the tangent of the exact Eq. 6 step at
    ρ = 0 (taken from the exact step, whose λ is linear in ρ): a z-test on every entry."""
    sf, ex = (api.derive(text).compile("numpy") for text in (QUADRATIC_SCORE, QUADRATIC_EXACT))
    H = np.array([[2.0, 0.6], [0.6, 1.0]])
    c = np.array([0.5, -1.0])
    m, A = np.array([0.3, 0.2]), np.array([[0.9, 0.0], [0.4, 0.7]])
    S = np.linalg.inv(A @ A.T)
    quad = lambda th: float((th - c) @ H @ (th - c) / 2)
    rho, R = 0.3, 20_000
    rng = np.random.default_rng(11)
    dm, M = np.empty((R, 2)), np.empty((R, 2, 2))
    Ainv = np.linalg.inv(A)
    for i in range(R):
        out = sf.step({"m": m, "A": A}, oracles={"loss": quad}, rng=rng, rho=rho, mc_samples=4)
        dm[i] = (out["m"] - m) / rho
        w, V = np.linalg.eigh(Ainv @ out["A"])      # expm(ρM̂) is symmetric positive definite
        M[i] = (V * np.log(w)) @ V.T / rho
    # the exact BLR step (delta method: exact on a quadratic); λ_{t+1} is linear in ρ, so one step gives λ̇
    o = ex.step({"m": m, "S": S}, oracles={"grad": lambda t: H @ (t - c), "hess": lambda t: H}, rho=rho)
    S_dot = (o["S"] - S) / rho
    lam1_dot = (o["S"] @ o["m"] - S @ m) / rho
    m_dot = np.linalg.solve(S, lam1_dot - S_dot @ m)
    C_dot = -np.linalg.solve(S, np.linalg.solve(S, S_dot).T)
    M_exact = Ainv @ C_dot @ Ainv.T / 2
    for est, exact in ((dm, m_dot), (M, M_exact)):
        mean, se = est.mean(axis=0), est.std(axis=0, ddof=1) / np.sqrt(R)
        zscores = np.abs(mean - exact) / se
        assert zscores.max() < 5, zscores
    # and the test can tell: the tangent at another curvature is many standard errors away
    se = M.std(axis=0, ddof=1) / np.sqrt(R)
    assert np.abs(M.mean(axis=0) - 1.5 * M_exact).max() / se.max() > 10


@pytest.mark.parametrize("recipe", ["xnes", "xnes_evosax"])
def test_generated_jax_equals_generated_numpy_with_the_same_draws(recipe):
    """The jax module draws sample k's z with key split(key, popsize)[k]; fed the same z, numpy agrees (30 steps)."""
    npm, jm = load_generated(recipe), load_generated(recipe, "jax")
    f = lambda x: jnp.sum((x - 0.3) ** 2) + x[0] * x[1]
    a, b = npm.init(m=np.zeros(3), A=np.eye(3)), jm.init(m=np.zeros(3), A=np.eye(3))
    key = jax.random.key(4)
    for _ in range(30):
        key, k = jax.random.split(key)
        z = [np.asarray(jax.random.normal(kk, (3,), dtype=float)) for kk in jax.random.split(k, 8)]
        a = npm.step(a, oracles={"loss": lambda x: float(f(x))}, rng=Rows(z), lr_A=0.3, popsize=8)
        b = jm.step(b, oracles={"loss": f}, key=k, lr_A=0.3, popsize=8)
        np.testing.assert_allclose(np.asarray(b["A"]), a["A"], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(np.asarray(b["m"]), a["m"], rtol=1e-12, atol=1e-13)
