"""The numpy modules' ``objective`` where E_q[ℓ] is estimated (issue 42, item 1): recipes that sample q get a Monte
Carlo estimate of L(q) = E_q[ℓ] − H(q) (Eq. 2) with its standard error, from fresh draws made as step() makes them or
from loss values the caller gives; recipes that read the loss through oracles at one point (abstract losses) get
the delta-method value ℓ(point) − H(q), labelled so.  Against independent computations: scipy quadrature of
∫ q (ℓ + log q) with scipy.stats' densities and the loss model written here (ess·ℓ_o + the prior's δθ²/2), scipy's
entropies; the estimate is unbiased (a z-test over repeats) and its standard error is the spread of the
estimates; ``blr-derive check`` verifies it and fails on a wrong one.  The modules are the committed artifacts."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from blr_derive.verify.recipe import estimated_objective_checks
from conftest import load_generated


def _loss(theta):
    """ℓ_o, the loss the oracles evaluate, per coordinate (the objective sums an array over its elements)."""
    return 0.5 * (theta - 1.0) ** 2 + 0.1 * theta ** 4


# recipe: (state, hyperparameters, the density of coordinate i, the loss ℓ of Eq. 1 from ℓ_o, the support)
MC = {
    "vogn": ({"m": np.array([0.3, -0.8]), "s": np.array([4.0, 9.0])}, {"ess": 10.0, "prior_precision": 0.5},
             lambda st, i: stats.norm(st["m"][i], 1 / math.sqrt(st["s"][i])),
             lambda t, hp: hp["ess"] * _loss(t) + hp["prior_precision"] * t ** 2 / 2, (-np.inf, np.inf)),
    "reparameterization_exponential": ({"r": np.array([1.5, 3.0])}, {},
                                       lambda st, i: stats.expon(scale=1 / st["r"][i]),
                                       lambda t, hp: _loss(t), (0, np.inf)),
}


def _truth(key):
    """L(q) by quadrature, coordinate by coordinate, summed."""
    st, hp, density, loss, (lo, hi) = MC[key]
    total = 0.0
    for i in range(len(next(iter(st.values())))):
        q = density(st, i)
        total += integrate.quad(lambda t: q.pdf(t) * (loss(t, hp) + q.logpdf(t)) if q.pdf(t) > 0 else 0.0,
                                lo, hi, limit=400, epsabs=1e-12, epsrel=1e-12)[0]
    return total


@pytest.mark.parametrize("key", list(MC))
def test_monte_carlo_objective_is_unbiased(key):
    """300 estimates from 4 fresh samples each: their mean is within 4 standard errors of the quadrature (z-test),
    the reported standard error is their spread (root mean square of the reported SE over the standard
    deviation of the estimates in [0.8, 1.25]), and the entropy is scipy's, summed over the coordinates."""
    mod = load_generated(key)
    st, hp, density, _, _ = MC[key]
    assert mod.OBJECTIVE_ESTIMATE == "monte_carlo" and mod.OBJECTIVE_KEYS[:3] == ("objective", "expected_loss", "entropy")
    rng = np.random.default_rng(7)
    outs = [mod.objective(st, oracles={"loss": _loss}, rng=rng, samples=4, **hp) for _ in range(300)]
    est = np.array([o["objective"] for o in outs])
    se = np.array([o["standard_error"] for o in outs])
    want = _truth(key)
    z = (est.mean() - want) / (est.std(ddof=1) / math.sqrt(len(est)))
    assert abs(z) < 4, (est.mean(), want, z)
    ratio = math.sqrt(np.mean(se ** 2)) / est.std(ddof=1)
    assert 0.8 < ratio < 1.25, ratio
    assert all(o["estimate"] == "monte_carlo" and o["samples"] == 4 for o in outs)
    H = sum(float(density(st, i).entropy()) for i in range(2))
    assert abs(outs[0]["entropy"] - H) < 1e-10


@pytest.mark.parametrize("key", list(MC))
def test_monte_carlo_objective_from_given_values(key):
    """Loss values the caller computed at its own samples: 'expected_loss' is scale × their mean + the closed
    expectation of the added terms (vogn: ess × mean + δ(m² + 1/s)/2), 'standard_error' scale × their sample
    standard deviation / √n, with no rng or oracle needed; a number of samples with them is refused."""
    mod = load_generated(key)
    st, hp, density, _, _ = MC[key]
    values = [3.0, 4.5, 2.0, 7.25]
    out = mod.objective(st, loss=values, **hp)
    scale = hp.get("ess", 1.0)
    added = hp["prior_precision"] / 2 * float(np.sum(st["m"] ** 2 + 1 / st["s"])) if key == "vogn" else 0.0
    H = sum(float(density(st, i).entropy()) for i in range(2))
    assert abs(out["expected_loss"] - (scale * np.mean(values) + added)) < 1e-12 * max(1, abs(out["expected_loss"]))
    assert abs(out["objective"] - (scale * np.mean(values) + added - H)) < 1e-10
    assert abs(out["standard_error"] - scale * np.std(values, ddof=1) / 2) < 1e-12 * scale
    assert out["samples"] == 4 and out["estimate"] == "monte_carlo"
    assert math.isnan(mod.objective(st, loss=[1.0], **hp)["standard_error"])
    with pytest.raises(TypeError):
        mod.objective(st, loss=values, samples=3, **hp)
    with pytest.raises(TypeError, match="rng"):
        mod.objective(st, oracles={"loss": _loss}, **hp)
    with pytest.raises(TypeError, match="loss"):
        mod.objective(st, rng=np.random.default_rng(0), **hp)


def test_monte_carlo_draws_as_step_draws():
    """The fresh samples are θ_k = m + ε/√s with ε from rng.standard_normal of the state's shape, in order: the
    values the oracle sees are those a test-side draw from the same seed gives."""
    mod = load_generated("vogn")
    st, hp = MC["vogn"][:2]
    seen = []
    mod.objective(st, oracles={"loss": lambda t: seen.append(np.array(t)) or 0.0}, rng=np.random.default_rng(3),
                  samples=3, **hp)
    rng = np.random.default_rng(3)
    for t in seen:
        assert np.allclose(t, st["m"] + rng.standard_normal(2) / np.sqrt(st["s"]), rtol=0, atol=1e-15)


def test_delta_objective_of_an_oracle_recipe():
    """adam (an abstract loss, oracles at m): the delta-method value ℓ_o(m) + δm²/2 (coupled weight decay) −
    H(N(m, 1/s)), the entropy scipy's; labelled 'delta', one value, no standard error; the loss value may be
    given instead of the oracle."""
    mod = load_generated("adam")
    st = {"m": np.array([0.3, -1.2, 2.0]), "s": np.array([2.0, 0.5, 8.0])}
    H = sum(float(stats.norm(0, 1 / math.sqrt(s)).entropy()) for s in st["s"])
    want = float(np.sum(_loss(st["m"]))) + 0.1 * float(np.sum(st["m"] ** 2)) / 2 - H
    out = mod.objective(st, oracles={"loss": _loss}, weight_decay=0.1)
    assert mod.OBJECTIVE_ESTIMATE == "delta" and out["estimate"] == "delta" and out["samples"] == 1
    assert abs(out["objective"] - want) < 1e-12 and math.isnan(out["standard_error"])
    assert abs(out["entropy"] - H) < 1e-12
    # decoupled weight decay (AdamW's) is not part of the loss
    got = mod.objective(st, loss=float(np.sum(_loss(st["m"]))), weight_decay=0.1, decoupled_weight_decay=True)
    assert abs(got["objective"] - (float(np.sum(_loss(st["m"]))) - H)) < 1e-12
    with pytest.raises(ValueError):
        mod.objective(st, loss=[1.0, 2.0])
    with pytest.raises(TypeError):
        mod.objective(st, oracles={"loss": _loss}, samples=4)


def test_delta_objective_without_entropy():
    """ste drops the entropy (no_entropy, Sec. 4.5): the objective its update minimizes is ℓ_o at the sign of λ."""
    mod = load_generated("ste")
    lam = np.array([0.4, -2.0, 1e-3])
    out = mod.objective({"lam": lam}, oracles={"loss": lambda t: t * np.array([1.0, 2.0, 3.0])})
    assert out["entropy"] == 0.0 and out["objective"] == 1.0 - 2.0 + 3.0


@pytest.mark.parametrize("name", ["adam", "vogn", "reparameterization_exponential", "ste"])
def test_check_verifies_the_estimated_objective(name):
    """check's line for an estimated objective passes on the generated module (delta: below 1e-9; Monte Carlo:
    within 5 standard errors of quadrature) and fails on one that is off (delta by 1e-4, Monte Carlo by 10 of its
    standard errors)."""
    import blr_derive.api as api
    r, D = api.derive_record(f"catalog/{name}.yaml")
    mod = load_generated(name)
    (c,) = estimated_objective_checks(r, D, mod, 2)
    assert c.kind == "max" and c.passed, (c.value, c.note)
    right = mod.objective

    def off(state, **kw):
        out = right(state, **kw)
        shift = 1e-4 if out["estimate"] == "delta" else 10 * out["standard_error"]
        return {**out, "objective": out["objective"] + shift}
    mod.objective = off
    (c,) = estimated_objective_checks(r, D, mod, 2)
    assert not c.passed, c.value


# ------------------------------------------------------------------ the jax target's plain functions


@pytest.mark.slow                       # ~10 s: 200 eager calls of jax.random and the module's arithmetic
@pytest.mark.parametrize("key", ["reparameterization_exponential"])
def test_jax_monte_carlo_objective_is_unbiased(key, x64):
    """The jax module's objective draws with a jax.random key (split per sample, as its step splits it): 200
    estimates from 4 samples each are within 4 standard errors of the same quadrature, and the jax module and the
    numpy module agree on given loss values."""
    import jax
    mod = load_generated(key, "jax")
    st, hp = MC[key][:2]
    assert mod.OBJECTIVE_ESTIMATE == "monte_carlo"
    keys = jax.random.split(jax.random.key(11), 200)
    est = np.array([mod.objective(st, oracles={"loss": _loss}, key=k, samples=4, **hp)["objective"] for k in keys])
    want = _truth(key)
    z = (est.mean() - want) / (est.std(ddof=1) / math.sqrt(len(est)))
    assert abs(z) < 4, (est.mean(), want, z)
    values = [0.5, 2.0, 1.25]
    a, b = mod.objective(st, loss=values, **hp), load_generated(key).objective(st, loss=values, **hp)
    for k in ("objective", "expected_loss", "entropy", "standard_error"):
        assert abs(a[k] - b[k]) < 1e-12, k
    with pytest.raises(TypeError, match="key"):
        mod.objective(st, oracles={"loss": _loss}, **hp)


def test_jax_draws_as_step_draws(x64):
    """Sample k of the exponential's objective is θ = −log(u)/r with u = jax.random.uniform(split(key, n)[k])."""
    import jax
    mod = load_generated("reparameterization_exponential", "jax")
    r = np.array([1.5, 3.0])
    seen = []
    mod.objective({"r": r}, oracles={"loss": lambda t: seen.append(np.asarray(t)) or 0.0}, key=jax.random.key(5),
                  samples=3)
    for k, t in zip(jax.random.split(jax.random.key(5), 3), seen):
        u = np.asarray(jax.random.uniform(k, (2,), dtype=float))
        assert np.allclose(t, -np.log(u) / r, rtol=1e-14, atol=0)


def test_jax_delta_objective(x64):
    """online_newton_diag (a Hessian oracle: plain jax functions) has the delta-method value ℓ_o(m) − H(N(m, 1/s))."""
    mod = load_generated("online_newton_diag", "jax")
    st = {"m": np.array([0.3, -1.2]), "s": np.array([2.0, 0.5])}
    H = sum(float(stats.norm(0, 1 / math.sqrt(s)).entropy()) for s in st["s"])
    out = mod.objective(st, oracles={"loss": _loss})
    assert out["estimate"] == "delta" and abs(out["objective"] - (float(np.sum(_loss(st["m"]))) - H)) < 1e-12
