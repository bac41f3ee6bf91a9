"""Differences of exponentials: the lowering every target's printer applies to an expression after the exponential-sum
lowering (:meth:`codegen.printing.HostConditionalMixin.doprint`, :mod:`codegen.expsums`), so that no target subtracts
two nearly equal doubles where a library function computes the difference directly.

In double precision e^{x} − 1 keeps no digit of its value once |x| < 1e-16 (e^{x} rounds to 1) and loses
−log10|x| of its 16 digits above that (e^{1e-9} − 1 has 7 correct digits); expm1(x) = e^{x} − 1 is accurate to a
unit in the last place of its value for every x (C99's ``expm1``, numpy/jax/torch ``expm1``).  A zero-truncated
Poisson's A(λ) = log(e^{e^λ} − 1) − λ, its μ = ∇A (the Bayesian learning rule's expectation parameters, Eq. 6 of
Khan & Rue 2023) and its F = ∇²A are quotients and logarithms of such differences: A = −2.7e-8 < 0 at r = e^λ =
1e-9 where A ≈ r/2, and F's denominator 1 − 2e^{−r} + e^{−2r} = (1 − e^{−r})² is 0/0 at r = 1e-12.

:func:`stable_differences` decides from the expression alone (no family is named), bottom-up, at every sum Σ c_i·e^{a_i}
(c_i free of a top-level exponential; a term without one has a_i = 0):

* **a polynomial in one exponential that vanishes at 1**: the terms whose exponents are integer multiples k·u of one
  expression u, with the exponent-free terms (all of them, or one of them) as the k = 0 coefficient, make
  p(y) = Σ_k c_k y^k with y = e^{u}, all k ≥ 0 (u's sign chosen so; terms on both sides of 0 are left alone).  Where
  p(1) = Σ c_k = 0 exactly (sympy's own cancellation of the coefficients), p(y) = (y − 1)^m·q(y) with m the
  multiplicity of the root, and the terms become expm1(u)^m·q(e^{u}): e^{x} − 1 → expm1(x), 1 − e^{−x} → −expm1(−x),
  c·e^{2x} − c → c·expm1(2x) (two terms: one expm1 of the whole exponent) and 1 − 2e^{−x} + e^{−2x} → expm1(−x)²
  (a perfect square that sympy expanded, kept as the square of an accurate difference).  expm1(u) overflows where
  e^{u} does, and each factor is at most the size of the largest term, so nothing overflows that did not;
* **a difference of two exponentials** c·e^{a} − c·e^{b} whose exponents are not numbers apart becomes the larger
  exponential times a difference in [−1, 0]: −c·e^{a}·expm1(b − a) where sympy knows a ≥ b (the symbols'
  assumptions: the exponential-sum lowering's e^{u − M} − e^{−M} with u = e^λ > 0), else
  c·sign(a − b)·e^{max(a, b)}·(−expm1(−|a − b|)), never e^{b}·expm1(a − b), which overflows at a − b > 710 where the
  difference is finite (the lowering's normalized e^{−M} − e^{λ−M}, M = max(0, λ), of a μ = e^λ/(1 − e^λ), and
  the e^{λ−M} − e^{−λ−M} of a tanh, which cancels at λ → 0 as much);
* **a logarithm of −expm1(a)** (= log(1 − e^{a}), a < 0), or of its odd integer power, becomes :class:`log1mexp`, printed as Mächler's two-branch
  form (log(−expm1(a)) for a > −log 2, else log1p(−e^{a})), accurate to a few units in the last place for every
  a < 0, where log1p(−e^{a}) alone is not near a = 0 and log(−expm1(a)) is not for a ≪ 0.

log(1 + x) is already printed as log1p(x) by every printer (:meth:`HostConditionalMixin._print_log`).  The rewritten
expression is the same function of its symbols in exact arithmetic; a sum without such a pattern, and an expression
without exp, is left as it is (its printed text unchanged).  What stays: a cancellation that is no difference of
exponentials (e^{x} − 1 − x, x/(1 − e^{−x}) − 1, −λ + log(expm1(e^λ))) keeps its rounding, now of accurate terms
(the zero-truncated Poisson's A, μ and F at r = 1e-9: relative errors of a few 1e-7 instead of 56, 56 and 1).

Reference: M. Mächler, "Accurately computing log(1 − exp(−|a|))", Rmpfr vignette (2012), Eq. (7).
"""
from __future__ import annotations

import math

import sympy as sp
from sympy.codegen.cfunctions import expm1

from blr_derive.codegen.expsums import exp_factor

__all__ = ["expm1", "log1mexp", "stable_differences", "LOG1MEXP_SWITCH"]

#: Mächler's switch point −log 2: log(−expm1(a)) above it, log1p(−e^{a}) below
LOG1MEXP_SWITCH = -math.log(2.0)


class log1mexp(sp.Function):
    """log(1 − e^{a}), a < 0, accurate on both sides of a = −log 2 (module docstring); only
    :func:`stable_differences` writes it."""

    nargs = 1

    def fdiff(self, argindex=1):
        a = self.args[0]
        return -1 / expm1(-a)          # d/da log(1 − e^a) = −e^a/(1 − e^a) = −1/(e^{−a} − 1)

    def _eval_evalf(self, prec):
        a = self.args[0]
        if a.is_number:
            return sp.log(1 - sp.exp(a)).evalf(sp.core.evalf.prec_to_dps(prec))
        return None

    def _eval_rewrite_as_log(self, a, **kwargs):
        return sp.log(1 - sp.exp(a))

    def _eval_rewrite_as_exp(self, a, **kwargs):
        return sp.log(1 - sp.exp(a))


def stable_differences(expr):
    """``expr`` with every difference of exponentials that a library function computes directly written as one
    (module docstring): the same value, without the cancellation.  An expression without exp (or anything that is
    not a sympy expression) is returned as it is."""
    if not isinstance(expr, sp.Basic) or not expr.has(sp.exp):
        return expr
    if isinstance(expr, sp.MatrixBase):
        return expr.applyfunc(stable_differences)
    return _walk(expr)


def _walk(node):
    if not node.args or not node.has(sp.exp, expm1):
        return node
    args = tuple(_walk(a) for a in node.args)
    new = node if args == node.args else node.func(*args)
    if isinstance(new, sp.Add):
        return _add(new)
    if isinstance(new, sp.log):
        return _log(new)
    return new


def _unit(a):
    """(k, u) with a = k·u, k a rational number and u not one, u's sign normalized (so that a and −a share u)."""
    k, u = a.as_coeff_Mul()
    if u.could_extract_minus_sign():
        k, u = -k, -u
    return k, u


def _add(node):
    if not node.has(sp.exp):
        return node
    terms = [exp_factor(t, numeric_powers=True) for t in node.args]
    if any(a.has(sp.I) or a.is_real is False for _, a in terms):
        return node
    if _one_sign(terms):
        # no part of the sum adds up to 0 (a polynomial's root at 1) nor pairs c with −c: nothing to factor, and
        # _polynomial's search is quadratic in the terms (a Fisher information over the 190 pairs of a 20-point support:
        # 25 s)
        return node
    out = _polynomial(terms)
    if out is not None:
        return out
    out = _pair(terms)
    return node if out is None else out


def _one_sign(terms) -> bool:
    """Whether every coefficient is a number (free of symbols) sympy knows to be positive, or every one negative."""
    if not all(c.is_number for c, _ in terms):
        return False
    return all(c.is_positive is True for c, _ in terms) or all(c.is_negative is True for c, _ in terms)


def _polynomial(terms):
    """The sum with its first polynomial in one exponential that vanishes at 1 factored (module docstring), or None.
    The polynomial's k = 0 coefficient is the terms of one exponent b (0 first: the exponent-free terms, all of them
    or one), its other terms those whose exponents are b + k·u."""
    offsets: list = []
    for _, a in terms:
        if a not in offsets:
            offsets.append(a)
    offsets.sort(key=lambda a: a != 0)
    for b in offsets:
        base = [i for i, (_, a) in enumerate(terms) if a == b]
        groups: dict = {}
        for i, (c, a) in enumerate(terms):
            d = a - b
            if d == 0 or d.is_number:
                continue
            k, u = _unit(d)
            if k.is_Rational:
                groups.setdefault(u, []).append((i, k))
        for u, members in groups.items():
            out = _factored_group(terms, b, base, u, members)
            if out is not None:
                return out
    return None


def _factored_group(terms, b, base, u, members):
    """Σ c_k e^{b + k·u} over ``members`` and the k = 0 terms ``base`` (all, or one of them) factored at its root
    e^{u} = 1, the other terms as they are; None where the coefficients do not sum to 0 or the form could overflow
    where the sum does not (module docstring)."""
    total = sp.Add(*[terms[i][0] for i, _ in members])
    for const in ([base] if len(base) > 1 else []) + [[j] for j in base]:
        if sp.Add(total, *[terms[j][0] for j in const]) != 0:
            continue
        ks = [k for _, k in members]
        if min(ks) < 0 < max(ks):
            return None
        sign = -1 if max(ks) < 0 else 1
        step = sp.gcd_list([abs(k) for k in ks]) if len(ks) > 1 else abs(ks[0])
        unit = sign * step * u
        coeffs: dict = {0: sp.Add(*[terms[j][0] for j in const])}
        for i, k in members:
            n = int(k * sign / step)
            coeffs[n] = coeffs.get(n, sp.Integer(0)) + terms[i][0]
        factored = _factor_at_one(coeffs, unit, b)
        if factored is None:
            return None
        used = {i for i, _ in members} | set(const)
        rest = [c * sp.exp(a) for j, (c, a) in enumerate(terms) if j not in used]
        return sp.Add(factored, *rest)
    return None


def _factor_at_one(coeffs, unit, b):
    """e^{b}·Σ_n c_n e^{n·unit} (n ≥ 0, the c_n summing to 0) as e^{b}·expm1(unit)^m·q(e^{unit}); two terms
    c(e^{n·unit} − 1) with b = 0 as c·expm1(n·unit).  With b ≠ 0 the k = 0 term e^{b} must be the largest
    (unit ≤ 0 by sympy's assumptions), else q must be a number c (a power c(e^{u} − 1)^m, a perfect square that sympy
    expanded and the exponential-sum lowering normalized: e^{−M} − 2e^{λ−M} + e^{2λ−M}), written
    c·sign(u)^m·e^{b + m·max(u, 0)}·(−expm1(−|u|))^m.  None otherwise, or where the coefficients do not cancel to 0
    at each division (sympy cannot tell)."""
    nonzero = {n: c for n, c in coeffs.items() if c != 0}
    if len(nonzero) == 2 and 0 in nonzero:
        if b != 0:
            return None                     # a difference of two exponentials: _pair's
        n = max(nonzero)
        return nonzero[n] * expm1(n * unit)
    top = max(coeffs)
    poly = [coeffs.get(n, sp.Integer(0)) for n in range(top + 1)]        # poly[n]: the coefficient of y^n
    m = 0
    while len(poly) > 1 and sp.Add(*poly) == 0:                            # y = 1 is a root: divide by (y − 1)
        quotient = [sp.Integer(0)] * (len(poly) - 1)
        carry = sp.Integer(0)
        for n in range(len(poly) - 1, 0, -1):
            carry = carry + poly[n]
            quotient[n - 1] = carry
        poly, m = quotient, m + 1
    if m == 0:
        return None
    q = sp.Add(*[c * sp.exp(n * unit) if n else c for n, c in enumerate(poly) if c != 0])
    if b == 0 or unit.is_nonpositive:
        return sp.exp(b) * expm1(unit) ** m * q
    if len(poly) != 1:
        return None
    return q * sp.sign(unit) ** m * sp.exp(b + m * sp.Max(unit, 0)) * (-expm1(-sp.Abs(unit))) ** m


def _pair(terms):
    """The sum with its first difference c·e^{a} − c·e^{b} of known order written as −c·e^{a}·expm1(b − a), a ≥ b
    (module docstring), or None."""
    negated: dict = {}
    for j, (c, _) in enumerate(terms):
        negated.setdefault(-c, []).append(j)
    for i, (ci, ai) in enumerate(terms):
        for j in negated.get(ci, ()):
            if j <= i:
                continue
            cj, aj = terms[j]
            d = ai - aj
            if d.is_number:
                continue
            if ai == 0 or aj == 0:            # c(e^{a} − 1): expm1 overflows where e^{a} does
                c, a = (ci, ai) if aj == 0 else (cj, aj)
                new = c * expm1(a)
            elif d.is_nonnegative:
                new = -ci * sp.exp(ai) * expm1(-d)
            elif d.is_nonpositive:
                new = -cj * sp.exp(aj) * expm1(d)
            else:                             # the order unknown: the larger exponential, whichever it is
                new = ci * sp.sign(d) * sp.exp(_larger(ai, aj)) * -expm1(-sp.Abs(d))
            rest = [c * sp.exp(a) for k, (c, a) in enumerate(terms) if k not in (i, j)]
            return _add(sp.Add(new, *rest)) if len(rest) > 1 else sp.Add(new, *rest)
    return None


def _larger(a, b):
    """max(a, b) with the terms a and b share taken out of it: max(λ − M, −M) = max(λ, 0) − M, which is 0 where M is
    that max (the exponential-sum lowering's normalized sums)."""
    common = [t for t in sp.Add.make_args(a) if t in sp.Add.make_args(b)]
    shared = sp.Add(*common)
    return sp.Max(a - shared, b - shared) + shared


def _log(node):
    """log(−expm1(a)) as log1mexp(a) (real where a < 0, as the logarithm is), and log(1 − e^{a}) of odd powers alike; a
    logarithm of a product with a factor expm1(a)^k, a ≤ 0 by sympy's assumptions (the pair rule's −expm1(−|d|)), as
    the sum of the logarithms of its factors' magnitudes (module docstring); any other logarithm as it is."""
    c, rest = node.args[0].as_coeff_Mul()          # −expm1(a)^k = (−expm1(a))^k for odd k
    base, k = rest.as_base_exp()
    if c == -1 and isinstance(base, expm1) and k.is_Integer and k % 2 == 1:
        return k * log1mexp(base.args[0])
    return _log_of_product(node)


def _log_of_product(node):
    """log Π f_j^{k_j} = Σ k_j log|f_j| + log(Π sign(f_j)^{k_j}): where the product is positive (the logarithm real)
    the signs' product is 1 and its logarithm 0, and where it is not, log of the signs is NaN as the original was, so
    the value is the original's wherever that is a number.  |e^{b}| = e^{b} gives b, |expm1(a)| = 1 − e^{a} for a ≤ 0
    gives log1mexp(a), a positive factor stays under one logarithm with the magnitudes of the others.  Only for a
    product with such an expm1 factor (a logarithm of something else is left as it is)."""
    factors = sp.Mul.make_args(node.args[0])
    if not any(isinstance(b, expm1) and b.args[0].is_nonpositive and k.is_Integer
               for b, k in (f.as_base_exp() for f in factors)):
        return node
    outside, inside, signs = sp.Integer(0), [], []
    for f in factors:
        b, k = f.as_base_exp()
        if isinstance(b, sp.exp) and k.is_real:
            outside += k * b.args[0]
        elif not k.is_Integer:
            if f.is_positive is not True:
                return node
            inside.append(f)
        elif isinstance(b, expm1) and b.args[0].is_nonpositive:
            outside += k * log1mexp(b.args[0])
            signs.append(sp.Integer(-1) ** k)
        elif isinstance(b, sp.sign):
            signs.append(f)
        elif b.is_positive:
            inside.append(f)
        elif b.is_Number:
            inside.append(abs(b) ** k)
            signs.append(sp.sign(b) ** k)
        else:
            inside.append(sp.Abs(b) ** k)
            signs.append(sp.sign(b) ** k)
    rest, sign = sp.Mul(*inside), sp.Mul(*signs)
    return outside + (sp.log(rest) if rest != 1 else 0) + (sp.log(sign) if sign != 1 else 0)
