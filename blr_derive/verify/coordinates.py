"""Coordinates in which the family checks integrate: Cholesky coordinates of a positive-definite matrix (log of the
diagonal, the entries below it), hyperspherical ones on the sphere, and a vector's coordinates scaled by a matrix
component's Cholesky factor."""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.core.matexpr import simplify_mat


def whitening(fam, vec, mat, Ls, vs):
    """The vector's coordinates next to a matrix M = L Lᵀ: θ = L⁻ᵀv when M acts as the vector's precision (the
    normal–Wishart's Λ), θ = L v when it acts as its covariance (a normal–inverse-Wishart's Σ) — whichever makes the
    most statistics that are quadratic in θ free of L (θᵀΛθ = vᵀv, θᵀΣ⁻¹θ = vᵀv), so that the conditional spread of v
    does not depend on M."""
    best, best_score = None, -1
    for theta in (sp.Inverse(Ls.T) * vs, Ls * vs):
        pre = {mat: Ls * Ls.T, vec: theta}
        score = 0
        for t in fam.T:
            e = simplify_mat(t.xreplace(pre))
            if e.has(vs) and not e.has(Ls):
                score += 1
        if score > best_score:
            best, best_score = pre, score
    return best


def inverse_coordinates_preferred(fam) -> bool:
    """Whether a positive-definite matrix variable X is integrated in the Cholesky coordinates of its inverse,
    X⁻¹ = L Lᵀ, rather than of X = L Lᵀ: where fewer of log h and the statistics involve an inverse in them (outside
    determinants, which are 2 Σ u_ii in either).  An inverse Wishart's exponent −tr(Ψ X⁻¹)/2 in X = L Lᵀ is
    quadratic in an off-diagonal entry of L with a spread proportional to the product of diagonal ones (a funnel
    that no grid scaled once follows: its variance is E[det X], infinite for ν ≤ P + 1), and −tr(Ψ L Lᵀ)/2 in
    X⁻¹ = L Lᵀ, a Wishart's exponent, whose off-diagonal spread is fixed; a Wishart's −tr(V⁻¹X)/2 the other way
    round.  Ties (a matrix GIG's X and X⁻¹) keep X = L Lᵀ."""
    Ls = sp.MatrixSymbol("L_coord", fam.dim, fam.dim)

    def inverses(e):
        if not isinstance(e, sp.Basic):
            return 0
        e = e.replace(lambda x: isinstance(x, sp.Determinant), lambda x: sp.Integer(1))
        return int(e.has(sp.Inverse) or any(isinstance(a, sp.MatPow) and a.exp.is_negative
                                            for a in sp.preorder_traversal(e)))

    def count(theta):
        exprs = [sp.sympify(fam.log_h)] + list(fam.T)
        return sum(inverses(simplify_mat(e.xreplace({fam.theta: theta}))) for e in exprs)
    return count(sp.Inverse(Ls * Ls.T)) < count(Ls * Ls.T)


def cholesky_factor(args, P):
    """The lower-triangular L of :func:`cholesky_coordinates`' X = L Lᵀ from its coordinates."""
    L = sp.zeros(P, P)
    k = 0
    for i in range(P):
        for j in range(i + 1):
            L[i, j] = sp.exp(args[k]) if i == j else args[k]
            k += 1
    return sp.ImmutableMatrix(L)


def cholesky_coordinates(P):
    """X = L Lᵀ with L lower triangular, L_ii = exp(u_ii): (the coordinates u, X); log det X = 2 Σ u_ii exactly,
    no cancellation."""
    args = []
    L = sp.zeros(P, P)
    for i in range(P):
        for j in range(i + 1):
            u = sp.Dummy(f"u_{i}{j}", real=True)
            args.append(u)
            L[i, j] = sp.exp(u) if i == j else u
    return args, sp.ImmutableMatrix(L * L.T)




def cholesky_log_jacobian(u, P):
    """log |dX/du| of X = L Lᵀ in the coordinates of :func:`cholesky_coordinates`: 2^P Π L_ii^(P-i) (0-based
    i) times Π L_ii from dL_ii = L_ii du_ii."""
    logJ = np.full(u.shape[1], P * np.log(2.0))
    k = 0
    for i in range(P):
        for j in range(i + 1):
            if i == j:
                logJ = logJ + (P - i + 1) * u[k]
            k += 1
    return logJ


def inverse_cholesky_log_jacobian(u, P):
    """log |dX/du| of X = (L Lᵀ)⁻¹, L from the coordinates u as in :func:`cholesky_coordinates`: that of
    W = L Lᵀ times |dX/dW| = det(W)^-(P+1), with log det W = 2 Σ u_ii."""
    logJ = cholesky_log_jacobian(u, P)
    k = 0
    for i in range(P):
        for j in range(i + 1):
            if i == j:
                logJ = logJ - 2 * (P + 1) * u[k]
            k += 1
    return logJ


def sphere_from_u(u):
    """Hyperspherical coordinates on S^(K-1) from u (K-1, N): polar angles φ_j = π σ(u_j) ∈ (0, π) for
    j < K-1 and the azimuth φ_{K-1} = π(2σ(u) − 1) ∈ (−π, π); x_1 = cos φ_1, x_j = Π_{i<j} sin φ_i cos φ_j, x_K =
    Π sin φ_i; surface element Π_j sin^(K-1-j) φ_j, times dφ/du."""
    d = u.shape[0]
    lv, lvb = -np.logaddexp(0, -u), -np.logaddexp(0, u)
    phi = np.pi * np.exp(lv)
    phi[d - 1] = np.pi * (np.exp(lv[d - 1]) - np.exp(lvb[d - 1]))
    logJ = np.sum(lv + lvb, axis=0) + (d - 1) * np.log(np.pi) + np.log(2 * np.pi)
    entries, s = [], np.ones(u.shape[1])
    for j in range(d):
        entries.append(s * np.cos(phi[j]))
        if j < d - 1:
            with np.errstate(divide="ignore"):
                logJ = logJ + (d - 1 - j) * np.log(np.sin(phi[j]))
        s = s * np.sin(phi[j])
    entries.append(s)
    return entries, [], logJ
