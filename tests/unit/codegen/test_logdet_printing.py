"""log det X is printed as ``_logdet(X)`` (numpy/jnp.linalg.slogdet), not log(det(X)) (helper-75's hunt): det
overflows to inf beyond 1e308, so

* the entropy −½ log det S of a Gaussian over P = 400 coordinates at precision 1e3 (det S = 1e1200) was −inf and
  the objective inf;
* em_gmm's E-step ½ log det L over 50 features of scale 1e-4 (det L = 1e400) was inf: the step raised
  "array must not contain infs or NaNs" where scikit-learn fits.

References: the closed-form entropy P/2 (1 + log 2π) − ½ P log s, scikit-learn's GaussianMixture, and log det's
own values at a singular (−inf) and a negative-determinant (NaN) matrix.
"""
import warnings

import numpy as np
import pytest

from conftest import load_generated


def test_entropy_of_a_wide_gaussian_is_finite():
    mod = load_generated("bayesian_linear_regression")
    P, N = 400, 30
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((N, P)), rng.standard_normal(N)
    out = mod.objective(mod.init(m=np.zeros(P), S=1e3 * np.eye(P)), data={"X": X, "y": y})
    np.testing.assert_allclose(out["entropy"], P / 2 * (1 + np.log(2 * np.pi)) - P / 2 * np.log(1e3), rtol=1e-13)
    assert np.isfinite(out["objective"])


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_logdet_keeps_the_values_of_log_det(target, x64):
    mod = load_generated("bayesian_linear_regression", target)
    with np.errstate(divide="ignore", invalid="ignore"):
        vals = [float(mod._logdet(np.asarray(a, dtype=float)))
                for a in ([[2.0, 0.0], [0.0, 3.0]], [[1.0, 1.0], [1.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]])]
    assert vals[0] == pytest.approx(np.log(6.0), rel=1e-15)
    assert vals[1] == -np.inf and np.isnan(vals[2])
    stacked = np.asarray(mod._logdet(np.array([np.eye(3) * 1e150, np.eye(3) * 1e-150])))
    np.testing.assert_allclose(stacked, [3 * np.log(1e150), 3 * np.log(1e-150)], rtol=1e-15)


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_em_gmm_with_fifty_small_scale_features_equals_sklearn(target, x64):
    from sklearn.mixture import GaussianMixture
    mod = load_generated("em_gmm", target)
    rng = np.random.default_rng(0)
    P, K, N = 50, 2, 2000
    C = rng.standard_normal((K, P)) * 1e-3
    Y = C[rng.integers(K, size=N)] + 1e-4 * rng.standard_normal((N, P))
    w0, m0, L0 = np.array([0.5, 0.5]), Y[:2].copy(), np.array([np.eye(P) * 1e8] * K)
    state = mod.init(pi=w0, m=m0, L=L0)
    for _ in range(10):
        out = mod.step(state, data={"y": Y})
        state = {k: np.asarray(out[k]) for k in ("pi", "m", "L")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # ConvergenceWarning: tol=0 never "converges"
        gm = GaussianMixture(K, covariance_type="full", max_iter=10, tol=0, reg_covar=0, weights_init=w0,
                             means_init=m0, precisions_init=L0).fit(Y)
    np.testing.assert_allclose(state["pi"], gm.weights_, rtol=1e-9)
    np.testing.assert_allclose(state["m"], gm.means_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(state["L"] / 1e8, gm.precisions_ / 1e8, rtol=0, atol=1e-6)
