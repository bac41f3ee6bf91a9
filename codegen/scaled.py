"""Exponentially scaled Bessel functions: the lowering every target's printer applies to an expression before it
prints it (:meth:`codegen.printing.HostConditionalMixin.doprint`), so that no target computes a quantity through
an intermediate that overflows or underflows when the quantity itself is an ordinary number.

The modified Bessel functions grow and decay like exponentials (DLMF 10.40.1, 10.40.2):

* I_ν(x) = Ĩ_ν(x)·e^{|x|} with Ĩ_ν(x) ~ 1/√(2π|x|) (:class:`besselie`; scipy's ``ive``, jax's and torch's
  ``i0e``/``i1e``), and
* ∂ⁿK_ν(x)/∂νⁿ = K̃ⁿ_ν(x)·e^{−x}, x > 0, n ≥ 0 (:class:`dbesselke`; scipy's ``kve`` for n = 0, the module's
  ``_dbesselk(n, ν, x, True)`` integral otherwise: ``core.specialfns.dbesselk_numpy``), and the exponential
  integral E₁(x) = Ẽ₁(x)·e^{−x} (:class:`exp1e`, the module's ``_exp1e``; DLMF 6.12.1), which meets the
  inverse Gaussian's e^{2s/m} in e^{2s/m}E₁(2s/m).

In double precision I₀(κ) is +inf from κ ≈ 713 and K_ν(x) is 0 from x ≈ 705, so a von Mises mean I₁(κ)/I₀(κ) (its
μ = ∇A(λ), the Bayesian learning rule's expectation parameters, Eq. 6 of Khan & Rue 2023) is inf/inf = NaN and its
log-partition log(2π I₀(κ)) is inf, although both are ordinary numbers (μ → 1, A ≈ κ − log √(2πκ) + log 2π).

:func:`scaled_bessel` writes every Bessel function of an expression as its scaled function times e^{s} (s = |x| or
−x) and then lets the e^{s} factors meet where the algebra lets them, deciding from the expression alone:

* a product or quotient combines them (sympy's own ``Mul``): the mean's e^{κ}/e^{κ} cancels;
* a sum whose every term carries a power of the same e^{s} has the largest power taken out (the Fisher
  information's (I₀² − I₁²)/I₀² becomes e^{2κ}(Ĩ₀² − Ĩ₁²)/(e^{2κ}Ĩ₀²), which cancels; what is left in the sum is
  bounded by its own terms, since e^{s} ≥ 1 in every case the functions are real);
* a logarithm of a product takes the factor out as its exponent: log(2π Ĩ₀(κ) e^{κ}) = κ + log(2π Ĩ₀(κ)).

A factor the algebra cannot remove (a Bessel function inside another function, a sum with a term without it) stays
in the expression as ``exp(s)``: the value is the same as before the rewrite, with the same overflow.  A target
prints the scaled functions from its own library or refuses them (UnsupportedTarget) as it refused the unscaled ones:
numpy ``scipy.special.i0e``/``i1e`` for orders 0 and 1 and the module's ``_ive`` for another (scipy's ``ive`` is NaN
above x = 2^30; ``_ive`` takes the asymptotic series of DLMF 10.40.1 above 1e8), ``kve``; jax ``jax.scipy.special.i0e``/``i1e`` (orders 0 and 1 only; jax has no ``ive``
and no ``kve``); torch ``torch.special.i0e``/``i1e`` and ``scaled_modified_bessel_k0``/``k1`` (orders 0 and 1); Triton
prints no Bessel function.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.specialfns import dbesselk, exp1, exp1e


class besselie(sp.Function):
    """Ĩ_ν(x) = I_ν(x)·e^{−|x|}, the exponentially scaled modified Bessel function of the first kind (scipy's
    ``ive``); only :func:`scaled_bessel` writes it."""

    nargs = 2

    def _eval_evalf(self, prec):
        nu, x = self.args
        if nu.is_number and x.is_number:
            return (sp.besseli(nu, x) * sp.exp(-sp.Abs(x))).evalf(sp.core.evalf.prec_to_dps(prec))
        return None


class dbesselke(sp.Function):
    """K̃ⁿ_ν(x) = e^{x}·∂ⁿK_ν(x)/∂νⁿ (x > 0), the exponentially scaled order derivative of the modified Bessel
    function of the second kind (n = 0: scipy's ``kve``); only :func:`scaled_bessel` writes it."""

    nargs = 3

    def _eval_evalf(self, prec):
        n, nu, x = self.args
        if n.is_number and nu.is_number and x.is_number:
            return (dbesselk(n, nu, x) * sp.exp(x)).evalf(sp.core.evalf.prec_to_dps(prec))
        return None


#: the scaled functions' names -> the functions a reader wrote (for messages that name a function)
ORIGINAL_NAMES = {"besselie": "besseli", "dbesselke": "besselk", "exp1e": "exp1"}

_BESSEL = (sp.besseli, sp.besselk, dbesselk, exp1)


def scaled_bessel(expr):
    """``expr`` with every modified Bessel function (sympy's ``besseli``/``besselk``, the engine's ``dbesselk``)
    written as its exponentially scaled function times an exponential, and those exponentials combined where the
    algebra removes them (module docstring).  The same value, without the intermediate overflow; an expression
    without a Bessel function (or anything that is not a sympy expression) is returned as it is."""
    if not isinstance(expr, sp.Basic) or not expr.has(*_BESSEL):
        return expr
    if isinstance(expr, sp.MatrixBase):
        return expr.applyfunc(scaled_bessel)
    scales: dict = {}          # exponent s -> a positive placeholder for e^{s} (e^{s} ≥ 1 where the functions are real)

    def scale(s):
        if s not in scales:
            scales[s] = sp.Dummy(f"e{len(scales)}", positive=True)
        return scales[s]

    def walk(node):
        if not node.args or not node.has(*_BESSEL):
            return node
        args = [walk(a) for a in node.args]
        if isinstance(node, sp.besseli):
            nu, x = args
            return besselie(nu, x) * scale(sp.Abs(x))
        if isinstance(node, sp.besselk):
            nu, x = args
            return dbesselke(0, nu, x) / scale(x)
        if isinstance(node, dbesselk):
            n, nu, x = args
            return dbesselke(n, nu, x) / scale(x)
        if isinstance(node, exp1):
            return exp1e(args[0]) / scale(args[0])
        if isinstance(node, sp.Add):
            return _take_out(sp.Add(*args), list(scales.values()))
        if isinstance(node, sp.log):
            return _log_of(args[0], scales)
        return node.func(*args)

    out = walk(expr)
    return out.xreplace({t: sp.exp(s) for s, t in scales.items()})


def _power_of(term, t):
    """k where ``term`` is (a factor free of ``t``)·t**k with k a number, else None (t inside a function)."""
    _, dep = term.as_independent(t, as_Add=False)
    if dep == 1:
        return sp.Integer(0)
    if dep == t:
        return sp.Integer(1)
    if isinstance(dep, sp.Pow) and dep.base == t and dep.exp.is_number:
        return dep.exp
    return None


def _take_out(add, placeholders):
    """A sum with the largest power of each placeholder that every term carries taken out as a factor."""
    if not isinstance(add, sp.Add):
        return add
    factor = sp.Integer(1)
    for t in placeholders:
        if not add.has(t):
            continue
        powers = [_power_of(a, t) for a in add.args]
        if any(k is None for k in powers):
            continue
        k = max(powers)
        if k != 0 and any(p != 0 for p in powers):
            factor *= t ** k
            add = sp.Add(*[a * t ** -k for a in add.args])
            if not isinstance(add, sp.Add):
                break
    return factor * add


def _log_of(arg, scales):
    """log(arg) with each placeholder power of a product taken out as its exponent: log(t**k·r) = k·s + log(r)."""
    outside = sp.Integer(0)
    factors = sp.Mul.make_args(arg)
    rest = []
    by_placeholder = {t: s for s, t in scales.items()}
    for f in factors:
        base, k = f.as_base_exp()
        if base in by_placeholder and k.is_number:
            outside += k * by_placeholder[base]
        else:
            rest.append(f)
    if outside == 0:
        return sp.log(arg)
    return outside + sp.log(sp.Mul(*rest))
