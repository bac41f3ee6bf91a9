"""``check``'s federated line (blr_derive/verify/entry_points.py): the generated dual_step, client_message,
server_step and global_objective against their symbolic expressions at random rounds of two clients.  Before it, ``check`` ran only a
federated module's ``step``, so a server solve that raised (a Cholesky of the negative-definite msg2 − δ/2 I of the
(m, Σ) parametrization) or returned wrong numbers passed every check."""
import types

import numpy as np
import pytest
import scipy.linalg

from blr_derive.candidates.load import load_recipe
from blr_derive.codegen.registry import emit
from blr_derive.derive.driver import derive
from blr_derive.ir.build import build_ir
from blr_derive.verify.check import check_file
from blr_derive.verify.entry_points import federated_error
from conftest import CATALOG


def _mean_covariance_recipe(tmp_path):
    text = (CATALOG / "fed_admm_full.yaml").read_text().replace("family: gaussian_full\n",
                                                                  "family: gaussian_mean_covariance\n")
    path = tmp_path / "fed_mc.yaml"
    path.write_text(text.replace("name: fed_admm_full", "name: fed_mc"))
    return path


def _module(path):
    recipe = load_recipe(path)
    D = derive(recipe)
    ir = build_ir(D, recipe.name)
    mod = types.ModuleType("_fed")
    exec(compile(emit(ir, "numpy"), "_fed", "exec"), mod.__dict__)
    return recipe, D, ir, mod


@pytest.mark.parametrize("name", ["fed_admm_isotropic", "fed_admm_full", "fed_ivon_admm", "feddyn"])
def test_catalog_federated_steps_equal_their_symbolic_expressions(name):
    recipe, D, ir, mod = _module(CATALOG / f"{name}.yaml")
    errs = [federated_error(recipe, D, ir, mod, seed) for seed in range(6)]
    finite = [e for e in errs if e is not None]
    assert len(finite) >= 3 and max(finite) < 1e-12, errs


def test_a_wrong_server_step_is_found(tmp_path):
    recipe, D, ir, mod = _module(CATALOG / "fed_admm_full.yaml")
    right = mod.server_step
    mod.server_step = lambda *a, **k: {key: (1.001 * v if key == "m" else v) for key, v in right(*a, **k).items()}
    errs = [e for e in (federated_error(recipe, D, ir, mod, seed) for seed in range(6)) if e is not None]
    assert errs and min(errs) > 1e-5, errs


@pytest.mark.slow           # 4-9 s: the whole check of a derived recipe
def test_the_check_line_of_a_recipe_over_the_mean_covariance_gaussian(tmp_path):
    path = _mean_covariance_recipe(tmp_path)
    rep = check_file(path)
    line = next(c for c in rep.checks if c.name == "generated federated steps vs symbolic")
    assert line.passed and line.value < 1e-12, line
    # with the Cholesky-only solve the module had before, no round of the server is solved: the line fails
    recipe, D, ir, mod = _module(path)
    mod._spd_solve = lambda A, B: scipy.linalg.cho_solve(scipy.linalg.cho_factor(A, lower=True), B)
    with pytest.raises(np.linalg.LinAlgError):
        federated_error(recipe, D, ir, mod, 0)


@pytest.mark.parametrize("name,key", [("fed_admm_full", "entropy"), ("fed_ivon_admm", "prior")])
def test_a_wrong_global_objective_is_found(name, key):
    """The bound per round (global_objective) is compared too: a 0.1 % error in its entropy (full Gaussian) or in
    its prior's expectation (mean-field, summed over the coordinates) is found."""
    recipe, D, ir, mod = _module(CATALOG / f"{name}.yaml")
    assert [f.name for f in ir.entry_points.functions][-1] == "global_objective"
    right = mod.global_objective

    def wrong(*a, **k):
        out = dict(right(*a, **k))
        out[key] = 1.001 * out[key]         # every key is compared with its symbolic value
        return out
    mod.global_objective = wrong
    errs = [e for e in (federated_error(recipe, D, ir, mod, seed) for seed in range(6)) if e is not None]
    assert errs and min(errs) > 1e-6, errs


def test_global_objective_vs_quadrature_line():
    """check's quadrature line of the mean-field IVON-ADMM: c/τ + ∫ q_g (ℓ_0 + log q_g) against the generated value;
    a wrong entropy is found."""
    from blr_derive.verify.recipe import global_objective_check
    recipe, D, ir, mod = _module(CATALOG / "fed_ivon_admm.yaml")
    line = global_objective_check(recipe, mod)
    assert line.passed and line.value < 1e-10, line
    right = mod.global_objective
    mod.global_objective = lambda *a, **k: {**right(*a, **k), "objective": right(*a, **k)["objective"] * 1.001}
    assert not global_objective_check(recipe, mod).passed
