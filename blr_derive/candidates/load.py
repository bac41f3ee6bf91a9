"""Reading a recipe: the candidate structure that claims the recipe mapping parses it (``blr_derive/candidates``)."""
from __future__ import annotations

from pathlib import Path

from blr_derive.candidates import base
from blr_derive.core import budget
from blr_derive.core.errors import SpecError
from blr_derive.core.sizes import instantiate_recipe
from blr_derive.core.yamlio import load_yaml_file


def recipe_from_spec(spec, file=None, base_dir=None):
    """A recipe from its (located) YAML mapping; ``base_dir`` resolves relative family files."""
    if not isinstance(spec, dict):
        raise SpecError("a recipe must be a mapping", file, getattr(spec, "line", None) or 1)
    return base.for_spec(spec).parse(spec, file, base_dir)


def load_recipe(path, sizes: dict | None = None):
    """Load a recipe file; ``sizes`` (name -> int) instantiates a recipe that declares size parameters
    (``blr_derive/core/sizes.py``) at those sizes instead of its defaults."""
    budget.where(str(path), 1)                  # a budget error names the recipe as a whole while it loads
    spec = instantiate_recipe(load_yaml_file(path), str(path), sizes)
    return recipe_from_spec(spec, str(path), Path(path).resolve().parent)
