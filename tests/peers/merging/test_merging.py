"""Model merging as the product of Gaussian posteriors (catalog/task_arithmetic.yaml, catalog/fisher_merging.yaml;
Khan 2025, Sec. 3.3): the BLR's exact step with rho = 1 (Eq. 5) on the negative log of the product is the merged
posterior.  References are the published closed forms, written here:

* task arithmetic (Ilharco et al. 2023): theta_merged = theta_0 + sum_t alpha_t (theta_t - theta_0);
* Fisher-weighted averaging (Matena & Raffel 2022, Eq. 3): theta = sum_t w_t F_t theta_t / sum_t w_t F_t, and the
  merged precision sum_t w_t F_t.

Random inputs in float64, T = 1..5 models (the sized recipes at --size T), the numpy modules and the committed jax
modules (T = 2) in float64, to 1e-12.
"""
import numpy as np
import pytest

from blr_derive.api import generate
from conftest import CATALOG, load_generated, load_module_from_path


def task_arithmetic(theta0, thetas, alphas):
    return theta0 + sum(a * (t - theta0) for a, t in zip(alphas, thetas))


def fisher_merge(thetas, fishers, weights):
    num = sum(w * F * t for w, F, t in zip(weights, fishers, thetas))
    den = sum(w * F for w, F in zip(weights, fishers))
    return num / den, den


def sized(tmp_path, recipe, T):
    if T == 2:                                       # the committed artifact (the recipe's default size)
        return load_generated(recipe)
    out = tmp_path / f"{recipe}_{T}.py"
    out.write_text(generate(CATALOG / f"{recipe}.yaml", "numpy", sizes={"T": T}), encoding="utf-8")
    return load_module_from_path(out)


def rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - b)) / max(1.0, np.max(np.abs(b))))


@pytest.mark.parametrize("T", [1, 2, 3, 5])
def test_task_arithmetic_is_the_product_of_isotropic_posteriors(tmp_path, T):
    mod = sized(tmp_path, "task_arithmetic", T)
    rng = np.random.default_rng(T)
    worst = 0.0
    for _ in range(5):
        P = int(rng.integers(1, 40))
        theta0 = rng.normal(size=P)
        thetas = [theta0 + rng.normal(scale=0.5, size=P) for _ in range(T)]
        alphas = rng.uniform(-0.5, 1.5, size=T)
        data = {"theta0": theta0, **{f"theta{t + 1}": th for t, th in enumerate(thetas)}}
        hp = {f"alpha{t + 1}": float(a) for t, a in enumerate(alphas)}
        start = {"m": rng.normal(size=P)}            # rho = 1: the fixed point from any starting mean
        got = mod.step(mod.init(**start), data=data, **hp)["m"]
        worst = max(worst, rel(got, task_arithmetic(theta0, thetas, alphas)))
    print(f"T={T}: max relative |derived - task arithmetic| = {worst:.1e}")
    assert worst < 1e-12


def test_task_arithmetic_default_scaling_adds_the_task_vectors():
    mod = load_generated("task_arithmetic")
    theta0, t1, t2 = np.array([1.0, -2.0]), np.array([1.5, -1.0]), np.array([0.0, -2.5])
    got = mod.step(mod.init(m=np.zeros(2)), data={"theta0": theta0, "theta1": t1, "theta2": t2})["m"]
    assert np.array_equal(got, np.array([0.5, -1.5]))     # theta0 + (t1 - theta0) + (t2 - theta0)


@pytest.mark.parametrize("T", [1, 2, 3, 5])
def test_fisher_merging_is_the_product_of_diagonal_posteriors(tmp_path, T):
    mod = sized(tmp_path, "fisher_merging", T)
    rng = np.random.default_rng(10 + T)
    worst = 0.0
    for _ in range(5):
        P = int(rng.integers(1, 40))
        thetas = [rng.normal(size=P) for _ in range(T)]
        fishers = [rng.gamma(0.5, 2.0, size=P) + 1e-3 for _ in range(T)]
        weights = rng.uniform(0.1, 2.0, size=T)
        data = {**{f"theta{t + 1}": th for t, th in enumerate(thetas)},
                **{f"F{t + 1}": F for t, F in enumerate(fishers)}}
        hp = {f"w{t + 1}": float(w) for t, w in enumerate(weights)}
        out = mod.step(mod.init(m=rng.normal(size=P), s=rng.uniform(0.5, 2, size=P)), data=data, **hp)
        m_ref, s_ref = fisher_merge(thetas, fishers, weights)
        worst = max(worst, rel(out["m"], m_ref), rel(out["s"], s_ref))
    print(f"T={T}: max relative |derived - Fisher merging| = {worst:.1e}")
    assert worst < 1e-12


def test_fisher_merging_with_equal_fishers_is_weighted_averaging():
    """Equal Fishers: the merge is the weighted average of the models (Matena & Raffel's 'isotropic' baseline)."""
    mod = load_generated("fisher_merging")
    t1, t2 = np.array([1.0, 4.0]), np.array([3.0, 0.0])
    F = np.array([2.0, 0.5])
    out = mod.step(mod.init(m=np.zeros(2), s=np.ones(2)), data={"theta1": t1, "theta2": t2, "F1": F, "F2": F},
                   w1=1.0, w2=3.0)
    assert np.allclose(out["m"], (t1 + 3 * t2) / 4, rtol=0, atol=1e-15)
    assert np.allclose(out["s"], 4 * F, rtol=0, atol=1e-15)


def test_jax_modules_equal_the_closed_forms(x64):
    import jax.numpy as jnp
    rng = np.random.default_rng(7)
    P = 13
    ta = load_generated("task_arithmetic", "jax")
    theta0, t1, t2 = (rng.normal(size=P) for _ in range(3))
    got = ta.step(ta.init(m=jnp.zeros(P)), data={"theta0": theta0, "theta1": t1, "theta2": t2},
                  alpha1=0.3, alpha2=0.7)["m"]
    assert rel(got, task_arithmetic(theta0, [t1, t2], [0.3, 0.7])) < 1e-12
    fm = load_generated("fisher_merging", "jax")
    F1, F2 = rng.gamma(1.0, size=P) + 0.01, rng.gamma(1.0, size=P) + 0.01
    out = fm.step(fm.init(m=jnp.zeros(P), s=jnp.ones(P)), data={"theta1": t1, "theta2": t2, "F1": F1, "F2": F2},
                  w1=0.4, w2=1.6)
    m_ref, s_ref = fisher_merge([t1, t2], [F1, F2], [0.4, 1.6])
    assert rel(out["m"], m_ref) < 1e-12 and rel(out["s"], s_ref) < 1e-12
