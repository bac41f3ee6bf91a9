"""Federated Bayesian ADMM over a family with a fixed parameter: gaussian_diag_fixed_precision, N(θ | m, 1/s)
per coordinate with a known precision s (a preconditioner).  The server's solve reads s (q_g shares it with the
clients), so ``server_step(message_sum, K, global_state)`` takes the previous global state and passes s on
(``FEDERATED_FIXED``); before, the generated module read an unbound ``s`` and was refused at code generation.

The reference: federated ADMM written from the augmented Lagrangian with the penalty weighted by S = diag(s),
Σ_k ℓ_k(θ_k) + v_kᵀ(θ_k − θ_g) + ρ/2‖θ_k − θ_g‖²_S + δ/2‖θ_g‖², clients taking S-preconditioned gradient steps
of size lr/ρ (the BLR step in λ = s m), dual ascent v_k += ρS(θ_k − θ_g), and the server's
θ_g = (Σ v_k + ρ_s S Σ θ_k)/(δ + Kρ_s s).  With s = 1 it is test_federated.py's hand-written ADMM.
"""
import numpy as np
import pytest

from blr_derive import api
from blr_derive.runtime.fedrun import simulate
from conftest import CATALOG
from test_federated import logistic_clients, logistic_grad


def preconditioned_admm(clients, s, rounds, local_steps, lr, rho, rho_server, delta):
    K, P = len(clients), len(s)
    th_g = np.zeros(P)
    th = [th_g.copy() for _ in range(K)]
    v = [np.zeros(P) for _ in range(K)]
    hist = []
    for _ in range(rounds):
        for k, (X, y) in enumerate(clients):
            for _ in range(local_steps):
                grad = logistic_grad(X, y)(th[k]) + v[k] + rho * s * (th[k] - th_g)
                th[k] = th[k] - (lr / rho) * grad / s
            v[k] = v[k] + rho * s * (th[k] - th_g)
        th_g = (sum(v) + rho_server * s * sum(th)) / (delta + K * rho_server * s)
        hist.append((th_g.copy(), [t.copy() for t in th], [u.copy() for u in v]))
    return hist


@pytest.fixture(scope="module")
def recipe_path(tmp_path_factory):
    text = (CATALOG / "fed_admm_isotropic.yaml").read_text()
    assert "family: gaussian_fixed_cov\n" in text
    text = (text.replace("family: gaussian_fixed_cov\n", "family: gaussian_diag_fixed_precision\n")
            .replace("name: fed_admm_isotropic", "name: fed_fixed_precision")
            .replace("class_name: FedADMMIsotropic", "class_name: FedFixedPrecision"))
    path = tmp_path_factory.mktemp("fedfp") / "fed_fixed_precision.yaml"
    path.write_text(text)
    return path


def module(path, target):
    return api.derive(path).compile(target)


@pytest.mark.parametrize("target", ["numpy", "jax"])
@pytest.mark.parametrize("lr,rho,rho_server", [(0.1, 2.0, 2.0), (0.01, 0.1, 0.0)], ids=["admm", "ama"])
def test_fixed_precision_federated_admm_equals_the_preconditioned_reference(recipe_path, target, lr, rho, rho_server,
                                                                             x64):
    mod = module(recipe_path, target)
    assert mod.FEDERATED_FIXED == ("s",)
    clients = logistic_clients()
    s = np.array([0.5, 2.0, 3.5])
    hp = dict(lr=lr, rho=rho, rho_server=rho_server, delta=0.5)
    ref = preconditioned_admm(clients, s, 12, 3, **hp)
    got = []
    g, _, _ = simulate(mod, [{"grad": logistic_grad(X, y)} for X, y in clients], {"m": np.zeros(3), "s": s},
                       rounds=12, local_steps=3, hyper=hp,
                       callback=lambda r, g, st, d: got.append((np.array(g["m"]), [np.array(x["m"]) for x in st],
                                                                [np.array(x["dual1"]) for x in d])))
    worst = 0.0
    for (g_ref, th_ref, v_ref), (gm, th, v) in zip(ref, got):
        worst = max(worst, np.max(np.abs(gm - g_ref)), *(np.max(np.abs(a - b)) for a, b in zip(th, th_ref)),
                    *(np.max(np.abs(a - b)) for a, b in zip(v, v_ref)))
    assert len(got) == 12 and worst < 1e-12, worst
    np.testing.assert_array_equal(np.asarray(g["s"]), s)          # the global state keeps the fixed precision


def test_server_step_needs_the_global_state(recipe_path):
    mod = module(recipe_path, "numpy")
    msg = {"msg1": np.ones(3)}
    with pytest.raises(TypeError, match="global_state"):
        mod.server_step(msg, 2, delta=0.5, rho_server=1.0)
    out = mod.server_step(msg, 2, {"m": np.zeros(3), "s": np.full(3, 2.0)}, delta=0.5, rho_server=1.0)
    np.testing.assert_allclose(out["m"], 1.0 / (2 * 1.0 * 2.0 + 0.5), rtol=1e-15)


@pytest.mark.slow           # 3-8 s: two derivations and 8 rounds in two targets
def test_mean_covariance_federated_admm_reaches_the_laplace_fixed_point(tmp_path, x64):
    """Federated Newton-like ADMM written over the (m, Σ) parametrization of the full Gaussian (its natural
    parameters Σ⁻¹m, −Σ⁻¹/2 are printed as solves with I_P, so every entry point reads the dimension P from the
    state; before, init_dual read an unbound P and the module was refused): its rounds converge to the fixed point
    of Eq. 60 with the delta method, m_g the MAP of Σ_k ℓ_k + δ‖θ‖²/2 and Σ_g the inverse Hessian there (Newton's
    method on the pooled data), in numpy and jax."""
    text = (CATALOG / "fed_admm_full.yaml").read_text()
    assert "family: gaussian_full\n" in text
    text = (text.replace("family: gaussian_full\n", "family: gaussian_mean_covariance\n")
            .replace("name: fed_admm_full", "name: fed_mean_cov").replace("class_name: FedADMMFull",
                                                                           "class_name: FedMeanCov"))
    path = tmp_path / "fed_mean_cov.yaml"
    path.write_text(text)
    clients, delta = logistic_clients(), 0.5

    def hess(X):
        def h(th):
            p = 1 / (1 + np.exp(-X @ th))
            return (X.T * (p * (1 - p))) @ X
        return h
    th = np.zeros(3)
    for _ in range(30):
        H = sum(hess(X)(th) for X, _ in clients) + delta * np.eye(3)
        th = th - np.linalg.solve(H, sum(logistic_grad(X, y)(th) for X, y in clients) + delta * th)
    H = sum(hess(X)(th) for X, _ in clients) + delta * np.eye(3)
    for target in ("numpy", "jax"):
        mod = module(path, target)
        g, _, _ = simulate(mod, [{"grad": logistic_grad(X, y), "hess": hess(X)} for X, y in clients],
                           {"m": np.zeros(3), "Sigma": np.eye(3)}, rounds=8, local_steps=3,
                           hyper=dict(lr=1.0, rho=1.0, rho_server=0.0, delta=delta))
        assert np.max(np.abs(np.asarray(g["m"]) - th)) < 1e-12, target
        np.testing.assert_allclose(np.asarray(g["Sigma"]), np.linalg.inv(H), rtol=1e-11, atol=0)
