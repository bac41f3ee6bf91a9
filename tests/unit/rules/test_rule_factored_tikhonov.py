"""factored_tikhonov (a convention; Martens & Grosse 2015 Sec. 6.3, Zhang et al. 2018 Eq. 18): the prior
δ‖W‖²/2 adds δM to the gradient and δI to the Hessian, split between the factors as π√δ I and (√δ/π) I.

Checked on the generated step at ρ = 1 (the new factors are then the damped targets): the product of the factors
differs from L ⊗ R + δI by exactly the dropped cross terms √δ(π I ⊗ R + L ⊗ I/π); the mean step uses g + δM."""
import numpy as np
import pytest

from blr_derive import api
from blr_derive.core.errors import SpecError
from kronecker_recipes import compiled, recipe_text

D_OUT, D_IN = 2, 3


def setup(seed=0):
    rng = np.random.default_rng(seed)
    X, b = rng.normal(size=(5, D_IN)), rng.normal(size=(4, D_OUT))
    g, M = rng.normal(size=(D_OUT, D_IN)), rng.normal(size=(D_OUT, D_IN))
    return X, b, g, M


def step(kind, X, b, g, M, **hp):
    mod = compiled(kind)
    return mod.step(mod.init(M=M, A=np.eye(D_IN), G=np.eye(D_OUT)),
                    oracles={"grad": lambda W: g, "activations": lambda W: X, "output_grads": lambda W: b}, **hp)


def test_the_split_drops_exactly_the_cross_terms():
    X, b, g, M = setup()
    delta, pi, ess = 0.8, 2.5, 3.0
    out = step("full", X, b, g, M, rho=1.0, ess=ess, delta=delta, pi=pi)
    L, R = ess * X.T @ X, b.T @ b
    np.testing.assert_allclose(out["A"], L + pi * np.sqrt(delta) * np.eye(D_IN), rtol=1e-13)
    np.testing.assert_allclose(out["G"], R + np.sqrt(delta) / pi * np.eye(D_OUT), rtol=1e-13)
    exact = np.kron(L, R) + delta * np.eye(D_IN * D_OUT)
    cross = np.sqrt(delta) * (pi * np.kron(np.eye(D_IN), R) + np.kron(L, np.eye(D_OUT)) / pi)
    np.testing.assert_allclose(np.kron(out["A"], out["G"]) - exact, cross, rtol=1e-12, atol=1e-12)
    # the prior's gradient δM enters the mean step
    V = ess * g + delta * M
    expected = M - np.linalg.solve(out["G"], V) @ np.linalg.inv(out["A"])
    np.testing.assert_allclose(out["M"], expected, rtol=1e-12, atol=1e-13)


def test_no_prior_is_exact_and_equals_the_recipe_without_the_rule():
    X, b, g, M = setup(1)
    with_rule = step("full", X, b, g, M, rho=0.4, ess=2.0, delta=0.0, pi=3.0)
    without = step("no_prior", X, b, g, M, rho=0.4, ess=2.0)
    for k in ("M", "A", "G"):
        np.testing.assert_allclose(with_rule[k], without[k], rtol=1e-14, atol=1e-15)


def test_a_negative_prior_is_a_located_error():
    approx = ["delta", "kronecker_gauss_newton", {"factored_tikhonov": {"prior": -1}}, "kronecker_ema"]
    with pytest.raises(SpecError, match="prior must be nonnegative") as exc:
        api.derive(recipe_text(approx))
    assert exc.value.line is not None


def test_the_split_needs_a_kronecker_hessian_first():
    approx = ["delta", {"factored_tikhonov": {"prior": "delta"}}, "kronecker_ema"]
    with pytest.raises(SpecError, match="name a Kronecker Hessian rule before it") as exc:
        api.derive(recipe_text(approx))
    assert exc.value.line is not None
