"""``elementwise_exponential`` (evosax's xNES convention): the factor's step is A ∘ exp(ρM) entrywise instead of
A expm(ρM); a diagonal factor stays diagonal, and on a diagonal M both steps agree exactly."""
import numpy as np

from blr_derive import api

RECIPE = """
name: entrywise_delta_full
title: entrywise
class_name: EntrywiseDelta
family: gaussian_full
loss: abstract
learning_rate: rho
hyperparameters:
  rho: {default: 0.1, description: learning rate}
approximations:
  - delta
  - no_entropy
  - exponential_coordinates: {S: A}
"""


def modules():
    return (api.derive(RECIPE).compile("numpy"),
            api.derive(RECIPE.replace("entrywise_delta_full", "entrywise_delta_full2") +
                       "  - elementwise_exponential: {param: A}\n").compile("numpy"))


def test_entrywise_step_values_and_diagonal_factor_stays_diagonal():
    expm_mod, entry_mod = modules()
    H = np.array([[2.0, 0.6], [0.6, 1.0]])
    g = np.array([0.4, -1.0])
    A = np.diag([0.8, 1.3])
    m = np.array([0.1, 0.2])
    o = entry_mod.step({"m": m, "A": A}, oracles={"grad": lambda t: g, "hess": lambda t: H}, rho=0.3)
    M = -A.T @ H @ A / 2                                  # the local coordinate derived by exponential_coordinates
    np.testing.assert_allclose(o["A"], A * np.exp(0.3 * M), rtol=1e-14)
    assert o["A"][0, 1] == 0.0 and o["A"][1, 0] == 0.0
    e = expm_mod.step({"m": m, "A": A}, oracles={"grad": lambda t: g, "hess": lambda t: H}, rho=0.3)
    assert abs(e["A"][0, 1]) > 1e-3                       # the matrix exponential couples the coordinates
    np.testing.assert_allclose(o["m"], e["m"], rtol=1e-15)   # the mean's step is the same
    # on a diagonal Hessian (M diagonal) the two steps agree
    D = np.diag([2.0, 0.5])
    o = entry_mod.step({"m": m, "A": A}, oracles={"grad": lambda t: g, "hess": lambda t: D}, rho=0.3)
    e = expm_mod.step({"m": m, "A": A}, oracles={"grad": lambda t: g, "hess": lambda t: D}, rho=0.3)
    np.testing.assert_allclose(o["A"], e["A"], rtol=1e-14, atol=1e-300)
