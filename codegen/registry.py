"""The targets, registered in one place: every package of ``codegen/backends`` is a target, with a ``CONFIG``
(``config.py``) and a ``TARGET`` renderer (``__init__.py``).  Adding a target is adding such a package."""
from __future__ import annotations

import importlib

from blr_derive.codegen import TARGET_NAMES, backends
from blr_derive.codegen.inert import audit
from blr_derive.codegen.model import structure_of
from blr_derive.core.errors import CodegenError, UnsupportedTarget

#: target name -> its renderer (an object with ``config`` and ``render(ir)``), in name order
RENDERERS = {name: importlib.import_module(f"{backends.__name__}.{name}").TARGET for name in TARGET_NAMES}
TARGETS = tuple(RENDERERS)


def get_target(name: str):
    if name not in RENDERERS:
        raise CodegenError(f"unknown target '{name}' (known: {', '.join(TARGETS)})")
    return RENDERERS[name]


def emit(ir, target: str) -> str:
    """Render the update IR as source code for ``target`` (deterministic output), audited (codegen.inert)."""
    t = get_target(target)
    kind = structure_of(ir)
    if kind not in t.config.structures:
        able = [n for n, r in RENDERERS.items() if kind in r.config.structures]
        what = "factorized (several-block) recipes" if kind == "product" else f"{kind} recipes"
        raise UnsupportedTarget(f"recipe '{ir.recipe}': {what} have a {' and '.join(able)} target only", "blocks")
    return audit(t.render(ir), target, t.config.modules)
