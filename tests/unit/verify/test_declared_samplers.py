"""Samplers are part of a family's declaration (θ from one draw u ~ U(0, 1) or z ~ N(0, 1)): `check` compares the
declared sampler's moments of T with the density's (a sampler of the wrong law is rejected), and a Gaussian with
a normal-draw sampler supports the score-function (evolution-strategies) natural gradient (Eq. 4)."""
import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError
from blr_derive.families.library import load_family
from blr_derive.verify.family import check_family
from conftest import ROOT

DIAG = (ROOT / "families" / "gaussian_diag.yaml").read_text(encoding="utf-8")
EXPONENTIAL = (ROOT / "families" / "exponential.yaml").read_text(encoding="utf-8")


def sampler_check(text, tmp_path, name):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    (res,) = [c for c in check_family(load_family(str(path)), points=2) if c.name == "sampler_vs_density"]
    return res


@pytest.mark.parametrize("text, name", [(DIAG, "gaussian_diag"), (EXPONENTIAL, "exponential")])
def test_the_built_in_samplers_pass(text, name, tmp_path):
    res = sampler_check(text, tmp_path, name)
    assert res.passed and res.value < 5


@pytest.mark.parametrize("text, old, new", [
    (DIAG, "sampler: m + z/sqrt(s)", "sampler: m + 1.1*z/sqrt(s)"),          # 10 % too wide
    (DIAG, "sampler: m + z/sqrt(s)", "sampler: m + 0.05 + z/sqrt(s)"),       # shifted
    (EXPONENTIAL, "sampler:", "sampler: 1.05*"),                               # the wrong rate
])
def test_a_sampler_of_the_wrong_law_fails_check(text, old, new, tmp_path):
    assert old in text
    res = sampler_check(text.replace(old, new, 1), tmp_path, "wrong")
    assert not res.passed and res.value > 5


@pytest.mark.parametrize("old, new, msg", [
    ("sampler: m + z/sqrt(s)", "sampler: m + 1/sqrt(s)", "independent draws u, u2, ..., u16"),       # no draw
    ("sampler: m + z/sqrt(s)", "sampler: m + z/sqrt(s) + w", "unknown"),                          # not a draw
])
def test_a_sampler_needs_draws_and_only_draws_and_parameters(old, new, msg, tmp_path):
    path = tmp_path / "bad_sampler.yaml"
    path.write_text(DIAG.replace(old, new), encoding="utf-8")
    with pytest.raises(SpecError, match=msg) as exc:
        load_family(str(path))
    assert exc.value.line is not None


def test_a_parameter_named_like_a_draw_is_refused(tmp_path):
    path = tmp_path / "clash.yaml"
    path.write_text(EXPONENTIAL.replace("  r: {", "  u: {").replace("/r", "/u").replace("- -r", "- -u"),
                    encoding="utf-8")
    with pytest.raises(SpecError, match="parameter 'u' has the name of a random draw"):
        load_family(str(path))


def test_score_function_over_a_diagonal_gaussian_is_unbiased_for_the_exact_blr_step():
    """ES over N(m, 1/s): the step from S loss values per coordinate, averaged over 40 000 independent
    coordinates (replicas of one problem), equals the exact BLR step on ℓ = a(θ − c)²/2 (s ← (1−ρ)s + ρa,
    m ← m − ρa(m − c)/s_new) within 5 standard errors, in the natural parameters (s m, −s/2) in which the
    estimator is linear (m_new itself is a ratio of estimates)."""
    mod = api.derive(yaml.safe_dump({"name": "es_diag", "family": "gaussian_diag", "loss": "abstract",
                                     "hyperparameters": {"rho": 0.1, "S": {"default": 8, "type": "int"}},
                                     "approximations": [{"score_function": {"samples": "S"}}]})).compile("numpy")
    n, a, c, m0, s0, rho = 40_000, 1.7, 0.4, -0.3, 2.0, 0.1
    loss = lambda th: 0.5 * a * (th - c) ** 2                                  # noqa: E731  (per coordinate)
    out = mod.step(mod.init(m=np.full(n, m0), s=np.full(n, s0)), oracles={"loss": loss},
                   rng=np.random.default_rng(0), rho=rho, S=8)
    s_exact = (1 - rho) * s0 + rho * a
    m_exact = m0 - rho * a * (m0 - c) / s_exact
    for got, want in ((out["s"], s_exact), (out["s"] * out["m"], s_exact * m_exact)):
        assert abs(got.mean() - want) < 5 * got.std(ddof=1) / np.sqrt(n)
    assert out["s"].std() > 1e-3                                                # really a Monte Carlo estimate


# ------------------------------------------------------------------ inverse-CDF samplers and the KS check
INVERSE_CDF = ["gamma", "inverse_gamma", "chi", "chi_square", "beta", "log_normal"]


@pytest.mark.parametrize("name", INVERSE_CDF)
def test_the_inverse_cdf_samplers_pass_moments_and_kolmogorov_smirnov(name):
    """gammaincinv/betaincinv/normal-draw samplers of the gamma-type families, at 3 random parameter points."""
    res = {c.name: c for c in check_family(load_family(name), points=3)}
    assert res["sampler_vs_density"].passed and res["sampler_vs_density"].value < 5
    assert res["sampler_ks"].passed and res["sampler_ks"].value < 3


def test_a_sampler_with_the_right_moments_but_the_wrong_law_fails_kolmogorov_smirnov(tmp_path):
    """A log-normal with the exponential's mean 1/r and second moment 2/r² (the moments of T = θ that the
    moment check compares): exp(-log r - log(2)/2 + sqrt(log 2) z).  The moment z-test passes, KS rejects it."""
    text = EXPONENTIAL.replace("sampler: -log(u)/r", "sampler: exp(-log(r) - log(2)/2 + sqrt(log(2))*z)", 1)
    path = tmp_path / "moment_matched.yaml"
    path.write_text(text, encoding="utf-8")
    res = {c.name: c for c in check_family(load_family(str(path)), points=2, mc_samples=20000)}
    assert res["sampler_vs_density"].passed
    assert not res["sampler_ks"].passed and res["sampler_ks"].value > 5


def test_score_function_over_a_gamma_is_unbiased_for_the_exact_blr_step():
    """ES over Gamma(α, β) with the gammaincinv sampler: on ℓ = aθ − b log θ (linear in T = (log θ, θ)) the exact
    BLR step is λ ← (1−ρ)λ − ρ∇_μE[ℓ] = (1−ρ)λ − ρ(−b, a) (Eq. 6), i.e. α − 1 ← (1−ρ)(α − 1) + ρb and
    β ← (1−ρ)β + ρa; the generated numpy step (scipy.special.gammaincinv) averaged over 40 000 replicas equals it
    within 5 standard errors."""
    mod = api.derive(yaml.safe_dump({"name": "es_gamma", "family": "gamma", "loss": "abstract",
                                     "hyperparameters": {"rho": 0.1, "S": {"default": 8, "type": "int"}},
                                     "approximations": [{"score_function": {"samples": "S"}}]})).compile("numpy")
    n, A, B, al0, be0, rho = 40_000, 1.3, 0.7, 2.5, 1.5, 0.1
    out = mod.step(mod.init(alpha=np.full(n, al0), beta=np.full(n, be0)),
                   oracles={"loss": lambda th: A * th - B * np.log(th)}, rng=np.random.default_rng(1), rho=rho, S=8)
    for got, want in ((out["alpha"], 1 + (1 - rho) * (al0 - 1) + rho * B), (out["beta"], (1 - rho) * be0 + rho * A)):
        assert abs(got.mean() - want) < 5 * got.std(ddof=1) / np.sqrt(n)
        assert got.std() > 1e-3


def test_reparameterization_through_an_inverse_cdf_without_a_closed_form_derivative_is_refused():
    with pytest.raises(SpecError, match=r"sampler gammaincinv\(alpha, u\)/beta .* no closed form; use "
                                        r"'score_function'") as exc:
        api.derive(yaml.safe_dump({"name": "rp_gamma", "family": "gamma", "loss": "abstract",
                                   "hyperparameters": {"rho": 0.1},
                                   "approximations": [{"reparameterization": {"samples": 4}}]}))
    assert exc.value.line is not None


# ------------------------------------------------------------------ samplers with several draws
def test_the_inverse_gaussian_sampler_uses_two_draws_and_matches_scipy():
    """Michael-Schucany-Haas (a normal z and a uniform u per sample): moments and law against scipy.stats."""
    from scipy import stats
    from blr_derive.verify.family import _draw_sampler
    fam = load_family("inverse_gaussian")
    assert {s.name for s in fam.sampler.free_symbols} == {"mu", "lam", "u", "z"}
    mu, lam = fam.params["mu"].symbol, fam.params["lam"].symbol
    for m, l in ((1.4, 0.7), (0.3, 5.0)):
        th = _draw_sampler(fam, {mu: m, lam: l}, np.random.default_rng(11), 400_000)
        law = stats.invgauss(m / l, scale=l)
        assert stats.kstest(th, law.cdf).pvalue > 1e-4
        assert abs(th.mean() - m) < 5 * th.std() / np.sqrt(len(th))
    res = {c.name: c for c in check_family(fam, points=3)}
    assert res["sampler_vs_density"].passed and res["sampler_ks"].passed


def test_a_wrong_two_draw_sampler_fails_check(tmp_path):
    """The same sampler with the branch probability mu/(mu + y) replaced by 1/2 is another law."""
    text = (ROOT / "families" / "inverse_gaussian.yaml").read_text(encoding="utf-8")
    wrong = text.replace("binary(u - mu/(mu + mu/", "binary(u - 1/2 + 0*mu/(mu + mu/")
    assert wrong != text
    path = tmp_path / "ig_wrong.yaml"
    path.write_text(wrong, encoding="utf-8")
    res = {c.name: c for c in check_family(load_family(str(path)), points=2)}
    assert not res["sampler_vs_density"].passed or not res["sampler_ks"].passed


def test_score_function_with_a_two_draw_sampler_is_unbiased_and_numpy_only():
    """ES over the inverse Gaussian: ℓ = aθ + b/θ is linear in T = (θ, 1/θ), so the exact BLR step is
    λ ← (1−ρ)λ − ρ(a, b) − ρ∇_μE_q[log h] (Eq. 6 with the base measure h = (2πθ³)^(-1/2) in the entropy); the
    reference takes E_q[log h] = −log(2π)/2 − 3/2 E[log θ] with scipy.stats.invgauss.expect and ∇_μ by central
    differences in μ = (E θ, E 1/θ) = (m, 1/m + 1/l).  The generated numpy step (two draws per sample) averaged
    over 40 000 replicas equals it in λ within 5 standard errors.  The torch target draws one number per sample
    and says so."""
    from scipy import stats
    from blr_derive.core.errors import UnsupportedTarget

    def e_log_h(mu1, mu2):
        m, l = mu1, 1 / (mu2 - 1 / mu1)
        return -np.log(2 * np.pi) / 2 - 1.5 * stats.invgauss(m / l, scale=l).expect(np.log, epsabs=1e-13,
                                                                                      epsrel=1e-13)
    d = api.derive(yaml.safe_dump({"name": "es_ig", "family": "inverse_gaussian", "loss": "abstract",
                                   "hyperparameters": {"rho": 0.1, "S": {"default": 8, "type": "int"}},
                                   "approximations": [{"score_function": {"samples": "S"}}]}))
    mod = d.compile("numpy")
    n, a, b, mu0, lam0, rho = 40_000, 0.8, 1.5, 1.2, 2.0, 0.1
    out = mod.step(mod.init(mu=np.full(n, mu0), lam=np.full(n, lam0)),
                   oracles={"loss": lambda th: a * th + b / th}, rng=np.random.default_rng(2), rho=rho, S=8)
    lam1 = -out["lam"] / (2 * out["mu"] ** 2)
    lam2 = -out["lam"] / 2
    m1, m2, h = mu0, 1 / mu0 + 1 / lam0, 1e-4
    g1 = (e_log_h(m1 + h, m2) - e_log_h(m1 - h, m2)) / (2 * h)
    g2 = (e_log_h(m1, m2 + h) - e_log_h(m1, m2 - h)) / (2 * h)
    want1 = (1 - rho) * (-lam0 / (2 * mu0 ** 2)) - rho * a - rho * g1
    want2 = (1 - rho) * (-lam0 / 2) - rho * b - rho * g2
    for got, want in ((lam1, want1), (lam2, want2)):
        assert abs(got.mean() - want) < 5 * got.std(ddof=1) / np.sqrt(n)
        assert got.std() > 1e-4
    with pytest.raises(UnsupportedTarget, match="one random number per sample; the family's sampler uses 2"):
        api.derive(yaml.safe_dump({"name": "es_ig", "family": "inverse_gaussian", "loss": "abstract",
                                   "parameter": "mu", "hyperparameters": {"rho": 0.1},
                                   "approximations": [{"score_function": {"samples": 4}}]})).compile("torch")


FULL = (ROOT / "families" / "gaussian_full.yaml").read_text(encoding="utf-8")
ISOTROPIC = (ROOT / "families" / "gaussian_isotropic.yaml").read_text(encoding="utf-8")


def checks_of(text, tmp_path, name="gaussian_user"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return {c.name: c for c in check_family(load_family(str(path)), points=2)}


@pytest.mark.parametrize("text", [FULL, ISOTROPIC])
def test_a_gaussian_declaration_is_the_sampler_of_a_vector_gaussian(text, tmp_path):
    """θ = mean + chol(covariance)·z, z ~ N(0, I): its draws have the density's moments of T, and the declared mean
    and covariance are the density's to quadrature accuracy."""
    res = checks_of(text, tmp_path)
    assert res["gaussian_vs_density"].passed and res["gaussian_vs_density"].value < 1e-12
    assert res["sampler_vs_density"].passed and res["sampler_vs_density"].value < 5


@pytest.mark.parametrize("text, old, new", [
    (FULL, "covariance: inv(S)", "covariance: S"),                 # the precision given as the covariance
    (FULL, "covariance: inv(S)", "covariance: 1.1*inv(S)"),        # 10 % too wide
    (FULL, "mean: m,", "mean: 0.95*m,"),                           # the wrong location
    (ISOTROPIC, "covariance: eye(P)/s", "covariance: eye(P)/(2*s)"),
])
def test_a_wrong_gaussian_declaration_fails_check(text, old, new, tmp_path):
    assert old in text
    res = checks_of(text.replace(old, new, 1), tmp_path)
    assert not res["gaussian_vs_density"].passed and res["gaussian_vs_density"].value > 1e-3
    assert not res["sampler_vs_density"].passed and res["sampler_vs_density"].value > 5


WISHART = (ROOT / "families" / "wishart.yaml").read_text(encoding="utf-8")
INV_WISHART = (ROOT / "families" / "inverse_wishart.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize("text", [WISHART, INV_WISHART])
def test_matrix_samplers_by_bartlett_pass_check(text, tmp_path):
    """Wishart and inverse Wishart sample by Bartlett's decomposition (``bartlett(n)``, ``chol``): their draws have
    the density's moments of T = (X or X⁻¹, log det X)."""
    res = checks_of(text, tmp_path, "matrix_family")
    assert res["sampler_vs_density"].passed and res["sampler_vs_density"].value < 5


@pytest.mark.parametrize("text, old, new", [
    (WISHART, "B: chol(V)*bartlett(n)", "B: chol(V)*bartlett(n + 1)"),          # one degree of freedom too many
    (WISHART, "B: chol(V)*bartlett(n)", "B: 1.05*chol(V)*bartlett(n)"),          # scale 10 % too large
    (INV_WISHART, "value: inv(B*B.T)", "value: B*B.T"),                          # a Wishart, not its inverse
])
def test_a_wrong_matrix_sampler_fails_check(text, old, new, tmp_path):
    assert old in text
    res = checks_of(text.replace(old, new, 1), tmp_path, "matrix_family")
    assert not res["sampler_vs_density"].passed and res["sampler_vs_density"].value > 5


def test_the_wishart_sampler_against_scipy():
    """The declared Wishart sampler's draws against scipy.stats.wishart's moments: E[X] = nV exactly, and the
    sample mean of log det X against the mean of scipy's own draws (z-test)."""
    from scipy import stats
    from blr_derive.verify.draws import draw_matrix_sampler as _draw_matrix_sampler
    fam = load_family("wishart")
    V = np.array([[2.0, 0.6], [0.6, 1.0]])
    n = 4.5
    vals = {fam.params["V"].symbol: V, fam.params["n"].symbol: n}
    X = _draw_matrix_sampler(fam, vals, np.random.default_rng(0), 40_000, 2)
    mean, se = X.mean(0), X.std(0, ddof=1) / np.sqrt(len(X))
    assert np.all(np.abs(mean - n * V) < 5 * se)
    ld = np.linalg.slogdet(X)[1]
    ref = np.linalg.slogdet(stats.wishart(df=n, scale=V).rvs(40_000, random_state=1))[1]
    z = abs(ld.mean() - ref.mean()) / np.hypot(ld.std() / 200, ref.std() / 200)
    assert z < 5, z


def test_matrix_sampler_declarations_are_located_errors(tmp_path):
    for old, new, message in [
        ("    B: chol(V)*bartlett(n)", "    B: chol(V)*V", "a matrix sampler draws with bartlett(n)"),
        ("    B: chol(V)*bartlett(n)", "    B: chol(V)*bartlett(V)", "bartlett() takes one scalar"),
        ("  value: B*B.T", "  value: tr(B*B.T)", "the sampled value must be a P x P matrix"),
    ]:
        path = tmp_path / "w.yaml"
        path.write_text(WISHART.replace(old, new, 1), encoding="utf-8")
        with pytest.raises(SpecError) as info:
            load_family(str(path))
        assert message in str(info.value) and info.value.line is not None, str(info.value)
