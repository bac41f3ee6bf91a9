"""The check's quadrature on the unit interval represents θ near 1 by b = 1 − θ; a statistic log g(θ) with g(1) = 0
other than log(1 − θ) itself (log(1 − θ²) of a Kumaraswamy with a = 2) was evaluated from the rounded θ and lost
its digits there: ∇A = E_q[T] failed at 4.3e-7 and ∇²A = Cov_q[T] at 7.5e-6 for a correct family (a user's file).
Written in b, log(b(2 − b)), both agree to rounding (here on the family ∝ (1 − θ²)^(b−1), whose entropy has a
closed form)."""

from blr_derive.verify.check import check_file

FAMILY = """name: one_minus_square
description: q(theta) proportional to (1 - theta^2)^(b - 1) on (0, 1); log-partition declared.
variable: theta
support: unit_interval
parameters:
  b: {domain: positive, description: shape}
sufficient_statistics:
  - log(1 - theta**2)
base_measure: 1
natural_parameters:
  - b - 1
log_partition: log(sqrt(pi)/2) + lgamma(lambda1 + 1) - lgamma(lambda1 + 3/2)
"""


def test_a_statistic_vanishing_at_one_is_integrated_to_rounding(tmp_path):
    path = tmp_path / "one_minus_square.yaml"
    path.write_text(FAMILY)
    rep = check_file(path, points=3, seed=0)
    got = {c.name: c for c in rep.checks}
    for name in ("normalization", "mu_vs_quadrature", "fisher_vs_covariance", "mu_vs_finite_differences",
                 "entropy_vs_quadrature"):
        assert got[name].passed, (name, got[name])
    assert got["mu_vs_quadrature"].value < 1e-12 and got["fisher_vs_covariance"].value < 1e-12
    # the declared log-partition: ∫_0^1 (1 − θ²)^λ dθ = √π Γ(λ + 1) / (2 Γ(λ + 3/2))
    assert got["normalization"].value < 1e-9
