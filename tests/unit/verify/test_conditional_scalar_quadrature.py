"""``check``'s quadrature for a variable of scalar components of which some are Gaussian given the others (the
normal-gamma's θ given τ): those are found from log h + <λ, T> (a polynomial of degree 2 in them) and integrated by
the Gauss–Hermite rule of their conditional Gaussian at each node of the outer rule.  A shape α < 0.8 puts the
normal-gamma's mass at τ → 0, where θ given τ spreads as 1/√(κτ): a product grid scaled once at the mode missed it
(seed 2: normalization 21.6 for a correct family).  The references are the normal-gamma's moments written by hand."""
import textwrap

import numpy as np
import pytest
from scipy import special

from blr_derive.core.yamlio import load_yaml_text
from blr_derive.families.library import family_from_spec, load_family
from blr_derive.verify.family import check_family
from blr_derive.verify.quadrature import FamilyModel, Quadrature


def build(text):
    return family_from_spec(load_yaml_text(textwrap.dedent(text).lstrip("\n"), "f.yaml"), "f.yaml")


def by_name(checks):
    return {c.name: c for c in checks}


#: the normal-gamma with its log-partition written out (A = log Γ(λ4 + ½) − (λ4 + ½) log(λ1²/(4λ2) − λ3)
#: − ½ log(−2λ2)); WRONG changes one term
NORMAL_GAMMA = """
name: normal_gamma_declared
variable: {components: [theta, tau]}
support: [real, positive]
parameters:
  m: {domain: real}
  kappa: {domain: positive}
  alpha: {domain: positive}
  beta: {domain: positive}
sufficient_statistics: [tau*theta, tau*theta**2, tau, log(tau)]
base_measure: 1/sqrt(2*pi)
natural_parameters: [kappa*m, -kappa/2, -beta - kappa*m**2/2, alpha - 1/2]
log_partition: lgamma(lambda4 + 1/2) - (lambda4 + 1/2)*log(lambda1**2/(4*lambda2) - lambda3) - log(-2*lambda2)/2
sampler:
  define:
    tau_s: gammaincinv(alpha, u)/beta
  value: [m + z/sqrt(kappa*tau_s), tau_s]
"""
WRONG = NORMAL_GAMMA.replace("log(-2*lambda2)/2", "log(-2*lambda2)/3").replace("_declared", "_wrong")


def reference(m, kappa, alpha, beta):
    """(A, E[T]) of the normal-gamma: τ ~ Gamma(α, β), θ | τ ~ N(m, 1/(κτ))."""
    A = special.gammaln(alpha) - alpha * np.log(beta) - 0.5 * np.log(kappa)
    mu = [m * alpha / beta, 1 / kappa + m ** 2 * alpha / beta, alpha / beta, special.digamma(alpha) - np.log(beta)]
    return A, np.array(mu)


def quadrature_at(fam, m, kappa, alpha, beta):
    model = FamilyModel(fam, 2)
    p = fam.params
    lam = {l: fam.evaluate(e, {p["m"].symbol: m, p["kappa"].symbol: kappa, p["alpha"].symbol: alpha,
                                  p["beta"].symbol: beta}, 2) for l, e in zip(fam.lam, fam.eta)}
    c = model.nf.coords_of(lam)
    with np.errstate(all="ignore"):
        return model, Quadrature(model, c, {}, 0.0)


def test_theta_given_tau_is_found_gaussian_and_nothing_else():
    assert FamilyModel(load_family("normal_gamma"), 2).gaussian_coords == [0]
    for name in ("gaussian_diag", "gamma"):       # one component: no outer coordinate
        assert not getattr(FamilyModel(load_family(name), 2), "gaussian_coords", None)
    quartic = NORMAL_GAMMA.replace("tau*theta**2", "tau*theta**4").replace("_declared", "_quartic")
    assert not FamilyModel(build(quartic), 2).gaussian_coords
    # every component real: θ given s = log τ is Gaussian (s is not: e^s), and s stays on the grid
    log_precision = (NORMAL_GAMMA.split("sampler:")[0].replace("[real, positive]", "[real, real]").replace("[theta, tau]", "[theta, s]")
                     .replace("[tau*theta, tau*theta**2, tau, log(tau)]", "[exp(s)*theta, exp(s)*theta**2, exp(s), s]")
                     .replace("alpha - 1/2]", "alpha + 1/2]").replace("lambda4 + 1/2", "lambda4 - 1/2")
                     .replace("_declared", "_log_precision"))
    assert FamilyModel(build(log_precision), 2).gaussian_coords == [0]


@pytest.mark.parametrize("alpha", [0.1, 0.2, 0.536, 0.73, 1.9])
def test_small_shapes_are_integrated_to_rounding(alpha):
    m, kappa, beta = -2.325, 0.896, 0.693
    model, q = quadrature_at(load_family("normal_gamma"), m, kappa, alpha, beta)
    A, mu = reference(m, kappa, alpha, beta)
    assert q.conditional is not None and not q.truncated
    assert abs(q.logZ - A) < 1e-12
    assert np.max(np.abs(q.mean - mu) / np.maximum(1, np.abs(mu))) < 1e-10


def test_mass_beyond_double_precision_is_flagged():
    # α = 5e-7: E[log τ] = ψ(α) − log β ≈ −2e6, τ = e^-2e6 underflows: the quadrature is not a reference there
    _, q = quadrature_at(load_family("normal_gamma"), 0.0, 1.0, 5e-7, 1.0)
    assert q.truncated


def test_the_check_passes_where_the_product_grid_failed_and_keeps_its_power():
    # seed 6's first point has α = 0.279 (m = 1.05, κ = 2.43, β = 0.93): the product grid gave
    # ∫ h exp(<λ,T> − A) = 4.3e4 there (normalization, μ, Fisher, entropy and the sampler all failed)
    good = by_name(check_family(build(NORMAL_GAMMA), points=1, seed=6, mc_samples=5000))
    assert all(c.passed for c in good.values()), [c for c in good.values() if not c.passed]
    assert good["normalization"].value < 1e-13 and good["mu_vs_quadrature"].value < 1e-11
    bad = by_name(check_family(build(WRONG), points=1, seed=6, mc_samples=5000))
    assert not bad["normalization"].passed and bad["normalization"].value > 0.1
    assert not bad["mu_vs_quadrature"].passed
