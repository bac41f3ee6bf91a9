"""Closed-form expectations by tilting the log-partition (App. B): for a term

    f(θ) = P(T(θ)) · exp(d + cᵀT(θ))

(P a polynomial in the sufficient statistics, the exponent linear in them) the exponential family gives

    E_q[exp(cᵀT)] = exp(A(λ + c) − A(λ)),      E_q[Tᵏ exp(cᵀT)] = ∂ᵏ/∂cᵏ exp(A(λ + c) − A(λ)),

valid while λ + c stays in the natural parameter space Ω (else the expectation is infinite).  So under a gamma
candidate (T = (log θ, θ)) E[√θ] = Γ(α + ½)/(Γ(α)√β), E[θ²], E[e^{−θ}] = (β/(β + 1))^α, E[(log θ)²] = ψ'(α) + (ψ(α)
− log β)² are all derived from A alone; under a beta, E[θ^s (1 − θ)^r]; under a Poisson, E[e^{cθ}].
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.matexpr import is_mat
from blr_derive.families.statistics import linear_in_statistics
from blr_derive.spec.vocabulary import count_total


def tilted_expectation(fam, expr):
    """E_q[expr] as an expression of λ, or None when a term of ``expr`` is not of the form P(T)·exp(d + cᵀT) (or the
    family has no named scalar components: a vector or matrix of symbolic dimension).

    Returns (E(λ), shifts): ``shifts`` lists the distinct c ≠ 0 used (λ + c must lie in Ω for the value to be
    finite; the caller states it)."""
    if any(is_mat(t) for t in fam.T) or not fam.components or not fam.depends_on_variable(expr):
        return None
    taus = [sp.Dummy(f"tau{i}") for i in range(len(fam.T))]
    cs = [sp.Dummy(f"c{i}") for i in range(len(fam.T))]
    shift = dict(zip(fam.lam, [l + c for l, c in zip(fam.lam, cs)]))
    tilt = sp.exp(fam.A.xreplace(shift) - fam.A)          # M(c) = E_q[exp(cᵀT)]
    terms, shifts = [], []
    derivs, evaluated = {}, {}                  # monomial -> ∂ᵏM/∂cᵏ; (c, monomial) -> its value at c
    elim = _eliminated(fam)
    for term in sp.Add.make_args(sp.expand(expr)):
        split = _split(fam, term, taus, elim)
        if split is None:
            return None
        const, poly, c_vec, d = split
        at, key = dict(zip(cs, c_vec)), tuple(c_vec)
        value = sp.Add(*[coef * _at(evaluated, key, monom, at, derivs, tilt, cs) for monom, coef in poly.terms()])
        terms.append(const * sp.exp(d) * value)
        if any(c != 0 for c in c_vec) and tuple(c_vec) not in shifts:
            shifts.append(tuple(c_vec))
    return sp.Add(*terms), shifts


def _at(evaluated, key, monom, at, derivs, tilt, cs):
    """∂^monom M / ∂c^monom at c = ``at``, computed once per shift and monomial."""
    if (key, monom) not in evaluated:
        evaluated[(key, monom)] = _derivative(derivs, tilt, cs, monom).xreplace(at)
    return evaluated[(key, monom)]


def _derivative(derivs, tilt, cs, monom):
    """∂^monom M / ∂c^monom, taken once per monomial (an expanded polynomial of degree 30 in three data names has
    5456 terms but 31 distinct powers of θ)."""
    if monom not in derivs:
        deriv = tilt
        for c, k in zip(cs, monom):
            if k:
                deriv = sp.diff(deriv, c, k)
        derivs[monom] = deriv
    return derivs[monom]


def _split(fam, term, taus, elim):
    """term = const · P(T) · exp(d + cᵀT) → (const, Poly P in taus, c, d), or None."""
    const, poly_part, c_vec, d = sp.Integer(1), sp.Integer(1), [sp.Integer(0)] * len(fam.T), sp.Integer(0)
    for f in sp.Mul.make_args(term):
        if not fam.depends_on_variable(f):
            const *= f
            continue
        p = _as_polynomial(fam, f, taus, elim)
        if p is not None:
            poly_part *= p
            continue
        lin = linear_in_statistics(fam, sp.expand_log(sp.log(f), force=True))
        if lin is None:
            return None
        d += lin[0]
        c_vec = [a + b for a, b in zip(c_vec, lin[1])]
    try:
        poly = sp.Poly(poly_part, *taus)
    except sp.PolynomialError:
        return None
    return const, poly, c_vec, d


def _eliminated(fam):
    """{last component: its value from the others} for a joint support with a linear constraint whose last
    component is not itself a statistic (a multinomial's θ_K = n − Σθ_k, a categorical's 1 − Σθ_k), so that a
    polynomial in all components is a polynomial in the statistics."""
    total = count_total(fam.joint_support)
    if total is None and fam.joint_support == "categorical":
        total = 1
    if total is None or not fam.components or any(t == fam.components[-1] for t in fam.T):
        return {}
    return {fam.components[-1]: total - sp.Add(*fam.components[:-1])}


def _as_polynomial(fam, f, taus, elim):
    """f as a polynomial in the statistics (τ_i standing for T_i), or None: the eliminated component (``elim``,
    see _eliminated) first, then the statistics that are not the variable itself (log θ, 1/θ, cos θ), then the
    variable."""
    order = sorted(zip(fam.T, taus), key=lambda p: p[0] in fam.components)
    g = f.xreplace(elim)
    for t, tau in order:
        g = g.subs(t, tau)
    if fam.depends_on_variable(g):
        return None
    try:
        sp.Poly(g, *taus)
    except sp.PolynomialError:
        return None
    return g
