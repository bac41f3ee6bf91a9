"""Data sums under ``gaussian_isotropic`` (N(m, I/s)): the covariance of Xθ is the matrix expression (1/s)·I,
which ``doit`` leaves a product with an ``Identity`` at numbers.  The nodes of a data sum (``RowQuadForm``,
``GaussHermite``, ``Elementwise``, ``DiagOf``) now evaluate it as the explicit matrix it is; before,
``blr-derive check`` of Poisson regression (`exact`) or logistic regression (`gauss_hermite`) over the isotropic
Gaussian stopped with ``internal error: NotImplementedError: Indexing not implemented for RowQuadForm``."""
from __future__ import annotations

import numpy as np
import sympy as sp
from scipy.special import expit

from blr_derive import api
from blr_derive.core.nodes import RowQuadForm
from blr_derive.verify.recipe import check_recipe_updates

RECIPE = """
name: {name}
family: gaussian_isotropic
loss:
  expression: {loss}
  data:
    X: {{shape: [N, P]}}
    y: {{shape: [N]}}
approximations:
  - {rule}
hyperparameters:
  rho: {{default: 0.3}}
  delta: {{default: 1.0}}
"""
POISSON = RECIPE.format(name="poisson_isotropic", rule="exact",
                        loss="sum(exp(X*theta)) - y.T*X*theta + 0.5*delta*theta.T*theta")
LOGISTIC = RECIPE.format(name="logistic_isotropic", rule="{gauss_hermite: {nodes: 32}}",
                         loss="sum(softplus(X*theta)) - y.T*X*theta + 0.5*delta*theta.T*theta")


def test_row_quad_form_of_a_scaled_identity_is_the_row_norms():
    X = sp.ImmutableMatrix([[1.0, 2.0, 0.5], [-1.0, 0.0, 3.0]])
    got = RowQuadForm(X, sp.Identity(3) / sp.Float(2.5)).doit()
    assert isinstance(got, sp.MatrixBase)
    np.testing.assert_allclose(np.array(got.tolist(), dtype=float).ravel(), [5.25 / 2.5, 10.0 / 2.5], rtol=1e-15)


def blr_isotropic(m, s, Eg, EH, rho, P):
    """Eq. 6 in λ = (s m, −s/2) with T = (θ, θᵀθ): ∇_μ E[ℓ] = (E∇ℓ − c m, c/2), c = tr E[∇²ℓ]/P (Bonnet, Price)."""
    c = np.trace(EH) / P
    lam2 = (1 - rho) * (-s / 2) - rho * c / 2
    lam1 = (1 - rho) * s * m - rho * (Eg - c * m)
    return lam1 / (-2 * lam2), -2 * lam2


def test_check_passes_and_steps_are_eq6_for_poisson_and_logistic_regression():
    rng = np.random.default_rng(3)
    N, P, rho, delta = 25, 4, 0.3, 1.0
    X = 0.5 * rng.standard_normal((N, P))
    ys = {"poisson_isotropic": rng.poisson(1.3, N).astype(float),
          "logistic_isotropic": (rng.random(N) < 0.4).astype(float)}
    z, w = np.polynomial.hermite_e.hermegauss(32)
    w = w / w.sum()

    def moments(name, m, s, y):
        eta, sig = X @ m, np.sqrt((X * X).sum(1) / s)
        if name == "poisson_isotropic":          # E[e^x] = e^{η + σ²/2}
            e1 = e2 = np.exp(eta + sig ** 2 / 2)
        else:                                    # 32-node Gauss–Hermite, E[f''] in Stein's form E[f'(x) z]/σ
            pts = eta[:, None] + sig[:, None] * z
            e1, e2 = (expit(pts) * w).sum(1), (expit(pts) * z * w).sum(1) / sig
        return X.T @ (e1 - y) + delta * m, X.T @ (e2[:, None] * X) + delta * np.eye(P)

    for text in (POISSON, LOGISTIC):
        recipe = api.recipe(text)
        checks = {c.name: c for c in check_recipe_updates(recipe)}
        assert checks["generated update vs symbolic update"].value < 1e-12
        assert checks["natural gradient vs finite differences"].value < 1e-6
        mod = api.derive(text).compile("numpy")
        y = ys[recipe.name]
        state, m, s = mod.init(m=np.zeros(P), s=1.0), np.zeros(P), 1.0
        for _ in range(8):
            m, s = blr_isotropic(m, s, *moments(recipe.name, m, s, y), rho, P)
            state = mod.step(state, data={"X": X, "y": y})
            np.testing.assert_allclose(state["m"], m, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(state["s"], s, rtol=1e-12)
        assert s > 2.0                                # the precision has moved away from its start
