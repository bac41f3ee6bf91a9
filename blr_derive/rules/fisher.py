"""F(λ)⁻¹ times a vector (Eq. 4's natural gradient from ∇_λ), for the rules that form ∇_λ E_q[ℓ] first (sampling,
quadrature, the tilted log-partition of ``exact``).  A small F is inverted by sympy and simplified, as always; a
large one (the GIG's 3×3 Fisher information of Bessel-function ratios: elimination on its entries simplifies at
every pivot and the expanded update grows without bound) is named entry by entry — fisher11, fisher12, … as
intermediate definitions of the update — and inverted as a matrix of those names."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import DerivationError
from blr_derive.core.matexpr import is_mat
from blr_derive.families.symbolic import SIMPLIFY_MAX_OPS, simplify_bounded
from blr_derive.rules.program import new_def


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


def natural_gradient_at_state(D, fam, grad_lam, at=None):
    """F(λ)⁻¹ ∇_λ (Eq. 4) at λ = η(ordinary parameters): the Fisher information written in the ordinary parameters
    of the state (or at ``at``, λ → its value, e.g. :func:`state_lambdas`), each entry simplified within the bound,
    then :func:`fisher_solve`."""
    F = fisher_at_state(fam) if at is None else fam.fisher_matrix().xreplace(at).applyfunc(simplify_bounded)
    return fisher_solve(D, F, grad_lam)


def transcendental_map(fam):
    """Whether some λ_i = η_i(ordinary parameters) is not a rational function of them (the continuous Bernoulli's
    λ = log(p/(1 − p)); not a gamma's (α − 1, −β), nor a beta's in mean and concentration, (mk − 1, (1 − m)k − 1):
    substituted, a rational η cancels exactly against A's arguments, λ + 1 = mk, where the number λ + 1 would lose
    the digits of a small mk)."""
    params = [p.symbol for p in fam.params.values()]
    if not params or any(is_mat(e) for e in fam.eta) or any(is_mat(s) for s in params):
        return False
    return any(not e.is_rational_function(*params) for e in fam.eta)


def state_lambdas(fam):
    """λ at the state as the substitution {λ_i: value}: where the map η from the ordinary parameters is not
    rational, a placeholder for λ_i, so that an expression of λ (∇_λE_q[ℓ] and F(λ) from A(λ), Eq. 4) is simplified
    as a function of λ, and :func:`settle_lambdas` then writes it in the ordinary parameters or in λ computed once
    from them; else λ_i = η_i itself.

    Written out in the ordinary parameters first, with η substituted and the result simplified, the functions of
    λ were expanded into sums of large terms that cancel: the continuous Bernoulli's F(λ)⁻¹∇_λE_q[θ²] in p, with
    (1 − p)⁻³ spelled 1/(1 − 3p + 3p² − p³), gave a new p wrong by 1.4e-3 at p = 0.9999 and a false "rounded onto
    the boundary" at p = 1 − 1e-5 (the true new p is 0.99246)."""
    if not transcendental_map(fam):
        return dict(zip(fam.lam, fam.eta))
    return {l: sp.Dummy(f"lambda{i + 1}", real=True) for i, l in enumerate(fam.lam)}


def settle_lambdas(D, fam, at, exprs):
    """``exprs`` (in the placeholders of :func:`state_lambdas`) each written in the ordinary parameters where that
    makes it a rational function of them (a Poisson's 1 + 2e^λ is 1 + 2r, exactly: e^λ recomputed from λ = log r
    would carry λ's rounding, 4e-14 of a new r at r = 100), else in λ_i computed once from the state, an
    intermediate definition ``lambda<i>`` = η_i(ordinary) (the continuous Bernoulli's 1/λ and e^λ/(e^λ − 1)²
    terms)."""
    holders = {v: l for l, v in at.items() if isinstance(v, sp.Dummy)}
    if not holders:
        return list(exprs)
    params = [p.symbol for p in fam.params.values()]
    back = {v: fam.eta[fam.lam.index(l)] for v, l in holders.items()}
    named = {}
    out = []
    for e in exprs:
        plain = e.xreplace(back)
        if plain.is_rational_function(*params):
            out.append(plain)
            continue
        for v in sorted(e.free_symbols & set(holders), key=str):
            if v not in named:
                named[v] = state_lambda(D, fam, fam.lam.index(holders[v]))
        out.append(e.xreplace(named))
    return out


def state_lambda(D, fam, i):
    """λ_i at the state, computed once from the ordinary parameters: the intermediate definition ``lambda<i>`` =
    η_i(ordinary), the name every rule that keeps an expression in λ gives it."""
    return new_def(D, f"lambda{i + 1}", sp.sympify(fam.eta[i]))
