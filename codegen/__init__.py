"""Code generation targets.

Each target is a package ``codegen/<target>/`` with a sympy printer subclass
(``printer.py``), a config (``TARGET`` in ``__init__.py``: file suffix, template
name) and jinja2 templates that render a generic :class:`~blr_derive.ir.UpdateIR`.
Adding a target means adding such a package and registering it in :data:`TARGETS`.
"""
from __future__ import annotations

import importlib

TARGETS = ("numpy", "torch")


def get_target(name: str):
    if name not in TARGETS:
        from blr_derive.errors import CodegenError
        raise CodegenError(f"unknown target '{name}' (known: {', '.join(TARGETS)})")
    return importlib.import_module(f"codegen.{name}").TARGET


def emit(ir, target: str) -> str:
    """Render the update IR as source code for ``target`` (deterministic output)."""
    return get_target(target).render(ir)
