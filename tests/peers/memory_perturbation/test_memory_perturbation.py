"""Memory-perturbation sensitivities (Nickl, Xu, Tailor, Möllenhoff & Khan, NeurIPS 2023) against leave-one-out
retraining written here by hand.

The generated ``sensitivities(state, ...)`` (rule ``memory_perturbation``) removes example i's site from the trained
natural parameters and maps back to the family's parameters.  Checked:

* conjugate models (Bayesian linear regression, ``exact``; the abstract full Gaussian ``newton`` with per-example
  oracles): the leave-one-out posterior is exact, so it equals the closed-form posterior refitted without example
  i (1e-10);
* logistic regression, full Gaussian Laplace state (catalog ``laplace``): the leave-one-out mean deviations match
  exact leave-one-out retraining (Newton's method to convergence) to first order: the largest error relative to
  the largest deviation is small and shrinks as N doubles (200 → 400 → 800);
* the diagonal Gaussian (``online_newton_diag`` at its fixed point, and IVON's trained state with per-example
  Monte Carlo statistics): the predicted deviations of the predictions x_iᵀθ correlate highly with those of exact
  leave-one-out retraining (the paper's measure for diagonal posteriors);
* the jax module's ``sensitivities`` equals the numpy module's, and examples/memory_perturbation.py runs.
"""
import importlib.util

import numpy as np
import pytest
import yaml

from blr_derive.api import derive
from conftest import CATALOG, ROOT, load_generated

P = 5


def _with_rule(recipe):
    spec = yaml.safe_load((CATALOG / f"{recipe}.yaml").read_text())
    spec["approximations"] = [a for a in spec["approximations"] if a != "memory_perturbation"] + ["memory_perturbation"]
    return derive(yaml.safe_dump(spec, sort_keys=False)).compile("numpy")


def _regression(seed=0, N=30):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, P)) * rng.uniform(0.5, 2.0, size=P)
    y = X @ rng.normal(size=P) + 0.3 * rng.normal(size=N)
    return X, y


def _blr_posterior(X, y, alpha, beta):
    S = alpha * np.eye(P) + beta * X.T @ X
    return np.linalg.solve(S, beta * X.T @ y), S


def test_bayesian_linear_regression_sensitivities_are_exact_leave_one_out_posteriors():
    mod = _with_rule("bayesian_linear_regression")
    X, y = _regression()
    alpha, beta = 2.0, 3.0
    state = mod.step({"m": np.zeros(P), "S": np.eye(P)}, data={"X": X, "y": y}, alpha=alpha, beta=beta)
    out = mod.sensitivities(state, data={"X": X, "y": y}, alpha=alpha, beta=beta)
    assert out["m"].shape == (len(X), P) and out["S"].shape == (len(X), P, P)
    for i in range(len(X)):
        m_i, S_i = _blr_posterior(np.delete(X, i, 0), np.delete(y, i), alpha, beta)
        np.testing.assert_allclose(out["S"][i], S_i, rtol=0, atol=1e-10 * np.abs(S_i).max())
        np.testing.assert_allclose(out["m"][i], m_i, rtol=0, atol=1e-10 * np.abs(m_i).max())
        np.testing.assert_allclose(out["mean_deviation"][i], m_i - state["m"], rtol=0, atol=1e-10)


def test_newton_with_per_example_oracles_gives_exact_ridge_leave_one_out():
    """The abstract full Gaussian: per-example gradients and Hessians of ½(y_i − x_iᵀθ)² at the posterior mean."""
    mod = _with_rule("newton")
    X, y = _regression(seed=1, N=25)
    delta = 0.7
    m, S = _blr_posterior(X, y, delta, 1.0)                 # the ridge posterior (the BLR's fixed point)
    oracles = {"grad": X * (X @ m - y)[:, None], "hess": X[:, :, None] * X[:, None, :]}
    out = mod.sensitivities({"m": m, "S": S}, oracles=oracles)
    for i in range(len(X)):
        m_i, S_i = _blr_posterior(np.delete(X, i, 0), np.delete(y, i), delta, 1.0)
        np.testing.assert_allclose(out["S"][i], S_i, rtol=0, atol=1e-10 * np.abs(S_i).max())
        np.testing.assert_allclose(out["m"][i], m_i, rtol=0, atol=1e-10 * np.abs(m_i).max())


# ------------------------------------------------------------------------------------ logistic regression

def _logistic(N, seed=0, n_max=800):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_max, P))
    w = 0.5 * rng.normal(size=P)
    y = (rng.random(n_max) < 1 / (1 + np.exp(-X @ w))).astype(float)
    return X[:N], y[:N]                                    # nested data sets: N doubles on the same examples


def _map(X, y, alpha, start):
    """The MAP of Σ softplus(x_iᵀθ) − y_i x_iᵀθ + α/2‖θ‖², Newton's method to convergence (written here)."""
    m = start.copy()
    for _ in range(100):
        p = 1 / (1 + np.exp(-X @ m))
        step = np.linalg.solve(X.T @ (X * (p * (1 - p))[:, None]) + alpha * np.eye(P), X.T @ (p - y) + alpha * m)
        m -= step
        if np.abs(step).max() < 1e-14:
            break
    return m


def _loo_deviations(X, y, alpha, m):
    return np.array([_map(np.delete(X, i, 0), np.delete(y, i), alpha, m) - m for i in range(len(X))])


def _laplace_errors():
    mod = load_generated("laplace")
    errors = {}
    for N in (200, 400, 800):
        X, y = _logistic(N)
        state = {"m": np.zeros(P), "S": np.eye(P)}
        for _ in range(30):
            state = mod.step(state, data={"X": X, "y": y}, alpha=1.0)
        out = mod.sensitivities(state, data={"X": X, "y": y}, alpha=1.0)
        true = _loo_deviations(X, y, 1.0, state["m"])
        errors[N] = np.abs(out["mean_deviation"] - true).max() / np.abs(true).max()
    return errors


def test_laplace_sensitivities_match_leave_one_out_retraining_to_first_order():
    errors = _laplace_errors()
    print("laplace: max |predicted − true LOO deviation| / max |true deviation|:", errors)
    assert errors[200] < 0.05
    assert errors[400] < errors[200] and errors[800] < errors[400]
    assert errors[800] < 0.5 * errors[200]


def _pred_corr(X, pred, true):
    return np.corrcoef(np.einsum("np,np->n", X, pred), np.einsum("np,np->n", X, true))[0, 1]


def test_online_newton_diag_prediction_deviations_correlate_with_leave_one_out_retraining():
    mod = load_generated("online_newton_diag")
    X, y = _logistic(200)
    alpha = 1.0
    state = {"m": np.zeros(P), "s": np.ones(P)}

    def per_example(m):
        p = 1 / (1 + np.exp(-X @ m))
        return X * (p - y)[:, None], X ** 2 * (p * (1 - p))[:, None]
    total = {"grad": lambda m: per_example(m)[0].sum(0) + alpha * m,     # the examples' losses and the prior
             "hess": lambda m: per_example(m)[1].sum(0) + alpha}
    for _ in range(300):
        state = mod.step(state, oracles=total, rho=0.5)
    g, h = per_example(state["m"])
    out = mod.sensitivities(state, oracles={"grad": g, "hess": h})
    true = _loo_deviations(X, y, alpha, state["m"])
    corr = _pred_corr(X, out["mean_deviation"], true)
    print(f"online_newton_diag: correlation of prediction deviations {corr:.4f}")
    assert corr > 0.95


def test_ivon_state_prediction_deviations_correlate_with_leave_one_out_retraining():
    mod = load_generated("ivon")
    X, y = _logistic(200)
    N, wd = len(X), 1.0 / 200                               # prior precision ess·weight_decay = 1
    rng = np.random.default_rng(3)
    hyper = dict(lr=0.05, ess=N, weight_decay=wd, beta2=0.999, hess_init=0.1, mc_samples=1)
    state = mod.init(m=np.zeros(P), h=np.full(P, 0.1), momentum=np.zeros(P), hyperparameters=hyper)

    def grads(theta):                                      # per-example gradients and Hessian diagonals
        p = 1 / (1 + np.exp(-X @ theta))
        return X * (p - y)[:, None], X ** 2 * (p * (1 - p))[:, None]
    for _ in range(3000):
        state = mod.step(state, oracles={"grad": lambda th: grads(th)[0].mean(0)}, rng=rng, **hyper)
    sd = 1 / np.sqrt(N * (state["h"] + wd))
    g, h = np.zeros((N, P)), np.zeros((N, P))
    for _ in range(64):                                    # E_q of each example's gradient and Hessian
        gi, hi = grads(state["m"] + sd * rng.normal(size=P))
        g, h = g + gi / 64, h + hi / 64
    out = mod.sensitivities(state, oracles={"grad": g, "hess": h}, **hyper)
    true = _loo_deviations(X, y, N * wd, _map(X, y, N * wd, state["m"]))
    corr = _pred_corr(X, out["mean_deviation"], true)
    print(f"ivon: correlation of prediction deviations {corr:.4f}")
    assert corr > 0.9


def test_jax_sensitivities_equal_numpy(x64):
    jnp_mod, np_mod = load_generated("laplace", "jax"), load_generated("laplace")
    X, y = _logistic(40)
    state = {"m": np.zeros(P), "S": np.eye(P)}
    for _ in range(10):
        state = np_mod.step(state, data={"X": X, "y": y}, alpha=1.0)
    a = np_mod.sensitivities(state, data={"X": X, "y": y}, alpha=1.0)
    b = jnp_mod.sensitivities(state, data={"X": X, "y": y}, alpha=1.0)
    assert set(a) == set(b) == {"m", "S", "mean_deviation"}
    for k in a:
        np.testing.assert_allclose(np.asarray(b[k]), a[k], rtol=0, atol=1e-10 * np.abs(a[k]).max())


@pytest.mark.parametrize("recipe", ["online_newton_diag", "ivon"])
def test_diagonal_sensitivities_need_per_example_oracles(recipe):
    mod = load_generated(recipe)
    assert mod.SENSITIVITY_INPUTS == ("oracles.grad", "oracles.hess")
    assert mod.SENSITIVITY_OUTPUTS == ("s", "m", "mean_deviation")


def test_example_script_predicts_the_retrained_shifts(capsys):
    spec = importlib.util.spec_from_file_location("_example_memory_perturbation",
                                                  ROOT / "examples" / "memory_perturbation.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    corr = example.main(N=120)
    assert corr > 0.99
    assert "correlation of predicted and retrained shifts over all 120 examples" in capsys.readouterr().out
