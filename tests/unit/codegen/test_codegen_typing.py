"""codegen/ is free of type errors (issue 38, item 3): mypy, pinned in the test extra, with the one configuration of
pyproject.toml's [tool.mypy] (whose `files` names codegen), on every module of the code generators, the runtime
sources copied into generated modules included."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_mypy_finds_no_error_in_codegen(tmp_path):
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "codegen"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout


def test_the_configuration_checks_codegen():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "codegen" in config["tool"]["mypy"]["files"]
    # pinned: a new mypy release cannot turn CI red by itself
    assert any(d.startswith("mypy==") for d in config["project"]["optional-dependencies"]["test"])
