"""``blr-derive check`` of a matrix family with heavy tails: an inverse Wishart IW(X | Ψ, ν) over 2×2 matrices with
the whole domain ν > P − 1 (E[X] is infinite for ν ≤ P + 1; the statistics T = (X⁻¹, log|X|) have every moment at
every ν > P − 1: X⁻¹ is Wishart).

* The check integrates it in the Cholesky coordinates of X⁻¹ (coordinates.inverse_coordinates_preferred): at
  ν = 1.5, Ψ = I the quadrature reproduces A = log Γ₂(ν/2) + ν log 2 = 3.1033891898939907 (by hand), μ and F, and
  the whole check passes.
* In the Cholesky coordinates of X (what check used before) the same point is a funnel the grid does not resolve:
  ∫ q came out 5.8e6 and check told the user to fix log_partition.  Halving the step moves log Z by log 2 there
  (``Quadrature.unsettled``): the checks against the quadrature are skipped with the reason, never failed.
* A wrong log-partition (log 3 for log 2, with its own gradient declared as μ) is still caught at ν = 1.5."""
import textwrap

import numpy as np
import pytest
from scipy import special

from blr_derive.families.library import load_family
from blr_derive.verify import quadrature
from blr_derive.verify.coordinates import inverse_coordinates_preferred
from blr_derive.verify.family import check_family
from blr_derive.verify.quadrature import FamilyModel, Quadrature, parameter_point

IW = """
    name: inverse_wishart_wide
    description: inverse Wishart over its whole domain nu > P - 1
    variable: {name: X, shape: matrix}
    dimension: P
    support: positive_definite
    parameters:
      Psi: {shape: matrix, domain: positive_definite, description: scale matrix}
      n: {domain: real, greater_than: P - 1, description: degrees of freedom}
    sufficient_statistics:
      - inv(X)
      - logdet(X)
    base_measure: 1
    natural_parameters:
      - -Psi/2
      - -(n + P + 1)/2
    log_partition: (lambda2 + (P + 1)/2)*logdet(-2*lambda1) - (lambda2 + (P + 1)/2)*P*log(LOG2) + lmvgamma(-lambda2 - (P + 1)/2, P)
    expectation_parameters:
      - n*inv(Psi)
      - logdet(Psi) - P*log(LOG2) - mvdigamma(n/2, P)
    sampler:
      define:
        B: inv(chol(Psi)).T*bartlett(n)
      value: inv(B*B.T)
"""
#: A at ν = 1.5, Ψ = I, P = 2 by hand: log Γ₂(3/4) + (ν/2)·P·log 2
A_HAND = float(special.multigammaln(0.75, 2) + 1.5 * np.log(2))


def family(tmp_path, log2="2", name="iw.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(IW).replace("LOG2", log2))
    return load_family(str(path))


def at(fam, model, nu):
    vals = {fam.params["Psi"].symbol: np.eye(2), fam.params["n"].symbol: nu}
    fixed_vals, lam_vals, c, A, mu = parameter_point(fam, model.nf, vals, 2)
    F = fam.fisher_at({**lam_vals, **fixed_vals}, 2)
    with np.errstate(all="ignore"):
        return Quadrature(model, c, fixed_vals, A), A, mu, F


def test_coordinates_follow_the_inverses_in_the_statistics(tmp_path):
    assert inverse_coordinates_preferred(family(tmp_path))
    assert not inverse_coordinates_preferred(load_family("wishart"))
    assert FamilyModel(family(tmp_path), 2).inverse_coords


def test_inverse_wishart_at_nu_1_5_is_integrated(tmp_path):
    fam = family(tmp_path)
    quad, A, mu, F = at(fam, FamilyModel(fam, 2), 1.5)
    assert A_HAND == pytest.approx(3.1033891898939907, abs=1e-13)
    assert A == pytest.approx(A_HAND, abs=1e-12)
    # E[X⁻¹] = ν Ψ⁻¹, E[log|X|] = log|Ψ| − P log 2 − ψ(ν/2) − ψ(ν/2 − 1/2)
    want = [1.5, 0.0, 1.5, -2 * np.log(2) - special.digamma(0.75) - special.digamma(0.25)]
    np.testing.assert_allclose(mu, want, rtol=1e-12, atol=1e-14)
    assert quad.unsettled == {}
    assert abs(quad.normalization - 1) < 1e-8                      # measured 1.3e-11
    np.testing.assert_allclose(quad.mean, want, rtol=1e-8, atol=1e-8)
    assert np.max(np.abs(quad.cov - F)) < 1e-7                     # measured 1e-8


def test_check_passes_the_whole_domain(tmp_path):
    checks = check_family(family(tmp_path), hunt=True)
    by = {c.name: c for c in checks}
    assert all(c.passed for c in checks), [(c.name, c.value, c.note) for c in checks if not c.passed]
    assert {c.name for c in checks if c.kind == "na"} == {"generated_numpy", "generated_jax"}
    assert by["normalization"].value < 1e-8 and by["hard_log_partition"].value < 1e-8
    assert by["fisher_vs_covariance"].value < 1e-6 and by["hard_fisher"].value < 1e-7
    assert not any("did not converge" in n for n in checks.notes)


def test_a_funnel_the_grid_does_not_resolve_is_reported_not_blamed(tmp_path, monkeypatch):
    # the Cholesky coordinates of X: the off-diagonal entry's spread grows with the diagonal ones
    monkeypatch.setattr(quadrature, "inverse_coordinates_preferred", lambda fam: False)
    fam = family(tmp_path)
    model = FamilyModel(fam, 2)
    quad, A, mu, F = at(fam, model, 1.5)
    assert quad.normalization > 1e3                                 # measured 5.8e6: no reference
    assert quad.unsettled["logZ"] == pytest.approx(np.log(2), abs=1e-2)
    checks = check_family(fam, points=1, hunt=True)
    by = {c.name: c for c in checks}
    assert all(c.passed for c in checks), [(c.name, c.value, c.note) for c in checks if not c.passed]
    for name in ("normalization", "mu_vs_quadrature", "mu_vs_monte_carlo", "fisher_vs_covariance",
                 "entropy_vs_quadrature", "sampler_vs_density"):
        assert by[name].kind == "na" and "the quadrature did not converge at" in by[name].note, by[name]
        assert "heavy tails" in by[name].note
    # the checks of the derived forms that need no quadrature are made all the same
    assert by["mu_vs_finite_differences"].value < 1e-6 and by["round_trip_expectation"].value < 1e-8
    assert any(n.startswith("the quadrature did not converge at Psi = I·[1 .. 1], n = 1.5") for n in checks.notes)


def test_a_wrong_log_partition_is_caught_at_nu_1_5(tmp_path):
    fam = family(tmp_path, log2="3", name="wrong.yaml")
    quad, A, mu, F = at(fam, FamilyModel(fam, 2), 1.5)
    assert A == pytest.approx(A_HAND + 1.5 * np.log(1.5), abs=1e-12)
    assert quad.unsettled == {}                                     # the grid does not depend on A
    assert quad.normalization == pytest.approx(1.5 ** -1.5, rel=1e-8)
    by = {c.name: c for c in check_family(fam, points=1, hunt=False)}
    assert not by["normalization"].passed and by["normalization"].value > 0.1
    assert not by["mu_vs_quadrature"].passed and not by["entropy_vs_quadrature"].passed
