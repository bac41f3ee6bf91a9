"""``blr-derive check``: numeric verification of a family declaration.

Everything the engine derives (or takes as declared) for a family is compared, at a few
random valid parameter points (seeded), with an independent numerical computation:

====================================  =====================================================
check                                 compared with
====================================  =====================================================
``normalization``                     ∫ h exp(<λ,T> - A) = 1 (quadrature / summation)
``mu_vs_quadrature``                  μ = ∇A(λ) against E_q[T] by quadrature / summation
``mu_vs_monte_carlo``                 μ against the mean of T over exact samples of q
                                      (rejection sampling; value: the largest z-score)
``mu_vs_finite_differences``          μ against central differences of A(λ)
``mu_ordinary``                       μ(ordinary) (declared or derived) against ∇A(λ(ordinary))
``fisher_positive_definite``          F = ∇²A(λ): smallest / largest eigenvalue
``fisher_vs_covariance``              F against Cov_q[T] by quadrature / summation
``entropy_vs_quadrature``             H(q) = A - <λ,μ> - E[log h] against -∫ q log q
``round_trip_natural``                ordinary → λ → ordinary
``round_trip_expectation``            ordinary → μ → ordinary (closed form, or Newton's
                                      method when the inverse is numeric)
====================================  =====================================================

Errors are ``|got - want| / max(1, |want|)`` (absolute below 1, relative above), the maximum
over the parameter points and the components.  Matrix families are checked at ``dim`` = 2.

Quadrature works in unconstrained coordinates u: θ = u on the real line, θ = e^u on the
positive half-line, θ = σ(u) (with 1 - θ = σ(-u) computed separately) on the unit interval,
stick-breaking on the simplex and Cholesky factors with log-diagonals for positive-definite
matrices.  It is centred at the mode of the density in u and scaled by the Hessian there,
and uses the double-exponential (sinh-sinh) trapezoidal rule in every coordinate, which
also handles the integrable endpoint singularities of, e.g., Gamma and Beta densities.
Discrete supports are summed exactly (the Poisson-like sums until the terms are negligible).
Monte Carlo samples are exact for discrete supports (drawn from the enumerated
probabilities); for continuous ones they are drawn from the density tabulated on the
quadrature grid (a cell by inverse CDF, then uniformly within the cell), so that
funnel-shaped densities such as the normal-gamma need no envelope.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy as sp
from scipy import optimize, special

from blr_derive.core.errors import BLRError, DerivationError
from blr_derive.families.family import Family, load_family, support_points
from blr_derive.core.matcalc import is_mat
from blr_derive.core.yamlio import load_yaml_file

MAX_QUADRATURE_DIM = 4
TOLERANCES = {
    "normalization": 1e-7,
    "mu_vs_quadrature": 1e-7,
    "mu_vs_monte_carlo": 5.0,           # z-score
    "mu_vs_finite_differences": 1e-6,
    "mu_ordinary": 1e-9,
    "fisher_positive_definite": 1e-10,  # smallest/largest eigenvalue must exceed this
    "fisher_vs_covariance": 1e-6,
    "entropy_vs_quadrature": 1e-7,
    "round_trip_natural": 1e-9,
    "round_trip_expectation": 1e-8,
}
DESCRIPTIONS = {
    "normalization": "∫ h exp(<λ,T> - A) = 1",
    "mu_vs_quadrature": "∇A(λ) = E_q[T] (quadrature/summation)",
    "mu_vs_monte_carlo": "∇A(λ) = mean of T over samples (z-score)",
    "mu_vs_finite_differences": "∇A(λ) = central differences of A",
    "mu_ordinary": "μ(ordinary) = ∇A(λ(ordinary))",
    "fisher_positive_definite": "min/max eigenvalue of ∇²A(λ)",
    "fisher_vs_covariance": "∇²A(λ) = Cov_q[T]",
    "entropy_vs_quadrature": "A - <λ,μ> - E[log h] = -∫ q log q",
    "round_trip_natural": "ordinary → λ → ordinary",
    "round_trip_expectation": "ordinary → μ → ordinary",
}
HINTS = {
    "normalization": "the log-partition does not normalize h·exp(<λ,T>) (check log_partition and base_measure)",
    "mu_vs_quadrature": "∇A(λ) is not the mean of T under q (check log_partition)",
    "mu_vs_monte_carlo": "∇A(λ) is not the mean of T over samples of q (check log_partition)",
    "mu_vs_finite_differences": "the derived gradient of A disagrees with finite differences",
    "mu_ordinary": "the expectation parameters in ordinary parameters disagree with ∇A(λ(ordinary))",
    "fisher_positive_definite": "the Fisher information is not positive definite (A is not strictly convex)",
    "fisher_vs_covariance": "∇²A(λ) is not the covariance of T under q (check log_partition)",
    "entropy_vs_quadrature": "the entropy disagrees with -∫ q log q (check log_partition and base_measure)",
    "round_trip_natural": "the inverse of the natural-parameter map does not reproduce the parameters",
    "round_trip_expectation": "the inverse of the expectation-parameter map does not reproduce the parameters",
}


@dataclass
class Check:
    name: str
    value: float
    tol: float
    kind: str = "max"          # "max": passes when value <= tol; "min": passes when value >= tol
    note: str = ""

    @property
    def passed(self) -> bool:
        if not np.isfinite(self.value):
            return False
        return self.value <= self.tol if self.kind == "max" else self.value >= self.tol


@dataclass
class Report:
    title: str
    family: Family | None
    checks: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failed(self):
        return [c for c in self.checks if not c.passed]


def check_recipe_updates(recipe, points: int = 3) -> list:
    """The generated numpy update against the symbolic update it was derived as, at random inputs.

    Relative error max|generated - symbolic| / max(|symbolic|, 1), tolerance 1e-10."""
    import types

    from blr_derive.codegen import emit

    from blr_derive.candidates.single import derive
    from blr_derive.ir.build import build_ir
    from blr_derive.verify.update import compare_update
    D = derive(recipe)
    mod = types.ModuleType(f"_blr_check_{recipe.name}")
    exec(compile(emit(build_ir(D, recipe.name), "numpy"), f"<generated {recipe.name}>", "exec"), mod.__dict__)
    worst = 0.0
    for seed in range(points):
        for _, generated, symbolic in compare_update(recipe, D, mod, seed):
            g, s_ = np.asarray(generated, dtype=float), np.asarray(symbolic, dtype=float)
            worst = max(worst, float(np.max(np.abs(g - s_)) / max(1.0, float(np.max(np.abs(s_))))))
    checks = [Check("generated update vs symbolic update", worst, 1e-10,
                    note=f"numpy target, {points} random inputs")]
    if "expected_loss" in D.placeholders:
        checks.append(Check("natural gradient vs finite differences", _natural_gradient_fd(recipe, D, points), 1e-6,
                            note="∇_μ E_q[loss] against central differences of E_q[loss](μ)"))
    if "relaxation" in D.placeholders:
        checks.append(Check("relaxation scale vs finite differences", _relaxation_scale_fd(recipe, D, points), 1e-6,
                            note="s = ∇_μ θ̂ (Eq. 51) against central differences of θ̂(u; μ)"))
    return checks


def _relaxation_scale_fd(recipe, D, points):
    """Worst relative error of the derived s = ∇_μ θ̂ (``concrete_relaxation``, with ε = 0) against
    (θ̂(p + h) − θ̂(p − h)) / (μ(p + h) − μ(p − h)) at random draws u, parameters and temperatures."""
    import sympy as sp
    rel = D.placeholders["relaxation"]
    fam = recipe.family
    (p,) = [q.symbol for q in fam.free_params]
    eps = rel["eps"]
    scale = rel["scale_evaluated"].xreplace({e: 0 for e in getattr(eps, "free_symbols", ())})
    args = (rel["u"], p, rel["temperature"])
    s_fn = sp.lambdify(args, scale, "numpy")
    th_fn = sp.lambdify(args, rel["sample"], "numpy")
    mu_fn = sp.lambdify((p,), fam.mu_ord[0], "numpy")
    worst = 0.0
    for seed in range(points):
        rng = np.random.default_rng(200 + seed)
        vals = fam.sample_params(rng, 2)
        pv = float(vals[p])
        for _ in range(4):
            u, tau, h = float(rng.uniform(0.05, 0.95)), float(rng.uniform(0.3, 2.0)), 1e-6 * max(1.0, abs(pv))
            fd = (th_fn(u, pv + h, tau) - th_fn(u, pv - h, tau)) / (mu_fn(pv + h) - mu_fn(pv - h))
            got = float(s_fn(u, pv, tau))
            worst = max(worst, abs(got - fd) / max(1.0, abs(fd)))
    return worst


def _natural_gradient_fd(recipe, D, points):
    """Worst relative error of the symbolic ∇_μ E_q[ℓ] against central finite differences in μ."""
    from blr_derive.families.family import evaluate
    from blr_derive.core.matcalc import is_mat
    fam = recipe.family
    E = D.placeholders["expected_loss"]
    grads = D.placeholders["natural_gradient"][0]
    worst = 0.0
    for seed in range(points):
        rng = np.random.default_rng(100 + seed)
        P = 3
        vals = fam.sample_params(rng, P)
        env = {}
        dims = {fam.dim: P} if fam.dim is not None else {}
        for d in recipe.data:
            shape = tuple(P if s_ == fam.dim else 5 for s_ in d.shape)
            v = rng.normal(size=shape) if shape else float(rng.uniform(0.5, 3.0))
            if d.symmetric:
                v = v @ v.T + shape[0] * np.eye(shape[0])
            env[d.symbol] = v
            dims.update({s_: 5 for s_ in d.shape if s_ != fam.dim})
        for h in recipe.hyper:
            if h.kind == "float":
                env[h.symbol] = float(rng.uniform(0.5, 2.0))
            elif h.kind == "int":                  # counts (e.g. quadrature nodes) at their defaults
                env[h.symbol] = h.default
        env.update({p.symbol: vals[p.symbol] for p in fam.params.values()})
        mu = {}
        for u, m in zip(fam.mu, fam.mu_ord):
            v = evaluate(m, env, dims)
            mu[u] = np.asarray(v, dtype=float) if is_mat(u) else float(v)

        def f(point):
            return float(evaluate(E, {**env, **point}, dims))
        for u, g in zip(fam.mu, grads):
            gv = np.atleast_2d(evaluate(g, {**env, **mu}, dims)) if is_mat(u) else float(evaluate(g, {**env, **mu}, dims))
            h = 1e-5
            if not is_mat(u):
                fd = (f({**mu, u: mu[u] + h}) - f({**mu, u: mu[u] - h})) / (2 * h)
                worst = max(worst, abs(fd - gv) / max(1.0, abs(gv)))
                continue
            base = np.asarray(mu[u], dtype=float)
            n, k = base.shape
            for i in range(n):
                for j in range(k):
                    E_ = np.zeros_like(base)
                    E_[i, j] = 1.0
                    sym = u.shape[0] == u.shape[1] and n > 1 and u.shape[1] != 1
                    if sym:
                        E_[j, i] = 1.0
                    fd = (f({**mu, u: base + h * E_}) - f({**mu, u: base - h * E_})) / (2 * h)
                    want = (gv[i, j] if (not sym or i == j) else gv[i, j] + gv[j, i])
                    worst = max(worst, abs(fd - want) / max(1.0, abs(want)))
    return worst


def _err(got, want):
    got = np.asarray(got, dtype=float)
    want = np.asarray(want, dtype=float).reshape(got.shape)
    return float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want)))) if got.size else 0.0


# --------------------------------------------------------------------------- model

class _Model:
    """A family at one dimension: compiled log h, T (in λ coordinates) and the θ parametrization."""

    def __init__(self, fam: Family, dim: int):
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
        if f.joint_support == "simplex":
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
            else:
                lv, lvb = -np.logaddexp(0, -u[k]), -np.logaddexp(0, u[k])
                entries.append(np.exp(lv))
                bars.append(np.exp(lvb))
                logJ = logJ + lv + lvb
        return entries, bars, logJ


def _de_rule(h, zmax=1e8):
    """sinh-sinh (double-exponential) trapezoidal nodes and weights on the real line."""
    tmax = np.arcsinh(np.arcsinh(zmax) * 2 / np.pi)
    t = np.arange(-np.ceil(tmax / h), np.ceil(tmax / h) + 1) * h
    s = np.pi / 2 * np.sinh(t)
    return np.sinh(s), np.log(h * np.pi / 2) + np.log(np.cosh(t)) + np.log(np.cosh(s))


class _Quadrature:
    """Nodes θ_i with log-weights (including h and <λ, T>) for one parameter point."""

    def __init__(self, model: _Model, c, fixed_vals, A):
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
        H = _fd_hessian(lambda u: -neg(u), mode)
        try:
            L = np.linalg.cholesky(np.linalg.inv(-H))
        except np.linalg.LinAlgError:
            L = np.diag(1.0 / np.sqrt(np.maximum(np.abs(np.diag(H)), 1e-8)))
        self.mode, self.L = mode, L
        h = {1: 1 / 32, 2: 1 / 32, 3: 1 / 20}.get(d, 1 / 8)
        z, lw1 = _de_rule(h)
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


def _fd_hessian(f, x, eps=1e-4):
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


# --------------------------------------------------------------------------- checks

def check_family(fam: Family, *, points: int = 3, seed: int = 0, dim: int = 2, mc_samples: int = 20000) -> list:
    """Run every numeric check at ``points`` random parameter points; a list of :class:`Check`."""
    rng = np.random.default_rng(seed)
    model = _Model(fam, dim)
    if not model.discrete and model.ndim_u > MAX_QUADRATURE_DIM:
        raise DerivationError(f"the numeric checks integrate over at most {MAX_QUADRATURE_DIM} coordinates; family "
                              f"'{fam.name}' at dimension {dim} has {model.ndim_u} (use a smaller --dim)")
    nf = model.nf
    d = nf.dim
    worst: dict = {}
    notes: dict = {}

    def record(name, value, note=""):
        value = float(value) if np.isfinite(value) else float("inf")
        kind = "min" if name == "fisher_positive_definite" else "max"
        old = worst.get(name)
        if old is None or (value > old if kind == "max" else value < old) or not np.isfinite(value):
            worst[name] = value
            if note:
                notes[name] = note

    def guarded(name, fn):
        try:
            fn()
        except (BLRError, ValueError, ArithmeticError, np.linalg.LinAlgError, TypeError) as exc:
            record(name, float("inf"), f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")

    try:
        H_sym = fam.entropy()
    except DerivationError as exc:
        H_sym = None
        record("entropy_vs_quadrature", float("inf"), str(exc).splitlines()[0][:160])

    with np.errstate(all="ignore"):      # overflow far in the quadrature tails is expected and handled
        for _ in range(points):
            _check_point(fam, model, rng, d, mc_samples, H_sym, record, guarded)

    out = []
    for name, tol in TOLERANCES.items():
        if name not in worst:
            continue
        out.append(Check(name, worst[name], tol, "min" if name == "fisher_positive_definite" else "max",
                         notes.get(name, "")))
    return out


def _check_point(fam, model, rng, d, mc_samples, H_sym, record, guarded):
    """All checks at one random parameter point; ``record`` keeps the worst value of each."""
    nf = model.nf
    vals = fam.sample_params(rng, d or 2)
    fixed_vals = {p.symbol: vals[p.symbol] for p in fam.fixed_params}
    lam_vals = {l: fam.evaluate(e, vals, d) for l, e in zip(fam.lam, fam.eta)}
    c = nf.coords_of(lam_vals)
    A = nf.A(c, fixed_vals)
    mu_blocks = {u: fam.evaluate(m, {**lam_vals, **fixed_vals}, d) for u, m in zip(fam.mu, fam.mu_of_lam)}
    mu_c = nf.coords_of(mu_blocks)
    quad = None
    try:
        quad = _Quadrature(model, c, fixed_vals, A)
    except (BLRError, ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
        for n in ("normalization", "mu_vs_quadrature", "fisher_vs_covariance", "entropy_vs_quadrature",
                  "mu_vs_monte_carlo"):
            record(n, float("inf"), f"quadrature failed: {exc}")

    if quad is not None:
        Zr = quad.normalization
        record("normalization", abs(Zr - 1.0), f"∫ h exp(<λ,T> - A) = {Zr:.6g}")
        record("mu_vs_quadrature", _err(mu_c, quad.mean), f"∇A = {_fmt(mu_c)}, E_q[T] = {_fmt(quad.mean)}")

        def mc():
            S = quad.sample(rng, mc_samples)
            est = S.mean(axis=0)
            se = S.std(axis=0, ddof=1) / np.sqrt(len(S))
            z = np.abs(est - mu_c) / np.where(se > 0, se, np.inf)
            z = np.where((se == 0) & (np.abs(est - mu_c) > 1e-12 * (1 + np.abs(mu_c))), np.inf, z)
            record("mu_vs_monte_carlo", float(np.max(z)), f"∇A = {_fmt(mu_c)}, MC mean = {_fmt(est)}")
        guarded("mu_vs_monte_carlo", mc)

    def fd():
        g = np.zeros_like(c)
        for k in range(len(c)):
            eps = 1e-5 * max(1.0, abs(c[k]))
            e = np.zeros_like(c)
            e[k] = eps
            g[k] = (nf.A(c + e, fixed_vals) - nf.A(c - e, fixed_vals)) / (2 * eps)
        record("mu_vs_finite_differences", _err(g, mu_c), f"∇A = {_fmt(mu_c)}, FD = {_fmt(g)}")
    guarded("mu_vs_finite_differences", fd)

    def mu_ord():
        got = nf.coords_of({u: fam.evaluate(m, vals, d) for u, m in zip(fam.mu, fam.mu_ord)})
        record("mu_ordinary", _err(got, mu_c), f"μ(ordinary) = {_fmt(got)}, ∇A = {_fmt(mu_c)}")
    guarded("mu_ordinary", mu_ord)

    def fisher():
        F = fam.fisher_at({**lam_vals, **fixed_vals}, d)
        ev = np.linalg.eigvalsh(0.5 * (F + F.T))
        record("fisher_positive_definite", ev.min() / max(abs(ev).max(), 1e-300), f"eigenvalues {_fmt(ev)}")
        if quad is not None:
            record("fisher_vs_covariance", _err(F, quad.cov), f"max |F - Cov| = {np.max(np.abs(F - quad.cov)):.3g}")
    guarded("fisher_positive_definite", fisher)

    if H_sym is not None and quad is not None:
        def entropy():
            H = fam.evaluate(H_sym, vals, d)
            record("entropy_vs_quadrature", _err(H, quad.entropy), f"H = {H:.10g}, -∫ q log q = {quad.entropy:.10g}")
        guarded("entropy_vs_quadrature", entropy)

    def rt_nat():
        errs = [_err(np.asarray(fam.evaluate(e, {**lam_vals, **fixed_vals}, d)).reshape(np.shape(vals[s]) or ()),
                     vals[s]) for s, e in fam.ord_from_nat.items()]
        record("round_trip_natural", max(errs))
    guarded("round_trip_natural", rt_nat)

    def rt_mu():
        mvals = {u: fam.evaluate(m, vals, d) for u, m in zip(fam.mu, fam.mu_ord)}
        if fam.mu_inverse == "numeric":
            back = fam.numeric_ord_from_mu({**mvals, **fixed_vals}, d)
        else:
            back = {s: fam.evaluate(e, {**mvals, **fixed_vals}, d) for s, e in fam.ord_from_mu.items()}
        errs = [_err(np.asarray(back[p.symbol]).reshape(np.shape(vals[p.symbol]) or ()), vals[p.symbol])
                for p in fam.free_params]
        record("round_trip_expectation", max(errs))
    guarded("round_trip_expectation", rt_mu)


def _fmt(v):
    v = np.atleast_1d(np.asarray(v, dtype=float)).ravel()
    s = ", ".join(f"{x:.6g}" for x in v[:6])
    return f"[{s}{', ...' if v.size > 6 else ''}]"


# --------------------------------------------------------------------------- files

def _describe(fam: Family):
    how = "declared" if fam.A_given else next((h for w, h in fam.steps if w == "log-partition"), "derived")
    inv = "numeric (Newton's method)" if fam.mu_inverse == "numeric" else "closed form"
    return [f"A(λ): {how}", f"μ → ordinary: {inv}"]


def check_file(path, *, points: int = 3, seed: int = 0, dim: int = 2, sizes: dict | None = None) -> Report:
    """Check a family file, or the family of a recipe file (plus ``check_recipe_updates``); ``sizes``
    instantiates a sized family or recipe (blr_derive/sizes.py) at those sizes."""
    spec = load_yaml_file(path)
    from blr_derive.core.errors import SpecError
    from blr_derive.candidates.product import is_factorized_spec
    from blr_derive.core.sizes import instantiate_recipe
    if is_factorized_spec(spec):                     # one family per block: name them (checked one by one)
        spec = instantiate_recipe(spec, str(path), sizes)
        fams = sorted({str(b["family"]["name"] if isinstance(b["family"], dict) and "name" in b["family"]
                           and "variable" not in b["family"] else b["family"])
                       for b in spec["blocks"].values() if isinstance(b, dict) and "family" in b})
        raise SpecError("a factorized recipe has one family per block; check them one by one: "
                        + (", ".join(fams) or "none (delta blocks only)"), str(path), None)
    if isinstance(spec, dict) and "family" in spec and "sufficient_statistics" not in spec:
        from blr_derive.spec.recipe import load_recipe
        recipe = load_recipe(path, sizes)
        fam = recipe.family
        if getattr(fam, "is_mixture", False):        # a mixture candidate: check its component family
            fam = fam.base
        rep = Report(f"recipe '{recipe.name}' ({path}), family '{recipe.family.name}'", fam)
        rep.checks = check_family(fam, points=points, seed=seed, dim=dim) + list(check_recipe_updates(recipe))
    else:
        fam = load_family({"name": str(path), **sizes} if sizes else str(path))
        rep = Report(f"family '{fam.name}' ({path}" + "".join(f", {k} = {v}" for k, v in fam.sizes if sizes) + ")",
                     fam)
        rep.checks = check_family(fam, points=points, seed=seed, dim=dim)
    rep.notes = _describe(fam) + [f"{points} random parameter points (seed {seed})"
                                  + (f", dimension {dim}" if fam.dim is not None else "")]
    return rep


def format_report(rep: Report) -> str:
    lines = [f"check {rep.title}"]
    lines += [f"  {n}" for n in rep.notes]
    lines.append("  error = |got - want| / max(1, |want|), the worst over points and components")
    w = max(len(c.name) for c in rep.checks) if rep.checks else 10
    lines.append(f"  {'check':<{w}}  {'value':>10}  {'tolerance':>11}  result  what")
    for c in rep.checks:
        tol = f"{'<=' if c.kind == 'max' else '>='} {c.tol:.0e}" if c.name != "mu_vs_monte_carlo" else f"<= {c.tol:g} σ"
        res = "pass" if c.passed else "FAIL"
        what = DESCRIPTIONS.get(c.name, "")
        if not c.passed and c.note:
            what += f"  [{c.note}]"
        lines.append(f"  {c.name:<{w}}  {c.value:>10.3g}  {tol:>11}  {res:<6}  {what}")
    n_fail = len(rep.failed)
    if n_fail:
        lines.append(f"  FAIL: {n_fail} of {len(rep.checks)} checks failed: " + "; ".join(
            f"{c.name} ({HINTS.get(c.name, 'see above')})" for c in rep.failed))
    else:
        lines.append(f"  all {len(rep.checks)} checks passed")
    return "\n".join(lines) + "\n"
