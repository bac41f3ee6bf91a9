"""dropout_masks (App. G, Eq. 84; with Eqs. 42-43 (Newton with dropout) and Eq. 40 (SGD with dropout)): the mixture
candidate is reparameterized by its indicator z ~ π, the Gaussian noise is dropped, and ∇ℓ, ∇²ℓ are taken at the
dropout mean θ̃ = Σ_k 1[z = k] m_k, times ∂θ̃/∂m_k (and its square), averaged over the mask draws.

What Eq. 84 estimates is the gradient and diagonal Hessian of the *masked objective* L(m) = E_z[ℓ(θ̃(z, m))].
Checked numerically:

* same draws: the catalog ``dropout`` step is Eqs. 42-43 and ``dropout_sgd`` is Eq. 40, written here by hand from
  the uniform draws (keep a weight when u < π₁);
* exact average: with π₁ = 1/2 every mask is equally likely, so feeding the 2^P masks as the draws makes the average
  exact; it equals central differences of L summed over the 2^P masks (loss values only, never the oracles);
* for π₁ ≠ 1/2 the one-draw estimate is unbiased for those differences (5 standard errors over independent blocks),
  and the kept fraction is π₁;
* with three components (two free means, weights 1/3) the 9 equally likely masks of two coordinates give the exact
  gradients and diagonal Hessians of L in m₁ and in m₂.
"""
import functools
import itertools

import numpy as np
import yaml

from blr_derive import api
from conftest import CATALOG


@functools.lru_cache(maxsize=None)
def compiled(name):
    if name in ("dropout", "dropout_sgd"):
        return api.derive(name).compile("numpy")
    if name == "masks":
        d = yaml.safe_load((CATALOG / "dropout.yaml").read_text(encoding="utf-8"))
        d["name"] = "dropout_masks_test"
        d["approximations"][1] = {"dropout_masks": {"samples": "S"}}
        d["hyperparameters"]["S"] = {"default": 1, "type": "int"}
        return api.derive(yaml.safe_dump(d, sort_keys=False)).compile("numpy")
    text = yaml.safe_dump({
        "name": "dropout_three", "loss": "abstract",
        "family": {"mixture": "gaussian_diag", "components": 3, "weights": ["w1", "w2"],
                   "fixed": {3: {"m": 0, "s": "s0"}}},
        "hyperparameters": {"rho": 0.1, "w1": 0.3, "w2": 0.3, "s0": 1.0e6, "S": {"default": 1, "type": "int"}},
        "approximations": ["delta", {"dropout_masks": {"samples": "S"}}, "separated_components"]}, sort_keys=False)
    return api.derive(text).compile("numpy")


class Draws:
    """An rng whose uniform draws are given in order (one array per sample)."""
    def __init__(self, arrays):
        self.arrays = [np.asarray(a, dtype=float) for a in arrays]

    def random(self, shape):
        a = self.arrays.pop(0)
        assert a.shape == tuple(shape)
        return a


# ℓ(θ) = ½‖Aθ − b‖² + 0.1 Σθ⁴ per block of 4 coordinates (blocks are independent copies of the problem)
A = np.array([[1.0, -0.5, 0.3, 0.0], [0.2, 0.8, -1.1, 0.4], [-0.6, 0.1, 0.5, 1.2]])
B = np.array([0.3, -1.0, 0.7])


def loss(t):
    t = t.reshape(-1, 4)
    r = t @ A.T - B
    return 0.5 * np.sum(r ** 2) + 0.1 * np.sum(t ** 4)


def grad(t):
    t2 = t.reshape(-1, 4)
    return ((t2 @ A.T - B) @ A + 0.4 * t2 ** 3).ravel()


def hess_diag(t):
    t2 = t.reshape(-1, 4)
    return (np.sum(A ** 2, axis=0) + 1.2 * t2 ** 2).ravel()


def masked_derivatives(m, pi1, h=1e-4):
    """∇L and diag ∇²L of L(m) = E_z[ℓ(z∘m)] (one block of 4), E_z summed exactly over the 16 masks with
    weights π₁^|z| (1 − π₁)^(4−|z|); central first and second differences of loss values."""
    masks = np.array(list(itertools.product([0.0, 1.0], repeat=4)))
    wts = np.prod(np.where(masks > 0, pi1, 1 - pi1), axis=1)
    L = lambda x: sum(w * loss(z * x) for z, w in zip(masks, wts))
    E = np.eye(4)
    g = np.array([(L(m + h * e) - L(m - h * e)) / (2 * h) for e in E])
    H = np.array([(L(m + h * e) - 2 * L(m) + L(m - h * e)) / h ** 2 for e in E])
    return g, H


def newton_estimates(m0, s0, out, rho, pi1):
    """(ĝ, ĥ) from s' = (1 − ρ)s + ρĥ/π₁ and m' = m − ρĝ/(π₁s') (Eqs. 42-43)."""
    h = (out["s"] - (1 - rho) * s0) * pi1 / rho
    g = (m0 - out["m"]) * out["s"] * pi1 / rho
    return g, h


M0 = np.array([0.8, -0.4, 1.1, 0.3])
S0 = np.array([2.0, 1.5, 3.0, 0.7])


def test_same_draws_are_newton_with_dropout_eq42_43():
    mod = compiled("dropout")
    rho, pi1 = 0.3, 0.6
    out = mod.step(mod.init(m=M0, s=S0), oracles={"grad": grad, "hess": hess_diag}, rng=np.random.default_rng(5),
                   rho=rho, pi1=pi1)
    z = (np.random.default_rng(5).random(4) < pi1).astype(float)
    theta = z * M0                                                       # the dropout weights θ̃ = z∘m
    s1 = (1 - rho) * S0 + rho * z * hess_diag(theta) / pi1               # Eq. 43 (∂θ̃/∂m = z)
    m1 = M0 - rho * z * grad(theta) / (pi1 * s1)                         # Eq. 42
    # the same products in another order: a few roundings
    np.testing.assert_allclose(out["s"], s1, rtol=1e-13)
    np.testing.assert_allclose(out["m"], m1, rtol=1e-13, atol=1e-15)


def test_all_masks_give_the_exact_derivatives_of_the_masked_objective():
    mod = compiled("masks")
    rho, pi1 = 0.4, 0.5
    masks = list(itertools.product([0.0, 1.0], repeat=4))
    draws = Draws([np.where(np.array(z) > 0, 0.25, 0.75) for z in masks])   # u < 1/2 keeps the weight
    out = mod.step(mod.init(m=M0, s=S0), oracles={"grad": grad, "hess": hess_diag}, rng=draws, rho=rho, pi1=pi1,
                   S=len(masks))
    g, h = newton_estimates(M0, S0, out, rho, pi1)
    g_ref, h_ref = masked_derivatives(M0, pi1)
    # ℓ is a quartic: the first differences err by h²/6·ℓ''' ≈ 1e-8, the second by h²/12·ℓ'''' ≈ 1e-9 plus
    # rounding ~1e-16·|L|/h² ≈ 1e-8; 1e-6 is a wide margin
    np.testing.assert_allclose(g, g_ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(h, h_ref, rtol=1e-6, atol=1e-6)


def test_one_mask_per_step_is_unbiased_for_any_keep_probability():
    mod = compiled("dropout")
    R, rho, pi1 = 6000, 0.5, 0.3
    m0, s0 = np.tile(M0, R), np.tile(S0, R)
    out = mod.step(mod.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess_diag}, rng=np.random.default_rng(8),
                   rho=rho, pi1=pi1)
    g, h = (x.reshape(R, 4) for x in newton_estimates(m0, s0, out, rho, pi1))
    g_ref, h_ref = masked_derivatives(M0, pi1)
    for est, ref in ((g, g_ref), (h, h_ref)):
        se = est.std(axis=0, ddof=1) / np.sqrt(R)
        # 5 standard errors: a false alarm has probability < 1e-6 per coordinate (and the seed is fixed)
        assert np.all(np.abs(est.mean(axis=0) - ref) < 5 * se)


def test_sgd_with_dropout_is_eq40_and_keeps_a_fraction_pi1():
    mod = compiled("dropout_sgd")
    assert set(mod.ORACLES) == {"grad"}                 # a fixed precision: no Hessian at the masked means
    rho, pi1 = 0.2, 0.7
    out = mod.step(mod.init(m=M0, s=S0), oracles={"grad": grad}, rng=np.random.default_rng(3), rho=rho, pi1=pi1)
    z = (np.random.default_rng(3).random(4) < pi1).astype(float)
    np.testing.assert_array_equal(out["s"], S0)
    # Eq. 40 with α = ρ/(π₁s): m ← m − α z∘∇ℓ(z∘m)
    np.testing.assert_allclose(out["m"], M0 - rho / (pi1 * S0) * z * grad(z * M0), rtol=1e-13, atol=1e-15)
    # ∇ℓ ≡ 1 makes the step reveal the mask: z = (m − m')π₁s/ρ ∈ {0, 1}, kept with probability π₁
    n = 40000
    out = mod.step(mod.init(m=np.zeros(n), s=np.ones(n)), oracles={"grad": np.ones_like},
                   rng=np.random.default_rng(4), rho=rho, pi1=pi1)
    z = -out["m"] * pi1 / rho
    np.testing.assert_allclose(z, np.round(z), atol=1e-14)
    assert set(np.round(z)) <= {0.0, 1.0}
    assert abs(z.mean() - pi1) < 5 * np.sqrt(pi1 * (1 - pi1) / n)      # 5σ of a binomial proportion


def test_three_components_give_the_exact_derivatives_in_both_free_means():
    mod = compiled("three")
    rho, w = 0.5, 1 / 3
    C2 = A[:, :2]

    def loss2(t):
        r = C2 @ t - B
        return 0.5 * r @ r + 0.1 * np.sum(t ** 4)

    def grad2(t):
        return C2.T @ (C2 @ t - B) + 0.4 * t ** 3

    def hess2(t):
        return np.sum(C2 ** 2, axis=0) + 1.2 * t ** 2
    m1, m2 = np.array([0.7, -1.2]), np.array([-0.3, 0.9])
    s1, s2 = np.array([1.5, 2.5]), np.array([0.8, 4.0])
    comps = list(itertools.product([1, 2, 3], repeat=2))                 # z per coordinate, 9 equally likely
    u_of = {1: 1 / 6, 2: 1 / 2, 3: 5 / 6}                                 # u < w₁ → 1, u < w₁ + w₂ → 2, else 3
    draws = Draws([[u_of[k] for k in z] for z in comps])
    out = mod.step(mod.init(m1=m1, s1=s1, m2=m2, s2=s2), oracles={"grad": grad2, "hess": hess2}, rng=draws,
                   rho=rho, w1=w, w2=w, S=len(comps))

    def L(a, b):                                   # E_z[ℓ(θ̃)], θ̃_j = a_j, b_j or 0 as z_j = 1, 2 or 3
        return sum(loss2(np.array([{1: a[j], 2: b[j], 3: 0.0}[z[j]] for j in range(2)])) for z in comps) / 9
    h = 1e-4
    E = np.eye(2)
    refs = {
        1: ([(L(m1 + h * e, m2) - L(m1 - h * e, m2)) / (2 * h) for e in E],
            [(L(m1 + h * e, m2) - 2 * L(m1, m2) + L(m1 - h * e, m2)) / h ** 2 for e in E]),
        2: ([(L(m1, m2 + h * e) - L(m1, m2 - h * e)) / (2 * h) for e in E],
            [(L(m1, m2 + h * e) - 2 * L(m1, m2) + L(m1, m2 - h * e)) / h ** 2 for e in E]),
    }
    for k, m, s in ((1, m1, s1), (2, m2, s2)):
        hk = (out[f"s{k}"] - (1 - rho) * s) * w / rho                    # s_k' = (1 − ρ)s_k + ρĥ_k/w_k
        gk = (m - out[f"m{k}"]) * out[f"s{k}"] * w / rho                 # m_k' = m_k − ρĝ_k/(w_k s_k')
        # central differences of a quartic, as above: 1e-6 is a wide margin
        np.testing.assert_allclose(gk, refs[k][0], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(hk, refs[k][1], rtol=1e-6, atol=1e-6)
