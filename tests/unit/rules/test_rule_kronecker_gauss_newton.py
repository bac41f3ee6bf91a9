"""kronecker_gauss_newton (K-FAC; Martens & Grosse 2015 Sec. 3, Zhang et al. 2018 Eq. 17): the Hessian of the
full Gaussian over vec(W) becomes (N aᵀa) ⊗ (bᵀb) from the oracles 'activations' and 'output_grads'.

Checked against the TRUE Gauss–Newton matrix of a linear layer, built by finite differences of its gradient:
equal when the per-example output Hessians are all the same B (exactly Kronecker), and K-FAC's real approximation
error otherwise; and the candidate's mean step against the natural gradient S⁻¹∇_m E_q[ℓ̄], with ∇_m E_q[ℓ̄] by
central finite differences of the closed-form expectation (checked itself by a Monte Carlo z-test)."""
import numpy as np
import pytest

from blr_derive import api
from blr_derive.core.errors import SpecError
from kronecker_recipes import compiled, recipe_text

D_OUT, D_IN, N = 2, 3, 6


def vec(W):
    return W.reshape(-1, order="F")


def unvec(w):
    return w.reshape((D_OUT, D_IN), order="F")


def fd_hessian(grad_vec, w, h=1e-5):
    """∇²f by central differences of the (exact) gradient: column j = (∇f(w + h e_j) - ∇f(w - h e_j)) / 2h."""
    P = w.size
    H = np.empty((P, P))
    for j in range(P):
        e = np.zeros(P)
        e[j] = h
        H[:, j] = (grad_vec(w + e) - grad_vec(w - e)) / (2 * h)
    return (H + H.T) / 2


def layer(seed, same_lambda):
    """Mean loss (1/n) Σ_i ½‖W a_i - y_i‖²_{B_i}; B_i = B for all i when ``same_lambda``."""
    rng = np.random.default_rng(seed)
    X, Y = rng.normal(size=(N, D_IN)), rng.normal(size=(N, D_OUT))
    Bs = []
    for i in range(N):
        Q = rng.normal(size=(D_OUT, D_OUT))
        Bs.append(Q @ Q.T + np.eye(D_OUT))
    if same_lambda:
        Bs = [Bs[0]] * N
    grad = lambda W: sum(Bs[i] @ np.outer(W @ X[i] - Y[i], X[i]) for i in range(N)) / N
    # square-root factors of the mean output Gauss-Newton matrix (1/n) Σ B_i, as mean-loss output gradients
    b = np.linalg.cholesky(sum(Bs) / N).T / np.sqrt(N)
    return X, Y, Bs, grad, b


def kfac_factors(X, b, ess=1.0, W=None):
    """A_{t+1}, G_{t+1} of the generated step at ρ = 1, δ = 0: the K-FAC factors."""
    mod = compiled("no_prior")
    W = np.zeros((D_OUT, D_IN)) if W is None else W
    out = mod.step(mod.init(M=W, A=np.eye(D_IN), G=np.eye(D_OUT)),
                   oracles={"grad": lambda M: np.zeros_like(M), "activations": lambda M: X, "output_grads": lambda M: b},
                   rho=1.0, ess=ess)
    return out["A"], out["G"]


def test_factored_ggn_equals_the_true_ggn_when_it_is_exactly_kronecker():
    X, Y, Bs, grad, b = layer(0, same_lambda=True)
    ess = 40.0
    A, G = kfac_factors(X, b, ess)
    true = ess * fd_hessian(lambda w: vec(grad(unvec(w))), np.zeros(D_OUT * D_IN))   # N × ∇² of the mean loss
    np.testing.assert_allclose(np.kron(A, G), true, rtol=0, atol=1e-7 * np.abs(true).max())


def test_factored_ggn_is_an_approximation_when_the_output_hessians_differ():
    X, Y, Bs, grad, b = layer(0, same_lambda=False)
    A, G = kfac_factors(X, b)
    true = fd_hessian(lambda w: vec(grad(unvec(w))), np.zeros(D_OUT * D_IN))
    assert np.abs(np.kron(A, G) - true).max() / np.abs(true).max() > 0.05
    # the exact sum Σ_i a_i a_iᵀ ⊗ B_i / n is what the finite differences see
    exact = sum(np.kron(np.outer(X[i], X[i]), Bs[i]) for i in range(N)) / N
    np.testing.assert_allclose(true, exact, rtol=0, atol=1e-7 * np.abs(exact).max())


def expected_loss(M, A, G, X, Y, B, ess):
    """E_q[ℓ̄] for ℓ̄ = N × the mean loss (½‖W a - y‖²_B) and vec(W) ~ N(vec M, (A ⊗ G)⁻¹): ℓ̄(M) + ½ tr(H S⁻¹)."""
    H = ess * np.kron(X.T @ X, B) / N
    r = M @ X.T - Y.T
    return ess * 0.5 * np.sum(r * (B @ r)) / N + 0.5 * np.trace(np.linalg.solve(np.kron(A, G), H))


def test_the_candidates_mean_step_is_the_natural_gradient_of_the_expected_loss():
    X, Y, Bs, grad, b = layer(3, same_lambda=True)
    B, ess, rho = Bs[0], 25.0, 1.0
    rng = np.random.default_rng(7)
    M = rng.normal(size=(D_OUT, D_IN))
    mod = compiled("no_prior")
    out = mod.step(mod.init(M=M, A=np.eye(D_IN), G=np.eye(D_OUT)),
                   oracles={"grad": grad, "activations": lambda W: X, "output_grads": lambda W: b}, rho=rho, ess=ess)
    A1, G1 = out["A"], out["G"]
    h, P = 1e-5, D_OUT * D_IN
    dE = np.empty(P)
    for j in range(P):
        e = np.zeros(P)
        e[j] = h
        dE[j] = (expected_loss(unvec(vec(M) + e), A1, G1, X, Y, B, ess)
                 - expected_loss(unvec(vec(M) - e), A1, G1, X, Y, B, ess)) / (2 * h)
    natural = np.linalg.solve(np.kron(A1, G1), dE)
    np.testing.assert_allclose(vec(M - out["M"]) / rho, natural, rtol=1e-7, atol=1e-9)


def test_the_closed_form_expected_loss_agrees_with_monte_carlo():
    """The expectation used above, against samples vec(W) = vec(M) + chol((A ⊗ G)⁻¹) ε (a z-test)."""
    X, Y, Bs, _, _ = layer(3, same_lambda=True)
    rng = np.random.default_rng(11)
    M, A, G = rng.normal(size=(D_OUT, D_IN)), np.eye(D_IN) * 2.0, np.eye(D_OUT) * 0.5
    L = np.linalg.cholesky(np.linalg.inv(np.kron(A, G)))
    eps = rng.normal(size=(20000, D_OUT * D_IN))
    vals = []
    for w in vec(M) + eps @ L.T:
        r = unvec(w) @ X.T - Y.T
        vals.append(0.5 * np.sum(r * (Bs[0] @ r)) / N)
    vals = np.asarray(vals)
    z = (vals.mean() - expected_loss(M, A, G, X, Y, Bs[0], 1.0)) / (vals.std() / np.sqrt(len(vals)))
    assert abs(z) < 4.5


def test_a_kronecker_candidate_without_a_kronecker_hessian_is_a_located_error():
    with pytest.raises(SpecError, match="add 'kronecker_gauss_newton'") as exc:
        api.derive(recipe_text(["delta", "kronecker_ema"]))
    assert exc.value.line is not None


def test_size_must_be_positive():
    with pytest.raises(SpecError, match="size must be positive") as exc:
        api.derive(recipe_text(["delta", {"kronecker_gauss_newton": {"size": -2}}, "kronecker_ema"]))
    assert exc.value.line is not None
