"""Typed records (issue 38, item 3): the modules pyproject.toml's ``[tool.mypy]`` lists pass mypy, and no record of
the engine's middle layers (``ir/``, ``rules/``, ``candidates/``) has a field typed only ``object``, ``list``,
``dict``, ``tuple``, ``set`` or ``Any`` (a reader must be told what a field holds; ``benchmarks/count_loose_types.py``
prints the counts)."""
import importlib.util
import subprocess
import sys
import tomllib

from conftest import ROOT


def _counter():
    spec = importlib.util.spec_from_file_location("count_loose_types", ROOT / "benchmarks" / "count_loose_types.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_mypy_passes_on_the_typed_modules():
    files = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]["files"]
    assert {"blr_derive/ir", "blr_derive/rules/base.py"} <= set(files)
    for f in files:
        assert (ROOT / f).exists(), f"[tool.mypy] files names {f}, which does not exist"
    run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("Success: no issues found"), run.stdout


def test_engine_records_say_what_they_hold():
    count = _counter()
    fields = count.fields(count.ENGINE)
    assert len(fields) > 250                      # the dataclasses, NamedTuples and TypedDicts were found
    loose = [f"{path}: {cls}.{name}: {ann}" for path, cls, name, ann in fields if count._loose(ann)]
    assert loose == []


def test_the_counter_tells_loose_fields_from_precise_ones():
    count = _counter()
    assert [count._loose(a) for a in ("object", "list", "dict | None", "Any", "frozenset", "tuple")] == [True] * 6
    assert [count._loose(a) for a in ("list[Var]", "dict[str, Expr] | None", "Sym", "Expr | None", "str",
                                      "tuple[str, ...]", "None")] == [False] * 7
