"""Targets are independent (issue 38, item 4): no module of ``codegen/backends/<X>`` imports
``codegen.backends.<Y>`` for another target Y.  What two targets share lives outside the backends, in the shared
modules of ``codegen/`` (``printing.py``, ``fused.py``, ``lower.py``, ``validation.py``, ``arrays/``, the shared
templates), so that a fix to one target is made in one place and never leaks into another by an import."""
from __future__ import annotations

import ast
from pathlib import Path

from blr_derive.codegen import TARGET_NAMES

BACKENDS = Path(__file__).resolve().parents[3] / "codegen" / "backends"
PREFIX = "blr_derive.codegen.backends."


def _imported(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, node.lineno
            for a in node.names:                # from blr_derive.codegen.backends import torch
                yield f"{node.module}.{a.name}", node.lineno


def crossings():
    """(file, line, other target) for every import of one target's package by another target's module."""
    out = []
    for target in TARGET_NAMES:
        for path in sorted((BACKENDS / target).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for name, line in _imported(tree):
                if name.startswith(PREFIX):
                    other = name[len(PREFIX):].split(".")[0]
                    found = (str(path.relative_to(BACKENDS)), line, other)
                    if other != target and other in TARGET_NAMES and found not in out:
                        out.append(found)
    return out


def test_every_target_is_a_backend_package():
    assert set(TARGET_NAMES) == {"jax", "numpy", "torch", "triton"} | set(TARGET_NAMES)
    for target in TARGET_NAMES:
        assert (BACKENDS / target / "__init__.py").is_file()


def test_no_target_imports_another():
    assert crossings() == []


def test_the_check_sees_a_crossing(tmp_path, monkeypatch):
    """The test can fail: a triton module that imports the torch printer is found, with its line."""
    fake = tmp_path / "backends"
    for target in TARGET_NAMES:
        (fake / target).mkdir(parents=True)
        (fake / target / "__init__.py").write_text("")
    (fake / "triton" / "printer.py").write_text(
        "import sympy\nfrom blr_derive.codegen.backends.torch.printer import HostPrinter\n"
        "from blr_derive.codegen.backends import numpy\nfrom blr_derive.codegen.printing import KernelPrinter\n")
    monkeypatch.setattr(__import__(__name__), "BACKENDS", fake)
    assert crossings() == [("triton/printer.py", 2, "torch"), ("triton/printer.py", 3, "numpy")]
