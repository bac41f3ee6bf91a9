"""The multivariate Gaussian in its moment parameters, N(θ | m, Σ): T = (θ, θθᵀ), λ = (Σ⁻¹m, -Σ⁻¹/2), A declared.
Against scipy.stats.multivariate_normal: μ = (m, Σ + mmᵀ), entropy, log-density; the Fisher information as the
covariance of T in random directions (dᵀFd = Var[d₁ᵀθ + θᵀD₂θ] = 2tr(D₂ΣD₂Σ) + (2D₂m + d₁)ᵀΣ(2D₂m + d₁)); `check`;
and a delta-method BLR step against Eq. 6 written by hand in covariance form (Σ' = ((1-ρ)Σ⁻¹ + ρH)⁻¹,
m' = m - ρΣ'g) and against gaussian_full's step at S = Σ⁻¹.  No sampler: samplers are for scalar variables."""
import numpy as np
import pytest
import yaml
from scipy import stats

from blr_derive import api
from blr_derive.families.library import load_family
from blr_derive.verify.family import check_family

P = 3


@pytest.fixture(scope="module")
def fam():
    return load_family("gaussian_mean_covariance")


def point(seed):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(P, P))
    return rng.normal(size=P), B @ B.T / P + 0.5 * np.eye(P)


def vals(fam, m, C):
    return {fam.params["m"].symbol: m.reshape(P, 1), fam.params["Sigma"].symbol: C}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mu_entropy_density_match_scipy(fam, seed):
    m, C = point(seed)
    law = stats.multivariate_normal(m, C)
    v = vals(fam, m, C)
    mu1, mu2 = (np.asarray(fam.evaluate(e, v, P), dtype=float) for e in fam.mu_ord)
    np.testing.assert_allclose(mu1.ravel(), law.mean, rtol=1e-13)
    np.testing.assert_allclose(mu2, law.cov + np.outer(m, m), rtol=1e-13)
    lam = {l: np.asarray(fam.evaluate(e, v, P), dtype=float) for l, e in zip(fam.lam, fam.eta)}
    np.testing.assert_allclose(np.asarray(fam.evaluate(fam.mu_of_lam[1], lam, P), dtype=float), mu2, rtol=1e-11)
    assert float(fam.evaluate(fam.entropy(), v, P)) == pytest.approx(law.entropy(), rel=1e-12)
    logq = fam.log_density()
    for x in law.rvs(4, random_state=np.random.default_rng(seed)):
        assert float(fam.evaluate(logq, {**v, fam.theta: x.reshape(P, 1)}, P)) == pytest.approx(law.logpdf(x),
                                                                                                 rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_fisher_is_the_covariance_of_T(fam, seed):
    m, C = point(seed)
    v = vals(fam, m, C)
    lam = {l: np.asarray(fam.evaluate(e, v, P), dtype=float) for l, e in zip(fam.lam, fam.eta)}
    dl, dmu = fam.fisher_operator()
    rng = np.random.default_rng(20 + seed)
    x = stats.multivariate_normal(m, C).rvs(400_000, random_state=rng)
    for _ in range(3):
        d1, E = rng.normal(size=P), rng.normal(size=(P, P))
        D2 = (E + E.T) / 2
        at = {**lam, dl[0]: d1.reshape(P, 1), dl[1]: D2}
        quad = float(d1 @ np.asarray(fam.evaluate(dmu[0], at, P), dtype=float).ravel()
                     + np.sum(D2 * np.asarray(fam.evaluate(dmu[1], at, P), dtype=float)))
        a = 2 * D2 @ m + d1
        assert quad == pytest.approx(2 * np.trace(D2 @ C @ D2 @ C) + a @ C @ a, rel=1e-11)
        w = x @ d1 + np.einsum("ni,ij,nj->n", x, D2, x)
        assert abs(w.var(ddof=1) - quad) < 5 * quad * np.sqrt(2 / len(w)) * 3


def test_check_passes(fam):
    checks = check_family(fam, points=3, seed=0, dim=2)
    # 10 checks of every family, and the gaussian declaration's: its moments and its draws (the sampler)
    assert len(checks) == 12 and all(c.passed for c in checks), [c for c in checks if not c.passed]
    assert {"gaussian_vs_density", "sampler_vs_density"} <= {c.name for c in checks}


def test_delta_step_in_covariance_form():
    spec = {"loss": "abstract", "hyperparameters": {"rho": 0.5}, "approximations": ["delta"]}
    mod = api.derive(yaml.safe_dump({"name": "mc_newton", "family": "gaussian_mean_covariance", **spec},
                                    sort_keys=False)).compile("numpy")
    full = api.derive(yaml.safe_dump({"name": "full_newton", "family": "gaussian_full", **spec},
                                     sort_keys=False)).compile("numpy")
    m, C = point(5)
    rng = np.random.default_rng(6)
    B = rng.normal(size=(P, P))
    H, g0 = B @ B.T + 0.2 * np.eye(P), rng.normal(size=P)
    oracles = {"grad": lambda x: g0 + H @ x, "hess": lambda x: H}
    rho = 0.3
    out = mod.step(mod.init(m=m, Sigma=C), oracles=oracles, rho=rho)
    g = g0 + H @ m
    # Eq. 6 by hand: λ₂' = (1-ρ)(-Σ⁻¹/2) - ρH/2, λ₁' = (1-ρ)Σ⁻¹m - ρ(g - Hm)
    S_new = (1 - rho) * np.linalg.inv(C) + rho * H
    l1 = (1 - rho) * np.linalg.solve(C, m) - rho * (g - H @ m)
    np.testing.assert_allclose(out["Sigma"], np.linalg.inv(S_new), rtol=1e-11)
    np.testing.assert_allclose(out["m"], np.linalg.solve(S_new, l1), rtol=1e-11)
    np.testing.assert_allclose(out["m"], m - rho * np.linalg.inv(S_new) @ g, rtol=1e-11)
    ref = full.step(full.init(m=m, S=np.linalg.inv(C)), oracles=oracles, rho=rho)
    np.testing.assert_allclose(out["Sigma"], np.linalg.inv(ref["S"]), rtol=1e-11)
    np.testing.assert_allclose(out["m"], ref["m"], rtol=1e-11)
