"""Logistic regression written as users write it (docs/recipe-format.md grammar): softplus, log(1 + exp(-u)),
log1p(exp(-u)), -log(sigmoid(u)), -log(1/(1 + exp(-u))) and -log(e^u/(1 + e^u)), u = z·θ with the ±1 labels
multiplied into the rows of Z, and a Gaussian prior, over the full Gaussian with the delta method and ρ = 1 (Newton's
method, Sec. 1.3.2 Eqs. 8-9).  Every spelling is the same loss; all but softplus differentiated to e^{-u}·expit(u),
which is inf·0 = NaN once a margin is below -709, so the first step from a far start raised "the new S is not
positive definite (smallest eigenvalue nan)" and blamed the loss's convexity.  The grammar now writes a log of a
product with a (1 + e^a)^k factor with softplus (blr_derive/core/specialfns.py log_softplus_form).  Reference:
Newton's method written here with scipy's expit."""
import textwrap

import numpy as np
import pytest
from scipy.special import expit

from blr_derive import api

SPELLINGS = ["sum(softplus(-(Z*theta)))", "sum(log(1 + exp(-(Z*theta))))", "sum(log1p(exp(-(Z*theta))))",
             "-sum(log(sigmoid(Z*theta)))", "-sum(log(1/(1 + exp(-(Z*theta)))))",
             "-sum(log(exp(Z*theta)/(1 + exp(Z*theta))))"]


def _recipe(loss):
    return textwrap.dedent(f"""
        name: logistic_newton
        family: gaussian_full
        loss:
          expression: {loss} + 0.5*alpha*theta.T*theta
          data:
            Z: {{shape: [N, P], description: "inputs times labels"}}
        hyperparameters:
          alpha: {{default: 1.0}}
        approximations: [delta, unit_learning_rate]
    """)


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = np.where(X @ np.array([3.0, -2.0, 5.0]) + 0.3 * rng.normal(size=200) > 0, 1.0, -1.0)
    return y[:, None] * X


def _newton(Z, t):
    g = -Z.T @ expit(-(Z @ t)) + t
    H = Z.T @ ((expit(Z @ t) * expit(-(Z @ t)))[:, None] * Z) + np.eye(len(t))
    return t - np.linalg.solve(H, g), H


@pytest.mark.parametrize("loss", SPELLINGS)
def test_every_spelling_of_the_logistic_loss_steps_like_newton_from_far(loss):
    mod = api.derive(_recipe(loss)).compile("numpy")
    Z = _data()
    m = np.array([-400.0, 400.0, -400.0])            # margins down to -2000: e^{-u} overflows
    state = mod.init(m=m, S=np.eye(3))
    with np.errstate(over="raise", invalid="raise"):  # no overflow on the way either
        for _ in range(3):
            state = mod.step(state, data={"Z": Z})
            m, H = _newton(Z, m)
            np.testing.assert_allclose(state["m"], m, rtol=1e-12, atol=1e-12 * np.max(np.abs(m)))
            np.testing.assert_allclose(state["S"], H, rtol=1e-12, atol=1e-12)
