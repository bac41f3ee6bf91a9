"""A data sum of |u| (least absolute deviations): its derivative is sympy's sign, whose derivative is the
distribution 2δ(u), which no target prints, so ``blr-derive RECIPE --target numpy`` of
``sum(abs(X*theta - y)) + 0.5*delta*theta.T*theta`` under `delta` stopped with an internal error (exit 3,
PrintMethodNotImplementedError: DiracDelta).  The derivative is now the grammar's sign (derivative 0 almost
everywhere, docs/recipe-format.md *Expressions*), so the delta method's Hessian of the data term is 0 and the step is
Eq. 6 with E[∇ℓ] ≈ Xᵀsign(Xm − y) + δm, E[∇²ℓ] ≈ δI (App. C); under `gauss_hermite` the natural gradient is the
rule's quadrature of sign(x) and, in Stein's form, of sign(x)z/σ (Eqs. 10–11)."""
import numpy as np
import yaml

from blr_derive import api


def recipe(approx):
    return yaml.safe_dump({
        "name": "least_absolute_deviations", "family": "gaussian_full",
        "loss": {"expression": "sum(abs(X*theta - y)) + 0.5*delta*theta.T*theta",
                 "data": {"X": {"shape": ["N", "P"]}, "y": {"shape": ["N"]}}},
        "approximations": [approx], "hyperparameters": {"rho": 0.2, "delta": 1.0}})


def blr(m, S, Eg, EH, rho):
    lam1 = (1 - rho) * S @ m - rho * (Eg - EH @ m)
    S_new = (1 - rho) * S + rho * EH
    return np.linalg.solve(S_new, lam1), S_new


def test_abs_in_a_data_sum_derives_and_steps_as_eq6_under_delta_and_gauss_hermite():
    rng = np.random.default_rng(14)
    N, P, rho, delta = 30, 3, 0.2, 1.0
    X = rng.standard_normal((N, P))
    y = X @ np.array([0.5, -1.0, 2.0]) + rng.laplace(size=N)
    z, w = np.polynomial.hermite_e.hermegauss(40)
    w = w / w.sum()
    for approx in ("delta", {"gauss_hermite": {"nodes": 40}}):
        d = api.derive(recipe(approx))
        mod = d.compile("numpy")
        assert "DiracDelta" not in d.code("numpy") and "DiracDelta" not in d.code("jax")
        state, m, S = mod.init(m=np.zeros(P), S=np.eye(P)), np.zeros(P), np.eye(P)
        for _ in range(15):
            eta = X @ m - y
            if approx == "delta":
                Eg, EH = X.T @ np.sign(eta) + delta * m, delta * np.eye(P)
            else:
                sig = np.sqrt(np.einsum("np,pq,nq->n", X, np.linalg.inv(S), X))
                x = eta[:, None] + sig[:, None] * z
                e1, e2 = (np.sign(x) * w).sum(1), (np.sign(x) * z * w).sum(1) / sig
                Eg, EH = X.T @ e1 + delta * m, X.T @ (e2[:, None] * X) + delta * np.eye(P)
            m, S = blr(m, S, Eg, EH, rho)
            state = mod.step(state, data={"X": X, "y": y})
            np.testing.assert_allclose(state["m"], m, rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(state["S"], S, rtol=1e-12, atol=1e-13)
        assert np.linalg.norm(m) > 1.0


def test_log1p_of_exp_differentiates_to_a_logistic_that_stays_finite():
    """sum(log1p(exp(2*X*theta - 2*y))) (softplus written with the grammar's log1p): its derivative was printed as
    expit(−η)·exp(η), inf·0 = NaN from η ≈ 710 on, so one Newton step (delta, ρ = 1) at a row with η = 800 raised
    'the new S is not positive definite (smallest eigenvalue nan)'.  Now e^η·σ(−η) is σ(η), the derivative of
    softplus; the step is m − H⁻¹g with g = δm + 2Xᵀσ(η), H = δI + 4Xᵀdiag(σ(η)(1 − σ(η)))X (App. C)."""
    text = yaml.safe_dump({
        "name": "softplus_by_log1p", "family": "gaussian_full",
        "loss": {"expression": "sum(log1p(exp(2*X*theta - 2*y))) + 0.5*delta*theta.T*theta",
                 "data": {"X": {"shape": ["N", "P"]}, "y": {"shape": ["N"]}}},
        "approximations": ["delta"], "hyperparameters": {"rho": 1.0, "delta": 0.01}})
    d = api.derive(text)
    mod = d.compile("numpy")
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    y = np.array([-400.0, 0.0, 1.0])
    out = mod.step(mod.init(m=np.zeros(2), S=np.eye(2)), data={"X": X, "y": y})
    sig = 1 / (1 + np.exp(-np.clip(-2 * y, -700, 700)))
    g = 2 * X.T @ sig
    H = 0.01 * np.eye(2) + 4 * X.T @ np.diag(sig * (1 - sig)) @ X
    np.testing.assert_allclose(out["S"], H, rtol=1e-14)
    np.testing.assert_allclose(out["m"], -np.linalg.solve(H, g), rtol=1e-12)
    jm = d.compile("jax")
    assert np.all(np.isfinite(np.asarray(jm.step(jm.init(m=np.zeros(2), S=np.eye(2)), data={"X": X, "y": y})["m"])))
