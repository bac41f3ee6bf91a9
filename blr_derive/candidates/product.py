"""Factorized (mean-field) candidates: coordinate-wise BLR steps over blocks of variables.

A *factorized recipe* declares several variables ("blocks"), each with its own candidate and learning
rate, and a loss that is a negative log-joint Σ_f ℓ_f of named *factors* (Sec. 5.2-5.4):

    q(x) = Π_b q_b(x_b)                                         (mean field, Eq. 55; Secs. 5.2-5.3)

Each step updates the blocks one after the other (coordinate-wise), every block's step using the other
blocks' *current* candidates:

* a block with an exponential family and the ``exact`` rule takes the BLR step (Eq. 6) on q_b with the
  other blocks fixed.  Each factor that is linear in T_b contributes a natural-gradient *message*
  λ̃_f = -∇_{μ_b} E_q[ℓ_f] = -E_{q_{-b}}[c_f] (its coefficients, Sec. 5.1), and

      λ_b ← (1 - ρ_b) λ_b + ρ_b Σ_f λ̃_f                       (Eq. 58; Eq. 60 in message form)

  The expectations over the other blocks are exact (each coefficient is linear in the other blocks'
  statistics: E = c0 + Σ c_k μ_k) or plug-in values for ``delta`` blocks.  A *local* block (one copy per
  row of the plate, ρ = 1) is the E-step of Eq. 56; a global block with ρ = 1 is a VMP step and with
  a Robbins-Monro ρ_t < 1 an SVI step (Sec. 5.3).
* a parameter block with the ``delta`` rule (q_b = N(θ_b, I), Eq. 55) and ρ = 1 jumps to the fixed point of
  its BLR step under the delta method: the stationarity condition ∇_θ E_{q_{-θ}}[ℓ](θ) = 0 (the M-step
  of Sec. 5.2), solved symbolically.

Factors marked ``plate: true`` are sums over the rows of the plate data; sums of per-row expressions
become *plate statistics* Σ_n d(y_n, μ_{z_n}) that the generated code accumulates (Eq. 54), optionally
scaled by N/B for a minibatch of B rows (Eq. 34, ``minibatch`` rule).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.candidates.base import Candidate, register
from blr_derive.core.sizes import instantiate_recipe
from blr_derive.core.yamlio import check_keys
from blr_derive.families.library import load_family
from blr_derive.rules.base import RULES, Step, TexForm
from blr_derive.rules.product import (FactorizedDerivation, PlateSums, em_bound, mean_field_bound, name_states,
                                   tex_name)
from blr_derive.spec.product import FACTORIZED_KEYS, FactorizedRecipe, is_product_spec, parse_product


def derive_product(R: FactorizedRecipe) -> FactorizedDerivation:
    D = FactorizedDerivation(R)
    D.step_symbol = R.step_symbol
    name_states(D, R)
    ctx = PlateSums(R, D)
    current = {}        # state symbol -> symbol holding its latest value (coordinate-wise)
    order = ", ".join(f"{b.name} ({'local' if b.local else 'global'}, ρ = {b.rho_text}, {b.approximation})"
                      for b in R.blocks)
    D.add("mean_field", RULES["mean_field"].equation, "Factorized candidate and coordinate-wise BLR steps",
          "The candidate factorizes over the blocks, q = Π_b q_b; each step updates the blocks one after the other "
          f"in the order {order}, each with the other blocks' current candidates (Sec. 5.2-5.3). "
          "The loss is the sum of the factors' negative logs: "
          + ", ".join(f.name + (" (summed over the plate)" if f.plate else "") for f in R.factors) + ".",
          [(sp.Symbol(r"\bar\ell_{%s}" % tex_name(f.name)), f.expr) for f in R.factors])
    constraints = [(v, e) for b in R.blocks for v, e in b.constraint.items()]
    if constraints:
        D.add("family", "Sec. 1.2 (minimal family)", "One-hot constraint of the categorical blocks",
              "The last component is one minus the others; the factors are written in the minimal statistics.",
              constraints)
    at = None
    for b in R.blocks:
        if not b.local and at is None:
            at = len(D.steps)
        RULES[b.approximation].product_block(R, D, ctx, b, current)
    em_bound(R, D, ctx)
    mean_field_bound(R, D, ctx)
    D.row_symbols = set(ctx.row)
    exprs = dict(D.local_assign + D.assignments)
    D.updates = [(n, s, exprs[s]) for n, s in D.local_outputs + D.outputs]
    if D.stats:
        eqs = [(s, TexForm(r"\sum_{%s} %s", (sp.Symbol(R.plate["index"]), e))) for s, e in D.stats]
        text = ("The global blocks need the per-row quantities only through these sums over the plate rows "
                "(the messages of the data factors add up, Eq. 54).")
        if ctx.scale is not None:
            count = D.count if D.count is not None else ctx.stat(sp.Integer(1))
            N = R.plate["minibatch"]
            D.scale = (ctx.scale, N / count)
            eqs = [(s, TexForm(r"\sum_{%s} %s", (sp.Symbol(R.plate["index"]), e))) for s, e in D.stats]
            eqs.append((ctx.scale, N / count))
            text += (" The plate rows are a minibatch of B rows from N: every sum is scaled by N/B (an unbiased "
                     "estimate of the full-data sum, Eq. 34).")
        step = Step("plate_sum" if ctx.scale is None else "minibatch",
                    RULES["plate_sum" if ctx.scale is None else "minibatch"].equation,
                    "Plate statistics", text, eqs)
        D.steps.insert(at if at is not None else len(D.steps), step)
    return D


class Product(Candidate):
    name = "product"
    noun = "a product (mean-field)"
    declared_as = "blocks: ..."
    priority = 10

    def claims(self, spec) -> bool:
        return is_product_spec(spec)

    def parse(self, spec, file, base_dir):
        check_keys(spec, FACTORIZED_KEYS, ("name", "blocks", "factors"), "factorized recipe")
        spec = instantiate_recipe(spec, file)      # a sized recipe (K copies of a block) at its default sizes
        return parse_product(spec, lambda ref: load_family(ref, base_dir), file)

    def owns(self, recipe) -> bool:
        return isinstance(recipe, FactorizedRecipe)

    def derive(self, recipe):
        return derive_product(recipe)


register(Product())
