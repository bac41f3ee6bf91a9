"""Independent numerics for the family checks: the family compiled to numpy in unconstrained coordinates
(:class:`FamilyModel`), quadrature by the double-exponential rule centred at the mode (:class:`Quadrature`),
exact or grid-tabulated Monte Carlo samples, and finite-difference Hessians."""
from __future__ import annotations

import itertools
from functools import cached_property

import numpy as np
import sympy as sp
from scipy import optimize, special

from blr_derive.core.matexpr import is_mat, scalarize, simplify_mat
from blr_derive.families.partition import support_points
from blr_derive.verify.conditional import TRUNCATION_DROP, ConditionalGaussian
from blr_derive.verify.coordinates import (cholesky_coordinates, cholesky_factor, cholesky_log_jacobian,
                                           inverse_cholesky_log_jacobian, inverse_coordinates_preferred, sphere_from_u,
                                           whitening)
from blr_derive.verify.numdiff import fd_hessian


class FamilyModel:
    """A family at one dimension: compiled log h, T (in λ coordinates) and the θ parametrization.

    With ``gaussian_components`` (the family check), real scalar components that are Gaussian given the others
    (:func:`conditionally_gaussian`) are integrated by Gauss–Hermite given the others (exact for what the family
    check integrates: T, T Tᵀ and log q, polynomials of degree ≤ 4 in them); without it (a reference for
    ∫ q ℓ with an arbitrary loss ℓ) every component is on the grid."""

    def __init__(self, fam, dim: int, gaussian_components: bool = True):
        self.fam = fam
        self.nf = fam.numeric(dim)
        self.dim = self.nf.dim
        self.fixed = [p.symbol for p in fam.fixed_params]
        self.bars = {}                 # component -> symbol standing for 1 - component (unit interval)
        reps, pre = {}, {}
        # a matrix variable in the Cholesky coordinates of its inverse (coordinates.inverse_coordinates_preferred)
        self.inverse_coords = False
        if fam.components and fam.variable_kind != "mixed":
            self.theta_args = [sp.Dummy(str(c), real=True) for c in fam.components]
            reps = dict(zip(fam.components, self.theta_args))
            for c, s in zip(fam.components, fam.component_supports):
                if s == "unit_interval":
                    self.bars[c] = sp.Dummy(f"one_minus_{c}", positive=True)
        elif fam.variable_kind == "vector":
            self.theta_args = [sp.Dummy(f"theta_{i}", real=True) for i in range(self.dim)]
            reps = {fam.theta: sp.ImmutableMatrix(self.theta_args)}
        elif fam.variable_kind == "mixed":
            reps, pre = self._mixed_coordinates(fam)
        else:
            self.theta_args, X = cholesky_coordinates(self.dim)
            reps = {fam.theta: X}
            if inverse_coordinates_preferred(fam):
                self.inverse_coords = True
                Ls = sp.MatrixSymbol("L_coord", self.dim, self.dim)
                pre = {fam.theta: sp.Inverse(Ls * Ls.T)}
                reps = {Ls: cholesky_factor(self.theta_args, self.dim)}

        def prep(e):
            e = sp.sympify(e)
            for c, b in self.bars.items():
                e = e.subs(1 - c, b)
                e = e.xreplace({lg: near_one(lg, c, b) for lg in e.atoms(sp.log)})
            if pre:
                e = simplify_mat(e.xreplace(pre))
            return e

        def post(e):
            if fam.variable_kind in ("matrix", "mixed") and isinstance(e, sp.Basic) and e.has(sp.log):
                e = e.xreplace({lg: sp.expand_log(sp.log(sp.expand(lg.args[0])), force=True)
                                for lg in e.atoms(sp.log)})
            return e

        if gaussian_components and fam.components and fam.variable_kind != "mixed":
            self.gaussian_coords = conditionally_gaussian(fam)
        targs = list(self.bars.values()) + self.theta_args
        self._logh = self.nf.compile(prep(fam.log_h), targs, self.fixed, reps, post)
        self._T = [self.nf.compile(prep(t), targs, self.fixed, reps, post) for t in fam.T]
        self.discrete = fam.is_discrete
        self._logf = None
        if fam.variable_kind == "mixed":
            # log h + <λ, T> as one function of θ's coordinates and λ: the conditional quadrature's fits evaluate
            # only this, millions of times (not each T and its projections on Ω's basis)
            self._logf = self.nf.compile(prep(fam.log_h + scalarize(fam.inner(fam.lam, fam.T))), targs,
                                         self.fixed + list(fam.lam), reps, post)

    def log_f(self, entries, bars, fixed_vals, lam_args):
        """log h + <λ, T> at θ given by its entries (the fused function of a 'mixed' variable), or None."""
        if self._logf is None:
            return None
        return self._logf(*bars, *entries, *self.nf.fixed_args(fixed_vals), *lam_args)

    def _mixed_coordinates(self, fam):
        """Coordinates of a variable of components with shapes: a scalar itself (exp(u) when positive), a matrix its
        Cholesky coordinates, a vector its entries — except next to a matrix Λ = L Lᵀ, where the vector is
        θ = L⁻ᵀv and v are its coordinates (Jacobian |L|⁻¹): a vector whose spread scales with Λ^(-1/2), as the
        normal–Wishart's mean does, then has O(1) coordinates even where Λ is nearly singular, and θᵀΛθ = vᵀv is
        computed without cancellation.  → (explicit replacements, matrix-level replacements made first)."""
        self.theta_args, self.gaussian_coords, self.whiten = [], [], None
        reps, pre = {}, {}
        vectors = [c for c in fam.components if is_mat(c) and c.shape[1] == 1]
        matrices = [c for c in fam.components if is_mat(c) and c.shape[1] != 1]
        if len(vectors) == 1 and len(matrices) == 1:
            Ls, vs = sp.MatrixSymbol("L_coord", fam.dim, fam.dim), sp.MatrixSymbol("v_coord", fam.dim, 1)
            pre = whitening(fam, vectors[0], matrices[0], Ls, vs)
            self.whiten = (fam.components.index(vectors[0]), fam.components.index(matrices[0]),
                           "precision" if pre[vectors[0]].has(sp.Inverse) else "covariance")
        for c, sup in zip(fam.components, fam.component_supports):
            if not is_mat(c):               # a scalar: itself, or exp(u) on the positive half-line
                args = [sp.Dummy(str(c), real=True)]
                reps[c] = sp.exp(args[0]) if sup == "positive" else args[0]
            elif c.shape[1] == 1:
                args = [sp.Dummy(f"{c}_{i}", real=True) for i in range(self.dim)]
                self.gaussian_coords.extend(range(len(self.theta_args), len(self.theta_args) + self.dim))
                reps[vs if pre else c] = sp.ImmutableMatrix(args)
            else:
                args, X = cholesky_coordinates(self.dim)
                if pre:
                    reps[Ls] = cholesky_factor(args, self.dim)
                reps[c] = X
            self.theta_args.extend(args)
        return reps, pre

    def evaluate(self, entries, bars, fixed_vals):
        """(log h, t) at θ given by its entries (arrays); t has shape (ncoord, N)."""
        fa = self.nf.fixed_args(fixed_vals)
        args = list(bars) + list(entries) + fa
        logh = self._logh(*args)
        ts = []
        for f, basis, l in zip(self._T, self.nf.bases, self.fam.lam):
            v = f(*args)
            if is_mat(l):
                for E in basis:
                    ts.append(np.tensordot(E, v, axes=([0, 1], [0, 1])))
            else:
                ts.append(v)
        N = np.broadcast_shapes(*[np.shape(a) for a in args])
        return np.broadcast_to(logh, N), np.array([np.broadcast_to(t, N) for t in ts])

    # -- continuous: unconstrained coordinates ---------------------------------
    @property
    def ndim_u(self):
        f = self.fam
        if f.variable_kind == "matrix":
            return self.dim * (self.dim + 1) // 2
        if f.variable_kind in ("vector", "mixed"):
            return len(self.theta_args)
        if f.joint_support in ("simplex", "sphere"):
            return len(f.components) - 1
        return len(f.components)

    def from_u(self, u):
        """u (d, N) → (entries list, bars list, log Jacobian (N,))."""
        f = self.fam
        if f.variable_kind == "vector":
            return list(u), [], np.zeros(u.shape[1])
        if f.variable_kind == "matrix":
            # entries are the Cholesky coordinates u themselves (see __init__), of X or of X⁻¹
            if self.inverse_coords:
                return list(u), [], inverse_cholesky_log_jacobian(u, self.dim)
            return list(u), [], cholesky_log_jacobian(u, self.dim)
        if f.variable_kind == "mixed":
            logJ, k = np.zeros(u.shape[1]), 0
            for c, sup in zip(f.components, f.component_supports):
                n = 1 if not is_mat(c) else self.dim if c.shape[1] == 1 else self.dim * (self.dim + 1) // 2
                if is_mat(c) and c.shape[1] != 1:
                    logJ = logJ + cholesky_log_jacobian(u[k:k + n], self.dim)
                    if self.whiten is not None:          # θ = L^(∓ᵀ)v: |dθ/dv| = |L|^∓1 = exp(∓Σ u_ii)
                        sign = -1 if self.whiten[2] == "precision" else 1
                        logJ = logJ + sign * sum(u[k + i * (i + 3) // 2] for i in range(self.dim))
                elif sup == "positive":
                    logJ = logJ + u[k]
                k += n
            return list(u), [], logJ
        if f.joint_support == "sphere":
            return sphere_from_u(u)
        if f.joint_support == "simplex":
            K = len(f.components)
            logv, logvb = -np.logaddexp(0, -u), -np.logaddexp(0, u)
            entries, logrest = [], np.zeros(u.shape[1])
            logJ = np.zeros(u.shape[1])
            for k in range(K - 1):
                entries.append(np.exp(logv[k] + logrest))
                logJ = logJ + logv[k] + logvb[k] + logrest
                logrest = logrest + logvb[k]
            entries.append(np.exp(logrest))
            return entries, [], logJ
        entries, bars, logJ = [], [], np.zeros(u.shape[1])
        for k, (c, s) in enumerate(zip(f.components, f.component_supports)):
            if s == "real":
                entries.append(u[k])
            elif s == "positive":
                entries.append(np.exp(u[k]))
                logJ = logJ + u[k]
            elif s == "circular":              # θ = π(2σ(u) − 1) on (−π, π)
                lv, lvb = -np.logaddexp(0, -u[k]), -np.logaddexp(0, u[k])
                entries.append(np.pi * (np.exp(lv) - np.exp(lvb)))
                logJ = logJ + np.log(2 * np.pi) + lv + lvb
            else:
                lv, lvb = -np.logaddexp(0, -u[k]), -np.logaddexp(0, u[k])
                entries.append(np.exp(lv))
                bars.append(np.exp(lvb))
                logJ = logJ + lv + lvb
        return entries, bars, logJ


#: up to how many real components every subset is tried for a conditionally Gaussian one (beyond, all of them only)
MAX_SUBSET_SEARCH = 6


def conditionally_gaussian(fam) -> list:
    """The positions of the real scalar components in which log h + <λ, T> is a polynomial of degree 2 for every λ
    — the density is Gaussian in them given the other components (a normal-gamma's θ given τ: its spread, 1/√(κτ),
    grows without bound as τ → 0, where a shape below 1 puts the mass, and no grid scaled once sees it) — where
    some other component remains to integrate by a grid; [] otherwise.  The largest such set: each component in it
    has a square term (a linear one is not integrable alone)."""
    comps = list(fam.components)
    real = [c for c, s in zip(comps, fam.component_supports) if s == "real"]
    if not real or len(comps) < 2:
        return []
    try:
        expr = sp.expand(sp.sympify(fam.log_h) + scalarize(fam.inner(fam.lam, fam.T)))
    except (TypeError, ValueError, AttributeError):
        return []
    most = min(len(real), len(comps) - 1)            # one component at least stays on the grid
    sizes = range(most, 0, -1) if len(real) <= MAX_SUBSET_SEARCH else [most]
    for n in sizes:
        for subset in itertools.combinations(real, n):
            try:
                poly = sp.Poly(expr, *subset)
            except sp.PolynomialError:
                continue
            if poly.total_degree() == 2 and all(poly.coeff_monomial(c ** 2) != 0 for c in subset):
                return sorted(comps.index(c) for c in subset)
    return []


def near_one(lg, c, b):
    """log g(θ) with g(1) = 0 written in b = 1 − θ (log(1 − θ²) → log(b(2 − b))): near θ = 1 the quadrature's θ is
    1 − b rounded, and g(θ) computed from it loses every digit (1 − θ² for θ = 1 − 1e-12)."""
    arg = lg.args[0]
    if not arg.has(c) or not arg.is_polynomial(c) or sp.expand(arg.xreplace({c: 1})) != 0:
        return lg
    return sp.log(sp.factor(sp.expand(arg.xreplace({c: 1 - b}))))


#: how far (relative; log Z absolute) each result of the quadrature may move between steps 2h and h for it to
#: count as converged (:attr:`Quadrature.unsettled`): the square root of the tolerance of the check it is the
#: reference for (the error at h is about the square of the move); a correct Wishart at random points moves 1.4x
#: to 60x less
SETTLE_TOL = {"logZ": 1e-7 ** 0.5, "mean": 1e-7 ** 0.5, "cov": 1e-6 ** 0.5, "entropy": 1e-7 ** 0.5}


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(all="ignore"):
        v = np.max(np.abs(a - b) / np.maximum(1.0, np.abs(a))) if a.size else 0.0
    return float(v) if np.isfinite(v) else float("inf")


#: the factor of the step of the one finer rule tried where the first does not settle (Quadrature.unsettled)
REFINE = 0.8


#: the drop of log f (nats) that :meth:`Quadrature._mass_scale` looks for on each side of the mode
MASS_DROP = 2.0
#: the DE step of the coarse passes that find the density's mean and covariance before the fine rule
COARSE_STEP = 1 / 4


def exp_sinh_rule(h, xmin=1e-16, xmax=1e8):
    """exp-sinh (double-exponential) trapezoidal nodes x = exp(π/2 sinh t) in (0, ∞) and their log-weights, for
    x from ``xmin`` to ``xmax``."""
    t = np.arange(np.floor(np.arcsinh(np.log(xmin) * 2 / np.pi) / h),
                  np.ceil(np.arcsinh(np.log(xmax) * 2 / np.pi) / h) + 1) * h
    s = np.pi / 2 * np.sinh(t)
    return np.exp(s), np.log(h * np.pi / 2) + np.log(np.cosh(t)) + s


def de_rule(h, zmax=1e8):
    """sinh-sinh (double-exponential) trapezoidal nodes and weights on the real line."""
    tmax = np.arcsinh(np.arcsinh(zmax) * 2 / np.pi)
    t = np.arange(-np.ceil(tmax / h), np.ceil(tmax / h) + 1) * h
    s = np.pi / 2 * np.sinh(t)
    return np.sinh(s), np.log(h * np.pi / 2) + np.log(np.cosh(t)) + np.log(np.cosh(s))


def product_grid(z, lw1, d):
    """(Z (d, n^d), log-weights (n^d,)): the product of the 1-D rule (nodes ``z``, log-weights ``lw1``) with itself
    d times, in C order (what ``np.meshgrid(..., indexing="ij")`` raveled gives), the log-weights summed over the
    axes in order; built by broadcasting each axis, without d full-size grids per quantity."""
    n = len(z)
    shape = (n,) * d
    Z = np.empty((d, n ** d))
    lw = 0
    for k in range(d):
        axis = [1] * d
        axis[k] = n
        Z[k] = np.broadcast_to(z.reshape(axis), shape).ravel()
        lw = lw + lw1.reshape(axis)
    return Z, np.ravel(lw)


def parameter_point(fam, nf, vals, d):
    """At the family's ordinary parameters ``vals`` (as ``sample_params`` gives them): (fixed parameters' values,
    λ blocks, λ's coordinates c, A(c), μ = ∇A's coordinates from the derived μ(λ)) — what a :class:`Quadrature`
    and the comparisons with it read."""
    fixed_vals = {p.symbol: vals[p.symbol] for p in fam.fixed_params}
    lam_vals = {l: fam.evaluate(e, vals, d) for l, e in zip(fam.lam, fam.eta)}
    c = nf.coords_of(lam_vals)
    A = nf.A(c, fixed_vals)
    mu_c = nf.coords_of({u: fam.evaluate(m, {**lam_vals, **fixed_vals}, d) for u, m in zip(fam.mu, fam.mu_of_lam)})
    return fixed_vals, lam_vals, c, A, mu_c


class Quadrature:
    """Nodes θ_i with log-weights (including h and <λ, T>) for one parameter point."""

    def __init__(self, model: FamilyModel, c, fixed_vals, A):
        self.model, self.c, self.fixed_vals, self.A = model, c, fixed_vals, A
        self.conditional = None
        # (mask of the nodes of the rule of step 2h, the log of its weights' factor) where the rule is one product
        # of double-exponential rules (:attr:`unsettled` compares the two)
        self._coarse = None
        # True where the density carries mass beyond what double precision represents (θ under- or overflows, a
        # discrete sum cut at 2^16 terms): its results are then not a reference (blr_derive/verify/hunt.py)
        self.truncated = False
        if model.discrete:
            self._discrete()
        else:
            self._continuous()
        self._normalize()
        if self._coarse is not None and self.unsettled:
            # once more with a finer step: a density the rule resolves, but with slowly decaying tails (a Wishart's
            # det X^-0.75 at ν = 1.5, P = 2: Cov_q[T] moved by 1.1e-3, 1.1e-4 at 0.8 h), settles; one it does not
            # resolve (a funnel) does not, and stays unsettled
            self._grid(self.h * REFINE)
            for k in ("mean", "cov", "entropy", "halved", "unsettled"):
                self.__dict__.pop(k, None)
            self._normalize()

    def _normalize(self):
        lw = self.logw
        self.logZ = float(special.logsumexp(lw))
        self.p = np.exp(lw - self.logZ)

    def logf(self, entries, bars):
        logh, t = self.model.evaluate(entries, bars, self.fixed_vals)
        with np.errstate(all="ignore"):
            g = logh + self.c @ t
        # overflow far in the tails (e.g. exp(u) = inf) gives nan or ±inf: weight 0 there
        g = np.where(np.isfinite(g), g, -np.inf)
        return g, logh, t

    def _discrete(self):
        fam = self.model.fam
        pts = support_points(fam)
        if pts is not None:
            entries = [np.array([float(pt[c]) for pt in pts]) for c in fam.components]
            self._set(entries, [], np.zeros(len(pts)))
            return
        n = 64
        while True:
            pts = support_points(fam, n)
            entries = [np.array([float(pt[c]) for pt in pts]) for c in fam.components]
            g, _, _ = self.logf(entries, [])
            top = np.max(g)
            if len(fam.components) == 1 and np.all(g[-8:] < top - 60) and np.all(np.diff(g[-8:]) < 0):
                break
            if n >= 2**16:
                self.truncated = True           # the terms have not become negligible: the sum is cut short
                break
            n *= 2
        self._set(entries, [], np.zeros(len(pts)))

    def _set(self, entries, bars, extra):
        g, logh, t = self.logf(entries, bars)
        bad = ~np.all(np.isfinite(t), axis=0)
        if np.any(bad):                 # T overflows only where the density underflows: weight 0 there
            g = np.where(bad, -np.inf, g)
            t = np.where(bad, 0.0, t)
        self.entries, self.bars = entries, bars
        self.g, self.logh, self.t = g, logh, t
        self.logw = g + extra

    def _f_u(self, u):
        entries, bars, logJ = self.model.from_u(u)
        if self.model._logf is not None:
            if not hasattr(self, "_lam_args"):
                blocks = self.model.nf.blocks_of(self.c)
                self._lam_args = [x for l in self.model.fam.lam for x in self.model.nf.flatten(l, blocks[l])]
            with np.errstate(all="ignore"):
                g = self.model.log_f(entries, bars, self.fixed_vals, self._lam_args)
            return np.where(np.isfinite(g), g, -np.inf) + logJ
        g, _, _ = self.logf(entries, bars)
        return g + logJ

    def _continuous(self):
        d = self.model.ndim_u

        def neg(u):
            v = self._f_u(np.asarray(u, dtype=float).reshape(d, 1))[0]
            return -v if np.isfinite(v) else 1e300

        best = None
        for u0 in (np.zeros(d), np.full(d, 0.5), np.full(d, -0.5)):
            r = optimize.minimize(neg, u0, method="BFGS", options={"gtol": 1e-9})
            if best is None or r.fun < best.fun:
                best = r
        mode = best.x
        gaussian = getattr(self.model, "gaussian_coords", None)
        if gaussian:        # a vector integrated exactly (given the other coordinates, if any)
            self.conditional = ConditionalGaussian(self, mode, fd_hessian(lambda u: -neg(u), mode))
            u, extra = self.conditional.nodes(de_rule)
            entries, bars, _ = self.model.from_u(u)
            self.u = u
            self._set(entries, bars, extra)
            return
        center, L = self._spread(mode)
        self.mode, self.L = center, L
        self._grid({1: 1 / 32, 2: 1 / 32, 3: 1 / 20}.get(d, 1 / 8))

    def _grid(self, h):
        """The product of double-exponential rules of step ``h`` in u = mode + L z (the centre and scale of
        :meth:`_spread`)."""
        center, L, d = self.mode, self.L, len(self.mode)
        self.h = h
        if d == 1:
            # one coordinate: the line split at the centre, an exp-sinh rule on each side (in increasing order of u),
            # so that a kink at the mode (Laplace's |θ|) is an endpoint, not an O(h²) error of the trapezoidal rule
            x, lw1 = exp_sinh_rule(h)
            t1 = np.arcsinh(np.log(x) * 2 / np.pi)
            Z = np.concatenate([-x[::-1], x])[None, :]
            lw = np.concatenate([lw1[::-1], lw1])
            self.tnodes = np.concatenate([t1[::-1], t1])[None, :]
            self.sides = np.concatenate([-np.ones(len(x)), np.ones(len(x))])
        else:
            z, lw1 = de_rule(h)
            # the product grid in C order (meshgrid's "ij" raveled), built by broadcasting each axis's values
            # (the same numbers, without d full-size grids per quantity); the DE coordinates of the nodes only for
            # the draws of ``sample``, which index them
            self.tnodes, self._t_axis = None, np.arcsinh(np.arcsinh(z) * 2 / np.pi)
            self.sides = None
            Z, lw = product_grid(z, lw1, d)
        u = center[:, None] + L @ Z
        entries, bars, logJ = self.model.from_u(u)
        self.u = u
        self._set(entries, bars, lw + logJ + float(np.log(np.abs(np.linalg.det(L)))))
        # the rule of step 2h within this one: the nodes at even multiples of h along every axis
        t_axis = self.tnodes[0] if self.tnodes is not None else self._t_axis
        even = np.round(t_axis / h).astype(np.int64) % 2 == 0
        if self.tnodes is None:
            grid = np.ones((1,) * d, dtype=bool)
            for k in range(d):
                axis = [1] * d
                axis[k] = len(even)
                grid = grid & even.reshape(axis)
            even = grid.ravel()
        self._coarse = even, d * np.log(2.0)

    def _mass_scale(self, mode):
        """A scale per coordinate from a coarse search of where the mass lies: the distance from the mode, in each
        direction of each coordinate, at which log f has dropped by MASS_DROP (doubled or halved from 1, then
        bisected; √(2·MASS_DROP) standard deviations for a Gaussian).  Unlike the curvature at the mode, it is
        positive and finite where the density is flat at its mode (exp(−cθ⁴): zero curvature) or has a kink."""
        d = len(mode)
        f0 = float(self._f_u(mode.reshape(d, 1))[0])
        scales = np.ones(d)
        for k in range(d):
            widths = []
            for sign in (1.0, -1.0):
                last = [0.0]            # the drop at the farthest point where log f was still finite

                def drop(t):
                    x = mode.copy()
                    x[k] += sign * t
                    v = float(self._f_u(x.reshape(d, 1))[0])
                    if not np.isfinite(v):
                        if last[0] < TRUNCATION_DROP:
                            # θ under- or overflows in double precision where the density still carries mass
                            # (a Gamma with α = 1e-3: its mass reaches θ = e^-5000): the rule cannot see all of it
                            self.truncated = True
                        return np.inf
                    if t > 0:
                        last[0] = max(last[0], f0 - v)
                    return f0 - v
                lo, hi = 0.0, 1.0
                while drop(hi) < MASS_DROP and hi < 1e12:
                    lo, hi = hi, hi * 2
                if hi >= 1e12:                  # no drop this way within 1e12: the mass is far out (a scale of 1e12)
                    widths.append(hi)
                    continue
                for _ in range(60):             # drop(lo) < MASS_DROP <= drop(hi)
                    mid = 0.5 * (lo + hi) if lo > 0 else hi / 2
                    if hi - lo <= 1e-3 * hi or mid < 1e-300:
                        break
                    if drop(mid) < MASS_DROP:
                        lo = mid
                    else:
                        hi = mid
                widths.append(hi)
            scales[k] = max(0.5 * (widths[0] + widths[1]), 1e-300) / np.sqrt(2 * MASS_DROP)
        return scales

    def _moments(self, center, L, h):
        """(mean, covariance) of u under the density, by the DE rule of step ``h`` centred at ``center`` and
        scaled by ``L``; None where they are not finite."""
        d = len(center)
        z, lw1 = de_rule(h)
        Z = np.array([g.ravel() for g in np.meshgrid(*([z] * d), indexing="ij")])
        lw = sum(w.ravel() for w in np.meshgrid(*([lw1] * d), indexing="ij"))
        u = center[:, None] + L @ Z
        with np.errstate(all="ignore"):
            g = self._f_u(u) + lw
            if not np.any(np.isfinite(g)):
                return None
            p = np.exp(g - np.max(g))
            p = p / p.sum()
            mean = u @ p
            dev = u - mean[:, None]
            cov = (dev * p) @ dev.T
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))):
            return None
        return mean, cov

    def _spread(self, mode):
        """The centre and scale (lower-triangular L) of the fine rule: the family's own spread.  A coarse search of
        the mass around the mode (:meth:`_mass_scale`) scales a first coarse DE rule, whose mean and covariance of u
        scale a second; the fine rule is scaled by the Cholesky factor of the covariance of that second pass (its
        moments, not the curvature at the mode, which is zero for a density flat at its mode and local for a
        multimodal one).  It stays centred at the mode (a skewed density's double-exponential tail, the Gamma's in
        log θ, is integrated 100x more accurately from there than from the mean), unless the optimizer stopped
        more than 3 standard deviations from the mean, where the mean is the centre."""
        center, L = mode, np.diag(self._mass_scale(mode))
        for _ in range(2):
            m = self._moments(center, L, COARSE_STEP)
            if m is None:
                break
            mean, cov = m
            try:
                Lnew = np.linalg.cholesky(0.5 * (cov + cov.T))
            except np.linalg.LinAlgError:
                break
            if not np.all(np.isfinite(Lnew)) or np.min(np.abs(np.diag(Lnew))) <= 0:
                break
            far = np.linalg.norm(np.linalg.solve(Lnew, mode - mean)) > 3
            center, L = (mean if far else mode), Lnew
        return center, L

    # -- results -------------------------------------------------------------
    @cached_property
    def halved(self):
        """(log ∫ h exp(<λ,T>), E_q[T], Cov_q[T], −∫ q log q) by the rule of step 2h made of every other node of
        this one (the same nodes, weights doubled along every axis), or None where the rule is not one product of
        double-exponential rules (a sum, a conditionally Gaussian rule)."""
        if self._coarse is None:
            return None
        mask, logfac = self._coarse
        lw = self.logw[mask] + logfac
        logZ = float(special.logsumexp(lw))
        p = np.exp(lw - logZ)
        t = self.t[:, mask]
        mean = t @ p
        dev = t - mean[:, None]
        ok = p > 0
        return logZ, mean, (dev * p) @ dev.T, float(logZ - np.sum(p[ok] * self.g[mask][ok]))

    @cached_property
    def unsettled(self) -> dict:
        """How far the rule's results moved when it was refined from step 2h to h ({"logZ", "mean", "cov",
        "entropy"} -> the move, relative as the checks measure, log Z absolute) where any of them moved by more than
        its SETTLE_TOL; {} where all settled.  The double-exponential rule converges like exp(−c/h) on an integrand
        it resolves (the error at h about the square of that at 2h): a Wishart's 3 coordinates at the random points
        of check move by at most 6.9e-4 (Cov_q[T]; 1e-4 E_q[T], 5e-6 log Z) with the h rule normalized to 2e-9.
        Where a result moves by more, the grid does not resolve the density (mass in a funnel or a tail that the
        spread it was scaled by does not follow) and none of its results is a reference: an inverse Wishart at
        ν = 1.5 in the Cholesky coordinates of X moves log Z by log 2, a single node carrying the mass at both steps
        (∫ q came out 5.8e6), while E_q[T] moved by 8e-6 only; at ν = 2.93 Cov_q[T] moved by 7e-3, −∫ q log q
        by 2.8e-4 only (within its own SETTLE_TOL) and was off by 2.7e-7.  It is a test, not a bound: in such a
        funnel the rule converges algebraically, not like exp(−c/h), and at ν = 3.11 (after the finer rule of
        REFINE) every result moved within its SETTLE_TOL (log Z by 8.2e-6) while −∫ q log q was off by 1.3e-7."""
        half = self.halved
        if half is None:
            return {}
        logZ, mean, cov, entropy = half
        ok = self.p > 0
        own = float(self.logZ - np.sum(self.p[ok] * self.g[ok]))       # −∫ q log q with q normalized by the rule
        moved = {"logZ": abs(logZ - self.logZ) if np.isfinite(logZ) else np.inf,
                 "mean": _rel(self.mean, mean), "cov": _rel(self.cov, cov), "entropy": _rel(own, entropy)}
        return moved if not all(v <= SETTLE_TOL[k] for k, v in moved.items()) else {}

    @property
    def normalization(self):
        return float(np.exp(self.logZ - self.A))

    @cached_property
    def mean(self):
        return self.t @ self.p

    @cached_property
    def cov(self):
        """Cov_q[T] by the corrected two-pass sum (Chan, Golub & LeVeque 1983): Σp·d·dᵀ − (Σp·d)(Σp·d)ᵀ/Σp with d = T −
        mean.  The second term takes out the mean's own rounding, which the first squares into every node: two
        coupled spins with a field of 30 have Var(s2) = 4/(e^60 + 1) = 3.50260e-26, and the weights' sum 1 + 1.8e-15
        put the mean at 1 + 1.8e-15, whose deviation at the two likely states added 3.2e-30 (9e-5 of it)."""
        d = self.t - self.mean[:, None]
        s = d @ self.p
        return (d * self.p) @ d.T - np.outer(s, s) / np.sum(self.p)

    @cached_property
    def entropy(self):
        """-∫ q log q with q = h exp(<λ,T> - A) (the declared A, not renormalized)."""
        q = np.exp(self.logw - self.A)
        logq = self.g - self.A
        ok = q > 0
        return float(-np.sum(q[ok] * logq[ok]))

    def sample(self, rng, n):
        """n samples of T (rows): exact for discrete supports (from the enumerated probabilities);
        for continuous ones from the density tabulated on the quadrature grid: a grid cell is drawn
        with its probability (inverse CDF over the cells) and the point is uniform within the cell
        in the double-exponential coordinates (an O(h²) approximation)."""
        if self.conditional is not None:
            return self.conditional.sample(rng, n)
        idx = rng.choice(len(self.p), size=n, p=self.p / self.p.sum())
        if self.model.discrete:
            return self.t[:, idx].T
        d = len(self.mode)
        if self.tnodes is not None:
            at = self.tnodes[:, idx]
        else:                                   # the product grid's node idx: its index along each axis
            at = np.array([self._t_axis[k] for k in np.unravel_index(idx, (len(self._t_axis),) * d)])
        tk = at + self.h * (rng.uniform(size=(d, n)) - 0.5)
        if self.sides is not None:              # the split exp-sinh rule of one coordinate
            z = self.sides[idx] * np.exp(np.pi / 2 * np.sinh(tk))
        else:
            z = np.sinh(np.pi / 2 * np.sinh(tk))
        u = self.mode[:, None] + self.L @ z
        entries, bars, _ = self.model.from_u(u)
        _, _, t = self.logf(entries, bars)
        return t.T
