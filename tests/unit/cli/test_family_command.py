"""The design card's command, ``blr-derive FAMILY.yaml --target T --loss ... --approx ...``, and catalog names
wherever a recipe path goes (issue 19, item 1), through the real command line (``python -m blr_derive``) or,
where a test checks what a command prints, writes and exits with, through its ``main`` in the test's process
(``run_cli_in_process``).

A family file without ``--loss``/``--approx`` is one located line that shows options which derive for the
target; with them the family is derived and emitted, and every error of the recipe the options declare names
the option it comes from."""
from __future__ import annotations

import fnmatch
import re
import shlex

import numpy as np
import pytest
import torch

from blr_derive.codegen import TARGET_NAMES
from conftest import run_cli_in_process
from test_cli import CATALOG, ROOT, listing, load_module, run_cli, write

NAKAGAMI = """
name: nakagami
description: Nakagami distribution (theta^2 ~ Gamma(a, b)), for a positive scale
variable: theta
support: positive
parameters:
  a: {domain: positive, description: shape}
  b: {domain: positive, description: rate of theta^2}
sufficient_statistics: [log(theta), theta**2]
base_measure: 1
natural_parameters: [2*a - 1, -b]
"""


def one_error_line(res, *needles):
    """Exit status 2, nothing on stdout, exactly one line on stderr that contains every needle."""
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_family_without_options_shows_the_options_that_derive_for_the_target(tmp_path):
    """The design card's command on a bundled family file: one located line saying what to add; the options it
    shows are not a guess — run as shown, they derive a torch optimizer that is the BLR's update (Eq. 6 with the
    delta method and the squared gradient for the Hessian: s ← (1−ρ)s + ρg², m ← m − ρg/s)."""
    fam = ROOT / "families" / "gaussian_diag.yaml"
    out = tmp_path / "opt.py"
    line = one_error_line(run_cli(fam, "--target", "torch", "-o", out, cwd=tmp_path),
                          f"{fam}:1: this is a family file, not a recipe", "--loss abstract", "--approx delta")
    assert listing(tmp_path) == []                       # nothing written
    shown = line.split("derive from it with: ", 1)[1].split(";", 1)[0]
    words = shlex.split(shown)
    assert words[:2] == ["blr-derive", str(fam)]
    res = run_cli(*words[1:], "-o", out, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    mod = load_module(out)
    # the header says how to regenerate it (the file as the command named it, here an absolute path; the options
    # shell-quoted, then the target)
    options = shlex.join(words[4:])
    assert f"regenerate with `blr-derive {fam} {options} --target torch`" in out.read_text()

    torch.manual_seed(0)
    target = torch.randn(7, dtype=torch.float64)
    w = torch.zeros(7, dtype=torch.float64, requires_grad=True)
    opt = mod.GaussianDiag([w], rho=0.3)
    m, s = np.zeros(7), np.ones(7)                     # state_init s = 1 as the shown options declare
    for _ in range(6):
        opt.zero_grad()
        loss = 0.5 * ((w - target) ** 2 * torch.arange(1, 8)).sum()
        loss.backward()
        opt.step()
        g = (m - target.numpy()) * np.arange(1, 8)
        s = 0.7 * s + 0.3 * g**2
        m = m - 0.3 * g / s
    np.testing.assert_allclose(w.detach().numpy(), m, rtol=1e-13, atol=1e-15)


def test_family_name_without_options_on_numpy_and_when_nothing_derives(tmp_path):
    one_error_line(run_cli_in_process("gaussian_full", cwd=tmp_path), "gaussian_full.yaml:1: this is a family file",
                   "blr-derive gaussian_full --target numpy --loss abstract --approx delta")
    # a discrete family without a sampler: no abstract-loss recipe derives, and the line says so
    one_error_line(run_cli_in_process("poisson", cwd=tmp_path), "poisson.yaml:1: this is a family file",
                   "name a loss and approximations", "no abstract loss with delta")


def test_users_family_file_with_explicit_loss_and_data_is_exact_conjugate_bayes(tmp_path):
    """A family file of the user's own (not bundled) with an explicit loss that is linear in its sufficient
    statistics: the `exact` rule and ρ = 1 land on the posterior in one step (Sec. 5.1, Eq. 6), here the
    Nakagami posterior a = a0 + n/2, b = b0 + Σy²/2 of y ~ N(0, 1/θ²)."""
    write(tmp_path, "nakagami.yaml", NAKAGAMI)
    res = run_cli_in_process("nakagami.yaml", "--loss", "0.5*sy2*theta**2 - n*log(theta) - (2*a0 - 1)*log(theta) + b0*theta**2",
                  "--data", "sy2", "--data", "n", "--approx", "exact", "--hyper", "rho=1.0", "--hyper", "a0=1.5",
                  "--hyper", "b0=0.5", "--name", "nakagami_scale", "-o", "nak.py", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    mod = load_module(tmp_path / "nak.py")
    assert mod.RECIPE == "nakagami_scale"
    new = mod.step(mod.init(a=3.0, b=7.0), data={"sy2": 12.5, "n": 40})
    assert abs(new["a"] - (1.5 + 40 / 2)) < 1e-12 and abs(new["b"] - (0.5 + 12.5 / 2)) < 1e-12
    half = mod.step(mod.init(a=3.0, b=7.0), data={"sy2": 12.5, "n": 40}, rho=0.5)   # natural parameters halfway
    assert abs((2 * half["a"] - 1) - 0.5 * ((2 * 3.0 - 1) + (2 * 21.5 - 1))) < 1e-12
    assert abs(half["b"] - 0.5 * (7.0 + 6.75)) < 1e-12


def test_catalog_names_work_where_recipe_paths_do(tmp_path):
    res = run_cli_in_process("adam", "--target", "torch", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == (CATALOG / "generated" / "torch" / "adam.py").read_text(encoding="utf-8")
    res = run_cli_in_process("explain", "ivon", cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.startswith("# Derivation of `ivon`"), res.stderr
    res = run_cli_in_process("compare", "ogn", "vogn", cwd=tmp_path)
    assert res.returncode == 0 and "compare ogn" in res.stdout, res.stderr
    res = run_cli_in_process("check", "gamma", "--points", "1", cwd=tmp_path)
    assert res.returncode == 0 and "family 'gamma'" in res.stdout, res.stderr
    one_error_line(run_cli_in_process("no_such_recipe", cwd=tmp_path), "no_such_recipe: file not found",
                   "not the name of a catalog recipe or built-in family")
    one_error_line(run_cli_in_process("compare", "ogn", "gaussian_diag", cwd=tmp_path),
                   "gaussian_diag.yaml:1: this is a family file; compare takes two recipes")


def test_option_errors_name_the_option(tmp_path):
    """Each option is one line of the recipe they declare: an error anywhere (loading, deriving, rendering) names
    the option, and an undeclared symbol says how to declare it."""
    base = ("gaussian_diag", "--loss", "abstract", "--approx", "delta")
    one_error_line(run_cli_in_process(*base, "--approx", "ema_momentum: {rate: beta1, state: u}", cwd=tmp_path),
                   "<command line>: --approx 'ema_momentum: {rate: beta1, state: u}': ",
                   "unknown symbol 'beta1'", "(declare it: --hyper beta1=VALUE)")
    one_error_line(run_cli_in_process(*base, "--approx", "no_such_rule", cwd=tmp_path),
                   "<command line>: --approx no_such_rule: unknown approximation 'no_such_rule'")
    one_error_line(run_cli_in_process("gaussian_diag", "--loss", "__import__('os').system('true')", cwd=tmp_path),
                   "<command line>: --loss", "only plain function calls are allowed")
    one_error_line(run_cli_in_process(*base, "--hyper", "rho=[1", cwd=tmp_path), "<command line>: --hyper rho: malformed YAML")
    one_error_line(run_cli_in_process(*base, "--set", "loss=abstract", cwd=tmp_path),
                   "<command line>: --set loss: set it with --loss instead")
    one_error_line(run_cli_in_process(*base, "--target", "torch", cwd=tmp_path),
                   "<command line>: ", "torch target has no Hessian oracle")
    one_error_line(run_cli_in_process("adam", "--approx", "delta", cwd=tmp_path),
                   "derive from a family file; 'adam' is a recipe (edit its 'loss' and 'approximations')")
    # the torch target's error names its fix both ways (in the recipe parameter: m, on the command line --set
    # 'parameter=m'): a recipe file given the command-line form is told the key to write in it
    one_error_line(run_cli_in_process("adam", "--set", "parameter=m", cwd=tmp_path),
                   "derive from a family file; 'adam' is a recipe (add the key to the file instead: parameter: m)")
    one_error_line(run_cli_in_process("gaussian_diag", "--approx", "delta", cwd=tmp_path), "--loss is missing")
    one_error_line(run_cli_in_process("gaussian_diag", "--loss", "abstract", "--data", "X", cwd=tmp_path),
                   "--data declares the data of an explicit --loss")


@pytest.mark.parametrize("hostile", [
    ("--name", "x\"\"\"; import os; os.system('echo pwned') #"),
    ("--set", "title=\"\\n\\\"\\\"\\\"\\nimport os\\nos.system('echo pwned')\\n\""),
    ("--set", "class_name=A(object): pass\nimport os"),
])
def test_option_text_never_reaches_generated_code_as_code(tmp_path, hostile):
    """Recipe text from options is data end to end (principle 4): refused with one located line, or written only
    as escaped data, so that importing the module runs nothing of it."""
    res = run_cli_in_process("gaussian_diag", "--loss", "abstract", "--approx", "delta", *hostile, "-o", "m.py", cwd=tmp_path)
    if res.returncode == 0:
        text = (tmp_path / "m.py").read_text(encoding="utf-8")
        assert "\nimport os" not in text
        mod = load_module(tmp_path / "m.py")
        assert mod.RECIPE == "gaussian_diag"
    else:
        one_error_line(res, "<command line>: ")
        assert listing(tmp_path) == []


def test_help_lists_the_targets_and_family_options(tmp_path):
    res = run_cli("--help", cwd=tmp_path)
    assert res.returncode == 0
    assert "{" + ",".join(TARGET_NAMES) + "}" in res.stdout
    for opt in ("--loss EXPR", "--approx RULE", "--hyper NAME=VALUE", "--set KEY=VALUE", "--data NAME[=DECL]"):
        assert opt in res.stdout
    one_error_line(run_cli("adam", "--target", "fortran", cwd=tmp_path),
                   f"unknown target 'fortran' (known: {', '.join(TARGET_NAMES)})")


def test_readme_shows_the_commands_and_its_main_job_writes_an_ignored_file(tmp_path):
    """The README shows the family-file command and a catalog-name command, and each one in its bash blocks runs
    as written; the main job's output file is ignored by git (a fresh clone stays clean after it)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    main_job = re.search(r"^blr-derive (catalog/newton\.yaml .*-o (\S+))", readme, re.M)
    ignored = [l.strip() for l in (ROOT / ".gitignore").read_text().splitlines() if l.strip() and l[0] != "#"]
    out = main_job.group(2)
    assert any(fnmatch.fnmatch("/" + out, pat) or fnmatch.fnmatch(out, pat.lstrip("/")) for pat in ignored), out
    block = readme.split("### From a family file", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    first = shlex.split(block.replace("\\\n", " ").strip().split("\n")[0])
    assert first[0] == "blr-derive" and first[1] == "gaussian_diag"
    res = run_cli(*first[1:], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    mod = load_module(tmp_path / "my_rule.py")
    assert "u <- beta1*u + g*(1 - beta1)" in mod.EQUATIONS and "h_gsq = g^2" in mod.EQUATIONS
    assert re.search(r"`blr-derive adam --target torch`", readme)
