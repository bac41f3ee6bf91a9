"""FedDyn and partitioned variational inference as Bayesian-duality recipes (catalog/feddyn.yaml,
catalog/pvi_gaussian.yaml), through their generated numpy modules and blr_derive.runtime.fedrun.simulate, against
textbook implementations written here from the papers (nothing is shared with the engine):

* FedDyn, Acar et al. (ICLR 2021), Algorithm 1 with full participation: the server keeps h and theta, each client
  its gradient state grad_k; a client takes gradient steps of size eta on
  L_k(theta) - <grad_k, theta> + alpha/2 |theta - theta^(t-1)|^2 from theta^(t-1), then
  grad_k <- grad_k - alpha (theta_k - theta^(t-1)); the server h <- h - alpha/m sum_k (theta_k - theta^(t-1)) and
  theta^t = mean_k theta_k - h/alpha;
* synchronous PVI, Bui et al. (2018) / Ashman et al. (2022), on Bayesian linear regression with a Gaussian prior:
  global q = p_0 prod_k t_k in precision form, cavities q / t_k, local natural-gradient VI on
  E_q[l_k] + KL(q || cavity) from the global q, damped site updates t_k <- (1 - d) t_k + d q_k / cavity, the
  product at the server.  It converges to the exact posterior.
"""
import numpy as np
import pytest

from blr_derive.runtime.fedrun import simulate
from conftest import load_generated


def logistic_clients(K=4, P=3, n=20, seed=0):
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


def least_squares_clients(K=5, P=4, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(K):
        n = 8 + 3 * k
        X = rng.normal(size=(n, P)) * rng.uniform(0.3, 2.0, size=P) + 0.3 * k
        y = X @ rng.normal(size=P) * (k + 1) + rng.normal(size=n)
        out.append((X, y))
    return out


# ----------------------------------------------------------------------------------------------------- FedDyn
def feddyn(grads, theta0, rounds, local_steps, eta, alpha):
    """Acar et al. (2021), Algorithm 1, every client active every round (P_t = [m])."""
    m = len(grads)
    theta, h = theta0.copy(), np.zeros_like(theta0)
    gstate = [np.zeros_like(theta0) for _ in range(m)]         # grad L_k(theta_k^0) = 0
    hist = []
    for _ in range(rounds):
        local = []
        for k in range(m):
            th = theta.copy()
            for _ in range(local_steps):
                th = th - eta * (grads[k](th) - gstate[k] + alpha * (th - theta))
            gstate[k] = gstate[k] - alpha * (th - theta)
            local.append(th)
        h = h - alpha / m * sum(th - theta for th in local)
        theta = sum(local) / m - h / alpha
        hist.append((theta.copy(), [t.copy() for t in local], [g.copy() for g in gstate]))
    return hist


def run_feddyn_recipe(grads, P, rounds, local_steps, eta, alpha):
    mod = load_generated("feddyn")
    got = []
    simulate(mod, [{"grad": g} for g in grads], {"m": np.zeros(P)}, rounds=rounds, local_steps=local_steps,
             hyper=dict(lr=eta * alpha, alpha=alpha), client_start="global",
             callback=lambda r, g, s, d: got.append((g["m"].copy(), [x["m"].copy() for x in s],
                                                     [x["dual1"].copy() for x in d])))
    return got


@pytest.mark.parametrize("eta,alpha,local_steps", [(0.05, 0.1, 5), (0.02, 1.0, 3), (0.1, 0.01, 10)])
def test_feddyn_recipe_is_feddyn_round_by_round(eta, alpha, local_steps):
    clients = logistic_clients()
    grads = [logistic_grad(X, y) for X, y in clients]
    ref = feddyn(grads, np.zeros(3), 20, local_steps, eta, alpha)
    got = run_feddyn_recipe(grads, 3, 20, local_steps, eta, alpha)
    worst = 0.0
    for (g_ref, th_ref, gs_ref), (g, th, dual) in zip(ref, got):
        worst = max(worst, np.max(np.abs(g - g_ref)),
                    *(np.max(np.abs(a - b)) for a, b in zip(th, th_ref)),
                    *(np.max(np.abs(d + gs)) for d, gs in zip(dual, gs_ref)))      # the dual is -grad_k
    print(f"eta={eta} alpha={alpha}: max |derived - FedDyn| over 20 rounds = {worst:.1e}")
    assert len(got) == 20 and worst < 1e-10, worst


def test_feddyn_reaches_the_centralized_least_squares_solution():
    """FedDyn's fixed point is the minimizer of sum_k L_k (Acar et al., Sec. 3), which FedAvg misses on
    heterogeneous clients: least squares, inexact local solves."""
    clients = least_squares_clients()
    grads = [(lambda X, y: lambda th: X.T @ (X @ th - y))(X, y) for X, y in clients]
    theta_star = np.linalg.lstsq(np.vstack([X for X, _ in clients]), np.concatenate([y for _, y in clients]),
                                 rcond=None)[0]
    alpha = 30.0
    eta = 1.0 / (max(np.linalg.eigvalsh(X.T @ X).max() for X, _ in clients) + alpha)
    got = run_feddyn_recipe(grads, 4, 100, 10, eta, alpha)
    err = np.max(np.abs(got[-1][0] - theta_star)) / np.max(np.abs(theta_star))
    print("FedDyn after 100 rounds: relative error to the centralized solution", err)
    assert err < 1e-10
    # every client's local model is there too, and its dual is minus its own gradient there
    assert all(np.max(np.abs(th - theta_star)) < 1e-10 * np.max(np.abs(theta_star)) for th in got[-1][1])


# ----------------------------------------------------------------------------------------------------- PVI
def pvi(clients, P, delta, rounds, local_steps, lr, damping):
    """Synchronous PVI over the full Gaussian in precision form (Lambda, r = Lambda m); sites t_k = (R_k, r_k):
    exp(r_k^T theta - theta^T R_k theta / 2).  Local optimisation: natural-gradient VI steps on
    E_q[l_k] + KL(q || cavity) from the global q (Khan & Rue Eq. 6 with the cavity as the prior)."""
    R = [np.zeros((P, P)) for _ in clients]
    r = [np.zeros(P) for _ in clients]
    Lam_g, r_g = delta * np.eye(P), np.zeros(P)
    hist = []
    for _ in range(rounds):
        new = []
        for k, (X, y) in enumerate(clients):
            Lam_c, r_c = Lam_g - R[k], r_g - r[k]                  # the cavity q_g / t_k
            Lam, rr = Lam_g.copy(), r_g.copy()
            for _ in range(local_steps):
                m = np.linalg.solve(Lam, rr)
                g, H = X.T @ (X @ m - y), X.T @ X                    # E_q[grad], E_q[Hessian] of l_k
                Lam, rr = (1 - lr) * Lam + lr * (Lam_c + H), (1 - lr) * rr + lr * (r_c + H @ m - g)
            new.append(((1 - damping) * R[k] + damping * (Lam - Lam_c), (1 - damping) * r[k] + damping * (rr - r_c)))
        R, r = [a for a, _ in new], [b for _, b in new]
        Lam_g, r_g = delta * np.eye(P) + sum(R), sum(r)
        hist.append((np.linalg.solve(Lam_g, r_g), Lam_g.copy(), [a.copy() for a in R], [b.copy() for b in r]))
    return hist


def run_pvi_recipe(clients, P, delta, rounds, local_steps, lr, damping):
    mod = load_generated("pvi_gaussian")
    oracles = [{"grad": (lambda X, y: lambda th: X.T @ (X @ th - y))(X, y),
                "hess": (lambda X: lambda th: X.T @ X)(X)} for X, y in clients]
    got = []
    simulate(mod, oracles, {"m": np.zeros(P), "S": delta * np.eye(P)}, rounds=rounds, local_steps=local_steps,
             hyper=dict(lr=lr, damping=damping, delta=delta), client_start="global",
             callback=lambda r, g, s, d: got.append((g["m"].copy(), g["S"].copy(),
                                                     [x["dual2"].copy() for x in d], [x["dual1"].copy() for x in d])))
    return got


def exact_posterior(clients, P, delta):
    A = sum(X.T @ X for X, _ in clients) + delta * np.eye(P)
    return np.linalg.solve(A, sum(X.T @ y for X, y in clients)), A


@pytest.mark.parametrize("lr,local_steps,damping", [(1.0, 1, 1.0), (0.5, 3, 0.5), (0.3, 2, 0.8)])
def test_pvi_recipe_is_synchronous_pvi_round_by_round(lr, local_steps, damping):
    clients, P, delta = least_squares_clients(), 4, 2.0
    ref = pvi(clients, P, delta, 12, local_steps, lr, damping)
    got = run_pvi_recipe(clients, P, delta, 12, local_steps, lr, damping)
    worst = 0.0
    for (m_ref, L_ref, R_ref, r_ref), (m, S, dual2, dual1) in zip(ref, got):
        scale = max(1.0, np.max(np.abs(L_ref)))
        worst = max(worst, np.max(np.abs(m - m_ref)) / max(1.0, np.max(np.abs(m_ref))),
                    np.max(np.abs(S - L_ref)) / scale,
                    *(np.max(np.abs(-2 * d - a)) / scale for d, a in zip(dual2, R_ref)),   # dual2 = -R_k/2
                    *(np.max(np.abs(d - b)) / scale for d, b in zip(dual1, r_ref)))
    print(f"lr={lr} steps={local_steps} d={damping}: max relative |derived - PVI| over 12 rounds = {worst:.1e}")
    assert len(got) == 12 and worst < 1e-10, worst


@pytest.mark.parametrize("lr,local_steps,damping,rounds", [(1.0, 1, 1.0, 1), (0.5, 3, 0.5, 60)])
def test_pvi_converges_to_the_exact_posterior(lr, local_steps, damping, rounds):
    """Conjugate model: the sites become the exact likelihood sites (X_k^T y_k, X_k^T X_k) and q_g the posterior;
    undamped exact local solves get there in one round."""
    clients, P, delta = least_squares_clients(), 4, 2.0
    m_star, A = exact_posterior(clients, P, delta)
    m, S, dual2, dual1 = run_pvi_recipe(clients, P, delta, rounds, local_steps, lr, damping)[-1]
    err = max(np.max(np.abs(m - m_star)) / np.max(np.abs(m_star)), np.max(np.abs(S - A)) / np.max(np.abs(A)))
    print(f"PVI after {rounds} rounds: relative error to the exact posterior {err:.1e}")
    assert err < 1e-10
    for (X, y), d1, d2 in zip(clients, dual1, dual2):
        assert np.max(np.abs(d1 - X.T @ y)) < 1e-8 * np.max(np.abs(X.T @ y))
        assert np.max(np.abs(-2 * d2 - X.T @ X)) < 1e-8 * np.max(np.abs(X.T @ X))


def test_jax_modules_equal_the_references(x64):
    """The committed jax modules (plain jax.numpy functions) driven by the same simulator: FedDyn and PVI rounds
    equal the textbook implementations above."""
    clients = logistic_clients()
    grads = [logistic_grad(X, y) for X, y in clients]
    ref = feddyn(grads, np.zeros(3), 5, 4, 0.05, 0.1)
    got = []
    simulate(load_generated("feddyn", "jax"), [{"grad": g} for g in grads], {"m": np.zeros(3)}, rounds=5,
             local_steps=4, hyper=dict(lr=0.05 * 0.1, alpha=0.1), client_start="global",
             callback=lambda r, g, s, d: got.append(np.asarray(g["m"])))
    assert max(np.max(np.abs(a - b[0])) for a, b in zip(got, ref)) < 1e-10
    ls, P, delta = least_squares_clients(), 4, 2.0
    ref = pvi(ls, P, delta, 5, 3, 0.5, 0.5)
    oracles = [{"grad": (lambda X, y: lambda th: X.T @ (X @ th - y))(X, y),
                "hess": (lambda X: lambda th: X.T @ X)(X)} for X, y in ls]
    got = []
    simulate(load_generated("pvi_gaussian", "jax"), oracles, {"m": np.zeros(P), "S": delta * np.eye(P)}, rounds=5,
             local_steps=3, hyper=dict(lr=0.5, damping=0.5, delta=delta), client_start="global",
             callback=lambda r, g, s, d: got.append((np.asarray(g["m"]), np.asarray(g["S"]))))
    for (m, S), (m_ref, L_ref, _, _) in zip(got, ref):
        assert np.max(np.abs(m - m_ref)) < 1e-10 * max(1.0, np.max(np.abs(m_ref)))
        assert np.max(np.abs(S - L_ref)) < 1e-10 * np.max(np.abs(L_ref))
