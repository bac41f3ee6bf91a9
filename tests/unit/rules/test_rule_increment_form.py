"""Rule ``increment_form`` (Eq. 12): a parameter that enters λ linearly is updated as p_{t+1} = p_t + Δ, where
Δ solves η(Δ; new others) = λ_{t+1} − η(p_t; new others), and the terms that reproduce the old p cancel
(m_{t+1} = m_t − ρS_{t+1}⁻¹E[∇ℓ] instead of m_{t+1} = S_{t+1}⁻¹λ⁽¹⁾_{t+1}, Eq. 12 / App. D).

Checked with numbers, for every increment-form step of several derivations (full, diagonal and fixed-precision
Gaussians, delta and Monte Carlo, NCVI's quadrature): the recorded p + Δ, evaluated at random states, oracle values
and hyperparameters, equals the direct solution of Eq. 9 — the family's inverse map ordinary(λ) evaluated at the
recorded λ_{t+1} of Eq. 6 (e.g. −½(λ⁽²⁾)⁻¹λ⁽¹⁾ for the mean) — and the generated full-Gaussian step equals the
direct solve np.linalg.solve(S_{t+1}, λ⁽¹⁾_{t+1}) with λ_{t+1} computed here by hand.
"""
import functools

import numpy as np
import pytest
import sympy as sp
import yaml

from blr_derive import api
from blr_derive.core.matexpr import is_mat
from blr_derive.families.symbolic import evaluate

P = 3


def recipe(family, approx="delta", hp=None):
    return yaml.safe_dump({"name": f"inc_{family}", "family": family, "loss": "abstract",
                           "hyperparameters": hp or {"rho": 0.1}, "approximations": [approx]}, sort_keys=False)


RECIPES = {
    "gaussian_full": recipe("gaussian_full"),
    "gaussian_diag": recipe("gaussian_diag"),
    "gaussian_fixed_precision": recipe("gaussian_fixed_precision"),
    "gaussian_diag_mc": recipe("gaussian_diag", {"monte_carlo": {"samples": "S"}},
                               {"rho": 0.1, "S": {"default": 2, "type": "int"}}),
    "ncvi": "ncvi",
}


@functools.lru_cache(maxsize=None)
def derivation(key):
    return api.derive(RECIPES[key])


def spd(rng, n):
    B = rng.normal(size=(n, n))
    return B @ B.T / n + 0.5 * np.eye(n)


def random_value(sym, rng):
    """A value for a state, oracle or hyperparameter symbol: SPD matrices for matrices (S, H), positive values for
    scalars that must be (precisions, variances), ρ in (0, 1)."""
    name = str(sym)
    if name in ("rho", "lr"):
        return float(rng.uniform(0.1, 0.9))
    if is_mat(sym):
        r, c = (int(sp.sympify(k).subs({s: P for s in sp.sympify(k).free_symbols})) for k in sym.shape)
        if r == c and r > 1:
            return spd(rng, r)
        return rng.normal(size=(r, c))
    if sym.is_positive or name in ("s", "H", "h_bar", "S"):
        return float(rng.uniform(0.5, 2.0))
    return float(rng.normal())


def steps_env(d, rng):
    """Random values for every symbol of the update program, then the updated parameters in update order."""
    fam = d.recipe.family
    free = set()
    for _, _, e in d.updates:
        free |= e.free_symbols
    for e in (e for l, e, *_ in d.steps_for("blr")[-1].equations):
        free |= e.free_symbols
    new = {s for _, s, _ in d.updates}
    env = {s: random_value(s, rng) for s in free - new if s != fam.dim}
    dims = {fam.dim: P} if fam.dim is not None else {}
    for name, s, e in d.updates:
        env[s] = evaluate(e, {k: v for k, v in env.items() if k in e.free_symbols}, dims)
    return env, dims


@pytest.mark.parametrize("key", ["gaussian_full", "gaussian_diag", "gaussian_fixed_precision", "gaussian_diag_mc"])
def test_increment_equals_the_direct_solution_of_eq9(key):
    d = derivation(key)
    fam = d.recipe.family
    steps = d.steps_for("increment_form")
    assert steps, "the mean enters λ linearly: its update must be in increment form"
    lam_next = {str(l): e for l, e, *_ in d.steps_for("blr")[-1].equations}
    rng = np.random.default_rng(len(key))
    for _ in range(3):
        env, dims = steps_env(d, rng)
        lam_vals = {}
        for l in fam.lam:
            e = lam_next[f"{l.name}_next"]
            lam_vals[l] = evaluate(e, {k: v for k, v in env.items() if k in e.free_symbols}, dims)
        fixed = {p.symbol: env[p.symbol] for p in fam.fixed_params if p.symbol in env}
        for fp in fam.fixed_params:
            if fp.symbol not in fixed:       # a fixed parameter that the update never reads
                fixed[fp.symbol] = random_value(fp.symbol, rng)
        for st in steps:
            new_sym, expr = st.equations[0][:2]
            pname = str(new_sym)[:-len("_new")]
            p = fam.params[pname]
            got = np.asarray(evaluate(expr, {k: v for k, v in env.items() if k in expr.free_symbols}, dims), float)
            direct = np.asarray(fam.evaluate(fam.ord_from_nat[p.symbol], {**lam_vals, **fixed}, dims.get(fam.dim)),
                                float)
            # two algebraically equal closed forms, evaluated in 30-digit arithmetic: agreement to ~1e-13
            np.testing.assert_allclose(got.reshape(direct.shape), direct, rtol=1e-11, atol=1e-12,
                                       err_msg=f"{key}: {st.title}")


def test_ncvi_mean_update_is_the_direct_solve():
    """NCVI (gauss_hermite): the increment form of m with the quadrature definitions as opaque values."""
    d = derivation("ncvi")
    st, = d.steps_for("increment_form")
    expr = st.equations[0][1]
    lam = {str(l): e for l, e, *_ in d.steps_for("blr")[-1].equations}
    rng = np.random.default_rng(1)
    syms = set(expr.free_symbols) | lam["lambda1_next"].free_symbols | lam["lambda2_next"].free_symbols
    env = {s: random_value(s, rng) for s in syms if str(s) not in ("S_new", "P")}
    by = {str(s): s for s in syms}
    dims = {d.recipe.family.dim: P}
    l1 = evaluate(lam["lambda1_next"], {k: v for k, v in env.items() if k in lam["lambda1_next"].free_symbols}, dims)
    l2 = evaluate(lam["lambda2_next"], {k: v for k, v in env.items() if k in lam["lambda2_next"].free_symbols}, dims)
    env[by["S_new"]] = -2 * l2
    got = evaluate(expr, {k: v for k, v in env.items() if k in expr.free_symbols}, dims)
    np.testing.assert_allclose(got, np.linalg.solve(-2 * l2, l1), rtol=1e-11, atol=1e-12)


def test_generated_full_gaussian_mean_equals_the_direct_solve():
    """m_{t+1} = S_{t+1}⁻¹λ⁽¹⁾_{t+1} with λ⁽¹⁾_{t+1} = (1−ρ)S m − ρ(g − H m) (Eq. 6 by hand); the generated step
    computes m − ρS_{t+1}⁻¹g instead.  Far from convergence (a large gradient) the two still agree."""
    mod = derivation("gaussian_full").compile("numpy")
    rng = np.random.default_rng(4)
    for _ in range(5):
        m0, g0 = rng.normal(size=P) * 3, rng.normal(size=P) * 10
        S0, H0 = spd(rng, P), spd(rng, P)
        rho = float(rng.uniform(0.05, 0.95))
        out = mod.step(mod.init(m=m0, S=S0), oracles={"grad": lambda t: g0, "hess": lambda t: H0}, rho=rho)
        S1 = (1 - rho) * S0 + rho * H0
        lam1 = (1 - rho) * S0 @ m0 - rho * (g0 - H0 @ m0)
        # the direct solve loses ~cond(S1)·1e-16 relative to |λ⁽¹⁾|: 1e-10 is safe
        np.testing.assert_allclose(out["S"], S1, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(out["m"], np.linalg.solve(S1, lam1), rtol=1e-10, atol=1e-10)


def test_generated_diagonal_mean_equals_the_direct_solve():
    mod = derivation("gaussian_diag").compile("numpy")
    rng = np.random.default_rng(5)
    m0, g0 = rng.normal(size=6), rng.normal(size=6) * 5
    s0, h0 = rng.uniform(0.5, 3.0, size=6), rng.uniform(0.1, 4.0, size=6)
    rho = 0.37
    out = mod.step(mod.init(m=m0, s=s0), oracles={"grad": lambda t: g0, "hess": lambda t: h0}, rho=rho)
    s1 = (1 - rho) * s0 + rho * h0
    lam1 = (1 - rho) * s0 * m0 - rho * (g0 - h0 * m0)
    np.testing.assert_allclose(out["s"], s1, rtol=1e-14)
    np.testing.assert_allclose(out["m"], lam1 / s1, rtol=1e-12, atol=1e-13)
