"""kronecker_cholesky (chol(A ⊗ G) = chol(A) ⊗ chol(G)) and the sampler of the Kronecker candidate that
``monte_carlo`` derives from it (blr_derive/rules/kronecker_sampling.py): W_k = M + L_G⁻ᵀ E_k L_A⁻¹ must be a draw
of vec(W) ~ N(vec(M), (A ⊗ G)⁻¹).

Checked numerically: the identity against numpy's Cholesky factor of the dense Kronecker product; the generated
sampler's linear map vec(E) ↦ vec(W - M) (read off with unit draws) against (A ⊗ G)⁻¹ exactly; a Monte Carlo
z-test of the sampled W's mean and covariance; the per-sample statistics the step averages; located errors."""
import numpy as np
import pytest
import sympy as sp

from blr_derive import api
from blr_derive.core.errors import SpecError
from blr_derive.rules.kronecker import CholeskyFactor, Kron, interpret_matrix
from kronecker_recipes import FULL, recipe_text

R_, C_ = 3, 4
P = R_ * C_
MC = [{"monte_carlo": {"samples": "n_mc"}}] + FULL[1:]
S_HYPER = {"n_mc": {"default": 1, "type": "int"}}


def vec(W):
    return W.reshape(-1, order="F")


def spd(rng, d, scale=1.0):
    Q = rng.normal(size=(d, d))
    return scale * (Q @ Q.T / d + 0.5 * np.eye(d))


@pytest.fixture(scope="module")
def mod():
    return api.derive(recipe_text(MC, S_HYPER)).compile("numpy")


def test_cholesky_of_a_kronecker_product_is_the_product_of_the_factors():
    rng = np.random.default_rng(0)
    A, G = spd(rng, C_), spd(rng, R_)
    np.testing.assert_allclose(np.linalg.cholesky(np.kron(A, G)),
                               np.kron(np.linalg.cholesky(A), np.linalg.cholesky(G)), rtol=1e-12, atol=1e-15)
    # the interpreter applies it to the candidate's precision (and its transpose)
    a, g = sp.MatrixSymbol("A", C_, C_), sp.MatrixSymbol("G", R_, R_)
    S = sp.MatrixSymbol("S", P, P)
    k = interpret_matrix(sp.Transpose(CholeskyFactor(S)), {S: Kron([(1, a, g)])})
    assert k.terms == [(1, sp.Transpose(CholeskyFactor(a)), sp.Transpose(CholeskyFactor(g)))]


def _samples(mod, M, A, G, rng, n):
    """The samples W_k the generated step draws (recorded by the gradient oracle), n of them in one step."""
    seen = []

    def grad(W):
        seen.append(np.array(W))
        return np.zeros_like(W)

    mod.step(mod.init(M=M, A=A, G=G), oracles={"grad": grad, "activations": lambda W: np.ones((2, C_)),
                                               "output_grads": lambda W: np.ones((2, R_))}, rng=rng, n_mc=n, delta=1.0)
    return np.array(seen)


class Unit:
    """A generator stand-in whose k-th standard-normal draw is the k-th unit matrix (column-major order)."""

    def __init__(self):
        self.k = 0

    def standard_normal(self, shape):
        E = np.zeros(shape)
        E[np.unravel_index(self.k, shape, order="F")] = 1.0
        self.k += 1
        return E


def test_the_derived_sampler_has_covariance_inverse_of_A_kron_G_exactly(mod):
    rng = np.random.default_rng(1)
    M, A, G = rng.normal(size=(R_, C_)), spd(rng, C_, 3.0), spd(rng, R_, 0.5)
    W = _samples(mod, M, A, G, Unit(), P)
    T = np.stack([vec(w - M) for w in W], axis=1)         # the sampler's linear map vec(E) -> vec(W - M)
    np.testing.assert_allclose(T @ T.T, np.linalg.inv(np.kron(A, G)), rtol=1e-12, atol=1e-14)
    assert np.allclose(T, np.triu(T))                       # (L_A ⊗ L_G)⁻ᵀ is upper triangular


def test_monte_carlo_z_test_of_the_sample_mean_and_covariance(mod):
    rng = np.random.default_rng(2)
    M, A, G = rng.normal(size=(R_, C_)), spd(rng, C_, 3.0), spd(rng, R_, 0.5)
    K = 4000
    D = np.stack([vec(w - M) for w in _samples(mod, M, A, G, np.random.default_rng(3), K)])
    cov = np.linalg.inv(np.kron(A, G))
    z_mean = D.mean(axis=0) / (np.sqrt(np.diag(cov)) / np.sqrt(K))
    prods = D[:, :, None] * D[:, None, :]                    # unbiased for cov: the mean M is known
    iu = np.triu_indices(P)
    z_cov = ((prods.mean(axis=0) - cov) / (prods.std(axis=0, ddof=1) / np.sqrt(K)))[iu]
    assert np.abs(z_mean).max() < 4.5, np.abs(z_mean).max()
    assert np.abs(z_cov).max() < 4.5, np.abs(z_cov).max()
    # the test has power: the covariance of a sampler that forgets one factor (G = I) is rejected
    wrong = np.linalg.inv(np.kron(A, np.eye(R_)))
    z_wrong = ((prods.mean(axis=0) - wrong) / (prods.std(axis=0, ddof=1) / np.sqrt(K)))[iu]
    assert np.abs(z_wrong).max() > 20


def test_the_step_averages_the_statistics_at_the_samples(mod):
    """Three samples: A takes the mean of N a_kᵀa_k, G of b_kᵀb_k, M the mean of N g_k + δ W_k, each oracle at its
    own sample (the oracles here depend on W)."""
    rng = np.random.default_rng(4)
    M, A, G = rng.normal(size=(R_, C_)), spd(rng, C_, 3.0), spd(rng, R_, 0.5)
    X = rng.normal(size=(5, C_))
    orc = {"grad": lambda W: np.tanh(W), "activations": lambda W: X * (1 + W.sum()),
           "output_grads": lambda W: np.outer(np.ones(2), np.sin(W).sum(axis=1))}
    hp = dict(rho=0.6, ess=3.0, delta=0.4, pi=1.7)
    Ws = _samples(mod, M, A, G, np.random.default_rng(5), 3)
    out = mod.step(mod.init(M=M, A=A, G=G), oracles=orc, rng=np.random.default_rng(5), n_mc=3, **hp)
    aa = np.mean([orc["activations"](W).T @ orc["activations"](W) for W in Ws], axis=0)
    bb = np.mean([orc["output_grads"](W).T @ orc["output_grads"](W) for W in Ws], axis=0)
    gd = np.mean([3.0 * orc["grad"](W) + 0.4 * W for W in Ws], axis=0)
    A_new = 0.4 * A + 0.6 * (3.0 * aa + 1.7 * np.sqrt(0.4) * np.eye(C_))
    G_new = 0.4 * G + 0.6 * (bb + np.sqrt(0.4) / 1.7 * np.eye(R_))
    np.testing.assert_allclose(out["A"], A_new, rtol=1e-12)
    np.testing.assert_allclose(out["G"], G_new, rtol=1e-12)
    np.testing.assert_allclose(vec(out["M"]), vec(M) - 0.6 * np.linalg.solve(np.kron(A_new, G_new), vec(gd)),
                               rtol=1e-12)


def test_two_expectation_rules_are_a_located_error():
    text = recipe_text(MC + ["delta"], S_HYPER)
    with pytest.raises(SpecError, match="at most one expectation rule") as exc:
        api.derive(text)
    assert exc.value.line is not None


def test_monte_carlo_without_a_kronecker_hessian_is_a_located_error():
    with pytest.raises(SpecError, match="Kronecker-factored Hessian"):
        api.derive(recipe_text([{"monte_carlo": {"samples": 2}}, "kronecker_ema"]))
