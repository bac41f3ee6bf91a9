"""Sums over data of one-dimensional functions, and their Gaussian expectations.

A loss such as the Bernoulli negative log-likelihood of logistic regression,
``sum(softplus(X*theta)) - y.T*X*theta + 0.5*alpha*theta.T*theta``, is a polynomial of
degree ≤ 2 in θ plus terms ``c Σ_n f(a_nᵀθ + b_n)`` (rows a_n of a data matrix A).  Such a
term depends on θ only through one-dimensional projections, so under q = N(m, C):

* its gradient and Hessian are ``Aᵀ f'(Aθ + b)`` and ``Aᵀ diag(f''(Aθ + b)) A``;
* ``a_nᵀθ ~ N(a_nᵀm + b_n, a_nᵀ C a_n)``, so ``E_q[f(a_nᵀθ + b_n)]``, ``E_q[f']`` and ``E_q[f'']``
  are one-dimensional Gaussian integrals, computed by Gauss–Hermite quadrature.

With Bonnet's and Price's theorems (Eqs. 10–11) these give ``E_q[∇ℓ]`` and ``E_q[∇²ℓ]``,
from which the engine derives the natural gradient (App. D).  Two expectation rules use
this module: ``delta`` for an explicit loss (derivatives at the mean: Laplace's method,
Sec. 4.4) and ``gauss_hermite`` (quadrature: non-conjugate VI, Sec. 5.4).

The sympy nodes below are data-size agnostic (N stays symbolic); each evaluates itself
numerically by ``doit()`` once its arguments are explicit matrices, and every code target
prints them (``codegen/numpy/printer.py``).
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp
from sympy.matrices.expressions.matexpr import MatrixExpr

from blr_derive.core.errors import DerivationError
from blr_derive.core.matcalc import _split_coeff, differential, gradient, hessian_from_gradient, is_mat, scalarize, simplify_mat

U = sp.Symbol("u", real=True)        # the bound variable of the one-dimensional functions


def _explicit(x):
    return isinstance(x, sp.MatrixBase)


def _fn_latex(printer, f, arg_tex):
    return printer._print(f.expr.xreplace({f.variables[0]: sp.Symbol(arg_tex)}))


class DataSum(sp.Expr):
    """Σ_n f(v_n) for a column vector v (a scalar)."""

    is_commutative = True
    is_real = True

    def __new__(cls, f, v):
        if not isinstance(f, sp.Lambda) or not (is_mat(v) or _explicit(v)) or v.shape[1] != 1:
            raise DerivationError("DataSum(f, v) needs a one-argument function and a column vector")
        return sp.Basic.__new__(cls, f, v)

    @property
    def fn(self):
        return self.args[0]

    @property
    def vec(self):
        return self.args[1]

    def doit(self, **hints):
        v = self.vec.doit(**hints) if hints.get("deep", True) else self.vec
        if _explicit(v):
            return sp.Add(*[self.fn(v[i, 0]) for i in range(v.shape[0])]).doit(**hints)
        return DataSum(self.fn, v)

    def _latex(self, printer):
        return r"\sum_n %s" % _fn_latex(printer, self.fn, r"(%s)_n" % printer._print(self.vec))

    def _sympystr(self, printer):
        return "sum(%s)" % printer._print(self.fn.expr.xreplace({self.fn.variables[0]: sp.Symbol(
            printer._print(self.vec))}))


class Elementwise(MatrixExpr):
    """f applied to every entry of a column vector v."""

    def __new__(cls, f, v):
        return sp.Basic.__new__(cls, f, v)

    @property
    def shape(self):
        return self.args[1].shape

    def _entry(self, i, j, **kwargs):
        return self.args[0](self.args[1]._entry(i, j, **kwargs))

    def doit(self, **hints):
        v = self.args[1].doit(**hints)
        if _explicit(v):
            return sp.ImmutableMatrix(v.shape[0], 1, [self.args[0](v[i, 0]).doit(**hints) for i in range(v.shape[0])])
        return Elementwise(self.args[0], v)

    def _latex(self, printer):
        return _fn_latex(printer, self.args[0], printer._print(self.args[1]))

    def _sympystr(self, printer):
        return printer._print(self.args[0].expr.xreplace({self.args[0].variables[0]: sp.Symbol(
            printer._print(self.args[1]))}))


class DiagOf(MatrixExpr):
    """The diagonal matrix diag(w) of a column vector w."""

    def __new__(cls, w):
        return sp.Basic.__new__(cls, w)

    @property
    def shape(self):
        n = self.args[0].shape[0]
        return (n, n)

    def _entry(self, i, j, **kwargs):
        return sp.KroneckerDelta(i, j) * self.args[0]._entry(i, 0, **kwargs)

    def _eval_transpose(self):
        return self

    def doit(self, **hints):
        w = self.args[0].doit(**hints)
        if _explicit(w):
            return sp.ImmutableMatrix(sp.diag(*[w[i, 0] for i in range(w.shape[0])]))
        return DiagOf(w)

    def _latex(self, printer):
        return r"\operatorname{diag}\left(%s\right)" % printer._print(self.args[0])

    def _sympystr(self, printer):
        return "diag(%s)" % printer._print(self.args[0])


class RowQuadForm(MatrixExpr):
    """The column vector (a_nᵀ C a_n)_n of the rows a_n of A: the variances of Aθ under Cov(θ) = C."""

    def __new__(cls, A, C):
        return sp.Basic.__new__(cls, A, C)

    @property
    def shape(self):
        return (self.args[0].shape[0], 1)

    def doit(self, **hints):
        A, C = self.args[0].doit(**hints), self.args[1].doit(**hints)
        if _explicit(A) and _explicit(C):
            M = A * C * A.T
            return sp.ImmutableMatrix(A.shape[0], 1, [M[i, i] for i in range(A.shape[0])])
        return RowQuadForm(A, C)

    def _latex(self, printer):
        A = printer._print(self.args[0])
        return r"\operatorname{diag}\left(%s %s %s^\top\right)" % (A, printer._print(self.args[1]), A)

    def _sympystr(self, printer):
        A = printer._print(self.args[0])
        return "diag(%s*%s*%s.T)" % (A, printer._print(self.args[1]), A)


class GaussHermite(MatrixExpr):
    """The column vector (E[f(x_n)])_n for x_n ~ N(mean_n, var_n), by ``nodes``-point Gauss–Hermite
    quadrature: E[f(x)] ≈ Σ_k w_k f(mean + √var z_k) / √(2π) with the probabilists' rule (hermegauss)."""

    def __new__(cls, f, mean, var, nodes):
        return sp.Basic.__new__(cls, f, mean, var, sp.sympify(nodes))

    @property
    def shape(self):
        return self.args[1].shape

    @staticmethod
    def _rule(fx, z, w, sd):
        """The quadrature of one row from f at the nodes mean + sd*z."""
        return float(np.dot(fx, w))

    def doit(self, **hints):
        f, mean, var, n = self.args
        mean, var, n = mean.doit(**hints), var.doit(**hints), sp.sympify(n).doit(**hints)
        if _explicit(mean) and _explicit(var) and n.is_number:
            z, w = gauss_hermite_rule(int(n))
            fn = sp.lambdify([U], f.expr, modules=[_NUMERIC, "scipy", "numpy"])
            out = []
            for i in range(mean.shape[0]):
                sd = math.sqrt(float(var[i, 0]))
                x = float(mean[i, 0]) + sd * z
                out.append(sp.Float(self._rule(np.asarray(fn(x), dtype=float) * np.ones_like(x), z, w, sd), 17))
            return sp.ImmutableMatrix(mean.shape[0], 1, out)
        return type(self)(f, mean, var, n)

    def _latex(self, printer):
        f, mean, var, n = self.args
        return r"\mathbb{E}^{\mathrm{GH}_{%s}}_{x \sim \mathcal{N}(%s,\, %s)}\left[%s\right]" % (
            printer._print(n), printer._print(mean), printer._print(var), _fn_latex(printer, f, "x"))

    def _sympystr(self, printer):
        f, mean, var, n = self.args
        return "gauss_hermite(u -> %s; mean=%s, var=%s, nodes=%s)" % (
            printer._print(f.expr), printer._print(mean), printer._print(var), printer._print(n))


class GaussHermiteStein(GaussHermite):
    """The column vector (E[f(x_n)(x_n - mean_n)] / var_n)_n by the same quadrature: Σ_k w_k f(mean + σ z_k) z_k / σ.

    By Stein's lemma this is E[f'(x)]; for f = ℓ' it is Price's E[ℓ''] (Eq. 11) in the form that is exactly
    2 ∂/∂var of the quadrature of E[ℓ], so natural gradients built from it are exact gradients of the
    quadrature objective.  Entries with var = 0 (a zero row of the data) are 0."""

    @staticmethod
    def _rule(fx, z, w, sd):
        return float(np.dot(fx, w * z)) / sd if sd > 0 else 0.0

    def _latex(self, printer):
        f, mean, var, n = self.args
        return r"\mathbb{E}^{\mathrm{GH}_{%s}}_{x \sim \mathcal{N}(%s,\, %s)}\left[%s\,\frac{x - %s}{%s}\right]" % (
            printer._print(n), printer._print(mean), printer._print(var), _fn_latex(printer, f, "x"),
            printer._print(mean), printer._print(var))

    def _sympystr(self, printer):
        f, mean, var, n = self.args
        return "gauss_hermite_stein(u -> %s; mean=%s, var=%s, nodes=%s)" % (
            printer._print(f.expr), printer._print(mean), printer._print(var), printer._print(n))


_NUMERIC = {"softplus": lambda x: np.logaddexp(0, x), "expit": lambda x: 0.5 * (1 + np.tanh(np.asarray(x) / 2))}


def gauss_hermite_rule(n):
    """Nodes z_k and weights w_k with Σ_k w_k g(z_k) ≈ E[g(z)], z ~ N(0, 1)."""
    if n < 1:
        raise ValueError("Gauss-Hermite quadrature needs at least one node")
    z, w = np.polynomial.hermite_e.hermegauss(n)
    return z, w / math.sqrt(2 * math.pi)


# ----------------------------------------------------------------------------- loss analysis

def split_loss(loss, theta, symmetric=()):
    """loss = poly(θ) + Σ_k c_k Σ_n f_k(a_knᵀθ + b_kn): returns (poly, [(c, f, A, b)])."""
    loss = scalarize(loss)
    sums = sorted(loss.atoms(DataSum), key=sp.default_sort_key)
    dummies = {s: sp.Dummy(f"s{i}") for i, s in enumerate(sums)}
    flat = loss.xreplace(dummies)
    poly = flat.xreplace({d: 0 for d in dummies.values()})
    terms = []
    for s, d in dummies.items():
        c = sp.diff(flat, d)
        if c.has(theta) or any(c.has(o) for o in dummies.values()):
            raise DerivationError(f"the loss must be linear in each data sum: {s} has coefficient {c}")
        if s.fn.expr.has(theta):
            raise DerivationError(f"{s}: the summed function may depend on θ only through its argument")
        A, b = affine_parts(s.vec, theta, symmetric)
        terms.append((c, s.fn, A, b))
    return poly, terms


def affine_parts(v, theta, symmetric=()):
    """v = A θ + b with A, b free of θ (an error otherwise)."""
    dth = sp.MatrixSymbol("d_" + theta.name, *theta.shape)
    dv = simplify_mat(sp.expand(differential(v, {theta: dth})), symmetric)
    parts = dv.args if isinstance(dv, sp.MatAdd) else (dv,)
    As = []
    for p in parts:
        if isinstance(p, sp.ZeroMatrix):
            continue
        if p == dth:
            As.append(sp.Identity(theta.shape[0]))
            continue
        if not (isinstance(p, sp.MatMul) and p.args[-1] == dth) or sp.MatMul(*p.args[:-1]).has(theta, dth):
            raise DerivationError(f"the argument of a data sum must be affine in {theta}: {v}")
        As.append(_left_factor(p.args[:-1], theta.shape[0]))
    if not As:
        raise DerivationError(f"the argument of a data sum does not depend on {theta}: {v}")
    A = simplify_mat(sp.MatAdd(*As) if len(As) > 1 else As[0], symmetric)
    b = simplify_mat(sp.expand(v.xreplace({theta: sp.ZeroMatrix(*theta.shape)}).doit()), symmetric)
    if not is_mat(b):
        if b != 0:
            raise DerivationError(f"the argument of a data sum is not a vector: {v}")
        b = sp.ZeroMatrix(*v.shape)
    return A, b


def _left_factor(args, n):
    """The matrix M of a differential term M dθ (a scalar multiple of the identity when M is a scalar)."""
    c, mats = _split_coeff(args)
    if not mats:
        return sp.MatMul(c, sp.Identity(n)) if c != 1 else sp.Identity(n)
    return sp.MatMul(c, *mats) if c != 1 else sp.MatMul(*mats)


def degree_in(e, x):
    """An upper bound of the polynomial degree of ``e`` in ``x``, or None when ``e`` is not a polynomial in ``x``
    (a function, a negative or symbolic power, an inverse of an expression in ``x``)."""
    if not e.has(x):
        return 0
    if e == x:
        return 1
    if isinstance(e, (sp.Add, sp.MatAdd, sp.Transpose, sp.Trace)):
        ds = [degree_in(a, x) for a in e.args]
        return None if None in ds else max(ds)
    if isinstance(e, (sp.Mul, sp.MatMul)):
        ds = [degree_in(a, x) for a in e.args]
        return None if None in ds else sum(ds)
    if isinstance(e, (sp.Pow, sp.MatPow)) and e.exp.is_Integer and e.exp >= 0:
        d = degree_in(e.base, x)
        return None if d is None else d * int(e.exp)
    return None


def polynomial_derivatives(poly, theta, symmetric=()):
    """(∇poly(θ), ∇²poly) for a polynomial of degree ≤ 2 in θ (the Hessian is constant).  Anything else is
    refused before it is differentiated (nested functions of θ grow without bound under the chain rule)."""
    d = degree_in(poly, theta)
    if d is None or d > 2:
        raise DerivationError(f"outside the data sums the loss must be a polynomial of degree <= 2 in {theta}")
    g = gradient(poly, [theta], symmetric)[0]
    try:
        H = hessian_from_gradient(g, theta, symmetric)
    except DerivationError:
        H = None
    if H is None or H.has(theta):
        raise DerivationError(f"outside the data sums the loss must be a polynomial of degree <= 2 in {theta}")
    return g, H


class expit(sp.Function):
    """The logistic function 1/(1 + e^(-x)), the derivative of softplus; its own derivative is
    expit(x)(1 - expit(x)).  Printed as ``scipy.special.expit``, which stays finite for any x (the
    quotient e^(-x)/(1 + e^(-x))² would be inf/inf below x ≈ -709)."""

    def fdiff(self, argindex=1):
        return expit(self.args[0]) * (1 - expit(self.args[0]))

    def _eval_rewrite_as_exp(self, x, **kwargs):
        return 1 / (1 + sp.exp(-x))

    def _eval_evalf(self, prec):
        return (1 / (1 + sp.exp(-self.args[0])))._eval_evalf(prec)

    def _latex(self, printer, exp=None):
        tex = r"\sigma\left(%s\right)" % printer._print(self.args[0])
        return tex if exp is None else r"%s^{%s}" % (tex, exp)


def _logistic(e):
    """1/(1 + e^a) → expit(-a)."""
    if isinstance(e, sp.Pow) and e.exp == -1 and isinstance(e.base, sp.Add) and len(e.base.args) == 2 \
            and sp.Integer(1) in e.base.args:
        other = [a for a in e.base.args if a != 1][0]
        if isinstance(other, sp.exp):
            return expit(-other.args[0])
    return None


def derivative(f, k=1):
    """f^(k) as a Lambda (sympy's derivative, with the special functions' own ``fdiff``); logistic
    functions 1/(1 + e^(-x)) become ``expit`` before each further derivative."""
    e = f.expr.xreplace({f.variables[0]: U})
    for _ in range(k):
        e = sp.diff(e, U)
        e = e.replace(lambda n: _logistic(n) is not None, _logistic)
    return sp.Lambda(U, e)


def _plus(a, b):
    if isinstance(a, sp.ZeroMatrix):
        return b
    if isinstance(b, sp.ZeroMatrix):
        return a
    return sp.MatAdd(a, b)


def expected_derivatives(theta, poly_grad, poly_hess, terms, mean, cov=None, nodes=None, symmetric=(), defs=None,
                         parts=None):
    """E_q[∇ℓ] and E_q[∇²ℓ] under q = N(mean, cov) by quadrature (``nodes``), or ∇ℓ(mean) and ∇²ℓ(mean)
    when ``cov`` is None (the delta method).  With a list ``defs``, the projected means and variances
    become named definitions ``eta``, ``eta_var`` appended to it; with a list ``parts``, the contribution
    (E[∇ℓ_f], E[∇²ℓ_f]) of each part of the loss (the polynomial, then each data sum) is appended to it."""
    g = poly_grad.xreplace({theta: mean})
    H = poly_hess
    if parts is not None:
        parts.append((g, H))
    for k, (c, f, A, b) in enumerate(terms):
        arg = simplify_mat(_plus(sp.MatMul(A, mean), b), symmetric)
        var = RowQuadForm(A, cov) if cov is not None else None
        if defs is not None:
            suffix = "" if len(terms) == 1 else str(k + 1)
            named = sp.MatrixSymbol("eta" + suffix, *arg.shape)
            defs.append((named, arg))
            arg = named
            if var is not None:
                named = sp.MatrixSymbol("eta_var" + suffix, *arg.shape)
                defs.append((named, var))
                var = named
        if cov is None:
            d1, d2 = Elementwise(derivative(f, 1), arg), Elementwise(derivative(f, 2), arg)
        else:
            f1 = derivative(f, 1)
            d1, d2 = GaussHermite(f1, arg, var, nodes), GaussHermiteStein(f1, arg, var, nodes)
        g = _plus(g, sp.MatMul(c, A.T, d1))
        H = _plus(H, sp.MatMul(c, A.T, DiagOf(d2), A))
        if parts is not None:
            parts.append((simplify_mat(sp.MatMul(c, A.T, d1), symmetric),
                          simplify_mat(sp.MatMul(c, A.T, DiagOf(d2), A), symmetric)))
    return simplify_mat(g, symmetric), simplify_mat(H, symmetric)


def expected_loss(fam, poly, terms, mean, cov, nodes):
    """E_q[ℓ] as a function of (mean, cov): the polynomial part exactly, the data sums by quadrature."""
    e = fam.expect_gaussian(poly, mean=mean, cov=cov)
    for c, f, A, b in terms:
        e = e + c * DataSum(sp.Lambda(U, U), GaussHermite(f, _plus(sp.MatMul(A, mean), b), RowQuadForm(A, cov), nodes))
    return e


# ----------------------------------------------------------------------------- the derivation step

def explicit_expectations(recipe, D, grads, Eg, EH, mean_mu, cov_mu, sym):
    """Replace E_q[∇ℓ], E_q[∇²ℓ] in the natural gradients (after Bonnet and Price, Eqs. 10–11) by their values
    for an explicit loss: derivatives at the mean (``delta``, App. C) or Gauss–Hermite quadrature of the
    one-dimensional projections (``gauss_hermite``).  They become definitions ``g``, ``H`` of the update."""
    from blr_derive.rules.passes import Ctx
    from blr_derive.rules.registry import RULES
    fam = recipe.family
    theta = fam.theta
    approx = [a for a in recipe.approximations if a.name in ("delta", "gauss_hermite")][0]
    quadrature = approx.name == "gauss_hermite"
    ctx = Ctx(D, approx)
    nodes = ctx.count("nodes", None) if quadrature else None
    ctx.done()
    try:
        poly, terms = split_loss(recipe.loss, theta, sym)
        pg, ph = polynomial_derivatives(poly, theta, sym)
    except DerivationError as exc:
        from blr_derive.core.errors import SpecError
        raise SpecError(f"approximation '{approx.name}': {exc}", recipe.file, approx.line) from None
    m, C = fam.gaussian_mean, fam.gaussian_cov
    projections, parts = [], []
    g_ord, H_ord = expected_derivatives(theta, pg, ph, terms, m, C if quadrature else None, nodes, sym, projections,
                                        parts)
    taken = {str(s) for s in fam.params} | {h.name for h in recipe.hyper} | {d.name for d in recipe.data}
    g = sp.MatrixSymbol("g" if "g" not in taken else "g_", *m.shape)
    H = sp.MatrixSymbol("H" if "H" not in taken else "H_", *C.shape)
    D.symbol_names[g] = r"\hat{g}"
    D.symbol_names[H] = r"\hat{H}"
    D.defs += projections + [(g, g_ord), (H, H_ord)]
    for s_, _ in projections:
        base, k = (r"\boldsymbol{\sigma}^2", s_.name[7:]) if s_.name.startswith("eta_var") else (r"\boldsymbol{\eta}", s_.name[3:])
        D.symbol_names[s_] = base + (f"_{{{k}}}" if k else "")
    sym.add(H)
    # the exact natural gradient of the approximated E_q[ℓ], written in μ (for checks against finite differences)
    g_mu, H_mu = expected_derivatives(theta, pg, ph, terms, mean_mu, cov_mu if quadrature else None, nodes, sym)
    if quadrature:
        D.placeholders["expected_loss"] = expected_loss(fam, poly, terms, mean_mu, cov_mu, nodes)
    D.placeholders["natural_gradient"] = ([simplify_mat(x.xreplace({Eg: g_mu, EH: H_mu}).doit(), sym | {H_mu})
                                           for x in grads], Eg, EH)
    where = r"\mathbf{m}" if is_mat(m) else "m"
    if quadrature:
        text = ("The loss is a polynomial of degree ≤ 2 in θ plus sums over data of one-dimensional functions "
                "f(aₙᵀθ + bₙ). Under q, xₙ = aₙᵀθ + bₙ is Gaussian with mean ηₙ = aₙᵀm + bₙ and variance "
                "σₙ² = aₙᵀS⁻¹aₙ, so E_q[f'] (Bonnet) and E_q[f''] (Price, in Stein's form E[f'(x)(x − η)]/σ²) are "
                f"one-dimensional integrals, computed by {nodes}-point Gauss–Hermite quadrature. The Stein form makes "
                "the natural gradient the exact gradient of the quadrature E_q[ℓ]. The polynomial part is exact "
                "(its gradient is affine and its Hessian constant).")
        eqs = []
        title = "Gauss–Hermite expectations of the data terms"
    else:
        text = ("The loss is explicit: the engine differentiates it (a polynomial of degree ≤ 2 in θ plus sums "
                "over data of one-dimensional functions, whose gradient is Aᵀf'(Aθ + b) and Hessian "
                "Aᵀdiag(f''(Aθ + b))A) and evaluates the derivatives at the mean (Eq. 13).")
        eqs = [(Eg, r"\nabla_\theta\bar\ell(%s)" % where, r"\approx"),
               (EH, r"\nabla^2_\theta\bar\ell(%s)" % where, r"\approx")]
        title = "Delta method with the derived gradient and Hessian"
    if quadrature:
        eqs = projections + [(g, g_ord), (H, H_ord), (Eg, g, r"\approx"), (EH, H, r"\approx")]
    else:
        eqs = eqs + projections + [(g, g_ord), (H, H_ord)]
    D.add(approx.name, RULES[approx.name].equation, title, text, eqs)
    _messages(recipe, D, grads, Eg, EH, parts, sym)
    return [simplify_mat(x.xreplace({Eg: g, EH: H}), sym) for x in grads]


def _messages(recipe, D, grads, Eg, EH, parts, sym):
    """The natural gradient split by the parts of the loss (Eq. 58): each part f sends the message
    λ̃_f = ∇_μ E_q[-ℓ_f] at μ_t, and λ_{t+1} = (1-ρ)λ_t + ρ Σ_f λ̃_f (Eq. 60 with ρ = 1: their sum)."""
    from blr_derive.rules.registry import RULES
    if len(parts) < 2:
        return
    fam = recipe.family
    at_state = dict(zip(fam.mu, fam.mu_ord))
    eqs = []
    for k, (gf, Hf) in enumerate(parts):
        who = "poly" if k == 0 else ("data" if len(parts) == 2 else f"data,{k}")
        for i, x in enumerate(grads):
            msg = simplify_mat(sp.MatMul(-1, x.xreplace({Eg: gf, EH: Hf})).doit().xreplace(at_state), sym | {Hf})
            eqs.append((r"\tilde{\lambda}^{(%d)}_{\mathrm{%s}}" % (i + 1, who), msg))
    D.add("factor_messages", RULES["factor_messages"].equation, "Messages of the parts of the loss",
          "The natural gradient is a sum over the parts of the loss (Eq. 58): the polynomial part of degree ≤ 2 "
          "(conjugate to the Gaussian: its message is exact and constant, Sec. 5.1) and each sum over data (the "
          "non-conjugate terms). Each sends the message λ̃_f = ∇_μ E_q[-ℓ_f] at the current "
          "q, and λ_{t+1} = (1-ρ)λ_t + ρ Σ_f λ̃_f; with ρ = 1 this is the message-passing form of Eq. 60 "
          "(non-conjugate VMP).", eqs)
