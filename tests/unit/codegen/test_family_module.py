"""The module of a family alone (``blr_derive.ir.build.family_ir``): the parameter maps a recipe's module carries for a
numeric μ → λ map, for any family with scalar natural parameters, in numpy and jax (what ``blr-derive check`` runs at
the hard points).  Its maps read the fixed parameters as keyword arguments (the chi's k: a NameError before) and
start Newton's method inside Ω (the categorical's simplex: 1/K each, not 1/2 each, which is p3 = 0)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sps

from blr_derive.codegen.registry import emit
from blr_derive.families.library import load_family
from blr_derive.ir.build import family_ir
from conftest import FUNCTION_TARGETS


def module(name, target):
    ns = {}
    exec(compile(emit(family_ir(load_family(name), name), target), f"<{name} {target}>", "exec"), ns)
    return ns


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_a_fixed_parameter_is_a_keyword_argument_of_the_maps(target, x64):
    """chi with k = 3 degrees of freedom and scale σ: A(λ) = log Γ(k/2) − (k/2) log(−λ) − log 2, λ = −1/(2σ²)."""
    m = module("chi", target)
    sigma, k = 1.7, 3.0
    lam = np.asarray(m["natural_parameters"](sigma, k), dtype=float)
    assert lam[0] == pytest.approx(-1 / (2 * sigma ** 2), rel=1e-15)
    A = float(m["log_partition"](lam, k=k))
    assert A == pytest.approx(sps.gammaln(k / 2) - k / 2 * np.log(-lam[0]) - np.log(2), rel=1e-13)
    mu = np.asarray(m["expectation_parameters"](lam, k=k), dtype=float)
    assert mu[0] == pytest.approx(k * sigma ** 2, rel=1e-13)                   # E[θ²] = kσ²
    F = np.asarray(m["fisher_information"](lam, k=k), dtype=float)
    assert F[0, 0] == pytest.approx(2 * k * sigma ** 4, rel=1e-12)             # Var[θ²] = 2kσ⁴
    assert float(m["ordinary_from_natural"](lam, k=k)["sigma"]) == pytest.approx(sigma, rel=1e-14)
    assert float(m["ordinary_from_expectation"](mu, k=k)["sigma"]) == pytest.approx(sigma, rel=1e-10)
    state = m["init"](sigma=sigma, k=k)
    assert float(m["step"](state)["sigma"]) == sigma and float(m["step"](state)["k"]) == k


def test_newton_starts_inside_the_simplex():
    m = module("categorical", "numpy")
    lam = m["natural_parameters"](0.2, 0.3)
    back = m["ordinary_from_expectation"](m["expectation_parameters"](lam))
    assert float(back["p1"]) == pytest.approx(0.2, rel=1e-10) and float(back["p2"]) == pytest.approx(0.3, rel=1e-10)


def test_families_with_matrix_natural_parameters_have_no_family_module():
    assert family_ir(load_family("wishart")) is None
