"""A Kalman filter from two generated BLR steps (predict, update) against a hand-written one."""
import numpy as np

from conftest import load_generated


import pytest


@pytest.mark.parametrize("one_step", [False, True], ids=["predict+update", "kalman_filter"])
def test_kalman_filter_equals_handwritten_over_100_steps(one_step):
    predict, update = load_generated("kalman_predict"), load_generated("kalman_update")
    kf = load_generated("kalman_filter")
    rng = np.random.default_rng(0)
    P, K = 4, 2
    A = np.eye(P) + 0.1 * rng.normal(size=(P, P))
    A *= 0.95 / max(abs(np.linalg.eigvals(A)))
    B = rng.normal(size=(P, P))
    Q = 0.05 * (B @ B.T / P + np.eye(P))
    H = rng.normal(size=(K, P))
    R = np.diag([0.3, 0.5])
    x = rng.normal(size=P)
    # hand-written Kalman filter (moment form)
    mean, cov = np.zeros(P), np.eye(P)
    state = update.init(m=np.zeros(P), S=np.eye(P))
    for t in range(100):
        x = A @ x + rng.multivariate_normal(np.zeros(P), Q)
        y = H @ x + rng.multivariate_normal(np.zeros(K), R)
        mean, cov = A @ mean, A @ cov @ A.T + Q                         # predict
        G = cov @ H.T @ np.linalg.inv(H @ cov @ H.T + R)                 # gain
        mean, cov = mean + G @ (y - H @ mean), (np.eye(P) - G @ H) @ cov  # update
        if one_step:
            state = kf.step(state, data={"y": y, "H": H, "Rinv": np.linalg.inv(R), "A": A, "Q": Q})
        else:
            state = predict.step(state, data={"A": A, "Q": Q})
            state = update.step(state, data={"y": y, "H": H, "Rinv": np.linalg.inv(R)})
        np.testing.assert_allclose(state["m"], mean, rtol=0, atol=1e-10)
        np.testing.assert_allclose(np.linalg.inv(state["S"]), cov, rtol=0, atol=1e-10)
    assert np.linalg.norm(state["m"] - x) < 3 * np.sqrt(np.trace(cov)) + 1.0   # it tracks the state
