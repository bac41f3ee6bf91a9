"""Numerical checks of the built-in Gaussian families (Table 2 of Khan & Rue 2023).

Every symbolic object the engine derives for a family (λ(ordinary), A(λ), μ = ∇A,
the inverse maps, the entropy and the Fisher information) is evaluated at random
parameter values and compared with an independent numerical computation: Monte
Carlo, finite differences, quadrature, scipy.stats and the textbook formulas.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import sympy as sp
from scipy import integrate, stats

from blr_derive.families.library import load_family
from blr_derive.families.numeric import numeric_fisher
from blr_derive.core.matexpr import is_mat

FAMILIES = ["gaussian_full", "gaussian_diag", "gaussian_fixed_cov", "gaussian_fixed_precision"]
CASES = [(name, P) for name in FAMILIES for P in ((None,) if name == "gaussian_diag" else (1, 2, 3))]
CASE_IDS = [f"{name}-P{P}" if P else name for name, P in CASES]


@functools.lru_cache(maxsize=None)
def fam(name):
    return load_family(name)


# ---------------------------------------------------------------------------
# Independent (textbook) parameterization of each family
# ---------------------------------------------------------------------------

def ordinary(name, P, seed):
    """Random ordinary parameters by *name* (not via the engine's sampler)."""
    rng = np.random.default_rng(seed)
    if name == "gaussian_diag":
        return {"m": float(rng.normal()), "s": float(np.exp(0.6 * rng.normal()))}
    out = {"m": rng.normal(size=P)}
    if name in ("gaussian_full", "gaussian_fixed_precision"):
        B = rng.normal(size=(P, P))
        out["S"] = B @ B.T / P + 0.5 * np.eye(P)
    return out


def moments(name, o, P):
    """Mean and covariance of the Gaussian with ordinary parameters o."""
    if name == "gaussian_diag":
        return o["m"], 1.0 / o["s"]
    if name == "gaussian_fixed_cov":
        return o["m"], np.eye(P)
    return o["m"], np.linalg.inv(o["S"])


def textbook_lambda(name, o):
    if name == "gaussian_diag":
        return [o["s"] * o["m"], -o["s"] / 2]
    if name == "gaussian_full":
        return [o["S"] @ o["m"], -o["S"] / 2]
    if name == "gaussian_fixed_cov":
        return [o["m"]]
    return [o["S"] @ o["m"]]


def textbook_mu(name, o):
    """Table 2: E[T(θ)] in ordinary parameters."""
    if name == "gaussian_diag":
        return [o["m"], o["m"] ** 2 + 1.0 / o["s"]]
    if name == "gaussian_full":
        return [o["m"], np.outer(o["m"], o["m"]) + np.linalg.inv(o["S"])]
    return [o["m"]]


def shaped(v, like):
    """Compare a numpy value to an engine value: vectors become (P,1)."""
    v = np.asarray(v, dtype=float)
    if np.ndim(like) == 2 and v.ndim == 1:
        v = v.reshape(-1, 1)
    return v


class Setup:
    """A family at one dimension with random ordinary parameters and the λ they map to."""

    def __init__(self, name, P, seed=None):
        self.name, self.P = name, P
        self.f = f = fam(name)
        self.seed = 1000 + CASES.index((name, P)) if seed is None else seed
        self.o = ordinary(name, P, self.seed)
        self.ord_vals = {f.params[k].symbol: v for k, v in self.o.items()}
        self.fixed = {p.symbol: self.ord_vals[p.symbol] for p in f.fixed_params}
        self.lam = {l: self.ev(e, self.ord_vals) for l, e in zip(f.lam, f.eta)}
        self.lam_all = {**self.lam, **self.fixed}

    def ev(self, expr, values):
        return self.f.evaluate(expr, values, self.P)

    def A(self, lam_vals):
        return self.ev(self.f.A, {**lam_vals, **self.fixed})

    def mu(self, lam_vals=None):
        vals = {**(self.lam if lam_vals is None else lam_vals), **self.fixed}
        return [self.ev(m, vals) for m in self.f.mu_of_lam]


def numeric_subs(f, values, P):
    reps = {}
    for k, v in values.items():
        if is_mat(k):
            arr = np.asarray(v, dtype=float)
            arr = arr.reshape(-1, 1) if arr.ndim == 1 else arr
            reps[k] = sp.ImmutableMatrix(arr.tolist())
        else:
            reps[k] = sp.Float(float(v), 30)
    if f.dim is not None:
        reps[f.dim] = sp.Integer(P)
    return reps


def theta_function(f, expr, values, P):
    """A numpy function of the coordinates of θ (one positional argument per coordinate).

    Scalar expressions return an array broadcast to the input; matrix expressions an
    array of shape (N, rows, cols).
    """
    if P is None:
        xs = [sp.Symbol("x0", real=True)]
        reps = {f.theta: xs[0]}
    else:
        xs = list(sp.symbols(f"x0:{P}", real=True))
        reps = {f.theta: sp.ImmutableMatrix(P, 1, xs)}
    reps.update(numeric_subs(f, values, P))
    e = expr.xreplace(reps).doit()
    if isinstance(e, sp.MatrixBase):
        e = sp.Matrix(e)
        fns = [[sp.lambdify(xs, e[i, j], "numpy") for j in range(e.cols)] for i in range(e.rows)]

        def matfn(*args):
            n = np.broadcast(*args).shape
            return np.stack([np.stack([np.broadcast_to(fn(*args), n) for fn in row], axis=-1) for row in fns], axis=-2)
        return matfn
    fn = sp.lambdify(xs, e, "numpy")
    return lambda *args: np.broadcast_to(fn(*args), np.broadcast(*args).shape)


def tangent_basis(f, l, P):
    """Orthonormal basis (trace inner product) of the tangent space of a λ block."""
    if not is_mat(l):
        return [1.0]
    rows, cols = (P if s == f.dim else int(s) for s in l.shape)
    out = []
    for i in range(rows):
        for j in range(cols):
            if l in f.symmetric:
                if j < i:
                    continue
                E = np.zeros((rows, cols))
                E[i, j] = E[j, i] = 1.0 if i == j else np.sqrt(0.5)
            else:
                E = np.zeros((rows, cols))
                E[i, j] = 1.0
            out.append(E)
    return out


# ---------------------------------------------------------------------------
# (a) μ = ∇A(λ)
# ---------------------------------------------------------------------------

N_MC = 200_000


@pytest.mark.parametrize("name,P", CASES, ids=CASE_IDS)
def test_mu_equals_monte_carlo_expectation_of_T(name, P):
    s = Setup(name, P)
    f = s.f
    mean, cov = moments(name, s.o, P)
    rng = np.random.default_rng(s.seed + 77)
    if P is None:
        samples = mean + np.sqrt(cov) * rng.standard_normal(N_MC)
        coords = [samples]
    else:
        L = np.linalg.cholesky(cov)
        samples = mean + rng.standard_normal((N_MC, P)) @ L.T
        coords = list(samples.T)
    mus = s.mu()
    checked = 0
    for T, mu in zip(f.T, mus):
        vals = np.asarray(theta_function(f, T, s.fixed, P)(*coords), dtype=float)
        est = vals.mean(axis=0)
        se = vals.std(axis=0, ddof=1) / np.sqrt(N_MC)
        mu = np.asarray(mu, dtype=float)
        assert est.shape == mu.shape
        assert np.all(se > 0)
        z = np.abs(est - mu) / se
        assert z.max() < 5.0, f"{name} P={P}: |MC - mu| = {np.abs(est - mu).max()} ({z.max():.2f} sigma)"
        checked += mu.size
    assert checked == sum(np.asarray(m).size for m in mus) > 0


@pytest.mark.parametrize("name,P", CASES, ids=CASE_IDS)
def test_mu_equals_finite_difference_gradient_of_A(name, P):
    s = Setup(name, P)
    f = s.f
    eps = 1e-5
    for l, mu in zip(f.lam, s.mu()):
        base = s.lam[l]

        def A_at(delta):
            vals = dict(s.lam)
            vals[l] = base + delta
            return s.A(vals)

        if not is_mat(l):
            g = (A_at(eps) - A_at(-eps)) / (2 * eps)
            assert g == pytest.approx(mu, rel=1e-7, abs=1e-8)
            continue
        base = np.asarray(base, dtype=float)
        G = np.zeros_like(base)
        rows, cols = base.shape
        for i in range(rows):
            for j in range(cols):
                E = np.zeros_like(base)
                if l in f.symmetric:
                    if j < i:
                        continue
                    E[i, j] = E[j, i] = 1.0   # stay on the symmetric matrices
                else:
                    E[i, j] = 1.0
                d = (A_at(eps * E) - A_at(-eps * E)) / (2 * eps)
                if l in f.symmetric and i != j:
                    G[i, j] = G[j, i] = d / 2     # d = tr(G (E_ij + E_ji)) = 2 G_ij
                else:
                    G[i, j] = d
        np.testing.assert_allclose(G, mu, rtol=1e-7, atol=1e-8)


# ---------------------------------------------------------------------------
# (b) exp(A(λ)) = ∫ h(θ) exp(<λ, T(θ)>) dθ
# ---------------------------------------------------------------------------

def integrand(s):
    """h(θ) exp(<λ, T(θ)>), exponentiated only at the end (no inf * 0 in the tails)."""
    f = s.f
    log_integrand = theta_function(f, sp.log(f.h) + f.inner(f.lam, f.T), s.lam_all, s.P)

    def fn(*x):
        with np.errstate(divide="ignore"):      # log(exp(-x²/2)) = log(0) far in the tails: exp(-inf) = 0
            return np.exp(log_integrand(*x))
    return fn


@pytest.mark.parametrize("name", FAMILIES)
def test_log_partition_by_quadrature_1d(name):
    P = None if name == "gaussian_diag" else 1
    s = Setup(name, P)
    fn = integrand(s)
    Z, err = integrate.quad(lambda x: float(fn(x)), -np.inf, np.inf, epsabs=0, epsrel=1e-12, limit=200)
    expA = np.exp(s.A(s.lam))
    assert expA > 0
    assert Z == pytest.approx(expA, rel=1e-9)


@pytest.mark.parametrize("name", ["gaussian_full", "gaussian_fixed_precision"])
def test_log_partition_by_quadrature_2d(name):
    s = Setup(name, 2)
    fn = integrand(s)
    mean, cov = moments(name, s.o, 2)
    sd = np.sqrt(np.diag(cov))
    lo, hi = mean - 12 * sd, mean + 12 * sd          # the mass outside is below 1e-30
    Z, err = integrate.dblquad(lambda y, x: float(fn(x, y)), lo[0], hi[0], lo[1], hi[1], epsabs=0, epsrel=1e-10)
    assert Z == pytest.approx(np.exp(s.A(s.lam)), rel=1e-8)


def test_base_measure_of_fixed_precision_uses_fixed_S():
    """h contains the fixed precision S; changing S changes the integral consistently."""
    f = fam("gaussian_fixed_precision")
    for seed in (5, 6):
        s = Setup("gaussian_fixed_precision", 1, seed=seed)
        fn = integrand(s)
        Z, _ = integrate.quad(lambda x: float(fn(x)), -np.inf, np.inf, epsabs=0, epsrel=1e-12)
        # closed form: ∫ sqrt(S/2π) exp(-S θ²/2 + λ θ) dθ = exp(λ² / (2 S))
        lam = float(np.asarray(s.lam[f.lam[0]]).ravel()[0])
        S = float(s.o["S"][0, 0])
        assert Z == pytest.approx(np.exp(lam**2 / (2 * S)), rel=1e-9)


# ---------------------------------------------------------------------------
# (c) entropy
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,P", CASES, ids=CASE_IDS)
def test_entropy_matches_scipy(name, P):
    s = Setup(name, P)
    H = s.ev(s.f.entropy(), s.ord_vals)
    mean, cov = moments(name, s.o, P)
    if P is None:
        ref = stats.norm(loc=mean, scale=np.sqrt(cov)).entropy()
    else:
        ref = stats.multivariate_normal(mean=mean, cov=cov).entropy()
    assert H == pytest.approx(float(ref), rel=1e-11, abs=1e-11)


def test_entropy_free_of_theta():
    for name in FAMILIES:
        f = fam(name)
        H = f.entropy()
        assert not H.has(f.theta)
        assert not any(H.has(l) for l in f.lam)


# ---------------------------------------------------------------------------
# (d) round trips between ordinary, natural and expectation parameters
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,P", CASES, ids=CASE_IDS)
def test_round_trip_natural(name, P):
    s = Setup(name, P)
    f = s.f
    free = {p.symbol for p in f.free_params}
    assert set(f.ord_from_nat) == free
    for sym in free:
        back = s.ev(f.ord_from_nat[sym], s.lam_all)
        want = shaped(s.ord_vals[sym], back)
        assert np.shape(back) == np.shape(want)
        np.testing.assert_allclose(back, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name,P", CASES, ids=CASE_IDS)
def test_round_trip_expectation(name, P):
    s = Setup(name, P)
    f = s.f
    free = {p.symbol for p in f.free_params}
    assert set(f.ord_from_mu) == free
    mu_vals = {u: s.ev(m, s.ord_vals) for u, m in zip(f.mu, f.mu_ord)}
    mu_vals.update(s.fixed)
    for sym in free:
        back = s.ev(f.ord_from_mu[sym], mu_vals)
        want = shaped(s.ord_vals[sym], back)
        assert np.shape(back) == np.shape(want)
        np.testing.assert_allclose(back, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name,P", CASES, ids=CASE_IDS)
def test_round_trip_natural_to_expectation_and_back(name, P):
    """λ → μ(λ) (= ∇A) → ordinary (ord_from_mu) → λ (η) is the identity."""
    s = Setup(name, P)
    f = s.f
    mu_vals = dict(zip(f.mu, s.mu()))
    mu_vals.update(s.fixed)
    ordv = {sym: s.ev(e, mu_vals) for sym, e in f.ord_from_mu.items()}
    ordv.update(s.fixed)
    for l, e in zip(f.lam, f.eta):
        np.testing.assert_allclose(s.ev(e, ordv), s.lam[l], rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------
# (e) Fisher information
# ---------------------------------------------------------------------------

def fd_fisher(s, eps=1e-5):
    """Finite-difference Jacobian of μ(λ) in an orthonormal basis of the λ tangent space."""
    f = s.f
    bases = [tangent_basis(f, l, s.P) for l in f.lam]
    cols = []
    for l, basis in zip(f.lam, bases):
        for E in basis:
            vp, vm = dict(s.lam), dict(s.lam)
            vp[l] = s.lam[l] + eps * E
            vm[l] = s.lam[l] - eps * E
            dmu = [(np.asarray(a) - np.asarray(b)) / (2 * eps) for a, b in zip(s.mu(vp), s.mu(vm))]
            col = []
            for d, basis_k in zip(dmu, bases):
                col.extend(float(np.sum(d * Ek)) for Ek in basis_k)
            cols.append(col)
    return np.array(cols).T


@pytest.mark.parametrize("name,P", CASES, ids=CASE_IDS)
def test_fisher_positive_definite(name, P):
    s = Setup(name, P)
    F = numeric_fisher(s.f, s.lam_all, P or 1)
    dof = sum(len(tangent_basis(s.f, l, P)) for l in s.f.lam)
    assert F.shape == (dof, dof)
    np.testing.assert_allclose(F, F.T, rtol=1e-10, atol=1e-12)
    ev = np.linalg.eigvalsh(0.5 * (F + F.T))
    assert ev.min() > 1e-6 * ev.max() > 0


@pytest.mark.parametrize("name,P", CASES, ids=CASE_IDS)
def test_fisher_equals_jacobian_of_mu(name, P):
    """numeric_fisher (from the symbolic Fisher operator) vs a finite-difference Jacobian of μ(λ).

    Both are in orthonormal bases, so their spectra agree whatever the ordering of
    the basis; for the scalar family the matrices are compared entrywise.
    """
    s = Setup(name, P)
    F = numeric_fisher(s.f, s.lam_all, P or 1)
    J = fd_fisher(s)
    np.testing.assert_allclose(J, J.T, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.linalg.eigvalsh(F), np.linalg.eigvalsh(0.5 * (J + J.T)), rtol=1e-6, atol=1e-7)
    if P is None:
        np.testing.assert_allclose(F, J, rtol=1e-7, atol=1e-8)


def test_fisher_scalar_family_closed_form():
    """gaussian_diag: F = Cov[T] = [[v, 2 m v], [2 m v, 4 m² v + 2 v²]] with v = 1/s."""
    s = Setup("gaussian_diag", None)
    m, v = s.o["m"], 1.0 / s.o["s"]
    want = np.array([[v, 2 * m * v], [2 * m * v, 4 * m * m * v + 2 * v * v]])
    np.testing.assert_allclose(numeric_fisher(s.f, s.lam_all, 1), want, rtol=1e-11, atol=1e-12)
    Fsym = s.f.fisher_matrix()
    Fnum = np.array([[s.ev(Fsym[i, j], s.lam) for j in range(2)] for i in range(2)])
    np.testing.assert_allclose(Fnum, want, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("P", [1, 2, 3])
def test_fisher_vector_mean_families_closed_form(P):
    """One vector block λ = S m (or m): F = S⁻¹ (or I) in the standard basis."""
    s = Setup("gaussian_fixed_precision", P)
    np.testing.assert_allclose(numeric_fisher(s.f, s.lam_all, P), np.linalg.inv(s.o["S"]), rtol=1e-10, atol=1e-12)
    s = Setup("gaussian_fixed_cov", P)
    np.testing.assert_allclose(numeric_fisher(s.f, s.lam_all, P), np.eye(P), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("P", [2, 3])
def test_fisher_operator_directional_derivative(P):
    """fisher_operator: dμ(dλ) equals the directional finite difference of μ for a random symmetric dλ."""
    s = Setup("gaussian_full", P)
    f = s.f
    dl, dmu = f.fisher_operator()
    rng = np.random.default_rng(42 + P)
    d1 = rng.normal(size=(P, 1))
    R = rng.normal(size=(P, P))
    d2 = R + R.T
    eps = 1e-5
    vals = {**s.lam_all, dl[0]: d1, dl[1]: d2}
    vp = {f.lam[0]: s.lam[f.lam[0]] + eps * d1, f.lam[1]: s.lam[f.lam[1]] + eps * d2}
    vm = {f.lam[0]: s.lam[f.lam[0]] - eps * d1, f.lam[1]: s.lam[f.lam[1]] - eps * d2}
    for k, (a, b) in enumerate(zip(s.mu(vp), s.mu(vm))):
        fd = (a - b) / (2 * eps)
        np.testing.assert_allclose(s.ev(dmu[k], vals), fd, rtol=1e-7, atol=1e-8)


# ---------------------------------------------------------------------------
# (f) textbook formulas (Table 2)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,P", CASES, ids=CASE_IDS)
def test_mu_ord_is_textbook(name, P):
    s = Setup(name, P)
    f = s.f
    want = textbook_mu(name, s.o)
    assert len(f.mu_ord) == len(want) == len(f.T)
    for expr, w in zip(f.mu_ord, want):
        got = s.ev(expr, s.ord_vals)
        np.testing.assert_allclose(got, shaped(w, got), rtol=1e-11, atol=1e-12)
    # μ(λ) = ∇A at λ(ordinary) gives the same numbers
    for got, w in zip(s.mu(), want):
        np.testing.assert_allclose(got, shaped(w, got), rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("name,P", CASES, ids=CASE_IDS)
def test_eta_is_textbook(name, P):
    s = Setup(name, P)
    want = textbook_lambda(name, s.o)
    for l, w in zip(s.f.lam, want):
        np.testing.assert_allclose(s.lam[l], shaped(w, s.lam[l]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,P", [c for c in CASES if c[1] is not None], ids=[i for c, i in zip(CASES, CASE_IDS) if c[1]])
def test_log_partition_is_textbook(name, P):
    """A(λ(ordinary)) = ½ mᵀ S m - ½ log|S| (+ constants absorbed in h) for the vector families."""
    s = Setup(name, P)
    m = s.o["m"]
    if name == "gaussian_full":
        S = s.o["S"]
        want = 0.5 * m @ S @ m - 0.5 * np.linalg.slogdet(S)[1]
    elif name == "gaussian_fixed_precision":
        want = 0.5 * m @ s.o["S"] @ m
    else:
        want = 0.5 * m @ m
    assert s.A(s.lam) == pytest.approx(want, rel=1e-11, abs=1e-12)


def test_diag_log_partition_is_textbook():
    s = Setup("gaussian_diag", None)
    m, sp_ = s.o["m"], s.o["s"]
    want = 0.5 * sp_ * m * m - 0.5 * np.log(sp_) + 0.5 * np.log(2 * np.pi)
    assert s.A(s.lam) == pytest.approx(want, rel=1e-11, abs=1e-12)


def test_family_metadata():
    full = fam("gaussian_full")
    assert full.dim is not None and full.theta.shape == (full.dim, 1)
    assert [p.name for p in full.free_params] == ["m", "S"]
    assert full.lam[1] in full.symmetric and full.mu[1] in full.symmetric
    fp = fam("gaussian_fixed_precision")
    assert [p.name for p in fp.fixed_params] == ["S"]
    assert fp.h.has(fp.params["S"].symbol)
    diag = fam("gaussian_diag")
    assert diag.dim is None and diag.elementwise
    assert all(f.is_gaussian for f in map(fam, FAMILIES))
