"""``blr-derive check`` of a full-Gaussian recipe with ``natural_momentum`` (App. F, Eq. 80): the previous parameters
m_prev, S_prev start as copies of m, S, and check's random matrix state left them out, so every symbolic update was
undefined and check failed on a correct module ("no random input of 30 gave a finite symbolic update inside the
family").  They are now drawn near the state they copy, in its domain (S_prev positive definite), so the momentum
terms γ(λ_t − λ_{t−1}) are compared too.  The module's steps equal Eq. 80 in λ = (Sm, −S/2) written here."""
import numpy as np
import yaml

from blr_derive import api
from blr_derive.derive.driver import derive
from blr_derive.verify.recipe import check_recipe_updates
from blr_derive.verify.state import matrix_state

LINREG = yaml.safe_dump({
    "name": "linear_regression_momentum", "family": "gaussian_full",
    "loss": {"expression": "0.5*tau*(y - X*theta).T*(y - X*theta) + 0.5*delta*theta.T*theta",
             "data": {"X": {"shape": ["N", "P"]}, "y": {"shape": ["N"]}}},
    "approximations": ["exact", {"natural_momentum": {"momentum": "gam"}}],
    "hyperparameters": {"rho": 0.3, "gam": 0.5, "tau": 2.0, "delta": 1.0}})
NEWTON = yaml.safe_dump({
    "name": "newton_momentum", "family": "gaussian_full", "loss": "abstract",
    "approximations": ["delta", {"natural_momentum": {"momentum": "gam"}}],
    "hyperparameters": {"rho": 0.5, "gam": 0.3}})


def test_check_compares_the_momentum_terms_of_a_full_gaussian():
    for text in (LINREG, NEWTON):
        recipe = api.recipe(text)
        checks = {c.name: c for c in check_recipe_updates(recipe)}
        assert checks["generated update vs symbolic update"].value < 1e-12
        state = matrix_state(derive(recipe), np.random.default_rng(0), 3, {}, {})
        assert np.linalg.norm(state["S_prev"] - state["S"]) > 1e-3 and np.linalg.norm(state["m_prev"] - state["m"]) > 1e-3
        assert np.all(np.linalg.eigvalsh((state["S_prev"] + state["S_prev"].T) / 2) > 0)
        np.testing.assert_array_equal(state["S_prev"], state["S_prev"].T)


def test_linear_regression_with_natural_momentum_is_eq80():
    rng = np.random.default_rng(1)
    N, P, tau, delta, rho, gam = 20, 3, 2.0, 1.0, 0.3, 0.5
    X, y = rng.standard_normal((N, P)), rng.standard_normal(N)
    mod = api.derive(LINREG).compile("numpy")
    state = mod.init(m=np.zeros(P), S=np.eye(P), m_prev=np.zeros(P), S_prev=np.eye(P))
    m, S = np.zeros(P), np.eye(P)
    lam_prev = (S @ m, -S / 2)
    for _ in range(12):
        lam = (S @ m, -S / 2)
        EH = tau * X.T @ X + delta * np.eye(P)
        Eg = tau * X.T @ (X @ m - y) + delta * m
        new1 = (1 - rho) * lam[0] - rho * (Eg - EH @ m) + gam * (lam[0] - lam_prev[0])
        new2 = (1 - rho) * lam[1] - rho * EH / 2 + gam * (lam[1] - lam_prev[1])
        lam_prev, S = lam, -2 * new2
        m = np.linalg.solve(S, new1)
        state = mod.step(state, data={"X": X, "y": y})
        np.testing.assert_allclose(state["m"], m, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(state["S"], S, rtol=1e-12)
