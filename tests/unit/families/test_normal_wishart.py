"""The normal–Wishart NW(θ, Λ | m, κ, V, n): Λ ~ W(V, n), θ | Λ ~ N(m, (κΛ)⁻¹), a variable of two components of
different shapes (a P-vector and a P×P positive-definite matrix), T = (Λθ, θᵀΛθ, Λ, log|Λ|), A declared.  Against
scipy.stats (wishart × multivariate_normal, which this file composes; scipy has no normal–Wishart): μ (closed forms
written here from E[Λ] = nV, and by Monte Carlo over scipy's draws), the log-density, the entropy (-E[log q] over
scipy's draws), the Fisher information as Var[<D, T>]; `check` (5 coordinates at P = 2: Λ's three by the DE rule,
θ's two by the exact Gauss–Hermite rule of its conditional Gaussian); the declared sampler against scipy's draws."""
import numpy as np
import pytest
from scipy import special, stats

from blr_derive.families.library import load_family
from blr_derive.verify.draws import draw_matrix_sampler as _draw_matrix_sampler
from blr_derive.verify.family import check_family

P = 3


@pytest.fixture(scope="module")
def fam():
    return load_family("normal_wishart")


def point(seed):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(P, P))
    return rng.normal(size=P), float(np.exp(0.5 * rng.normal())), B @ B.T / P + 0.5 * np.eye(P), \
        P - 1 + float(np.exp(0.5 * rng.normal())) + 0.3


def vals(fam, m, kappa, V, n):
    p = fam.params
    return {p["m"].symbol: m, p["kappa"].symbol: kappa, p["V"].symbol: V, p["n"].symbol: n}


def scipy_draws(m, kappa, V, n, N, seed):
    rng = np.random.default_rng(seed)
    Lam = stats.wishart(df=n, scale=V).rvs(N, random_state=rng)
    C = np.linalg.cholesky(np.linalg.inv(kappa * Lam))
    theta = m + np.einsum("nij,nj->ni", C, rng.standard_normal((N, P)))
    return theta, Lam


def scipy_logpdf(theta, Lam, m, kappa, V, n):
    """scipy's Wishart log-density plus the Gaussian's written with the precision κΛ (scipy's multivariate_normal
    takes a covariance, which a nearly singular draw of Λ does not give in floating point)."""
    d = theta - m
    gauss = -P / 2 * np.log(2 * np.pi) + 0.5 * np.linalg.slogdet(kappa * Lam)[1] - kappa / 2 * d @ Lam @ d
    return stats.wishart(df=n, scale=V).logpdf(Lam) + gauss


def T_of(theta, Lam):
    return (np.einsum("nij,nj->ni", Lam, theta), np.einsum("ni,nij,nj->n", theta, Lam, theta), Lam,
            np.linalg.slogdet(Lam)[1])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mu_entropy_density_match_scipy(fam, seed):
    m, kappa, V, n = point(seed)
    v = vals(fam, m, kappa, V, n)
    mu = [np.asarray(fam.evaluate(e, v, P), dtype=float) for e in fam.mu_ord]
    np.testing.assert_allclose(mu[0].ravel(), n * V @ m, rtol=1e-12)
    assert float(mu[1]) == pytest.approx(P / kappa + n * m @ V @ m, rel=1e-12)
    np.testing.assert_allclose(mu[2], stats.wishart(df=n, scale=V).mean(), rtol=1e-12)
    want = sum(special.digamma((n - j) / 2) for j in range(P)) + P * np.log(2) + np.linalg.slogdet(V)[1]
    assert float(mu[3]) == pytest.approx(want, rel=1e-12)
    # μ = ∇A(λ) at λ(ordinary), and E[T] over scipy's draws (z < 5)
    lam = {l: np.asarray(fam.evaluate(e, v, P), dtype=float) for l, e in zip(fam.lam, fam.eta)}
    for u, e in zip(mu, fam.mu_of_lam):
        np.testing.assert_allclose(np.asarray(fam.evaluate(e, lam, P), dtype=float).reshape(u.shape), u, rtol=1e-10)
    theta, Lam = scipy_draws(m, kappa, V, n, 100_000, seed)
    for t, u in zip(T_of(theta, Lam), mu):
        t = t.reshape(len(t), -1)
        z = np.abs(t.mean(axis=0) - u.ravel()) / (t.std(axis=0, ddof=1) / np.sqrt(len(t)))
        assert z.max() < 5
    # log-density = scipy's, and the entropy = -E[log q] over scipy's draws
    logq = fam.log_density()
    th, La = fam.components
    for k in range(4):
        got = float(fam.evaluate(logq, {**v, th: theta[k], La: Lam[k]}, P))
        assert got == pytest.approx(scipy_logpdf(theta[k], Lam[k], m, kappa, V, n), rel=1e-11)
    lp = np.array([scipy_logpdf(theta[k], Lam[k], m, kappa, V, n) for k in range(20_000)])
    H = float(fam.evaluate(fam.entropy(), v, P))
    assert abs(-lp.mean() - H) / (lp.std(ddof=1) / np.sqrt(len(lp))) < 5


def test_fisher_is_the_covariance_of_T(fam):
    m, kappa, V, n = point(4)
    v = vals(fam, m, kappa, V, n)
    lam = {l: np.asarray(fam.evaluate(e, v, P), dtype=float) for l, e in zip(fam.lam, fam.eta)}
    dl, dmu = fam.fisher_operator()
    rng = np.random.default_rng(40)
    t1, t2, t3, t4 = T_of(*scipy_draws(m, kappa, V, n, 200_000, 41))
    for _ in range(3):
        d1, d2, E, d4 = rng.normal(size=P), float(rng.normal()), rng.normal(size=(P, P)), float(rng.normal())
        D3 = (E + E.T) / 2
        at = {**lam, dl[0]: d1, dl[1]: d2, dl[2]: D3, dl[3]: d4}
        F = (float(np.sum(d1 * np.asarray(fam.evaluate(dmu[0], at, P), dtype=float).ravel()))
             + d2 * float(fam.evaluate(dmu[1], at, P))
             + float(np.sum(D3 * np.asarray(fam.evaluate(dmu[2], at, P), dtype=float)))
             + d4 * float(fam.evaluate(dmu[3], at, P)))
        w = t1 @ d1 + d2 * t2 + np.einsum("ij,nij->n", D3, t3) + d4 * t4
        c = w - w.mean()
        se = np.sqrt((np.mean(c**4) - np.mean(c**2) ** 2) / len(w))
        assert abs(w.var(ddof=1) - F) < 5 * se


def test_the_declared_sampler_draws_the_family(fam):
    """The sampler's (θ, Λ) against scipy's: Λ's entries, θ's and log|Λ| by two-sample Kolmogorov–Smirnov."""
    m, kappa, V, n = point(5)
    v = vals(fam, m, kappa, V, n)
    theta, Lam = _draw_matrix_sampler(fam, v, np.random.default_rng(50), 20_000, P)
    theta = theta[:, :, 0]
    ref_theta, ref_Lam = scipy_draws(m, kappa, V, n, 20_000, 51)
    for a, b in [(theta[:, 0], ref_theta[:, 0]), (theta[:, 2], ref_theta[:, 2]), (Lam[:, 0, 1], ref_Lam[:, 0, 1]),
                 (np.linalg.slogdet(Lam)[1], np.linalg.slogdet(ref_Lam)[1]),
                 (np.einsum("ni,nij,nj->n", theta - m, Lam, theta - m), np.full(1, np.nan))]:
        if np.isnan(b).all():       # κ(θ - m)ᵀΛ(θ - m) ~ χ²_P exactly
            assert stats.kstest(kappa * a, stats.chi2(P).cdf).pvalue > 1e-3
        else:
            assert stats.ks_2samp(a, b).pvalue > 1e-3


def test_check_passes(fam):
    checks = check_family(fam, points=3, seed=0, dim=2)
    assert len(checks) == 11 and all(c.passed for c in checks), [c for c in checks if not c.passed]
    assert {c.name for c in checks} >= {"normalization", "fisher_vs_covariance", "sampler_vs_density",
                                         "entropy_vs_quadrature"}
