"""Rule ``natural_to_ordinary`` (Eq. 9): the updated natural parameters λ_{t+1} are solved for the ordinary
parameters (m, S, α, β, p, ...) with the family's inverse map, block by block.

Checked with numbers:

* the inverse map ordinary(λ) the rule uses round-trips λ(ordinary) for every built-in family (random parameters);
* μ = ∇A and the Fisher information F = ∇²A the engine derives (the metric of Eq. 4 that makes ∇_μ the natural
  gradient) against central and second differences of A(λ) written here from the textbook normalizers
  (log-gamma, log-determinant, multivariate gamma), in the engine's orthonormal coordinates for matrix blocks;
* the generated steps of several families (full Gaussian, Dirichlet, categorical, normal-gamma, inverse gamma,
  beta, exponential): mapping their ordinary output back through λ(·), written here by hand, gives
  λ_{t+1} = (1−ρ)λ_t − ρ∇_μ E_q[ℓ] computed by hand (Eq. 6 with the loss's coefficients in T);
* the recorded step for S of the full Gaussian, evaluated, equals −2λ⁽²⁾_{t+1} (Eq. 9: λ⁽²⁾ = −S/2).
"""
import functools

import numpy as np
import pytest
from scipy import special

from blr_derive import api
from blr_derive.families.numeric import tangent_basis
from blr_derive.families.symbolic import evaluate

SIZED = {"categorical": {"name": "categorical", "K": 3}, "dirichlet": {"name": "dirichlet", "K": 3}}
DIM = 2


@functools.lru_cache(maxsize=None)
def family(name):
    return api.family(SIZED.get(name, name))


def fixed_values(fam):
    out = {}
    for p in fam.fixed_params:
        out[p.symbol] = np.array([[2.0, 0.4], [0.4, 1.0]]) if p.shape == "matrix" else 1.7
    return out


def as_array(v):
    return np.asarray(v, dtype=float).reshape(np.shape(v)) if np.ndim(v) else float(v)


@pytest.mark.parametrize("name", api.families())
def test_inverse_map_round_trips(name):
    fam = family(name)
    rng = np.random.default_rng(sum(map(ord, name)))
    dim = DIM if fam.dim is not None else None
    for _ in range(2):
        vals = fam.sample_params(rng, DIM)
        vals.update(fixed_values(fam))
        lam = {l: fam.evaluate(e, vals, dim) for l, e in zip(fam.lam, fam.eta)}
        fixed = {p.symbol: vals[p.symbol] for p in fam.fixed_params}
        for p in fam.free_params:
            back = fam.evaluate(fam.ord_from_nat[p.symbol], {**lam, **fixed}, dim)
            want = np.asarray(vals[p.symbol], dtype=float)
            # a handful of roundings through exp/log/inverse: 1e-10 relative
            np.testing.assert_allclose(np.asarray(back, dtype=float).reshape(want.shape), want, rtol=1e-10,
                                       atol=1e-12, err_msg=f"{name}.{p.name}")


# ------------------------------------------------------------------ A(λ) written here, from the normalizers
# each takes {λ symbol name: value} (and fixed parameters by name) and returns the log-partition

def _g(x):
    return special.gammaln(x)


HAND_A = {
    "bernoulli": lambda l: np.logaddexp(l["lambda1"], -l["lambda1"]),            # θ ∈ {−1, +1}
    "bernoulli_logit": lambda l: np.logaddexp(l["lambda1"], -l["lambda1"]),
    "beta": lambda l: _g(l["lambda1"] + 1) + _g(l["lambda2"] + 1) - _g(l["lambda1"] + l["lambda2"] + 2),
    "categorical": lambda l: np.log1p(np.exp(l["lambda1"]) + np.exp(l["lambda2"])),
    "dirichlet": lambda l: sum(_g(l[f"lambda{k}"] + 1) for k in (1, 2, 3))
    - _g(sum(l[f"lambda{k}"] for k in (1, 2, 3)) + 3),
    "exponential": lambda l: -np.log(-l["lambda1"]),
    "gamma": lambda l: _g(l["lambda1"] + 1) - (l["lambda1"] + 1) * np.log(-l["lambda2"]),
    "inverse_gamma": lambda l: _g(-l["lambda1"] - 1) - (-l["lambda1"] - 1) * np.log(-l["lambda2"]),
    "gaussian_diag": lambda l: -l["lambda1"] ** 2 / (4 * l["lambda2"]) - 0.5 * np.log(-2 * l["lambda2"]),
    "gaussian_diag_fixed_precision": lambda l: l["lambda1"] ** 2 / (2 * l["s"]),
    "poisson": lambda l: np.exp(l["lambda1"]),
    # NG(θ, τ | m, κ, α, β) = β^α/Γ(α) (κ/2π)^{1/2} τ^{α−1/2} exp(−βτ − κτ(θ−m)²/2), h = (2π)^{-1/2}
    "normal_gamma": lambda l: (_g(l["lambda4"] + 0.5)
                               - (l["lambda4"] + 0.5) * np.log(l["lambda1"] ** 2 / (4 * l["lambda2"]) - l["lambda3"])
                               - 0.5 * np.log(-2 * l["lambda2"])),
    "gaussian_fixed_cov": lambda l: 0.5 * l["lambda1"] @ l["lambda1"],
    "gaussian_fixed_precision": lambda l: 0.5 * l["lambda1"] @ np.linalg.solve(l["S"], l["lambda1"]),
    "gaussian_full": lambda l: (-0.25 * l["lambda1"] @ np.linalg.solve(l["lambda2"], l["lambda1"])
                                - 0.5 * np.linalg.slogdet(-2 * l["lambda2"])[1]),
    # W(X | V, n): log Z = (nP/2) log 2 + (n/2) log det V + log Γ_P(n/2), with V = −λ₁⁻¹/2, n = 2λ₂ + P + 1
    "wishart": lambda l: _wishart(l["lambda1"], l["lambda2"]),
}


def _wishart(l1, l2):
    P = l1.shape[0]
    n = 2 * l2 + P + 1
    V = -0.5 * np.linalg.inv(l1)
    return n * P / 2 * np.log(2) + n / 2 * np.linalg.slogdet(V)[1] + special.multigammaln(n / 2, P)


def coordinates(fam, lam):
    """The engine's orthonormal tangent coordinates of λ (one per scalar block), as a flat basis list."""
    basis = []
    for bi, l in enumerate(fam.lam):
        for E in tangent_basis(l, DIM, fam.symmetric):
            basis.append((bi, E))
    return basis


@pytest.mark.parametrize("name", sorted(HAND_A))
def test_mu_and_fisher_are_the_derivatives_of_the_log_partition(name):
    fam = family(name)
    rng = np.random.default_rng(7 + len(name))
    dim = DIM if fam.dim is not None else None
    vals = fam.sample_params(rng, DIM)
    vals.update(fixed_values(fam))
    fixed_by_name = {p.name: vals[p.symbol] for p in fam.fixed_params}
    fixed = {p.symbol: vals[p.symbol] for p in fam.fixed_params}
    lam_vals = {l: fam.evaluate(e, vals, dim) for l, e in zip(fam.lam, fam.eta)}   # vectors as (P, 1)
    basis = coordinates(fam, lam_vals)

    def A_at(c):
        named = dict(fixed_by_name)
        for l in fam.lam:
            named[str(l)] = np.array(lam_vals[l], dtype=float)
        for (bi, E), ci in zip(basis, c):
            named[str(fam.lam[bi])] = named[str(fam.lam[bi])] + ci * E
        named = {k: (v[:, 0] if np.ndim(v) == 2 and v.shape[1] == 1 else v) for k, v in named.items()}
        return float(HAND_A[name](named))

    n = len(basis)
    h1, h2 = 1e-6, 1e-4
    Ec = np.eye(n)
    grad = np.array([(A_at(h1 * e) - A_at(-h1 * e)) / (2 * h1) for e in Ec])
    hess = np.array([[(A_at(h2 * (Ec[i] + Ec[j])) - A_at(h2 * (Ec[i] - Ec[j])) - A_at(h2 * (Ec[j] - Ec[i]))
                       + A_at(-h2 * (Ec[i] + Ec[j]))) / (4 * h2 * h2) for j in range(n)] for i in range(n)])
    # μ(λ) from the engine, in the same coordinates: ⟨μ_block, E⟩
    mu = []
    for bi, E in basis:
        v = fam.evaluate(fam.mu_of_lam[bi], {**lam_vals, **fixed}, dim)
        mu.append(float(np.sum(np.asarray(v, float) * E)) if np.ndim(E) else float(v) * E)
    F = fam.fisher_at({**lam_vals, **fixed}, dim)
    # central differences: error ~h²·|A'''| + 1e-16|A|/h ≈ 1e-10 for μ; second differences (h = 1e-4) ~1e-7
    np.testing.assert_allclose(mu, grad, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(F, hess, rtol=1e-5, atol=1e-6)
    assert np.all(np.linalg.eigvalsh((F + F.T) / 2) > 0)


# ------------------------------------------------------------------ the derived updates, mapped back to λ

@functools.lru_cache(maxsize=None)
def compiled(fam_key, loss, hp_names):
    fam = SIZED.get(fam_key, fam_key)
    hp = {"rho": 0.3, **{k: 1.0 for k in hp_names}}
    return api.derive(family=fam, loss={"expression": loss}, approximations=["exact"], hyperparameters=hp,
                      name=f"n2o_{fam_key}").compile("numpy")


CASES = [
    # family, loss, coefficient names, λ(ordinary) by hand, ∇_μ E_q[ℓ] = the loss's coefficients in T, init
    ("dirichlet", "-c1*log(theta1) - c2*log(theta2) - c3*log(theta3)", ("c1", "c2", "c3"),
     lambda o: np.array([o["a1"] - 1, o["a2"] - 1, o["a3"] - 1]),
     lambda c: -np.array([c["c1"], c["c2"], c["c3"]]), {"a1": 0.7, "a2": 2.5, "a3": 1.3}),
    ("categorical", "c1*theta1 + c2*theta2", ("c1", "c2"),
     lambda o: np.log(np.array([o["p1"], o["p2"]]) / (1 - o["p1"] - o["p2"])),
     lambda c: np.array([c["c1"], c["c2"]]), {"p1": 0.2, "p2": 0.5}),
    ("normal_gamma", "c1*tau*theta + c2*tau*theta**2 + c3*tau - c4*log(tau)", ("c1", "c2", "c3", "c4"),
     lambda o: np.array([o["kappa"] * o["m"], -o["kappa"] / 2, -o["beta"] - o["kappa"] * o["m"] ** 2 / 2,
                         o["alpha"] - 0.5]),
     lambda c: np.array([c["c1"], c["c2"], c["c3"], -c["c4"]]), {"m": 0.4, "kappa": 2.0, "alpha": 1.5, "beta": 0.8}),
    ("inverse_gamma", "c1*log(theta) + c2/theta", ("c1", "c2"),
     lambda o: np.array([-o["alpha"] - 1, -o["beta"]]),
     lambda c: np.array([c["c1"], c["c2"]]), {"alpha": 2.2, "beta": 0.9}),
    ("beta", "-c1*log(theta) - c2*log(1 - theta)", ("c1", "c2"),
     lambda o: np.array([o["a"] - 1, o["b"] - 1]),
     lambda c: -np.array([c["c1"], c["c2"]]), {"a": 1.4, "b": 3.1}),
    ("exponential", "c1*theta", ("c1",),
     lambda o: np.array([-o["r"]]), lambda c: np.array([c["c1"]]), {"r": 0.6}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_generated_update_maps_back_to_the_natural_parameter_update(case):
    fam_key, loss, names, lam_of, coef_of, init = case
    mod = compiled(fam_key, loss, names)
    # Eq. 6's algebra at arbitrary coefficients: two of normal_gamma's draws below take κ negative (outside the
    # family, which the step's domain check reports, test_domain_checks.py), so the checks are off here
    mod.CHECK_DOMAINS = False
    rng = np.random.default_rng(len(fam_key))
    for _ in range(3):
        c = {k: float(v) for k, v in zip(names, rng.uniform(0.3, 2.0, size=len(names)))}
        if fam_key == "categorical":
            c = {k: float(v) for k, v in zip(names, rng.normal(size=len(names)))}
        if fam_key == "normal_gamma":
            # ∇_μ = (c1, c2, c3, −c4) with c2 < 0 (the updated κ is not kept positive by this: see above)
            c["c2"] = -abs(c["c2"])
            c["c3"] = abs(c["c3"]) + c["c1"] ** 2 / (4 * abs(c["c2"]))
        rho = float(rng.uniform(0.1, 0.9))
        out = mod.step(mod.init(**init), rho=rho, **c)
        got = lam_of({k: float(v) for k, v in out.items()})
        want = (1 - rho) * lam_of(init) - rho * coef_of(c)          # Eq. 6, h constant
        # closed forms on both sides (log/exp for the categorical): a few roundings
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


def test_full_gaussian_precision_update_is_minus_twice_the_updated_lambda2():
    """The recorded update of S (Eq. 9: λ⁽²⁾ = −S/2; solved directly or in increment form, whichever the engine
    picks) evaluated with numbers equals −2λ⁽²⁾_{t+1} from Eq. 6 by hand, and the generated step's (m, S) map back
    to λ_{t+1} = ((1−ρ)Sm − ρ(g − Hm), −((1−ρ)S + ρH)/2)."""
    d = api.derive("name: n2o_full\nfamily: gaussian_full\nloss: abstract\napproximations: [delta]\n"
                   "hyperparameters: {rho: 0.1}\n")
    fam = d.recipe.family
    rhs = d.update["S"]
    syms = {str(s): s for s in rhs.free_symbols}
    S0 = np.array([[1.5, 0.4], [0.4, 0.9]])
    H0 = np.array([[2.0, -0.3], [-0.3, 0.5]])
    m0, g0, rho = np.array([0.5, -1.0]), np.array([0.3, 0.8]), 0.35
    val = evaluate(rhs, {syms["S"]: S0, syms["H"]: H0, syms["rho"]: rho}, {fam.dim: 2})
    lam1 = (1 - rho) * S0 @ m0 - rho * (g0 - H0 @ m0)
    lam2 = (1 - rho) * (-S0 / 2) - rho * H0 / 2
    np.testing.assert_allclose(val, -2 * lam2, rtol=1e-13)
    mod = d.compile("numpy")
    out = mod.step(mod.init(m=m0, S=S0), oracles={"grad": lambda t: g0, "hess": lambda t: H0}, rho=rho)
    np.testing.assert_allclose(-out["S"] / 2, lam2, rtol=1e-13)
    np.testing.assert_allclose(out["S"] @ out["m"], lam1, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ numerical robustness of the solved maps
# The three tests below expose engine bugs (see the report): the updated ordinary parameters of the categorical
# and Bernoulli families are computed from exp(λ_{t+1}) without the max-shift that the product candidates apply
# (rules/product.py, stable_softmax), and for the Bernoulli family tidy() (rules/blr.py) expands exp(a + b) into
# exp(a)·exp(b), so exp(2ρc) overflows on its own.  The exact update is finite and well-conditioned in all three.

def test_categorical_update_stays_finite_for_a_large_natural_parameter():
    """λ₁ ≈ 27 (softmax (1 - 3e-12, ...)): finite and right.  At λ₁ ≈ 900 the other probabilities e^{-900} underflow
    and p₁ rounds to 1 -- a point mass, from which the next step's λ = log(p/(1 - p₁ - p₂)) is inf or NaN (it was
    returned as (1, 0), and the next step gave NaN): the step says so (float64 rounded p onto the boundary of its
    domain, although every λ is valid; from λ₁ ≈ 37 on, 1 - p₁ - p₂ rounds to 0 and is named)."""
    mod = compiled("categorical", "c1*theta1 + c2*theta2", ("c1", "c2"))
    mod.CHECK_DOMAINS = True               # the module is shared: the test above switches its checks off
    p1, p2, c2, rho = 0.2, 0.5, 0.0, 0.9
    c1 = -30.0
    out = mod.step(mod.init(p1=p1, p2=p2), rho=rho, c1=c1, c2=c2)
    lam = (1 - rho) * np.log(np.array([p1, p2]) / (1 - p1 - p2)) - rho * np.array([c1, c2])      # Eq. 6
    want = special.softmax(np.r_[lam, 0.0])[:2]
    got = np.array([float(out["p1"]), float(out["p2"])])
    assert np.all(np.isfinite(got)) and got[1] > 0, got
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    with pytest.raises(FloatingPointError, match=r"the new p2 is not positive \(value 0\).*lies in its domain for "
                                                 r"every natural parameter, but float64 rounded it onto the boundary"):
        mod.step(mod.init(p1=p1, p2=p2), rho=rho, c1=-1000.0, c2=c2)


@functools.lru_cache(maxsize=None)
def bernoulli_module():
    return api.derive(family="bernoulli", loss={"expression": "c1*theta"}, approximations=["exact"],
                      hyperparameters={"rho": 0.3, "c1": 1.0}, name="n2o_bernoulli").compile("numpy")


def test_bernoulli_update_stays_finite_for_a_large_loss_coefficient():
    """λ = ½ log(p/(1−p)), λ_{t+1} = (1−ρ)λ − ρc, p_{t+1} = σ(2λ_{t+1}); with ρc = 360 the answer is ~e^{-720}."""
    mod = bernoulli_module()
    p, c, rho = 0.2, 400.0, 0.9
    with np.errstate(all="ignore"):
        got = float(mod.step(mod.init(p=p), rho=rho, c1=c)["p"])
    want = special.expit(2 * ((1 - rho) * 0.5 * np.log(p / (1 - p)) - rho * c))
    assert np.isfinite(got), got
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-300)


def test_bernoulli_update_keeps_the_precision_of_one_minus_p():
    """Near p = 1 the information is in 1 − p (1e-9 here, known to ~1e-7 relative from the double p); the exact
    update maps it smoothly ((1 − p') ≈ const·(1 − p)^{1−ρ}), so 1 − p' should be as accurate, not lost to
    cancellation."""
    mod = bernoulli_module()
    p, c, rho = 1 - 1e-9, -1.0, 0.3
    got = float(mod.step(mod.init(p=p), rho=rho, c1=c)["p"])
    lam_new = (1 - rho) * 0.5 * (np.log(p) - np.log1p(-p)) - rho * c
    want_tail = special.expit(-2 * lam_new)                          # 1 − p', computed without cancellation
    np.testing.assert_allclose(1 - got, want_tail, rtol=1e-5)
