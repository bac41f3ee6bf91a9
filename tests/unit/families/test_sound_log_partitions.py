"""Log-partitions left to the engine's integration, written as a researcher would from the README's family file
format, must come out in forms that are finite and correct everywhere in the parameter domain (log-gamma sums, no
reflection products Γ(−x)·sin(πx), which were NaN at integer and half-integer parameters and of the wrong sign
elsewhere): A, μ = ∇A and F = ∇²A are compared with scipy.special/scipy.stats and with mpmath quadrature at integer,
half-integer, small and large parameters (blr_derive/families/soundness.py, partition.power_form)."""
import mpmath
import numpy as np
import pytest
import scipy.special as sps
import scipy.stats as st
import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.families.library import load_family
from blr_derive.families.soundness import problems, reference_log_partition, sound_closed_form

BETA_PRIME = """
name: beta_prime
variable: theta
support: positive
parameters:
  a: {domain: positive}
  b: {domain: positive}
sufficient_statistics: [log(theta), log(1 + theta)]
natural_parameters: [a - 1, -a - b]
"""

STUDENT = """
name: student_t
variable: theta
support: real
parameters:
  nu: {domain: positive, description: degrees of freedom (scale 1/sqrt(nu))}
sufficient_statistics: [log(1 + theta**2)]
natural_parameters: [-(nu + 1)/2]
"""

LOMAX = """
name: lomax
variable: theta
support: positive
parameters:
  a: {domain: positive}
sufficient_statistics: [log(1 + theta)]
natural_parameters: [-a - 1]
"""

GAMMA_NATURAL = """
name: gamma_natural
variable: theta
support: positive
parameters:
  k: {domain: positive}
  r: {domain: positive}
sufficient_statistics: [log(theta), theta]
natural_parameters: [k, -r]
base_measure: 1/theta
"""

#: integer, half-integer, small and large values of a positive parameter
VALUES = [1.0, 2.0, 3.0, 0.5, 1.5, 2.5, 1e-3, 0.07, 40.0, 350.0]


def _family(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fam") / "family.yaml"
    path.write_text(text)
    return load_family(str(path))


@pytest.fixture(scope="module")
def beta_prime(tmp_path_factory):
    return _family(tmp_path_factory, BETA_PRIME)


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    return _family(tmp_path_factory, STUDENT)


def _no_reflection(e):
    return not e.has(sp.sin, sp.cos, sp.tan) and all(
        g.args[0].could_extract_minus_sign() is False or g.args[0].is_positive for g in e.atoms(sp.gamma))


def _values(fam, vals):
    """A, μ, F at ordinary parameters, through the engine's float64 evaluation (NumericFamily, lambdify)."""
    lam = [float(fam.evaluate(e, vals)) for e in fam.eta]
    num = fam.numeric()
    return num.A(lam), num.grad(lam), num.hess(lam)


def test_beta_prime_is_a_log_beta_function(beta_prime):
    A = beta_prime.A
    assert not A.has(sp.sin, sp.cos, sp.gamma) and sp.count_ops(A) < 20
    a, b = (beta_prime.params[n].symbol for n in "ab")
    ordinary = A.xreplace(dict(zip(beta_prime.lam, beta_prime.eta)))
    assert sp.simplify(ordinary - (sp.loggamma(a) + sp.loggamma(b) - sp.loggamma(a + b))) == 0


@pytest.mark.parametrize("a", VALUES)
@pytest.mark.parametrize("b", [1.0, 2.0, 0.5, 2.5, 1e-3, 90.0])
def test_beta_prime_against_scipy_and_mpmath(beta_prime, a, b):
    """A = log B(a, b); μ = (E[log θ], E[log(1 + θ)]) = (ψ(a) − ψ(b), ψ(a+b) − ψ(b));
    F = Cov[T] = [[ψ'(a) + ψ'(b), ψ'(b)], [ψ'(b), ψ'(b) − ψ'(a+b)]].  The reference is taken at the parameters the
    float64 natural parameters stand for (a = λ₁ + 1, b = −λ₁ − λ₂ − 1 in exact arithmetic, 40 digits): at
    a = 40, b = 10⁻³ the rounding of λ alone moves b by 2e-12 of itself, which no form in λ can undo."""
    pa, pb = (beta_prime.params[n].symbol for n in "ab")
    A, mu, F = _values(beta_prime, {pa: a, pb: b})
    l1, l2 = (float(beta_prime.evaluate(e, {pa: a, pb: b})) for e in beta_prime.eta)
    with mpmath.workdps(40):
        x, y = mpmath.mpf(l1) + 1, -mpmath.mpf(l1) - mpmath.mpf(l2) - 1
        psi = [lambda v, n=n: mpmath.psi(n, v) for n in range(3)]
        want_A = float(mpmath.loggamma(x) + mpmath.loggamma(y) - mpmath.loggamma(x + y))
        want_mu = [float(psi[0](x) - psi[0](y)), float(psi[0](x + y) - psi[0](y))]
        t = psi[1]
        want_F = [[float(t(x) + t(y)), float(t(y))], [float(t(y)), float(t(y) - t(x + y))]]
        # float64 computes the arguments a = λ₁ + 1, b = −λ₁ − λ₂ − 1 with an absolute error of a few eps·(|λ₁| +
        # |λ₂| + 1) (a cancellation when a or b is small next to λ): the derivative of each quantity in its
        # arguments times that error bounds what any form in λ can reach
        darg = 4 * np.finfo(float).eps * (abs(l1) + abs(l2) + 1)
        cond = [float(max(abs(psi[n](v)) for v in (x, y, x + y))) * darg for n in range(3)]
    assert abs(A - want_A) <= 1e-13 * max(1.0, abs(want_A)) + cond[0]
    assert A == pytest.approx(sps.betaln(a, b), rel=1e-11, abs=1e-11 + cond[0])   # scipy at the ordinary parameters
    scale = max(1.0, abs(sps.digamma(a)), abs(sps.digamma(b)))             # ψ(a) − ψ(b) cancels: its terms' size
    np.testing.assert_allclose(mu, want_mu, rtol=1e-13, atol=1e-13 * scale + cond[1])
    np.testing.assert_allclose(F, want_F, rtol=1e-12, atol=1e-13 * max(1.0, abs(want_F[0][0])) + cond[2])
    assert cond[1] < 1e-7 * max(1.0, abs(want_F[0][0]))      # the bound is not vacuous


@pytest.mark.parametrize("a,b", [(1.0, 1.0), (2.0, 3.0), (0.5, 1.5)])
def test_beta_prime_mean_of_T_by_scipy_stats(beta_prime, a, b):
    pa, pb = (beta_prime.params[n].symbol for n in "ab")
    _, mu, _ = _values(beta_prime, {pa: a, pb: b})
    law = st.betaprime(a, b)
    assert mu[0] == pytest.approx(law.expect(np.log), rel=1e-7)
    assert mu[1] == pytest.approx(law.expect(np.log1p), rel=1e-7)


@pytest.mark.parametrize("nu", [1.0, 2.0, 3.0, 0.5, 1.5, 4.5, 1e-3, 0.2, 60.0, 500.0])
def test_student_t_against_scipy(student, nu):
    """∫ (1 + θ²)^{-(ν+1)/2} dθ = √π Γ(ν/2)/Γ((ν+1)/2); E[log(1 + θ²)] = ψ((ν+1)/2) − ψ(ν/2); the variance of T is
    ψ'(ν/2) − ψ'((ν+1)/2)."""
    A, mu, F = _values(student, {student.params["nu"].symbol: nu})
    assert A == pytest.approx(0.5 * np.log(np.pi) + sps.gammaln(nu / 2) - sps.gammaln((nu + 1) / 2), rel=1e-13)
    assert mu[0] == pytest.approx(sps.digamma((nu + 1) / 2) - sps.digamma(nu / 2), rel=1e-12)
    assert F[0][0] == pytest.approx(sps.polygamma(1, nu / 2) - sps.polygamma(1, (nu + 1) / 2), rel=1e-10)
    if 0.4 < nu < 100:
        law = st.t(df=nu, scale=1 / np.sqrt(nu))
        assert mu[0] == pytest.approx(law.expect(lambda x: np.log1p(x * x)), rel=1e-6)
    assert _no_reflection(student.A)


def test_lomax_was_not_normalizable_and_now_is(tmp_path_factory):
    """(1 + θ)^{−a−1} on (0, ∞): sympy found no closed form when the power was split in two, (1+θ)^{−a}(1+θ)^{−1}."""
    fam = _family(tmp_path_factory, LOMAX)
    for a in (0.5, 1.0, 2.0, 7.5):
        A, mu, _ = _values(fam, {fam.params["a"].symbol: a})
        assert A == pytest.approx(-np.log(a), rel=1e-13, abs=1e-14)
        assert mu[0] == pytest.approx(st.lomax(a).expect(np.log1p), rel=1e-7)


def test_gamma_in_natural_coordinates_is_log_gamma(tmp_path_factory):
    fam = _family(tmp_path_factory, GAMMA_NATURAL)
    k, r = (fam.params[n].symbol for n in "kr")
    for kv in (1.0, 2.0, 0.5, 3.5, 200.0):
        A, mu, _ = _values(fam, {k: kv, r: 1.7})
        assert A == pytest.approx(sps.gammaln(kv) - kv * np.log(1.7), rel=1e-13)
        assert mu[0] == pytest.approx(sps.digamma(kv) - np.log(1.7), rel=1e-12)


# ------------------------------------------------------------------------------------------ the rewrite itself


def test_reflection_products_are_rewritten_to_positive_gammas(beta_prime):
    """The form sympy's Meijer-G route gave for the beta prime before its integrand was canonicalized (a sum of
    products of Γ of negative arguments): every Γ is reflected where its argument is not positive on the domain,
    and the trigonometric factor left over is the constant 1."""
    a, b = (beta_prime.params[n].symbol for n in "ab")
    G = sp.gamma
    Z = (G(a) ** 2 * G(b - a) * G(1 - a - b) * G(a - b + 1) / G(1 - b) ** 2
         + G(b) ** 2 * G(a - b) * G(1 - a - b) * G(b - a + 1) / G(1 - a) ** 2) / (G(a) * G(b))
    assert sp.N(Z.subs({a: 1, b: 2})) is sp.nan or not sp.N(Z.subs({a: 1, b: 2})).is_finite
    out = sound_closed_form(beta_prime, Z)
    assert sp.simplify(out - G(a) * G(b) / G(a + b)) == 0


def test_a_trigonometric_factor_that_is_not_constant_is_not_dropped(beta_prime):
    a, b = (beta_prime.params[n].symbol for n in "ab")
    assert sound_closed_form(beta_prime, sp.gamma(a) * (2 + sp.cos(sp.pi * a))) is None


# ------------------------------------------------------------------------------------------ validation


def test_reference_log_partition_is_quadrature(beta_prime):
    pa, pb = (beta_prime.params[n].symbol for n in "ab")
    for a, b in ((1.0, 1.0), (0.5, 2.5), (3.0, 0.1), (0.1, 0.1), (25.0, 4.0)):
        want = float(mpmath.log(mpmath.beta(a, b)))
        assert reference_log_partition(beta_prime, {pa: a, pb: b}) == pytest.approx(want, rel=1e-13, abs=1e-14)
    beta = load_family("beta")                  # the unit interval, with both endpoint singularities
    for a, b in ((0.1, 0.1), (0.5, 3.0), (7.0, 0.2)):
        want = float(mpmath.log(mpmath.beta(a, b)))
        assert reference_log_partition(beta, {beta.params["a"].symbol: a, beta.params["b"].symbol: b}) == \
            pytest.approx(want, rel=1e-13, abs=1e-14)


def test_problems_name_the_point_and_the_quantity(tmp_path_factory):
    """A gamma log-partition written through the reflection formula is NaN at integer α; one off by α² is wrong
    against quadrature: each is reported with the parameters and the quantity."""
    fam = load_family("gamma")
    l1, l2 = fam.lam
    reflected = sp.log(sp.pi / (sp.sin(sp.pi * (l1 + 1)) * sp.gamma(-l1))) - (l1 + 1) * sp.log(-l2)
    (msg,) = problems(fam, reflected)
    assert "alpha = 1," in msg and ("NaN" in msg or "not a finite real number" in msg)
    wrong = fam.A + (l1 + 1) ** 2 / 7
    (msg,) = problems(fam, wrong)
    assert "quadrature" in msg and "alpha = " in msg
    assert problems(fam, fam.A) == []


def test_an_unsound_derived_form_is_a_located_error(tmp_path_factory, monkeypatch):
    """When the rewrite cannot help, loading fails with the file, the line and the point (here sympy's closed form
    is replaced by a reflection product to stand for one that sympy might return)."""
    from blr_derive.families import partition

    def reflected(fam, Z):
        return Z.replace(sp.gamma, lambda x: sp.pi / (sp.sin(sp.pi * x) * sp.gamma(1 - x)) if x.has(
            *[p.symbol for p in fam.params.values()]) else sp.gamma(x))
    monkeypatch.setattr(partition, "sound_closed_form", reflected)
    with pytest.raises(SpecError) as err:
        _family(tmp_path_factory, GAMMA_NATURAL.replace("gamma_natural", "gamma_natural_reflected"))
    text = str(err.value)
    assert "family.yaml:8" in text and "not usable everywhere" in text and "k = 1," in text


def test_a_log_partition_too_large_to_print_is_a_located_error(tmp_path_factory, monkeypatch):
    from blr_derive.families import partition
    monkeypatch.setattr(partition, "MAX_OPS", 3)
    with pytest.raises(SpecError) as err:
        _family(tmp_path_factory, BETA_PRIME.replace("beta_prime", "beta_prime_small_limit"))
    assert "operations" in str(err.value) and "declare" in str(err.value) and "family.yaml:" in str(err.value)


@pytest.mark.slow
def test_builtin_families_validate_unchanged():
    """The catalog's families pass the validation as they were (their derived forms did not change)."""
    for name in ("beta", "gamma", "inverse_gamma", "chi", "weibull", "exponential", "rayleigh", "laplace"):
        fam = load_family(name)
        assert problems(fam, fam.A, limit=3) == [], name
