"""``kronecker_ema`` — a convention: the full-Gaussian precision update of the BLR (Khan & Rue Eq. 12),
S_{t+1} = (1-ρ) A ⊗ G + ρ L ⊗ R, kept in the Kronecker set factor by factor, each factor an exponential moving
average (Zhang, Sun, Duvenaud & Grosse, ICML 2018, Eq. 17 / Alg. 1; Martens & Grosse, ICML 2015, Sec. 5):

    S_{t+1} = Σ_k c_k L_k ⊗ R_k  with Σ_k c_k = 1   →   A_{t+1} = Σ_k c_k L_k,   G_{t+1} = Σ_k c_k R_k.

A_{t+1} ⊗ G_{t+1} = S_{t+1} - ρ(1-ρ)(A - L) ⊗ (G - R): equal to S_{t+1} for ρ = 1, or when a factor already equals
its target (A = L or G = R); otherwise an approximation of the projection onto Kronecker products.
Optional argument ``rate``: the factors' own rate β in place of ρ (Zhang et al.'s β; the BLR has β = ρ).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import RULES, register
from blr_derive.rules.kronecker import KroneckerRule


class KroneckerEMA(KroneckerRule):
    name = "kronecker_ema"
    kind = "convention"
    equation = "Zhang et al. (2018) Eq. 17, Alg. 1; Khan & Rue Eq. 12"
    summary = ("the BLR's precision update (1-ρ)A⊗G + ρL⊗R kept Kronecker factor by factor: A ← (1-ρ)A + ρL, "
               "G ← (1-ρ)G + ρR (exact for ρ = 1); optional factor rate β")

    def kronecker_projection(self, kctx, args, S_new):
        rho = kctx.rho
        rate = args.positive("rate", rho)
        args.done()
        if kctx.precision_new is not None:
            raise kctx.fail("the precision update is already projected (name one projection rule)")
        total = sp.simplify(sp.Add(*[c for c, _, _ in S_new.terms]))
        if total != 1:
            raise kctx.fail(f"approximation '{self.name}': the precision update is not a convex combination of "
                            f"Kronecker products (its coefficients sum to {total})")
        terms = [(c.xreplace({rho: rate}) if rate != rho else c, L, R) for c, L, R in S_new.terms]
        A_new = sp.MatAdd(*[c * L for c, L, _ in terms])
        G_new = sp.MatAdd(*[c * R for c, _, R in terms])
        kctx.precision_new = (A_new, G_new)
        D = kctx.D
        D.add(self.name, RULES[self.name].equation, "Kronecker factors by moving averages (convention)",
              "The BLR's precision update is a convex combination of Kronecker products; each factor takes the same "
              "combination (Zhang et al. Eq. 17). The product of the new factors equals the update for ρ = 1 only."
              + (" The factors use their own rate β." if rate != rho else ""),
              [(sp.Symbol(r"\mathbf{S}_{t+1}"), S_new.sympy()),
               (sp.Symbol(r"\mathbf{A}_{t+1}"), A_new, r"\leftarrow"),
               (sp.Symbol(r"\mathbf{G}_{t+1}"), G_new, r"\leftarrow")])


register(KroneckerEMA())
