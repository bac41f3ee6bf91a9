"""Continual learning by posterior correction (K-priors; Khan 2025) with the full Gaussian: the catalog recipe
`continual_gaussian` takes the previous tasks' posterior as the prior site of the next task.  On a sequence of
linear-regression tasks its state after every task equals joint Bayesian linear regression on all tasks so far
(written here by hand: S = αI + β Σ_t X_tᵀX_t, m = S⁻¹ β Σ_t X_tᵀy_t)."""
import numpy as np

from conftest import load_generated

P, ALPHA, BETA = 5, 2.0, 4.0


def tasks(seed=0, T=4):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=P)
    out = []
    for t in range(T):
        X = rng.normal(size=(20 + 5 * t, P)) * rng.uniform(0.3, 2.0, size=P) + t   # each task its own inputs
        y = X @ w + rng.normal(size=len(X)) / np.sqrt(BETA)
        out.append((X, y))
    return out


def joint_posterior(seen):
    S = ALPHA * np.eye(P) + BETA * sum(X.T @ X for X, _ in seen)
    return np.linalg.solve(S, BETA * sum(X.T @ y for X, y in seen)), S


def test_one_step_per_task_equals_joint_bayesian_linear_regression_after_every_task():
    mod = load_generated("continual_gaussian")
    state = {"m": np.zeros(P), "S": ALPHA * np.eye(P)}            # the prior is the first "past posterior"
    seen = []
    for X, y in tasks():
        seen.append((X, y))
        state = mod.step(state, data={"X": X, "y": y, "m_past": state["m"], "S_past": state["S"]}, rho=1.0,
                         beta=BETA)
        m, S = joint_posterior(seen)
        np.testing.assert_allclose(state["S"], S, rtol=1e-10, atol=1e-10 * np.abs(S).max())
        np.testing.assert_allclose(state["m"], m, rtol=1e-10, atol=1e-10 * np.abs(m).max())


def test_damped_steps_on_each_task_converge_to_the_same_posterior():
    """ρ = 0.5: Eq. 6 contracts toward the task's posterior by 1 − ρ per step; 60 steps per task reach it."""
    mod = load_generated("continual_gaussian")
    state = {"m": np.zeros(P), "S": ALPHA * np.eye(P)}
    seen = []
    for X, y in tasks(seed=1, T=3):
        seen.append((X, y))
        past = {"m_past": state["m"].copy(), "S_past": state["S"].copy()}    # fixed while the task is trained
        for _ in range(60):
            state = mod.step(state, data={"X": X, "y": y, **past}, rho=0.5, beta=BETA)
        m, S = joint_posterior(seen)
        np.testing.assert_allclose(state["S"], S, rtol=1e-10, atol=1e-10 * np.abs(S).max())
        np.testing.assert_allclose(state["m"], m, rtol=1e-10, atol=1e-10 * np.abs(m).max())


def test_without_the_past_posterior_the_earlier_tasks_are_forgotten():
    mod = load_generated("continual_gaussian")
    data = tasks()
    state = {"m": np.zeros(P), "S": ALPHA * np.eye(P)}
    for X, y in data:      # the plain prior each time: only the last task is remembered
        state = mod.step(state, data={"X": X, "y": y, "m_past": np.zeros(P), "S_past": ALPHA * np.eye(P)}, rho=1.0,
                         beta=BETA)
    m_last, _ = joint_posterior(data[-1:])
    m_all, _ = joint_posterior(data)
    np.testing.assert_allclose(state["m"], m_last, rtol=1e-10)
    assert np.max(np.abs(state["m"] - m_all)) > 1e-3
