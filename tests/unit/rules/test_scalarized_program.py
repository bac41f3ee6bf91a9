"""rules/program.py ``scalarize_elementwise`` over a family that is not elementwise (N(m, I)): when a pass writes
the update with scalars, what the update reads goes coordinate-wise with it: the vector data (Derivation.scalar_data,
an array of the state's shape in the module) and the definitions it reads (a gradient derived from an explicit
loss, g = m − y); a definition that mixes coordinates (g = Xᵀ(Xm − y)) makes the update not elementwise, a located
refusal of the pass.  Before, g = m − y stayed a vector definition next to a scalar g in the update (dropped as dead:
a module reading an unbound g), and a data vector y stayed ("P",) next to a '*' state.  (The federated data:
tests/peers/federated_admm/test_federated_passes.py.)"""
import types

import numpy as np
import pytest

from blr_derive.api import derive_file
from blr_derive.candidates.load import load_recipe
from blr_derive.codegen.registry import emit
from blr_derive.core.errors import SpecError
from blr_derive.ir.build import build_ir
from blr_derive.verify.recipe import check_recipe_updates

RECIPE = """name: gd_target
title: gradient descent to a target
family: gaussian_fixed_cov
loss:
  expression: {loss}
  data:
{data}
approximations:
  - delta
  - scale_learning_rate: {{factor: alpha}}
hyperparameters:
  rho: {{default: 0.1, description: learning rate}}
  alpha: {{default: 0.5, description: factor of the learning rate}}
"""


def write(tmp_path, loss, data):
    path = tmp_path / "gd_target.yaml"
    path.write_text(RECIPE.format(loss=loss, data=data))
    return path


def test_explicit_loss_with_vector_data_scalarizes_the_gradient_and_the_data(tmp_path):
    path = write(tmp_path, "0.5*(theta - y).T*(theta - y)", "    y: {shape: [P], description: target}")
    recipe, D = derive_file(path)
    assert D.scalar_data == {"y"}
    checks = check_recipe_updates(load_recipe(path))
    assert all(c.passed for c in checks), [(c.name, c.value, c.note) for c in checks]
    mod = types.ModuleType("_gd_target")
    exec(compile(emit(build_ir(D, recipe.name), "numpy"), "gd_target", "exec"), mod.__dict__)
    assert mod.SHAPES["m"] == mod.SHAPES["y"] == "*"
    # m ← m − αρ(m − y), the gradient of ½|θ − y|² at the mean, written here by hand; any array shape
    rng = np.random.default_rng(0)
    m, y = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    out = mod.step(mod.init(m=m), data={"y": y}, rho=0.3, alpha=0.25)
    np.testing.assert_allclose(out["m"], m - 0.25 * 0.3 * (m - y), rtol=1e-15, atol=1e-15)


def test_a_gradient_that_mixes_coordinates_refuses_the_pass_where_it_is_named(tmp_path):
    path = write(tmp_path, "0.5*(X*theta - y).T*(X*theta - y)",
                 "    X: {shape: [N, P], description: inputs}\n    y: {shape: [N], description: targets}")
    with pytest.raises(SpecError, match="'scale_learning_rate' needs an elementwise update") as exc:
        derive_file(path)
    assert exc.value.line == 11
