"""Federated recipes whose update passes write the state coordinate by coordinate (rules/program.py
``scalarize_elementwise``) over a family that is not elementwise (gaussian_fixed_cov): the federated data (the
broadcast global mean m_g and the dual) go coordinate-wise with the state (``Derivation.scalar_data``), so the
derivation, ``check`` and the federated simulation agree.

Before, the state was scalarized but m_g and dual1 stayed (P,) vectors: check's symbolic update read an unbound
m_g (compare_update: "Cannot convert expression to float"; check: no finite symbolic update at any input) and the
module declared '*' state next to ("P",) data.  The references here: the catalog's federated ADMM (itself checked
iterate by iterate against a hand-written ADMM in test_federated.py) with the learning rate scaled by hand, and the
hand-written federated ADMM of test_federated.py.
"""
import types

import numpy as np
import pytest

from blr_derive.api import derive_file
from blr_derive.codegen.registry import emit
from blr_derive.candidates.load import load_recipe
from blr_derive.ir.build import build_ir
from blr_derive.runtime.fedrun import simulate
from blr_derive.verify.recipe import check_recipe_updates
from blr_derive.verify.update import compare_update
from conftest import CATALOG, load_generated
from test_federated import handwritten_admm, logistic_clients, logistic_grad

BASE = "fed_admm_isotropic"        # family gaussian_fixed_cov, approximation delta


def with_passes(tmp_path, passes, extra_hyper="", name="fed_passes"):
    """The catalog's federated ADMM over N(m, I) with ``passes`` (YAML list items) after its approximations."""
    text = (CATALOG / f"{BASE}.yaml").read_text()
    text = text.replace(f"name: {BASE}", f"name: {name}").replace("class_name: FedADMMIsotropic",
                                                                       "class_name: FedPasses")
    text = text.replace("  - delta\n", "  - delta\n" + "".join(f"  - {p}\n" for p in passes))
    text = text.replace("hyperparameters:\n", "hyperparameters:\n" + extra_hyper)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def module(path):
    recipe, D = derive_file(path)
    mod = types.ModuleType(f"_fed_{recipe.name}")
    exec(compile(emit(build_ir(D, recipe.name), "numpy"), recipe.name, "exec"), mod.__dict__)
    return recipe, D, mod


def run(mod, hyper, rounds=6, local_steps=3):
    clients = logistic_clients()
    hist = []
    simulate(mod, [{"grad": logistic_grad(X, y)} for X, y in clients], {"m": np.zeros(3)}, rounds=rounds,
             local_steps=local_steps, hyper=hyper,
             callback=lambda r, g, s, d: hist.append((g["m"].copy(), [x["m"].copy() for x in s],
                                                     [x["dual1"].copy() for x in d])))
    return hist


def worst(a, b):
    assert len(a) == len(b) > 0
    out = 0.0
    for (g1, s1, d1), (g2, s2, d2) in zip(a, b):
        out = max(out, np.max(np.abs(g1 - g2)), *(np.max(np.abs(x - y)) for x, y in zip(s1 + d1, s2 + d2)))
    return out


ALPHA = "  alpha: {default: 1.0, description: factor of the learning rate}\n"


def test_scaled_learning_rate_derives_checks_and_keeps_the_data_coordinatewise(tmp_path):
    path = with_passes(tmp_path, ["scale_learning_rate: {factor: alpha}"], ALPHA)
    recipe, D, mod = module(path)
    assert D.scalar_data == {"m_g", "dual1"}
    # the data have the state's shape, coordinate by coordinate (not a (P,) vector next to a '*' state)
    assert mod.SHAPES["m"] == mod.SHAPES["m_g"] == mod.SHAPES["dual1"] == "*"
    checks = check_recipe_updates(load_recipe(path))
    assert checks[0].name == "generated update vs symbolic update"
    assert all(c.passed for c in checks), [(c.name, c.value, c.note) for c in checks]
    assert checks[0].value < 1e-14
    # compare_update itself: finite symbolic values (it raised "Cannot convert expression to float" before)
    for seed in range(3):
        for _, got, want in compare_update(recipe, D, mod, seed):
            assert np.isfinite(want) and abs(float(got) - float(want)) <= 1e-14 * max(1.0, abs(float(want)))


@pytest.mark.parametrize("alpha,lr,plain_lr", [(1.0, 0.1, 0.1), (0.25, 0.4, 0.1), (3.0, 0.05, 0.15)])
def test_scaled_learning_rate_runs_as_the_recipe_with_the_learning_rate_scaled_by_hand(tmp_path, alpha, lr, plain_lr):
    _, _, mod = module(with_passes(tmp_path, ["scale_learning_rate: {factor: alpha}"], ALPHA))
    base = dict(rho=2.0, rho_server=2.0, delta=0.5)
    got = run(mod, dict(base, lr=lr, alpha=alpha))
    want = run(load_generated(BASE), dict(base, lr=plain_lr))
    err = worst(got, want)
    print(f"alpha={alpha}: max |scaled - catalog with lr scaled by hand| over 6 rounds:", err)
    assert err < 1e-12, err
    # and the hand-written federated ADMM (test_federated.py) with the step lr·alpha/rho
    ref = handwritten_admm(logistic_clients(), 6, 3, lr=alpha * lr, rho=2.0, rho_server=2.0, delta=0.5, P=3)
    assert worst(got, ref) < 1e-12


def test_step_coordinates_of_the_mean_runs_as_the_plain_recipe(tmp_path):
    """step_coordinates with no coordinate named steps m along its tangent: the client step is linear in the
    learning rate, so it is the same update (it built m - m from a matrix m and a scalar m before: TypeError)."""
    recipe, D, mod = module(with_passes(tmp_path, ["step_coordinates"]))
    assert all(c.passed for c in check_recipe_updates(recipe))
    hp = dict(lr=0.1, rho=1.5, rho_server=0.0, delta=1.0)
    assert worst(run(mod, hp), run(load_generated(BASE), hp)) < 1e-12


@pytest.mark.parametrize("passes,extra", [
    (["weight_decay: {coefficient: wd}"], "  wd: {default: 0.01, description: weight decay}\n"),
    (["heavy_ball_momentum: {momentum: beta}"], "  beta: {default: 0.9, description: momentum}\n"),
    (["learning_rate_schedule: {factor: 1/sqrt(t)}"], ""),
], ids=["weight_decay", "heavy_ball_momentum", "learning_rate_schedule"])
def test_other_passes_over_the_federated_data_check(tmp_path, passes, extra):
    """Other passes that scalarize the update: the generated update equals the symbolic one (1e-10, check's
    tolerance), the data coordinate-wise."""
    recipe, D, mod = module(with_passes(tmp_path, passes, extra))
    assert D.scalar_data == {"m_g", "dual1"} and mod.SHAPES["m_g"] == "*"
    checks = check_recipe_updates(recipe)
    assert all(c.passed for c in checks), [(c.name, c.value, c.note) for c in checks]
    # the module runs in the federated simulator on vectors
    hist = run(mod, dict(lr=0.1, rho=1.0, rho_server=1.0, delta=1.0), rounds=2, local_steps=2)
    assert all(np.all(np.isfinite(g)) and g.shape == (3,) for g, _, _ in hist)


def test_weight_decay_over_the_federated_data_is_the_prior_added_by_hand(tmp_path):
    """weight_decay δ_w adds δ_w·m to the gradient: the same rounds as the catalog recipe whose clients' gradient
    oracle returns ∇ℓ_k + δ_w·m (to 1e-12)."""
    _, _, mod = module(with_passes(tmp_path, ["weight_decay: {coefficient: wd}"],
                                   "  wd: {default: 0.01, description: weight decay}\n"))
    hp = dict(lr=0.1, rho=1.0, rho_server=1.0, delta=1.0)
    clients = logistic_clients()
    got = run(mod, dict(hp, wd=0.3))
    want = []
    simulate(load_generated(BASE), [{"grad": (lambda f: lambda th: f(th) + 0.3 * th)(logistic_grad(X, y))}
                                    for X, y in clients], {"m": np.zeros(3)}, rounds=6, local_steps=3, hyper=hp,
             callback=lambda r, g, s, d: want.append((g["m"].copy(), [x["m"].copy() for x in s],
                                                      [x["dual1"].copy() for x in d])))
    assert worst(got, want) < 1e-12


def test_torch_names_the_missing_default_of_the_coordinatewise_data(tmp_path):
    """The torch target keeps an abstract loss's per-coordinate data as state of the parameter's shape: m_g, now of
    the state's shape, is refused for its missing default, not as data "with its own shape"."""
    from blr_derive.api import generate
    from blr_derive.core.errors import SpecError
    with pytest.raises(SpecError, match="data 'm_g' has none: the data of an explicit loss can be a hyperparameter"):
        generate(with_passes(tmp_path, ["scale_learning_rate: {factor: alpha}"], ALPHA), "torch")


@pytest.mark.parametrize("base", ["fed_admm_isotropic", "fed_admm_full"])
def test_check_skips_inputs_where_the_update_leaves_a_diagonal_family(tmp_path, base):
    """Over gaussian_diag the duals have any sign, so at some random inputs the new precision is negative: the
    generated module's run-time domain check raises FloatingPointError there (the update left the family).  check
    ended with an internal error there (exit 3); it then drew another input; now it compares the step's algebra with
    the module's checks off (blr_derive/verify/update.py compare_update), at every input, the one whose precision
    leaves the family included (its symbolic value is finite too)."""
    text = (CATALOG / f"{base}.yaml").read_text()
    fam = next(line for line in text.splitlines() if line.startswith("family:"))
    path = tmp_path / "fed_diag.yaml"
    path.write_text(text.replace(fam, "family: gaussian_diag"))
    (row,) = [c for c in check_recipe_updates(load_recipe(path), points=3) if c.name.startswith("generated update")]
    assert row.value < 1e-12 and row.note.endswith("3 random inputs"), (row.value, row.note)
