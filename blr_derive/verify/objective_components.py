"""``check``'s reference for the objective of a family of several scalar components (``variable: {components:
[theta, tau]}``, e.g. the normal-gamma): the BLR's objective L(q) = E_q[ℓ] − H(q) (Eq. 2 of Khan & Rue 2023) as
Σ_i w_i (ℓ(θ_i) + log q(θ_i)) over the nodes of the family check's own quadrature (``verify/quadrature.py``: the
double-exponential product rule centred at the mode, or the exact discrete sum), with log q = log h + ⟨λ, T⟩ − A(λ)
from the family's declaration and the weights normalized by that A (not by their own sum) — neither the derived
entropy nor the derived E_q[ℓ] enters.  The single-variable case is ``verify/recipe.py objective_checks``."""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.families.numeric import MODULES
from blr_derive.verify.quadrature import FamilyModel, Quadrature, parameter_point


#: the quadrature is a reference at a point only where it gives the family's normalization and μ = ∇A to this
TRUST = 1e-9


def applies(recipe) -> bool:
    """A family of two or more named scalar components (each continuous or discrete), with scalar data."""
    fam = recipe.family
    return (getattr(fam, "variable_kind", None) == "components" and len(fam.components) > 1
            and not any(d.shape for d in recipe.data))


class ComponentsReference:
    """∫ q (ℓ + log q) at one parameter point of a components family, by the family check's quadrature."""

    def __init__(self, recipe, data_syms, hyper_syms):
        fam = recipe.family
        self.fam = fam
        # every component on the grid: Gauss–Hermite given the others is exact for polynomials only, ℓ need not be one
        self.model = FamilyModel(fam, 2, gaussian_components=False)
        self.loss = sp.lambdify(list(fam.components) + list(data_syms) + list(hyper_syms), recipe.loss, MODULES)

    def __call__(self, vals, data_values, hyper_values) -> float:
        """The reference at the family's parameters ``vals`` (symbol -> value, as ``sample_params`` gives them)."""
        fam, nf = self.fam, self.model.nf
        fixed_vals, _, c, A, mu = parameter_point(fam, nf, vals, 2)
        with np.errstate(all="ignore"):  # overflow far in the grid's tails is weight 0 there (verify/quadrature.py)
            quad = Quadrature(self.model, c, fixed_vals, A)
        if quad.truncated or abs(quad.normalization - 1.0) > TRUST or \
                np.max(np.abs(quad.mean - mu) / np.maximum(1.0, np.abs(mu))) > TRUST:
            # the nodes miss mass (a shape below 1 puts it at the boundary, where the product grid does not
            # reach): not a reference at this point; check draws another
            raise ValueError("the quadrature does not reproduce the family's normalization and mean here")
        w = np.exp(quad.logw - A)
        ok = w > 0
        entries = [np.asarray(e, dtype=float)[ok] for e in quad.entries]
        ell = np.broadcast_to(np.asarray(self.loss(*entries, *data_values, *hyper_values), dtype=float),
                              entries[0].shape)
        return float(np.sum(w[ok] * (ell + quad.g[ok] - A)))
