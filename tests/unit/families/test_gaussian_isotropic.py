"""The isotropic Gaussian N(θ | m, I/s) on R^P: T = (θ, θᵀθ), λ = (s m, -s/2), A declared.  Against
scipy.stats.multivariate_normal: μ = (m, mᵀm + P/s), entropy and log-density; the Fisher information as the
covariance of T in every direction d (dᵀFd = Var[d₁ᵀθ + d₂θᵀθ], in closed form for a Gaussian, and by Monte
Carlo with scipy's draws); `check`; and BLR steps: the delta method (s ← (1-ρ)s + ρ tr(H)/P) against Eq. 6 with
∇_μ E_q[ℓ] by central differences of the exact E_q[ℓ] of a quadratic loss, and the conjugate step (ρ = 1).
No sampler: samplers are declared for scalar variables only."""
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
    return load_family("gaussian_isotropic")


def point(seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=P), float(np.exp(rng.normal()))


def vals(fam, m, s):
    return {fam.params["m"].symbol: m.reshape(P, 1), fam.params["s"].symbol: s}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mu_entropy_density_match_scipy(fam, seed):
    m, s = point(seed)
    law = stats.multivariate_normal(m, np.eye(P) / s)
    v = vals(fam, m, s)
    mu1, mu2 = (np.asarray(fam.evaluate(e, v, P), dtype=float) for e in fam.mu_ord)
    np.testing.assert_allclose(mu1.ravel(), law.mean, rtol=1e-13)
    assert float(mu2) == pytest.approx(m @ m + np.trace(law.cov), rel=1e-13)
    x = law.rvs(200_000, random_state=np.random.default_rng(seed))
    t2 = np.sum(x**2, axis=1)
    assert abs(t2.mean() - float(mu2)) / (t2.std(ddof=1) / np.sqrt(len(t2))) < 5
    assert float(fam.evaluate(fam.entropy(), v, P)) == pytest.approx(law.entropy(), rel=1e-12)
    logq = fam.log_density()
    for xi in x[:5]:
        got = float(fam.evaluate(logq, {**v, fam.theta: xi.reshape(P, 1)}, P))
        assert got == pytest.approx(law.logpdf(xi), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_fisher_is_the_covariance_of_T(fam, seed):
    m, s = point(seed)
    v = vals(fam, m, s)
    lam = {l: np.asarray(fam.evaluate(e, v, P), dtype=float) for l, e in zip(fam.lam, fam.eta)}
    dl, dmu = fam.fisher_operator()
    rng = np.random.default_rng(10 + seed)
    x = stats.multivariate_normal(m, np.eye(P) / s).rvs(400_000, random_state=rng)
    for _ in range(3):
        d1, d2 = rng.normal(size=P), float(rng.normal())
        at = {**lam, dl[0]: d1.reshape(P, 1), dl[1]: d2}
        quad = float(d1 @ np.asarray(fam.evaluate(dmu[0], at, P), dtype=float).ravel()
                     + d2 * float(fam.evaluate(dmu[1], at, P)))
        a = 2 * d2 * m + d1                       # Var[d₁ᵀθ + d₂θᵀθ] for θ ~ N(m, I/s)
        assert quad == pytest.approx(2 * d2**2 * P / s**2 + a @ a / s, rel=1e-12)
        w = x @ d1 + d2 * np.sum(x**2, axis=1)
        v_mc, se = w.var(ddof=1), w.var(ddof=1) * np.sqrt(2 / len(w)) * 2
        assert abs(v_mc - quad) < 5 * se


def test_check_passes(fam):
    checks = check_family(fam, points=3, seed=0, dim=2)
    # 10 checks of every family, and the gaussian declaration's: its moments and its draws (the sampler)
    assert len(checks) == 12 and all(c.passed for c in checks), [c for c in checks if not c.passed]
    assert {"gaussian_vs_density", "sampler_vs_density"} <= {c.name for c in checks}


def test_delta_step_against_eq6_by_finite_differences():
    """ℓ(θ) = ½θᵀAθ - bᵀθ: E_q[ℓ] = ½(mᵀAm + tr(A)/s) - bᵀm exactly, written in μ = (m, mᵀm + P/s); its gradient
    by central differences gives λ' = (1-ρ)λ - ρ∇_μE_q[ℓ] (Eq. 6), which the delta step with g = Am - b, H = A
    reproduces (delta is exact for a quadratic loss)."""
    mod = api.derive(yaml.safe_dump({"name": "iso_newton", "family": "gaussian_isotropic", "loss": "abstract",
                                     "hyperparameters": {"rho": 0.5}, "approximations": ["delta"]},
                                    sort_keys=False)).compile("numpy")
    rng = np.random.default_rng(3)
    B = rng.normal(size=(P, P))
    A, b = B @ B.T + np.eye(P), rng.normal(size=P)
    m, s, rho = rng.normal(size=P), 1.7, 0.3

    def e_loss(mu1, mu2):
        mm, v = mu1, (mu2 - mu1 @ mu1) / P
        return 0.5 * (mm @ A @ mm + np.trace(A) * v) - b @ mm
    mu1, mu2, eps = m, m @ m + P / s, 1e-5
    g1 = np.array([(e_loss(mu1 + eps * e, mu2) - e_loss(mu1 - eps * e, mu2)) / (2 * eps) for e in np.eye(P)])
    g2 = (e_loss(mu1, mu2 + eps) - e_loss(mu1, mu2 - eps)) / (2 * eps)
    l1, l2 = (1 - rho) * s * m - rho * g1, (1 - rho) * (-s / 2) - rho * g2
    out = mod.step(mod.init(m=m, s=np.array(s)), oracles={"grad": lambda x: A @ x - b, "hess": lambda x: A}, rho=rho)
    assert float(out["s"]) == pytest.approx(-2 * l2, rel=1e-8)
    np.testing.assert_allclose(out["m"], l1 / (-2 * l2), rtol=1e-8)
    assert float(out["s"]) == pytest.approx((1 - rho) * s + rho * np.trace(A) / P, rel=1e-13)


def test_conjugate_step_with_isotropic_gaussian_data():
    """Data y_i ~ N(θ, I/c) (a flat prior): the loss c/2 Σ|y_i - θ|² is linear in T, so one step with ρ = 1 is the
    posterior N(ȳ, I/(n c)) (Sec. 5.1; family_prior takes scalar natural parameters only)."""
    mod = api.derive(yaml.safe_dump({
        "name": "iso_conjugate", "family": "gaussian_isotropic",
        "loss": {"expression": "n*c*tr(theta.T*theta)/2 - c*ysum.T*theta",
                 "data": {"n": {}, "ysum": {"shape": ["P"]}}},
        "hyperparameters": {"c": 1.0}, "approximations": ["exact", "unit_learning_rate"]},
        sort_keys=False)).compile("numpy")
    y = np.random.default_rng(4).normal(1.0, 0.5, size=(6, P))
    c = 4.0
    out = mod.step(mod.init(m=np.zeros(P), s=np.array(1.0)), data={"n": len(y), "ysum": y.sum(axis=0)}, c=c)
    assert float(out["s"]) == pytest.approx(len(y) * c, rel=1e-13)
    np.testing.assert_allclose(out["m"], y.mean(axis=0), rtol=1e-13)
