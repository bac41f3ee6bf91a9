"""What a rule sees while a candidate is derived: the recipe, the record being written, the candidate's family,
the symmetric symbols, the learning rate, and the intermediate results of the BLR step (Eq. 6) that later stages
read.  Candidates create it (``blr_derive/candidates``); rules only read and extend it."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.types import Expr, Sym
from blr_derive.rules.args import Ctx
from blr_derive.rules.base import RULES, Derivation
from blr_derive.spec.recipe import Recipe


@dataclass
class BLRContext:
    recipe: Recipe
    D: Derivation[Recipe]
    candidate: str = "single"          # single | mixture | product: the candidate structure being derived
    sym: set[Sym] = field(default_factory=set)      # the symmetric matrix symbols
    rho: Expr = None                   # the learning rate ρ (the recipe's, set by __post_init__)
    keep: Expr = None                  # the coefficient of λ_t in Eq. 6 (1 − ρ; 1 without the entropy)
    mean_mu: Expr | None = None        # the Gaussian mean and covariance written in μ (Gaussian families)
    cov_mu: Expr | None = None
    g_logh: list[Expr] | None = None   # ∇_μ E_q[log h] per block
    logh_placeholders: set[Sym] | None = None   # a base-measure term that cancels (family_prior, a loss with −log h)
    lam_next: list[Sym] = field(default_factory=list)    # the symbols λ_{t+1}
    gblock: list[Sym] = field(default_factory=list)      # the symbols ∇_μ E_q[ℓ + log h] of the BLR's statement
    #: updates of state a step rule adds (natural_momentum's λ_{t−1}): (state name, new symbol, expr)
    prev_updates: list[tuple[str, Sym, Expr]] = field(default_factory=list)
    conjugate: tuple[Expr, list[Expr]] | None = None   # (c0, [c_i]) when the loss is linear in the statistics
    finite: list[dict[Sym, Expr]] | None = None        # the support points when the support is finite
    #: (E_q[ℓ](λ), shifts) from the tilted log-partition (blr_derive/families/tilting.py)
    tilted: tuple[Expr, list[Expr]] | None = None
    with_log_h: tuple[Expr, list[Expr]] | None = None   # (c0, [c_i]) when ℓ = −log h + c0 + Σ c_i T_i
    #: ctx.tilted is of ℓ + log h, a loss that contains −log h (the full negative log-joint) and a tilted rest
    tilted_with_log_h: bool = False

    def __post_init__(self):
        fam = self.recipe.family
        if not self.sym:
            self.sym = set(fam.symmetric) | {d.symbol for d in self.recipe.data if d.symmetric}
        if self.rho is None:
            self.rho = self.recipe.hyper_symbol(self.recipe.learning_rate)
        if self.keep is None:
            self.keep = sp.Integer(1) - self.rho

    @property
    def family(self):
        return self.recipe.family

    @property
    def names(self) -> set:
        return {a.name for a in self.recipe.approximations}

    def approx(self, name):
        """The recipe's approximation entry for ``name`` (its arguments and line), or None."""
        return next((a for a in self.recipe.approximations if a.name == name), None)

    def rules(self, *kinds):
        """(rule, approximation entry) for the named rules of these kinds, in recipe order."""
        return [(RULES[a.name], a) for a in self.recipe.approximations if RULES[a.name].kind in kinds]

    def args(self, name):
        """The argument reader of the named rule ``name``."""
        return Ctx(self.D, self.approx(name))

    def fail(self, msg, approx=None) -> SpecError:
        """A located error: at the approximation's line, else at the recipe's approximations (or loss)."""
        r = self.recipe
        line = approx.line if approx is not None else None
        if line is None and r.spec is not None:
            line = r.spec.line_of("approximations") if "approximations" in r.spec else r.spec.line_of("loss")
        return SpecError(msg, r.file, line)
