"""Federated Bayesian ADMM (blr_derive/rules/federated.py, blr_derive/ir/federated.py) through its generated numpy
modules.

* isotropic Gaussian (catalog/fed_admm_isotropic.yaml) against a hand-written federated ADMM (local gradient
  steps on the augmented Lagrangian, dual ascent, server average with the prior), iterate by iterate;
* full Gaussian (catalog/fed_admm_full.yaml): one round on heterogeneous least squares reaches the centralized
  ridge solution (and its precision);
* the derived server step over the isotropic Gaussian with rho_server = 0 is the plain sum of sites (AMA).
"""
from pathlib import Path

import numpy as np
import pytest

from blr_derive.runtime.fedrun import simulate
from conftest import CATALOG, load_generated


def logistic_clients(K=4, P=3, n=20, seed=0):
    """Heterogeneous (non-IID) logistic-regression clients: shifted inputs and different true weights."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(K):
        X = rng.normal(size=(n, P)) + rng.normal(scale=0.7, size=P)
        w = rng.normal(size=P) * (1 + 0.5 * k)
        y = (rng.random(n) < 1 / (1 + np.exp(-X @ w))).astype(float)
        out.append((X, y))
    return out


def logistic_grad(X, y):
    return lambda th: X.T @ (1 / (1 + np.exp(-X @ th)) - y)


def handwritten_admm(clients, rounds, local_steps, lr, rho, rho_server, delta, P):
    """Federated ADMM written from the augmented Lagrangian Σ_k ℓ_k(θ_k) + v_kᵀ(θ_k − θ_g) + ρ/2‖θ_k − θ_g‖²
    + δ/2‖θ_g‖² (server penalty ρ_s): clients take gradient steps of size lr/ρ on their subproblem (warm
    started), dual ascent v_k += ρ(θ_k − θ_g), then θ_g = (Σ v_k + ρ_s Σ θ_k)/(δ + Kρ_s)."""
    K = len(clients)
    th_g = np.zeros(P)
    th = [th_g.copy() for _ in range(K)]
    v = [np.zeros(P) for _ in range(K)]
    hist = []
    for _ in range(rounds):
        for k, (X, y) in enumerate(clients):
            for _ in range(local_steps):
                grad = logistic_grad(X, y)(th[k]) + v[k] + rho * (th[k] - th_g)
                th[k] = th[k] - (lr / rho) * grad
            v[k] = v[k] + rho * (th[k] - th_g)
        th_g = (sum(v) + rho_server * sum(th)) / (delta + K * rho_server)
        hist.append((th_g.copy(), [t.copy() for t in th], [u.copy() for u in v]))
    return hist


@pytest.mark.parametrize("lr,rho,rho_server", [(0.1, 2.0, 2.0), (0.01, 0.1, 0.0)], ids=["admm", "ama"])
def test_isotropic_recipe_is_federated_admm_iterate_by_iterate(lr, rho, rho_server):
    mod = load_generated("fed_admm_isotropic")
    clients = logistic_clients()
    hp = dict(lr=lr, rho=rho, rho_server=rho_server, delta=0.5)
    ref = handwritten_admm(clients, 15, 4, P=3, **hp)
    got = []
    simulate(mod, [{"grad": logistic_grad(X, y)} for X, y in clients], {"m": np.zeros(3)}, rounds=15,
             local_steps=4, hyper=hp,
             callback=lambda r, g, s, d: got.append((g["m"].copy(), [x["m"].copy() for x in s],
                                                     [x["dual1"].copy() for x in d])))
    worst = 0.0
    for (g_ref, th_ref, v_ref), (g, th, v) in zip(ref, got):
        worst = max(worst, np.max(np.abs(g - g_ref)), *(np.max(np.abs(a - b)) for a, b in zip(th, th_ref)),
                    *(np.max(np.abs(a - b)) for a, b in zip(v, v_ref)))
    print("max |derived - hand-written| over 15 rounds:", worst)
    assert len(got) == 15 and worst < 1e-12, worst
    # ADMM's iterates approach the optimum of Σ_k ℓ_k + δ/2‖θ‖² (the stationarity residual shrinks)
    resid = lambda th: np.linalg.norm(sum(logistic_grad(X, y)(th) for X, y in clients) + 0.5 * th)
    if rho_server:
        assert resid(got[-1][0]) < 0.2 * resid(got[0][0])


def least_squares_clients(K=5, P=4, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(K):
        n = 8 + 3 * k
        X = rng.normal(size=(n, P)) * rng.uniform(0.3, 3.0, size=P) + k
        y = X @ rng.normal(size=P) * (k + 1) + rng.normal(size=n)
        out.append((X, y))
    return out


def test_full_covariance_one_round_is_the_centralized_solution():
    mod = load_generated("fed_admm_full")
    clients = least_squares_clients()
    P, delta = 4, 2.0
    oracles = [{"grad": (lambda X, y: lambda th: X.T @ (X @ th - y))(X, y),
                "hess": (lambda X: lambda th: X.T @ X)(X)} for X, y in clients]
    g, states, duals = simulate(mod, oracles, {"m": np.zeros(P), "S": np.eye(P)}, rounds=1,
                                hyper=dict(lr=1.0, rho=1.0, rho_server=0.0, delta=delta))
    A = sum(X.T @ X for X, _ in clients) + delta * np.eye(P)
    m_star = np.linalg.solve(A, sum(X.T @ y for X, y in clients))
    assert np.max(np.abs(g["m"] - m_star)) < 1e-10 * np.max(np.abs(m_star))
    assert np.max(np.abs(g["S"] - A)) < 1e-10 * np.max(np.abs(A))
    # the duals are the clients' sites: (Xᵀy, −XᵀX/2), the natural gradients of their losses
    for (X, y), d in zip(clients, duals):
        assert np.allclose(d["dual1"], X.T @ y, rtol=1e-12, atol=1e-9)
        assert np.allclose(d["dual2"], -X.T @ X / 2, rtol=1e-12, atol=1e-9)
    # a second round stays there (a fixed point)
    g2, _, _ = simulate(mod, oracles, g, rounds=2, hyper=dict(lr=1.0, rho=1.0, rho_server=0.0, delta=delta))
    assert np.max(np.abs(g2["m"] - m_star)) < 1e-9 * np.max(np.abs(m_star))


def test_diagonal_server_step_solves_the_site_equation():
    """fed_ivon_admm's server: (1 + Kρ_s)λ_g + ∇_μ E_{q_g}[δθ²/2] = Σ_k messages, with λ = (s m, −s/2)."""
    mod = load_generated("fed_ivon_admm")
    rng = np.random.default_rng(0)
    K, hp = 3, dict(rho_server=0.7, delta=2.0)
    nat = {"nat1": rng.normal(size=5), "nat2": -rng.uniform(1, 3, size=5)}    # Σ_k λ_k, read with pd_server only
    msg = {"msg1": rng.normal(size=5), "msg2": -rng.uniform(1, 3, size=5), **nat}
    g = mod.server_step(msg, K, **hp)
    c = 1 + K * hp["rho_server"]
    assert np.allclose(c * g["s"] * g["m"], msg["msg1"], rtol=1e-13, atol=1e-13)
    assert np.allclose(c * (-g["s"] / 2) + hp["delta"] / 2, msg["msg2"], rtol=1e-13, atol=1e-13)
    # and the dual step moves the dual by dρ(λ_k − λ_g)
    st = mod.init({"rho": 1.0}, m=rng.normal(size=5), s=rng.uniform(1, 2, size=5))
    d = mod.dual_step(st, g, {"dual1": np.zeros(5), "dual2": np.zeros(5)}, rho=0.5, dual_damping=0.3)
    assert np.allclose(d["dual1"], 0.3 * 0.5 * (st["s"] * st["m"] - g["s"] * g["m"]), rtol=1e-14, atol=1e-14)
    assert np.allclose(d["dual2"], 0.3 * 0.5 * (-st["s"] / 2 + g["s"] / 2), rtol=1e-14, atol=1e-14)


def test_diagonal_server_step_corrected_is_the_improved_blr_step_from_the_clients_mean():
    """pd_server: s_g = (1 − α)s̄ + αT + α²(T − s̄)²/(2s̄), α = 1/(1 + Kρ_s), s̄ = mean_k s_k, T = δ + Σ_k u_k (the
    official server's target, written here from λ_g = (1 − α)λ̄ + α(λ_0 + Σ_k η_k)): positive for any duals, where
    the plain server step raises naming the coordinate."""
    mod = load_generated("fed_ivon_admm")
    rng = np.random.default_rng(1)
    K, rho_s, delta = 4, 0.5, 1.0
    s_k, m_k = rng.uniform(0.5, 3.0, size=(K, 6)), rng.normal(size=(K, 6))
    u_k = rng.normal(scale=3.0, size=(K, 6))                 # u = −2η⁽²⁾: duals of any sign
    v_k = rng.normal(size=(K, 6))
    msg = {"msg1": (v_k + rho_s * s_k * m_k).sum(0), "msg2": (-u_k / 2 - rho_s * s_k / 2).sum(0),
           "nat1": (s_k * m_k).sum(0), "nat2": (-s_k / 2).sum(0)}
    alpha = 1 / (1 + K * rho_s)
    s_bar, T = s_k.mean(0), delta + u_k.sum(0)
    plain = (1 - alpha) * s_bar + alpha * T
    assert (plain < 0).any()                                 # these duals make q_g invalid
    with pytest.raises(FloatingPointError, match=r"server_step\(\): the new s is not positive"):
        mod.server_step(msg, K, rho_server=rho_s, delta=delta)
    g = mod.server_step(msg, K, rho_server=rho_s, delta=delta, pd_server=True)
    want = plain + alpha ** 2 * (T - s_bar) ** 2 / (2 * s_bar)
    np.testing.assert_allclose(g["s"], want, rtol=1e-12)
    assert (g["s"] > 0).all()
    lam1 = alpha * v_k.sum(0) + (1 - alpha) * (s_k * m_k).mean(0)    # λ₁ of the server's step; the mean from it
    np.testing.assert_allclose(g["m"], lam1 / g["s"], rtol=1e-12, atol=1e-14)


def test_derivation_names_the_federated_rules():
    from blr_derive.api import derive_file
    _, D = derive_file(CATALOG / "fed_admm_full.yaml")
    rules = [s.rule for s in D.steps]
    # Eq. 6 (blr) first, then the client objective's natural gradient, the natural-parameter update, the dual
    # and the server steps
    local = rules.index("federated_local")
    assert rules.index("blr") < local < len(rules) - 1 - rules[::-1].index("blr") < rules.index("federated_dual") \
        < rules.index("federated_server")


@pytest.mark.parametrize("section,needle", [
    ("{penalty: nope}", "federated.penalty must name a float hyperparameter"),
    ("{penalty: rho, extra: 1}", "unknown key 'extra'"),
    ("{penalty: rho, prior: 'exp(m_g)'}", "prior"),
])
def test_bad_federated_section_is_a_one_line_spec_error(tmp_path, section, needle):
    from blr_derive.core.errors import SpecError
    from blr_derive.candidates.load import load_recipe
    text = (CATALOG / "fed_admm_isotropic.yaml").read_text()
    start = text.index("federated:")
    end = text.index("hyperparameters:")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text[:start] + f"federated: {section}\n" + text[end:])
    with pytest.raises(SpecError) as exc:
        load_recipe(bad)
    msg = str(exc.value)
    assert needle in msg and "bad.yaml" in msg and "\n" not in msg


def test_full_covariance_fixed_point_is_the_global_map_and_its_hessian():
    """Non-quadratic (logistic) clients: the rounds of the Newton-like recipe converge (quadratically) to the
    fixed point of Eq. 60 with the delta method, λ_g = λ_0 + Σ_k λ̃_k(μ_g): m_g is the MAP of Σ_k ℓ_k + δ‖θ‖²/2
    and S_g the Hessian there (computed here by Newton's method on the pooled data)."""
    mod = load_generated("fed_admm_full")
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
    errs = []
    g, _, _ = simulate(mod, [{"grad": logistic_grad(X, y), "hess": hess(X)} for X, y in clients],
                       {"m": np.zeros(3), "S": np.eye(3)}, rounds=6, local_steps=3,
                       hyper=dict(lr=1.0, rho=1.0, rho_server=0.0, delta=delta),
                       callback=lambda r, g, s, d: errs.append(np.max(np.abs(g["m"] - th))))
    assert errs[3] < 1e-8 and errs[-1] < 1e-13, errs
    assert np.max(np.abs(g["S"] - H)) < 1e-12 * np.max(np.abs(H))
