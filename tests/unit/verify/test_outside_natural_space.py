"""A family whose declared parameter domains admit values that are no distribution: a bivariate Gaussian by its
precision entries a1, a2 > 0 and r real is normalizable only where r² < a1·a2, which the domains cannot state.
At such a random point the quadrature of h·exp(<λ,T>) fails ('Singular matrix'), and every quadrature row said
only that (the summary: 'check log_partition'); the rows now name the point and the cause, and the Cholesky
reparameterization that the note suggests passes every random-point check."""
import numpy as np

from blr_derive import api
from blr_derive.verify.family import check_family

A = ("log(2*pi) - log(4*lambda3*lambda4 - lambda5**2)/2 + (-lambda4*lambda1**2 + lambda5*lambda1*lambda2 "
     "- lambda3*lambda2**2)/(4*lambda3*lambda4 - lambda5**2)")
ENTRIES = f"""\
name: bivariate_by_entries
variable: {{components: [theta1, theta2]}}
parameters:
  m1: {{domain: real}}
  m2: {{domain: real}}
  a1: {{domain: positive}}
  a2: {{domain: positive}}
  r: {{domain: real}}
sufficient_statistics: [theta1, theta2, theta1**2, theta2**2, theta1*theta2]
natural_parameters: [a1*m1 + r*m2, a2*m2 + r*m1, -a1/2, -a2/2, -r]
log_partition: {A}
"""
CHOLESKY = f"""\
name: bivariate_by_cholesky
variable: {{components: [theta1, theta2]}}
parameters:
  m1: {{domain: real}}
  m2: {{domain: real}}
  l1: {{domain: positive}}
  l2: {{domain: positive}}
  l21: {{domain: real}}
sufficient_statistics: [theta1, theta2, theta1**2, theta2**2, theta1*theta2]
natural_parameters: [l1**2*m1 + l1*l21*m2, (l21**2 + l2**2)*m2 + l1*l21*m1, -l1**2/2, -(l21**2 + l2**2)/2, -l1*l21]
log_partition: {A}
"""


def test_a_random_point_outside_the_natural_space_is_named():
    rows = {c.name: c for c in check_family(api.family(ENTRIES))}
    # seed 0's first point: a1 = 0.626, a2 = 1.65, r = -1.08, r² - a1·a2 = 0.126 > 0
    for name in ("normalization", "mu_vs_quadrature", "fisher_vs_covariance", "entropy_vs_quadrature"):
        assert rows[name].value == np.inf
        assert "at m1 = -0.659294, m2 = 0.10544, a1 = 0.626491, a2 = 1.64797, r = -1.07609: ∇²A(λ) is not positive " \
               "definite" in rows[name].note, rows[name].note
        assert "outside the natural-parameter space" in rows[name].note and "Cholesky factor" in rows[name].note
    assert rows["fisher_positive_definite"].value < 0 and "outside the natural-parameter space" in \
        rows["fisher_positive_definite"].note
    rows = check_family(api.family(CHOLESKY))
    assert all(c.passed for c in rows), [(c.name, c.value, c.note) for c in rows if not c.passed]


def test_a_fisher_information_keeps_its_repeated_denominator_factored():
    """sympy's simplify expanded (4λ₃λ₄ − λ₅²)³ in the Cholesky family's F (and (λ₁² − 4λ₂λ₃)² in the built-in
    normal_gamma's): near a singular precision (l2 = 0.0014, l21 = −0.999999, correlation 1 − 1e-6) the expanded
    terms cancel to 1e-17 of their size and F₃₃ came out −1.8e10 in float64 where it is 5.000005e11; factored, the
    float64 value agrees with 30 digits to 1e-9 (check's generated_numpy failed with 1.04 there)."""
    import sympy as sp
    from blr_derive.families.symbolic import factor_repeated_denominator
    fam = api.family(CHOLESKY)
    F = fam.fisher_matrix()
    d = sp.fraction(F[2, 2])[1]
    assert any(isinstance(f, sp.Pow) and f.exp == 3 for f in sp.Mul.make_args(d)), d
    point = {fam.params[k].symbol: v for k, v in
             {"m1": 0, "m2": 0, "l1": 1, "l2": sp.Float("0.001414213209", 30), "l21": sp.Float("-0.999999", 30)}.items()}
    lam = [sp.N(e.xreplace(point), 40) for e in fam.eta]
    exact = np.array(sp.N(F.xreplace(dict(zip(fam.lam, lam))), 30).tolist(), dtype=float)
    f64 = np.array(sp.lambdify(fam.lam, F, "numpy")(*[float(x) for x in lam]), dtype=float)
    np.testing.assert_allclose(f64, exact, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(exact[2, 2], 5.000005e11, rtol=1e-6)
    x, y = sp.symbols("x y")
    assert factor_repeated_denominator(1 / sp.expand((x - y) ** 2)) == 1 / (x - y) ** 2
    assert factor_repeated_denominator(1 / (x**2 - y**2)) == 1 / (x**2 - y**2)      # no repeated factor: as it was
