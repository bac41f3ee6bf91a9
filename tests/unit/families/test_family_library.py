"""The bundled non-Gaussian families against scipy.stats (and quadrature / finite differences).

For every family added to ``families/`` (Bernoulli on {-1,+1}, categorical, beta, gamma,
exponential, inverse gamma, Poisson, Dirichlet, Wishart, normal-gamma) the engine's μ,
entropy and log-density are compared with scipy.stats at random parameter points; the
Fisher information is checked to be positive definite and equal to the finite-difference
Jacobian of μ(λ); and the parameter maps are checked by round trips, including the numeric
(Newton) inverse μ → ordinary where no closed form exists.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import yaml
from scipy import special, stats

from blr_derive.core.errors import DerivationError
from blr_derive.families.library import load_family
from blr_derive.core.matexpr import is_mat
from blr_derive.core.resources import families_dir

DERIVED = ["bernoulli", "categorical", "beta", "gamma", "exponential", "inverse_gamma", "poisson", "normal_gamma"]
DECLARED = ["dirichlet", "wishart"]
NEW = DERIVED + DECLARED
NUMERIC_INVERSE = {"beta", "gamma", "inverse_gamma", "dirichlet", "wishart", "normal_gamma"}
P = 2          # Wishart dimension
SEEDS = (0, 1, 2)


@functools.lru_cache(maxsize=None)
def fam(name):
    return load_family(name)


# ---------------------------------------------------------------------------
# Independent parameterization by name and the matching scipy distribution
# ---------------------------------------------------------------------------

def ordinary(name, seed):
    """Random ordinary parameters by name (not via the engine's sampler)."""
    rng = np.random.default_rng(100 + seed)
    pos = lambda: float(np.exp(0.6 * rng.normal()))          # noqa: E731
    if name == "bernoulli":
        return {"p": float(rng.uniform(0.05, 0.95))}
    if name == "categorical":
        p = rng.dirichlet([2.0, 2.0, 2.0])
        return {"p1": float(p[0]), "p2": float(p[1])}
    if name == "beta":
        return {"a": pos(), "b": pos()}
    if name in ("gamma", "inverse_gamma"):
        return {"alpha": pos() + (1.0 if name == "inverse_gamma" else 0.0), "beta": pos()}
    if name in ("exponential", "poisson"):
        return {"r": pos() * (3.0 if name == "poisson" else 1.0)}
    if name == "dirichlet":
        return {"a1": pos(), "a2": pos(), "a3": pos()}
    if name == "wishart":
        B = rng.normal(size=(P, P))
        # n > P - 1; the margin keeps scipy's Bartlett sampler away from chi2(df < 0.5) underflow
        return {"V": B @ B.T / P + 0.5 * np.eye(P), "n": P - 0.5 + pos()}
    if name == "normal_gamma":
        return {"m": float(rng.normal()), "kappa": pos(), "alpha": pos(), "beta": pos()}
    raise KeyError(name)


class Case:
    def __init__(self, name, seed):
        self.name, self.seed = name, seed
        self.f = f = fam(name)
        self.o = ordinary(name, seed)
        self.vals = {f.params[k].symbol: v for k, v in self.o.items()}
        self.d = P if f.dim is not None else None
        self.lam = {l: f.evaluate(e, self.vals, self.d) for l, e in zip(f.lam, f.eta)}

    def ev(self, expr, values=None):
        return self.f.evaluate(expr, self.vals if values is None else values, self.d)

    def mu(self):
        return [self.ev(m) for m in self.f.mu_ord]

    def mu_of_lam(self):
        return [self.ev(m, self.lam) for m in self.f.mu_of_lam]


CASES = [(n, s) for n in NEW for s in SEEDS]
IDS = [f"{n}-{s}" for n, s in CASES]


QUAD = {"epsabs": 1e-13, "epsrel": 1e-12, "limit": 200}


def scipy_mu(c):
    """E[T(θ)] from scipy.stats (its expect(), moments or samples)."""
    o, n = c.o, c.name
    if n == "bernoulli":
        return [2 * stats.bernoulli(o["p"]).mean() - 1]                      # θ = 2x - 1
    if n == "categorical":
        p = [o["p1"], o["p2"], 1 - o["p1"] - o["p2"]]
        m = stats.multinomial(1, p)
        onehots = np.eye(3, dtype=int)
        return [sum(m.pmf(x) * x[k] for x in onehots) for k in (0, 1)]
    if n == "beta":
        # E[log(1 - θ)] under Beta(a, b) is E[log θ] under Beta(b, a): both integrals singular only at 0
        return [stats.beta(o["a"], o["b"]).expect(np.log, **QUAD), stats.beta(o["b"], o["a"]).expect(np.log, **QUAD)]
    if n == "gamma":
        d = stats.gamma(o["alpha"], scale=1 / o["beta"])
        return [d.expect(np.log, **QUAD), d.mean()]
    if n == "inverse_gamma":
        d = stats.invgamma(o["alpha"], scale=o["beta"])
        return [d.expect(np.log, **QUAD), d.expect(lambda x: 1 / x, **QUAD)]
    if n == "exponential":
        return [stats.expon(scale=1 / o["r"]).mean()]
    if n == "poisson":
        return [stats.poisson(o["r"]).mean()]
    if n == "normal_gamma":
        g = stats.gamma(o["alpha"], scale=1 / o["beta"])
        Et = g.mean()
        return [o["m"] * Et, o["m"] ** 2 * Et + 1 / o["kappa"], Et, g.expect(np.log, **QUAD)]
    raise KeyError(n)


MC_N = 400_000


def scipy_samples(c):
    """Samples of θ from scipy.stats for families without expect()."""
    rng = np.random.default_rng(7 + c.seed)
    if c.name == "dirichlet":
        return stats.dirichlet([c.o["a1"], c.o["a2"], c.o["a3"]]).rvs(MC_N, random_state=rng)
    return stats.wishart(df=c.o["n"], scale=c.o["V"]).rvs(MC_N // 4, random_state=rng)


# ---------------------------------------------------------------------------
# Declarations
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", NEW)
def test_yaml_declares_log_partition_only_where_expected(name):
    with open(families_dir() / f"{name}.yaml", encoding="utf-8") as fh:
        spec = yaml.safe_load(fh)
    assert ("log_partition" in spec) == (name in DECLARED)
    f = fam(name)
    assert f.A_given == (name in DECLARED)
    how = dict(f.steps)["log-partition"]
    if name in DERIVED:
        assert ("summation" in how) == f.is_discrete and ("integration" in how) == (not f.is_discrete)


def test_at_least_half_of_the_new_families_derive_their_log_partition():
    assert len(DERIVED) >= len(NEW) / 2
    assert set(NEW) <= set(__import__("blr_derive.families.library", fromlist=["x"]).builtin_family_names())


@pytest.mark.parametrize("name", NEW)
def test_inverse_kind(name):
    f = fam(name)
    assert f.mu_inverse == ("numeric" if name in NUMERIC_INVERSE else "symbolic")
    assert bool(f.ord_from_mu) == (name not in NUMERIC_INVERSE)
    assert set(f.ord_from_nat) == {p.symbol for p in f.free_params}


def test_bernoulli_is_table_2():
    """Table 2 / Sec. 4.5: T(θ) = θ on {-1, +1}, λ = ½ log(p/(1-p)), μ = 2p - 1, A = log(e^λ + e^-λ)."""
    f = fam("bernoulli")
    (l,) = f.lam
    for p in (0.1, 0.5, 0.83):
        lam = f.evaluate(f.eta[0], {f.params["p"].symbol: p})
        assert lam == pytest.approx(0.5 * np.log(p / (1 - p)), rel=1e-14, abs=1e-15)
        assert f.evaluate(f.mu_ord[0], {f.params["p"].symbol: p}) == pytest.approx(2 * p - 1, abs=1e-15)
        assert f.evaluate(f.mu_of_lam[0], {l: lam}) == pytest.approx(np.tanh(lam), abs=1e-15)
        assert f.evaluate(f.A, {l: lam}) == pytest.approx(np.log(2 * np.cosh(lam)), rel=1e-14)
    assert f.component_supports == ["binary_pm1"] and f.is_discrete


# ---------------------------------------------------------------------------
# μ, entropy and log-density against scipy.stats
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,seed", [c for c in CASES if c[0] not in DECLARED],
                         ids=[i for c, i in zip(CASES, IDS) if c[0] not in DECLARED])
def test_mu_matches_scipy(name, seed):
    c = Case(name, seed)
    want = scipy_mu(c)
    np.testing.assert_allclose(c.mu(), want, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(c.mu_of_lam(), want, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_dirichlet_mu_matches_scipy_samples(seed):
    c = Case("dirichlet", seed)
    x = scipy_samples(c)
    alpha = np.array([c.o["a1"], c.o["a2"], c.o["a3"]])
    # E[log θ_k] = ψ(a_k) - ψ(Σa): compare with scipy's sampler (z-score) and the closed form
    logs = np.log(x)
    est, se = logs.mean(axis=0), logs.std(axis=0, ddof=1) / np.sqrt(len(x))
    mu = np.array(c.mu())
    assert np.max(np.abs(est - mu) / se) < 5
    np.testing.assert_allclose(mu, special.digamma(alpha) - special.digamma(alpha.sum()), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(c.mu_of_lam(), mu, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
def test_wishart_mu_matches_scipy(seed):
    c = Case("wishart", seed)
    mu1, mu2 = c.mu()
    np.testing.assert_allclose(mu1, stats.wishart(df=c.o["n"], scale=c.o["V"]).mean(), rtol=1e-12, atol=1e-13)
    X = scipy_samples(c)
    ld = np.linalg.slogdet(X)[1]
    assert abs(ld.mean() - mu2) / (ld.std(ddof=1) / np.sqrt(len(ld))) < 5
    # closed form E[log|X|] = ψ_P(n/2) + P log 2 + log|V|
    want = sum(special.digamma((c.o["n"] - j) / 2) for j in range(P)) + P * np.log(2) + np.linalg.slogdet(c.o["V"])[1]
    assert mu2 == pytest.approx(want, rel=1e-12)
    got = c.mu_of_lam()
    np.testing.assert_allclose(got[0], mu1, rtol=1e-12)
    assert got[1] == pytest.approx(mu2, rel=1e-12)


def scipy_entropy(c):
    o, n = c.o, c.name
    if n == "bernoulli":
        return stats.bernoulli(o["p"]).entropy()
    if n == "categorical":
        return stats.multinomial(1, [o["p1"], o["p2"], 1 - o["p1"] - o["p2"]]).entropy()
    if n == "beta":
        return stats.beta(o["a"], o["b"]).entropy()
    if n == "gamma":
        return stats.gamma(o["alpha"], scale=1 / o["beta"]).entropy()
    if n == "inverse_gamma":
        return stats.invgamma(o["alpha"], scale=o["beta"]).entropy()
    if n == "exponential":
        return stats.expon(scale=1 / o["r"]).entropy()
    if n == "poisson":
        return stats.poisson(o["r"]).entropy()
    if n == "dirichlet":
        return stats.dirichlet([o["a1"], o["a2"], o["a3"]]).entropy()
    if n == "wishart":
        return stats.wishart(df=o["n"], scale=o["V"]).entropy()
    if n == "normal_gamma":
        # H(θ, τ) = H(τ) + E_τ[H(θ | τ)], θ | τ ~ N(m, 1/(κτ))
        g = stats.gamma(o["alpha"], scale=1 / o["beta"])
        return g.entropy() + 0.5 * np.log(2 * np.pi * np.e / o["kappa"]) - 0.5 * g.expect(np.log, **QUAD)
    raise KeyError(n)


@pytest.mark.parametrize("name,seed", CASES, ids=IDS)
def test_entropy_matches_scipy(name, seed):
    c = Case(name, seed)
    H = c.ev(c.f.entropy())
    assert H == pytest.approx(float(scipy_entropy(c)), rel=1e-9, abs=1e-9)


def random_theta(c, rng):
    """A random point of the support as {variable symbol: value} and the scipy log-density there."""
    f, o, n = c.f, c.o, c.name
    if n == "bernoulli":
        x = int(rng.integers(0, 2))
        return {f.theta: 2 * x - 1}, stats.bernoulli(o["p"]).logpmf(x)
    if n == "categorical":
        x = np.eye(3, dtype=int)[rng.integers(0, 3)]
        return (dict(zip(f.components, map(float, x))),
                stats.multinomial(1, [o["p1"], o["p2"], 1 - o["p1"] - o["p2"]]).logpmf(x))
    if n == "beta":
        x = rng.uniform(0.01, 0.99)
        return {f.theta: x}, stats.beta(o["a"], o["b"]).logpdf(x)
    if n == "gamma":
        x = np.exp(rng.normal())
        return {f.theta: x}, stats.gamma(o["alpha"], scale=1 / o["beta"]).logpdf(x)
    if n == "inverse_gamma":
        x = np.exp(rng.normal())
        return {f.theta: x}, stats.invgamma(o["alpha"], scale=o["beta"]).logpdf(x)
    if n == "exponential":
        x = np.exp(rng.normal())
        return {f.theta: x}, stats.expon(scale=1 / o["r"]).logpdf(x)
    if n == "poisson":
        x = int(rng.integers(0, 12))
        return {f.theta: x}, stats.poisson(o["r"]).logpmf(x)
    if n == "dirichlet":
        x = rng.dirichlet([1.0, 1.0, 1.0])
        return dict(zip(f.components, x)), stats.dirichlet([o["a1"], o["a2"], o["a3"]]).logpdf(x)
    if n == "wishart":
        B = rng.normal(size=(P, P))
        X = B @ B.T + 0.3 * np.eye(P)
        return {f.theta: X}, stats.wishart(df=o["n"], scale=o["V"]).logpdf(X)
    if n == "normal_gamma":
        th, tau = rng.normal(), np.exp(rng.normal())
        want = (stats.norm(o["m"], 1 / np.sqrt(o["kappa"] * tau)).logpdf(th)
                + stats.gamma(o["alpha"], scale=1 / o["beta"]).logpdf(tau))
        return dict(zip(f.components, (th, tau))), want
    raise KeyError(n)


@pytest.mark.parametrize("name,seed", CASES, ids=IDS)
def test_log_density_matches_scipy(name, seed):
    c = Case(name, seed)
    logq = c.f.log_density()
    rng = np.random.default_rng(300 + seed)
    for _ in range(3):
        theta, want = random_theta(c, rng)
        got = c.ev(logq, {**c.vals, **theta})
        assert got == pytest.approx(float(want), rel=1e-10, abs=1e-10)


# ---------------------------------------------------------------------------
# Fisher information
# ---------------------------------------------------------------------------

def tangent(f, l, d):
    if not is_mat(l):
        return [1.0]
    out = []
    for i in range(d):
        for j in range(i, d):
            E = np.zeros((d, d))
            E[i, j] = E[j, i] = 1.0 if i == j else np.sqrt(0.5)
            out.append(E)
    return out


@pytest.mark.parametrize("name,seed", CASES, ids=IDS)
def test_fisher_positive_definite_and_jacobian_of_mu(name, seed):
    c = Case(name, seed)
    f = c.f
    F = f.fisher_at(c.lam, c.d)
    np.testing.assert_allclose(F, F.T, rtol=1e-10, atol=1e-12)
    ev = np.linalg.eigvalsh(0.5 * (F + F.T))
    assert ev.min() > 1e-8 * ev.max() > 0
    # central differences of μ(λ) in an orthonormal basis of the λ tangent space
    bases = [tangent(f, l, c.d) for l in f.lam]
    eps = 1e-6
    cols = []
    for l, basis in zip(f.lam, bases):
        for E in basis:
            vp, vm = dict(c.lam), dict(c.lam)
            vp[l] = c.lam[l] + eps * E
            vm[l] = c.lam[l] - eps * E
            dmu = [(np.asarray(c.ev(m, vp)) - np.asarray(c.ev(m, vm))) / (2 * eps) for m in f.mu_of_lam]
            col = []
            for dm, bk, lk in zip(dmu, bases, f.lam):
                col.extend(float(np.sum(dm * Ek)) if is_mat(lk) else float(dm) for Ek in bk)
            cols.append(col)
    J = np.array(cols).T
    np.testing.assert_allclose(F, J, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", [n for n in NEW if n != "wishart"])
def test_symbolic_fisher_is_the_hessian(name):
    """Scalar-block families: fisher_matrix() (symbolic ∇²A) equals fisher_at (its evaluation)."""
    c = Case(name, 0)
    Fs = c.f.fisher_matrix()
    n = len(c.f.lam)
    got = np.array([[c.ev(Fs[i, j], c.lam) for j in range(n)] for i in range(n)])
    np.testing.assert_allclose(got, c.f.fisher_at(c.lam), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------
# Parameter round trips (the numeric inverse included)
# ---------------------------------------------------------------------------

def assert_params(c, got, rtol):
    for p in c.f.free_params:
        want = np.asarray(c.vals[p.symbol], dtype=float)
        np.testing.assert_allclose(np.asarray(got[p.symbol], dtype=float).reshape(want.shape), want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("name,seed", CASES, ids=IDS)
def test_round_trip_natural(name, seed):
    c = Case(name, seed)
    assert_params(c, {s: c.ev(e, c.lam) for s, e in c.f.ord_from_nat.items()}, 1e-11)


@pytest.mark.parametrize("name,seed", CASES, ids=IDS)
def test_round_trip_expectation(name, seed):
    """ordinary → μ → ordinary, by the closed form or by Newton's method (numeric_ord_from_mu)."""
    c = Case(name, seed)
    mu = dict(zip(c.f.mu, c.mu()))
    if c.f.mu_inverse == "symbolic":
        assert_params(c, {s: c.ev(e, mu) for s, e in c.f.ord_from_mu.items()}, 1e-11)
    assert_params(c, c.f.numeric_ord_from_mu(mu), 1e-9)


@pytest.mark.parametrize("name", ["gamma", "beta", "dirichlet"])
def test_numeric_inverse_accepts_names_and_scipy_moments(name):
    """μ given by name ('mu1', ...) and computed by scipy, not by the engine."""
    c = Case(name, 1)
    if name == "dirichlet":
        alpha = np.array([c.o["a1"], c.o["a2"], c.o["a3"]])
        mus = special.digamma(alpha) - special.digamma(alpha.sum())
    else:
        mus = scipy_mu(c)
    back = c.f.numeric_ord_from_mu({f"mu{i + 1}": float(m) for i, m in enumerate(mus)})
    assert_params(c, back, 1e-7)


def test_numeric_inverse_rejects_mu_outside_the_expectation_space():
    """Gamma: E[log θ] < log E[θ] (Jensen); μ = (log 2 + 0.1, 2) has no λ."""
    f = fam("gamma")
    with pytest.raises(DerivationError, match="did not converge|domain"):
        f.numeric_ord_from_mu({"mu1": np.log(2.0) + 0.1, "mu2": 2.0}, max_iter=60)


# ---------------------------------------------------------------------------
# Log-partitions derived by integration / summation are the textbook ones
# ---------------------------------------------------------------------------

def textbook_A(c):
    o, n = c.o, c.name
    if n == "bernoulli":
        return -0.5 * np.log(o["p"] * (1 - o["p"]))
    if n == "categorical":
        return -np.log(1 - o["p1"] - o["p2"])
    if n == "beta":
        return special.betaln(o["a"], o["b"])
    if n == "gamma":
        return special.gammaln(o["alpha"]) - o["alpha"] * np.log(o["beta"])
    if n == "inverse_gamma":
        return special.gammaln(o["alpha"]) - o["alpha"] * np.log(o["beta"])
    if n == "exponential":
        return -np.log(o["r"])
    if n == "poisson":
        return o["r"]
    if n == "normal_gamma":
        return special.gammaln(o["alpha"]) - o["alpha"] * np.log(o["beta"]) - 0.5 * np.log(o["kappa"])
    if n == "dirichlet":
        a = np.array([o["a1"], o["a2"], o["a3"]])
        return special.gammaln(a).sum() - special.gammaln(a.sum())
    if n == "wishart":
        nu = o["n"]
        return nu / 2 * np.linalg.slogdet(o["V"])[1] + nu * P / 2 * np.log(2) + special.multigammaln(nu / 2, P)
    raise KeyError(n)


@pytest.mark.parametrize("name,seed", CASES, ids=IDS)
def test_log_partition_is_textbook(name, seed):
    c = Case(name, seed)
    assert c.ev(c.f.A, c.lam) == pytest.approx(textbook_A(c), rel=1e-11, abs=1e-11)
