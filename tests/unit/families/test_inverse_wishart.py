"""The inverse Wishart IW(X | Ψ, n) over P×P positive-definite matrices: T = (X⁻¹, log|X|), λ = (-Ψ/2,
-(n + P + 1)/2), A declared with lmvgamma; the domain is n > P + 1 (a finite mean; `check`'s quadrature in Cholesky
coordinates does not resolve the heavy-tailed funnel nearer n = P - 1).  Against scipy.stats.invwishart: μ₁ =
E[X⁻¹] (= the mean of scipy's Wishart(n, Ψ⁻¹), and by Monte Carlo), μ₂ = E[log|X|] (Monte Carlo, and the
Bartlett closed form log|Ψ| - P log 2 - Σ_j ψ((n - j)/2) written here), entropy (closed form and -E[log q]
with scipy's logpdf) and log-density; the Fisher
information as Var[tr(D₁X⁻¹) + d₂ log|X|] by Monte Carlo; `check`; the natural ↔ ordinary maps at a BLR-updated
λ (the conjugate update Ψ' = Ψ + S, n' = n + N written in λ).  The conjugate recipe through the generated module is
catalog/inverse_wishart_gaussian.yaml (tests/peers/conjugate/test_conjugate.py)."""
import numpy as np
import pytest
from scipy import special, stats

from blr_derive.families.library import load_family
from blr_derive.verify.family import check_family

P = 3


@pytest.fixture(scope="module")
def fam():
    return load_family("inverse_wishart")


def point(seed):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(P, P))
    return B @ B.T / P + 0.5 * np.eye(P), P + 1 + float(np.exp(0.6 * rng.normal()))


def vals(fam, Psi, n):
    return {fam.params["Psi"].symbol: Psi, fam.params["n"].symbol: n}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mu_entropy_density_match_scipy(fam, seed):
    Psi, n = point(seed)
    law = stats.invwishart(df=n, scale=Psi)
    v = vals(fam, Psi, n)
    mu1, mu2 = (np.asarray(fam.evaluate(e, v, P), dtype=float) for e in fam.mu_ord)
    np.testing.assert_allclose(mu1, stats.wishart(df=n, scale=np.linalg.inv(Psi)).mean(), rtol=1e-12)
    bartlett = np.linalg.slogdet(Psi)[1] - P * np.log(2) - sum(special.digamma((n - j) / 2) for j in range(P))
    assert float(mu2) == pytest.approx(bartlett, rel=1e-12)
    X = law.rvs(100_000, random_state=np.random.default_rng(seed))
    Xi = np.linalg.inv(X)
    ld = np.linalg.slogdet(X)[1]
    assert abs(ld.mean() - float(mu2)) / (ld.std(ddof=1) / np.sqrt(len(ld))) < 5
    z = np.abs(Xi.mean(axis=0) - mu1) / (Xi.std(axis=0, ddof=1) / np.sqrt(len(Xi)))
    assert z.max() < 5
    lam = {l: np.asarray(fam.evaluate(e, v, P), dtype=float) for l, e in zip(fam.lam, fam.eta)}
    np.testing.assert_allclose(np.asarray(fam.evaluate(fam.mu_of_lam[0], lam, P), dtype=float), mu1, rtol=1e-11)
    assert float(fam.evaluate(fam.mu_of_lam[1], lam, P)) == pytest.approx(float(mu2), rel=1e-11)
    # entropy: the closed form from E[tr(ΨX⁻¹)] = nP and E[log|X|] (written here), and -E[log q] with scipy's logpdf
    # by Monte Carlo (scipy's invwishart.entropy() disagrees with its own logpdf, by 2.8 nats at seed 0)
    H = float(fam.evaluate(fam.entropy(), v, P))
    psi = sum(special.digamma((n - j) / 2) for j in range(P))
    want = ((P + 1) / 2 * np.linalg.slogdet(Psi)[1] - (P + 1) * P / 2 * np.log(2) + special.multigammaln(n / 2, P)
            - (n + P + 1) / 2 * psi + n * P / 2)
    assert H == pytest.approx(want, rel=1e-11)
    lp = law.logpdf(np.moveaxis(X, 0, -1))
    assert abs(-lp.mean() - H) / (lp.std(ddof=1) / np.sqrt(len(lp))) < 5
    logq = fam.log_density()
    for Xk in X[:4]:
        assert float(fam.evaluate(logq, {**v, fam.theta: Xk}, P)) == pytest.approx(law.logpdf(Xk), rel=1e-11)


@pytest.mark.parametrize("seed", [0, 1])
def test_fisher_is_the_covariance_of_T(fam, seed):
    Psi, n = point(seed)
    v = vals(fam, Psi, n)
    lam = {l: np.asarray(fam.evaluate(e, v, P), dtype=float) for l, e in zip(fam.lam, fam.eta)}
    dl, dmu = fam.fisher_operator()
    rng = np.random.default_rng(30 + seed)
    X = stats.invwishart(df=n, scale=Psi).rvs(200_000, random_state=rng)
    Xi, ld = np.linalg.inv(X), np.linalg.slogdet(X)[1]
    for _ in range(3):
        E, d2 = rng.normal(size=(P, P)), float(rng.normal())
        D1 = (E + E.T) / 2
        at = {**lam, dl[0]: D1, dl[1]: d2}
        quad = float(np.sum(D1 * np.asarray(fam.evaluate(dmu[0], at, P), dtype=float))
                     + d2 * float(fam.evaluate(dmu[1], at, P)))
        w = np.einsum("ij,nij->n", D1, Xi) + d2 * ld
        # the sample variance against F, its standard error from the fourth central moment
        c = w - w.mean()
        se = np.sqrt((np.mean(c**4) - np.mean(c**2) ** 2) / len(w))
        assert abs(w.var(ddof=1) - quad) < 5 * se


def test_check_passes(fam):
    checks = check_family(fam, points=3, seed=0, dim=2)
    # 10 checks of every family and the declared (Bartlett) sampler's moments
    assert len(checks) == 11 and all(c.passed for c in checks), [c for c in checks if not c.passed]
    assert "sampler_vs_density" in {c.name for c in checks}


def test_ordinary_parameters_of_a_conjugate_update(fam):
    """Gaussian data x_i ~ N(0, X) (N of them, scatter S) with an IW(Ψ₀, n₀) prior: λ' = λ₀ + (-S/2, -N/2) (Eq. 6
    with ρ = 1; the loss N/2 log|X| + tr(S X⁻¹)/2 is linear in T), and the family's inverse maps read off Ψ₀ + S and
    n₀ + N, from λ' in closed form and from μ(λ') by Newton's method."""
    Psi0, n0 = point(7)
    x = np.random.default_rng(8).normal(size=(9, P))
    S, N = x.T @ x, len(x)
    v = vals(fam, Psi0, n0)
    lam = [np.asarray(fam.evaluate(e, v, P), dtype=float) for e in fam.eta]
    lam_new = {fam.lam[0]: lam[0] - S / 2, fam.lam[1]: float(lam[1]) - N / 2}
    Psi_new = np.asarray(fam.evaluate(fam.ord_from_nat[fam.params["Psi"].symbol], lam_new, P), dtype=float)
    n_new = float(fam.evaluate(fam.ord_from_nat[fam.params["n"].symbol], lam_new, P))
    np.testing.assert_allclose(Psi_new, Psi0 + S, rtol=1e-13)
    assert n_new == pytest.approx(n0 + N, rel=1e-13)
    mu = {u: np.asarray(fam.evaluate(m, lam_new, P), dtype=float) for u, m in zip(fam.mu, fam.mu_of_lam)}
    back = fam.numeric_ord_from_mu(mu, P)
    np.testing.assert_allclose(back[fam.params["Psi"].symbol], Psi0 + S, rtol=1e-9)
    assert float(back[fam.params["n"].symbol]) == pytest.approx(n0 + N, rel=1e-9)
