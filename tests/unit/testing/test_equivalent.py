"""``blr_derive.testing`` (issue 20): torch.optim's optimizers are accepted as the BLR derivations of their
recipes, and seeded mistakes are pinpointed at the right step and derived assignment — through the API, the
pytest plugin and ``blr-derive verify``."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from blr_derive.testing import equivalent
from blr_derive.testing.problems import PROBLEMS
from conftest import ROOT, run_cli_in_process
from seeded import SEEDED, HandAdam, HandRMSprop, seeded_adam, seeded_rmsprop

HERE = os.path.dirname(__file__)


@pytest.mark.parametrize("recipe, peer", [("sgd", torch.optim.SGD), ("rmsprop", torch.optim.RMSprop),
                                          ("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW),
                                          ("adagrad", torch.optim.Adagrad), ("adamax", torch.optim.Adamax),
                                          ("nadam", torch.optim.NAdam)])
def test_torch_optim_is_its_recipe(recipe, peer):
    report = equivalent(recipe, peer)
    assert report.equal, str(report)
    # every problem ran at every setting in both dtypes, and each setting switches something on
    assert report.runs >= 2 * 2 * len(PROBLEMS) and report.steps_checked >= 8 * report.runs
    assert report.skipped == []


def test_hand_written_peers_without_mistakes_are_accepted():
    """The correct hand-written Adam and RMSprop are equal to their recipes; the settings they cannot take (no
    amsgrad, no momentum) are named as not exercised, not silently passed."""
    adam = equivalent("adam", HandAdam)
    assert adam.equal, str(adam)
    assert any("amsgrad" in s for s in adam.skipped)
    rms = equivalent("rmsprop", HandRMSprop)
    assert rms.equal, str(rms)
    assert any("momentum" in s for s in rms.skipped)


def _div(recipe, opt):
    report = equivalent(recipe, opt)
    assert not report.equal and report.divergence is not None
    return report, report.divergence


def test_eps_inside_the_square_root_is_the_mean_update_through_s_root():
    report, d = _div("adam", seeded_adam("eps_inside"))
    assert (d.problem, d.dtype, d.step, d.variable) == ("quadratic", "float64", 1, "parameter")
    assert d.localized and d.assignment == "m ← -lr*u_hat/s_root + m"
    assert ("s_root = eps + sqrt(s_hat)", "square_root_scaling", "Eq. 38") in d.definitions
    text = str(report)
    assert "step 1" in text and "s_root = eps + sqrt(s_hat)" in text and "rule square_root_scaling" in text


def test_missing_bias_correction_is_the_mean_update_through_the_debiased_moments():
    _, d = _div("adam", seeded_adam("no_bias_correction"))
    assert (d.step, d.variable, d.assignment) == (1, "parameter", "m ← -lr*u_hat/s_root + m")
    assert ("u_hat = u_new/(1 - beta1^t)", "debias", "Adam convention") in d.definitions
    # the values are the first step's: your m moved by lr*(1-β1)/sqrt(1-β2)-scaled steps, the derived one by lr
    assert d.yours != d.derived


def test_wrong_beta_on_the_second_moment_is_the_second_moment_update():
    _, d = _div("adam", seeded_adam("beta1_on_second"))
    assert (d.step, d.variable) == (1, "exp_avg_sq")
    assert d.assignment == "s ← beta2*s + h_gsq*(1 - beta2)"
    assert d.rules == [("separate_learning_rates", "Eq. 36")]
    assert float(d.yours.split()[0]) == pytest.approx(100 * float(d.derived), rel=1e-12)   # (1-β1)/(1-β2)


def test_coupled_weight_decay_is_not_adamw():
    """torch.optim.Adam with weight decay is not the recipe 'adamw' (decoupled): the first step's momentum
    already differs (the decay enters the gradient)."""
    _, d = _div("adamw", torch.optim.Adam)
    assert (d.step, d.variable, d.assignment) == (1, "exp_avg", "u ← beta1*u + g*(1 - beta1)")
    assert d.setting["weight_decay"] == 0.01
    _, d = _div("adam", seeded_adam("decoupled"))         # and the other way round, once weight decay is on
    assert d.setting["weight_decay"] == 0.1 and d.step == 1 and d.variable == "exp_avg"
    assert d.assignment == "u ← beta1*u + g_wd*(1 - beta1)"
    assert ("g_wd = g + m*weight_decay if weight_decay != 0 else g", "weight_decay",
            "Eqs. 1, 34") in d.definitions


@pytest.mark.parametrize("scale", [2.0, -1.0])
def test_hessian_estimate_with_wrong_scale_or_sign_is_the_scale_update(scale):
    _, d = _div("rmsprop", seeded_rmsprop(scale))
    assert (d.step, d.variable) == (1, "square_avg")
    assert d.assignment == "s ← alpha*s + h_gsq*(1 - alpha)"
    assert ("separate_learning_rates", "Eq. 36") in d.rules
    assert float(d.yours.split()[0]) == pytest.approx(scale * float(d.derived), rel=1e-12)


def test_names_map_the_users_hyperparameters():
    class Renamed(HandAdam):
        """HandAdam with the learning rate called learning_rate."""

        def __init__(self, params, learning_rate=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
            torch.optim.Optimizer.__init__(self, params, dict(learning_rate=learning_rate, betas=betas, eps=eps,
                                                              weight_decay=weight_decay))

        def step(self, closure=None):
            for g in self.param_groups:
                g["lr"] = g["learning_rate"]
            return super().step(closure)
    report = equivalent("adam", Renamed, names={"lr": "learning_rate"})
    assert report.equal, str(report)
    assert any(s.startswith("problem 'scheduler'") for s in report.skipped)
    assert not equivalent("adam", Renamed).equal            # unmapped: the learning rate never reaches it
    with pytest.raises(ValueError, match="names maps names to names"):
        equivalent("adam", HandAdam, names={"lr": "not a name"})


def _run(args, cwd, env_extra=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), HERE, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_pytest_plugin_fixture_reports_each_seeded_mistake(tmp_path):
    """One pytest run of a user's test file through the plugin's fixture: torch.optim.Adam passes, and each of the
    five seeded mistakes fails with its report (the step and the derived assignment), without a traceback."""
    tests = ["import torch", "import seeded", "",
             "def test_torch_adam(blr_equivalent):",
             "    assert blr_equivalent('adam', torch.optim.Adam, hyper={'lr': 'lr'}).equal", ""]
    for recipe, cls, _, _ in SEEDED:
        tests += [f"def test_{cls}(blr_equivalent):", f"    blr_equivalent({recipe!r}, seeded.{cls})", ""]
    (tmp_path / "test_user.py").write_text("\n".join(tests))
    res = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly",
                "test_user.py"], tmp_path)
    assert f"{len(SEEDED)} failed, 1 passed" in res.stdout, res.stdout + res.stderr
    sections = res.stdout.split("______ test_")
    for recipe, cls, var, assignment in SEEDED:
        text = next(t for t in sections if t.startswith(f"{cls} "))
        assert f"{cls} is NOT the BLR derivation of recipe '{recipe}'" in text
        assert "step 1," in text and assignment in text and "Traceback" not in text


@pytest.mark.parametrize("recipe, cls, var, assignment", SEEDED, ids=[c for _, c, _, _ in SEEDED])
def test_verify_command_line_pinpoints_each_seeded_mistake(capsys, monkeypatch, recipe, cls, var, assignment):
    """The command's own entry point (``blr_derive.cli.main``, in this process: a real subprocess per mistake
    would add seconds of imports each; test_verify_command_line runs it as one)."""
    from blr_derive import cli
    monkeypatch.chdir(HERE)
    code = cli.main(["verify", recipe, "--against", f"seeded:{cls}"])
    out = capsys.readouterr()
    assert code == 1, out.err
    lines = out.out.splitlines()
    assert lines[0] == f"{cls} is NOT the BLR derivation of recipe '{recipe}'" and len(lines) < 25
    where = "the parameter" if var == "parameter" else repr(var)
    assert "step 1, parameter " in lines[1] and lines[1].endswith(where), lines[1]
    assert assignment in out.out


def test_verify_command_line(tmp_path):
    res = _run(["-m", "blr_derive", "verify", "rmsprop", "--against", "torch.optim:RMSprop"], tmp_path)
    assert res.returncode == 0 and res.stdout.startswith("RMSprop equals the BLR derivation"), res.stdout + res.stderr
    # the malformed options are refused before anything is imported: cli.main in this process (run_cli_in_process)
    res = run_cli_in_process("verify", "adam", "--against", "seeded.WrongBetaAdam", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--against takes MODULE:OBJECT" in res.stderr
    res = run_cli_in_process("verify", "adam", "--against", "seeded:HandAdam", "--map", "lr", cwd=tmp_path)
    assert res.returncode == 2 and "--map takes OURS=YOURS" in res.stderr
    res = _run(["-m", "blr_derive", "verify", "ivon", "--against", "ivon:IVON"], tmp_path)
    assert res.returncode == 2 and "hyperparameters without a default: lr, ess" in res.stderr
    assert "--value NAME=NUMBER" in res.stderr and res.stderr.count("\n") == 1
    res = _run(["-m", "blr_derive", "verify", "ivon", "--against", "ivon:IVON", "--value", "lr=0.05",
                "--value", "ess=100"], tmp_path)
    assert res.returncode == 1 and "'intermittent gradients', float64, step 2, parameter 0, 'raises'" in res.stdout


def test_ivon_opt_is_the_recipe_with_the_same_draws_and_its_departures_from_torchs_conventions_are_named():
    """Monte Carlo recipes: both optimizers draw from torch's generator seeded the same way at every step
    (through their sampled_params), so ivon-opt's IVON equals the recipe 'ivon' — on the problems where it keeps
    torch's conventions.  Where it does not, the report says so: ivon-opt raises on a parameter without a
    gradient (torch leaves it as it is), and its state_dict does not round-trip (a rebuilt IVON does not
    continue where it stopped; the generated one does, tests/peers/ivon)."""
    import ivon
    values = {"lr": 0.05, "ess": 100}
    plain = [p for p in PROBLEMS if not p.skip and p.reload_at is None]
    report = equivalent("ivon", ivon.IVON, values=values, problems=plain)
    # two dtypes × two settings (the defaults; every float default halved: lr, ess, betas, hess_init, ...)
    assert report.equal and report.runs == 2 * 2 * len(plain), str(report)
    report = equivalent("ivon", ivon.IVON, values=values, problems=[p for p in PROBLEMS if p.skip])
    d = report.divergence
    assert (d.problem, d.step, d.variable) == ("intermittent gradients", 2, "raises")
    assert d.yours.startswith("raises AttributeError") and "left as it is" in d.derived
    report = equivalent("ivon", ivon.IVON, values=values, problems=[p for p in PROBLEMS if p.reload_at])
    d = report.divergence
    assert (d.problem, d.step, d.variable) == ("state_dict reload", 5, "parameter")
    assert d.note == "both optimizers were rebuilt from their state_dict before step 5"
    with pytest.raises(ValueError, match="hyperparameters without a default: lr, ess"):
        equivalent("ivon", ivon.IVON)


def test_numpy_references_and_their_seeded_mistakes():
    """A numpy ``step(state, *, oracles, ...)`` function (the generated numpy API, which the project's own
    references follow) is checked against the generated numpy module on a quadratic with a dense Hessian and a
    non-convex function; a Hessian of the wrong sign or scale is pinpointed at the precision's update."""
    from seeded import newton_step, newton_step_negated_hessian, online_newton_diag_step
    report = equivalent("newton", newton_step)
    # ρ = 1 and ρ = 1/2 on two losses; at ρ = 1/2 the precision of the non-convex loss stops being positive
    # definite after one step (the derived step's run-time domain check raises), which the report names as not
    # exercised
    assert report.equal and report.runs == 4 and report.steps_checked == 19, str(report)
    assert report.skipped == ["setting rho=0.5 on 'nonconvex' after step 1 (the derived step raises "
                              "FloatingPointError)"]
    d = equivalent("newton", newton_step_negated_hessian).divergence
    assert (d.problem, d.step, d.variable, d.localized) == ("quadratic", 1, "S", True)
    assert d.assignment == "S ← rho*H + (1 - rho)*S"
    assert d.definitions == [("H = hess(m)", "delta", "App. C, Eqs. 13, 65-66")]
    assert equivalent("online_newton_diag", online_newton_diag_step).equal
    d = equivalent("online_newton_diag", lambda state, *, oracles, rng=None, rho=0.1:
                   online_newton_diag_step(state, oracles=oracles, rho=rho, hess_scale=0.5)).divergence
    assert (d.step, d.variable) == (1, "s") and d.assignment.startswith("s ← ")
    assert float(d.yours.split()[0]) != pytest.approx(float(d.derived), rel=1e-6)


def test_optax_transformations_against_the_jax_target():
    """An optax GradientTransformation is checked against the recipe's jax target (pytrees, jax.grad, jitted
    updates): optax.adam and optax.sgd are their recipes; optax's own eps_root (eps under the square root) and a
    different β₂ are pinpointed at the mean's and the second moment's update once optax's state names are mapped."""
    import jax
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        _optax_cases()
    finally:
        jax.config.update("jax_enable_x64", old)


def _optax_cases():
    import optax
    report = equivalent("adam", optax.adam(1e-3))
    assert report.equal and report.runs == 2 * 4, str(report)
    assert "problem 'two param groups' (optax has no parameter groups)" in report.skipped
    assert equivalent("sgd", optax.sgd(1e-3)).equal
    d = equivalent("adam", optax.adam(1e-3, eps_root=1e-8), names={"u": "mu", "s": "nu"}).divergence
    assert (d.step, d.variable, d.localized, d.assignment) == (1, "parameter", True, "m ← -lr*u_hat/s_root + m")
    d = equivalent("adam", optax.adam(1e-3, b2=0.99), names={"u": "mu", "s": "nu"}).divergence
    assert (d.step, d.variable, d.assignment) == (1, "nu", "s ← beta2*s + h_gsq*(1 - beta2)")
    # a factory of transformations runs every setting: optax.adam has no weight decay, which the recipe's
    # switched-on setting exercises
    d = equivalent("adam", lambda lr, betas, eps, weight_decay, amsgrad, decoupled_weight_decay:
                   optax.adam(lr, *betas, eps=eps), framework="optax").divergence
    assert d.setting["weight_decay"] == 0.1 and d.step == 1


def test_recipes_the_optimizer_kind_cannot_express_are_refused_with_a_reason(tmp_path):
    """A recipe whose target for that kind of optimizer does not exist (a full-Gaussian Newton has no torch
    optimizer) or whose state is not one optimizer's (a factorized EM) is a ValueError naming why; on the command
    line one located line with exit status 2, not an internal error."""
    with pytest.raises(ValueError, match="recipe 'newton' cannot be checked against a torch optimizer: .*elementwise"):
        equivalent("newton", torch.optim.SGD)
    with pytest.raises(ValueError, match="recipe 'em_gmm' is factorized"):
        equivalent("em_gmm", torch.optim.SGD)
    res = _run(["-m", "blr_derive", "verify", "em_gmm", "--against", "torch.optim:SGD"], tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "is factorized" in res.stderr, res.stderr
