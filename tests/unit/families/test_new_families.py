"""The built-in families geometric, negative_binomial, logarithmic, log_normal, pareto and laplace against scipy.stats.

Every number the engine derives is compared with scipy.stats as the independent reference, at three parameter
points per family (and the negative binomial also at a non-default size r = 6):

* μ (``mu_ord`` in ordinary parameters and ``mu_of_lam`` = ∇A at λ) with E[T(θ)] under scipy's pmf/pdf, by
  summation or by ``scipy.integrate.quad``;
* the Fisher information ∇²A(λ) (``fisher_at``) with Cov[T(θ)] under scipy's pmf/pdf;
* the entropy A − <λ, μ> − E[log h] (``entropy()``) with scipy's ``.entropy()``;
* the log-density log h + <λ, T> − A (``log_density()``) with scipy's ``logpmf``/``logpdf``;
* the declared sampler (pareto, laplace) by z-tests of its moments against μ and scipy's moments, and a
  Kolmogorov-Smirnov test against scipy's cdf, with fixed seeds.

Three families re-parameterize the variable because a fixed parameter cannot enter T(θ) and the supports are
fixed (README, "Family file format"): ``logarithmic`` is declared for θ = k − 1 on {0, 1, ...}, ``pareto`` for the
relative excess θ = x/xm − 1 > 0 over the known scale xm (a law free of xm), ``laplace`` for the offset θ = x − m
from the known location m.  The reference is always the scipy law of x, transformed (the Jacobian 1/xm for the
Pareto), at scales xm and locations m ≠ 0, so the tests also check that the declared law is the intended one.

Usability as a BLR candidate: conjugate one-step posteriors (``exact`` + ``family_prior`` + ``unit_learning_rate``,
Sec. 5.1) with the new family as the candidate, against the closed form and against prior × likelihood integrated or
summed with scipy's densities; the samplers through generated ``reparameterization`` steps against a hand-written
step with the same draws; and conjugate pairs whose likelihood is one of the distributions of this set of
families (binomial, negative binomial, Rayleigh, Weibull and Pareto likelihoods under Beta/Gamma candidates).
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import sympy as sp
import yaml
from scipy import integrate, stats

from blr_derive import api
from blr_derive.core.errors import SpecError
from blr_derive.families.library import load_family
from blr_derive.rules.sampling import hard_thresholds

QUAD = {"epsabs": 1e-14, "epsrel": 1e-12, "limit": 400}
RTOL = 1e-8


def on_the_half_line(fn):
    """fn(z) for θ = e^z, and 0 where e^z overflows or underflows (quad over z probes |z| in the hundreds)."""
    return lambda z: 0.0 if abs(z) > 600 else fn(z)


# ---------------------------------------------------------------------------------------------- the families
class Spec:
    """One family: how to load it, its parameter points, T(θ) in numpy, and scipy's law of θ.

    ``law(o)`` returns (logpdf of θ, scipy entropy of θ, kind) where kind is 'discrete' (support
    {0, 1, ...}), 'positive' or 'real'; ``o`` holds the ordinary parameters plus the reference-only known
    constants (``xm``, ``loc``) that the declared law does not depend on.
    """

    def __init__(self, ref, points, T, law, sampler=False):
        self.ref, self.points, self.T, self.law, self.sampler = ref, points, T, law, sampler


def _geometric(o):
    d = stats.geom(o["p"], loc=-1)                       # scipy's geom counts trials {1, 2, ...}
    return d.logpmf, d.entropy(), "discrete"


def _negative_binomial(r):
    def law(o):
        d = stats.nbinom(r, o["p"])                      # failures before the r-th success, success prob p
        return d.logpmf, d.entropy(), "discrete"
    return law


def _logarithmic(o):
    d = stats.logser(o["p"], loc=-1)                     # θ = k - 1
    return d.logpmf, d.entropy(), "discrete"


def _log_normal(o):
    d = stats.lognorm(s=1 / math.sqrt(o["s"]), scale=math.exp(o["m"]))
    return d.logpdf, d.entropy(), "positive"


def _pareto(o):
    xm = o["xm"]
    d = stats.pareto(o["alpha"], scale=xm)               # the law of x > xm; θ = x/xm - 1
    return (lambda t: d.logpdf(xm * (1 + np.asarray(t, dtype=float))) + math.log(xm),
            d.entropy() - math.log(xm), "positive")


def _laplace(o):
    d = stats.laplace(loc=o["loc"], scale=o["b"])        # the law of x; θ = x - loc
    return (lambda t: d.logpdf(np.asarray(t, dtype=float) + o["loc"]), d.entropy(), "real")


SPECS = {
    "geometric": Spec("geometric", [{"p": 0.15}, {"p": 0.5}, {"p": 0.9}],
                      lambda t: [t], _geometric),
    "negative_binomial": Spec("negative_binomial", [{"p": 0.25}, {"p": 0.6}, {"p": 0.9}],
                              lambda t: [t], _negative_binomial(3)),
    "negative_binomial_r6": Spec({"name": "negative_binomial", "r": 6}, [{"p": 0.35}, {"p": 0.8}],
                                 lambda t: [t], _negative_binomial(6)),
    "logarithmic": Spec("logarithmic", [{"p": 0.1}, {"p": 0.6}, {"p": 0.95}],
                        lambda t: [t], _logarithmic),
    "log_normal": Spec("log_normal", [{"m": 0.3, "s": 2.0}, {"m": -1.2, "s": 0.5}, {"m": 2.0, "s": 8.0}],
                       lambda t: [np.log(t), np.log(t) ** 2], _log_normal, sampler=True),
    "pareto": Spec("pareto", [{"alpha": 0.7, "xm": 1.0}, {"alpha": 2.5, "xm": 2.5}, {"alpha": 6.0, "xm": 0.3}],
                   lambda t: [np.log1p(t)], _pareto, sampler=True),
    "laplace": Spec("laplace", [{"b": 0.3, "loc": 0.7}, {"b": 1.0, "loc": -2.0}, {"b": 4.0, "loc": 0.0}],
                    lambda t: [np.abs(t)], _laplace, sampler=True),
}
CASES = [(name, i) for name, s in SPECS.items() for i in range(len(s.points))]
IDS = [f"{n}-{i}" for n, i in CASES]


@functools.lru_cache(maxsize=None)
def family(name):
    ref = SPECS[name].ref
    return load_family(dict(ref) if isinstance(ref, dict) else ref)


class Case:
    def __init__(self, name, i):
        self.name, self.spec = name, SPECS[name]
        self.f = f = family(name)
        self.o = self.spec.points[i]
        self.vals = {p.symbol: self.o[p.name] for p in f.params.values()}
        self.lam = {l: f.evaluate(e, self.vals) for l, e in zip(f.lam, f.eta)}
        self.logpdf, self.entropy, self.kind = self.spec.law(self.o)

    def ev(self, expr, values=None):
        return self.f.evaluate(expr, self.vals if values is None else values)

    def expect(self, g):
        """E[g(θ)] under scipy's law of θ: a sum over {0, 1, ...} or quad in unconstrained coordinates."""
        if self.kind == "discrete":
            k = np.arange(0, 4000, dtype=float)
            p = np.exp(self.logpdf(k))
            assert p[-1] < 1e-30 and abs(p.sum() - 1) < 1e-13        # the truncated tail is negligible
            return np.array([float(np.sum(p * np.asarray(gk, dtype=float) * np.ones_like(k))) for gk in g(k)])
        if self.kind == "positive":                                   # θ = e^z, dθ = e^z dz
            def part(j):
                return integrate.quad(on_the_half_line(lambda z: np.asarray(g(math.exp(z))[j])
                                                       * math.exp(self.logpdf(math.exp(z)) + z)),
                                      -np.inf, np.inf, **QUAD)[0]
        else:                                                         # split at the kink θ = 0
            def part(j):
                return sum(integrate.quad(lambda t: np.asarray(g(t)[j]) * math.exp(self.logpdf(t)), a, b, **QUAD)[0]
                           for a, b in ((-np.inf, 0.0), (0.0, np.inf)))
        return np.array([part(j) for j in range(len(g(1.0)))])


# ------------------------------------------------------------------------------------- declarations and check
def test_the_new_families_are_built_in():
    names = set(api.families())
    assert {"geometric", "negative_binomial", "logarithmic", "log_normal", "pareto", "laplace"} <= names


@pytest.mark.parametrize("name", list(SPECS))
def test_declared_sampler_only_where_an_inverse_cdf_is_expressible(name):
    """pareto and laplace declare an inverse-CDF sampler, log_normal a normal-draw one; the discrete families
    would need floor(), which the expression grammar lacks (blr_derive/core/exprfuncs.py)."""
    f = family(name)
    assert (f.sampler is not None) == SPECS[name].sampler
    if f.sampler is not None:
        # a continuous sampler, not a binary family's hard threshold: laplace's sign(u - 1/2) is a sign of the draw
        # alone, which is smooth in the parameters (blr_derive/rules/sampling.py, hard_thresholds)
        assert hard_thresholds(f) == []


@pytest.mark.parametrize("name", list(SPECS))
def test_blr_derive_check_passes(name):
    """What `blr-derive check` runs (normalization, μ, Fisher, entropy, round trips), in process."""
    from blr_derive.verify.family import check_family
    checks = check_family(family(name), points=2, seed=1, mc_samples=5000)
    failed = [c for c in checks if not c.passed]
    sampled = family(name).sampler is not None or family(name).is_gaussian
    scalar = family(name).variable_kind == "scalar"
    continuous = sampled and not family(name).is_discrete and scalar  # + the Kolmogorov-Smirnov check (sampler_ks)
    gaussian = family(name).is_gaussian                                # + gaussian_vs_density
    assert len(checks) == 10 + sampled + continuous + gaussian and not failed, failed


# --------------------------------------------------------------------------------------- against scipy.stats
@pytest.mark.parametrize("name,i", CASES, ids=IDS)
def test_mu_matches_scipy(name, i):
    c = Case(name, i)
    want = c.expect(c.spec.T)
    np.testing.assert_allclose([c.ev(m) for m in c.f.mu_ord], want, rtol=RTOL, atol=1e-10)
    np.testing.assert_allclose([c.ev(m, c.lam) for m in c.f.mu_of_lam], want, rtol=RTOL, atol=1e-10)


@pytest.mark.parametrize("name,i", CASES, ids=IDS)
def test_fisher_is_the_covariance_of_T_under_scipy(name, i):
    c = Case(name, i)
    mu = c.expect(c.spec.T)
    n = len(mu)
    cov = np.array([[c.expect(lambda t, a=a, b=b: [(np.asarray(c.spec.T(t)[a]) - mu[a])
                                                   * (np.asarray(c.spec.T(t)[b]) - mu[b])])[0]
                     for b in range(n)] for a in range(n)])
    F = c.f.fisher_at(c.lam)
    np.testing.assert_allclose(F, cov, rtol=1e-7, atol=1e-10)
    assert np.linalg.eigvalsh(F).min() > 0


@pytest.mark.parametrize("name,i", CASES, ids=IDS)
def test_entropy_matches_scipy(name, i):
    c = Case(name, i)
    assert c.ev(c.f.entropy()) == pytest.approx(float(c.entropy), rel=1e-9, abs=1e-10)


@pytest.mark.parametrize("name,i", CASES, ids=IDS)
def test_log_density_matches_scipy(name, i):
    c = Case(name, i)
    logq = c.f.log_density()
    rng = np.random.default_rng(10 + i)
    if c.kind == "discrete":
        thetas = [0, 1] + [int(k) for k in rng.integers(2, 60, size=3)]
    elif c.kind == "positive":
        thetas = list(np.exp(1.5 * rng.normal(size=5)))
    else:
        thetas = [0.0] + list(2.0 * rng.normal(size=4))
    for t in thetas:
        got = c.ev(logq, {**c.vals, c.f.theta: t})
        assert got == pytest.approx(float(c.logpdf(t)), rel=1e-10, abs=1e-10), t


# --------------------------------------------------------------------------------------------------- samplers
N_DRAWS = 1_000_000


def draws(c, seed):
    d_sym = next(s for s in c.f.sampler.free_symbols if s.name in ("u", "z"))
    params = [p.symbol for p in c.f.params.values()]
    fn = sp.lambdify([d_sym, *params], c.f.sampler, "numpy")
    rng = np.random.default_rng(seed)
    u = rng.random(N_DRAWS) if d_sym.name == "u" else rng.standard_normal(N_DRAWS)
    return fn(u, *[c.vals[p] for p in params])


def z(x, mean):
    return abs(x.mean() - mean) / (x.std(ddof=1) / math.sqrt(len(x)))


@pytest.mark.parametrize("name,i", [c for c in CASES if SPECS[c[0]].sampler],
                         ids=[n for c, n in zip(CASES, IDS) if SPECS[c[0]].sampler])
def test_sampler_moments_and_law(name, i):
    c = Case(name, i)
    x = draws(c, 100 + i)
    assert np.all(np.isfinite(x))
    for t, mu in zip(c.spec.T(x), c.f.mu_ord):
        assert z(t, c.ev(mu)) < 5                                   # E[T] = μ
    # moments of θ itself from scipy (where its variance is finite), and the whole law by Kolmogorov-Smirnov
    if name == "pareto":
        xm, a = c.o["xm"], c.o["alpha"]
        if a > 2:
            assert z(x, stats.pareto(a, scale=xm).mean() / xm - 1) < 5
        cdf = lambda v: stats.pareto(a, scale=xm).cdf(xm * (1 + v))              # noqa: E731
    elif name == "log_normal":
        d = stats.lognorm(1 / math.sqrt(c.o["s"]), scale=math.exp(c.o["m"]))
        assert z(x, d.mean()) < 5 and z(x ** 2, d.var() + d.mean() ** 2) < 5
        cdf = d.cdf
    else:
        d = stats.laplace(loc=c.o["loc"], scale=c.o["b"])
        assert z(x, d.mean() - c.o["loc"]) < 5 and z(x ** 2, d.var()) < 5
        cdf = lambda v: d.cdf(v + c.o["loc"])                                  # noqa: E731
    assert stats.kstest(x, cdf).pvalue > 1e-4


class Draws:
    """A generator stand-in that hands out prescribed uniforms (one per call)."""

    def __init__(self, u):
        self.u = list(u)

    def random(self, shape):
        return np.full(shape, self.u.pop(0))


@functools.lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


# θ(u; λ) and A''(λ) written here from the textbook laws (not from the engine)
HAND = {
    "pareto": (lambda u, lam: u ** (1 / (lam + 1)) - 1, lambda lam: 1 / (lam + 1) ** 2,
               lambda lam: -lam - 1, lambda alpha: -alpha - 1, "alpha", 1.7),
    "laplace": (lambda u, lam: (1 / lam) * np.sign(u - 0.5) * np.log(1 - 2 * abs(u - 0.5)), lambda lam: 1 / lam ** 2,
                lambda lam: -1 / lam, lambda b: -1 / b, "b", 0.8),
}


@pytest.mark.parametrize("name", ["pareto", "laplace"])
def test_reparameterization_step_through_the_declared_sampler(name):
    """A generated `reparameterization` step equals Eq. 6 written by hand:
    λ' = (1 − ρ)λ − ρ F⁻¹ mean(∇ℓ(θ_k) ∂θ_k/∂λ), with ∂θ/∂λ by central differences of the textbook inverse CDF
    and F = A''(λ) (h is constant)."""
    mod = compiled(yaml.safe_dump({"name": f"reparam_{name}", "family": name, "loss": "abstract",
                                   "hyperparameters": {"rho": 0.3, "S": {"default": 8, "type": "int"}},
                                   "approximations": [{"reparameterization": {"samples": "S"}}]}, sort_keys=False))
    theta, F, ordinary, natural, pname, value = HAND[name]
    grad = lambda t: np.tanh(t - 0.4) + 0.3 * t                  # noqa: E731  a smooth non-conjugate loss's gradient
    u = np.random.default_rng(7).random(8)
    lam, rho, eps = natural(value), 0.3, 1e-6
    dtheta = (theta(u, lam + eps) - theta(u, lam - eps)) / (2 * eps)
    lam_new = (1 - rho) * lam - rho * np.mean(grad(theta(u, lam)) * dtheta) / F(lam)
    out = mod.step({pname: np.array(value)}, oracles={"grad": grad}, rng=Draws(u), rho=rho, S=8)
    np.testing.assert_allclose(out[pname], ordinary(lam_new), rtol=1e-7)


# ----------------------------------------------------------------------------- conjugate posteriors (ρ = 1)
def conjugate(name, family_ref, loss, data, hyper, prior):
    return compiled(yaml.safe_dump({"name": name, "family": family_ref, "loss": {"expression": loss, "data": data},
                                    "hyperparameters": hyper,
                                    "approximations": ["exact", {"family_prior": prior}, "unit_learning_rate"]},
                                   sort_keys=False))


def finite_or_zero(fn):
    """fn(t), or 0 where it overflows: the far tails of a posterior, whose weight is zero in double precision."""
    def f(t):
        try:
            v = float(fn(t))
        except OverflowError:
            return 0.0
        return v if math.isfinite(v) else 0.0
    return f


def posterior_mean(log_unnorm, g, lo, hi, mode):
    """E[g(θ)] under an unnormalized log-density on (lo, hi), by quad on each side of the mode (shifted there)."""
    shift = log_unnorm(mode)
    w = finite_or_zero(lambda t: math.exp(log_unnorm(t) - shift))
    gw = finite_or_zero(lambda t: g(t) * math.exp(log_unnorm(t) - shift))
    parts = ((lo, mode), (mode, hi))
    Z = sum(integrate.quad(w, a, b, **QUAD)[0] for a, b in parts)
    return sum(integrate.quad(gw, a, b, **QUAD)[0] for a, b in parts) / Z


def test_geometric_prior_and_no_detection_likelihood():
    """θ ~ Geometric(p0) objects, each detected with probability d; n surveys detect none:
    P(no detection | θ) = (1 − d)^(nθ), so the posterior is Geometric with 1 − p = (1 − p0)(1 − d)^n."""
    mod = conjugate("geo_detect", "geometric", "-n*log(1 - d)*theta", {"n": {}}, {"d": 0.5, "p0": 0.5},
                    {"lambda1": "log(1 - p0)"})
    p0, d, n = 0.12, 0.15, 3
    out = mod.step(mod.init(p=0.5), data={"n": n}, d=d, p0=p0)
    assert out["p"] == pytest.approx(1 - (1 - p0) * (1 - d) ** n, rel=1e-13)
    k = np.arange(0, 3000)
    w = stats.geom(p0, loc=-1).pmf(k) * stats.binom(k, d).pmf(0) ** n       # prior × likelihood, summed
    assert (1 - out["p"]) / out["p"] == pytest.approx(np.sum(k * w) / np.sum(w), rel=1e-10)


def test_log_normal_prior_for_the_median_of_log_normal_data():
    """log y_i ~ N(log θ, σ²) and log θ ~ N(m0, 1/s0): s = s0 + n/σ², m = (s0 m0 + Σ log y_i/σ²)/s."""
    mod = conjugate("lognormal_median", "log_normal", "n/(2*sigma2)*log(theta)**2 - S/sigma2*log(theta)",
                    {"n": {}, "S": {}}, {"sigma2": 1.0, "m0": 0.0, "s0": 1.0},
                    {"lambda1": "s0*m0", "lambda2": "-s0/2"})
    sigma2, m0, s0 = 0.64, 0.4, 1.5
    y = stats.lognorm(s=0.8, scale=2.0).rvs(12, random_state=np.random.default_rng(4))
    out = mod.step(mod.init(m=0.0, s=1.0), data={"n": len(y), "S": np.log(y).sum()}, sigma2=sigma2, m0=m0, s0=s0)
    s = s0 + len(y) / sigma2
    np.testing.assert_allclose([out["s"], out["m"]], [s, (s0 * m0 + np.log(y).sum() / sigma2) / s], rtol=1e-13)
    prior = stats.lognorm(s=1 / math.sqrt(s0), scale=math.exp(m0))

    def lp(z):                        # in z = log θ; the likelihood is scipy's log-normal pdf of y at median θ
        if abs(z) > 600:
            return -np.inf
        return prior.logpdf(math.exp(z)) + z + stats.lognorm(s=math.sqrt(sigma2), scale=math.exp(z)).logpdf(y).sum()
    assert posterior_mean(lp, lambda z: z, -np.inf, np.inf, out["m"]) == pytest.approx(out["m"], rel=1e-9)


def test_pareto_prior_for_the_bound_of_uniform_data():
    """x_i ~ Uniform(0, xm(1 + θ)) with every x_i ≤ xm: the likelihood is (xm(1 + θ))^(−n) on θ > 0, and the
    Pareto prior's shape becomes α0 + n (the classical conjugate prior of a uniform bound)."""
    mod = conjugate("pareto_uniform", "pareto", "n*log(1 + theta)", {"n": {}}, {"a0": 1.0},
                    {"lambda1": "-a0 - 1"})
    xm, a0 = 2.0, 1.3
    x = np.random.default_rng(5).uniform(0, xm, size=7)
    out = mod.step(mod.init(alpha=1.0), data={"n": len(x)}, a0=a0)
    assert out["alpha"] == a0 + len(x)
    prior = stats.pareto(a0, scale=xm)
    def lp(t):                        # the prior density of θ = x/xm - 1 times the uniform likelihood, by scipy
        return prior.logpdf(xm * (1 + t)) + math.log(xm) + stats.uniform(0, xm * (1 + t)).logpdf(x).sum()
    # E[log(1 + θ)] = 1/α under the posterior
    got = posterior_mean(lp, math.log1p, 0.0, np.inf, 0.1)
    assert got == pytest.approx(1 / out["alpha"], rel=1e-9)


def test_laplace_prior_and_an_l1_penalty():
    """A Laplace(0, b0) prior on θ times exp(−c|θ|) is Laplace(0, b) with 1/b = 1/b0 + c."""
    mod = conjugate("laplace_l1", "laplace", "c*abs(theta)", {"c": {}}, {"b0": 1.0}, {"lambda1": "-1/b0"})
    b0, c = 0.8, 2.5
    out = mod.step(mod.init(b=1.0), data={"c": c}, b0=b0)
    assert out["b"] == pytest.approx(1 / (1 / b0 + c), rel=1e-14)
    prior = stats.laplace(scale=b0)
    lp = lambda t: prior.logpdf(t) - c * abs(t)                                # noqa: E731
    got = posterior_mean(lp, abs, -np.inf, np.inf, 0.0)
    assert got == pytest.approx(out["b"], rel=1e-9)


@pytest.mark.parametrize("name", ["negative_binomial", "logarithmic"])
def test_a_prior_in_the_family_cancels_a_nonlinear_log_base_measure(name):
    """log h = log C(θ + r − 1, θ) or −log(θ + 1) is not linear in T, so E_q[log h] has no closed form; a prior in
    the candidate family brings −log h, which cancels it (App. B): with the tilt exp(−cθ) the posterior is the same
    family at λ = λ₀ − c.  Checked against the tilted prior summed from scipy's pmf."""
    mod = api.derive(yaml.safe_dump({"name": f"tilted_{name}", "family": name,
                                     "loss": {"expression": "c*theta", "data": {"c": {}}},
                                     "hyperparameters": {"q0": 0.5},
                                     "approximations": ["exact", {"family_prior": {"lambda1": "log(q0)"}},
                                                        "unit_learning_rate"]}, sort_keys=False)).compile("numpy")
    q0, c = 0.6, 0.4
    out = float(mod.step(mod.init(p=0.3), data={"c": c}, q0=q0)["p"])
    k = np.arange(0, 2000)
    if name == "negative_binomial":
        want = 1 - q0 * np.exp(-c)                          # λ = log(1 − p)
        prior = stats.nbinom(3, 1 - q0).pmf(k)
    else:
        want = q0 * np.exp(-c)                              # λ = log p
        prior = stats.logser(q0).pmf(k + 1)
    assert out == pytest.approx(want, rel=1e-14)
    w = prior * np.exp(-c * k)
    mean = (k * w).sum() / w.sum()
    got_mean = (stats.nbinom(3, out).mean() if name == "negative_binomial" else stats.logser(out).mean() - 1)
    assert got_mean == pytest.approx(mean, rel=1e-10)


# ---------------------------------------------- likelihoods of this set under existing Beta/Gamma candidates
def _pairs():
    rng = np.random.default_rng(11)
    y_bin = stats.binom(9, 0.3).rvs(15, random_state=rng)
    y_nb = stats.nbinom(4, 0.35).rvs(15, random_state=rng)
    y_ray = stats.rayleigh(scale=1.3).rvs(20, random_state=rng)
    y_wei = stats.weibull_min(1.7, scale=0.9).rvs(20, random_state=rng)
    y_par = stats.pareto(2.2, scale=1.5).rvs(20, random_state=rng)
    return {
        # θ = success probability; Binomial(N, θ) counts
        "beta_binomial": ("beta", "-S*log(theta) - (n*N - S)*log(1 - theta)",
                          {"S": y_bin.sum(), "n": len(y_bin), "N": 9},
                          lambda a0, b0: (a0 + y_bin.sum(), b0 + 9 * len(y_bin) - y_bin.sum()),
                          lambda t: stats.binom(9, t).logpmf(y_bin).sum()),
        # θ = success probability; NegativeBinomial(r = 4, θ) failure counts
        "beta_negative_binomial": ("beta", "-n*r*log(theta) - S*log(1 - theta)",
                                   {"S": y_nb.sum(), "n": len(y_nb), "r": 4},
                                   lambda a0, b0: (a0 + 4 * len(y_nb), b0 + y_nb.sum()),
                                   lambda t: stats.nbinom(4, t).logpmf(y_nb).sum()),
        # θ = τ = 1/(2σ²), the Rayleigh rate: p(y) = 2τy exp(−τy²)
        "gamma_rayleigh": ("gamma", "-n*log(theta) + Q*theta", {"n": len(y_ray), "Q": (y_ray ** 2).sum()},
                           lambda a0, b0: (a0 + len(y_ray), b0 + (y_ray ** 2).sum()),
                           lambda t: stats.rayleigh(scale=1 / math.sqrt(2 * t)).logpdf(y_ray).sum()),
        # θ = τ, the Weibull rate at the known shape k = 1.7: p(y) = kτy^(k−1) exp(−τy^k)
        "gamma_weibull": ("gamma", "-n*log(theta) + Q*theta", {"n": len(y_wei), "Q": (y_wei ** 1.7).sum()},
                          lambda a0, b0: (a0 + len(y_wei), b0 + (y_wei ** 1.7).sum()),
                          lambda t: stats.weibull_min(1.7, scale=t ** (-1 / 1.7)).logpdf(y_wei).sum()),
        # θ = α, the Pareto shape at the known scale xm = 1.5
        "gamma_pareto": ("gamma", "-n*log(theta) + L*theta", {"n": len(y_par), "L": np.log(y_par / 1.5).sum()},
                         lambda a0, b0: (a0 + len(y_par), b0 + np.log(y_par / 1.5).sum()),
                         lambda t: stats.pareto(t, scale=1.5).logpdf(y_par).sum()),
    }


PAIRS = _pairs()


@pytest.mark.parametrize("pair", list(PAIRS))
def test_conjugate_pair_posterior(pair):
    fam, loss, data, closed, loglik = PAIRS[pair]
    beta = fam == "beta"
    names = ("a", "b") if beta else ("alpha", "beta")
    prior = {"lambda1": "a0 - 1", "lambda2": "b0 - 1"} if beta else {"lambda1": "a0 - 1", "lambda2": "-b0"}
    mod = conjugate(pair, fam, loss, {k: {} for k in data}, {"a0": 1.0, "b0": 1.0}, prior)
    a0, b0 = 1.4, 0.9
    out = mod.step(mod.init(**{names[0]: 1.0, names[1]: 1.0}), data={k: float(v) for k, v in data.items()},
                   a0=a0, b0=b0)
    got = (float(out[names[0]]), float(out[names[1]]))
    np.testing.assert_allclose(got, closed(a0, b0), rtol=1e-12)
    # the posterior mean from prior × scipy likelihood by quad over θ
    mean = got[0] / (sum(got) if beta else got[1])
    prior_d = stats.beta(a0, b0) if beta else stats.gamma(a0, scale=1 / b0)
    lp = lambda t: prior_d.logpdf(t) + loglik(t)                                                  # noqa: E731
    assert posterior_mean(lp, lambda t: t, 0.0, 1.0 if beta else np.inf, mean) == pytest.approx(mean, rel=1e-9)
