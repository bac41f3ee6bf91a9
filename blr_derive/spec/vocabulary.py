"""The vocabulary of family declarations: shapes, parameter domains, supports (with the integration limits of the
continuous ones) and the keys a family file may use."""
from __future__ import annotations

import re

import sympy as sp

SHAPES = ("scalar", "vector", "matrix")


DOMAINS = {
    "real": "a real number (vector)",
    "positive": "positive (elementwise)",
    "unit_interval": "a number in (0, 1)",
    "simplex": "the scalar parameters with this domain are together the first K-1 coordinates of a "
               "probability vector: each positive, their sum below 1",
    "positive_definite": "a symmetric positive-definite matrix",
    "symmetric": "a symmetric matrix",
}


#: continuous scalar supports: integration limits
CONTINUOUS_SUPPORTS = {
    "real": (-sp.oo, sp.oo),
    "positive": (0, sp.oo),
    "unit_interval": (0, 1),
    "circular": (-sp.pi, sp.pi),        # an angle (von Mises)
}


#: discrete scalar supports
DISCRETE_SUPPORTS = {
    "binary_pm1": "{-1, +1}",
    "nonnegative_integers": "{0, 1, 2, ...}",
}


#: a finite range of integers, "integers 0..n" (lo and hi written out; a sized family writes "integers 0..{n}")
MAX_RANGE = 10_000


def integer_range(support):
    """(lo, hi) of a support "integers LO..HI" (0 ≤ LO < HI, at most MAX_RANGE values), else None."""
    m = re.fullmatch(r"integers (\d{1,6})\.\.(\d{1,6})", support) if isinstance(support, str) else None
    if m is None:
        return None
    lo, hi = int(m.group(1)), int(m.group(2))
    return (lo, hi) if lo < hi and hi - lo < MAX_RANGE else None


def is_discrete(support) -> bool:
    return support in DISCRETE_SUPPORTS or integer_range(support) is not None or count_total(support) is not None


def is_scalar_support(support) -> bool:
    return support in SCALAR_SUPPORTS or integer_range(support) is not None


def count_total(support):
    """N of a support "counts summing to N" (a fixed-size vector of nonnegative integers whose components add up
    to N, the multinomial's), else None."""
    m = re.fullmatch(r"counts summing to (\d{1,4})", support) if isinstance(support, str) else None
    return int(m.group(1)) if m is not None and int(m.group(1)) >= 1 else None


#: the most points a finite joint support may have (they are enumerated: sums, checks)
MAX_JOINT_POINTS = 500


#: supports of a fixed-size vector variable taken as a whole
JOINT_SUPPORTS = {
    "categorical": "one-hot vectors of length K (exactly one component is 1, the others 0)",
    "sphere": "unit vectors of length K (the sphere S^(K-1); von Mises-Fisher)",
    "simplex": "the open probability simplex: components positive and summing to 1 "
               "(the last component is 1 minus the others)",
}


SUPPORTS = {
    **{k: f"({lo}, {hi})" for k, (lo, hi) in CONTINUOUS_SUPPORTS.items()},
    **DISCRETE_SUPPORTS,
    **JOINT_SUPPORTS,
    "positive_definite": "symmetric positive-definite matrices (matrix variables)",
    "counts summing to N": "vectors of nonnegative integers of a fixed size K adding up to N (multinomial counts; "
                           "at most 500 such vectors)",
}


SCALAR_SUPPORTS = tuple(CONTINUOUS_SUPPORTS) + tuple(DISCRETE_SUPPORTS)


FAMILY_KEYS = {
    "name", "description", "reference", "variable", "dimension", "support", "parameters",
    "sufficient_statistics", "base_measure", "natural_parameters", "log_partition",
    "expectation_parameters", "gaussian", "elementwise", "sampler", "sizes", "expected_log_base_measure",
    "axis",     # the family for a generic coordinate of a run-time size (blr_derive/families/axis.py)
}


PARAM_KEYS = {"shape", "domain", "fixed", "description", "greater_than"}


VARIABLE_KEYS = {"name", "shape", "size", "components"}


MAX_SIZE = 16
