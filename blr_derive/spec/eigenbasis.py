"""The ``eigenbasis`` section of a recipe: a Gaussian over one weight matrix W (rows × cols) whose precision is
diagonal in a Kronecker basis, S = Q diag(vec(s)) Qᵀ with Q = Q_R ⊗ Q_L (``blr_derive/rules/eigenbasis.py``).  The
recipe's family is the mean-field Gaussian (``family: gaussian_diag``), whose BLR runs in the rotated coordinates;
the section names the two dimensions::

    eigenbasis: {rows: d_out, cols: d_in}

The state is M, s, Q_L, Q_R and what the rules add (fixed names); the dimension names are validated identifiers
distinct from the recipe's hyperparameters and from the state and oracle names.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from blr_derive.core.errors import SpecError
from blr_derive.core.names import check_name_at
from blr_derive.core.yamlio import LDict, check_keys, where
from blr_derive.spec.recipe import Recipe

SECTION_KEYS = {"rows", "cols"}
#: names the generated module uses for the state and the oracle values of the eigenbasis candidate
RESERVED = ("M", "G", "Q_L", "Q_R", "L", "R")


@dataclass(frozen=True)
class EigenbasisSpec:
    rows: str           # the dimension name of W's rows (d_out) and of Q_L
    cols: str           # the dimension name of W's columns (d_in) and of Q_R
    line: int | None = None


@dataclass
class EigenbasisRecipe(Recipe):
    """A recipe over the eigenbasis candidate: the diagonal Gaussian's recipe and its ``eigenbasis`` section."""
    eigenbasis: EigenbasisSpec = field(default=None)


def is_eigenbasis_spec(spec) -> bool:
    return isinstance(spec, dict) and "eigenbasis" in spec


def split_eigenbasis(spec):
    """(the recipe mapping without its ``eigenbasis`` section, the parsed section)."""
    section = spec["eigenbasis"]
    if not isinstance(section, dict):
        raise SpecError("eigenbasis must be a mapping {rows: NAME, cols: NAME}", *where(spec, "eigenbasis"))
    check_keys(section, SECTION_KEYS, ("rows", "cols"), "eigenbasis section")
    rows = check_name_at(section["rows"], "eigenbasis rows", section, "rows")
    cols = check_name_at(section["cols"], "eigenbasis cols", section, "cols")
    if rows == cols:
        raise SpecError("eigenbasis: rows and cols must be different dimension names", *where(section, "cols"))
    for key, name in (("rows", rows), ("cols", cols)):
        if name in RESERVED:
            raise SpecError(f"eigenbasis {key}: '{name}' is a state or oracle name of the eigenbasis candidate "
                            f"({', '.join(RESERVED)}); choose another name", *where(section, key))
    inner = LDict({k: v for k, v in spec.items() if k != "eigenbasis"})
    inner.lines = {k: v for k, v in spec.lines.items() if k != "eigenbasis"} if isinstance(spec, LDict) else {}
    inner.file, inner.line = getattr(spec, "file", None), getattr(spec, "line", None)
    return inner, EigenbasisSpec(rows, cols, where(spec, "eigenbasis")[1])


def eigenbasis_recipe(recipe: Recipe, ks: EigenbasisSpec) -> EigenbasisRecipe:
    """The parsed single-family recipe with its section; hyperparameter names may not shadow the candidate's."""
    taken = set(RESERVED) | {ks.rows, ks.cols}
    for h in recipe.hyper:
        names = [h.name] + [n for n, _ in h.elements]
        clash = next((n for n in names if n in taken), None)
        if clash is not None:
            line = recipe.spec.get("hyperparameters").line_of(h.name) if recipe.spec is not None else None
            raise SpecError(f"hyperparameter '{clash}' is a state, oracle or dimension name of the eigenbasis "
                            "candidate; choose another name", recipe.file, line)
    return EigenbasisRecipe(**{f.name: getattr(recipe, f.name) for f in fields(Recipe)}, eigenbasis=ks)
