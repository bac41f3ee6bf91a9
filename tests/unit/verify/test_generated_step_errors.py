"""``blr-derive check`` reports a generated step that fails where the symbolic update is finite as a failed
comparison naming the error (blr_derive/verify/update.py ``GeneratedStepError``), instead of skipping the input as
one outside the region where the update is finite: a codegen fault (the Student-t regression's ``X.T @ 2*eta/...``,
tests/unit/codegen/test_matrix_operands.py) was reported as "no random input of 30 gave a finite symbolic update
inside the family"."""
from __future__ import annotations

import textwrap
import types

import numpy as np
import pytest

from blr_derive import api
from blr_derive.codegen.registry import emit
from blr_derive.derive.driver import derive
from blr_derive.ir.build import build_ir
from blr_derive.verify import recipe as verify_recipe
from blr_derive.verify.update import GeneratedStepError, compare_update

LOGISTIC = textwrap.dedent("""\
    name: logistic_delta_unit
    family: gaussian_full
    loss:
      expression: sum(softplus(X*theta)) - y.T*X*theta + 0.5*theta.T*theta
      data:
        X: {shape: [N, P]}
        y: {shape: [N]}
    approximations: [delta]
    hyperparameters:
      rho: 0.5
    """)


def _module(recipe, D, edit=None):
    src = emit(build_ir(D, recipe.name), "numpy")
    if edit is not None:
        assert edit[0] in src
        src = src.replace(*edit)
    mod = types.ModuleType("generated_unit")
    exec(compile(src, "<generated>", "exec"), mod.__dict__)
    return mod


def test_a_generated_step_that_raises_where_the_symbolic_update_is_finite_is_reported():
    recipe = api.recipe(LOGISTIC)
    D = derive(recipe)
    good = compare_update(recipe, D, _module(recipe, D), 0)
    assert [n for n, _, _ in good] == ["S", "m"]
    assert max(float(np.max(np.abs(g - s))) for _, g, s in good) < 1e-12
    broken = _module(recipe, D, ("m_new = (-rho)*_spd_solve(S_new, g) + m", "m_new = (-rho)*_spd_solve(S_new, g[:1]) + m"))
    with pytest.raises(GeneratedStepError, match="the generated step raised ValueError: .* where the symbolic update "
                                                 "is finite"):
        compare_update(recipe, D, broken, 0)


def test_check_names_the_generated_error_instead_of_skipping_every_input(monkeypatch):
    recipe = api.recipe(LOGISTIC)
    D = derive(recipe)
    edit = ("m_new = (-rho)*_spd_solve(S_new, g) + m", "m_new = (-rho)*_spd_solve(S_new, g[:1]) + m")
    real_emit = verify_recipe.emit
    monkeypatch.setattr(verify_recipe, "emit", lambda ir, target: real_emit(ir, target).replace(*edit))
    checks = {c.name: c for c in verify_recipe.check_recipe_updates(recipe)}
    c = checks["generated update vs symbolic update"]
    assert c.value == float("inf") and not c.value <= 1e-10
    assert c.note.startswith("the generated step raised ValueError") and "no random input" not in c.note
    assert D.updates            # the derivation itself is untouched
