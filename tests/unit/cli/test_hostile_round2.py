"""Hostile input, second round (docs/safety.md), through the real command line: each case found a gap and
asserts the contract where it held not: one line ``blr-derive: error: FILE:LINE: problem``, exit status 2, no
traceback, and the output file as it was."""
from __future__ import annotations

import ast

import pytest

from blr_derive.codegen.inert import audit
from blr_derive.core.errors import CodegenError

from test_cli import _assert_one_line_error, listing, run_cli, write

SENTINEL = "SENTINEL = 1\n"


# ------------------------------------------------------------ a recipe name that rebinds an import (jax)
@pytest.mark.parametrize("name", ["NamedTuple", "Any"])
def test_a_recipe_named_like_an_import_of_the_jax_module_is_refused(tmp_path, name):
    """The jax target names its optax factory after the recipe; ``name: NamedTuple`` gave a module whose factory
    replaced ``typing.NamedTuple`` (it imported and ran, but the module bound one name twice)."""
    write(tmp_path, "r.yaml", f"""
        name: {name}
        family: gaussian_diag
        loss: abstract
        approximations: [delta, squared_gradient_hessian]
        state_init: {{s: 1.0}}
        """)
    (tmp_path / "out.py").write_text(SENTINEL, encoding="utf-8")
    before = listing(tmp_path)
    r = run_cli("r.yaml", "--target", "jax", "-o", "out.py", cwd=tmp_path)
    _assert_one_line_error(r, r"r\.yaml:\d+:", [f"binds '{name}'", "a name its import on line"])
    assert (tmp_path / "out.py").read_text(encoding="utf-8") == SENTINEL
    assert listing(tmp_path) == before


def test_the_same_recipe_under_another_name_is_generated(tmp_path):
    write(tmp_path, "r.yaml", """
        name: named_tuple_ok
        family: gaussian_diag
        loss: abstract
        approximations: [delta, squared_gradient_hessian]
        state_init: {s: 1.0}
        """)
    r = run_cli("r.yaml", "--target", "jax", "-o", "out.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    tree = ast.parse((tmp_path / "out.py").read_text(encoding="utf-8"))
    assert "named_tuple_ok" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("source, name", [
    ("import math\ndef math():\n    return 1\n", "math"),
    ("from typing import Any\nclass Any:\n    pass\n", "Any"),
    ("import numpy as np\nnp = 1\n", "np"),
    ("from typing import NamedTuple\nNamedTuple: int = 1\n", "NamedTuple"),
])
def test_the_audit_refuses_a_top_level_rebinding_of_an_import(source, name):
    with pytest.raises(CodegenError, match=f"binds '{name}'"):
        audit(source, "numpy", frozenset({"math", "typing", "numpy"}))


def test_the_audit_allows_a_submodule_import_after_its_package():
    src = "import numpy\nimport numpy.linalg\nX = numpy.linalg.norm\n"
    assert audit(src, "numpy", frozenset({"numpy", "numpy.linalg"})) == src


# ------------------------------------------------------------ a recipe file whose name starts with '-'
@pytest.mark.parametrize("given", [["--", "-x.yaml"], ["./-x.yaml"]])
def test_the_header_command_of_a_recipe_named_like_an_option_runs(tmp_path, given):
    """docs/cli.md: the header records the command that regenerates the module.  For ``-x.yaml`` it recorded
    ``blr-derive -x.yaml --target numpy``, which the command line reads as an option (exit 2)."""
    write(tmp_path, "-x.yaml", """
        name: r
        family: gaussian_fixed_cov
        loss: abstract
        approximations: [delta]
        """)
    r = run_cli("-o", "out.py", *given, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "out.py").read_text(encoding="utf-8")
    assert "# DO NOT EDIT: regenerate with `blr-derive ./-x.yaml --target numpy`." in text.splitlines()
    again = run_cli("./-x.yaml", "--target", "numpy", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout == text


# ------------------------------------------------------------ suggest: a bad --data names --data
@pytest.mark.parametrize("item, words", [
    ("torch", [r"--data torch: data: 'torch' is reserved by the generated code"]),
    ("y={bogus: 1}", [r"--data y=\{bogus: 1\}: unknown key 'bogus' in data 'y'"]),
    ("y={shape: [99999999999999999]}", [r"--data y=.*dimension names must be identifiers"]),
    ("y=!!python/object/apply:os.system ['true']", [r"--data y: YAML tag .*python/object/apply:os.system.* is not allowed"]),
    ("lambda1", [r"--data lambda1: .*reserved for the derivation's own symbols"]),
])
def test_suggest_names_the_bad_data_option(tmp_path, item, words):
    """A bad ``--data`` made every family's recipe fail; the one line said ``--loss 'theta**2 + y*theta': no
    built-in family makes the loss conjugate`` (exit 2, after trying 37 families) and never named --data."""
    (tmp_path / "fam.yaml").write_text(SENTINEL, encoding="utf-8")
    before = listing(tmp_path)
    r = run_cli("suggest", "--loss", "theta**2 + y*theta", "--data", item, "--write-family", "fam.yaml",
                cwd=tmp_path)
    line = _assert_one_line_error(r, "<command line>:", words)
    assert "no built-in family" not in line
    assert (tmp_path / "fam.yaml").read_text(encoding="utf-8") == SENTINEL
    assert listing(tmp_path) == before


def test_suggest_refuses_a_data_option_given_twice(tmp_path):
    r = run_cli("suggest", "--loss", "theta**2 + y*theta", "--data", "y", "--data", "y={shape: []}", cwd=tmp_path)
    _assert_one_line_error(r, "<command line>:", ["--data y is given twice"])


def test_suggest_with_good_data_still_suggests(tmp_path):
    r = run_cli("suggest", "--loss", "theta**2 + y*theta", "--data", "y", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "1. gaussian_diag" in r.stdout


def test_suggest_refuses_an_empty_write_family_path_at_the_command_line(tmp_path):
    """It said ``<input>: is a directory (-o takes a file path)``: no such file, and not the option's name."""
    r = run_cli("suggest", "--loss", "a*theta**3 - c*log(theta)", "--write-family", "", cwd=tmp_path)
    _assert_one_line_error(r, "<command line>:", ["--write-family: empty output path"])
    assert listing(tmp_path) == []


# ------------------------------------------------------------ peer.validate at the defaults
_VALIDATED = """
    name: r
    family: gaussian_diag
    loss: abstract
    learning_rate: lr
    hyperparameters:
      lr: {default: 0.001}
      beta1: {default: 0.9}
      flag: {default: false}
    state_init: {s: 0}
    approximations:
      - delta
      - squared_gradient_hessian
      - ema_momentum: {rate: beta1, state: u}
    peer:
      validate: [{require: 'REQ', message: refused}]
    """


@pytest.mark.parametrize("req", ["lr < 0", "flag", "lr > beta1"])
def test_a_check_the_defaults_fail_is_refused_at_its_line(tmp_path, req):
    """``require: "lr < 0"`` with ``lr: 0.001`` was generated (exit 0) into an optimizer that raised
    ``ValueError: refused`` when constructed with its own defaults."""
    write(tmp_path, "r.yaml", _VALIDATED.replace("REQ", req))
    (tmp_path / "out.py").write_text(SENTINEL, encoding="utf-8")
    r = run_cli("r.yaml", "--target", "torch", "-o", "out.py", cwd=tmp_path)
    _assert_one_line_error(r, r"r\.yaml:15:", [r"the hyperparameters' defaults fail the check",
                                               "would refuse its own defaults"])
    assert (tmp_path / "out.py").read_text(encoding="utf-8") == SENTINEL


@pytest.mark.parametrize("req", ["lr >= 0", "not flag", "lr < beta1"])
def test_a_check_the_defaults_pass_is_generated(tmp_path, req):
    write(tmp_path, "r.yaml", _VALIDATED.replace("REQ", req))
    r = run_cli("r.yaml", "--target", "torch", "-o", "out.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "refused" in (tmp_path / "out.py").read_text(encoding="utf-8")


# ------------------------------------------------------------ a memory bound beyond a C long
@pytest.mark.parametrize("limit", ["99999999999999999999999999", "18446744073709551616"])
def test_a_memory_limit_too_large_for_the_system_call_bounds_nothing(tmp_path, limit, monkeypatch):
    """``BLR_DERIVE_MEMORY_LIMIT=99999999999999999999999999`` ended in ``OverflowError: Python int too large to
    convert to C long`` with its traceback, exit 1, before anything was read."""
    monkeypatch.setenv("BLR_DERIVE_MEMORY_LIMIT", limit)
    write(tmp_path, "r.yaml", """
        name: r
        family: gaussian_fixed_cov
        loss: abstract
        approximations: [delta]
        """)
    r = run_cli("r.yaml", "-o", "out.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" and "Traceback" not in r.stderr
    assert (tmp_path / "out.py").read_text(encoding="utf-8").startswith("# Generated by blr-derive")


# ------------------------------------------------------------ a vector family's update on an optimizer target
@pytest.mark.parametrize("target", ["torch", "triton"])
def test_a_vector_familys_update_on_an_optimizer_target_names_the_family(tmp_path, target):
    """gradient descent over gaussian_fixed_cov (θ a vector, the update written with the vector g): torch said
    `cannot print MatrixSymbol: g`, Triton that 'm_new' is a matrix expression; both now say why and what to write
    instead, at the family's line (line 2: the file starts at 'name:'; helper-68's finding)."""
    write(tmp_path, "r.yaml", """
        name: vector_gd
        family: gaussian_fixed_cov
        loss: abstract
        approximations: [delta]
        hyperparameters:
          rho: {default: 0.1}
        """)
    (tmp_path / "out.py").write_text(SENTINEL, encoding="utf-8")
    before = listing(tmp_path)
    r = run_cli("r.yaml", "--target", target, "-o", "out.py", cwd=tmp_path)
    _assert_one_line_error(r, r"r\.yaml:2:", [f"the {target} target needs an elementwise update",
                                              "'m_new' is written with vectors or matrices",
                                              "family 'gaussian_fixed_cov' is over a vector",
                                              "gaussian_diag", "numpy or jax target"])
    assert (tmp_path / "out.py").read_text(encoding="utf-8") == SENTINEL
    assert listing(tmp_path) == before


# ------------------------------------------------------------ a flag compared with a number in peer.validate
@pytest.mark.parametrize("require", ["nest > 0.5", "nest >= 1", "lr < 1 and nest < 2"])
def test_a_flag_compared_with_a_number_in_a_check_is_refused_at_its_line(tmp_path, require):
    """`nest > 0.5` with a flag `nest` was generated and compared True/False as 1/0 at run time (the constructor
    then refused its own default, 'bad False'; helper-68's finding): a flag is a condition by itself."""
    write(tmp_path, "r.yaml", f"""
        name: flagged
        family: gaussian_diag
        loss: abstract
        approximations: [delta, squared_gradient_hessian]
        state_init: {{s: 1.0}}
        peer:
          validate:
            - {{require: "{require}", message: "bad {{nest}}"}}
        hyperparameters:
          lr: {{default: 0.1}}
          nest: {{default: false}}
        """)
    (tmp_path / "out.py").write_text(SENTINEL, encoding="utf-8")
    before = listing(tmp_path)
    r = run_cli("r.yaml", "--target", "torch", "-o", "out.py", cwd=tmp_path)
    _assert_one_line_error(r, r"r\.yaml:8:", [r"'nest' is a flag \(true or false\)", "write 'nest' or 'not nest'"])
    assert (tmp_path / "out.py").read_text(encoding="utf-8") == SENTINEL
    assert listing(tmp_path) == before


def test_a_flag_compared_with_a_number_in_a_when_is_refused_at_its_line(tmp_path):
    """`when: nest > 0.5` on a pass was generated as numpy.greater(bool(nest), 1/2): a flag is a condition by itself
    (`when: nest < 2` would have run the pass whatever the flag)."""
    write(tmp_path, "r.yaml", """
        name: when_flag
        family: gaussian_diag
        loss: abstract
        approximations:
          - delta
          - squared_gradient_hessian
          - ema_momentum: {rate: beta1, state: u}
          - debias: {param: u, rate: beta1, when: nest < 2}
        state_init: {s: 1.0}
        hyperparameters:
          beta1: {default: 0.9}
          nest: {default: false}
        """)
    (tmp_path / "out.py").write_text(SENTINEL, encoding="utf-8")
    r = run_cli("r.yaml", "--target", "numpy", "-o", "out.py", cwd=tmp_path)
    _assert_one_line_error(r, r"r\.yaml:8:", [r"'nest' is a flag \(true or false\)", "write when: nest or when: not nest"])
    assert (tmp_path / "out.py").read_text(encoding="utf-8") == SENTINEL
