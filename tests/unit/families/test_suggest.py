"""The conjugacy screen of ``blr-derive suggest`` (issue 42, item 3): for a loss in the recipe grammar, the families
of the library in which it is linear in the sufficient statistics (ℓ = c0 + Σ c_i T_i), and, where none is, the
family built from the loss's own terms.  The expected families are the textbook conjugate pairs; the decomposition
is checked by putting ℓ back together, and the built family's log-partition against quadrature."""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from scipy import integrate

from blr_derive.core.errors import SpecError
from blr_derive.families.library import builtin_family_names, load_family
from blr_derive.families.suggest import (build_from_loss, family_yaml, loss_domain, parse_loss, screen,
                                         statistics_of)


@pytest.fixture(scope="module")
def library():
    return [(n, load_family(n)) for n in builtin_family_names()]


# (loss, variable, support asked, the first family, the families that must be among the matches)
PAIRS = [
    # k successes in n Bernoulli/binomial trials, success probability p
    ("-k*log(p) - (n - k)*log(1 - p)", "p", None, "beta", {"beta"}),
    # Poisson counts with sum s over n observations, rate lam, and a Gamma(a0, b0) prior
    ("n*lam - s*log(lam) - (a0 - 1)*log(lam) + b0*lam", "lam", None, "gamma", {"gamma"}),
    # Gaussian observations with known variance, unknown mean mu, and a Gaussian prior
    ("(S2 - 2*mu*S1 + n*mu**2)/(2*sigma2) + s0*(mu - m0)**2/2", "mu", None, "gaussian_diag", {"gaussian_diag"}),
    # Gaussian observations with known mean: the precision tau (scatter S)
    ("tau*S/2 - n*log(tau)/2", "tau", None, "gamma", {"gamma", "generalized_inverse_gaussian"}),
    # categorical counts c over the simplex
    ("-c*log(theta)", "theta", "simplex", "dirichlet", {"dirichlet"}),
    # exponential waiting times with sum S, rate lam
    ("lam*S - n*log(lam)", "lam", None, "gamma", {"gamma"}),
]


@pytest.mark.parametrize("loss,variable,support,first,among", PAIRS, ids=[p[3] + ":" + p[0] for p in PAIRS])
def test_textbook_conjugate_pairs(library, loss, variable, support, first, among):
    expr, theta, data = parse_loss(loss, variable)
    found = screen(expr, theta, data, library, support)
    names = [m.family for m in found.matches]
    assert names[0] == first, names
    assert among <= set(names)
    for m in found.matches:
        # the coefficients put the loss back together: ℓ − Σ c_i T_i is free of the variable
        rest = sp.simplify(sp.expand_log(expr - sum(c * t for c, t in zip(m.coefficients, m.statistics)), force=True))
        assert not rest.has(theta), (m.family, rest)
    # a family that is not conjugate says which term is not a multiple of its statistics (or that its support is
    # not the one asked for)
    assert support is not None or any("not a multiple of a sufficient statistic" in why for why in found.rejected.values())


def test_the_poisson_coefficients_are_the_data(library):
    """ℓ = nθ − s log θ in the gamma family (T = log θ, θ): c = (−s, n), no statistic unused; in the generalized
    inverse Gaussian (T = log θ, θ, 1/θ) the third coefficient is 0 and it ranks below."""
    expr, theta, _ = parse_loss("n*theta - s*log(theta)")
    n, s = sp.Symbol("n", real=True), sp.Symbol("s", real=True)
    found = screen(expr, theta, [], library)
    gamma, gig = found.matches[:2]
    assert (gamma.family, gig.family) == ("gamma", "generalized_inverse_gaussian")
    assert [sp.simplify(c) for c in gamma.coefficients] == [-s, n] and gamma.unused == 0
    assert gig.unused == 1 and gig.coefficients[2] == 0


def test_support_keeps_only_the_families_of_that_support(library):
    expr, theta, data = parse_loss("-c*log(theta)")
    assert [m.family for m in screen(expr, theta, data, library, "unit_interval").matches] == ["beta"]
    found = screen(expr, theta, data, library)
    assert found.domain == "positive" and found.matches[0].family == "chi_square"     # T = log θ alone
    assert "dirichlet" in [m.family for m in found.matches if not m.on_domain]


@pytest.mark.parametrize("loss,domain", [("theta**2 - 3*theta", "real"), ("theta - log(theta)", "positive"),
                                         ("1/theta + theta", "positive"), ("sqrt(theta)", "positive"),
                                         ("-log(1 - theta)", "unit_interval"),
                                         ("-log(theta) - 2*log(1 - theta)", "unit_interval"),
                                         ("cos(theta - b)", "real")])
def test_loss_domain(loss, domain):
    expr, theta, _ = parse_loss(loss)
    assert loss_domain(expr, theta) == domain


def test_statistics_are_the_distinct_variable_factors_of_the_terms():
    expr, theta, _ = parse_loss("a*(theta**2 - 1)**2 + b*theta*log(theta) - 3*log(theta**2)")
    stats = statistics_of(expr, theta)
    assert len(stats) == 4 and set(stats) == {theta**4, theta**2, theta * sp.log(theta), sp.log(theta)}


def test_a_family_built_from_the_loss_has_the_log_partition_of_quadrature():
    """ℓ = aθ³ − c log θ: no family of the library has T = (θ³, log θ); the built one (support positive, from
    log θ) derives, and its A(λ) equals log ∫ exp(λ1 θ³ + λ2 log θ) dθ by quadrature at three points."""
    expr, theta, _ = parse_loss("a*theta**3 - c*log(theta)")
    text, fam, m = build_from_loss(expr, theta, "cubic", "cubic.yaml")
    assert "support: positive" in text and m.statistics == [theta**3, sp.log(theta)] and m.unused == 0
    for l1, l2 in [(-0.5, 0.3), (-2.0, 1.5), (-0.1, -0.4)]:
        A = float(fam.A.subs(dict(zip(fam.lam, [l1, l2]))))
        q, _ = integrate.quad(lambda t: math.exp(l1 * t**3 + l2 * math.log(t)), 0, np.inf, limit=200)
        assert abs(A - math.log(q)) < 1e-8, (l1, l2, A, math.log(q))


def test_the_built_family_of_a_quartic_loss_is_refused_where_its_partition_has_no_closed_form():
    """ℓ = aθ⁴ + bθ² on the real line: T = (θ⁴, θ²), λ1 < 0 from the fastest-growing statistic; ∫ exp(λ1 θ⁴ +
    λ2 θ²) dθ has no closed form in the grammar over the whole domain: the family file's own located error, which
    says so (it is finite, so not "not normalizable", as it said)."""
    expr, theta, _ = parse_loss("a*theta**4 + b*theta**2")
    text, stats, support = family_yaml(expr, theta, "quartic")
    assert support == "real" and stats == [theta**4, theta**2]
    assert "  - -lam1" in text and "  - lam2" in text
    with pytest.raises(SpecError, match="no closed form of the log-partition: .* is finite at") as exc:
        build_from_loss(expr, theta, "quartic", "quartic.yaml")
    assert exc.value.file == "quartic.yaml"


@pytest.mark.parametrize("loss,variable,needle", [("theta**", "theta", "syntax error"),
                                                   ("a*x", "theta", "does not depend on theta"),
                                                   ("__import__('os')", "theta", "--loss"),
                                                   ("theta", "log", "--variable"),
                                                   ("x" * 3000, "theta", "longer than")])
def test_bad_loss_is_a_located_error(loss, variable, needle):
    with pytest.raises(SpecError) as exc:
        parse_loss(loss, variable)
    assert needle in str(exc.value) and exc.value.file == "<command line>"
