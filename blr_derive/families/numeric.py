"""A family's symbolic objects compiled to numpy: A, μ = ∇A and the Fisher information F = ∇²A in orthonormal
coordinates of Ω's tangent space, and the numeric μ → ordinary map (Newton's method on the convex dual problem,
like efax's expectation-to-natural map)."""
from __future__ import annotations

import numpy as np
import scipy.special as _special
import sympy as sp

from blr_derive.core.errors import DerivationError
from blr_derive.core.newton import newton_dual
from blr_derive.core.specialfns import dbesselk_numpy
from blr_derive.core.matexpr import is_mat, scalarize
from blr_derive.families.symbolic import loggamma_form, subs


def tangent_basis(l, dim, symmetric):
    """Basis of the tangent space of a λ block (symmetric matrices for symmetric blocks)."""
    if not is_mat(l):
        return [1.0]
    n, m = (int(sp.sympify(s).subs({sym: dim for sym in sp.sympify(s).free_symbols})) for s in l.shape)
    out = []
    if l in symmetric:
        for i in range(n):
            for j in range(i, n):
                E = np.zeros((n, m))
                E[i, j] = E[j, i] = 1.0 if i == j else np.sqrt(0.5)
                out.append(E)
    else:
        for i in range(n):
            for j in range(m):
                E = np.zeros((n, m))
                E[i, j] = 1.0
                out.append(E)
    return out


def numeric_fisher(fam, lam_vals: dict, dim: int):
    """The Fisher information ∇²A at λ as a dense matrix in an orthonormal basis of Ω's tangent space."""
    dl, dmu = fam.fisher_operator(simplified=False)
    bases = [tangent_basis(l, dim, fam.symmetric) for l in fam.lam]
    cols = []
    for bi, basis in enumerate(bases):
        for E in basis:
            vals = dict(lam_vals)
            for j, d in enumerate(dl):
                if j != bi:
                    vals[d] = np.zeros_like(bases[j][0]) if is_mat(d) else 0.0
            vals[dl[bi]] = E if is_mat(dl[bi]) else float(E)
            col = []
            for k, (dm, basis_k) in enumerate(zip(dmu, bases)):
                v = np.atleast_2d(fam.evaluate(dm, vals, dim)) if is_mat(dm) else fam.evaluate(dm, vals, dim)
                for Ek in basis_k:
                    col.append(float(np.sum(np.asarray(v) * Ek)) if is_mat(dm) else float(v) * float(Ek))
            cols.append(col)
    return np.array(cols).T


def _f64(c):
    """Coordinates as numpy floats: a closed form that is 0/0 at a point its select discards (a removable
    singularity, ``core.specialfns.near_point``) is NaN there in numpy, where Python floats would raise."""
    return [np.float64(x) for x in c]


def _horner(coefficients, d):
    """Σ_k a_k d^k (elementwise, Horner's scheme)."""
    out = 0.0
    for a in reversed(list(coefficients)):
        out = a + d * out
    return out


#: the engine's own special functions that scipy does not name, as numpy functions (binary: -1 for x < 0, else 1)
OWN_FUNCTIONS = {"binary": lambda x: np.where(np.asarray(x) < 0, -1.0, 1.0),
                 "softplus": lambda x: np.logaddexp(0.0, x), "dbesselk": dbesselk_numpy,
                 "ndtr": _special.ndtr, "log_ndtr": _special.log_ndtr,
                 # a removable singularity's select (core.specialfns.near_point): the series inside the radius
                 "near_point": lambda g, a, x, c, r: np.where(np.abs(np.asarray(x, dtype=float) - float(c)) < float(r),
                                                              _horner(a, np.asarray(x, dtype=float) - float(c)), g)}
MODULES = [OWN_FUNCTIONS, "scipy", "numpy"]


class NumericFamily:
    """A family's symbolic objects compiled to numpy at a fixed numeric dimension.

    Every (matrix) symbol is replaced by an explicit matrix of scalar symbols (symmetric ones
    share their off-diagonal entries) and the result is lambdified.  The λ blocks are given
    coordinates in an orthonormal basis of their tangent space (as in :func:`numeric_fisher`),
    so that A is a function of a flat vector c and its gradient and Hessian are μ and F in the
    same coordinates.  Used by :meth:`Family.numeric_ord_from_mu` and ``blr-derive check``.
    """

    def __init__(self, fam, dim: int | None):
        self.fam, self.dim = fam, dim
        self._explicit: dict = {}
        self.bases = [tangent_basis(l, dim or 1, fam.symmetric) for l in fam.lam]
        self.ncoord = sum(len(b) for b in self.bases)
        self.coords = [sp.Dummy(f"c{i}", real=True) for i in range(self.ncoord)]
        self.lam_explicit = {}
        k = 0
        for l, basis in zip(fam.lam, self.bases):
            cs = self.coords[k:k + len(basis)]
            k += len(basis)
            if is_mat(l):
                M = sp.zeros(*basis[0].shape)
                for c, E in zip(cs, basis):
                    M += c * sp.Matrix(exact_basis(E))
                self.lam_explicit[l] = sp.ImmutableMatrix(M)
            else:
                self.lam_explicit[l] = cs[0]
        self.fixed = [p.symbol for p in fam.fixed_params]
        A = self._explicit_expr(fam.A, self.lam_explicit, self.fixed)
        grad = [sp.diff(A, c) for c in self.coords]
        hess = [[sp.diff(g, c) for c in self.coords] for g in grad]
        args = self.coords + self._entry_args(self.fixed)
        self._A = sp.lambdify(args, A, modules=MODULES)
        self._grad = sp.lambdify(args, grad, modules=MODULES)
        self._hess = sp.lambdify(args, hess, modules=MODULES)
        self._ord = {}
        for s, e in fam.ord_from_nat.items():
            self._ord[s] = self.compile(subs(e, self.lam_explicit), self.coords, self.fixed)

    # -- explicit entries -------------------------------------------------
    def explicit(self, sym):
        """(explicit matrix or scalar, [entry symbols]) standing for ``sym``."""
        if sym not in self._explicit:
            if is_mat(sym):
                n, m = (int(sp.sympify(s).xreplace({self.fam.dim: self.dim})) if self.fam.dim is not None
                        else int(s) for s in sym.shape)
                M = sp.zeros(n, m)
                ents = []
                for i in range(n):
                    for j in range(m):
                        if sym in self.fam.symmetric and j < i:
                            M[i, j] = M[j, i]
                            continue
                        s = sp.Dummy(f"{sym.name}_{i}{j}", real=True)
                        M[i, j] = s
                        ents.append(s)
                self._explicit[sym] = (sp.ImmutableMatrix(M), ents)
            else:
                s = sp.Dummy(str(sym), real=True)
                self._explicit[sym] = (s, [s])
        return self._explicit[sym]

    def _entry_args(self, syms):
        out = []
        for s in syms:
            out.extend(self.explicit(s)[1])
        return out

    def flatten(self, sym, value):
        """Numeric value of ``sym`` → the list of its entry values (in the order of ``explicit``)."""
        if not is_mat(sym):
            return [value]
        E, ents = self.explicit(sym)
        arr = np.asarray(value, dtype=float)
        n, m = E.shape
        arr = arr.reshape(n, m) if arr.ndim < 2 else arr
        out = []
        for i in range(n):
            for j in range(m):
                if sym in self.fam.symmetric and j < i:
                    continue
                out.append(arr[i, j])
        return out

    def _explicit_expr(self, expr, extra=None, syms=()):
        reps = dict(extra or {})
        for s in syms:
            reps[s] = self.explicit(s)[0]
        if self.fam.dim is not None and self.dim is not None:
            reps[self.fam.dim] = sp.Integer(self.dim)
        e = expr.xreplace(reps).doit()
        if is_mat(e) and not isinstance(e, sp.MatrixBase) and not e.atoms(sp.MatrixSymbol):
            e = e.as_explicit()            # a scalar times an explicit matrix can stay a MatMul after doit()
        if isinstance(e, sp.MatrixBase):
            return sp.ImmutableMatrix(e)
        return scalarize(e)

    def compile(self, expr, scalar_args, syms=(), extra=None, post=None):
        """A numpy function of (scalar_args..., entries of syms...) returning an array of expr's shape.

        ``extra`` are further replacements made together with the explicit entries (e.g. θ by
        an explicit parametrization); ``post`` rewrites the explicit expression before lambdify.
        """
        e = self._explicit_expr(expr, extra, syms)
        if post is not None:
            e = e.applyfunc(post) if isinstance(e, sp.MatrixBase) else post(e)
        args = list(scalar_args) + self._entry_args(syms)
        if isinstance(e, sp.MatrixBase):
            shape, entries = e.shape, list(e)
        else:
            shape, entries = (), [e]
        entries = [loggamma_form(x) for x in entries]
        free = set().union(*(x.free_symbols for x in entries)) - set(args)
        if free:
            raise DerivationError(f"cannot evaluate numerically: unknown symbols {sorted(map(str, free))}")
        fn = sp.lambdify(args, entries, modules=MODULES)

        def call(*vals):
            with np.errstate(all="ignore"):
                outs = fn(*vals)
            bshape = np.broadcast_shapes(*[np.shape(v) for v in vals])
            arr = np.stack([np.broadcast_to(np.asarray(o, dtype=float), bshape) for o in outs])
            return arr.reshape(shape + bshape)
        return call

    # -- λ coordinates ------------------------------------------------------
    def fixed_args(self, fixed_vals: dict):
        out = []
        for s in self.fixed:
            out.extend(self.flatten(s, fixed_vals[s]))
        return out

    def coords_of(self, blocks: dict):
        """Block values {λ_i or μ_i: value} → flat coordinates <E_k, value>."""
        out = []
        for l, u, basis in zip(self.fam.lam, self.fam.mu, self.bases):
            v = blocks[l] if l in blocks else blocks[u]
            for E in basis:
                out.append(float(np.sum(np.asarray(v, dtype=float).reshape(np.shape(E)) * E)) if is_mat(l)
                           else float(v) * float(E))
        return np.array(out)

    def blocks_of(self, c):
        """Flat coordinates → λ block values."""
        out, k = {}, 0
        for l, basis in zip(self.fam.lam, self.bases):
            if is_mat(l):
                out[l] = sum(ci * E for ci, E in zip(c[k:k + len(basis)], basis))
            else:
                out[l] = float(c[k])
            k += len(basis)
        return out

    def A(self, c, fixed_vals=None):
        with np.errstate(all="ignore"):
            return float(self._A(*_f64(c), *self.fixed_args(fixed_vals or {})))

    def grad(self, c, fixed_vals=None):
        with np.errstate(all="ignore"):
            return np.array(self._grad(*_f64(c), *self.fixed_args(fixed_vals or {})), dtype=float)

    def hess(self, c, fixed_vals=None):
        with np.errstate(all="ignore"):
            return np.array(self._hess(*_f64(c), *self.fixed_args(fixed_vals or {})), dtype=float)

    def ordinary(self, c, fixed_vals=None):
        """Ordinary parameters (free ones) at coordinates c."""
        fa = self.fixed_args(fixed_vals or {})
        out = {}
        for s, f in self._ord.items():
            v = f(*c, *fa)
            out[s] = float(v) if np.ndim(v) == 0 else (v.reshape(-1) if v.shape[1:] == (1,) else v)
        return out

    def valid(self, c, fixed_vals=None):
        try:
            A = self.A(c, fixed_vals)
            if not np.isfinite(A):
                return False
            return self.fam.params_valid(self.ordinary(c, fixed_vals), self.dim)
        except (ValueError, ZeroDivisionError, np.linalg.LinAlgError):
            return False

    def _start(self, fixed_vals):
        """A starting λ in Ω: the central ordinary parameters, else (where the closed-form inverse is singular
        there, e.g. the von Mises direction at λ₂ = 0) the first of a few fixed random valid ones."""
        fam = self.fam
        rng = np.random.default_rng(0)
        for k in range(9):
            start = fam.default_params(self.dim or 2) if k == 0 else fam.sample_params(rng, self.dim or 2)
            start.update(fixed_vals)
            c = self.coords_of({l: fam.evaluate(e, start, self.dim) for l, e in zip(fam.lam, fam.eta)})
            if self.valid(c, fixed_vals):
                return c
        raise DerivationError("numeric μ → λ: no starting point in the domain")

    def ord_from_mu(self, values: dict, tol: float = 1e-12, max_iter: int = 200):
        """The ordinary parameters whose expectation parameters are ``values[μ]``, by the solver every generated
        module embeds (:func:`blr_derive.core.newton.newton_dual`)."""
        fam = self.fam
        fixed_vals = {p.symbol: values[p.symbol] for p in fam.fixed_params}
        m = self.coords_of({u: values[u] for u in fam.mu})
        c = self._start(fixed_vals)
        try:
            c = newton_dual(m, c, lambda x: self.A(x, fixed_vals), lambda x: self.grad(x, fixed_vals),
                            lambda x: self.hess(x, fixed_vals), lambda x: self.valid(x, fixed_vals), tol, max_iter)
        except ArithmeticError as exc:
            raise DerivationError(f"numeric μ → λ: {exc}") from None
        return self.ordinary(c, fixed_vals)


def exact_basis(E):
    """A numeric basis matrix with entries 0, 1 or √½ as an exact sympy matrix."""
    out = []
    for row in E:
        r = []
        for v in row:
            if v == 0:
                r.append(sp.Integer(0))
            elif v == 1:
                r.append(sp.Integer(1))
            else:
                r.append(sp.sqrt(sp.Rational(1, 2)))
        out.append(r)
    return out
