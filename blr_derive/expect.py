"""Exact expectations under Gaussian candidates (closed-form moments).

Used by the ``exact`` expectation rule (Sec. 1.3.3: for ridge regression
``E_q[ℓ]`` is linear in μ, Eq. 14) and for ``E_q[log h(θ)]`` in Eq. 6 / App. B.

* scalar θ ~ N(m, c): any polynomial in θ, with raw moments from the recursion
  ``E[θ^k] = m E[θ^{k-1}] + (k-1) c E[θ^{k-2}]``;
* vector θ ~ N(m, C): polynomials of degree ≤ 2 written with matrix products,
  using ``E[θ] = m`` and ``E[θθᵀ] = C + m mᵀ`` and the cyclic property of the trace.
"""
from __future__ import annotations

import sympy as sp

from .errors import DerivationError
from .matcalc import _split_coeff, is_mat, scalarize, simplify_mat


def gaussian_expectation(f, theta, mean, second_moment, symmetric=()):
    """E[f(θ)] for θ with the given mean and second moment E[θθᵀ] (or E[θ²])."""
    f = scalarize(f)
    if not is_mat(theta):
        return _scalar_expectation(f, theta, mean, second_moment)
    return _vector_expectation(f, theta, mean, second_moment, symmetric)


def _scalar_expectation(f, theta, m, m2):
    f = sp.expand(f)
    if not f.has(theta):
        return f
    try:
        poly = sp.Poly(f, theta)
    except sp.PolynomialError:
        raise DerivationError(f"exact Gaussian expectation needs a polynomial in {theta}, got {f}") from None
    if any(not c.is_polynomial(theta) or c.has(theta) for c in poly.coeffs()):
        raise DerivationError(f"exact Gaussian expectation needs a polynomial in {theta}, got {f}")
    c = m2 - m**2
    moments = [sp.Integer(1), m]
    for k in range(2, poly.degree() + 1):
        moments.append(sp.expand(m * moments[k - 1] + (k - 1) * c * moments[k - 2]))
    if poly.degree() >= 2:
        moments[2] = m2
        for k in range(3, poly.degree() + 1):
            moments[k] = sp.expand(m * moments[k - 1] + (k - 1) * c * moments[k - 2])
    total = sp.Integer(0)
    for (k,), coeff in poly.terms():
        total += coeff * moments[k]
    return total


def _occurrences(factors, theta):
    out = []
    for i, f in enumerate(factors):
        if f == theta:
            out.append((i, False))
        elif f == sp.Transpose(theta) or f == theta.T:
            out.append((i, True))
        elif f.has(theta):
            raise DerivationError(f"exact expectation: {theta} appears inside {f}; expand the loss into products")
    return out


def _vector_expectation(f, theta, mean, M2, symmetric):
    """E of a scalar expression: a sum of c * Trace(product) and theta-free terms."""
    f = sp.expand(f)
    total = sp.Integer(0)
    for term in sp.Add.make_args(f):
        if not term.has(theta):
            total += term
            continue
        traces = [a for a in sp.Mul.make_args(term) if isinstance(a, sp.Trace) and a.has(theta)]
        rest = sp.Mul(*[a for a in sp.Mul.make_args(term) if not (isinstance(a, sp.Trace) and a.has(theta))])
        if len(traces) != 1 or rest.has(theta):
            raise DerivationError(f"exact Gaussian expectation supports polynomials of degree <= 2 in {theta}; got term {term}")
        total += rest * _trace_expectation(traces[0].arg, theta, mean, M2, symmetric)
    return total


def _trace_expectation(M, theta, mean, M2, symmetric):
    M = sp.expand(M)
    parts = M.args if isinstance(M, sp.MatAdd) else (M,)
    total = sp.Integer(0)
    for p in parts:
        c, factors = _split_coeff(p.args) if isinstance(p, sp.MatMul) else (sp.Integer(1), [p])
        occ = _occurrences(factors, theta)
        if len(occ) == 0:
            total += c * sp.Trace(p if c == 1 else sp.MatMul(*factors))
        elif len(occ) == 1:
            i, tr = occ[0]
            new = list(factors)
            new[i] = mean.T if tr else mean
            total += c * sp.Trace(sp.MatMul(*new) if len(new) > 1 else new[0])
        elif len(occ) == 2:
            (i, ti), (j, tj) = occ
            L, Mid, R = factors[:i], factors[i + 1:j], factors[j + 1:]
            RL = R + L
            if ti and not tj:      # tr(L θᵀ Mid θ R) = tr(Mid θθᵀ) tr(R L)
                a = sp.Trace(sp.MatMul(*(Mid + [M2])) if Mid else M2)
                b = sp.Trace(sp.MatMul(*RL)) if RL else sp.Integer(1)
                total += c * a * b
            elif tj and not ti:    # tr(L θ Mid θᵀ R) = Mid tr(θθᵀ R L)
                a = sp.Trace(sp.MatMul(*Mid)) if Mid else sp.Integer(1)
                b = sp.Trace(sp.MatMul(*([M2] + RL))) if RL else sp.Trace(M2)
                total += c * a * b
            elif not ti:           # tr(L θ Mid θ R) = tr(Midᵀ R L θθᵀ)
                total += c * sp.Trace(sp.MatMul(*([sp.MatMul(*Mid).T] + RL + [M2])))
            else:                  # tr(L θᵀ Mid θᵀ R) = tr(R L Midᵀ θθᵀ)
                total += c * sp.Trace(sp.MatMul(*(RL + [sp.MatMul(*Mid).T, M2])))
        else:
            raise DerivationError(f"exact Gaussian expectation supports polynomials of degree <= 2 in {theta}; got {p}")
    return simplify_mat(total, symmetric)
