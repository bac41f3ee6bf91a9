"""``check``'s quadrature for variables with a vector component (``verify/conditional.py``): the vector is integrated
by the exact Gauss–Hermite rule of its Gaussian given the other coordinates.  A variable of two vectors (no other
coordinates) is integrated to rounding; a wrong log-partition fails; a vector that is not Gaussian given the rest
is a reported failure, never a wrong pass or a crash."""
import textwrap


from blr_derive.core.yamlio import load_yaml_text
from blr_derive.families.library import family_from_spec
from blr_derive.verify.family import check_family

TWO_VECTORS = """
name: two_vectors
variable:
  components:
    - {name: a, shape: vector}
    - {name: b, shape: vector}
dimension: P
support: [real, real]
parameters:
  m: {shape: vector}
  s: {domain: positive}
sufficient_statistics:
  - a + b
  - a.T*a + b.T*b
base_measure: (2*pi)**(-P)
natural_parameters:
  - s*m
  - -s/2
log_partition: -P*log(-2*lambda2) - lambda1.T*lambda1/(2*lambda2)
"""


def build(text):
    return family_from_spec(load_yaml_text(textwrap.dedent(text).lstrip("\n"), "f.yaml"), "f.yaml")


def by_name(checks):
    return {c.name: c for c in checks}


def test_two_gaussian_vectors_are_integrated_to_rounding():
    c = by_name(check_family(build(TWO_VECTORS), points=3, seed=0, dim=2))
    assert all(x.passed for x in c.values())
    assert c["normalization"].value < 1e-13 and c["fisher_vs_covariance"].value < 1e-12
    assert c["entropy_vs_quadrature"].value < 1e-13


def test_a_wrong_log_partition_fails():
    bad = TWO_VECTORS.replace("/(2*lambda2)", "/(8*lambda2)").replace("name: two_vectors", "name: wrong_a")
    c = by_name(check_family(build(bad), points=3, seed=0, dim=2))
    assert not c["normalization"].passed and not c["mu_vs_quadrature"].passed


def test_a_vector_that_is_not_gaussian_given_the_rest_is_a_reported_failure():
    quartic = """
    name: quartic
    variable:
      components:
        - {name: x, shape: vector}
        - {name: L, shape: matrix}
    dimension: P
    support: [real, positive_definite]
    parameters:
      k: {domain: positive}
      n: {domain: real, greater_than: P + 1}
    sufficient_statistics:
      - x.T*L*x + (x.T*x)**2
      - tr(L)
      - logdet(L)
    natural_parameters: [-k, -1/2, (n - P)/2]
    log_partition: -log(-lambda1) - log(-lambda2) + lgamma(lambda3 + 1)
    """
    c = by_name(check_family(build(quartic), points=1, seed=0, dim=2))
    assert not c["normalization"].passed
    assert "not Gaussian in the vector component" in c["normalization"].note
