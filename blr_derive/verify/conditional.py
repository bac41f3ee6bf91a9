"""Quadrature for a variable with a vector component in which the density is Gaussian given the other components
(the normal–Wishart's mean θ given its precision Λ), or real scalar components that are (the normal-gamma's θ given
τ, whose spread 1/√(κτ) no grid scaled once follows as τ → 0): the other coordinates by the double-exponential rule
(``quadrature.de_rule``), the Gaussian coordinates at each of those nodes by the Gauss–Hermite rule of their
conditional Gaussian, which is exact for polynomials of degree 5 in them — the moments of T (degree ≤ 2), its
covariance (degree 4) and log q (degree 2) — so a 5-dimensional check at P = 2 costs a 3-dimensional grid.

The conditional Gaussian is not assumed: at each outer node, log f is read off as a quadratic from 1 + 2P + P(P−1)/2
evaluations and the fit is checked at another point; a density that is not Gaussian in the vector given the rest is a
located failure of the check, not a wrong number."""
from __future__ import annotations

import itertools

import numpy as np
from scipy import ndimage, optimize, special

from blr_derive.core.errors import DerivationError
from blr_derive.verify.numdiff import fd_hessian


#: Gauss–Hermite rule of N(0, 1) with 3 nodes: exact for polynomials of degree 5
GH_NODES = np.array([-np.sqrt(3.0), 0.0, np.sqrt(3.0)])
GH_LOG_WEIGHTS = np.log(np.array([1 / 6, 2 / 3, 1 / 6]))

#: DE step of the outer grid by its dimension
OUTER_STEP = {1: 1 / 32, 2: 1 / 24, 3: 1 / 20}

#: the outer grid reaches this many standard deviations, as the plain DE rule does (an inverse Wishart's heavy tail needs
#: it; the coarse pass keeps the far nodes cheap)
OUTER_REACH = 1e8

#: the coarse pass of the outer grid takes every COARSE-th node of the fine DE rule
COARSE = 4

#: outer points whose conditional integral is below the largest by this much (log) carry no mass
TAIL_DROP = 60.0

#: log f that has dropped by less than this (nats) where the density leaves double precision: the quadrature misses
#: mass (``Quadrature.truncated``)
TRUNCATION_DROP = 40.0

#: the largest number of outer coordinates
MAX_OUTER = 3

#: the most fits of the conditional Gaussian at an outer point (each re-whitens, or widens a probe that saw no curvature)
MAX_FITS = 40
#: the factor by which a probe that saw no curvature is widened, and the widest probe (its largest entry)
WIDEN = 1e3
WIDEST = 1e150


def _mv(A, x):
    """A batch of matrix-vector products: A (M, P, P), x (M, P) → (M, P)."""
    return (A @ x[:, :, None])[:, :, 0]


class ConditionalGaussian:
    """Nodes and log-weights of the outer × conditional Gauss–Hermite rule for :class:`Quadrature`."""

    def __init__(self, quad, mode, H):
        model = quad.model
        d = model.ndim_u
        self.quad, self.gi = quad, list(model.gaussian_coords)
        self.oi = [k for k in range(d) if k not in self.gi]
        if len(self.oi) > MAX_OUTER:
            raise DerivationError(f"the numeric checks integrate over at most {MAX_OUTER} coordinates besides a "
                                  f"conditionally Gaussian vector; this variable has {len(self.oi)}")
        cov = np.linalg.inv(-H)
        self.base = mode[self.gi]
        self.scale = np.sqrt(np.abs(np.diag(cov)[self.gi]))
        # the outer grid is centred at the mode of the outer coordinates' marginal, log ∫ f du_g, and scaled by its
        # Hessian there (the joint mode is shifted from it by the vector's integral: a DE grid there needs a step
        # half as long for the same accuracy)
        self.mode_o = mode[self.oi]
        self.L_o = np.linalg.cholesky(cov[np.ix_(self.oi, self.oi)]) if self.oi else np.zeros((0, 0))
        self.h = OUTER_STEP.get(len(self.oi), 1.0)
        if not self.oi:                   # every coordinate Gaussian: one Gauss–Hermite rule, no outer grid
            return

        def neg(uo):
            v = self.conditional(np.asarray(uo, dtype=float)[:, None])[2][0]
            return -v if np.isfinite(v) else 1e300
        r = optimize.minimize(neg, self.mode_o, method="BFGS", options={"gtol": 1e-9})
        Ho = fd_hessian(lambda x: -neg(x), r.x)
        try:
            self.mode_o, self.L_o = r.x, np.linalg.cholesky(np.linalg.inv(-Ho))
        except np.linalg.LinAlgError:
            pass                          # keep the joint mode's scaling

    def _u(self, uo, ug):
        u = np.empty((len(self.oi) + len(self.gi), uo.shape[1]))
        u[self.oi], u[self.gi] = uo, ug
        return u

    def _fit(self, uo, b, W):
        """log f at u_g = b + W x as a quadratic f0 + gᵀx + ½xᵀQx in x, per outer point (b (P, M), W (M, P, P))."""
        P = len(self.gi)

        def f(x):
            return self._at(uo, b, W, x)
        eye = np.eye(P)
        f0 = f(np.zeros(P))
        fp = np.array([f(eye[i]) for i in range(P)])
        fm = np.array([f(-eye[i]) for i in range(P)])
        Q = np.zeros((uo.shape[1], P, P))
        with np.errstate(all="ignore"):
            g = (fp - fm) / 2
            for i in range(P):
                Q[:, i, i] = fp[i] + fm[i] - 2 * f0
            for i, j in itertools.combinations(range(P), 2):
                Q[:, i, j] = Q[:, j, i] = f(eye[i] + eye[j]) - fp[i] - fp[j] + f0
        return f0, g, Q

    def _at(self, uo, b, W, x):
        return self.quad._f_u(self._u(uo, b + (W @ x).T))

    def conditional(self, uo):
        """The Gaussian in the vector's coordinates at outer points uo (d_o, M): (mean (P, M), a factor Lc of the
        covariance (M, P, P), log of ∫ f du_g (M,)); points where the density is 0 or not concave in the vector get
        -inf.  The fit is repeated in the coordinates whitened by the previous fit (centred at its mean, scaled by
        its covariance's factor) until the curvature is the identity and the mean the origin, so that the
        differences of log f are O(1) in every direction — a precision κΛ that is near-singular far in the tails
        would otherwise leave its small eigenvalue to rounding noise."""
        P, M = len(self.gi), uo.shape[1]
        b = np.repeat(self.base[:, None], M, axis=1)
        W = np.repeat(np.diag(self.scale)[None], M, axis=0)
        f0, g, Q = np.zeros(M), np.zeros((P, M)), np.zeros((M, P, P))
        # the eigen-decomposition of each point's last fit (eigh works matrix by matrix: the same matrix gives the
        # same values in any batch), so that the final pass need not decompose them again
        ev_all, vec_all = np.zeros((M, P)), np.zeros((M, P, P))
        ok = np.ones(M, dtype=bool)
        todo = np.arange(M)
        for _ in range(MAX_FITS):
            a0, ag, aQ = self._fit(uo[:, todo], b[:, todo], W[todo])
            f0[todo], g[:, todo], Q[todo] = a0, ag, aQ
            with np.errstate(all="ignore"):
                live = np.isfinite(a0) & np.all(np.isfinite(aQ), axis=(1, 2)) & np.all(np.isfinite(ag), axis=0)
                ev, vec = np.linalg.eigh(np.where(live[:, None, None], aQ, -np.eye(P)))
                ev_all[todo], vec_all[todo] = ev, vec
                # a curvature lost in rounding: the conditional spread is far wider than the probe (a normal-gamma's
                # θ given τ = e^-40 spreads over e^20); the probe is widened and the fit repeated, while the density
                # stays finite there (the widest probes, where θ² overflows, are not a fit: no mass the checks see)
                flat = live & ~(ev.max(axis=1) < 0) & (np.max(np.abs(W[todo]), axis=(1, 2)) < WIDEST)
                live &= ev.max(axis=1) < 0
                ev = np.where(live[:, None], ev, -1.0)
                x_star = _mv(vec, -1.0 / ev * _mv(np.swapaxes(vec, 1, 2), np.where(live, ag, 0.0).T)).T
                whitened = np.all((-ev > 0.01) & (-ev < 100), axis=1) & np.all(np.abs(x_star) < 100, axis=0)
            ok[todo[~live & ~flat]] = False
            wide = todo[flat]
            W[wide] = W[wide] * WIDEN
            again = live & ~whitened
            upd = todo[again]
            if not len(upd) and not len(wide):
                todo = upd
                break
            # the new coordinates: x = x* + (−Q)^(-1/2) y
            R = (vec * np.sqrt(-1.0 / ev)[:, None, :])[again]
            b[:, upd] = b[:, upd] + _mv(W[upd], x_star[:, again].T).T
            W[upd] = W[upd] @ R
            todo = np.sort(np.concatenate([upd, wide]))
        ok[todo] = False                          # the fit did not settle: no mass the checks can use there
        with np.errstate(all="ignore"):
            # eigh(Q) where ok (Q is the last fit, decomposed in the loop), eigh(−I) elsewhere
            ev, vec = ev_all, vec_all
            if not np.all(ok):
                ev[~ok], vec[~ok] = np.linalg.eigh(-np.eye(P))
            ev = np.where(ok[:, None], ev, -1.0)
            x_star = _mv(vec, -1.0 / ev * _mv(np.swapaxes(vec, 1, 2), np.where(ok, g, 0.0).T)).T
            # the fit must be a quadratic: check it at another point
            xt = np.linspace(0.7, -0.4, P)
            pred = f0 + g.T @ xt + 0.5 * (Q @ xt) @ xt
            got = self._at(uo, b, W, xt)
            bad = ok & ~(np.abs(got - pred) <= 1e-6 * (1 + np.abs(f0)))
        mean = b + _mv(W, x_star.T).T
        logdet = np.sum(-np.log(-ev), axis=1) + 2 * np.log(np.abs(np.linalg.det(W)))
        fmax = f0 + 0.5 * np.sum(g * x_star, axis=0)
        logint = np.where(ok, fmax + 0.5 * P * np.log(2 * np.pi) + 0.5 * logdet, -np.inf)
        if np.any(bad):
            # far in the tails (a precision of e^-277 next to entries of 1e2) log f loses its digits to rounding;
            # such points carry no mass, and are dropped; anywhere else the density is not conditionally Gaussian
            top = np.max(logint[ok & ~bad], initial=-np.inf)
            if np.any(logint[bad] > top - TAIL_DROP):
                raise DerivationError("the density is not Gaussian in the vector component given the others (the "
                                      "quadratic fit fails at an outer node); no quadrature applies")
            logint = np.where(bad, -np.inf, logint)
        Lc = W @ (vec * np.sqrt(-1.0 / ev)[:, None, :])          # Lc Lcᵀ = cov_u
        return mean, Lc, logint

    def nodes(self, de_rule):
        """(u (d, N), extra (N,)): the nodes, and what ``Quadrature._set`` adds to log h + <λ, T> at each so that
        the log-weight is the outer DE weight × ∫ f du_g there × the GH weight.  ``de_rule(h)`` gives the 1-D DE
        nodes and log-weights."""
        do, P = len(self.oi), len(self.gi)
        if do:
            z, lw1 = de_rule(self.h, OUTER_REACH)
            t1 = np.arcsinh(np.arcsinh(z) * 2 / np.pi)
            idx = np.array([g.ravel() for g in np.meshgrid(*([np.arange(len(z))] * do), indexing="ij")])
            idx = idx[:, self._alive(idx, z, lw1, len(z) // 2)]
            self.tnodes = t1[idx]
            lw = lw1[idx].sum(axis=0)
            uo = self.mode_o[:, None] + self.L_o @ z[idx]
        else:
            self.tnodes, lw, uo = np.zeros((0, 1)), np.zeros(1), np.zeros((0, 1))
        mean, Lc, logint = self.conditional(uo)
        lw_o = lw + (float(np.log(abs(np.linalg.det(self.L_o)))) if do else 0.0) + logint
        keep = lw_o > np.max(lw_o) - TAIL_DROP       # outer nodes of relative weight < e^-60 contribute nothing
        self.tnodes, uo, lw_o, mean, Lc = self.tnodes[:, keep], uo[:, keep], lw_o[keep], mean[:, keep], Lc[keep]
        self.outer_logw = lw_o
        gh = np.array(list(itertools.product(GH_NODES, repeat=P))).T          # (P, K)
        gw = np.array([sum(c) for c in itertools.product(GH_LOG_WEIGHTS, repeat=P)])
        M, K = uo.shape[1], gh.shape[1]
        ug = (mean[:, :, None] + np.transpose(Lc @ gh, (1, 0, 2))).reshape(P, M * K)
        u = self._u(np.repeat(uo, K, axis=1), ug)
        # f = g + log J at the node; _set adds g back, so the log-weight is lw_o + gw
        _, _, logJ = self.quad.model.from_u(u)
        return u, (lw_o[:, None] + gw[None, :]).ravel() - self.quad._f_u(u) + logJ

    def _alive(self, idx, z, lw1, c):
        """Which nodes (multi-indices idx into the 1-D DE rule, c its centre) can carry mass: the rule with every
        COARSE-th node is evaluated first, and a node is kept when the coarse node nearest to it, or one next to
        that, is within TAIL_DROP + 20 of the largest log-weight.  The far tails the DE rule reaches (1e8 standard
        deviations, for heavy tails like an inverse Wishart's) then cost a coarse grid, not the fine one."""
        r = COARSE
        kc = np.arange(-(c // r), c // r + 1)                     # coarse offsets from the centre
        grid = np.array([g.ravel() for g in np.meshgrid(*([c + r * kc] * len(self.oi)), indexing="ij")])
        _, _, logint = self.conditional(self.mode_o[:, None] + self.L_o @ z[grid])
        lw = lw1[grid].sum(axis=0) + logint
        shape = (len(kc),) * len(self.oi)
        # mass next to where the density leaves double precision (τ = e^u underflows for a normal-gamma with
        # α = 5e-7, whose mass reaches τ = e^-2e6) or at the rule's last node: the grid cannot see all of it
        dead = np.pad(~np.isfinite(lw).reshape(shape), 1, constant_values=True)
        near = ndimage.binary_dilation(dead, structure=np.ones((3,) * len(self.oi), dtype=bool))
        near = near[(slice(1, -1),) * len(self.oi)]
        if np.any(near & (lw > np.max(lw) - TRUNCATION_DROP).reshape(shape)):
            self.quad.truncated = True
        alive = (lw > np.max(lw) - TAIL_DROP - 20).reshape(shape)
        alive = ndimage.binary_dilation(alive, structure=np.ones((3,) * len(self.oi), dtype=bool))
        k = np.clip(np.rint((idx - c) / r).astype(int) + c // r, 0, len(kc) - 1)
        return alive[tuple(k)]

    def sample(self, rng, n):
        """n draws of T: an outer cell by its weight, uniform within the cell in the DE coordinates (as
        ``Quadrature.sample``), then the vector exactly from its conditional Gaussian there."""
        p = np.exp(self.outer_logw - special.logsumexp(self.outer_logw))
        idx = rng.choice(len(p), size=n, p=p / p.sum())
        do, P = len(self.oi), len(self.gi)
        tk = self.tnodes[:, idx] + self.h * (rng.uniform(size=(do, n)) - 0.5)
        uo = self.mode_o[:, None] + self.L_o @ np.sinh(np.pi / 2 * np.sinh(tk))
        mean, Lc, _ = self.conditional(uo)
        ug = mean + _mv(Lc, rng.standard_normal((n, P))).T
        entries, bars, _ = self.quad.model.from_u(self._u(uo, ug))
        _, _, t = self.quad.logf(entries, bars)
        return t.T
