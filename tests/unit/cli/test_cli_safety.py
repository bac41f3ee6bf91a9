"""Hostile input through the real command line (README, "Safety model"): special files, output paths,
non-finite and oversized numbers, control characters, command-line arguments, the time budget and located
refusals of the code generators.  Every bad input is one line ``blr-derive: error: WHERE: problem`` with exit
status 2, no traceback, and leaves the files around it as they were."""
from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from blr_derive.codegen import TARGET_NAMES

from conftest import run_cli_in_process
from test_cli import CATALOG, NEWTON, _assert_one_line_error, listing, run_cli, write

ADAM = CATALOG / "adam.yaml"
SENTINEL = "SENTINEL = 1\n"


def _setup(tmp_path):
    (tmp_path / "existing.py").write_text(SENTINEL, encoding="utf-8")
    return listing(tmp_path)


def _untouched(tmp_path, before):
    assert (tmp_path / "existing.py").read_text(encoding="utf-8") == SENTINEL
    assert listing(tmp_path) == before


# ---------------------------------------------------------------------------- input files
@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_recipe_that_is_a_device_is_refused_without_reading_it(tmp_path, special):
    before = _setup(tmp_path)
    t0 = time.perf_counter()
    r = run_cli(special, "-o", "existing.py", cwd=tmp_path, timeout=60)
    assert time.perf_counter() - t0 < 30
    _assert_one_line_error(r, special + ":", ["not a regular file"])
    _untouched(tmp_path, before)


def test_recipe_that_is_a_fifo_does_not_block(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    before = _setup(tmp_path)
    r = run_cli("pipe.yaml", "-o", "existing.py", cwd=tmp_path, timeout=60)
    _assert_one_line_error(r, "pipe.yaml:", ["not a regular file"])
    _untouched(tmp_path, before)


def test_recipe_that_is_a_directory(tmp_path):
    (tmp_path / "d.yaml").mkdir()
    before = _setup(tmp_path)
    r = run_cli("d.yaml", "-o", "existing.py", cwd=tmp_path)
    _assert_one_line_error(r, "d.yaml:", ["is a directory"])
    _untouched(tmp_path, before)


def test_oversized_recipe_is_refused_before_it_is_read(tmp_path):
    (tmp_path / "big.yaml").write_text("name: big\ntitle: " + "a" * (1 << 20) + "\n", encoding="utf-8")
    before = _setup(tmp_path)
    r = run_cli("big.yaml", "-o", "existing.py", cwd=tmp_path)
    _assert_one_line_error(r, "big.yaml:", ["larger than 1048576 bytes"])
    _untouched(tmp_path, before)


@pytest.mark.parametrize("ref", ["/dev/zero", "secret.yaml", "secret.txt/"])
def test_family_reference_to_another_kind_of_file_never_quotes_it(tmp_path, ref):
    """``family: /etc/shadow`` once echoed the file's first line; a file that is not a family declaration is
    refused without quoting any of it."""
    (tmp_path / "secret.yaml").write_text("zz_account: TOPSECRET-hash-value\nother: TOPSECRET\n", encoding="utf-8")
    (tmp_path / "secret.txt").mkdir()
    write(tmp_path, "r.yaml", f"name: r\nfamily: {ref}\nloss: abstract\napproximations: [delta]\n")
    before = _setup(tmp_path)
    r = run_cli_in_process("r.yaml", "-o", "existing.py", cwd=tmp_path)
    _assert_one_line_error(r, "", ["r.yaml:2:|not a regular file|not a family|is a directory|not found"])
    assert "TOPSECRET" not in r.stderr and "zz_account" not in r.stderr
    _untouched(tmp_path, before)


# ---------------------------------------------------------------------------- output paths
@pytest.mark.parametrize("ref, problem", [
    ("./fams", "is a directory, not a family file"),
    ("/dev/zero", "is not a regular file (a device, FIFO or socket); a family file must be a regular file"),
])
def test_a_family_path_that_is_no_file_is_located_at_the_recipe(tmp_path, ref, problem):
    """It was given the recipe's line under the family path's name ('/etc:10: is a directory')."""
    (tmp_path / "fams").mkdir()
    write(tmp_path, "r.yaml", f"name: r\nfamily: {ref}\nloss: abstract\napproximations: [delta]\n")
    before = _setup(tmp_path)
    r = run_cli_in_process("r.yaml", "-o", "existing.py", cwd=tmp_path)
    path = ref if ref.startswith("/") else str(tmp_path / ref)        # the path opened, beside the recipe
    assert r.returncode == 2 and r.stderr == f"blr-derive: error: r.yaml:2: family file '{path}': {problem}\n", r.stderr
    _untouched(tmp_path, before)


def test_output_onto_a_fifo_leaves_it_a_fifo(tmp_path):
    fifo = tmp_path / "out.py"
    os.mkfifo(fifo)
    r = run_cli(ADAM, "-o", "out.py", cwd=tmp_path, timeout=120)
    _assert_one_line_error(r, "out.py:", ["not a regular file"])
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_output_through_a_link_to_a_device_does_not_replace_it(tmp_path):
    (tmp_path / "out.py").symlink_to("/dev/null")
    r = run_cli(ADAM, "-o", "out.py", cwd=tmp_path)
    _assert_one_line_error(r, "out.py:", ["not a regular file"])
    assert (tmp_path / "out.py").is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_output_through_a_link_to_a_file_writes_the_file(tmp_path):
    (tmp_path / "real.py").write_text(SENTINEL, encoding="utf-8")
    (tmp_path / "out.py").symlink_to("real.py")
    r = run_cli(ADAM, "-o", "out.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.py").is_symlink()
    assert (tmp_path / "real.py").read_text(encoding="utf-8").startswith("# Generated by blr-derive")


@pytest.mark.parametrize("out, words", [
    ("", ["-o: empty output path"]),
    (".", ["is a directory"]),
    ("existing.py/x.py", ["not a directory"]),
    ("/proc/blr_derive_out.py", ["cannot write"]),
])
def test_bad_output_paths_are_input_errors(tmp_path, out, words):
    before = _setup(tmp_path)
    r = run_cli_in_process(ADAM, "-o", out, cwd=tmp_path)
    _assert_one_line_error(r, "", words)
    _untouched(tmp_path, before)


def test_output_is_checked_before_the_derivation(tmp_path):
    """A bad -o fails at once (not after minutes of deriving)."""
    t0 = time.perf_counter()
    r = run_cli(CATALOG / "em_gmm_unrolled.yaml", "--size", "K=7", "-o", ".", cwd=tmp_path)
    _assert_one_line_error(r, "", ["is a directory"])
    assert time.perf_counter() - t0 < 10


# ---------------------------------------------------------------------------- numbers and characters
@pytest.mark.parametrize("text, location, words", [
    ("name: r\nfamily: gaussian_diag\nloss: abstract\napproximations: [delta]\nhyperparameters:\n"
     "  rho: {default: .nan}\n", "r.yaml:6:", ["NaN"]),
    ("name: r\nfamily: gaussian_diag\nloss: abstract\napproximations: [delta]\nhyperparameters:\n"
     "  rho: {default: .inf}\n", "r.yaml:6:", ["finite", "allow_infinite"]),
    ("name: r\nfamily: gaussian_diag\nloss: abstract\napproximations: [delta]\nhyperparameters:\n"
     "  rho: {default: -.inf, allow_infinite: true}\n", "r.yaml:6:", ["finite"]),
    ("name: r\nfamily: gaussian_diag\nloss: abstract\napproximations: [delta]\nhyperparameters:\n"
     "  rho: {default: " + "9" * 5000 + "}\n", "r.yaml:6:", ["number too large"]),
    ("name: r\nfamily: gaussian_diag\nloss: abstract\napproximations: [delta]\nhyperparameters:\n"
     "  betas: {default: [0.9, .nan], names: [b1, b2]}\n", "r.yaml:6:", ["NaN"]),
    # a 400-digit integer literal in an expression: its float is inf, which a module would read as a name
    ("name: r\nfamily: gaussian_diag\nloss:\n  expression: 1" + "0" * 400 + "*theta**2\napproximations: [delta]\n",
     "r.yaml:4:", ["loss: the number 100000… \\(401 digits\\) is beyond a double's range"]),
    ("name: r\x07\nfamily: gaussian_diag\n", "r.yaml:1:", ["U\\+0007"]),
    ("name: r\nfamily: gaussian_diag\x00\n", "r.yaml:2:", ["U\\+0000"]),
    ('name: "r\\ud800"\nfamily: gaussian_diag\n', "r.yaml:1:", ["surrogate"]),
])
def test_bad_numbers_and_characters(tmp_path, text, location, words):
    (tmp_path / "r.yaml").write_text(text, encoding="utf-8")
    before = _setup(tmp_path)
    r = run_cli_in_process("r.yaml", "-o", "existing.py", cwd=tmp_path)
    _assert_one_line_error(r, location, words)
    _untouched(tmp_path, before)


def test_an_infinite_bound_is_allowed_where_declared(tmp_path):
    write(tmp_path, "r.yaml", """
        name: r
        family: gaussian_diag
        loss: abstract
        approximations: [delta]
        hyperparameters:
          rho: {default: 0.1}
          cap: {default: .inf, allow_infinite: true, description: unused here}
    """)
    r = run_cli_in_process("r.yaml", "-o", "out.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_control_characters_in_messages_are_escaped(tmp_path):
    """A key spelled with YAML escapes (ESC, BEL) is named in the error with the escapes visible: no control
    sequence reaches the terminal."""
    (tmp_path / "r.yaml").write_text('name: r\n"zz\\e]0;x\\a": 1\nfamily: gaussian_diag\n', encoding="utf-8")
    r = run_cli_in_process("r.yaml", cwd=tmp_path)
    line = _assert_one_line_error(r, "r.yaml:2:", ["unknown key"])
    assert "\x1b" not in line and "\x07" not in line and "\\x1b" in line



@pytest.mark.parametrize("brk", ["\n", "\r", "\u2028", "\x85"], ids=["LF", "CR", "LS", "NEL"])
def test_a_line_break_in_a_file_name_does_not_cut_the_message(tmp_path, brk):
    """A file name is untrusted text too (a catalog folder's, a family a recipe names): a line break in it once ended
    the one-line message at the break, ``blr-derive: error: a`` without the line or the problem.  It is written as
    its escape, and the location and the problem follow."""
    name = f"a{brk}b.yaml"
    esc = brk.encode("unicode_escape").decode("ascii")
    (tmp_path / name).write_text("name: r\nfamily: gaussian_diag\nloss: abstract\napproximations: [no_such_rule]\n",
                                 encoding="utf-8")
    r = run_cli(name, cwd=tmp_path)
    line = _assert_one_line_error(r, "", [])
    assert line.startswith(f"blr-derive: error: a{esc}b.yaml:4: unknown approximation 'no_such_rule'"), line
    r = run_cli_in_process(f"missing{brk}.yaml", cwd=tmp_path)
    assert _assert_one_line_error(r, "", []) == f"blr-derive: error: missing{esc}.yaml: file not found"
    (tmp_path / "r.yaml").write_text(f'name: r\nfamily: "nofam{esc}.yaml"\nloss: abstract\n', encoding="utf-8")
    r = run_cli_in_process("r.yaml", cwd=tmp_path)
    assert _assert_one_line_error(r, "", []) == f"blr-derive: error: r.yaml:2: family file 'nofam{esc}.yaml' not found"

# ---------------------------------------------------------------------------- the command line
@pytest.mark.parametrize("args, words", [
    (["check", "--seed", "-1", "families/poisson.yaml"], ["--seed must be an integer from 0"]),
    (["check", "--points", "0", "families/poisson.yaml"], ["--points must be an integer from 1 to 1000"]),
    (["check", "--points", "100000", "families/poisson.yaml"], ["--points must be an integer from 1 to 1000"]),
    (["check", "--points", "x", "families/poisson.yaml"], ["invalid int value"]),
    (["check"], ["required"]),
    ([str(NEWTON), "--target", "cobol"], ["unknown target 'cobol'", "numpy, torch, triton"]),
    ([str(NEWTON), "--time-limit", "-3"], ["--time-limit must be"]),
    ([str(NEWTON), "--no-such-option"], ["unrecognized arguments"]),
    (["explain", str(NEWTON), "--format", "pdf"], ["invalid choice"]),
])
def test_bad_arguments_are_one_line(tmp_path, args, words):
    r = run_cli_in_process(*args, cwd=tmp_path)
    _assert_one_line_error(r, "<command line>:", words)


def test_help_lists_the_targets(tmp_path):
    r = run_cli("--help", cwd=tmp_path)
    assert r.returncode == 0 and ", ".join(TARGET_NAMES) in r.stdout and "--time-limit" in r.stdout


# ---------------------------------------------------------------------------- time budget
def test_time_budget_ends_a_long_derivation_with_a_located_error(tmp_path):
    """A degree-32 polynomial loss with the exact rule takes seconds; with --time-limit 0.5 the derivation stops
    at once and names the recipe (and the loss's line once the recipe is loaded)."""
    write(tmp_path, "r.yaml", """
        name: r
        family: gaussian_diag
        loss: {expression: "(theta + 1)**32"}
        approximations: [exact]
    """)
    before = _setup(tmp_path)
    t0 = time.perf_counter()
    r = run_cli("r.yaml", "--time-limit", "1.5", "-o", "existing.py", cwd=tmp_path)
    wall = time.perf_counter() - t0
    # while the recipe loads the error names its first line, while the loss is derived the loss's line
    _assert_one_line_error(r, "r.yaml:[13]:", ["did not finish within the time limit of 1.5 s", "--time-limit"])
    _untouched(tmp_path, before)
    assert wall < 20
    r = run_cli("r.yaml", "-o", "out.py", cwd=tmp_path)              # the default budget is enough
    assert r.returncode == 0, r.stderr


def test_time_budget_applies_to_check(tmp_path):
    r = run_cli("check", "--time-limit", "0.2", "--points", "1000", CATALOG.parent / "families" / "beta.yaml",
                cwd=tmp_path)
    _assert_one_line_error(r, "beta.yaml", ["did not finish within the time limit"])


@pytest.mark.parametrize("family, loss, rule, words", [
    ("gaussian_diag", "(theta+a1)*(theta+a2)*(theta+a3)*(theta+a4)*(theta+a5)*(theta+a6)*(theta+a7)*(theta+a8)*"
     "(theta+a9)*(theta+a10)*(theta+a11)*(theta+a12)*(theta+a13)*(theta+a14)", "exact",
     ["expands to more than 10000 terms"]),
    ("gaussian_full", "softplus(" * 40 + "theta.T*theta" + ")" * 40, "delta", ["polynomial of degree <= 2"]),
])
def test_expensive_losses_are_refused_quickly(tmp_path, family, loss, rule, words):
    hyper = "".join(f"  a{i}: 1.0\n" for i in range(1, 15))
    (tmp_path / "r.yaml").write_text(
        f"name: r\nfamily: {family}\nloss: {{expression: \"{loss}\"}}\napproximations: [{rule}]\n"
        f"hyperparameters:\n  rho: 0.5\n{hyper}", encoding="utf-8")
    t0 = time.perf_counter()
    r = run_cli_in_process("r.yaml", "-o", "out.py", cwd=tmp_path)
    _assert_one_line_error(r, "r.yaml:", words)
    assert time.perf_counter() - t0 < 20


@pytest.mark.parametrize("loss, words", [
    # exp nested 30 deep overflows mpmath's exponent at θ = 0.375 (was: internal error, OverflowError, exit 3)
    ("exp(" * 30 + "theta" + ")" * 30, "the loss is not finite at theta = 0.375"),
    # log nested 60 deep: log(0.375) < 0, and each level kept its iπ symbolically (was: the 120 s time limit)
    ("log(" * 60 + "theta" + ")" * 60, "the loss is not a real number at theta = 0.375"),
])
def test_deeply_nested_losses_are_judged_on_the_support_quickly(tmp_path, loss, words):
    """loss_domain evaluates each subexpression to one number as it goes (blr_derive/families/loss_domain.py)."""
    (tmp_path / "r.yaml").write_text(
        f"name: r\nfamily: gamma\nloss:\n  expression: {loss}\napproximations: [exact]\n", encoding="utf-8")
    before = _setup(tmp_path)
    t0 = time.perf_counter()
    r = run_cli_in_process("r.yaml", "-o", "existing.py", cwd=tmp_path)
    assert time.perf_counter() - t0 < 20
    assert r.returncode == 2 and r.stderr == (
        f"blr-derive: error: r.yaml:4: {words}, a point of the support of family 'gamma' (positive): E_q[loss] "
        "(Eq. 2) is an expectation over all of the support, so the loss must be real and finite there (a logarithm "
        "of a negative number, a pole at a support point); write it for the family's support, or choose a family "
        "whose support it is defined on\n"), r.stderr
    _untouched(tmp_path, before)


# ---------------------------------------------------------------------------- located refusals of targets
def test_target_refusals_are_located(tmp_path):
    r = run_cli_in_process(NEWTON, "--target", "torch", cwd=tmp_path)
    line = _assert_one_line_error(r, r"newton\.yaml:\d+:", ["needs an elementwise"])
    n = int(line.split("newton.yaml:")[1].split(":")[0])
    assert NEWTON.read_text(encoding="utf-8").splitlines()[n - 1].startswith("family:")


def test_api_time_limit(tmp_path):
    """The notebook/library API takes the same budget as a parameter; running out is a located SpecError
    (TimeLimitExceeded), not a BaseException that a notebook cannot catch."""
    from blr_derive import api
    from blr_derive.core.errors import SpecError, TimeLimitExceeded
    write(tmp_path, "r.yaml", """
        name: r
        family: gaussian_diag
        loss: {expression: "(theta + 1)**32"}
        approximations: [exact]
    """)
    t0 = time.perf_counter()
    with pytest.raises(TimeLimitExceeded, match="time limit of 0.3 s") as ei:
        api.derive(str(tmp_path / "r.yaml"), time_limit=0.3)
    assert isinstance(ei.value, SpecError) and ei.value.file.endswith("r.yaml")
    assert time.perf_counter() - t0 < 10


def test_terminal_output_escapes_control_characters(tmp_path):
    """What a command prints on the terminal (explain, compare, check) shows a recipe's control characters as
    escapes: a title cannot move the cursor or retitle the terminal."""
    write(tmp_path, "r.yaml", 'name: r\ntitle: "evil \\e]0;owned\\a \\e[2J title"\nfamily: gaussian_diag\n'
                              "loss: abstract\napproximations: [delta]\n")
    r = run_cli("explain", "r.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # the Markdown report also escapes Markdown's own brackets (report/markdown.py:_md)
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout and "evil \\x1b\\]0;owned\\x07" in r.stdout
    r = run_cli("compare", "r.yaml", "r.yaml", cwd=tmp_path)
    assert r.returncode == 0 and "\x1b" not in r.stdout


# ---------------------------------------------------------------------------- counts (docs/recipe-format.md)
def _catalog_with(tmp_path, recipe, old, new):
    text = (CATALOG / recipe).read_text(encoding="utf-8")
    assert old in text
    (tmp_path / "r.yaml").write_text(text.replace(old, new), encoding="utf-8")
    return text[:text.index(old)].count("\n") + 1          # the line of the edit


_MC = "a Monte Carlo estimate's error falls only as 1/sqrt(samples); draw fewer per step (the steps average them further)"
_NODES = ("more nodes add nothing in double precision (65 tanh-sinh or 32 Gauss-Hermite nodes already integrate a "
          "smooth loss to rounding error)")


@pytest.mark.parametrize("recipe, old, new, message", [
    # a literal count: 10^12 draws per step was derived and `check` ran it until the timeout
    ("vogn.yaml", "{samples: mc_samples}", "{samples: 1000000000000}",
     "approximation 'monte_carlo': samples must be at most 100000, got 1000000000000: " + _MC),
    # the same count as a hyperparameter's default
    ("vogn.yaml", "mc_samples: {default: 1,", "mc_samples: {default: 1000000000000,",
     "approximation 'monte_carlo': samples: the default of 'mc_samples' is 1000000000000, more than 100000: " + _MC),
    ("score_function_exponential.yaml", "{samples: mc_samples}", "{samples: 2*mc_samples**3}",
     "approximation 'score_function': samples = 2*mc_samples**3 is 2000000 at the hyperparameters' defaults, more "
     "than 100000: " + _MC + " (lower the default of 'mc_samples')"),
    # 10^8 tanh-sinh nodes: `check` grew to 3.5 GB before its timeout
    ("quadrature_gamma.yaml", "{nodes: nodes}", "{nodes: 100000001}",
     "approximation 'quadrature': nodes must be at most 1001, got 100000001: " + _NODES),
    ("ncvi.yaml", "nodes: {default: 32,", "nodes: {default: 1003,",
     "approximation 'gauss_hermite': nodes: the default of 'nodes' is 1003, more than 1001: " + _NODES),
    ("soap.yaml", "every: precondition_frequency", "every: 1000001",
     "approximation 'kronecker_eigenbasis': every must be at most 1000000, got 1000001: a longer period never "
     "refreshes in practice"),
])
@pytest.mark.parametrize("command", [["--target", t] for t in TARGET_NAMES] + [["check"]])
def test_counts_are_bounded(tmp_path, recipe, old, new, message, command):
    """A count that asks for unbounded work (draws per step, quadrature nodes, a refresh period) is refused where
    the recipe is read, by every target and by ``check``: one located line, exit 2, the output untouched."""
    _catalog_with(tmp_path, recipe, old, new)
    text = (tmp_path / "r.yaml").read_text(encoding="utf-8")
    rule = message.split("'")[1]
    line = next(i for i, l in enumerate(text.splitlines(), 1) if l.strip().startswith(f"- {rule}"))
    before = _setup(tmp_path)
    args = ["check", "r.yaml"] if command == ["check"] else ["r.yaml", *command, "-o", "existing.py"]
    r = run_cli_in_process(*args, cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"blr-derive: error: r.yaml:{line}: {message}\n")
    _untouched(tmp_path, before)


@pytest.mark.parametrize("recipe, old, new", [
    ("vogn.yaml", "{samples: mc_samples}", "{samples: 100000}"),
    ("quadrature_gamma.yaml", "{nodes: nodes}", "{nodes: 1001}"),
    ("soap.yaml", "every: precondition_frequency", "every: 1000000"),
])
def test_counts_at_their_limit_derive(tmp_path, recipe, old, new):
    _catalog_with(tmp_path, recipe, old, new)
    r = run_cli_in_process("r.yaml", "-o", "out.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert new.split(": ")[-1].strip("}") in (tmp_path / "out.py").read_text(encoding="utf-8")


@pytest.mark.parametrize("depth, opener, closer", [(300, "exp(", ")"), (900, "(", ")")])
def test_a_deeply_nested_expression_says_why(tmp_path, depth, opener, closer):
    """An expression nested past the parser's limit (2000 characters of 'exp(exp(...' or '(((...') is one line that
    ends with the reason: the quoted expression is cut at 120 characters (it was quoted whole and the error line's
    1000-character cut dropped the reason)."""
    loss = opener * depth + "theta" + closer * depth
    (tmp_path / "r.yaml").write_text(f'name: r\nfamily: gaussian_diag\nloss: {{expression: "{loss}"}}\n'
                                     "approximations: [exact]\n", encoding="utf-8")
    before = _setup(tmp_path)
    r = run_cli_in_process("r.yaml", "-o", "existing.py", cwd=tmp_path)
    shown = (opener * depth)[:120]
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", f"blr-derive: error: r.yaml:3: loss: syntax error in '{shown}…' (too many nested parentheses)\n")
    _untouched(tmp_path, before)


def test_a_long_base_60_integer_is_refused_at_once(tmp_path):
    """YAML 1.1 reads 1:30:00 as a base-60 integer, built part by part (quadratic): a 1 MB one of 500 000 parts
    took 86 s to be called too large; it is refused from its length."""
    (tmp_path / "r.yaml").write_text("name: r\nfamily: gaussian_diag\nloss: abstract\napproximations: [delta]\n"
                                     "hyperparameters:\n  rho: " + "1:" * 500_000 + "1\n", encoding="utf-8")
    before = _setup(tmp_path)
    t0 = time.perf_counter()
    r = run_cli_in_process("r.yaml", "-o", "existing.py", cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "blr-derive: error: r.yaml:6: number too large\n")
    assert time.perf_counter() - t0 < 10
    _untouched(tmp_path, before)
    (tmp_path / "r.yaml").write_text("name: r\nfamily: gaussian_diag\nloss: abstract\napproximations: [delta]\n"
                                     "hyperparameters:\n  rho: 1:30\n", encoding="utf-8")
    r = run_cli_in_process("r.yaml", "-o", "out.py", cwd=tmp_path)
    assert r.returncode == 0 and '"rho": 90.0,' in (tmp_path / "out.py").read_text(encoding="utf-8")


def test_the_approximations_list_is_bounded(tmp_path):
    """2000 weight decays derived in 65 s (a 1 MB file holds 30 000): more than 64 approximations are refused at
    the list's line, from a file and from repeated --approx alike; 64 derive."""
    head = "name: r\nfamily: gaussian_diag\nloss: abstract\napproximations:\n  - delta\n  - squared_gradient_hessian\n"
    (tmp_path / "r.yaml").write_text(head + "  - weight_decay: {coefficient: 0.1}\n" * 2000, encoding="utf-8")
    before = _setup(tmp_path)
    t0 = time.perf_counter()
    r = run_cli_in_process("r.yaml", "-o", "existing.py", cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", "blr-derive: error: r.yaml:4: at most 64 approximations, got 2002 (the catalog's longest list has 13)\n")
    assert time.perf_counter() - t0 < 10
    _untouched(tmp_path, before)
    r = run_cli_in_process("gaussian_diag", "--loss", "abstract", *["--approx", "delta"] * 65, "-o", "existing.py",
                           cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.endswith(": at most 64 approximations, got 65 (the catalog's longest list has 13)\n"), r.stderr
    _untouched(tmp_path, before)
    (tmp_path / "r.yaml").write_text(head + "  - weight_decay: {coefficient: 0.1}\n" * 62, encoding="utf-8")
    assert run_cli_in_process("r.yaml", "-o", "out.py", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("value, shown", [("1e300", "1e+300"), ("1000000", "1000000")])
def test_a_count_from_hyper_on_the_command_line_is_bounded(tmp_path, value, shown):
    """--hyper declares a float: its default as a count is shown as the number it is (1000000, not 1000000.00000)."""
    before = _setup(tmp_path)
    r = run_cli_in_process("gaussian_diag", "--loss", "abstract", "--approx", "monte_carlo: {samples: n}",
                           "--approx", "squared_gradient_hessian", "--hyper", f"n={value}", "-o", "existing.py",
                           cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", "blr-derive: error: <command line>: --approx 'monte_carlo: {samples: n}': approximation 'monte_carlo': "
        f"samples: the default of 'n' is {shown}, more than 100000: {_MC}\n")
    _untouched(tmp_path, before)


def test_sampler_definitions_that_copy_each_other_are_bounded(tmp_path):
    """16 sampler definitions, each using the one before three times, are 3**15 operations once written in: the
    derivation ran to the time limit at 2 GB; the first definition past 100 000 operations is refused at its line,
    by a recipe over the family and by ``check``."""
    family = (CATALOG.parent / "families" / "exponential.yaml").read_text(encoding="utf-8")
    defs = "".join(f"    d{i}: (d{i - 1} + d{i - 1}*u{i % 15 + 2})*(d{i - 1} + 1)\n" for i in range(2, 17))
    family = family.replace("sampler: -log(u)/r", "sampler:\n  value: d16\n  define:\n    d1: -log(u)/r - log(u2)/r\n"
                            + defs)
    (tmp_path / "fam.yaml").write_text(family, encoding="utf-8")
    (tmp_path / "r.yaml").write_text("name: r\nfamily: fam.yaml\nloss: abstract\napproximations: [score_function]\n",
                                     encoding="utf-8")
    line = family[:family.index("    d9:")].count("\n") + 1
    message = (f"{line}: sampler: definition 'd9' has 112628 operations with the "
               "definitions it uses written in, more than 100000: use each definition fewer times (a definition is "
               "copied where it is used)\n")
    before = _setup(tmp_path)
    # a family a recipe names is reported by its resolved path, one given to check as written
    for args, file in ((["r.yaml", "-o", "existing.py"], tmp_path / "fam.yaml"), (["check", "fam.yaml"], "fam.yaml")):
        t0 = time.perf_counter()
        r = run_cli_in_process(*args, cwd=tmp_path)
        assert (r.returncode, r.stdout, r.stderr) == (2, "", f"blr-derive: error: {file}:{message}")
        assert time.perf_counter() - t0 < 20
    _untouched(tmp_path, before)


@pytest.mark.parametrize("samples, hyper, problem", [
    # -3 draws per step were derived
    ("-n", "n=3", "samples = -n is -3 at the hyperparameters' defaults; a count is a positive integer"),
    ("n", "n=2.5", "samples: the default of 'n' is 2.5; a count is a positive integer"),
])
def test_a_count_that_is_not_a_positive_integer_at_the_defaults_is_refused(tmp_path, samples, hyper, problem):
    before = _setup(tmp_path)
    r = run_cli_in_process("gaussian_diag", "--loss", "abstract", "--approx", f"monte_carlo: {{samples: {samples}}}",
                           "--approx", "squared_gradient_hessian", "--hyper", hyper, "-o", "existing.py", cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", f"blr-derive: error: <command line>: --approx 'monte_carlo: {{samples: {samples}}}': approximation "
        f"'monte_carlo': {problem}\n")
    _untouched(tmp_path, before)


@pytest.mark.parametrize("value, kind", [("[1, 2]", "a list"), ("{a: 1}", "a mapping"), ("null", "nothing (null)")])
def test_a_rule_argument_of_the_wrong_kind_is_named_in_words(tmp_path, value, kind):
    """(it said 'got LList', 'got LDict', 'got NoneType': the reader's own type names)"""
    r = run_cli_in_process("gaussian_diag", "--loss", "abstract", "--approx", f"monte_carlo: {{samples: {value}}}",
                           "--approx", "squared_gradient_hessian", cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", f"blr-derive: error: <command line>: --approx 'monte_carlo: {{samples: {value}}}': monte_carlo.samples: "
        f"expected an expression string, got {kind}\n")


def test_a_look_alike_name_in_an_expression_is_a_located_error(tmp_path):
    """``ｗｄ`` (fullwidth) was read by Python's parser as the declared ``wd`` and derived; it is refused at its line,
    with what to write instead."""
    (tmp_path / "r.yaml").write_text(
        "name: r\nfamily: gaussian_diag\nloss: abstract\nhyperparameters:\n  wd: {default: 0.5}\n"
        "approximations:\n  - delta\n  - weight_decay: {coefficient: ｗｄ}\n", encoding="utf-8")
    before = _setup(tmp_path)
    r = run_cli("r.yaml", "-o", "existing.py", cwd=tmp_path)
    assert _assert_one_line_error(r, "", []) == (
        "blr-derive: error: r.yaml:8: weight_decay.coefficient: 'ｗｄ' is not an ASCII name (Python would read it as "
        "'wd') in 'ｗｄ'; write names in ASCII letters, digits and underscores")
    _untouched(tmp_path, before)


@pytest.mark.parametrize("command", [[], ["explain"]], ids=["generate", "explain"])
def test_output_onto_the_family_file_the_recipe_reads_is_refused(tmp_path, command):
    """``-o`` naming the recipe was refused, but ``-o fam.yaml`` for a recipe with ``family: fam.yaml`` replaced the
    family file with the generated module (exit 0); every file the derivation read is an input."""
    family = (Path(__file__).resolve().parents[3] / "families" / "gaussian_diag.yaml").read_text(encoding="utf-8")
    (tmp_path / "fam.yaml").write_text(family, encoding="utf-8")
    (tmp_path / "r.yaml").write_text("name: r\nfamily: fam.yaml\nloss: abstract\napproximations: [delta]\n",
                                     encoding="utf-8")
    before = listing(tmp_path)
    r = run_cli_in_process(*command, "r.yaml", "-o", "fam.yaml", cwd=tmp_path)
    what = "report" if command else "generated code"
    assert _assert_one_line_error(r, "", []) == (
        f"blr-derive: error: fam.yaml: -o names a file the recipe reads ({tmp_path / 'fam.yaml'}); write the {what} "
        "to another file")
    assert (tmp_path / "fam.yaml").read_text(encoding="utf-8") == family and listing(tmp_path) == before


def test_a_line_break_in_a_checked_file_name_forges_no_report_line():
    """``blr-derive check`` titles its report with the file's name: ``e<LF>all 19 checks passed.yaml`` printed a
    line of its own, 'all 19 checks passed.yaml)'."""
    from blr_derive.verify.results import Report, format_report
    text = format_report(Report("family 'exponential' (e\nall 19 checks passed.yaml)", None))
    assert text.splitlines()[0] == "check family 'exponential' (e\\nall 19 checks passed.yaml)"


@pytest.mark.parametrize("exc", [RecursionError, MemoryError])
def test_input_too_deep_for_the_engine_names_the_file_given(tmp_path, monkeypatch, exc):
    """A RecursionError or MemoryError raised where no located context is open (a finite support of 150 points
    whose sum sympy recursed through for 110 s) named `<command line>`; the message names the file the command
    line gave, as the time budget's does, and the output is untouched."""
    from blr_derive import cli

    def deep(argv):
        raise exc("deep")
    monkeypatch.setattr(cli, "cmd_generate", deep)
    recipe = write(tmp_path, "deep.yaml", "name: deep\nfamily: poisson\n")
    out = tmp_path / "out.py"
    r = run_cli_in_process(str(recipe), "--target", "numpy", "-o", str(out), cwd=tmp_path)
    _assert_one_line_error(r, r"deep\.yaml", ["too large or too deeply nested", exc.__name__])
    assert "command line" not in r.stderr and not out.exists()


def test_input_too_deep_inside_a_derivation_is_located_where_the_engine_was(tmp_path, monkeypatch):
    """A RecursionError raised inside the derivation budget keeps the place the engine was working on (the budget
    resets the location as the error passes through it, so the handler read the place outside it)."""
    from blr_derive import api
    from blr_derive.core.budget import derivation_budget, where

    def deep(*args, **kwargs):
        with derivation_budget(60):
            where(str(tmp_path / "deep.yaml"), 7)
            raise RecursionError("deep")
    monkeypatch.setattr(api, "generate", deep)
    recipe = write(tmp_path, "deep.yaml", "name: deep\nfamily: poisson\n")
    r = run_cli_in_process(str(recipe), "--target", "numpy", cwd=tmp_path)
    _assert_one_line_error(r, r"deep\.yaml:7", ["too large or too deeply nested", "RecursionError"])


def test_a_function_of_a_vector_outside_a_data_sum_says_how_to_write_it(tmp_path):
    """`y.T*exp(-X*theta)` (a Gamma regression's log link as a user writes it first) was refused as "exp() takes a
    scalar, got a matrix expression" with nothing on what the grammar accepts; the message names the data-sum form."""
    recipe = write(tmp_path, "g.yaml", """\
        name: gamma_reg
        family: gaussian_full
        loss:
          expression: y.T*exp(-X*theta) + 0.5*theta.T*theta
          data: {X: {shape: [N, P]}, y: {shape: [N]}}
        approximations: [delta]
        """)
    out = tmp_path / "g.py"
    r = run_cli_in_process(str(recipe), "-o", str(out), cwd=tmp_path)
    _assert_one_line_error(r, r"g\.yaml:4", [r"exp\(\) takes a scalar", r"data sum, e\.g\. sum\(exp\(X\*theta\)\)"])
    assert not out.exists()
