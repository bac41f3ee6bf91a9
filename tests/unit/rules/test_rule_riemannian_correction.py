"""riemannian_correction (improved BLR of Lin, Schmidt & Khan 2020, used by IVON; the precision update of Eq. 12 /
Eq. 37): s ← (1 − ρ)s + ρT + ρ²(s − T)²/(2s), i.e. with G = s − T the update s − ρG + ρ²G²/(2s).

Checked numerically:
* multi-step against the hand recurrence, on a non-convex loss whose Hessian at the mean is often negative;
* positivity (Lin et al.'s point): the corrected update equals ((s − ρG)² + s²)/(2s) ≥ s/2 > 0 — checked as a
  closed form and as a bound — where the plain update of the same inputs goes negative;
* it is the second-order retraction of the Fisher–Rao geometry: the geodesic of N(m, 1/s) in the precision
  (metric ∝ 1/s²) from s with velocity −G is s·exp(−ρG/s); the corrected update differs from it by
  s(ρG/s)³/6 + O(ρ⁴), so the error divided by ρ³ converges to |G|³/(6s²), while the plain update's error is of
  order ρ² (it divided by ρ² converges to G²/(2s));
* IVON (catalog `ivon`, Shen et al. 2024, Alg. 1): h ← β₂h + (1 − β₂)ĥ + ½(1 − β₂)²(h − ĥ)²/(h + δ) with ĥ the
  Stein estimate from the drawn samples, and h + δ stays positive over steps where ĥ is negative.
"""
import functools

import numpy as np
import pytest
import yaml

from blr_derive import api

# Same arithmetic as the hand formulas up to grouping: a few ulps (~1e-16 relative) per step, ≤ 8 steps.  1e-12
# relative is a wide margin; dropping the correction changes s by ρ²G²/(2s) = O(0.01-1) here.
RTOL = 1e-12


def recipe(rule=True):
    approx = ["delta"] + ([{"riemannian_correction": {"param": "s"}}] if rule else [])
    return yaml.safe_dump({"name": "rc_test", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": {"lr": 0.3}, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


def grad(x):
    """ℓ(θ) = θ⁴/4 − θ² + 0.3 sin(3θ): two wells, negative curvature for |θ| ≲ 0.8."""
    return x ** 3 - 2 * x + 0.9 * np.cos(3 * x)


def hess(x):
    return 3 * x ** 2 - 2 - 2.7 * np.sin(3 * x)


def test_hand_recurrence_over_steps():
    mod = compiled(recipe())
    rng = np.random.default_rng(0)
    m, s = rng.uniform(-1.5, 1.5, size=8), rng.uniform(1.0, 4.0, size=8)
    state = mod.init(m=m, s=s)
    lr = 0.3
    seen_negative = False
    for _ in range(8):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=lr)
        T = hess(m)
        seen_negative |= bool((T < 0).any())
        s = (1 - lr) * s + lr * T + lr ** 2 * (s - T) ** 2 / (2 * s)
        m = m - lr * grad(m) / s
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)
        assert (state["s"] > 0).all()
    assert seen_negative                          # the correction was exercised where it matters


def test_keeps_the_precision_positive_where_the_plain_update_does_not():
    with_, without = compiled(recipe()), compiled(recipe(rule=False))
    m0 = np.array([0.0, 0.3, -0.2, 0.5])            # Hessians −2.00, −3.84, −0.35, −3.94
    s0 = np.array([0.5, 1.0, 0.2, 2.0])
    lr = 0.9
    oracles = {"grad": grad, "hess": hess}
    a = with_.step(with_.init(m=m0, s=s0), oracles=oracles, lr=lr)
    # the plain BLR step leaves the positive half-line: the generated step says so (ir/validity.py) ...
    with pytest.raises(FloatingPointError, match=r"step\(\): the new s is not positive \(value -[0-9.]+ at index "
                                                 r"\(0,\)\).*riemannian_correction: \{param: s\}"):
        without.step(without.init(m=m0, s=s0), oracles=oracles, lr=lr)
    b = _unchecked(without).step(without.init(m=m0, s=s0), oracles=oracles, lr=lr)
    assert (b["s"] < 0).all()                        # ... where it would have returned these
    G = s0 - hess(m0)
    # Lin et al.'s rewriting as a sum of squares (its own rounding, hence 1e-12 rather than bitwise)
    np.testing.assert_allclose(a["s"], ((s0 - lr * G) ** 2 + s0 ** 2) / (2 * s0), rtol=RTOL)
    assert (a["s"] >= s0 / 2).all()
    # the correction is exactly what separates the two
    np.testing.assert_allclose(a["s"] - b["s"], lr ** 2 * G ** 2 / (2 * s0), rtol=1e-12)


class _unchecked:
    """A generated module whose step runs with its run-time domain check switched off (to read the values the plain
    step returned before it raised)."""

    def __init__(self, mod):
        self.mod = mod

    def __getattr__(self, name):
        return getattr(self.mod, name)

    def step(self, *args, **kwargs):
        own = self.mod._check_domain
        self.mod._check_domain = lambda *a, **k: None
        try:
            return self.mod.step(*args, **kwargs)
        finally:
            self.mod._check_domain = own


def test_second_order_retraction_of_the_fisher_rao_geodesic():
    with_, without = compiled(recipe()), compiled(recipe(rule=False))
    m0 = np.array([0.1, 0.9, -1.3])
    s0 = np.array([1.5, 3.0, 0.7])
    G = s0 - hess(m0)
    oracles = {"grad": grad, "hess": hess}
    for lr in (1e-2, 5e-3, 2.5e-3):
        geodesic = s0 * np.exp(-lr * G / s0)
        a = with_.step(with_.init(m=m0, s=s0), oracles=oracles, lr=lr)["s"]
        b = without.step(without.init(m=m0, s=s0), oracles=oracles, lr=lr)["s"]
        # Taylor: exp(x) = 1 + x + x²/2 + x³/6 + O(x⁴), x = −ρG/s (|x| ≤ 0.06 here), so the relative deviation
        # from the leading term is ≲ |x|/4 + rounding (1e-16·s/ρ³·1/|G|³ ≲ 1e-8): 5e-2·(ρ/1e-2) covers it.
        np.testing.assert_allclose((geodesic - a) / lr ** 3, -G ** 3 / (6 * s0 ** 2), rtol=5.0 * lr)
        np.testing.assert_allclose((geodesic - b) / lr ** 2, G ** 2 / (2 * s0), rtol=5.0 * lr)


# ---------------------------------------------------------------------------------------------- IVON

class Recorder:
    def __init__(self, f):
        self.f, self.calls = f, []

    def __call__(self, x):
        self.calls.append(np.array(x, copy=True))
        return self.f(x)


def test_ivon_hessian_update():
    mod = compiled("ivon")
    hp = dict(lr=0.05, ess=20.0, beta1=0.9, beta2=0.6, weight_decay=0.05, mc_samples=2, hess_approx="price",
              debias=True, rescale_lr=False)
    rng = np.random.default_rng(5)
    m, h = rng.uniform(-0.6, 0.6, size=6), np.full(6, 0.2)
    state = mod.init(hyperparameters=hp, m=m, h=h)
    ess, wd, b2 = hp["ess"], hp["weight_decay"], hp["beta2"]
    seen_negative = False
    for t in range(6):
        rec = Recorder(grad)
        new = mod.step(state, oracles={"grad": rec}, rng=np.random.default_rng(100 + t), **hp)
        th = np.array(rec.calls)
        # Stein/Price with σ² = 1/(ess(h + δ)): ĥ = mean_k ∇ℓ(θ_k)(θ_k − m)·ess(h + δ)   (IVON, Alg. 1)
        h_hat = (grad(th) * (th - state["m"])).mean(axis=0) * ess * (state["h"] + wd)
        seen_negative |= bool((h_hat < 0).any())
        h_ref = b2 * state["h"] + (1 - b2) * h_hat + 0.5 * (1 - b2) ** 2 * (state["h"] - h_hat) ** 2 / (state["h"] + wd)
        # h = s/ess − δ is read back from the stored precision s = ess(h + δ): a subtraction that loses up to
        # (s/ess)/|h| ulps; here |h| ≥ 0.07 and s/ess ≲ 20, so ≤ 300 ulps ≈ 7e-14 relative (observed: 1e-15).
        # 1e-11 is a wide margin; the uncorrected update differs by ½(1 − β₂)²(h − ĥ)²/(h + δ) = O(0.1-10) here.
        np.testing.assert_allclose(new["h"], h_ref, rtol=1e-11, atol=0)
        assert (new["h"] + wd > 0).all()
        assert (new["h"] + wd >= (state["h"] + wd) / 2 * (1 - 1e-12)).all()    # ≥ half the previous precision
        state = new
    assert seen_negative


# ----------------------------------------------------------------- the correction derived from the family
#
# geometry() reads Γ off the family's log-partition; here it is checked against the defining identity
# g(Γ(V, V), W) = ½ D³Ã[V, V, W] with Ã(p) = A(λ(p)) differentiated numerically (central differences of the
# log-partition written here from the family's textbook form, not from the engine), and against the closed forms of
# Lin et al. (2020): Γ(G, G) = −G S⁻¹ G for the Gaussian precision, −G²/s elementwise, −G²/β for a Gamma's rate.

from blr_derive.core.errors import SpecError                 # noqa: E402
from blr_derive.families.library import load_family          # noqa: E402
from blr_derive.families.symbolic import evaluate            # noqa: E402
from blr_derive.rules.riemannian_correction import geometry  # noqa: E402


def _fail(msg):
    return SpecError(msg)


def _geo(family, param):
    return geometry(load_family(family, "."), param, _fail)


def test_christoffel_symbols_of_the_gaussian_precision_matrix():
    geo = _geo("gaussian_full", "S")
    fam = load_family("gaussian_full", ".")
    rng = np.random.default_rng(1)
    P = 3
    B = rng.normal(size=(P, P))
    S = B @ B.T + P * np.eye(P)
    m = rng.normal(size=P)
    C = rng.normal(size=(P, P))
    V, W = C + C.T, np.diag(rng.normal(size=P)) + np.ones((P, P))
    env = {fam.params["S"].symbol: S, fam.params["m"].symbol: m.reshape(P, 1), geo.direction: V}
    gamma = evaluate(geo.gamma, env, {fam.dim: P})
    np.testing.assert_allclose(gamma, -V @ np.linalg.solve(S, V), rtol=1e-12, atol=1e-12)   # Lin et al. (2020)

    # the defining identity, by finite differences of Ã(S) = ½ mᵀSm − ½ log|S| along the directions, in 60-digit
    # arithmetic (steps of 1e-12: truncation ~1e-24, rounding ~1e-60/1e-36)
    import mpmath
    with mpmath.workdps(60):
        mp = lambda a: mpmath.matrix(a.tolist())                          # noqa: E731
        mS, mV, mW, mG, mm = mp(S), mp(V), mp(W), mp(gamma), mp(m.reshape(P, 1))

        def A(X):
            return (mm.T * X * mm)[0] / 2 - mpmath.log(mpmath.det(X)) / 2

        def d2(X, U, Z, h=mpmath.mpf("1e-12")):
            return (A(X + h * U + h * Z) - A(X + h * U - h * Z) - A(X - h * U + h * Z)
                    + A(X - h * U - h * Z)) / (4 * h * h)
        h = mpmath.mpf("1e-12")
        third = (d2(mS + h * mV, mV, mW) - d2(mS - h * mV, mV, mW)) / (2 * h)     # D³Ã[V, V, W]
        metric = d2(mS, mG, mW)                                                  # g(Γ(V, V), W)
        assert abs(metric - third / 2) < 1e-10 * abs(third)


@pytest.mark.parametrize("family,param,closed", [
    ("gaussian_diag", "s", lambda v, p: -v ** 2 / p["s"]),
    ("gaussian_isotropic", "s", lambda v, p: -v ** 2 / p["s"]),
    ("gamma", "beta", lambda v, p: -v ** 2 / p["beta"]),
])
def test_christoffel_symbols_of_scalar_parameters(family, param, closed):
    geo = _geo(family, param)
    fam = load_family(family, ".")
    vals = {"m": 0.7, "s": 2.3, "alpha": 1.7, "beta": 0.8}
    env = {p.symbol: np.full((4, 1), vals[n]) if hasattr(p.symbol, "shape") else vals[n] for n, p in fam.params.items()}
    env[geo.direction] = 1.9
    got = float(evaluate(geo.gamma, env, {fam.dim: 4} if fam.dim is not None else None))
    assert got == pytest.approx(closed(1.9, vals), rel=1e-13)


@pytest.mark.parametrize("family,param,needle", [
    ("gaussian_mean_covariance", "Sigma", "not affine in Sigma"),
    ("gaussian_full", "Q", "not a free parameter"),
])
def test_families_without_the_structure_are_refused(family, param, needle):
    with pytest.raises(SpecError, match=needle):
        _geo(family, param)


# ----------------------------------------------------------------------------- the full Gaussian (Newton)

NEWTON = """\
name: newton_pd
family: gaussian_full
loss: abstract
approximations:
  - delta
{extra}hyperparameters:
  rho: {{default: 1.0}}
"""


@functools.lru_cache(maxsize=None)
def newton(corrected=True):
    extra = "  - riemannian_correction: {param: S}\n" if corrected else ""
    return compiled(NEWTON.format(extra=extra))


def _indefinite(rng, P):
    A = rng.normal(size=(P, P))
    lam = rng.normal(size=P) * 3
    lam[0] = -abs(lam[0]) - 1.0                        # at least one negative eigenvalue
    Q = np.linalg.qr(A)[0]
    return Q @ np.diag(lam) @ Q.T


def test_full_gaussian_stays_positive_definite_for_any_rho_and_indefinite_hessians():
    mod = newton()
    rng = np.random.default_rng(7)
    for trial in range(40):
        P = int(rng.integers(1, 6))
        B = rng.normal(size=(P, P))
        S = B @ B.T + 0.1 * np.eye(P)
        H = _indefinite(rng, P)
        g = rng.normal(size=P)
        rho = float(10.0 ** rng.uniform(-2, 2))          # 0.01 .. 100
        new = mod.step(mod.init(m=np.zeros(P), S=S), oracles={"grad": lambda x: g, "hess": lambda x: H}, rho=rho)
        assert np.linalg.eigvalsh(new["S"]).min() > 0
        # Lin et al. (2020), Eq. 12 as a sum of squares: ½(S + (S + ρG) S⁻¹ (S + ρG)), G = H − S
        R = S + rho * (H - S)
        np.testing.assert_allclose(new["S"], 0.5 * (S + R @ np.linalg.solve(S, R)), rtol=1e-9,
                                   atol=1e-9 * np.abs(R).max() ** 2 / np.linalg.eigvalsh(S).min())
        # the mean is preconditioned by the corrected precision (Lin et al.'s block coordinates)
        np.testing.assert_allclose(new["m"], -rho * np.linalg.solve(new["S"], g), rtol=1e-9, atol=1e-12)


def test_full_gaussian_agrees_with_the_plain_blr_to_second_order():
    with_, without = newton(True), newton(False)
    rng = np.random.default_rng(3)
    P = 4
    B = rng.normal(size=(P, P))
    S = B @ B.T + np.eye(P)
    H = _indefinite(rng, P)
    G = H - S
    oracles = {"grad": lambda x: np.ones(P), "hess": lambda x: H}
    for rho in (1e-2, 1e-3):
        a = with_.step(with_.init(m=np.zeros(P), S=S), oracles=oracles, rho=rho)["S"]
        b = without.step(without.init(m=np.zeros(P), S=S), oracles=oracles, rho=rho)["S"]
        np.testing.assert_allclose((a - b) / rho ** 2, 0.5 * G @ np.linalg.solve(S, G), rtol=1e-6, atol=1e-8)


def test_full_gaussian_is_the_second_order_retraction_of_the_geodesic():
    """The Fisher–Rao geodesic of the precision (mean fixed) from S with velocity G is
    S^½ expm(t S^-½ G S^-½) S^½; the corrected step differs from it by O(ρ³), the plain one by O(ρ²)."""
    with_, without = newton(True), newton(False)
    rng = np.random.default_rng(11)
    P = 3
    B = rng.normal(size=(P, P))
    S = B @ B.T + np.eye(P)
    H = _indefinite(rng, P)
    w, U = np.linalg.eigh(S)
    Sh, Sih = U @ np.diag(np.sqrt(w)) @ U.T, U @ np.diag(1 / np.sqrt(w)) @ U.T
    oracles = {"grad": lambda x: np.zeros(P), "hess": lambda x: H}
    ratios = []
    for rho in (4e-2, 2e-2, 1e-2):
        e, V = np.linalg.eigh(Sih @ (H - S) @ Sih)
        geo = Sh @ V @ np.diag(np.exp(rho * e)) @ V.T @ Sh
        a = with_.step(with_.init(m=np.zeros(P), S=S), oracles=oracles, rho=rho)["S"]
        b = without.step(without.init(m=np.zeros(P), S=S), oracles=oracles, rho=rho)["S"]
        ratios.append((np.abs(a - geo).max(), np.abs(b - geo).max()))
    # halving ρ divides the corrected error by ≈ 8 (third order) and the plain one by ≈ 4 (second order)
    for (a1, b1), (a2, b2) in zip(ratios, ratios[1:]):
        assert 6.5 < a1 / a2 < 9.5 and 3.5 < b1 / b2 < 4.5


# ---------------------------------------------------------------------------------- mixture components

def _himmelblau():
    def g(x):
        a, b = x[0] ** 2 + x[1] - 11, x[0] + x[1] ** 2 - 7
        return np.array([4 * x[0] * a + 2 * b, 2 * a + 4 * x[1] * b])

    def H(x):
        return np.array([[12 * x[0] ** 2 + 4 * x[1] - 42, 4 * x[0] + 4 * x[1]],
                         [4 * x[0] + 4 * x[1], 4 * x[0] + 12 * x[1] ** 2 - 26]])
    return {"grad": g, "hess": H}


@pytest.mark.parametrize("name", ["multimodal", "multimodal_unrolled"])
def test_every_mixture_component_keeps_a_positive_definite_precision(name):
    """The catalog's multimodal recipes (components as an array axis; one state per component) from random starts
    on Himmelblau's function, where the plain step leaves the positive-definite cone in most runs: every
    component's precision stays PD, and each step is Lin et al.'s ½(S_k + R_k S_k⁻¹ R_k) of the plain recipe's
    step R_k (the same recipe without the rule) from the same state, component by component."""
    from conftest import CATALOG
    text = (CATALOG / f"{name}.yaml").read_text()
    assert "riemannian_correction: {param: S}" in text
    with_ = compiled(text)
    # the plain step from the axis form (the unrolled one solves with the new precision by Cholesky, which raises
    # where it is not positive definite; the two forms are equal to 1e-12, test_mixture_components.py)
    without = _unchecked(compiled((CATALOG / "multimodal.yaml").read_text().replace(
        "  - riemannian_correction: {param: S}\n", "")))
    oracles = _himmelblau()
    for seed in range(3):
        rng = np.random.default_rng(seed)
        m0 = rng.uniform(-5, 5, size=(2, 2))
        if name == "multimodal":
            st = with_.init(m=m0, S=np.stack([10.0 * np.eye(2)] * 2))
            comps = lambda d, key: [d[key][k] for k in range(2)]               # noqa: E731
        else:
            st = with_.init(m1=m0[0], S1=10.0 * np.eye(2), m2=m0[1], S2=10.0 * np.eye(2))
            comps = lambda d, key: [d[f"{key}{k}"] for k in (1, 2)]           # noqa: E731
        left = False
        for _ in range(25):
            new = with_.step(st, oracles=oracles)
            plain = without.step(without.init(m=np.stack(comps(st, "m")), S=np.stack(comps(st, "S"))),
                                 oracles=oracles)
            for S, R, S_new in zip(comps(st, "S"), plain["S"], comps(new, "S")):
                left |= bool(np.linalg.eigvalsh(R).min() <= 0)
                assert np.linalg.eigvalsh(S_new).min() > 0
                np.testing.assert_allclose(S_new, 0.5 * (S + R @ np.linalg.solve(S, R)), rtol=1e-9,
                                           atol=1e-9 * (1 + np.abs(R).max() ** 2 / np.linalg.eigvalsh(S).min()))
            st = new
        assert left or seed        # the plain step leaves the cone from these starts (seed 0 at least)
