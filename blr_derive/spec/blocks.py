"""The parts of a product (factorized) recipe: its blocks and factors (parsed in ``blr_derive/spec/product.py``
and ``blr_derive/spec/components.py``)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Block", "Factor", "block_candidate"]


@dataclass
class Block:
    name: str
    family: object                 # Family or None (a delta parameter block)
    local: bool
    approximation: str             # exact | delta
    rho: object                    # sympy expression (1, a hyperparameter or a schedule in t)
    rho_text: str
    variables: list                # the block's variable symbols as they appear in the factors
    to_family: dict                # block variable symbol -> family variable symbol
    constraint: dict               # one-hot constraint: last component -> 1 - Σ others
    state: list                    # [(name, symbol, family parameter symbol or None)]
    description: object = ""       # Prose (recipe text)
    symmetric: bool = False
    line: int | None = None
    schedule: object = None        # (rule name, {arg: expr}) of a learning-rate schedule
    messages: bool = False         # keep one natural parameter per factor as state (Eq. 60)
    per_component: bool = False    # one copy per component of the recipe's component axis (an array axis)
    one_hot: bool = False          # a categorical over the components (one-hot z, E[z_k] = its probability)
    simplex: bool = False          # a point on the probability simplex over the components (Σ_k θ_k = 1)


@dataclass
class Factor:
    name: str
    expr: object
    plate: bool
    text: object                   # the expression as written (Prose: it may carry a comment)
    description: object = ""       # Prose (recipe text)
    components: bool = False       # the expression is one component's term, summed over the component axis
    line: int | None = None        # the line of its expression in the recipe file (for messages)


def block_candidate(b, delta="delta (point estimate)") -> str:
    """What a block's candidate is called in listings and generated headers."""
    if b.one_hot:
        return "categorical over the components"
    if b.family is not None:
        return b.family.name
    return delta + (" on the simplex" if b.simplex else "") + (" per component" if b.per_component else "")
