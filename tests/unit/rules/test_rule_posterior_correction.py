"""Rule ``posterior_correction`` (Khan 2025; Daheim et al. 2026; on Eq. 6 with the delta method, Eqs. 10-13):
the batch's natural gradient at q is corrected by its value at the snapshot q_old and completed by the full-data
natural gradient at q_old,

    ∇_μ E_q[ℓ_B]  →  ∇_μ E_q[ℓ_B] − ∇_μ E_{q_old}[ℓ_B] + ∇_μ E_{q_old}[ℓ].

Checked numerically, never with the engine's formulas:

* the corrected step against Eq. 6 computed here, each of the three natural gradients by central differences
  in μ of Gauss-Hermite expectations (quadratic losses, where the delta method is exact);
* the step WITH the rule equals the step WITHOUT it on the oracles g' = g_B(m) − g_B(m_old) + ḡ +
  (H̄ − H_B(m_old))(m − m_old), H' = H_B(m) − H_B(m_old) + H̄ — what (g − Hm, H/2) of the three terms
  sums to — for the full Gaussian and a non-quadratic loss;
* the correction vanishes when the batch is the whole data set, and right after the snapshot (m = m_old) the
  step is the full-data step;
* unbiasedness (the point of SVRG): averaged over every batch of a partition, the corrected natural-parameter
  update equals the full-data BLR step (an exact enumeration, no sampling).
"""
import functools
import math

import numpy as np
import yaml

from blr_derive import api


@functools.lru_cache(maxsize=None)
def compiled(family, with_rule=True):
    approx = ["delta"] + (["posterior_correction"] if with_rule else [])
    return api.derive(yaml.safe_dump({"name": f"pc_{family}_{with_rule}", "family": family, "loss": "abstract",
                                      "hyperparameters": {"rho": 0.1}, "approximations": approx},
                                     sort_keys=False)).compile("numpy")


# ------------------------------------------------------------------------------------------ diagonal, quadrature
def test_diag_step_is_eq_6_with_the_three_natural_gradients_by_quadrature():
    mod = compiled("gaussian_diag")
    # ℓ_B(θ) = a_B(θ − c_B)²/2 (the batch, scaled to the data set), ℓ(θ) = a(θ − c)²/2 (all the data)
    aB, cB = np.array([2.0, 0.5, 1.2]), np.array([0.3, -1.0, 2.0])
    a, c = np.array([1.5, 0.8, 3.0]), np.array([-0.4, 0.6, 1.0])
    m, s = np.array([1.0, -0.5, 0.2]), np.array([2.0, 0.7, 4.0])
    m_old, s_old = np.array([0.3, 0.9, -1.1]), np.array([1.0, 3.0, 0.5])
    rho = 0.45
    out = mod.step(mod.init(m=m, s=s), oracles={"grad": lambda t: aB * (t - cB), "hess": lambda t: aB + 0 * t},
                   data={"m_old": m_old, "s_old": s_old, "grad_full": a * (m_old - c), "hess_full": a},
                   rho=rho)
    z, w = np.polynomial.hermite_e.hermegauss(8)
    w = w / math.sqrt(2 * math.pi)
    h = 1e-4

    def nat_grad(ai, ci, u1, u2):     # ∇_μ E_q[a(θ − c)²/2] by Gauss-Hermite and central differences
        def E(v1, v2):
            th = v1 + math.sqrt(v2 - v1 ** 2) * z
            return float(np.dot(w, ai * (th - ci) ** 2 / 2))
        return np.array([(E(u1 + h, u2) - E(u1 - h, u2)) / (2 * h), (E(u1, u2 + h) - E(u1, u2 - h)) / (2 * h)])

    for i in range(3):
        mu, mu_old = (m[i], m[i] ** 2 + 1 / s[i]), (m_old[i], m_old[i] ** 2 + 1 / s_old[i])
        G = nat_grad(aB[i], cB[i], *mu) - nat_grad(aB[i], cB[i], *mu_old) + nat_grad(a[i], c[i], *mu_old)
        lam = (1 - rho) * np.array([s[i] * m[i], -s[i] / 2]) - rho * G          # Eq. 6
        # E_q[ℓ] is a quadratic polynomial in μ: central differences are exact up to rounding ~1e-16/h
        np.testing.assert_allclose(out["s"][i], -2 * lam[1], rtol=1e-9)
        np.testing.assert_allclose(out["m"][i], lam[0] / (-2 * lam[1]), rtol=1e-9)


# ------------------------------------------------------------------------------------------ full Gaussian
A_MAT = np.array([[1.0, 0.4, -0.3], [0.2, -0.8, 0.5], [0.6, 0.1, 0.9], [-0.5, 0.7, 0.2], [0.3, 0.3, -0.6]])
C_VEC = np.array([0.3, -0.2, 0.5, 0.1, -0.4])


def site_grad(t, rows):
    """ℓ_i(θ) = log cosh(a_iᵀθ − c_i) + 0.1‖θ‖²/5 summed over ``rows`` (non-quadratic)."""
    A, c = A_MAT[rows], C_VEC[rows]
    return A.T @ np.tanh(A @ t - c) + 0.02 * len(rows) * t


def site_hess(t, rows):
    A, c = A_MAT[rows], C_VEC[rows]
    return A.T @ np.diag(1 - np.tanh(A @ t - c) ** 2) @ A + 0.02 * len(rows) * np.eye(3)


ALL = np.arange(5)


def batch(rows):
    k = len(ALL) / len(rows)                                 # the batch scaled to the data set
    return (lambda t: k * site_grad(t, rows)), (lambda t: k * site_hess(t, rows))


def snapshot(m_old):
    return {"m_old": m_old, "S_old": np.eye(3), "grad_full": site_grad(m_old, ALL), "hess_full": site_hess(m_old, ALL)}


def state(seed):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(3, 3))
    return rng.normal(size=3), B @ B.T + np.eye(3), rng.normal(size=3)


# The two programs compute the same sums in another grouping, with one 3×3 solve of condition < 1e2: ~1e-14
TOL = 1e-11


def test_full_gaussian_step_is_the_plain_step_on_the_corrected_oracles():
    with_, without = compiled("gaussian_full"), compiled("gaussian_full", with_rule=False)
    m, S, m_old = state(1)
    gB, HB = batch(np.array([0, 3]))
    data = snapshot(m_old)
    gbar, Hbar = data["grad_full"], data["hess_full"]
    g_corr = gB(m) - gB(m_old) + gbar + (Hbar - HB(m_old)) @ (m - m_old)
    H_corr = HB(m) - HB(m_old) + Hbar
    for rho in (0.2, 1.0):
        a = with_.step(with_.init(m=m, S=S), oracles={"grad": gB, "hess": HB}, data=data, rho=rho)
        b = without.step(without.init(m=m, S=S), oracles={"grad": lambda t: g_corr, "hess": lambda t: H_corr},
                         rho=rho)
        np.testing.assert_allclose(a["S"], b["S"], rtol=TOL, atol=TOL)
        np.testing.assert_allclose(a["m"], b["m"], rtol=TOL, atol=TOL)


def test_the_correction_vanishes_for_the_full_batch_and_at_the_snapshot():
    with_, without = compiled("gaussian_full"), compiled("gaussian_full", with_rule=False)
    m, S, m_old = state(2)
    full = {"grad": lambda t: site_grad(t, ALL), "hess": lambda t: site_hess(t, ALL)}
    plain = without.step(without.init(m=m, S=S), oracles=full, rho=0.3)
    # the batch is all the data: g_B(m) − g(m_old) + ḡ = g(m) and likewise for H
    a = with_.step(with_.init(m=m, S=S), oracles=full, data=snapshot(m_old), rho=0.3)
    # any batch, right after the snapshot (m_old = m): the full-data step
    gB, HB = batch(np.array([1, 2, 4]))
    b = with_.step(with_.init(m=m, S=S), oracles={"grad": gB, "hess": HB}, data=snapshot(m), rho=0.3)
    for out in (a, b):
        np.testing.assert_allclose(out["S"], plain["S"], rtol=TOL, atol=TOL)
        np.testing.assert_allclose(out["m"], plain["m"], rtol=TOL, atol=TOL)
    # while the uncorrected batch step is a different one
    c = without.step(without.init(m=m, S=S), oracles={"grad": gB, "hess": HB}, rho=0.3)
    assert np.abs(c["m"] - plain["m"]).max() > 1e-2


def test_averaged_over_the_batches_of_a_partition_the_corrected_step_is_the_full_step():
    """Each corrected natural gradient is linear in the batch oracles, and the batch means average to the full
    data, so the mean over the batches of λ_{t+1} = (Sm, −S/2)_{t+1} is the full-data BLR step, exactly."""
    with_, without = compiled("gaussian_full"), compiled("gaussian_full", with_rule=False)
    m, S, m_old = state(3)
    data = snapshot(m_old)
    partition = [np.array([0, 4]), np.array([1, 2]), np.array([3])]
    weights = [len(r) / 5 for r in partition]                # P(B) ∝ |B|, with scaling 5/|B|: E[g_B] = g
    lam1, lam2 = np.zeros(3), np.zeros((3, 3))
    for r, p in zip(partition, weights):
        gB, HB = batch(r)
        out = with_.step(with_.init(m=m, S=S), oracles={"grad": gB, "hess": HB}, data=data, rho=0.4)
        lam1 += p * out["S"] @ out["m"]
        lam2 += p * (-out["S"] / 2)
        assert np.abs(out["m"] - m).max() > 0
    full = without.step(without.init(m=m, S=S), oracles={"grad": lambda t: site_grad(t, ALL),
                                                         "hess": lambda t: site_hess(t, ALL)}, rho=0.4)
    np.testing.assert_allclose(lam2, -full["S"] / 2, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(lam1, full["S"] @ full["m"], rtol=TOL, atol=TOL)


# ------------------------------------------------------------------------------------------ sites: posterior
def test_sites_posterior_is_the_slides_geometric_mix_with_q_old():
    """``sites: posterior``: the sites of q_old stand for q_old itself, so Eq. 6 reads
    λ ← (1 − ρ)λ + ρλ_old − ρ(∇_μE_q[ℓ_B] − ∇_μE_{q_old}[ℓ_B]), the slides' q^{1−ρ} q_old^ρ Π_B exp(−ρ(ℓ̂_j − ℓ̂_{j|old})).
    Each natural gradient by Gauss-Hermite quadrature and central differences in μ (quadratic loss)."""
    text = yaml.safe_dump({"name": "pc_posterior", "family": "gaussian_diag", "loss": "abstract",
                           "hyperparameters": {"rho": 0.1}, "approximations": ["delta", "posterior_correction"],
                           "posterior_correction": {"old": {"m": "m_ckpt", "s": "s_ckpt"}, "sites": "posterior"}},
                          sort_keys=False)
    mod = api.derive(text).compile("numpy")
    aB, cB = np.array([2.0, 0.5, 1.2]), np.array([0.3, -1.0, 2.0])
    m, s = np.array([1.0, -0.5, 0.2]), np.array([2.0, 0.7, 4.0])
    m_old, s_old = np.array([0.3, 0.9, -1.1]), np.array([1.0, 3.0, 0.5])
    rho = 0.3
    out = mod.step(mod.init(m=m, s=s), oracles={"grad": lambda t: aB * (t - cB), "hess": lambda t: aB + 0 * t},
                   data={"m_ckpt": m_old, "s_ckpt": s_old}, rho=rho)
    z, w = np.polynomial.hermite_e.hermegauss(8)
    w = w / math.sqrt(2 * math.pi)
    h = 1e-4

    def nat_grad(ai, ci, u1, u2):
        def E(v1, v2):
            th = v1 + math.sqrt(v2 - v1 ** 2) * z
            return float(np.dot(w, ai * (th - ci) ** 2 / 2))
        return np.array([(E(u1 + h, u2) - E(u1 - h, u2)) / (2 * h), (E(u1, u2 + h) - E(u1, u2 - h)) / (2 * h)])

    for i in range(3):
        mu, mu_old = (m[i], m[i] ** 2 + 1 / s[i]), (m_old[i], m_old[i] ** 2 + 1 / s_old[i])
        lam, lam_old = np.array([s[i] * m[i], -s[i] / 2]), np.array([s_old[i] * m_old[i], -s_old[i] / 2])
        new = (1 - rho) * lam + rho * lam_old - rho * (nat_grad(aB[i], cB[i], *mu) - nat_grad(aB[i], cB[i], *mu_old))
        np.testing.assert_allclose(out["s"][i], -2 * new[1], rtol=1e-9)
        np.testing.assert_allclose(out["m"][i], new[0] / (-2 * new[1]), rtol=1e-9)
