"""straight_through (Sec. 4.5, Eq. 48, the τ → 0, zero-noise limit of Eqs. 50-51 in the BLR of Eq. 49): the
gradient is taken at the hard sample θ = sign(λ) (u = 1/2, so δ(u) = 0) and carried to μ with ∇_μθ ≈ 1.

Checked numerically:

* with ``no_entropy`` (the catalog recipe ``ste``) the step is STE, Eq. 48: λ ← λ − α∇ℓ(sign λ), for a loss that
  couples the coordinates; the oracle sees only ±1 (λ = 0 gives +1);
* with the entropy it is Eq. 49 with that gradient, λ ← (1 − ρ)λ − ρ∇ℓ(sign λ), in λ and (through p = σ(2λ)) in
  the probability parameterization;
* for a loss linear in θ (where E_q[ℓ] = ℓ(μ), so ∇_μθ = 1 is exact) the step is the exact BLR step, whose natural
  gradient is taken here by central differences in μ of E_q[ℓ] summed over the 2^P points of {−1, +1}^P;
* the hard sample is the limit of the Concrete sample tanh((λ + δ(1/2))/τ) as τ → 0.
"""
import functools
import itertools

import numpy as np
import yaml
from scipy import special

from blr_derive import api


@functools.lru_cache(maxsize=None)
def compiled(name="ste", family="bernoulli_logit", rule="straight_through"):
    if name == "ste":
        return api.derive("ste").compile("numpy")
    approx = [rule] if rule == "straight_through" else [{rule: {"temperature": "tau", "samples": 1}}]
    hp = {"rho": 0.1} if rule == "straight_through" else {"rho": 0.1, "tau": 1.0}
    text = yaml.safe_dump({"name": name, "family": family, "loss": "abstract", "hyperparameters": hp,
                           "approximations": approx}, sort_keys=False)
    return api.derive(text).compile("numpy")


A = np.array([[1.0, -0.5, 0.3, 0.0], [0.2, 0.8, -1.1, 0.4], [-0.6, 0.1, 0.5, 1.2]])
B = np.array([0.3, -1.0, 0.7])


def coupled_grad(t):
    """∇ of ℓ(θ) = ½‖Aθ − b‖² + 0.1 Σθ⁴, which couples the coordinates."""
    return A.T @ (A @ t - B) + 0.4 * t ** 3


def test_ste_recipe_is_eq48():
    mod = compiled()
    lam = np.array([0.7, -0.2, 0.0, -1.5])
    seen = []
    grad = lambda t: seen.append(t.copy()) or coupled_grad(t)
    out = mod.step(mod.init(lam=lam), oracles={"grad": grad}, lr=0.05)
    np.testing.assert_array_equal(seen[0], [1.0, -1.0, 1.0, -1.0])       # binary(λ): sign with binary(0) = +1
    # Eq. 48: the same two roundings (a product and a sum) as the generated step
    np.testing.assert_array_equal(out["lam"], lam - 0.05 * coupled_grad(np.array([1.0, -1.0, 1.0, -1.0])))


def test_with_the_entropy_it_is_eq49_with_the_hard_sample_gradient():
    lam = np.array([0.7, -0.2, 0.05, -1.5])
    theta = np.sign(lam)
    g = coupled_grad(theta)
    rho = 0.3
    mod = compiled("st_entropy")
    out = mod.step(mod.init(lam=lam), oracles={"grad": coupled_grad}, rho=rho)
    # the same operations as the generated step (−gρ + λ(1 − ρ)): equal up to one rounding at most
    np.testing.assert_allclose(out["lam"], (1 - rho) * lam - rho * g, rtol=1e-15, atol=1e-16)
    # in the probability parameterization the same λ step, read through p = σ(2λ); the gradient is taken at the
    # hard sample binary(logit p), the same point
    mod_p = compiled("st_p", family="bernoulli")
    seen = []
    out_p = mod_p.step(mod_p.init(p=special.expit(2 * lam)),
                       oracles={"grad": lambda t: seen.append(t.copy()) or coupled_grad(t)}, rho=rho)
    np.testing.assert_array_equal(seen[0], theta)
    # p's closed form goes through exp/log: ~1e-14 relative, 1e-11 is a wide margin
    np.testing.assert_allclose(out_p["p"], special.expit(2 * ((1 - rho) * lam - rho * g)), rtol=1e-11)


def test_for_a_linear_loss_it_is_the_exact_blr_step():
    a, b0 = np.array([0.9, -1.3, 0.4]), 0.25
    loss = lambda t: a @ t + b0
    support = np.array(list(itertools.product([-1.0, 1.0], repeat=3)))

    def expected(mu):                              # E_q[ℓ] = Σ_θ Π_j q_j(θ_j) ℓ(θ), q_j(+1) = (1 + μ_j)/2
        p = (1 + mu) / 2
        w = np.prod(np.where(support > 0, p, 1 - p), axis=1)
        return w @ np.array([loss(t) for t in support])
    lam = np.array([0.6, -0.9, 1.7])
    mu, h = np.tanh(lam), 1e-6
    nat = np.array([(expected(mu + h * e) - expected(mu - h * e)) / (2 * h) for e in np.eye(3)])
    rho = 0.4
    mod = compiled("st_entropy")
    out = mod.step(mod.init(lam=lam), oracles={"grad": lambda t: a + 0 * t}, rho=rho)
    # E_q[ℓ] is multilinear in μ, so the central difference is exact up to rounding (~1e-16·|E|/h ≈ 1e-10)
    np.testing.assert_allclose(out["lam"], (1 - rho) * lam - rho * nat, rtol=1e-8, atol=1e-9)


def test_hard_sample_is_the_zero_noise_zero_temperature_concrete_sample():
    class Half:                                      # the zero-noise draw u = 1/2, δ(u) = 0
        def random(self, shape):
            return np.full(shape, 0.5)
    lam = np.array([0.7, -0.2, 0.05, -1.5])
    st, cr = compiled("st_entropy"), compiled("cr_limit", rule="concrete_relaxation")
    hard, relaxed = [], []
    st.step(st.init(lam=lam), oracles={"grad": lambda t: hard.append(t) or 0 * t})
    with np.errstate(over="ignore"):               # sech² of |λ|/τ ≥ 50: cosh overflows, sech is an exact 0
        cr.step(cr.init(lam=lam), oracles={"grad": lambda t: relaxed.append(t) or 0 * t}, rng=Half(), tau=1e-3)
    # tanh(x) rounds to ±1 for |x| > 19.1 in doubles, and |λ|/τ ≥ 50 here
    np.testing.assert_array_equal(relaxed[0], hard[0])
    # at a larger τ the relaxed sample is visibly inside (−1, 1)
    relaxed.clear()
    cr.step(cr.init(lam=lam), oracles={"grad": lambda t: relaxed.append(t) or 0 * t}, rng=Half(), tau=1.0)
    np.testing.assert_allclose(relaxed[0], np.tanh(lam), rtol=1e-15)
