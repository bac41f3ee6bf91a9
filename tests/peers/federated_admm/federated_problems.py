"""Federated Bayesian ADMM over torch.distributed ranks: problems, references and the per-rank runs.

Used by tests/peers/federated_admm/test_distributed.py, whose single spawn of 4 gloo processes runs
:func:`rank_runs` on every rank (blr_derive.runtime.fedrun.run_rank drives the generated functions; the server's
sum is a ``dist.reduce`` and its broadcast a ``dist.broadcast``):

* federated ADMM (catalog/fed_admm_isotropic.yaml) with every rank a client, and with rank 0 a dedicated
  server and 3 client ranks; the full-Gaussian recipe for one round; IVON-ADMM (catalog/fed_ivon_admm.yaml,
  each rank draws its Monte Carlo noise from its own seeded generator).  Every rank must end with the global
  parameters of the in-process simulator (:func:`simulator_runs`, blr_derive.runtime.fedrun.simulate) on the same
  data and seeds.
* on heterogeneous (non-IID) logistic-regression clients (shifted inputs, skewed labels), IVON-ADMM must
  reach at least the test accuracy of FedAvg (:func:`fedavg`, written here: local gradient steps from the
  global model, then the average) and of federated ADMM with the same number of rounds and local steps; the
  two baselines take their best test accuracy over a grid of step sizes (and penalties), IVON-ADMM runs one
  fixed setting (:func:`accuracies`).
"""
import os

import numpy as np

from blr_derive.runtime.fedrun import run_rank, simulate
from conftest import GENERATED, load_module_from_path

GEN = str(GENERATED / "numpy")
K, P, ROUNDS, LOCAL, DELTA = 4, 8, 8, 10, 1.0
# one fixed setting (the recipe's defaults are the official MNIST configuration's, tuned for deep networks): no
# temperature, no dual damping, the server summing the sites
IVON_HP = dict(lr=0.3, rho=1.0, rho_server=0.0, delta=DELTA, beta2=0.5, mc_samples=16, temperature=1.0,
               dual_damping=1.0)
IVON_S0 = 10.0


def _mod(name):
    return load_module_from_path(os.path.join(GEN, name + ".py"))


def heterogeneous_clients(seed=0, n=50, spread=3.0):
    """K clients whose inputs sit around different centers, labels from one logistic model (so each
    client sees a skewed label distribution); the test set is drawn from all the clients' input regions."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=P)
    w[-1] = 0.0
    centers = rng.normal(scale=spread, size=(K, P))
    clients, tests = [], []
    for k in range(K):
        for store, size in ((clients, n), (tests, 500)):
            X = rng.normal(size=(size, P)) + centers[k]
            X[:, -1] = 1.0
            y = (rng.random(size) < 1 / (1 + np.exp(-3 * X @ w / np.sqrt(P)))).astype(float)
            store.append((X, y))
    return clients, (np.vstack([t[0] for t in tests]), np.concatenate([t[1] for t in tests]))


def grad_of(X, y):
    return lambda th: X.T @ (1 / (1 + np.exp(-np.clip(X @ th, -500, 500))) - y)


def logistic_loss_at_mean(X, y):
    """A client's loss Σ_n log(1 + e^{x_nᵀθ}) − y_n x_nᵀθ at the mean of q_g (the delta method's E_{q_g}[ℓ_k])."""
    return lambda g: float(np.sum(np.logaddexp(0.0, X @ g["m"]) - y * (X @ g["m"])))


def simulator_bounds():
    """The bound per round of the dedicated-server run, every client in this process."""
    clients, _ = heterogeneous_clients()
    bounds = []
    simulate(_mod("fed_admm_isotropic"), [{"grad": grad_of(X, y)} for X, y in clients[1:]], {"m": np.zeros(P)},
             rounds=3, local_steps=LOCAL, hyper=dict(lr=0.1, rho=3.0, rho_server=3.0, delta=DELTA),
             client_loss=[logistic_loss_at_mean(X, y) for X, y in clients[1:]],
             callback=lambda r, g, s, d, objective: bounds.append(float(objective["objective"])))
    return bounds


def least_squares(seed=3):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(K):
        X = rng.normal(size=(6 + 2 * k, 3)) + k
        out.append((X, X @ rng.normal(size=3) * (k + 1) + rng.normal(size=6 + 2 * k)))
    return out


def accuracy(th, test):
    X, y = test
    return float(np.mean((X @ th > 0) == (y > 0.5)))


def fedavg(clients, rounds, local_steps, lr):
    """FedAvg: every client starts from the global model, takes gradient steps on ℓ_k + δ/(2K)‖θ‖², and
    the server averages the clients' models."""
    th = np.zeros(P)
    for _ in range(rounds):
        local = []
        for X, y in clients:
            t = th.copy()
            for _ in range(local_steps):
                t = t - lr * (grad_of(X, y)(t) + DELTA * t / len(clients))
            local.append(t)
        th = np.mean(local, axis=0)
    return th


def rank_runs(rank):
    """What rank ``rank`` (of K = 4, default process group initialised) computes."""
    clients, ls = heterogeneous_clients()[0], least_squares()
    iso, full, ivon = _mod("fed_admm_isotropic"), _mod("fed_admm_full"), _mod("fed_ivon_admm")
    X, y = clients[rank]
    out = {}
    hp = dict(lr=0.1, rho=3.0, rho_server=3.0, delta=DELTA)
    out["admm"] = run_rank(iso, {"grad": grad_of(X, y)}, {"m": np.zeros(P)}, rounds=ROUNDS, local_steps=LOCAL,
                           hyper=hp)
    bounds = []     # the bound per round: every rank's callback gets global_objective of the clients' summed losses
    record = lambda r, g, s, d, objective: bounds.append(float(objective["objective"]))  # noqa: E731
    out["admm_server"] = run_rank(iso, {"grad": grad_of(X, y)}, {"m": np.zeros(P)}, rounds=3, local_steps=LOCAL,
                                  hyper=hp, dedicated_server=True, client_loss=logistic_loss_at_mean(X, y),
                                  callback=record) if rank else None
    if rank == 0:     # the dedicated server holds no data: it still takes part in every collective
        out["admm_server"] = run_rank(iso, None, {"m": np.zeros(P)}, rounds=3, hyper=hp, dedicated_server=True,
                                      client_loss=logistic_loss_at_mean(X, y), callback=record)
    out["admm_server_bounds"] = bounds
    A, b = ls[rank]
    out["full"] = run_rank(full, {"grad": lambda th: A.T @ (A @ th - b), "hess": lambda th: A.T @ A},
                           {"m": np.zeros(3), "S": np.eye(3)}, rounds=1, hyper=dict(lr=1.0, rho=1.0, rho_server=0.0,
                                                                                     delta=DELTA))
    out["ivon"] = run_rank(ivon, {"grad": grad_of(X, y)}, {"m": np.zeros(P), "s": np.full(P, IVON_S0)},
                           rounds=ROUNDS, local_steps=LOCAL, hyper=IVON_HP, rng=np.random.default_rng(rank))
    return out


def simulator_runs():
    """The same runs, every client and the server in this process."""
    clients, _ = heterogeneous_clients()
    iso, full, ivon = _mod("fed_admm_isotropic"), _mod("fed_admm_full"), _mod("fed_ivon_admm")
    oracles = [{"grad": grad_of(X, y)} for X, y in clients]
    hp = dict(lr=0.1, rho=3.0, rho_server=3.0, delta=DELTA)
    return {
        "admm": simulate(iso, oracles, {"m": np.zeros(P)}, rounds=ROUNDS, local_steps=LOCAL, hyper=hp)[0],
        "admm_server": simulate(iso, oracles[1:], {"m": np.zeros(P)}, rounds=3, local_steps=LOCAL, hyper=hp)[0],
        "full": simulate(full, [{"grad": (lambda A, b: lambda th: A.T @ (A @ th - b))(A, b),
                                 "hess": (lambda A: lambda th: A.T @ A)(A)} for A, b in least_squares()],
                         {"m": np.zeros(3), "S": np.eye(3)}, rounds=1,
                         hyper=dict(lr=1.0, rho=1.0, rho_server=0.0, delta=DELTA))[0],
        "ivon": simulate(ivon, oracles, {"m": np.zeros(P), "s": np.full(P, IVON_S0)}, rounds=ROUNDS,
                         local_steps=LOCAL, hyper=IVON_HP, rngs=[np.random.default_rng(k) for k in range(K)])[0],
    }


def accuracies(m_ivon):
    """Test accuracy of IVON-ADMM's global mean, and the best of FedAvg and of federated ADMM over their grids."""
    clients, test = heterogeneous_clients()
    iso = _mod("fed_admm_isotropic")
    oracles = [{"grad": grad_of(X, y)} for X, y in clients]
    acc_avg = max(accuracy(fedavg(clients, ROUNDS, LOCAL, lr), test) for lr in (0.001, 0.003, 0.01, 0.03, 0.1))
    acc_admm = max(accuracy(simulate(iso, oracles, {"m": np.zeros(P)}, rounds=ROUNDS, local_steps=LOCAL,
                                     hyper=dict(lr=lr, rho=rho, rho_server=rho, delta=DELTA))[0]["m"], test)
                   for lr in (0.01, 0.03, 0.1, 0.3) for rho in (1.0, 3.0, 10.0, 30.0))
    return accuracy(m_ivon, test), acc_avg, acc_admm
