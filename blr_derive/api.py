"""High-level API: recipe file -> derivation -> IR -> source code."""
from __future__ import annotations

from pathlib import Path

from .blr import derive
from .errors import DerivationError, SpecError
from .ir import build_ir
from .recipe import load_recipe


def source_label(path) -> str:
    """A machine-independent label for a recipe path (for reproducible headers)."""
    p = Path(path).resolve()
    if p.parent.name == "catalog":
        return f"catalog/{p.name}"
    return p.name


def derive_file(path):
    recipe = load_recipe(path)
    try:
        D = derive(recipe)
    except DerivationError as exc:
        line = recipe.spec.line if recipe.spec is not None else None
        raise SpecError(f"derivation failed: {exc}", str(path), line) from None
    return recipe, D


def generate(path, target: str, label: str | None = None) -> str:
    from codegen import emit
    recipe, D = derive_file(path)
    return emit(build_ir(D, label or source_label(path)), target)
