"""``exponential_coordinates``: the step A ← A expm(ρM) agrees with Eq. 6 to first order in ρ (finite differences
in ρ against the plain BLR step), its M is the derived one, and the covariance A Aᵀ stays positive definite where
Eq. 6's precision does not."""
import numpy as np
import pytest

from blr_derive import api

PLAIN = """
name: plain_delta_full
title: plain
class_name: PlainDelta
family: gaussian_full
loss: abstract
learning_rate: rho
hyperparameters:
  rho: {default: 0.1, description: learning rate}
approximations:
  - delta
  - no_entropy
"""

EXPONENTIAL = PLAIN.replace("plain_delta_full", "expo_delta_full").replace(
    "  - no_entropy\n", "  - no_entropy\n  - exponential_coordinates: {S: A}\n")

H = np.array([[2.0, 0.6, 0.1], [0.6, 1.0, -0.3], [0.1, -0.3, 0.5]])
G = np.array([0.4, -1.0, 0.3])
M0 = np.array([0.3, 0.2, -0.1])
A0 = np.array([[0.9, 0.0, 0.0], [0.4, 0.7, 0.0], [-0.2, 0.1, 1.1]])
ORACLES = {"grad": lambda t: G, "hess": lambda t: H}


def modules():
    return api.derive(PLAIN).compile("numpy"), api.derive(EXPONENTIAL).compile("numpy")


def test_first_order_agreement_with_eq6_by_finite_differences_in_rho():
    plain, expo = modules()
    S0 = np.linalg.inv(A0 @ A0.T)
    errs = []
    for rho in (1e-2, 5e-3, 2.5e-3):
        p = plain.step({"m": M0, "S": S0}, oracles=ORACLES, rho=rho)
        e = expo.step({"m": M0, "A": A0}, oracles=ORACLES, rho=rho)
        C_p, C_e = np.linalg.inv(p["S"]), e["A"] @ e["A"].T
        errs.append(max(np.abs(C_p - C_e).max(), np.abs(p["m"] - e["m"]).max()))
        # the steps themselves are O(ρ): the difference is a higher order
        assert np.abs(C_e - A0 @ A0.T).max() > 50 * errs[-1]
    ratios = [errs[i] / errs[i + 1] for i in range(2)]
    np.testing.assert_allclose(ratios, [4.0, 4.0], rtol=0.05)        # O(ρ²): halving ρ quarters the difference


def test_local_coordinate_is_minus_half_A_T_H_A_and_the_mean_moves_along_its_tangent():
    _, expo = modules()
    rho = 0.7
    e = expo.step({"m": M0, "A": A0}, oracles=ORACLES, rho=rho)
    w, V = np.linalg.eigh(-A0.T @ H @ A0 / 2 * rho)      # Ċ = −C H C for Ṡ = H, M = ½A⁻¹ĊA⁻ᵀ = −½AᵀHA
    np.testing.assert_allclose(e["A"], A0 @ ((V * np.exp(w)) @ V.T), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(e["m"], M0 - rho * A0 @ A0.T @ G, rtol=1e-13)


def test_covariance_stays_positive_definite_where_eq6_does_not():
    plain, expo = modules()
    Hneg = H - 3.0 * np.eye(3)                          # an indefinite Hessian
    oracles = {"grad": lambda t: G, "hess": lambda t: Hneg}
    S0 = np.linalg.inv(A0 @ A0.T)
    assert np.linalg.eigvalsh(S0 + 2.0 * Hneg).min() < 0   # Eq. 6's precision S + ρH is no longer a precision:
    # the plain step leaves the family: its run-time domain check names the precision (before the checks it could
    # not even solve for its mean: LinAlgError)
    with pytest.raises(FloatingPointError, match=r"the new S is not positive definite \(smallest eigenvalue -"):
        plain.step({"m": M0, "S": S0}, oracles=oracles, rho=2.0)
    e = expo.step({"m": M0, "A": A0}, oracles=oracles, rho=2.0)
    assert np.linalg.eigvalsh(e["A"] @ e["A"].T).min() > 0


WITH_ENTROPY = PLAIN.replace("plain_delta_full", "expo_entropy_full").replace(
    "  - no_entropy\n", "  - exponential_coordinates: {S: A}\n")


def test_with_the_entropy_the_local_coordinate_is_half_identity_minus_half_A_T_H_A():
    """Eq. 6 with H(q): Ṡ = H − S, so Ċ = C − CHC and M = ½A⁻¹ĊA⁻ᵀ = ½(I − AᵀHA) (the inverse of the factor in
    AᵀA⁻ᵀ cancels); the fixed point of the step is C = H⁻¹, the BLR's posterior (a user case the catalog lacks)."""
    mod = api.derive(WITH_ENTROPY).compile("numpy")
    rho = 0.3
    e = mod.step({"m": M0, "A": A0}, oracles=ORACLES, rho=rho)
    w, V = np.linalg.eigh(rho * (np.eye(3) - A0.T @ H @ A0) / 2)
    np.testing.assert_allclose(e["A"], A0 @ ((V * np.exp(w)) @ V.T), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(e["m"], M0 - rho * A0 @ A0.T @ G, rtol=1e-13)
    st = {"m": M0, "A": A0}
    for _ in range(200):
        st = mod.step(st, oracles=ORACLES, rho=rho)
    np.testing.assert_allclose(st["A"] @ st["A"].T, np.linalg.inv(H), rtol=1e-10)
