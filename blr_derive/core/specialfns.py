"""Special functions the families and losses use that sympy lacks as single nodes.

Each is a sympy ``Function`` with its derivative (``fdiff``) so the engine can differentiate it,
and every code-generation target prints it (``codegen/*/printer.py``); tests compare each target
with ``scipy.special``.  ``lgamma``/``digamma``/``polygamma``/``gamma`` are sympy's own
``loggamma``/``digamma``/``polygamma``/``gamma``; ``log1p(x)`` is written ``log(1 + x)`` and
printed as ``log1p``.
"""
from __future__ import annotations

import numpy
import sympy as sp


class softplus(sp.Function):
    """log(1 + exp(x)), printed as a numerically stable logaddexp(0, x)."""

    def fdiff(self, argindex=1):
        return 1 / (1 + sp.exp(-self.args[0]))

    def _eval_rewrite_as_log(self, x, **kwargs):
        return sp.log(1 + sp.exp(x))

    def _eval_evalf(self, prec):
        if self.args[0].is_number:           # numeric checks (blr-derive check) evaluate the update with evalf
            return sp.log(1 + sp.exp(self.args[0])).evalf(sp.core.evalf.prec_to_dps(prec))


def softplus_form(e):
    """``e`` with every log(1 + exp(a)) written softplus(a): stable where exp(a) overflows (a Bernoulli's entropy at
    a large natural parameter, exp(2λ) beyond λ ≈ 355); the objectives of every target print entropies this way."""
    def is_log1p_exp(x):
        return (isinstance(x, sp.log) and isinstance(x.args[0], sp.Add) and len(x.args[0].args) == 2
                and sp.Integer(1) in x.args[0].args and any(isinstance(a, sp.exp) for a in x.args[0].args))
    return sp.sympify(e).replace(is_log1p_exp,
                                 lambda x: softplus(next(a for a in x.args[0].args if isinstance(a, sp.exp)).args[0]))


def _logistic_base(f):
    """(a, k) when the factor f is (1 + e^a)^k with k real, else None."""
    base, k = (f, sp.Integer(1)) if isinstance(f, sp.Add) else f.as_base_exp() if isinstance(f, sp.Pow) else (None, 0)
    if isinstance(base, sp.Add) and len(base.args) == 2 and sp.Integer(1) in base.args and k.is_real:
        other = next(a for a in base.args if a != 1)
        if isinstance(other, sp.exp):
            return other.args[0], k
    return None


def log_softplus_form(e):
    """``e`` with every log of a product with a factor (1 + e^a)^k written as the log of the other factors plus
    k·softplus(a), and a factor e^b (b real) as b: log(1 + e^a) = softplus(a), log(sigmoid(u)) = log(1/(1 + e^{-u}))
    = -softplus(-u), log(e^u/(1 + e^u)) = u - softplus(u) = -softplus(-u).  The principal log of a product with a positive factor
    splits exactly, so the value is the same; the derivatives are written with the logistic function (expit), which
    stays finite, where those of the written forms are e^{-u}·expit(u) = inf·0 once e^{-u} overflows (a logistic loss
    at a margin below -709)."""
    if not isinstance(e, sp.Basic) or not e.has(sp.log):
        return e

    def split(lg):
        factors = sp.Mul.make_args(lg.args[0])
        found = [_logistic_base(f) for f in factors]
        if not any(found):
            return lg
        terms, exponents, rest = [], [], []
        for f, lk in zip(factors, found):
            if lk is not None:
                terms.append(lk)
            elif isinstance(f, sp.exp) and f.args[0].is_extended_real:
                exponents.append(f.args[0])
            else:
                rest.append(f)
        out = []
        for a, k in terms:
            # k·softplus(a) + b with b = -k·a is k·softplus(-a) (softplus(a) - a = softplus(-a)): log(e^u/(1 + e^u))
            # = -softplus(-u), which keeps the digits u - softplus(u) cancels (-4e-18 at u = 40, computed 0)
            b = next((b for b in exponents if sp.expand(b + k * a) == 0), None)
            if b is not None:
                exponents.remove(b)
                out.append(k * softplus(-a))
            else:
                out.append(k * softplus(a))
        return sp.Add(*out, *exponents) + (sp.log(sp.Mul(*rest)) if rest else 0)
    return e.replace(lambda x: isinstance(x, sp.log) and x.args[0].has(sp.exp), split)


class xlogy(sp.Function):
    """x log y with xlogy(0, y) = 0."""

    nargs = 2

    def fdiff(self, argindex=1):
        x, y = self.args
        return sp.log(y) if argindex == 1 else x / y

    def _eval_rewrite_as_log(self, x, y, **kwargs):
        return x * sp.log(y)

    def _eval_evalf(self, prec):
        x, y = self.args
        if x.is_number and y.is_number:
            return sp.Integer(0) if x == 0 else (x * sp.log(y)).evalf(sp.core.evalf.prec_to_dps(prec))


class logsumexp(sp.Function):
    """log Σ_i exp(x_i), printed in the max-shifted stable form."""

    def fdiff(self, argindex=1):
        return sp.exp(self.args[argindex - 1]) / sp.Add(*[sp.exp(x) for x in self.args])   # softmax

    def _eval_rewrite_as_log(self, *xs, **kwargs):
        return sp.log(sp.Add(*[sp.exp(x) for x in xs]))

    def _eval_evalf(self, prec):
        if all(x.is_number for x in self.args):
            return sp.log(sp.Add(*[sp.exp(x) for x in self.args])).evalf(sp.core.evalf.prec_to_dps(prec))


class nan_outside(sp.Function):
    """nan_outside(x, c1, c2, ...): x where every c_i > 0, NaN elsewhere.  An expectation that is finite only on
    part of the parameter space (E[θ] under an inverse gamma needs α > 1) is returned as NaN outside it, never as
    the finite value its closed form happens to take there."""

    @classmethod
    def eval(cls, x, *conds):
        if not conds:
            return x
        if all(c.is_number for c in conds):
            return x if all(bool(c > 0) for c in conds) else sp.nan

    def fdiff(self, argindex=1):
        if argindex != 1:
            return sp.Integer(0)
        return nan_outside(sp.Integer(1), *self.args[1:])


class exp1(sp.Function):
    """The exponential integral E₁(x) = ∫₁^∞ e^{-xt}/t dt for x > 0 (``scipy.special.exp1``, by whose name
    ``lambdify`` finds it).  E[log θ] of the inverse Gaussian is log m − e^{2s/m} E₁(2s/m)."""

    nargs = 1

    def fdiff(self, argindex=1):
        x = self.args[0]
        return -sp.exp(-x) / x

    def _eval_rewrite_as_expint(self, x, **kwargs):
        return sp.expint(1, x)

    def _eval_evalf(self, prec):
        if self.args[0].is_number:
            return sp.expint(1, self.args[0]).evalf(sp.core.evalf.prec_to_dps(prec))


class exp1e(sp.Function):
    """Ẽ₁(x) = e^{x}·E₁(x) (x > 0), the exponentially scaled exponential integral: 1/x·(1 − 1/x + 2/x² − …) for
    large x (DLMF 6.12.1), −log x − γ near 0; written by :func:`scaled_exp1` (before the update's common subexpressions are taken, blr_derive/ir/build.py) and by
    codegen/scaled.py's lowering.  E[log θ] of the inverse
    Gaussian, log m − e^{2s/m}E₁(2s/m), read as a product, overflows e^{2s/m} at 2s/m > 709 (a concentrated
    inverse Gaussian, mean 0.01 and shape 10) while the product is about m/(2s): inf·0 = NaN in every target."""

    nargs = 1

    def _eval_evalf(self, prec):
        x = self.args[0]
        if x.is_number:
            return (sp.exp(x) * sp.expint(1, x)).evalf(sp.core.evalf.prec_to_dps(prec))
        return None


def scaled_exp1(expr):
    """``expr`` with every E₁(x) written Ẽ₁(x)·e^{−x} (:class:`exp1e`): sympy's product then cancels an e^{x} next to
    it (the inverse Gaussian's e^{2s/m}E₁(2s/m) becomes Ẽ₁(2s/m)), the same value without the overflow of e^{x}."""
    if not isinstance(expr, sp.Basic) or not expr.has(exp1):
        return expr
    return expr.replace(exp1, lambda x: exp1e(x) * sp.exp(-x))


def _scipy_evalf(fn_name, args, prec):
    """Evaluate a scipy.special function at numeric arguments (float64: these are inverse CDFs for samplers and
    their derivatives, never part of a symbolic simplification)."""
    if not all(a.is_number and a.is_real for a in args):
        return None
    import scipy.special
    return sp.Float(float(getattr(scipy.special, fn_name)(*[float(a) for a in args])), prec)


class gammaincinv(sp.Function):
    """x with P(a, x) = y, P the regularized lower incomplete gamma function (``scipy.special.gammaincinv``): the
    inverse CDF of Gamma(a, 1).  A sampler draws gamma, chi, chi-square and inverse-gamma variables from one
    uniform draw with it.  Its derivative in y is 1/p(x) = Γ(a) x^{1-a} e^x; the one in the shape a has no
    closed form and stays an unevaluated derivative (the reparameterization rule refuses it)."""

    nargs = 2

    def fdiff(self, argindex=2):
        a, _ = self.args
        if argindex == 2:
            return sp.exp(self + sp.loggamma(a)) * self ** (1 - a)
        return super().fdiff(argindex)

    def _eval_evalf(self, prec):
        return _scipy_evalf("gammaincinv", self.args, prec)


class betaincinv(sp.Function):
    """x with I_x(a, b) = y, I the regularized incomplete beta function (``scipy.special.betaincinv``): the inverse
    CDF of Beta(a, b).  Its derivative in y is 1/p(x) = B(a, b) x^{1-a} (1 - x)^{1-b}; those in a and b have no
    closed form and stay unevaluated."""

    nargs = 3

    def fdiff(self, argindex=3):
        a, b, _ = self.args
        if argindex == 3:
            return sp.exp(sp.loggamma(a) + sp.loggamma(b) - sp.loggamma(a + b)) * self ** (1 - a) * (1 - self) ** (1 - b)
        return super().fdiff(argindex)

    def _eval_evalf(self, prec):
        return _scipy_evalf("betaincinv", self.args, prec)


class ndtri(sp.Function):
    """Φ⁻¹(y), the inverse CDF of N(0, 1) (``scipy.special.ndtri``, ``torch.special.ndtri``); its derivative is
    √(2π) exp(Φ⁻¹(y)²/2)."""

    nargs = 1

    def fdiff(self, argindex=1):
        return sp.sqrt(2 * sp.pi) * sp.exp(self ** 2 / 2)

    @classmethod
    def eval(cls, y):
        if y == sp.Rational(1, 2):
            return sp.Integer(0)

    def _eval_evalf(self, prec):
        return _scipy_evalf("ndtri", self.args, prec)


class ndtr(sp.Function):
    """Φ(x), the CDF of N(0, 1) (``scipy.special.ndtr``, ``torch.special.ndtr``, ``jax.scipy.special.ndtr``): accurate
    far in the lower tail, where 1 + erf(x/√2) cancels to 0 (Φ(-40) = 3.7e-350 underflows, Φ(-30) = 4.9e-198 does
    not).  Its derivative is the normal density φ(x) = e^{-x²/2}/√(2π)."""

    nargs = 1

    def fdiff(self, argindex=1):
        return sp.exp(-self.args[0] ** 2 / 2) / sp.sqrt(2 * sp.pi)

    @classmethod
    def eval(cls, x):
        if x == 0:
            return sp.Rational(1, 2)

    def _eval_rewrite_as_erfc(self, x, **kwargs):
        return sp.erfc(-x / sp.sqrt(2)) / 2

    def _eval_is_positive(self):
        return True if self.args[0].is_extended_real else None

    def _eval_evalf(self, prec):
        x = self.args[0]
        if x.is_number and x.is_real:
            return (sp.erfc(-x / sp.sqrt(2)) / 2).evalf(sp.core.evalf.prec_to_dps(prec))


class log_ndtr(sp.Function):
    """log Φ(x) (``scipy.special.log_ndtr``, ``torch.special.log_ndtr``, ``jax.scipy.special.log_ndtr``): finite
    for every real x (≈ -x²/2 - log(-x√(2π)) as x → -∞, where log(Φ(x)) is log(0) = -inf past x ≈ -38).  Its
    derivative φ(x)/Φ(x) is written e^{-x²/2 - log Φ(x)}/√(2π) -- the inverse Mills ratio, ≈ -x in the lower tail,
    finite where φ and Φ both underflow -- so the derivatives of a probit loss or of a truncated normal's
    log-partition stay finite at any argument."""

    nargs = 1

    def fdiff(self, argindex=1):
        return sp.exp(-self.args[0] ** 2 / 2 - self) / sp.sqrt(2 * sp.pi)

    @classmethod
    def eval(cls, x):
        if x == 0:
            return -sp.log(2)

    def _eval_rewrite_as_erfc(self, x, **kwargs):
        return sp.log(sp.erfc(-x / sp.sqrt(2)) / 2)

    def _eval_is_extended_real(self):
        return True if self.args[0].is_extended_real else None

    def _eval_evalf(self, prec):
        x = self.args[0]
        if x.is_number and x.is_real:
            return sp.log(sp.erfc(-x / sp.sqrt(2)) / 2).evalf(sp.core.evalf.prec_to_dps(prec))


def normal_cdf_form(e):
    """``e`` with the error functions written through Φ and log Φ where their closed forms cancel: c + c·erf(a) as
    2c·Φ(√2 a) and c - c·erf(a) as 2c·Φ(-√2 a) (1 + erf(a) is what sympy returns for a Gaussian kernel integrated
    over a half line, a truncated normal's log-partition: it cancels to 0 far in the tail, Φ does not), erfc(a) as
    2Φ(-√2 a), c - c·Φ(b) as c·Φ(-b), and log of a product with a factor Φ(b)^k as log of the rest plus k·log Φ(b)
    (the principal log of a product with a positive factor splits exactly).  A lone erf(a) stays (2Φ(√2 a) - 1
    would cancel near a = 0).  The same value wherever ``e`` is defined."""
    if not isinstance(e, sp.Basic) or not e.has(sp.erf, sp.erfc, ndtr):
        return e
    e = e.replace(lambda x: isinstance(x, sp.erfc), lambda x: 2 * ndtr(-sp.sqrt(2) * x.args[0]))

    def complement(add):
        # t + s·t·f(b) with t a number, s = ±1 and f erf or Φ: one Φ of the sum's value, without the cancellation
        terms = list(add.args)
        for i, t in enumerate(terms):
            if not t.is_Number or t == 0:
                continue
            for j, u in enumerate(terms):
                coeff, factors = u.as_coeff_mul()
                if j == i or len(factors) != 1 or not isinstance(factors[0], (sp.erf, ndtr)):
                    continue
                b = factors[0].args[0]
                rest = [v for k, v in enumerate(terms) if k not in (i, j)]
                if isinstance(factors[0], sp.erf) and coeff in (t, -t):
                    return sp.Add(2 * t * ndtr(sp.sqrt(2) * b if coeff == t else -sp.sqrt(2) * b), *rest)
                if isinstance(factors[0], ndtr) and coeff == -t:
                    return sp.Add(t * ndtr(-b), *rest)
        return add
    e = e.replace(lambda x: isinstance(x, sp.Add) and x.has(sp.erf, ndtr), complement)

    def split_log(lg):
        cdf, rest = [], []
        for f in sp.Mul.make_args(lg.args[0]):          # a lone Φ(b) or Φ(b)^k is a product of one factor
            base, k = f.as_base_exp()
            if isinstance(base, ndtr) and k.is_real:
                cdf.append((base, k))
            else:
                rest.append(f)
        if not cdf:
            return lg
        return sp.log(sp.Mul(*rest)) + sp.Add(*[k * log_ndtr(b.args[0]) for b, k in cdf])
    return e.replace(lambda x: isinstance(x, sp.log) and x.args[0].has(ndtr), split_log)


class sign(sp.sign):
    """sign(x): −1, 0 or +1 (the grammar's ``sign``; sympy's sign, printed as every target's sign).  A step function:
    its derivative is 0 almost everywhere, and that is the value code can compute (sympy's own derivative, 2δ(x),
    is a distribution that no target prints), so a sampler θ = −b sign(u − ½) log(1 − 2|u − ½|) differentiates in b
    like any smooth expression.  A threshold whose argument depends on the parameters (a binary family's
    sign(λ + logit(u)/2)) is what the relaxation rules replace (``blr_derive/rules/sampling.py``)."""

    def _eval_derivative(self, x):
        return sp.Integer(0)

    def fdiff(self, argindex=1):
        return sp.Integer(0)

    # sympy's simplify rewrites a sign as Piecewise((0, Eq(x, 0)), (x/|x|, True)): a condition on the data that the
    # targets cannot select elementwise, and the 0/0 of the idiom back in the other branch; it stays a sign
    def _eval_rewrite_as_Abs(self, arg, **kwargs):
        return None

    def _eval_rewrite_as_Piecewise(self, arg, **kwargs):
        return None

    def _eval_rewrite_as_Heaviside(self, arg, **kwargs):
        return None


def limit_safe(e):
    """``e`` with x/|x| and |x|/x written sign(x): the same value wherever it is defined, and the limit from both sides
    averaged (0) at x = 0 instead of 0/0 (a sampler's old sign idiom (u − ½)/|u − ½| was NaN at the middle node of the
    tanh-sinh rule, u = ½)."""
    if not isinstance(e, sp.Basic) or not e.has(sp.Abs):
        return e

    def fix(m):
        factors = list(sp.Mul.make_args(m))
        for i, f in enumerate(factors):
            if isinstance(f, sp.Pow) and isinstance(f.base, sp.Abs) and f.exp == -1:
                x = f.base.args[0]
                for j, g in enumerate(factors):
                    if j != i and (g == x or g == -x):
                        rest = [h for k, h in enumerate(factors) if k not in (i, j)]
                        return sp.Mul(*rest) * (sign(x) if g == x else -sign(x))
            if isinstance(f, sp.Abs):
                x = f.args[0]
                for j, g in enumerate(factors):
                    if j != i and isinstance(g, sp.Pow) and g.exp == -1 and (g.base == x or g.base == -x):
                        rest = [h for k, h in enumerate(factors) if k not in (i, j)]
                        return sp.Mul(*rest) * (sign(x) if g.base == x else -sign(x))
        return m

    prev = None
    while prev != e:
        prev = e
        e = e.replace(lambda n: isinstance(n, sp.Mul), fix)
    return e


class binary(sp.Function):
    """The binary value of x: -1 where x < 0 and +1 elsewhere (0 and NaN included), so that a binary weight always
    holds -1 or +1 (``sign`` gives 0 at 0).  Piecewise constant: its derivative is 0 (straight-through and
    relaxation rules supply their own Jacobians)."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if x.is_number and x.is_real:
            return sp.Integer(-1) if x < 0 else sp.Integer(1)

    def fdiff(self, argindex=1):
        return sp.Integer(0)


class near_point(sp.Function):
    """near_point(general, coefficients, x, c, r): Σ_k a_k (x − c)^k where |x − c| < r, else ``general``.

    One function with a *removable singularity* at x = c: its closed form ``general`` is 0/0 there (the continuous
    Bernoulli's A(λ) = log((e^λ − 1)/λ) at λ = 0) and loses digits near it by cancellation, while the polynomial with
    ``coefficients`` (a Tuple a_0, a_1, …; they may depend on other symbols) is its Taylor polynomial about c,
    accurate inside the radius r (``blr_derive/families/singular.py`` chooses the order and r so that the node and its
    first two derivatives are within ~1e-13 of the function just inside r).  Differentiating in any symbol s
    differentiates both branches (the switch is constant almost everywhere): the polynomial's coefficients become
    ∂a_k/∂s + (k + 1) a_{k+1} ∂x/∂s, so μ = ∇A and F = ∇²A of a guarded A are guarded too, and substituting λ = η(θ)
    keeps the polynomial in x (no expansion in θ).  Every target prints it as an elementwise select (``numpy.where``,
    ``torch.where``, ``jnp.where``, ``tl.where``; a Python conditional on the host) with the polynomial in Horner
    form, and the general branch is evaluated at c + r inside the radius when x is a symbol, so the 0/0 is never
    computed.  Text and LaTeX show the closed form (``general``): the node is the same function."""

    nargs = 5

    @classmethod
    def eval(cls, general, coefficients, x, c, r):
        d = x - c
        if d.is_number and r.is_number:
            try:
                inside = bool(abs(d) < r)
            except TypeError:          # a complex or undecidable comparison: keep the node
                return None
            return polynomial_value(coefficients, d) if inside else general

    @property
    def series(self):
        """The Taylor polynomial as an expression in x."""
        _, coefficients, x, c, _ = self.args
        return polynomial_value(coefficients, x - c)

    def _eval_derivative(self, s):
        general, coefficients, x, c, r = self.args
        dx = sp.diff(x, s)
        a = list(coefficients) + [sp.Integer(0)]
        new = [sp.diff(a[k], s) + (k + 1) * a[k + 1] * dx for k in range(len(coefficients))]
        while len(new) > 1 and new[-1] == 0:
            new.pop()
        return self.func(sp.diff(general, s), sp.Tuple(*new), x, c, r)

    def _eval_simplify(self, **kwargs):
        general, coefficients, x, c, r = self.args
        return self.func(sp.simplify(general, **kwargs), sp.Tuple(*[sp.simplify(a, **kwargs) for a in coefficients]),
                         x, c, r)

    def _eval_is_real(self):
        general, coefficients = self.args[:2]
        if general.is_real and all(a.is_real for a in coefficients):
            return True
        return None

    def _eval_evalf(self, prec):
        general, coefficients, x, c, r = self.args
        d = (x - c).evalf(prec)
        if d.is_number and r.is_number:
            return (polynomial_value(coefficients, d) if abs(d) < r else general).evalf(prec)
        return None

    def safe_general(self):
        """``general`` with x replaced by c + r inside the radius (when x is a symbol), so that an elementwise select
        never computes the 0/0 of the branch it discards (no NaN, no floating-point warning, no NaN gradient)."""
        general, _, x, c, r = self.args
        if not isinstance(x, sp.Symbol) or general == x:
            return general
        return general.xreplace({x: near_point(x, sp.Tuple(c + r), x, c, r)})

    def _sympystr(self, printer):
        return printer._print(self.args[0])

    def _latex(self, printer, **kwargs):
        return printer._print(self.args[0])


def polynomial_value(coefficients, d):
    """Σ_k a_k d^k in Horner form, a_0 + d (a_1 + d (a_2 + …)) (unevaluated products: printed as written)."""
    out = None
    for a in reversed(list(coefficients)):
        out = a if out is None else a + d * out
    return sp.Integer(0) if out is None else out


def stable_softmax(e):
    """exp(a) / (Σ_j exp(b_j) + c) as exp(a - logsumexp(b_j, log c)): the same value without overflow."""
    num, den = sp.fraction(sp.together(e))
    if num == 1:
        num = sp.exp(sp.Integer(0), evaluate=False)
    if not (isinstance(num, sp.exp) and isinstance(den, sp.Add)):
        return e
    parts = []
    for t in den.args:
        if isinstance(t, sp.exp):
            parts.append(t.args[0])
        elif t.is_number and t.is_positive:
            parts.append(sp.log(t))
        else:
            return e
    return sp.exp(num.args[0] - logsumexp(*parts))


def dbesselk_numpy(n, nu, x, scaled=False):
    """∂ⁿK_ν(x)/∂νⁿ for x > 0 (numpy, elementwise): K_ν(x) = ∫_0^∞ cosh(νt) e^{-x cosh t} dt (DLMF 10.32.9), so
    the n-th derivative in the order is ∫_0^∞ tⁿ c_n(νt) e^{-x cosh t} dt with c_n = cosh for even n and sinh for
    odd n.  The integrand is an even function of t, analytic in the strip |Im t| < π/2 and decaying there, so the
    trapezoidal rule on [0, T] converges geometrically (error ~ e^{-π²/h}); h = 1/32 (1/(2√x) for x > 256, where the
    integrand is a Gaussian of width 1/√x: error ~ e^{-2π²/(h²x)}) and T where the integrand is
    below e^{-745} of the scale e^{|ν|t - x cosh t} (every term in log space: no overflow in cosh(νt)).
    ``scaled``: e^{x} times the derivative (the integrand's e^{-x cosh t} as e^{-2x sinh²(t/2)}), which does not
    underflow for large x (K_ν(x) is 0 in double precision from x ≈ 705)."""
    n = int(n)
    nu, x = numpy.broadcast_arrays(numpy.asarray(nu, dtype=float), numpy.asarray(x, dtype=float))
    a = numpy.abs(nu)
    with numpy.errstate(divide="ignore", invalid="ignore", over="ignore"):
        xs = numpy.where(x > 0, x, numpy.nan)
        T = numpy.arccosh(1 + 745 / xs)
        for _ in range(4):                      # the |ν|t and n log t growth before the e^{-x cosh t} decay
            T = numpy.arccosh(1 + (745 + a * T + n * numpy.log1p(T)) / xs)
        tmax = float(numpy.nanmax(T)) if numpy.any(numpy.isfinite(T)) else 1.0
        # the integrand is a Gaussian of width 1/√x about t = 0 for large x: h = 1/(2√x) keeps the error e^{-8π²}
        h = min(1 / 32, 0.5 / float(numpy.sqrt(numpy.nanmax(xs)))) if numpy.any(xs > 0) else 1 / 32
        t = numpy.arange(0.0, tmax + h, h).reshape((-1,) + (1,) * nu.ndim)
        y = a * t                               # log cosh(y) or log |sinh(y)|, y ≥ 0
        e2 = numpy.exp(-2 * y)
        logc = y - numpy.log(2.0) + (numpy.log1p(e2) if n % 2 == 0 else numpy.log1p(-e2))
        sign = numpy.sign(nu) if n % 2 else 1.0    # sinh is odd in ν
        decay = 2 * xs * numpy.sinh(t / 2) ** 2 if scaled else xs * numpy.cosh(t)
        logf = (n * numpy.log(t) if n else 0.0) + logc - decay
        w = numpy.full(t.shape, h)
        w[0] = h / 2
        out = sign * numpy.sum(w * numpy.exp(logf), axis=0)
    return out if out.ndim else float(out)


class dbesselk(sp.Function):
    """∂ⁿK_ν(x)/∂νⁿ, the n-th derivative of the modified Bessel function of the second kind in its order ν
    (n = 0 is K_ν(x) itself, the grammar's ``besselk(nu, x)``).  The generalized inverse Gaussian's
    log-partition is log(2 K_p(√(ab))) + (p/2) log(b/a), so its E[log θ] and Fisher information need the order
    derivatives, which have no closed form; they are integrals (:func:`dbesselk_numpy`).  Derivatives: in ν the next
    order derivative, in x the recurrence K_ν' = -(K_{ν-1} + K_{ν+1})/2 (DLMF 10.29.1), which holds for every
    ν-derivative of it."""

    nargs = 3

    def fdiff(self, argindex=3):
        n, nu, x = self.args
        if argindex == 2:
            return dbesselk(n + 1, nu, x)
        if argindex == 3:
            return -(dbesselk(n, nu - 1, x) + dbesselk(n, nu + 1, x)) / 2
        return super().fdiff(argindex)

    def _eval_evalf(self, prec):
        n, nu, x = self.args
        if not (n.is_Integer and n >= 0 and nu.is_number and nu.is_real and x.is_number and x.is_positive):
            return None
        if n == 0:
            return sp.besselk(nu, x).evalf(sp.core.evalf.prec_to_dps(prec))
        return sp.Float(dbesselk_numpy(int(n), float(nu), float(x)), prec)


#: the largest |ν| at which :func:`besselk_order_derivative` unrolls the recurrence in the order into a closed form
#: (beyond it the derivative stays the integral ``dbesselk(1, ν, x)``)
BESSELK_CLOSED_FORM_MAX_ORDER = 12


def besselk_closed(nu, x):
    """K_ν(x) for an order ν with 2ν an integer: elementary at half-integer orders (DLMF 10.39.2 and the recurrence
    K_{ν+1} = K_{ν−1} + (2ν/x)K_ν, DLMF 10.29.1), else the node ``dbesselk(0, ν, x)``."""
    nu = sp.nsimplify(nu)
    if (2 * nu).is_Integer and not nu.is_Integer:
        return sp.expand_func(sp.besselk(abs(nu), x))
    return dbesselk(0, abs(nu) if nu.is_number else nu, x)


def besselk_order_derivative(nu, x):
    """∂K_ν(x)/∂ν at the order ν: in closed form where 2ν is an integer and |ν| ≤ BESSELK_CLOSED_FORM_MAX_ORDER,
    else the integral ``dbesselk(1, ν, x)``.

    * ν = ±½: ±√(π/(2x)) e^{x} E₁(2x) (DLMF 10.38.7);
    * ν = 0: 0 (K_ν is even in ν); ν = ±n: ±(n!/2)(x/2)^{−n} Σ_{k<n} (x/2)^k K_k(x)/((n − k) k!) (DLMF 10.38.8);
    * other half-integers by the recurrence in the order differentiated in ν: ∂K_{ν+1} = ∂K_{ν−1} + (2/x)K_ν +
      (2ν/x)∂K_ν, from ∂K_{±½}; and ∂K_{−ν} = −∂K_ν (K_{−ν} = K_ν).

    The inverse Gaussian's E[log θ] = log m + e^{2s/m} E₁(2s/m) comes out of its tilted log-partition this way."""
    nu = sp.nsimplify(nu) if nu.is_number else nu
    if not (nu.is_number and (2 * nu).is_Integer and abs(nu) <= BESSELK_CLOSED_FORM_MAX_ORDER):
        return dbesselk(1, nu, x)
    sign = -1 if nu < 0 else 1
    n = abs(nu)
    if n.is_Integer:
        n = int(n)
        if n == 0:
            return sp.Integer(0)
        half = x / 2
        return sign * sp.factorial(n) / 2 * half ** (-n) * sp.Add(
            *[half ** k * besselk_closed(k, x) / ((n - k) * sp.factorial(k)) for k in range(n)])
    d_prev = -sp.sqrt(sp.pi / (2 * x)) * sp.exp(x) * exp1(2 * x)        # ∂K at ν = −½
    d = -d_prev                                                           # ∂K at ν = ½
    v = sp.Rational(1, 2)
    while v < n:                                                          # ∂K_{v+1} from ∂K_{v−1}, ∂K_v
        d_prev, d = d, d_prev + 2 / x * besselk_closed(v, x) + 2 * v / x * d
        v += 1
    return sign * d


#: the largest integer offset k for which :func:`shifted_differences` writes f(x + k) − f(x) as a finite sum
SHIFT_DIFFERENCE_MAX = 64


def _shift_key(term):
    """(kind, order, base, offset, coefficient) where ``term`` is c·polygamma(n, x + k) or c·loggamma(x + k) with an
    integer k and c free of that function; None otherwise."""
    coeff, factors = term.as_coeff_mul()
    fns = [f for f in factors if isinstance(f, (sp.polygamma, sp.loggamma))]
    if len(fns) != 1:
        return None
    f = fns[0]
    kind, order, arg = ("lg", None, f.args[0]) if isinstance(f, sp.loggamma) else ("pg", f.args[0], f.args[1])
    if order is not None and not (order.is_Integer and order >= 0):
        return None
    k, base = arg.as_coeff_Add()
    if not k.is_Integer or abs(k) > SHIFT_DIFFERENCE_MAX or base == 0:
        return None
    rest = sp.Mul(coeff, *[x for x in factors if x is not f])
    if rest.has(sp.polygamma, sp.loggamma):
        return None
    return kind, order, base, int(k), rest


def _step_sum(kind, order, base, lo, hi):
    """f(base + hi) − f(base + lo) for lo < hi: Σ_{i=lo}^{hi−1} log(base + i) for log Γ (Γ(x + 1) = xΓ(x)), and
    Σ_{i=lo}^{hi−1} (−1)ⁿ n!/(base + i)ⁿ⁺¹ for ψ⁽ⁿ⁾ (DLMF 5.5.2, differentiated n times)."""
    if kind == "lg":
        return sp.Add(*[sp.log(base + i) for i in range(lo, hi)])
    n = int(order)
    return sp.Add(*[(-1) ** n * sp.factorial(n) / (base + i) ** (n + 1) for i in range(lo, hi)])


def shifted_differences(e, names=None):
    """``e`` with every sum Σ_k c_k f(x + k) whose coefficients add up to zero (f = log Γ or ψ⁽ⁿ⁾, k integers) written
    as the finite sum of the recurrence, Σ_k c_k (f(x + k) − f(x + k₀)), k₀ the smallest offset.  The tilted moments
    of the beta and Dirichlet families differentiate to such differences, ψ(a + 2) − ψ(a) and
    log Γ(a + 2) − log Γ(a) (E[θ²] = a(a + 1)/((a + b)(a + b + 1)), App. B): evaluated as written they lose every
    digit the functions' size exceeds the difference by (ψ(1e7) ≈ 16.1 against a difference of 2e-7: 1.6e-8
    relative), which the inverse Fisher information of a beta at a = b = 1e7 amplifies by about a, a 20 % error in the
    step; the reciprocals 1/a + 1/(a + 1) keep full precision.  A sum whose coefficients do not cancel is left as
    it is (ψ(x) + 1/x loses digits near x = 0 where ψ(x + 1) does not).  With a dict ``names``, each such finite
    sum is a real symbol instead, recorded there (sum → symbol): a caller that simplifies the result further keeps
    the sum as one quantity (simplify otherwise expands 1/a + 1/(a + 1) over every other denominator: a Dirichlet
    step over K = 3 grew from 77 kB to 12 MB of code and from 4 s to 114 s)."""
    def rewrite(node):
        if not isinstance(node, sp.Add):
            return node
        groups, others = {}, []
        for t in node.args:
            key = _shift_key(t)
            if key is None:
                others.append(t)
            else:
                kind, order, base, k, c = key
                groups.setdefault((kind, order, base), []).append((k, c, t))
        out = list(others)
        for (kind, order, base), members in groups.items():
            if len(members) < 2 or sp.expand(sp.Add(*[c for _, c, _ in members])) != 0:
                out.extend(t for _, _, t in members)
                continue
            k0 = min(k for k, _, _ in members)
            for k, c, _ in members:
                if k != k0:
                    total = _step_sum(kind, order, base, k0, k)
                    if names is not None:
                        total = names.setdefault(total, sp.Dummy("shift", real=True))
                    out.append(c * total)
        return sp.Add(*out)

    if not isinstance(e, sp.Basic) or not e.has(sp.polygamma, sp.loggamma):
        return e
    return e.replace(lambda x: isinstance(x, sp.Add), rewrite)
