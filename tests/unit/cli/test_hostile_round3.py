"""Hostile input, third round (docs/safety.md), through the command line's ``main`` in this process: each case found
a gap and asserts the contract where it held not: one line ``blr-derive: error: FILE:LINE: problem``, exit status 2,
no traceback, and the output file as it was."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import run_cli_in_process
from test_cli import ROOT, _assert_one_line_error, listing, write

SENTINEL = "SENTINEL = 1\n"


def _out(tmp_path):
    (tmp_path / "out.py").write_text(SENTINEL, encoding="utf-8")
    return listing(tmp_path)


def _untouched(tmp_path, before):
    assert (tmp_path / "out.py").read_text(encoding="utf-8") == SENTINEL
    assert listing(tmp_path) == before


# ------------------------------------------------------------ an input file that is no file, or too large
def _make(tmp_path, kind):
    if kind == "directory":
        (tmp_path / "thing").mkdir()
    elif kind == "fifo":
        os.mkfifo(tmp_path / "thing")
    elif kind == "large":
        (tmp_path / "thing").write_text("name: big\ntitle: " + "a" * (1 << 20) + "\n", encoding="utf-8")


PROBLEM = {"directory": "is a directory, not a recipe or family file",
           "fifo": r"is not a regular file \(a device, FIFO or socket\)",
           "large": "recipe or family file larger than 1048576 bytes"}


@pytest.mark.parametrize("kind", sorted(PROBLEM))
@pytest.mark.parametrize("command", [[], ["explain"], ["check"], ["compare", "gd"], ["--loss", "abstract"]])
def test_an_input_that_is_no_recipe_file_is_refused_at_its_line_1(tmp_path, kind, command):
    """A directory or FIFO named without a ``.yaml`` ending (``blr-derive thing``) was looked up as a catalog name
    and reported as 'file not found, and not the name of a catalog recipe'; a directory, a FIFO, a device or a file
    over 1 MiB named as the input was refused without a line (``big.yaml: recipe or family file larger ...``).
    Each is one line at the file's line 1, whichever command reads it, and nothing is written."""
    _make(tmp_path, kind)
    before = _out(tmp_path)
    if command[:1] in (["explain"], ["check"]):
        args = [*command, "thing"]
    elif command[:1] == ["compare"]:
        args = ["compare", "thing", "gd"]
    else:
        args = ["thing", *command, "-o", "out.py"] if command else ["thing", "-o", "out.py"]
    r = run_cli_in_process(*args, cwd=tmp_path)
    _assert_one_line_error(r, "thing:1:", [PROBLEM[kind]])
    _untouched(tmp_path, before)


def test_a_device_named_as_the_recipe_is_refused_at_its_line_1(tmp_path):
    before = _out(tmp_path)
    r = run_cli_in_process("/dev/null", "-o", "out.py", cwd=tmp_path)
    _assert_one_line_error(r, "/dev/null:1:", ["is not a regular file"])
    _untouched(tmp_path, before)


@pytest.mark.parametrize("ref", ["missing", "missing.yaml", "dangling"])
def test_a_missing_input_still_says_file_not_found_without_a_line(tmp_path, ref):
    """What docs/safety.md keeps: a missing file (a dangling link included) is ``FILE: file not found``."""
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere.yaml")
    r = run_cli_in_process(ref, cwd=tmp_path)
    line = _assert_one_line_error(r, ref + ": file not found", [])
    assert f"{ref}:1:" not in line


# ------------------------------------------------------------ a name too long to be a file
@pytest.mark.parametrize("command", [[], ["explain"], ["check"], ["compare", "gd"], ["compare", "gd", "SWAP"]])
def test_a_name_too_long_for_the_file_system_is_not_found_not_an_internal_error(tmp_path, command):
    """``blr-derive aaa...a`` (300 letters: an identifier, so also a possible catalog name) raised OSError ENAMETOOLONG
    from pathlib's ``exists``/``is_file`` (exit 3, 'internal error'); it is a name that is no file and no catalog
    recipe."""
    long = "a" * 300
    if command[-1:] == ["SWAP"]:
        args = ["compare", "gd", long]
    elif command[:1] == ["compare"]:
        args = ["compare", long, "gd"]
    else:
        args = [*command, long]
    r = run_cli_in_process(*args, cwd=tmp_path)
    _assert_one_line_error(r, long + ": file not found", ["not the name of a catalog recipe"])


def test_the_python_api_refuses_a_name_too_long_as_bad_input():
    from blr_derive import api
    from blr_derive.core.errors import SpecError
    for call in (lambda: api.recipe("a" * 300), lambda: api.compare("a" * 300, "gd")):
        with pytest.raises(SpecError, match="File name too long|file not found"):
            call()


# ------------------------------------------------------------ the jax factory's name is located at the recipe's name
@pytest.mark.parametrize("name, words", [("class", "'class' is a Python keyword"),
                                         ("jnp", "'jnp' is a module the jax target imports"),
                                         ("print", "'print' is a Python builtin")])
def test_a_recipe_name_the_jax_factory_cannot_take_is_located_at_the_name(tmp_path, name, words):
    """``name: class`` is a valid recipe name for the numpy target (``RECIPE = "class"``), but the jax target names
    its optax factory after it; the refusal named the approximations' line, and ``--name class`` on the family
    command was blamed on ``--approx``."""
    write(tmp_path, "r.yaml", f"""
        name: {name}
        family: gaussian_diag
        loss: abstract
        approximations: [delta, squared_gradient_hessian]
        state_init: {{s: 1.0}}
        """)
    before = _out(tmp_path)
    r = run_cli_in_process("r.yaml", "--target", "jax", "-o", "out.py", cwd=tmp_path)
    _assert_one_line_error(r, r"r\.yaml:1:", [words, "names its optax factory after the recipe"])
    _untouched(tmp_path, before)
    r = run_cli_in_process("gaussian_diag", "--loss", "abstract", "--approx", "delta", "--approx",
                           "squared_gradient_hessian", "--set", "state_init={s: 1.0}", "--name", name,
                           "--target", "jax", "-o", "out.py", cwd=tmp_path)
    _assert_one_line_error(r, "<command line>: --name:", [words])
    _untouched(tmp_path, before)


# ------------------------------------------------------------ an output path many folders deep
def test_an_output_path_2000_new_folders_deep_is_written(tmp_path):
    """``-o d/d/.../x.py`` with 2000 missing folders ended in a RecursionError from ``Path.mkdir(parents=True)``,
    reported as 'r.yaml: the input is too large or too deeply nested to derive' (no line, and not the input's
    fault); the folders are created in a loop and the module is written."""
    write(tmp_path, "r.yaml", """
        name: deep_out
        family: gaussian_diag
        loss: abstract
        approximations: [delta, squared_gradient_hessian]
        state_init: {s: 1.0}
        """)
    out = "d/" * 2000 + "x.py"
    r = run_cli_in_process("r.yaml", "-o", out, cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert (tmp_path / out).read_text(encoding="utf-8").startswith("# Generated by blr-derive")
    (tmp_path / out).unlink()                 # bottom-up in a loop: pytest's rmtree of tmp_path recurses per level too
    for level in range(2000, 0, -1):
        os.rmdir(tmp_path / ("d/" * level))


# ------------------------------------------------------------ an unused YAML anchor
@pytest.mark.parametrize("text, line", [
    ("name: &x probe\n", 1),
    ("name: probe\nhyperparameters:\n  rho: &r {default: 0.1}\n", 3),
    ("name: probe\napproximations: &l [delta, squared_gradient_hessian]\n", 2),
])
def test_an_anchor_is_refused_even_when_no_alias_uses_it(tmp_path, text, line):
    """docs/safety.md: anchors and aliases are errors; an alias was refused (as a shared node) but an anchor no
    alias used was accepted."""
    write(tmp_path, "r.yaml", text + "family: gaussian_diag\nloss: abstract\n"
          + ("" if "approximations" in text else "approximations: [delta, squared_gradient_hessian]\n")
          + "state_init: {s: 1.0}\n")
    before = _out(tmp_path)
    r = run_cli_in_process("r.yaml", "-o", "out.py", cwd=tmp_path)
    _assert_one_line_error(r, rf"r\.yaml:{line}:", ["YAML anchors and aliases are not supported"])
    _untouched(tmp_path, before)


def test_an_anchor_in_a_command_line_value_is_refused(tmp_path):
    r = run_cli_in_process("gaussian_diag", "--loss", "abstract", "--approx", "&a delta", cwd=tmp_path)
    _assert_one_line_error(r, "<command line>: --approx:", ["YAML anchors and aliases are not supported"])


def test_an_ampersand_in_text_is_no_anchor(tmp_path):
    write(tmp_path, "r.yaml", """
        name: amp
        title: "R&D &x"
        description: a &b plain text
        family: gaussian_diag
        loss: abstract
        approximations: [delta, squared_gradient_hessian]
        state_init: {s: 1.0}
        """)
    r = run_cli_in_process("r.yaml", "-o", "out.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------ standard output that cannot be written
@pytest.mark.parametrize("command", [["list"], ["gd"]])
def test_standard_output_on_a_full_device_is_one_line_not_an_internal_error(tmp_path, command):
    """``blr-derive list > /dev/full`` (a full disk, a quota) was 'internal error: OSError: [Errno 28] No space
    left on device ... a bug in blr-derive' (exit 3): it is where the output goes, one line, exit 2."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]]
                                                                        if os.environ.get("PYTHONPATH") else [])))
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "blr_derive", *command], cwd=tmp_path, env=env, stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr == "blr-derive: error: <standard output>: cannot write (No space left on device)\n", r.stderr


# ------------------------------------------------------------ a small memory bound
@pytest.mark.parametrize("limit", ["150000000", "200000000"])
def test_a_small_memory_bound_ends_in_one_line_not_a_hang(tmp_path, limit):
    """Under BLR_DERIVE_MEMORY_LIMIT=150000000 or 200000000 the import of scipy.special spun forever (OpenBLAS
    retrying its per-thread buffers; a generation killed after 90 s): below 1 GiB the numeric libraries are loaded
    before the bound is set, and running out of it is one line naming the bound, exit 2."""
    env = dict(os.environ, BLR_DERIVE_MEMORY_LIMIT=limit,
               PYTHONPATH=os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                                                          else [])))
    write(tmp_path, "r.yaml", """
        name: small_bound
        family: gaussian_diag
        loss: abstract
        approximations: [delta, squared_gradient_hessian]
        state_init: {s: 1.0}
        """)
    r = subprocess.run([sys.executable, "-m", "blr_derive", "r.yaml", "-o", "out.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    # whether the command fits the bound depends on the BLAS threads' buffers (under pytest-xdist the workers set
    # OMP_NUM_THREADS=1, and 200 MB is then enough): it either writes the module or says so in one line
    if r.returncode == 0:
        assert r.stderr == "" and "def step" in (tmp_path / "out.py").read_text(encoding="utf-8")
        return
    assert r.returncode == 2 and not (tmp_path / "out.py").exists(), (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert f"(MemoryError; BLR_DERIVE_MEMORY_LIMIT={limit} bytes bounds this command)" in r.stderr, r.stderr


# ------------------------------------------------------------ suggest --write-family names its own option
@pytest.mark.parametrize("target, words", [(".", r"is a directory \(--write-family takes a file path\)"),
                                           ("/dev/full", "--write-family writes regular files only")])
def test_a_bad_write_family_path_names_that_option(tmp_path, target, words):
    """It said '-o writes regular files only' and '(-o takes a file path)' for --write-family, an option suggest
    has, of a command that has no -o."""
    r = run_cli_in_process("suggest", "--loss", "theta**2", "--write-family", target, cwd=tmp_path)
    line = _assert_one_line_error(r, "", [words])
    assert "-o " not in line


@pytest.mark.parametrize("exc", [SystemError("error return without exception set"),
                                 ImportError("libx.so: failed to map segment from shared object")])
def test_a_c_extension_failing_under_a_small_memory_bound_is_out_of_memory(tmp_path, monkeypatch, exc):
    """Under BLR_DERIVE_MEMORY_LIMIT=200000000 a C extension that could not allocate raised 'SystemError: error
    return without exception set' (exit 3, 'a bug in blr-derive'); under a bound the caller set below the default it
    is running out of memory, one line naming the bound; without such a bound a SystemError stays an internal error."""
    from blr_derive import cli

    def fail(argv):
        raise exc
    monkeypatch.setattr(cli, "cmd_list", fail)
    monkeypatch.setenv("BLR_DERIVE_MEMORY_LIMIT", "200000000")
    r = run_cli_in_process("list", cwd=tmp_path)
    _assert_one_line_error(r, "", [r"\(MemoryError; BLR_DERIVE_MEMORY_LIMIT=200000000 bytes bounds this command\)"])
    monkeypatch.delenv("BLR_DERIVE_MEMORY_LIMIT")
    r = run_cli_in_process("list", cwd=tmp_path)
    if isinstance(exc, SystemError):
        assert r.returncode == 3 and "internal error: SystemError" in r.stderr, r.stderr
    else:                                           # the loader's own words say memory whatever the bound
        assert r.returncode == 2 and "(MemoryError)" in r.stderr, r.stderr
