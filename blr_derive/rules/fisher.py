"""F(λ)⁻¹ times a vector (Eq. 4's natural gradient from ∇_λ), for the rules that form ∇_λ E_q[ℓ] first (sampling,
quadrature, the tilted log-partition of ``exact``).  A small F is inverted by sympy and simplified, as always; a
large one (the GIG's 3×3 Fisher information of Bessel-function ratios: elimination on its entries simplifies at
every pivot and the expanded update grows without bound) is named entry by entry — fisher11, fisher12, … as
intermediate definitions of the update — and inverted as a matrix of those names."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import DerivationError
from blr_derive.families.symbolic import SIMPLIFY_MAX_OPS, simplify_bounded


def invertible_symbolically(F):
    """Whether sympy inverts F as it stands (its entries small enough); otherwise :func:`fisher_solve` names them."""
    return sum(sp.count_ops(e) for e in F) <= SIMPLIFY_MAX_OPS


def inverse(F):
    """F⁻¹ symbolically: sympy's default (Gauss–Jordan, cancelling common factors) where the entries are rational
    functions; where they hold functions (exp, log Φ, digamma, ...) the cancellation's polynomial gcds over those
    generators can run for minutes (a truncated normal's 2×2 Fisher information with log Φ in it: past the 120 s
    derivation limit), so the adjugate over the determinant instead, both by Berkowitz's division-free algorithm
    (0.02 s there; sympy's own ``method="ADJ"`` tests the determinant for zero symbolically: 0.7 s there, 11 s for
    a 3×3 with exp, log and digamma entries, against 0.005 s)."""
    if all(sp.sympify(e).is_rational_function() for e in F):
        return F.inv()
    return F.adjugate(method="berkowitz") / F.det(method="berkowitz")


def fisher_at_state(fam):
    """F(λ) at λ = η(ordinary parameters), each entry simplified within the bound."""
    return fam.fisher_matrix().xreplace(dict(zip(fam.lam, fam.eta))).applyfunc(simplify_bounded)


def fisher_solve(D, F, vec):
    """[F⁻¹ vec]_i as expressions; F symmetric, in the ordinary parameters."""
    if invertible_symbolically(F):
        return [simplify_bounded(g) for g in inverse(F) * vec]
    n = F.shape[0]
    if n > 4:
        raise DerivationError(f"the {n}×{n} Fisher information is too large to invert symbolically")
    G = sp.zeros(n, n)
    for i in range(n):
        for j in range(i, n):
            name = sp.Symbol(f"fisher{i + 1}{j + 1}", real=True)
            D.defs.append((name, F[i, j]))
            G[i, j] = G[j, i] = name
    return list(G.inv(method="LU") * vec)


def natural_gradient_at_state(D, fam, grad_lam):
    """F(λ)⁻¹ ∇_λ (Eq. 4) at λ = η(ordinary parameters): the Fisher information written in the ordinary parameters
    of the state, each entry simplified within the bound, then :func:`fisher_solve`."""
    return fisher_solve(D, fisher_at_state(fam), grad_lam)
