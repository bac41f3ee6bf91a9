"""The parameter solver does not ask sympy for roots of polynomials beyond radicals (blr_derive/families/solve.py
MAX_RADICAL_DEGREE): a truncated geometric family on {0, ..., 30} has μ(p) a ratio of polynomials of degree 31,
where sympy's solve ground for its whole 20-second budget before the numeric inverse took over.  The family loads
with the numeric μ → p, which inverts μ computed here from the probabilities by summation."""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.families.library import family_from_spec
from blr_derive.families.solve import _beyond_radicals

p, t = sp.symbols("p t", positive=True)


def test_degree_and_terms_decide():
    assert _beyond_radicals([sp.Eq(sum(p**k for k in range(7)), t)], [p]) == 6
    assert _beyond_radicals([sp.Eq(sum(k * p**k for k in range(9)) / sum(p**k for k in range(9)), t)], [p]) == 8
    assert _beyond_radicals([sp.Eq(p**5, t)], [p]) is None            # binomial: a radical
    assert _beyond_radicals([sp.Eq(p**4 + p + 1, t)], [p]) is None     # degree 4: radicals
    assert _beyond_radicals([sp.Eq(sp.exp(p) + p, t)], [p]) is None    # not a polynomial: sympy decides


def test_a_long_finite_support_gets_the_numeric_inverse(tmp_path):
    spec = {"name": "truncated_geometric", "variable": "k", "support": "integers 0..30",
            "parameters": {"p": {"domain": "unit_interval", "description": "ratio"}},
            "sufficient_statistics": ["k"], "natural_parameters": ["log(p)"]}
    fam = family_from_spec(spec, str(tmp_path / "truncated_geometric.yaml"))
    assert fam.mu_inverse == "numeric"
    ks = np.arange(31)
    for ratio in (0.2, 0.9, 0.99):
        w = ratio ** ks
        mu = float((ks * w).sum() / w.sum())
        got = fam.numeric_ord_from_mu({"mu1": mu})
        assert abs(float(np.ravel(got[fam.params["p"].symbol])[0]) - ratio) < 1e-9
