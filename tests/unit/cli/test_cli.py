"""The ``blr-derive`` command line, run as a real subprocess.

Commands are started as ``python -m blr_derive ...`` with the working directory
set to a fresh temporary folder, so the tests also prove that the tool finds its
bundled families, catalog and templates from any working directory.  Tests of what
a bad input prints and leaves run most of their cases through ``main`` in the test's
process (``run_cli_in_process``: same working directory, exit status, stdout and
stderr) and a sample of them in a real process.

Bad input must never produce a traceback or touch the output: the CLI prints one
line ``FILE:LINE: problem`` on stderr, exits with status 2, leaves a pre-existing
``-o`` file unchanged and creates no other file.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run_cli_in_process  # noqa: E402
CATALOG = ROOT / "catalog"
NEWTON = CATALOG / "newton.yaml"
FAMILY_NAMES = ("gaussian_full", "gaussian_diag", "gaussian_fixed_cov", "gaussian_fixed_precision")


def run_cli(*args, cwd, timeout=300):
    """Run ``python -m blr_derive ARGS`` in ``cwd`` (this checkout first on the path)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONIOENCODING"] = "utf-8"
    env.pop("PYTHONSTARTUP", None)
    return subprocess.run(
        [sys.executable, "-m", "blr_derive", *map(str, args)],
        cwd=str(cwd), env=env, capture_output=True, text=True, encoding="utf-8", timeout=timeout,
    )


def load_module(path):
    spec = importlib.util.spec_from_file_location(f"_cli_generated_{abs(hash(str(path)))}", str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def listing(folder):
    return sorted(p.name for p in Path(folder).iterdir())


def write(folder, name, text):
    path = Path(folder) / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------- help
def test_main_help(tmp_path):
    r = run_cli("--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("usage: blr-derive")
    assert "Bayesian learning rule" in out
    for word in ("recipe", "--target", "-o", "explain", "catalog", "families"):
        assert word in out
    assert r.stderr == ""


@pytest.mark.parametrize("command, words", [
    ("explain", ["usage: blr-derive explain", "derivation", "step by step", "equation", "--output"]),
    ("catalog", ["usage: blr-derive catalog", "Regenerate", "--check", "differs", "--target"]),
    ("families", ["usage: blr-derive families", "exponential families", "T(θ)", "h(θ)", "λ", "μ"]),
])
def test_command_help(tmp_path, command, words):
    r = run_cli_in_process(command, "--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for w in words:
        assert w in r.stdout, (w, r.stdout)
    assert r.stderr == ""


def test_version(tmp_path):
    r = run_cli("--version", cwd=tmp_path)
    assert r.returncode == 0
    assert re.fullmatch(r"blr-derive \d+\.\d+\.\d+\S*\n", r.stdout)


# ---------------------------------------------------------------------------- families
def _family_blocks(text):
    blocks, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^(\w+): (.+)$", line)
        if m:
            current = m.group(1)
            blocks[current] = {"description": m.group(2)}
        elif current and ":" in line and line.startswith("  "):
            key, _, value = line.strip().partition(":")
            blocks[current][key.strip()] = value.strip()
    return blocks


def test_families_lists_the_builtin_gaussians(tmp_path):
    r = run_cli("families", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    blocks = _family_blocks(r.stdout)
    for name in FAMILY_NAMES:
        assert name in blocks, r.stdout
        b = blocks[name]
        for key in ("T(θ)", "h(θ)", "λ", "μ"):
            assert b.get(key), (name, key, b)
        assert "theta" in b["T(θ)"]
    full = blocks["gaussian_full"]
    assert full["T(θ)"].count("theta") >= 3          # θ, θθᵀ
    assert "S*m" in full["λ"] and "S" in full["λ"].split(",")[1]
    assert "m*m.T" in full["μ"]
    diag = blocks["gaussian_diag"]
    assert diag["T(θ)"] == "theta, theta^2" and diag["h(θ)"] == "1"
    assert "exp" in blocks["gaussian_fixed_cov"]["h(θ)"]          # non-constant base measure
    assert "S" in blocks["gaussian_fixed_precision"]["h(θ)"]
    assert r.stderr == ""


# ---------------------------------------------------------------------------- generate
def test_generate_newton_module_imports_and_steps(tmp_path):
    r = run_cli(NEWTON, "--target", "numpy", "-o", "out.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""
    assert listing(tmp_path) == ["out.py"]          # atomic write leaves no temporary file
    text = (tmp_path / "out.py").read_text(encoding="utf-8")
    # the bundled recipe regenerates its committed artifact exactly
    assert text == (CATALOG / "generated" / "numpy" / "newton.py").read_text(encoding="utf-8")

    mod = load_module(tmp_path / "out.py")
    assert mod.RECIPE == "newton"
    assert set(mod.STATE) == {"m", "S"}
    assert set(mod.ORACLES) == {"grad", "hess"}
    assert "rho" in mod.HYPERPARAMETERS

    # on a quadratic, the classical Newton step (rho = 1) lands on the minimiser
    rng = np.random.default_rng(0)
    P = 4
    B = rng.normal(size=(P, P))
    A = B @ B.T + P * np.eye(P)
    b = rng.normal(size=P)
    oracles = {"grad": lambda x: A @ x - b, "hess": lambda x: A}
    state = mod.init(m=rng.normal(size=P), S=np.eye(P))
    before = {k: v.copy() for k, v in state.items()}
    new = mod.step(state, oracles=oracles, rho=1.0)
    np.testing.assert_allclose(new["m"], np.linalg.solve(A, b), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(new["S"], A)
    for k in before:                                  # the input state is not mutated
        np.testing.assert_array_equal(state[k], before[k])
    # rho < 1: S is smoothed, m takes a preconditioned gradient step (Eq. 12)
    new = mod.step(state, oracles=oracles, rho=0.5)
    S_new = 0.5 * A + 0.5 * state["S"]
    np.testing.assert_allclose(new["S"], S_new)
    np.testing.assert_allclose(new["m"], state["m"] - 0.5 * np.linalg.solve(S_new, A @ state["m"] - b))


def test_generate_is_byte_identical_across_runs_and_matches_stdout(tmp_path):
    r1 = run_cli(NEWTON, "--target", "numpy", "-o", "a.py", cwd=tmp_path)
    r2 = run_cli(NEWTON, "--target", "numpy", "-o", "a2.py", cwd=tmp_path)
    r3 = run_cli(NEWTON, "--target", "numpy", cwd=tmp_path)
    assert r1.returncode == r2.returncode == r3.returncode == 0
    a, a2 = (tmp_path / "a.py").read_bytes(), (tmp_path / "a2.py").read_bytes()
    assert a == a2
    assert r3.stdout.encode("utf-8") == a


def test_generate_overwrites_existing_output(tmp_path):
    (tmp_path / "out.py").write_text("old\n")
    r = run_cli_in_process(NEWTON, "-o", "out.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out.py").read_text().startswith("# Generated by blr-derive")
    assert listing(tmp_path) == ["out.py"]


def test_output_file_has_the_usual_permissions(tmp_path):
    """Atomic writes go through mkstemp (0600); the written file gets 0666 & ~umask like any other."""
    r = run_cli_in_process(NEWTON, "-o", "out.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "out.py").stat().st_mode & 0o777 == 0o666 & ~umask


def test_generate_recipe_with_relative_family_path(tmp_path):
    """A recipe may name a family YAML by a path relative to the recipe itself."""
    sub = tmp_path / "specs"
    sub.mkdir()
    shutil.copy(ROOT / "families" / "gaussian_diag.yaml", sub / "mydiag.yaml")
    write(sub, "rec.yaml", """
        name: mine
        family: mydiag.yaml
        loss: abstract
        approximations:
          - delta
        hyperparameters:
          rho: {default: 0.5}
    """)
    r = run_cli("specs/rec.yaml", "-o", "rec.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    mod = load_module(tmp_path / "rec.py")
    m, s = np.array([1.0, -2.0]), np.array([1.0, 3.0])
    new = mod.step(mod.init(m=m, s=s), oracles={"grad": lambda x: 2 * x, "hess": lambda x: 2 * np.ones_like(x)})
    s_new = 0.5 * 2 + 0.5 * s                      # Eq. 37
    np.testing.assert_allclose(new["s"], s_new)
    np.testing.assert_allclose(new["m"], m - 0.5 * 2 * m / s_new)


# ---------------------------------------------------------------------------- explain
def test_explain_newton(tmp_path):
    r = run_cli("explain", NEWTON, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for word in ("Eq. 6", "App. D", "Bonnet", "Price", "delta", "Eq. 12", "Eq. 9", "natural_to_ordinary"):
        assert word in out, word
    assert out.startswith("# Derivation of `newton`")
    # the final update, as the last section (bold symbols unwrapped: \mathbf{m} -> m)
    final = re.sub(r"\\mathbf\{(\w+)\}", r"\1", out.split("## Update", 1)[1])
    final = re.sub(r"\s+", " ", final)
    assert r"\hat{g} = \mathrm{grad}(m)" in final
    assert r"\hat{H} = \mathrm{hess}(m)" in final
    assert re.search(r"S_\{t\+1\} \\leftarrow .*\\rho \\hat\{H\}.*\(1 - \\rho\\right\) S", final), final
    assert re.search(r"m_\{t\+1\} \\leftarrow .*\\rho S_\{t\+1\}\^\{-1\} \\hat\{g\}", final), final
    assert "Traceback" not in r.stderr and r.stderr == ""


def test_explain_to_file(tmp_path):
    r = run_cli_in_process("explain", NEWTON, "-o", "newton.md", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert listing(tmp_path) == ["newton.md"]
    assert "Bonnet" in (tmp_path / "newton.md").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------- catalog
def test_catalog_check_passes_on_committed_catalog(tmp_path):
    r = run_cli("catalog", "--check", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    n = len([p for p in CATALOG.glob("generated/*/*.py") if p.name != "__init__.py"])
    assert f"{n + 1} artifacts, 0 differ" in r.stdout           # + generated/families.txt, the families' index
    assert listing(tmp_path) == []


def test_catalog_check_detects_and_regeneration_repairs_a_difference(tmp_path):
    cat = tmp_path / "cat"
    cat.mkdir()
    for name in ("gd", "newton"):
        shutil.copy(CATALOG / f"{name}.yaml", cat / f"{name}.yaml")
    r = run_cli("catalog", "--catalog", cat, cwd=tmp_path)             # first generation
    assert r.returncode == 0, r.stderr
    assert "4 artifacts, 4 updated" in r.stdout                       # both numpy; their jax functions too
    gen = cat / "generated" / "numpy"
    assert sorted(p.name for p in gen.iterdir()) == ["gd.py", "newton.py"]
    assert sorted(p.name for p in (cat / "generated" / "jax").iterdir()) == ["gd.py", "newton.py"]
    r = run_cli("catalog", "--check", "--catalog", cat, cwd=tmp_path)
    assert r.returncode == 0 and "4 artifacts, 0 differ" in r.stdout, r.stdout
    art = gen / "gd.py"
    good = art.read_bytes()
    art.write_bytes(good + b"\n")                     # a one-byte difference
    r = run_cli("catalog", "--check", "--catalog", cat, cwd=tmp_path)
    assert r.returncode == 1
    assert "differs" in r.stdout and "gd.py" in r.stdout and "newton.py" not in r.stdout, r.stdout
    assert art.read_bytes() == good + b"\n"          # --check never writes
    r = run_cli("catalog", "--catalog", cat, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "1 updated" in r.stdout and art.read_bytes() == good
    assert sorted(p.name for p in gen.iterdir()) == ["gd.py", "newton.py"]      # no temporary files


def test_catalog_in_worker_processes_writes_the_same_bytes_as_one_process(tmp_path):
    """--jobs 2 derives the recipes in forked workers (and the built-in families first, for the bundled catalog's
    index); the artifacts and their order are those of --jobs 1."""
    from blr_derive.api import catalog_artifacts
    cat = tmp_path / "cat"
    cat.mkdir()
    for name in ("gd", "newton", "adam", "ivon", "vmp"):
        shutil.copy(CATALOG / f"{name}.yaml", cat / f"{name}.yaml")
    one = catalog_artifacts(cat, jobs=1, cache=False)
    two = catalog_artifacts(cat, jobs=2, cache=False)
    assert [p for p, _ in one] == [p for p, _ in two] and len(one) >= 9
    assert all(a == b for (_, a), (_, b) in zip(one, two))
    committed = {p.relative_to(cat): t for p, t in one}
    for rel, text in committed.items():                 # and both are the committed catalog's artifacts
        assert (CATALOG / rel).read_text(encoding="utf-8") == text


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_catalog_time_limit_in_a_worker_is_one_located_line(jobs, tmp_path, monkeypatch):
    """A budget that runs out in a worker process comes back to the command as the same located error (exit 2, one
    line, no traceback) as in one process (with an empty disk cache, so that the recipes are derived)."""
    monkeypatch.setenv("BLR_DERIVE_CACHE_DIR", str(tmp_path / "cache"))
    r = run_cli("catalog", "--check", "--jobs", jobs, "--time-limit", "0.05", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.splitlines()
    assert re.match(r"blr-derive: error: \S+\.yaml:\d+: the derivation did not finish within the time limit "
                    r"of 0.05 s", line), line
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


def test_catalog_artifacts_come_from_the_disk_cache_until_an_input_changes(tmp_path, monkeypatch):
    """The second rendering of an unchanged catalog reads the artifacts the first stored (derivation is not called,
    the bytes are the same); editing a recipe file, or asking for cache=False, derives again."""
    from blr_derive import api
    monkeypatch.setenv("BLR_DERIVE_CACHE_DIR", str(tmp_path / "cache"))
    cat = tmp_path / "cat"
    cat.mkdir()
    for name in ("gd", "rmsprop"):
        shutil.copy(CATALOG / f"{name}.yaml", cat / f"{name}.yaml")
    first = api.catalog_artifacts(cat, jobs=1)
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise RuntimeError("derived although cached")
    monkeypatch.setattr(api, "derive_record", refuse)
    assert api.catalog_artifacts(cat, jobs=1) == first and not calls
    with pytest.raises(RuntimeError, match="derived although cached"):
        api.catalog_artifacts(cat, jobs=1, cache=False)
    (cat / "gd.yaml").write_text((cat / "gd.yaml").read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    calls.clear()
    with pytest.raises(RuntimeError, match="derived although cached"):
        api.catalog_artifacts(cat, jobs=1)
    assert calls and Path(calls[0][0]).name == "gd.yaml"


def test_catalog_jobs_out_of_range_is_a_command_line_error(tmp_path):
    r = run_cli_in_process("catalog", "--check", "--jobs", "0", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == "blr-derive: error: <command line>: --jobs must be an integer from 1 to 64"


# ---------------------------------------------------------------------------- bad input
NONNORM_FAMILY = """
    name: flat
    variable: theta
    support: real
    parameters:
      a: {domain: real}
    sufficient_statistics:
      - theta
    base_measure: 1
    natural_parameters:
      - a
"""

EXPONENTIAL_FAMILY = """
    name: expo
    variable: theta
    support: positive
    parameters:
      r: {domain: positive}
    sufficient_statistics:
      - theta
    base_measure: 1
    natural_parameters:
      - -r
"""


def _recipe_with_expression(expr):
    return f"""
        name: bad
        family: gaussian_full
        loss:
          expression: "{expr}"
        approximations:
          - exact
    """


# (id, {file name: content}, recipe file, expected "FILE:LINE:" (LINE may be a regex), words in the message)
BAD = [
    ("malformed_yaml", {"r.yaml": """
        name: bad
        family: gaussian_full
        loss: [abstract
        approximations:
          - delta
     """}, "r.yaml", "r.yaml:(3|4):", ["malformed YAML"]),
    ("unknown_top_level_key", {"r.yaml": """
        name: bad
        family: gaussian_full
        loss: abstract
        approximations:
          - delta
        colour: blue
     """}, "r.yaml", "r.yaml:6:", ["unknown key 'colour'"]),
    ("unknown_symbol", {"r.yaml": _recipe_with_expression("theta.T*theta + zeta")},
     "r.yaml", "r.yaml:4:", ["unknown symbol 'zeta'"]),
    ("python_code", {"r.yaml": _recipe_with_expression("__import__('os').system('touch MARKER')")},
     "r.yaml", "r.yaml:4:", ["not allowed|allowed"]),
    ("python_import_call", {"r.yaml": _recipe_with_expression("__import__('os')")},
     "r.yaml", "r.yaml:4:", ["unknown function '__import__'"]),
    ("python_dunder_attribute", {"r.yaml": _recipe_with_expression("theta.__class__")},
     "r.yaml", "r.yaml:4:", ["not allowed"]),
    ("python_lambda", {"r.yaml": _recipe_with_expression("(lambda: open('MARKER', 'w'))()")},
     "r.yaml", "r.yaml:4:", ["allowed"]),
    ("python_comprehension", {"r.yaml": _recipe_with_expression("[open('MARKER', 'w') for x in (1,)]")},
     "r.yaml", "r.yaml:4:", ["not allowed"]),
    ("yaml_python_tag", {"r.yaml": """
        name: !!python/name:os.system
        family: gaussian_full
        loss: abstract
        approximations:
          - delta
     """}, "r.yaml", "r.yaml:1:", ["tag"]),
    ("yaml_python_tag_on_sequence", {"r.yaml": """
        name: !!python/object/apply:os.system ["touch MARKER"]
        family: gaussian_full
        loss: abstract
        approximations:
          - delta
     """}, "r.yaml", "r.yaml:1:", ["tag", "not allowed"]),
    ("yaml_alias", {"r.yaml": """
        name: bad
        family: gaussian_full
        loss: abstract
        approximations: &a
          - delta
        hyperparameters:
          rho: {default: 1.0, description: *a}
     """}, "r.yaml", "r.yaml:(4|5|7):", ["alias"]),
    ("non_normalizable_inline_family", {"r.yaml": """
        name: bad
        family:
          name: flat
          variable: theta
          support: real
          parameters:
            a: {domain: real}
          sufficient_statistics:
            - theta
          base_measure: 1
          natural_parameters:
            - a
        loss: abstract
        approximations:
          - delta
     """}, "r.yaml", "r.yaml:8:", ["not normalizable"]),
    ("non_normalizable_family_file", {
        "flat.yaml": NONNORM_FAMILY,
        "r.yaml": """
            name: bad
            family: flat.yaml
            loss: abstract
            approximations:
              - delta
        """}, "r.yaml", "flat.yaml:6:", ["not normalizable"]),
    ("unknown_key_in_family_file", {
        "fam.yaml": NONNORM_FAMILY + "    colour: blue\n",
        "r.yaml": """
            name: bad
            family: fam.yaml
            loss: abstract
            approximations:
              - delta
        """}, "r.yaml", "fam.yaml:11:", ["unknown key 'colour'"]),
    ("non_minimal_inline_family", {"r.yaml": """
        name: bad
        family:
          name: twice
          variable: theta
          support: positive
          parameters:
            a: {domain: positive}
            b: {domain: positive}
          sufficient_statistics:
            - theta
            - 2*theta
          natural_parameters:
            - -a
            - -b
        loss: abstract
        approximations:
          - delta
     """}, "r.yaml", "r.yaml:9:", ["not minimal"]),
    ("exact_with_abstract_loss", {"r.yaml": """
        name: bad
        family: gaussian_full
        loss: abstract
        approximations:
          - exact
     """}, "r.yaml", "r.yaml:5:", ["'exact' takes an explicit loss, not an abstract loss",
                                   "over family 'gaussian_full' name one of: delta$"]),
    ("delta_without_gaussian_section", {"r.yaml": "name: bad\nfamily:\n" + textwrap.indent(
        textwrap.dedent(EXPONENTIAL_FAMILY).strip("\n"), "  ") + "\nloss: abstract\napproximations:\n  - delta\n"},
     "r.yaml", "r.yaml:15:", ["does not apply", "delta", "gaussian"]),
    ("delta_with_explicit_loss", {"r.yaml": """
        name: bad
        family: gamma
        loss:
          expression: theta**2
        approximations:
          - delta
     """}, "r.yaml", "r.yaml:6:", ["does not apply", "delta"]),
    ("unknown_approximation", {"r.yaml": """
        name: bad
        family: gaussian_full
        loss: abstract
        approximations:
          - delta
          - magic
     """}, "r.yaml", "r.yaml:6:", ["unknown approximation 'magic'"]),
    ("unknown_family", {"r.yaml": """
        name: bad
        family: no_such_family
        loss: abstract
        approximations:
          - delta
     """}, "r.yaml", "r.yaml:2:", ["unknown family"]),
    ("empty_file", {"r.yaml": ""}, "r.yaml", "r.yaml:1:", ["empty"]),
]


def _prepare(tmp_path, files):
    for name, text in files.items():
        write(tmp_path, name, text)
    (tmp_path / "existing.py").write_text("SENTINEL = 1\n", encoding="utf-8")
    return listing(tmp_path)


def _assert_one_line_error(r, location, words):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and r.stderr.endswith("\n"), r.stderr
    line = lines[0]
    assert re.search(r"(^|[\s/])" + location, line), (location, line)
    for w in words:
        assert re.search(w, line), (w, line)
    assert r.stdout == ""
    return line


@pytest.mark.parametrize("case, files, recipe, location, words", BAD, ids=[b[0] for b in BAD])
def test_bad_recipe_generate(tmp_path, case, files, recipe, location, words):
    """Every bad recipe through the command line's ``main`` in this process (:func:`run_cli_in_process`); a
    sample of them in a real process below."""
    before = _prepare(tmp_path, files)
    r = run_cli_in_process(recipe, "--target", "numpy", "-o", "existing.py", cwd=tmp_path)
    _assert_one_line_error(r, location, words)
    assert (tmp_path / "existing.py").read_text(encoding="utf-8") == "SENTINEL = 1\n"
    assert listing(tmp_path) == before                # no MARKER, no temporary or partial file


@pytest.mark.parametrize("case", ["malformed_yaml", "python_code", "yaml_python_tag", "non_normalizable_family_file",
                                  "delta_without_gaussian_section"])
def test_bad_recipe_generate_in_a_real_process(tmp_path, case):
    """Bad recipes of each stage (YAML, expression grammar, family derivation, rule) through ``python -m
    blr_derive``: the interpreter prints no traceback and nothing else, the exit status is 2, the files stay."""
    _, files, recipe, location, words = next(b for b in BAD if b[0] == case)
    before = _prepare(tmp_path, files)
    r = run_cli(recipe, "--target", "numpy", "-o", "existing.py", cwd=tmp_path)
    _assert_one_line_error(r, location, words)
    assert (tmp_path / "existing.py").read_text(encoding="utf-8") == "SENTINEL = 1\n"
    assert listing(tmp_path) == before


@pytest.mark.parametrize("case", ["unknown_symbol", "python_code", "non_normalizable_family_file",
                                  "delta_without_gaussian_section"])
def test_bad_recipe_explain(tmp_path, case):
    _, files, recipe, location, words = next(b for b in BAD if b[0] == case)
    before = _prepare(tmp_path, files)
    r = run_cli_in_process("explain", recipe, "-o", "existing.py", cwd=tmp_path)
    _assert_one_line_error(r, location, words)
    assert (tmp_path / "existing.py").read_text(encoding="utf-8") == "SENTINEL = 1\n"
    assert listing(tmp_path) == before


def test_missing_file(tmp_path):
    before = _prepare(tmp_path, {})
    r = run_cli_in_process("missing.yaml", "--target", "numpy", "-o", "existing.py", cwd=tmp_path)
    # a file that does not exist has no line to point at: "missing.yaml: file not found"
    _assert_one_line_error(r, r"missing\.yaml(:\d+)?:", ["not found"])
    assert (tmp_path / "existing.py").read_text(encoding="utf-8") == "SENTINEL = 1\n"
    assert listing(tmp_path) == before


def test_unknown_target(tmp_path):
    before = _prepare(tmp_path, {})
    r = run_cli_in_process(NEWTON, "--target", "cobol", "-o", "existing.py", cwd=tmp_path)
    _assert_one_line_error(r, "", ["unknown target 'cobol'", "numpy"])
    assert (tmp_path / "existing.py").read_text(encoding="utf-8") == "SENTINEL = 1\n"
    assert listing(tmp_path) == before


def test_catalog_check_on_empty_folder_is_an_error(tmp_path):
    (tmp_path / "cat").mkdir()
    r = run_cli_in_process("catalog", "--check", "--catalog", "cat", cwd=tmp_path)
    _assert_one_line_error(r, "cat", ["no recipes"])


def test_families_listing_derives_a_family_missing_from_or_stale_in_the_index(tmp_path, monkeypatch):
    """`blr-derive families` prints the generated index's block only while a family file is unchanged: a stale
    entry (edited file) and a file not in the index are derived, and the output equals a full derivation."""
    import io
    import shutil
    from contextlib import redirect_stdout

    from blr_derive import cli
    from blr_derive.api import family
    from blr_derive.core import resources
    from blr_derive.report.family_index import INDEX_NAME, listing, read_index

    fams, cat = tmp_path / "families", tmp_path / "catalog" / "generated"
    fams.mkdir()
    cat.mkdir(parents=True)
    for name in ("exponential", "poisson"):
        shutil.copy(resources.families_dir() / f"{name}.yaml", fams / f"{name}.yaml")
    index = (resources.catalog_dir() / "generated" / INDEX_NAME).read_text(encoding="utf-8")
    # a stale entry for exponential: its file now says rate r -> 'rate'
    text = (fams / "exponential.yaml").read_text().replace("description:", "description: (edited)", 1)
    (fams / "exponential.yaml").write_text(text)
    (fams / "rayleigh.yaml").write_text((resources.families_dir() / "rayleigh.yaml").read_text())
    (cat / INDEX_NAME).write_text(index)
    monkeypatch.setattr(cli, "families_dir", lambda: fams)
    monkeypatch.setattr(cli, "catalog_dir", lambda: tmp_path / "catalog")
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["families"]) == 0
    blocks = out.getvalue().split("\n\n")
    assert blocks[0].startswith("exponential: (edited)")           # derived, not the stale indexed text
    assert blocks[0] + "\n" == listing(family(str(fams / "exponential.yaml")))
    assert blocks[1] + "\n" == read_index(cat / INDEX_NAME)["poisson"][1]
    assert blocks[2] + "\n" == listing(family(str(fams / "rayleigh.yaml")))
    assert len([b for b in blocks if b.strip()]) == 3


def test_a_derivation_error_while_writing_the_program_is_a_located_line(tmp_path, monkeypatch):
    """A DerivationError raised while the derived program is written (ir/build.py; the binary-weight logistic
    regression's data sums gave "DataSum(f, v) needs ... a column vector") was printed without a location; now it is
    located like a code generator's refusal, at the recipe's approximations."""
    from blr_derive import api
    from blr_derive.core.errors import DerivationError

    def refuse(D, label, *rest):
        raise DerivationError("a step of the program that cannot be written")

    monkeypatch.setattr(api, "build_ir", refuse)
    (tmp_path / "r.yaml").write_text("name: r\nfamily: gaussian_diag\nloss: abstract\napproximations:\n  - delta\n"
                                     "state_init: {s: 1.0}\n", encoding="utf-8")
    res = run_cli_in_process("r.yaml", "--target", "numpy", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == "blr-derive: error: r.yaml:4: a step of the program that cannot be written"
