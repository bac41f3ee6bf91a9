"""Sympy nodes for sums over data of one-dimensional functions and their Gaussian expectations.

``DataSum`` (Σ_n f(v_n)), ``Elementwise``, ``DiagOf``, ``RowQuadForm``, ``GaussHermite`` and ``expit`` are what
the expression grammar builds for ``sum(f(A*theta + b))`` and what the delta and Gauss–Hermite rules derive
from them (``blr_derive/rules/datasum.py``); each evaluates itself numerically by ``doit()`` once its arguments
are explicit matrices, and every code target prints them.  The nodes are data-size agnostic (N stays symbolic).
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp
from sympy.matrices.expressions.matexpr import MatrixExpr
from sympy.printing.precedence import PRECEDENCE, precedence

from blr_derive.core.errors import DerivationError
from blr_derive.core.matexpr import is_mat

U = sp.Symbol("u", real=True)        # the bound variable of the one-dimensional functions


def _explicit(x):
    return isinstance(x, sp.MatrixBase)


def _made_explicit(x):
    """``x`` as an explicit matrix where it has a value: a matrix expression of numbers alone (no symbol, a
    numeric shape), e.g. the covariance ``(1/s)*I`` of ``gaussian_isotropic`` at numbers, ``Identity(3)/2.5``,
    which ``doit`` leaves a ``MatMul`` of an ``Identity``; anything else as it is."""
    if _explicit(x) or not is_mat(x) or x.free_symbols or not all(d.is_Integer for d in map(sp.sympify, x.shape)):
        return x
    return sp.ImmutableMatrix(x.as_explicit())


def _fn_latex(printer, f, arg_tex):
    """f(arg) in LaTeX with the argument's LaTeX text put in verbatim: a Symbol named by LaTeX text would be printed
    as a name (its backslashes and braces dropped inside \\mathrm{}: (mathbfX boldsymboltheta)_n), so a placeholder
    of a plain name stands in for it and is replaced in the printed text."""
    hole = "zzrowargzz"
    text = printer._print(f.expr.xreplace({f.variables[0]: sp.Symbol(hole)}))
    return text.replace(r"\mathrm{%s}" % hole, "{%s}" % arg_tex).replace(hole, "{%s}" % arg_tex)


def _operand(printer, f, v, tex=False):
    """v printed as the argument of the per-row function f it is substituted into (a Symbol named by the text):
    parenthesized unless it is an atom or f reads it only as a function's argument, so that the row function u² of
    v = y − Xm prints (y − Xm)², not y − Xm², and softplus(u) of Xm prints softplus(X*m)."""
    text = printer._print(v)
    u = f.variables[0]
    operand = any(u in node.args and not isinstance(node, sp.Function) for node in sp.preorder_traversal(f.expr))
    if operand and precedence(v) < PRECEDENCE["Atom"]:
        text = (r"\left(%s\right)" if tex else "(%s)") % text
    return text


class RowFunction(sp.Lambda):
    """The per-row function of a data sum: a Lambda that sympy's numeric evaluation leaves alone (sympy 1.14's
    ``Lambda._eval_evalf`` raises IndexError, which solve and simplify reach through the sum's arguments)."""

    def __new__(cls, signature, expr):
        sig = sp.Tuple(*(signature if isinstance(signature, (tuple, sp.Tuple)) else (signature,)))
        return sp.Expr.__new__(cls, sig, sp.sympify(expr))     # Lambda(u, u) would become IdentityFunction

    def _eval_evalf(self, prec):
        return self


class DataSum(sp.Expr):
    """Σ_n f(v_n) for a column vector v (a scalar)."""

    is_commutative = True
    is_real = True

    def __new__(cls, f, v):
        if not isinstance(f, sp.Lambda) or not (is_mat(v) or _explicit(v)) or v.shape[1] != 1:
            raise DerivationError("DataSum(f, v) needs a one-argument function and a column vector")
        if not isinstance(f, RowFunction):
            f = RowFunction(f.signature, f.expr) if isinstance(f, sp.Lambda) and f.args else RowFunction(U, U)
        return sp.Basic.__new__(cls, f, v)

    @property
    def fn(self):
        return self.args[0]

    @property
    def vec(self):
        return self.args[1]

    def doit(self, **hints):
        v = _made_explicit(self.vec.doit(**hints)) if hints.get("deep", True) else self.vec
        if _explicit(v):
            return sp.Add(*[self.fn(v[i, 0]) for i in range(v.shape[0])]).doit(**hints)
        return DataSum(self.fn, v)

    def _latex(self, printer):
        return r"\sum_n %s" % _fn_latex(printer, self.fn, r"(%s)_n" % printer._print(self.vec))

    def _sympystr(self, printer):
        if not self.fn.expr.has(self.fn.variables[0]):
            return "%s*len(%s)" % (printer._print(self.fn.expr), printer._print(self.vec))
        return "sum(%s)" % printer._print(self.fn.expr.xreplace({self.fn.variables[0]: sp.Symbol(
            _operand(printer, self.fn, self.vec))}))


class Elementwise(MatrixExpr):
    """f applied to every entry of a column vector v."""

    def __new__(cls, f, v):
        return sp.Basic.__new__(cls, f, v)

    @property
    def shape(self):
        return self.args[1].shape

    @property
    def precedence(self):
        """The precedence of the row function's body, as it is printed (sympy's printers parenthesize by it): X.T
        times 1 − tanh(η)² prints X.T*(1 - tanh(eta)^2), not X.T*1 - tanh(eta)^2."""
        return precedence(self.args[0].expr)

    def _entry(self, i, j, **kwargs):
        return self.args[0](self.args[1]._entry(i, j, **kwargs))

    def doit(self, **hints):
        v = _made_explicit(self.args[1].doit(**hints))
        if _explicit(v):
            return sp.ImmutableMatrix(v.shape[0], 1, [self.args[0](v[i, 0]).doit(**hints) for i in range(v.shape[0])])
        return Elementwise(self.args[0], v)

    def _latex(self, printer):
        return _fn_latex(printer, self.args[0], _operand(printer, self.args[0], self.args[1], tex=True))

    def _sympystr(self, printer):
        return printer._print(self.args[0].expr.xreplace({self.args[0].variables[0]: sp.Symbol(
            _operand(printer, self.args[0], self.args[1]))}))


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
        w = _made_explicit(self.args[0].doit(**hints))
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
        A, C = _made_explicit(self.args[0].doit(**hints)), _made_explicit(self.args[1].doit(**hints))
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
        mean, var, n = _made_explicit(mean.doit(**hints)), _made_explicit(var.doit(**hints)), sp.sympify(n).doit(**hints)
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
    if n <= 300:
        z, w = np.polynomial.hermite_e.hermegauss(n)
    else:       # numpy's recurrence overflows from about 360 nodes (NaN weights): Golub-Welsch (the runtimes' rule)
        k = np.sqrt(np.arange(1.0, n))
        z, v = np.linalg.eigh(np.diag(k, 1) + np.diag(k, -1))
        w = math.sqrt(2 * math.pi) * v[0] ** 2
    return z, w / math.sqrt(2 * math.pi)


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


def logistic_of(e):
    """1/(1 + e^a) → expit(-a)."""
    if isinstance(e, sp.Pow) and e.exp == -1 and isinstance(e.base, sp.Add) and len(e.base.args) == 2 \
            and sp.Integer(1) in e.base.args:
        other = [a for a in e.base.args if a != 1][0]
        if isinstance(other, sp.exp):
            return expit(-other.args[0])
    return None


class ZerosLike(sp.Function):
    """An array of zeros with the shape of its argument (printed ``numpy.zeros_like``): the initial value of
    state shaped like an expression of other state (e.g. dual natural parameters shaped like λ)."""
    nargs = 1


class ArraySum(sp.Function):
    """Σ_i x_i over every entry of an array (the coordinates of a mean-field state: an objective summed over them);
    a number is its own sum.  Printed ``numpy.sum``."""
    is_real = True
    nargs = 1

    @classmethod
    def eval(cls, x):
        if x.is_Number:
            return x
        return None

    def _latex(self, printer):
        return r"\sum_i %s" % printer._print(self.args[0])

    def _sympystr(self, printer):
        return "sum_i(%s)" % printer._print(self.args[0])


class ComponentSum(sp.Function):
    """Σ_k x_k over the component axis of a recipe with ``components`` (the argument is a symbol that holds one
    value per component; the result has none).  Printed as a sum over the array's last axis."""
    is_real = True
    nargs = 1

    def _latex(self, printer):
        return r"\sum_k %s" % printer._print(self.args[0])

    def _sympystr(self, printer):
        return "sum_k(%s)" % printer._print(self.args[0])


class ComponentLogSumExp(sp.Function):
    """log Σ_k exp(x_k) over the component axis (the log-partition of the categorical over the components,
    evaluated without overflow).  Printed as logsumexp over the array's last axis."""
    is_real = True
    nargs = 1

    def _latex(self, printer):
        return r"\log\sum_k e^{%s}" % printer._print(self.args[0])

    def _sympystr(self, printer):
        return "logsumexp_k(%s)" % printer._print(self.args[0])


class Cholesky(MatrixExpr):
    """The lower-triangular Cholesky factor L of a positive-definite matrix X = L Lᵀ (samplers of matrix
    families: ``chol(V)``)."""

    def __new__(cls, x):
        return sp.Basic.__new__(cls, x)

    @property
    def shape(self):
        return self.args[0].shape

    def _latex(self, printer):
        return r"\operatorname{chol}\left(%s\right)" % printer._print(self.args[0])

    def _sympystr(self, printer):
        return "chol(%s)" % printer._print(self.args[0])


class BartlettDraw(MatrixExpr):
    """A random P×P lower-triangular matrix A with A_ii = sqrt(χ²(n − i + 1)) (i = 1..P) and independent N(0, 1)
    entries below the diagonal: Bartlett's decomposition, A Aᵀ ~ Wishart(n, I) for real n > P − 1 (Bartlett
    1933; Anderson, An Introduction to Multivariate Statistical Analysis, Thm. 7.2.1).  A draw of a sampler, like
    u and z: each call in a sampler is one independent draw (``index`` tells them apart)."""

    def __new__(cls, n, P, index=0):
        return sp.Basic.__new__(cls, sp.sympify(n), sp.sympify(P), sp.Integer(index))

    @property
    def shape(self):
        return (self.args[1], self.args[1])

    def _latex(self, printer):
        return r"\mathrm{Bartlett}_{%s}\left(%s\right)" % (self.args[2], printer._print(self.args[0]))

    def _sympystr(self, printer):
        return "bartlett(%s)" % printer._print(self.args[0])


class NormalVectorDraw(MatrixExpr):
    """A random P×1 vector of independent N(0, 1) entries: the vector draw of a sampler (``normals(P)``), like z
    for one coordinate; each call in a sampler is one independent draw (``index`` tells them apart)."""

    def __new__(cls, P, index=0):
        return sp.Basic.__new__(cls, sp.sympify(P), sp.Integer(index))

    @property
    def shape(self):
        return (self.args[0], sp.Integer(1))

    def _latex(self, printer):
        return r"\mathbf{z}_{%s}" % self.args[1]

    def _sympystr(self, printer):
        return "normals(%s)" % printer._print(self.args[0])
