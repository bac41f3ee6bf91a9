"""Independent numerics for the family checks: the family compiled to numpy in unconstrained coordinates
(:class:`FamilyModel`), quadrature by the double-exponential rule centred at the mode (:class:`Quadrature`),
exact or grid-tabulated Monte Carlo samples, and finite-difference Hessians."""
from __future__ import annotations

import numpy as np
import sympy as sp
from scipy import optimize, special

from blr_derive.core.matexpr import is_mat
from blr_derive.families.partition import support_points


class FamilyModel:
    """A family at one dimension: compiled log h, T (in λ coordinates) and the θ parametrization."""

    def __init__(self, fam, dim: int):
        self.fam = fam
        self.nf = fam.numeric(dim)
        self.dim = self.nf.dim
        self.fixed = [p.symbol for p in fam.fixed_params]
        self.bars = {}                 # component -> symbol standing for 1 - component (unit interval)
        reps = {}
        if fam.components:
            self.theta_args = [sp.Dummy(str(c), real=True) for c in fam.components]
            reps = dict(zip(fam.components, self.theta_args))
            for c, s in zip(fam.components, fam.component_supports):
                if s == "unit_interval":
                    self.bars[c] = sp.Dummy(f"one_minus_{c}", positive=True)
        elif fam.variable_kind == "vector":
            self.theta_args = [sp.Dummy(f"theta_{i}", real=True) for i in range(self.dim)]
            reps = {fam.theta: sp.ImmutableMatrix(self.theta_args)}
        else:
            # X = L Lᵀ with L lower triangular, L_ii = exp(u_ii): log det X = 2 Σ u_ii exactly, no cancellation
            P = self.dim
            self.theta_args = []
            L = sp.zeros(P, P)
            for i in range(P):
                for j in range(i + 1):
                    u = sp.Dummy(f"u_{i}{j}", real=True)
                    self.theta_args.append(u)
                    L[i, j] = sp.exp(u) if i == j else u
            reps = {fam.theta: sp.ImmutableMatrix(L * L.T)}

        def prep(e):
            e = sp.sympify(e)
            for c, b in self.bars.items():
                e = e.subs(1 - c, b)
            return e

        def post(e):
            if fam.variable_kind == "matrix" and isinstance(e, sp.Basic) and e.has(sp.log):
                e = e.xreplace({lg: sp.expand_log(sp.log(sp.expand(lg.args[0])), force=True)
                                for lg in e.atoms(sp.log)})
            return e

        targs = list(self.bars.values()) + self.theta_args
        self._logh = self.nf.compile(prep(fam.log_h), targs, self.fixed, reps, post)
        self._T = [self.nf.compile(prep(t), targs, self.fixed, reps, post) for t in fam.T]
        self.discrete = fam.is_discrete

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
        if f.variable_kind == "vector":
            return self.dim
        if f.joint_support in ("simplex", "sphere"):
            return len(f.components) - 1
        return len(f.components)

    def from_u(self, u):
        """u (d, N) → (entries list, bars list, log Jacobian (N,))."""
        f = self.fam
        if f.variable_kind == "vector":
            return list(u), [], np.zeros(u.shape[1])
        if f.variable_kind == "matrix":
            # entries are the Cholesky coordinates u themselves (see __init__)
            P = self.dim
            logJ = np.full(u.shape[1], P * np.log(2.0))
            k = 0
            for i in range(P):
                for j in range(i + 1):
                    if i == j:
                        logJ = logJ + (P - i + 1) * u[k]      # 2^P Π L_ii^(P-i) (0-based) and dL_ii = L_ii du
                    k += 1
            return list(u), [], logJ
        if f.joint_support == "sphere":
            return _sphere_from_u(u)
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


def _sphere_from_u(u):
    """Hyperspherical coordinates on S^(K-1) from u (K-1, N): polar angles φ_j = π σ(u_j) ∈ (0, π) for
    j < K-1 and the azimuth φ_{K-1} = π(2σ(u) − 1) ∈ (−π, π); x_1 = cos φ_1, x_j = Π_{i<j} sin φ_i cos φ_j, x_K =
    Π sin φ_i; surface element Π_j sin^(K-1-j) φ_j, times dφ/du."""
    d = u.shape[0]
    lv, lvb = -np.logaddexp(0, -u), -np.logaddexp(0, u)
    phi = np.pi * np.exp(lv)
    phi[d - 1] = np.pi * (np.exp(lv[d - 1]) - np.exp(lvb[d - 1]))
    logJ = np.sum(lv + lvb, axis=0) + (d - 1) * np.log(np.pi) + np.log(2 * np.pi)
    entries, s = [], np.ones(u.shape[1])
    for j in range(d):
        entries.append(s * np.cos(phi[j]))
        if j < d - 1:
            with np.errstate(divide="ignore"):
                logJ = logJ + (d - 1 - j) * np.log(np.sin(phi[j]))
        s = s * np.sin(phi[j])
    entries.append(s)
    return entries, [], logJ


def de_rule(h, zmax=1e8):
    """sinh-sinh (double-exponential) trapezoidal nodes and weights on the real line."""
    tmax = np.arcsinh(np.arcsinh(zmax) * 2 / np.pi)
    t = np.arange(-np.ceil(tmax / h), np.ceil(tmax / h) + 1) * h
    s = np.pi / 2 * np.sinh(t)
    return np.sinh(s), np.log(h * np.pi / 2) + np.log(np.cosh(t)) + np.log(np.cosh(s))


class Quadrature:
    """Nodes θ_i with log-weights (including h and <λ, T>) for one parameter point."""

    def __init__(self, model: FamilyModel, c, fixed_vals, A):
        self.model, self.c, self.fixed_vals, self.A = model, c, fixed_vals, A
        if model.discrete:
            self._discrete()
        else:
            self._continuous()
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
            if (len(fam.components) == 1 and np.all(g[-8:] < top - 60) and np.all(np.diff(g[-8:]) < 0)) or n >= 2**16:
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
        H = fd_hessian(lambda u: -neg(u), mode)
        try:
            L = np.linalg.cholesky(np.linalg.inv(-H))
        except np.linalg.LinAlgError:
            L = np.diag(1.0 / np.sqrt(np.maximum(np.abs(np.diag(H)), 1e-8)))
        self.mode, self.L = mode, L
        h = {1: 1 / 32, 2: 1 / 32, 3: 1 / 20}.get(d, 1 / 8)
        z, lw1 = de_rule(h)
        t1 = np.arcsinh(np.arcsinh(z) * 2 / np.pi)
        grids = np.meshgrid(*([z] * d), indexing="ij")
        lws = np.meshgrid(*([lw1] * d), indexing="ij")
        self.h = h
        self.tnodes = np.array([g.ravel() for g in np.meshgrid(*([t1] * d), indexing="ij")])
        Z = np.array([g.ravel() for g in grids])
        lw = sum(w.ravel() for w in lws)
        u = mode[:, None] + L @ Z
        entries, bars, logJ = self.model.from_u(u)
        self.u = u
        self._set(entries, bars, lw + logJ + float(np.log(np.abs(np.linalg.det(L)))))

    # -- results -------------------------------------------------------------
    @property
    def normalization(self):
        return float(np.exp(self.logZ - self.A))

    @property
    def mean(self):
        return self.t @ self.p

    @property
    def cov(self):
        d = self.t - self.mean[:, None]
        return (d * self.p) @ d.T

    @property
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
        idx = rng.choice(len(self.p), size=n, p=self.p / self.p.sum())
        if self.model.discrete:
            return self.t[:, idx].T
        d = len(self.mode)
        tk = self.tnodes[:, idx] + self.h * (rng.uniform(size=(d, n)) - 0.5)
        u = self.mode[:, None] + self.L @ np.sinh(np.pi / 2 * np.sinh(tk))
        entries, bars, _ = self.model.from_u(u)
        _, _, t = self.logf(entries, bars)
        return t.T


def fd_hessian(f, x, eps=1e-4):
    d = len(x)
    H = np.zeros((d, d))
    for i in range(d):
        for j in range(i, d):
            ei = np.zeros(d)
            ej = np.zeros(d)
            ei[i] = eps
            ej[j] = eps
            H[i, j] = H[j, i] = (f(x + ei + ej) - f(x + ei - ej) - f(x - ei + ej) + f(x - ei - ej)) / (4 * eps * eps)
    return H
