"""The parts of a product (factorized) recipe: its blocks and factors (parsed in ``blr_derive/spec/product.py``
and ``blr_derive/spec/components.py``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blr_derive.core.types import Expr, Sym, Text

__all__ = ["Block", "Factor", "block_candidate"]


@dataclass
class Block:
    name: str
    #: a Family (``blr_derive/families/model.py``), or None for a delta parameter block: Any because the families
    #: layer is above this one
    family: Any
    local: bool
    approximation: str             # exact | delta
    rho: Expr                      # sympy expression (1, a hyperparameter or a schedule in t)
    rho_text: str
    variables: list[Sym]           # the block's variable symbols as they appear in the factors
    to_family: dict[Sym, Sym]      # block variable symbol -> family variable symbol
    constraint: dict[Sym, Expr]    # one-hot constraint: last component -> 1 - Σ others
    state: list[tuple[str, Sym, Sym | None]]   # (name, symbol, family parameter symbol or None)
    description: Text = ""           # Prose (recipe text)
    symmetric: bool = False
    line: int | None = None
    schedule: tuple[str, dict[str, Expr]] | None = None   # (rule name, {arg: expr}) of a learning-rate schedule
    messages: bool = False         # keep one natural parameter per factor as state (Eq. 60)
    per_component: bool = False    # one copy per component of the recipe's component axis (an array axis)
    one_hot: bool = False          # a categorical over the components (one-hot z, E[z_k] = its probability)
    simplex: bool = False          # a point on the probability simplex over the components (Σ_k θ_k = 1)


@dataclass
class Factor:
    name: str
    expr: Expr
    plate: bool
    text: Text                     # the expression as written (Prose: it may carry a comment)
    description: Text = ""         # Prose (recipe text)
    components: bool = False       # the expression is one component's term, summed over the component axis
    line: int | None = None        # the line of its expression in the recipe file (for messages)


def block_candidate(b, delta="delta (point estimate)") -> str:
    """What a block's candidate is called in listings and generated headers."""
    if b.one_hot:
        return "categorical over the components"
    if b.family is not None:
        return b.family.name
    return delta + (" on the simplex" if b.simplex else "") + (" per component" if b.per_component else "")
