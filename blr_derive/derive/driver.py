"""The derivation driver: Eq. 6 over any candidate structure.

:func:`derive` picks the candidate that owns the recipe (``blr_derive/candidates``: a single family, a mixture,
a product of blocks) and lets it apply the recipe's rules at their stages; the result is the typed record
:class:`~blr_derive.rules.base.Derivation` that the IR, the reports and the checks read."""
from __future__ import annotations

from blr_derive.candidates import base
from blr_derive.candidates.load import load_recipe
from blr_derive.core import budget


def derive(recipe):
    """The derivation of a parsed recipe (time-bounded by the caller's budget, located at the recipe's loss)."""
    spec = recipe.spec
    budget.where(recipe.file, spec.line_of("loss") if hasattr(spec, "line_of") and "loss" in spec else 1)
    return base.for_recipe(recipe).derive(recipe)


def derive_file(path, sizes: dict | None = None):
    """(recipe, derivation) of a recipe file (``sizes``: a sized recipe's sizes)."""
    recipe = load_recipe(path, sizes)
    return recipe, derive(recipe)
