"""The generalized inverse Gaussian GIG(p, a, b): A = log(2 K_p(√(ab))) + (p/2) log(b/a) needs the Bessel function's
derivatives in its order (E[log θ], the Fisher information), the grammar's besselk evaluated through dbesselk (an
integral, trapezoidal rule).  dbesselk against mpmath's derivative of besselk in the order; the family against
mpmath quadrature (μ, entropy, Cov[T] = Fisher) and scipy.stats.geninvgauss (log-density; its rejection sampler by
two-sample Kolmogorov-Smirnov against scipy's generator);
as a BLR candidate, a loss linear in T is a conjugate step, through the generated numpy module (which carries
dbesselk as a helper for its Newton solve μ → (p, a, b))."""
import mpmath
import numpy as np
import pytest
import sympy as sp
import yaml
from scipy import special, stats

from blr_derive import api
from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
from blr_derive.codegen.backends.torch.printer import ElementwisePrinter
from blr_derive.core.errors import UnsupportedTarget
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.specialfns import dbesselk, dbesselk_numpy
from blr_derive.families.library import load_family
from blr_derive.verify.family import _draw_sampler


@pytest.mark.parametrize("n", [0, 1, 2, 3])
@pytest.mark.parametrize("nu, x", [(0.0, 0.01), (0.7, 1.0), (-2.3, 3.5), (6.0, 0.2), (1.5, 40.0)])
def test_dbesselk_matches_mpmath(n, nu, x):
    with mpmath.workdps(30):                 # local precision: other modules set their own global one
        want = float(mpmath.diff(lambda v: mpmath.besselk(v, x), nu, n))
    assert dbesselk_numpy(n, nu, x) == pytest.approx(want, rel=1e-12, abs=1e-30)   # odd n at nu = 0: exactly 0


def test_dbesselk_derivatives_and_printers():
    nu, x = sp.Symbol("nu", real=True), sp.Symbol("x", positive=True)
    K = parse_expression("besselk(nu, x)", {"nu": nu, "x": x})
    assert K == dbesselk(0, nu, x)
    assert sp.diff(K, nu) == dbesselk(1, nu, x)
    at = {nu: 0.8, x: 1.3}
    h = 1e-6
    fd = (special.kv(0.8, 1.3 + h) - special.kv(0.8, 1.3 - h)) / (2 * h)
    assert float(sp.diff(K, x).subs(at).evalf()) == pytest.approx(fd, rel=1e-8)
    printer = BLRNumPyPrinter()
    # printed exponentially scaled (codegen/scaled.py): e^{-x} times scipy's kve, or the helper's scaled integral
    assert printer.doprint(K) == "numpy.exp(-x)*scipy.special.kve(nu, x)"
    code = printer.doprint(sp.diff(K, nu, 2))
    assert code == "numpy.exp(-x)*_dbesselk(2, nu, x, True)" and "_dbesselk" in printer.helpers
    with pytest.raises(UnsupportedTarget, match="K_0 and K_1 only"):
        ElementwisePrinter().doprint(K)


@pytest.mark.parametrize("p, a, b", [(0.4, 1.3, 0.8), (-1.7, 0.5, 2.0), (3.0, 4.0, 0.1), (0.0, 0.2, 0.3)])
def test_gig_matches_scipy(p, a, b):
    fam = load_family("generalized_inverse_gaussian")
    P = fam.params
    vals = {P["p"].symbol: p, P["a"].symbol: a, P["b"].symbol: b}
    law = stats.geninvgauss(p, np.sqrt(a * b), scale=np.sqrt(b / a))
    kernel = lambda t: t ** (p - 1) * mpmath.exp(-(a * t + b / t) / 2)                # noqa: E731
    T = [mpmath.log, lambda t: t, lambda t: 1 / t]
    with mpmath.workdps(30):                 # local precision (see above)
        Z = mpmath.quad(kernel, [0, 1, mpmath.inf])                                    # normalized by quadrature

        def E(f):
            return float(mpmath.quad(lambda t: f(t) * kernel(t), [0, 1, mpmath.inf]) / Z)
        mu = [E(f) for f in T]
        H = E(lambda t: -mpmath.log(kernel(t) / Z))
        cov = np.array([[E(lambda t: (f(t) - mu[i]) * (g(t) - mu[j])) for j, g in enumerate(T)]
                        for i, f in enumerate(T)])
    assert [float(fam.evaluate(m, vals)) for m in fam.mu_ord] == pytest.approx(mu, rel=1e-12)
    assert float(fam.evaluate(fam.entropy(), vals)) == pytest.approx(H, rel=1e-11, abs=1e-12)
    for t in (0.3, 1.0, 2.5):
        assert float(fam.evaluate(fam.log_density(), {**vals, fam.theta: t})) == pytest.approx(law.logpdf(t), rel=1e-11)
    lam = {l: float(fam.evaluate(e, vals)) for l, e in zip(fam.lam, fam.eta)}
    assert np.asarray(fam.fisher_at(lam), dtype=float) == pytest.approx(cov, rel=1e-11)


@pytest.mark.parametrize("p, a, b", [(0.4, 1.3, 0.8), (-2.5, 0.05, 0.3), (4.0, 9.0, 2.0)])
def test_the_rejection_sampler_draws_the_gig_law(p, a, b):
    fam = load_family("generalized_inverse_gaussian")
    P = fam.params
    th = _draw_sampler(fam, {P["p"].symbol: p, P["a"].symbol: a, P["b"].symbol: b}, np.random.default_rng(4),
                       200_000)
    law = stats.geninvgauss(p, np.sqrt(a * b), scale=np.sqrt(b / a))
    assert np.all(th > 0)
    # two-sample Kolmogorov-Smirnov against scipy's own generator (its CDF integrates numerically point by point)
    assert stats.ks_2samp(th, law.rvs(size=200_000, random_state=np.random.default_rng(9))).pvalue > 1e-4


def test_a_loss_linear_in_the_statistics_is_a_conjugate_step():
    """ℓ = 0.3 log θ + 0.5 θ + 0.2/θ: λ ← (1 − ρ)λ − ρ(0.3, 0.5, 0.2) (Eq. 6, h = 1), i.e. p − 1, −a/2, −b/2 move
    linearly; the generated numpy module inverts μ → (p, a, b) by Newton with its dbesselk helper."""
    rho = 0.25
    mod = api.derive(yaml.safe_dump({"name": "gig_lin", "family": "generalized_inverse_gaussian",
                                     "loss": {"expression": "0.3*log(theta) + 0.5*theta + 0.2/theta"},
                                     "hyperparameters": {"rho": rho}, "approximations": ["exact"]})).compile("numpy")
    p, a, b = 0.6, 1.4, 0.9
    out = mod.step(mod.init(p=p, a=a, b=b), rho=rho)
    lam = np.array([p - 1, -a / 2, -b / 2])
    want = (1 - rho) * lam - rho * np.array([0.3, 0.5, 0.2])
    assert [float(out["p"]), float(out["a"]), float(out["b"])] == pytest.approx(
        [want[0] + 1, -2 * want[1], -2 * want[2]], rel=1e-9)


def test_score_function_over_the_gig_is_unbiased_for_the_exact_step():
    """ES over GIG(p, a, b) through its rejection sampler: ℓ = c·T is linear in T = (log θ, θ, 1/θ), so the exact
    step is λ ← (1 − ρ)λ − ρc (Eq. 6, h = 1).  The Fisher information (Bessel-function ratios) is too large for a
    symbolic inverse of its entries, so the update names them (fisher11, …) and inverts the matrix of names; the
    generated step averaged over 8 000 replicas equals the exact one in λ within 5 standard errors."""
    d = api.derive(yaml.safe_dump({"name": "es_gig", "family": "generalized_inverse_gaussian", "loss": "abstract",
                                   "hyperparameters": {"rho": 0.1, "S": {"default": 8, "type": "int"}},
                                   "approximations": [{"score_function": {"samples": "S"}}]}))
    assert "fisher11 = " in d.code("numpy")
    mod = d.compile("numpy")
    mod.CHECK_DOMAINS = False       # single replicas step outside Ω (an estimate of either sign); their mean is tested
    n, c, rho = 8_000, np.array([0.3, 0.5, 0.2]), 0.1
    p0, a0, b0 = 0.6, 1.4, 0.9
    out = mod.step(mod.init(p=np.full(n, p0), a=np.full(n, a0), b=np.full(n, b0)),
                   oracles={"loss": lambda th: c[0] * np.log(th) + c[1] * th + c[2] / th},
                   rng=np.random.default_rng(6), rho=rho, S=8)
    lam0 = np.array([p0 - 1, -a0 / 2, -b0 / 2])
    want = (1 - rho) * lam0 - rho * c
    got = (out["p"] - 1, -out["a"] / 2, -out["b"] / 2)
    for g, w in zip(got, want):
        assert abs(g.mean() - w) < 5 * g.std(ddof=1) / np.sqrt(n)
        assert g.std() > 1e-4
