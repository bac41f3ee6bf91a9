"""Exact expectations under Gaussian candidates (closed-form moments).

Used by the ``exact`` expectation rule (Sec. 1.3.3: for ridge regression
``E_q[ℓ]`` is linear in μ, Eq. 14) and for ``E_q[log h(θ)]`` in Eq. 6 / App. B.

* scalar θ ~ N(m, c): any polynomial in θ, with raw moments from the recursion
  ``E[θ^k] = m E[θ^{k-1}] + (k-1) c E[θ^{k-2}]``;
* vector θ ~ N(m, C): polynomials of degree ≤ 2 written with matrix products,
  using ``E[θ] = m`` and ``E[θθᵀ] = C + m mᵀ`` and the cyclic property of the trace; and
  products of two linear or quadratic forms (degree 3 and 4) by Isserlis' theorem.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import DerivationError
from blr_derive.core.matexpr import split_coeff, is_mat, scalarize, simplify_mat


def gaussian_expectation(f, theta, mean, second_moment, symmetric=()):
    """E[f(θ)] for θ with the given mean and second moment E[θθᵀ] (or E[θ²])."""
    f = scalarize(f)
    if not is_mat(theta):
        return _scalar_expectation(f, theta, mean, second_moment)
    return _vector_expectation(f, theta, mean, second_moment, symmetric)


def scalar_form_error(f, theta):
    """Why E[f(θ)] for a scalar Gaussian θ has no closed form here (the message the derivation would raise), or
    None where it has: every term of f a polynomial in θ, or a polynomial times exp(aθ + b) (the forms
    _scalar_expectation takes), tested on the terms' structure without computing a moment (the ``exact`` rule's
    applicability check, so that a refusal names only rules that derive)."""
    f = sp.expand(f)
    for term in sp.Add.make_args(f):
        if not term.has(theta):
            continue
        exps = [x for x in sp.Mul.make_args(term) if isinstance(x, sp.exp) and x.has(theta)]
        rest = sp.expand(term / sp.Mul(*exps)) if exps else term
        if exps and sp.diff(sp.Add(*[x.args[0] for x in exps]), theta).has(theta):
            return f"exact Gaussian expectation needs exp(a*{theta} + b) with a linear exponent, got {term}"
        try:
            poly = sp.Poly(rest, theta)
        except sp.PolynomialError:
            poly = None
        if poly is None or any(c.has(theta) for c in poly.coeffs()):
            return (f"exact Gaussian expectation needs a polynomial in {theta}"
                    + (f" times exp(a*{theta} + b)" if exps else "") + f", got {term}")
    return None


def _scalar_expectation(f, theta, m, m2):
    f = sp.expand(f)
    if not f.has(theta):
        return f
    poly_part, mgf_part = sp.Integer(0), sp.Integer(0)
    for term in sp.Add.make_args(f):
        exps = [x for x in sp.Mul.make_args(term) if isinstance(x, sp.exp) and x.has(theta)]
        if exps:
            mgf_part += _mgf_term(term, exps, theta, m, m2 - m**2)
        else:
            poly_part += term
    return _polynomial_expectation(poly_part, theta, m, m2) + mgf_part


def _mgf_term(term, exps, theta, m, var):
    """E[P(θ) e^{aθ + b}] for θ ~ N(m, v) and a polynomial P: Σ_k p_k ∂ᵏ/∂tᵏ M(t) at t = a, times e^b, with the
    moment-generating function M(t) = exp(tm + t²v/2) (e.g. E[e^θ] = e^{m + v/2}, the Poisson log-link)."""
    arg = sp.Add(*[x.args[0] for x in exps])
    rest = sp.expand(term / sp.Mul(*exps))
    a = sp.diff(arg, theta)
    if a.has(theta):
        raise DerivationError(f"exact Gaussian expectation needs exp(a*{theta} + b) with a linear exponent, got "
                              f"exp({arg})")
    b = sp.expand(arg - a * theta)
    try:
        poly = sp.Poly(rest, theta)
    except sp.PolynomialError:
        raise DerivationError(f"exact Gaussian expectation needs a polynomial times exp(a*{theta} + b), got "
                              f"{term}") from None
    if any(c.has(theta) for c in poly.coeffs()):
        raise DerivationError(f"exact Gaussian expectation needs a polynomial times exp(a*{theta} + b), got {term}")
    t = sp.Dummy("t")
    mgf = sp.exp(t * m + t**2 * var / 2)
    total = sp.Integer(0)
    for (k,), coeff in poly.terms():
        total += coeff * sp.diff(mgf, t, k).xreplace({t: a})
    return sp.expand(total * sp.exp(b), power_exp=False)


def _polynomial_expectation(f, theta, m, m2):
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
        if len(traces) != 1 or rest.has(theta) or _degree(traces[0].arg, theta) > 2:
            total += _product_expectation(term, theta, mean, M2, symmetric)
            continue
        total += rest * _trace_expectation(traces[0].arg, theta, mean, M2, symmetric)
    return total


def _degree(M, theta):
    parts = sp.expand(M).args if isinstance(sp.expand(M), sp.MatAdd) else (M,)
    return max(sum(1 for f in (p.args if isinstance(p, sp.MatMul) else (p,)) if f.has(theta)) for p in parts)


def _scalar_blocks(arg):
    """A 1×1 matrix product split into its 1×1 sub-products: θᵀBθbᵀθ → [θᵀBθ, bᵀθ]."""
    factors = list(arg.args) if isinstance(arg, sp.MatMul) else [arg]
    c, factors = split_coeff(factors)
    blocks, cur = [], []
    for f in factors:
        cur.append(f)
        if cur[0].shape[0] == 1 and f.shape[1] == 1:
            blocks.append(cur)
            cur = []
    if cur:
        return None
    return c, blocks


def _product_expectation(term, theta, mean, M2, symmetric):
    """E of c·f₁·f₂ with f_i = θᵀA_iθ or b_iᵀθ (degree 3 and 4, Isserlis' theorem). With θ = m + ε, ε ~ N(0, C),
    f_i = c_i + l_iᵀε + εᵀA_iε (A_i symmetrized), and
    E[f₁f₂] = c₁c₂ + c₁tr(A₂C) + c₂tr(A₁C) + l₁ᵀCl₂ + tr(A₁C)tr(A₂C) + 2tr(A₁CA₂C)."""
    fail = DerivationError(f"exact Gaussian expectation supports products of at most two linear or quadratic forms in "
                           f"{theta}; got term {term}")
    if term.has(sp.Trace) and any(isinstance(t.arg, sp.MatAdd) for t in term.atoms(sp.Trace)):
        split = term.replace(lambda x: isinstance(x, sp.Trace) and isinstance(x.arg, sp.MatAdd),
                             lambda x: sp.Add(*[sp.Trace(a) for a in x.arg.args]))
        return _vector_expectation(split, theta, mean, M2, symmetric)
    coeff, forms = sp.Integer(1), []
    for a in sp.Mul.make_args(term):
        base, n = (a.base, a.exp) if isinstance(a, sp.Pow) else (a, 1)
        if not base.has(theta):
            coeff *= a
            continue
        if not isinstance(base, sp.Trace) or not (isinstance(n, int) or n.is_Integer) or n < 1:
            raise fail
        split = _scalar_blocks(base.arg)
        if split is None:
            raise fail
        c, blocks = split
        coeff *= c**n
        for _ in range(int(n)):
            for b in blocks:
                if any(f.has(theta) for f in b):
                    forms.append(_form(b, theta, fail))
                else:
                    coeff *= sp.Trace(sp.MatMul(*b)) if len(b) > 1 else sp.Trace(b[0])
    if len(forms) > 2:
        raise fail
    C = simplify_mat(M2 - mean * mean.T, symmetric)
    parts = []
    for kind, X in forms:
        if kind == "quadratic":
            As = simplify_mat(sp.MatMul(sp.Rational(1, 2), sp.MatAdd(X, X.T)), symmetric)
            parts.append((sp.Trace(mean.T * X * mean), simplify_mat(2 * As * mean, symmetric), As))
        else:
            parts.append((sp.Trace(X.T * mean), X, None))
    if len(parts) == 1:
        (c1, _, A1), = parts
        return coeff * (c1 + (sp.Trace(A1 * C) if A1 is not None else 0))
    (c1, l1, A1), (c2, l2, A2) = parts
    e = c1 * c2 + sp.Trace(l1.T * C * l2)
    if A2 is not None:
        e += c1 * sp.Trace(A2 * C)
    if A1 is not None:
        e += c2 * sp.Trace(A1 * C)
    if A1 is not None and A2 is not None:
        e += sp.Trace(A1 * C) * sp.Trace(A2 * C) + 2 * sp.Trace(A1 * C * A2 * C)
    return coeff * e


def _form(block, theta, fail):
    """('quadratic', A) for θᵀAθ, ('linear', b) for bᵀθ or θᵀb."""
    occ = [i for i, f in enumerate(block) if f.has(theta)]
    if any(block[i] not in (theta, theta.T) for i in occ):
        raise fail
    if len(occ) == 2 and occ == [0, len(block) - 1] and block[0] == theta.T and block[-1] == theta:
        mid = block[1:-1]
        return "quadratic", (sp.MatMul(*mid) if len(mid) > 1 else mid[0]) if mid else sp.Identity(theta.shape[0])
    if len(occ) == 1 and occ[0] == len(block) - 1 and block[-1] == theta:
        left = block[:-1]
        return "linear", (sp.MatMul(*left) if len(left) > 1 else left[0]).T
    if len(occ) == 1 and occ[0] == 0 and block[0] == theta.T:
        right = block[1:]
        return "linear", sp.MatMul(*right) if len(right) > 1 else right[0]
    raise fail


def _trace_expectation(M, theta, mean, M2, symmetric):
    M = sp.expand(M)
    parts = M.args if isinstance(M, sp.MatAdd) else (M,)
    total = sp.Integer(0)
    for p in parts:
        c, factors = split_coeff(p.args) if isinstance(p, sp.MatMul) else (sp.Integer(1), [p])
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
