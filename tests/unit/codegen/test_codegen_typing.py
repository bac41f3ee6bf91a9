"""codegen/ is free of type errors (issue 38, item 3): mypy, pinned in the test extra, with the one configuration of
pyproject.toml's [tool.mypy] (whose `files` names codegen), on every module of the code generators, the runtime
sources copied into generated modules included.

codegen/ is installed as ``blr_derive.codegen`` (pyproject.toml's package-dir), a layout mypy cannot read from the
checkout: there ``import blr_derive.codegen.lower`` finds nothing and every name codegen imports from codegen
would be Any.  The check therefore runs on the installed layout, built of links in a temporary folder, where
each module's imports are resolved and checked."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def installed_layout(folder: Path) -> Path:
    """blr_derive/ with codegen/ as its subpackage codegen, as setuptools installs them (links to the checkout)."""
    pkg = folder / "blr_derive"
    pkg.mkdir(parents=True)
    for entry in (ROOT / "blr_derive").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    (pkg / "codegen").symlink_to(ROOT / "codegen")
    shutil.copy(ROOT / "pyproject.toml", folder / "pyproject.toml")
    return folder


@pytest.mark.slow
def test_mypy_finds_no_error_in_codegen(tmp_path):
    layout = installed_layout(tmp_path / "layout")
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "blr_derive/codegen"],
                         cwd=layout, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout


def test_the_configuration_checks_codegen():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "codegen" in config["tool"]["mypy"]["files"]
    # pinned: a new mypy release cannot turn CI red by itself
    assert any(d.startswith("mypy==") for d in config["project"]["optional-dependencies"]["test"])
