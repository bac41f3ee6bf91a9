"""The ``kronecker`` section of a recipe: a matrix-normal candidate for one weight matrix W (rows × cols),

    q(W) = MN(M, A⁻¹, G⁻¹),   i.e.   vec(W) ~ N(vec(M), (A ⊗ G)⁻¹),

with A (cols × cols) and G (rows × rows) symmetric positive definite (column-major vec).  The recipe's family is
the full-covariance Gaussian over vec(W) (``family: gaussian_full``); the section names the two dimensions::

    kronecker: {rows: d_out, cols: d_in}

The state is M, A and G (fixed names); the dimension names are validated identifiers distinct from the recipe's
hyperparameters and from the state and oracle names.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from blr_derive.core.errors import SpecError
from blr_derive.core.names import check_name_at
from blr_derive.core.yamlio import LDict, check_keys, where
from blr_derive.spec.recipe import Recipe

KRONECKER_KEYS = {"rows", "cols"}
#: names the generated module uses for the state and the oracle values of a Kronecker candidate
RESERVED = ("M", "A", "G", "g", "a", "b")


@dataclass(frozen=True)
class KroneckerSpec:
    rows: str           # the dimension name of W's rows (d_out) and of G
    cols: str           # the dimension name of W's columns (d_in) and of A
    line: int | None = None


@dataclass
class KroneckerRecipe(Recipe):
    """A recipe over a matrix-normal candidate: the single-family recipe (over vec(W)) and its ``kronecker`` section."""
    kronecker: KroneckerSpec = field(default=None)


def is_kronecker_spec(spec) -> bool:
    return isinstance(spec, dict) and "kronecker" in spec


def split_kronecker(spec):
    """(the recipe mapping without its ``kronecker`` section, the parsed section)."""
    section = spec["kronecker"]
    if not isinstance(section, dict):
        raise SpecError("kronecker must be a mapping {rows: NAME, cols: NAME}", *where(spec, "kronecker"))
    check_keys(section, KRONECKER_KEYS, ("rows", "cols"), "kronecker section")
    rows = check_name_at(section["rows"], "kronecker rows", section, "rows")
    cols = check_name_at(section["cols"], "kronecker cols", section, "cols")
    if rows == cols:
        raise SpecError("kronecker: rows and cols must be different dimension names", *where(section, "cols"))
    for key, name in (("rows", rows), ("cols", cols)):
        if name in RESERVED:
            raise SpecError(f"kronecker {key}: '{name}' is a state or oracle name of the Kronecker candidate "
                            f"({', '.join(RESERVED)}); choose another name", *where(section, key))
    inner = LDict({k: v for k, v in spec.items() if k != "kronecker"})
    inner.lines = {k: v for k, v in spec.lines.items() if k != "kronecker"} if isinstance(spec, LDict) else {}
    inner.file, inner.line = getattr(spec, "file", None), getattr(spec, "line", None)
    return inner, KroneckerSpec(rows, cols, where(spec, "kronecker")[1])


def kronecker_recipe(recipe: Recipe, ks: KroneckerSpec) -> KroneckerRecipe:
    """The parsed single-family recipe with its section; hyperparameter names may not shadow the candidate's."""
    taken = set(RESERVED) | {ks.rows, ks.cols}
    for h in recipe.hyper:
        names = [h.name] + [n for n, _ in h.elements]
        clash = next((n for n in names if n in taken), None)
        if clash is not None:
            line = recipe.spec.get("hyperparameters").line_of(h.name) if recipe.spec is not None else None
            raise SpecError(f"hyperparameter '{clash}' is a state, oracle or dimension name of the Kronecker "
                            "candidate; choose another name", recipe.file, line)
    return KroneckerRecipe(**{f.name: getattr(recipe, f.name) for f in fields(Recipe)}, kronecker=ks)
