"""Rules ``federated_local`` (Bayesian ADMM local step; Eq. 6), ``federated_dual`` (dual step) and
``federated_server`` (global step; Eq. 60 of Khan & Rue 2023; Möllenhoff et al. 2025).

* ``federated_local``: the client's step is the BLR step (Eq. 6) on E_q[ℓ_k]/ρ + ⟨η_k, μ⟩/ρ + KL(q ‖ q_g).  Checked
  on the full Gaussian with a quadratic client loss (where the delta method is exact): the natural gradient of that
  objective by central differences in μ (E_q[ℓ_k] and the Gaussian KL written here in closed form), then
  λ ← λ − β∇_μ J, against the generated ``step``.
* ``federated_dual``: η_k ← η_k + ρ(λ_k − λ_g) by hand, and at a client's optimum η_k = −∇_μ E_{q_k}[ℓ_k] (the
  client's site, Sec. 5.4).
* ``federated_server``: the output of ``server_step`` solves λ_g = −∇_μ E_{q_g}[ℓ₀ + log h] + Σ_k(η_k + ρ_s(λ_k − λ_g))
  with the prior's and the base measure's sites by central differences of Gauss-Hermite quadrature (N(m, I), where
  h is not constant) or of the closed-form prior expectation (full Gaussian).
* All three together, against the peer references of tests/peers/federated_admm (imported, not edited): the
  hand-written federated ADMM iterate by iterate, and one round of the full-Gaussian recipe reaching the
  centralized ridge posterior.
"""
import functools

import numpy as np

from blr_derive import api
from blr_derive.runtime.fedrun import simulate
from conftest import ROOT, load_module_from_path

RULES_CHECKED = ("federated_local", "federated_dual", "federated_server")

PEERS = ROOT / "tests" / "peers" / "federated_admm"


@functools.lru_cache(maxsize=None)
def module(name):
    return api.derive(name).compile("numpy")


@functools.lru_cache(maxsize=None)
def peer(name):
    return load_module_from_path(PEERS / f"{name}.py", name=f"_peer_federated_{name}")


def spd(rng, n, shift=0.5):
    B = rng.normal(size=(n, n))
    return B @ B.T / n + shift * np.eye(n)


H_FD = 1e-5


def fd_vec(F, x):
    return np.array([(F(x + H_FD * e) - F(x - H_FD * e)) / (2 * H_FD) for e in np.eye(len(x))])


def fd_sym(F, X):
    n = X.shape[0]
    G = np.zeros((n, n))
    for i in range(n):
        for j in range(i, n):
            E = np.zeros((n, n))
            E[i, j] = E[j, i] = H_FD
            d = (F(X + E) - F(X - E)) / (2 * H_FD)
            G[i, j] = G[j, i] = d if i == j else d / 2
    return G


def gauss_kl(m, C, m_g, S_g):
    """KL(N(m, C) ‖ N(m_g, S_g⁻¹)), the textbook formula."""
    d = m_g - m
    return 0.5 * (np.trace(S_g @ C) + d @ S_g @ d - len(m) - np.linalg.slogdet(S_g @ C)[1])


# ------------------------------------------------------------------------------------------ federated_local

def test_client_step_is_the_blr_step_on_the_local_objective():
    mod = module("fed_admm_full")
    rng = np.random.default_rng(0)
    P = 3
    A, b = spd(rng, P), rng.normal(size=P)                  # ℓ_k(θ) = ½θᵀAθ − bᵀθ
    m, S = rng.normal(size=P), spd(rng, P, 1.0)
    m_g, S_g = rng.normal(size=P), spd(rng, P, 1.0)
    eta1 = rng.normal(size=P)
    eta2 = -0.1 * spd(rng, P)
    lr, rho = 0.6, 2.5

    def J(u1, U2):
        U2 = (U2 + U2.T) / 2
        C = U2 - np.outer(u1, u1)
        e_loss = 0.5 * np.trace(A @ U2) - b @ u1
        return (e_loss + eta1 @ u1 + np.sum(eta2 * U2)) / rho + gauss_kl(u1, C, m_g, S_g)
    U1, U2 = m, np.linalg.inv(S) + np.outer(m, m)
    G1, G2 = fd_vec(lambda u: J(u, U2), U1), fd_sym(lambda u: J(U1, u), U2)
    lam1, lam2 = S @ m - lr * G1, -S / 2 - lr * G2            # natural-gradient step λ ← λ − β∇_μ J
    out = mod.step(mod.init(m=m, S=S), oracles={"grad": lambda t: A @ t - b, "hess": lambda t: A},
                   data={"m_g": m_g, "S_g": S_g, "dual1": eta1, "dual2": eta2}, lr=lr, rho=rho)
    # J is a smooth function of μ (quadratic + log det): central differences ~1e-9; 1e-7 relative is safe, while
    # dropping ⟨η, μ⟩, the 1/ρ or the base-measure cancellation changes λ by O(lr)
    np.testing.assert_allclose(-out["S"] / 2, lam2, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(out["S"] @ out["m"], lam1, rtol=1e-7, atol=1e-8)


def test_isotropic_client_step_is_the_augmented_lagrangian_gradient_step():
    """N(m, I): λ = m and the BLR step on the local objective is m ← m − (lr/ρ)(∇ℓ_k(m) + v_k + ρ(m − m_g))."""
    mod = module("fed_admm_isotropic")
    rng = np.random.default_rng(1)
    m, m_g, v = rng.normal(size=4), rng.normal(size=4), rng.normal(size=4)
    grad = lambda t: np.sin(t) + t ** 3
    lr, rho = 0.2, 1.7
    out = mod.step(mod.init(m=m), oracles={"grad": grad}, data={"m_g": m_g, "dual1": v}, lr=lr, rho=rho)
    np.testing.assert_allclose(out["m"], m - lr / rho * (grad(m) + v + rho * (m - m_g)), rtol=1e-13, atol=1e-14)


# ------------------------------------------------------------------------------------------ federated_dual

def test_dual_step_and_client_message():
    mod = module("fed_admm_full")
    rng = np.random.default_rng(2)
    P = 3
    st = {"m": rng.normal(size=P), "S": spd(rng, P, 1.0)}
    g = {"m": rng.normal(size=P), "S": spd(rng, P, 1.0)}
    dual = {"dual1": rng.normal(size=P), "dual2": -spd(rng, P)}
    rho, rho_s = 0.8, 0.3
    lam = lambda s: (s["S"] @ s["m"], -s["S"] / 2)
    new = mod.dual_step(st, g, dual, rho=rho)
    np.testing.assert_allclose(new["dual1"], dual["dual1"] + rho * (lam(st)[0] - lam(g)[0]), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(new["dual2"], dual["dual2"] + rho * (lam(st)[1] - lam(g)[1]), rtol=1e-13, atol=1e-14)
    msg = mod.client_message(st, new, rho_server=rho_s)
    np.testing.assert_allclose(msg["msg1"], new["dual1"] + rho_s * lam(st)[0], rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(msg["msg2"], new["dual2"] + rho_s * lam(st)[1], rtol=1e-13, atol=1e-14)


def test_dual_is_the_clients_site_at_its_optimum():
    """Quadratic client, lr = 1: one local Newton step reaches the client optimum; then η_k = −∇_μ E_{q_k}[ℓ_k]
    = (b, −A/2), computed here by central differences of E_q[ℓ_k] = ½tr(A μ⁽²⁾) − bᵀμ⁽¹⁾ (exact for a quadratic)."""
    mod = module("fed_admm_full")
    rng = np.random.default_rng(3)
    P = 3
    A, b = spd(rng, P), rng.normal(size=P)
    g = {"m": rng.normal(size=P), "S": spd(rng, P, 1.0)}
    st = mod.init(m=g["m"], S=g["S"])
    dual = mod.init_dual(st)
    rho = 1.3
    st = mod.step(st, oracles={"grad": lambda t: A @ t - b, "hess": lambda t: A}, data=mod.client_data(g, dual),
                  lr=1.0, rho=rho)
    dual = mod.dual_step(st, g, dual, rho=rho)
    U1, U2 = st["m"], np.linalg.inv(st["S"]) + np.outer(st["m"], st["m"])
    E = lambda u1, u2: 0.5 * np.trace(A @ (u2 + u2.T) / 2) - b @ u1
    np.testing.assert_allclose(dual["dual1"], -fd_vec(lambda u: E(u, U2), U1), rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(dual["dual2"], -fd_sym(lambda u: E(U1, u), U2), rtol=1e-8, atol=1e-9)


# ------------------------------------------------------------------------------------------ federated_server

GH_X, GH_W = np.polynomial.hermite_e.hermegauss(20)
GH_W = GH_W / GH_W.sum()


def test_isotropic_server_solves_the_site_equation_with_the_base_measure():
    """N(m, I): −∇_μ E_{q_g}[δθᵀθ/2 + log h] with log h = −θᵀθ/2 + const, by central differences of quadrature;
    the server's m_g must satisfy m_g = −∇_μ E[ℓ₀ + log h](m_g) + Σ_k msg_k − Kρ_s m_g."""
    mod = module("fed_admm_isotropic")
    rng = np.random.default_rng(4)
    P, K, delta, rho_s = 3, 4, 0.7, 0.9
    msg = {"msg1": rng.normal(size=P) * K}
    g = mod.server_step(msg, K, rho_server=rho_s, delta=delta)

    def E(u):          # E_{N(u, I)}[δθᵀθ/2 − θᵀθ/2], coordinate by coordinate (the constant of log h dropped)
        th = u[:, None] + GH_X[None, :]
        return np.sum(GH_W * (0.5 * (delta - 1) * th ** 2))
    site = -fd_vec(E, g["m"])
    # quadrature exact for the polynomial, central differences exact up to ~1e-11
    np.testing.assert_allclose(g["m"], site + msg["msg1"] - K * rho_s * g["m"], rtol=1e-8, atol=1e-9)


def test_full_server_solves_the_site_equation():
    mod = module("fed_admm_full")
    rng = np.random.default_rng(5)
    P, K, delta, rho_s = 3, 3, 1.4, 0.6
    msg = {"msg1": rng.normal(size=P), "msg2": -spd(rng, P) * K}
    g = mod.server_step(msg, K, rho_server=rho_s, delta=delta)
    m_g, S_g = g["m"], g["S"]
    lam1, lam2 = S_g @ m_g, -S_g / 2
    U1, U2 = m_g, np.linalg.inv(S_g) + np.outer(m_g, m_g)
    E0 = lambda u1, u2: 0.5 * delta * np.trace((u2 + u2.T) / 2)          # E_q[δθᵀθ/2]; h is constant
    site1, site2 = -fd_vec(lambda u: E0(u, U2), U1), -fd_sym(lambda u: E0(U1, u), U2)
    np.testing.assert_allclose(lam1, site1 + msg["msg1"] - K * rho_s * lam1, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(lam2, site2 + msg["msg2"] - K * rho_s * lam2, rtol=1e-8, atol=1e-9)


# ------------------------------------------------------------------------------------------ peer references

def test_isotropic_rounds_equal_the_peer_handwritten_admm():
    ref_mod = peer("test_federated")
    mod = module("fed_admm_isotropic")
    clients = ref_mod.logistic_clients()
    for hp in (dict(lr=0.1, rho=2.0, rho_server=2.0, delta=0.5), dict(lr=0.05, rho=0.5, rho_server=0.0, delta=1.0)):
        ref = ref_mod.handwritten_admm(clients, 6, 3, P=3, **hp)
        got = []
        simulate(mod, [{"grad": ref_mod.logistic_grad(X, y)} for X, y in clients], {"m": np.zeros(3)}, rounds=6,
                 local_steps=3, hyper=hp,
                 callback=lambda r, g, s, d: got.append((g["m"].copy(), [x["m"].copy() for x in s],
                                                         [x["dual1"].copy() for x in d])))
        assert len(got) == 6
        for (g_ref, th_ref, v_ref), (g, th, v) in zip(ref, got):
            # the same arithmetic grouped differently, over 6 rounds x 3 local steps: 1e-12
            np.testing.assert_allclose(g, g_ref, rtol=0, atol=1e-12)
            for a, b_ in zip(th + v, th_ref + v_ref):
                np.testing.assert_allclose(a, b_, rtol=0, atol=1e-12)


def test_full_gaussian_one_round_is_the_centralized_posterior():
    """The peer's least-squares clients (tests/peers/federated_admm/federated_problems.py): with lr = 1 and
    ρ_s = 0 one round gives the ridge posterior N(A⁻¹Σ_k X_kᵀy_k, A⁻¹), A = Σ_k X_kᵀX_k + δI."""
    problems = peer("federated_problems")
    mod = module("fed_admm_full")
    clients = problems.least_squares()
    delta = 1.0
    oracles = [{"grad": (lambda X, y: lambda th: X.T @ (X @ th - y))(X, y), "hess": (lambda X: lambda th: X.T @ X)(X)}
               for X, y in clients]
    g, _, duals = simulate(mod, oracles, {"m": np.zeros(3), "S": np.eye(3)}, rounds=1,
                           hyper=dict(lr=1.0, rho=1.0, rho_server=0.0, delta=delta))
    A = sum(X.T @ X for X, _ in clients) + delta * np.eye(3)
    m_star = np.linalg.solve(A, sum(X.T @ y for X, y in clients))
    # a few Cholesky solves of a well-conditioned 3x3 system: 1e-10 relative
    np.testing.assert_allclose(g["S"], A, rtol=1e-10)
    np.testing.assert_allclose(g["m"], m_star, rtol=1e-10, atol=1e-10 * np.abs(m_star).max())
    for (X, y), d in zip(clients, duals):
        np.testing.assert_allclose(d["dual1"], X.T @ y, rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(d["dual2"], -X.T @ X / 2, rtol=1e-10, atol=1e-9)


def test_the_federated_sections_description_is_an_explain_step(tmp_path):
    """A federated section's ``description`` (which algorithm the penalties make, and its source) is a step of the
    derivation just before the client objective, shown by explain; without one there is no such step, and the
    derived update does not change with it."""
    base = (ROOT / "catalog" / "fed_admm_isotropic.yaml").read_text(encoding="utf-8")
    assert "  description:" not in base.split("federated:", 1)[1].split("hyperparameters:", 1)[0]
    described = tmp_path / "described.yaml"
    described.write_text(base.replace("  prior: 0.5*delta*theta.T*theta\n", "  prior: 0.5*delta*theta.T*theta\n"
                                      "  description: classic federated ADMM (Boyd et al. 2011, Sec. 7.1)\n"),
                         encoding="utf-8")
    _, plain = api.derive_record(ROOT / "catalog" / "fed_admm_isotropic.yaml")
    _, with_text = api.derive_record(described)
    titles = [s.title for s in with_text.steps]
    i = titles.index("The federated algorithm")
    assert titles[i + 1] == "Client objective of Bayesian ADMM"
    assert with_text.steps[i].text.text == "classic federated ADMM (Boyd et al. 2011, Sec. 7.1)"
    assert "The federated algorithm" not in [s.title for s in plain.steps]
    assert [(n, str(e)) for n, _, e in with_text.updates] == [(n, str(e)) for n, _, e in plain.updates]
    feddyn = api.derive_record(ROOT / "catalog" / "feddyn.yaml")[1]
    assert "Acar et al. (2021)" in feddyn.steps[[s.title for s in feddyn.steps].index("The federated algorithm")].text.text


def test_a_federated_description_that_is_not_text_is_a_located_error(tmp_path):
    import pytest
    from blr_derive.core.errors import SpecError
    base = (ROOT / "catalog" / "fed_admm_isotropic.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(base.replace("  prior: 0.5*delta*theta.T*theta\n",
                                "  prior: 0.5*delta*theta.T*theta\n  description: [a, b]\n"), encoding="utf-8")
    with pytest.raises(SpecError) as err:
        api.derive_record(bad)
    line = base.split("\n").index("  prior: 0.5*delta*theta.T*theta") + 2
    assert "'description' must be text" in str(err.value) and f"bad.yaml:{line}" in str(err.value)
