"""kronecker_ema (a convention; Zhang et al. 2018 Eq. 17): the BLR's precision update (1-ρ)A ⊗ G + ρ L ⊗ R kept
Kronecker factor by factor, A ← (1-ρ)A + ρL, G ← (1-ρ)G + ρR (optional factor rate β).

Checked numerically: the factors are those moving averages; their product equals the full-Gaussian update for
ρ = 1 and misses it by -ρ(1-ρ)(A - L) ⊗ (G - R) otherwise (the identity behind the projection's error)."""
import numpy as np
import pytest

from blr_derive import api
from blr_derive.core.errors import SpecError
from kronecker_recipes import compiled, recipe_text

D_OUT, D_IN = 3, 2


def run(kind, rho, **hp):
    rng = np.random.default_rng(4)
    X, b = rng.normal(size=(6, D_IN)), rng.normal(size=(5, D_OUT))
    QA, QG = rng.normal(size=(D_IN, D_IN)), rng.normal(size=(D_OUT, D_OUT))
    A, G = QA @ QA.T + np.eye(D_IN), QG @ QG.T + np.eye(D_OUT)
    mod = compiled(kind)
    out = mod.step(mod.init(M=np.zeros((D_OUT, D_IN)), A=A, G=G),
                   oracles={"grad": lambda W: np.ones_like(W), "activations": lambda W: X,
                            "output_grads": lambda W: b}, rho=rho, **hp)
    return out, A, G, X.T @ X, b.T @ b


@pytest.mark.parametrize("rho", [1.0, 0.35])
def test_each_factor_is_a_moving_average_and_the_error_is_the_cross_product(rho):
    out, A, G, L, R = run("no_prior", rho)
    np.testing.assert_allclose(out["A"], (1 - rho) * A + rho * L, rtol=1e-14)
    np.testing.assert_allclose(out["G"], (1 - rho) * G + rho * R, rtol=1e-14)
    blr = (1 - rho) * np.kron(A, G) + rho * np.kron(L, R)
    gap = np.kron(out["A"], out["G"]) - blr
    np.testing.assert_allclose(gap, -rho * (1 - rho) * np.kron(A - L, G - R), rtol=0, atol=1e-12 * np.abs(blr).max())
    if rho == 1.0:
        assert np.abs(gap).max() == 0.0
    else:
        assert np.abs(gap).max() > 0.1


def test_a_separate_factor_rate():
    out, A, G, L, R = run("rate", 0.2, beta=0.6)
    np.testing.assert_allclose(out["A"], 0.4 * A + 0.6 * L, rtol=1e-14)
    np.testing.assert_allclose(out["G"], 0.4 * G + 0.6 * R, rtol=1e-14)
    mean_step = -0.2 * np.linalg.solve(out["G"], np.ones((D_OUT, D_IN))) @ np.linalg.inv(out["A"])
    np.testing.assert_allclose(out["M"], mean_step, rtol=1e-12)


def test_without_a_projection_the_precision_update_is_a_located_error():
    with pytest.raises(SpecError, match="add 'kronecker_ema'") as exc:
        api.derive(recipe_text(["delta", "kronecker_gauss_newton"]))
    assert exc.value.line is not None
