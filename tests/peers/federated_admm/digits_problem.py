"""A small non-IID federated problem: softmax regression on scikit-learn's digits (8×8 images, 10 classes), five
clients with two classes each (the official toy example's split: {0, 1}, {2, 3}, …, {8, 9}), 500 held-out images
for the test accuracy.  Shared by test_ivon_admm_digits.py and benchmarks/bench_fed_ivon_admm.py.

IVON-ADMM (catalog/fed_ivon_admm.yaml) runs as the official deep-learning code runs it (local_client_worker.py,
train.py): the clients' first posterior is IVON's initial one, s = N_k/(τρ)·h0 + δ with the configuration's h0 =
0.005 (``hess_init``), the global one N(0, 1/δ); every round each client restarts from the broadcast posterior
keeping its momentum and step count (``client_start="global"``), the learning rate follows a cosine schedule over
the rounds, and the gradients are of minibatches of 32 scaled to the client's total loss.  Federated ADMM
(catalog/fed_admm_isotropic.yaml) takes the same rounds, local steps and minibatches.
"""
import numpy as np
from sklearn.datasets import load_digits

from blr_derive.runtime.fedrun import simulate

GROUPS = ([0, 1], [2, 3], [4, 5], [6, 7], [8, 9])
C = 10
H0 = 0.005          # h0_local of configs/mnist_heterog/fedivon.yaml
BATCH = 32


def digits_clients(seed=0, n_test=500):
    d = load_digits()
    X, y = d.data / 16.0, d.target
    perm = np.random.default_rng(seed).permutation(len(y))
    X, y = np.hstack([X[perm], np.ones((len(y), 1))]), y[perm]
    test = (X[:n_test], y[:n_test])
    X, y = X[n_test:], y[n_test:]
    return [(X[np.isin(y, g)], np.eye(C)[y[np.isin(y, g)]]) for g in GROUPS], test


def minibatch_grad(X, Y, rng, batch=BATCH):
    """∇ of the client's summed cross-entropy, estimated from a minibatch (θ = W flattened, W of shape (D, C))."""
    D = X.shape[1]

    def g(th):
        idx = rng.choice(len(Y), size=batch, replace=False)
        F = X[idx] @ th.reshape(D, C)
        P = np.exp(F - F.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        return len(Y) / batch * (X[idx].T @ (P - Y[idx])).ravel()
    return g


def accuracy(th, test):
    X, y = test
    return float(np.mean((X @ th.reshape(X.shape[1], C)).argmax(axis=1) == y))


def ivon_admm(mod, clients, test, rounds, local_steps, seed=0, **hyper):
    """(test accuracy after each round, the smallest global precision after each round)."""
    hp = {**mod.HYPERPARAMETERS, **hyper}
    P = clients[0][0].shape[1] * C
    first = [mod.init(hp, m=np.zeros(P), s=np.full(P, len(Y) / (hp["temperature"] * hp["rho"]) * H0 + hp["delta"]))
             for _, Y in clients]
    acc, low = [], []
    simulate(mod, [{"grad": minibatch_grad(X, Y, np.random.default_rng(seed * 100 + k))}
                   for k, (X, Y) in enumerate(clients)],
             {"m": np.zeros(P), "s": np.full(P, hp["delta"])}, rounds=rounds, local_steps=local_steps, hyper=hyper,
             client_states=first, rngs=[np.random.default_rng(seed * 100 + 50 + k) for k in range(len(clients))],
             client_start="global", step_hyper=lambda r, i: {"lr": hp["lr"] * (1 + np.cos(np.pi * r / rounds)) / 2},
             callback=lambda r, g, s, d: (acc.append(accuracy(g["m"], test)), low.append(float(np.min(g["s"])))))
    return acc, low


def fed_admm(mod, clients, test, rounds, local_steps, seed=0, **hyper):
    """Test accuracy after each round of federated ADMM."""
    P = clients[0][0].shape[1] * C
    acc = []
    simulate(mod, [{"grad": minibatch_grad(X, Y, np.random.default_rng(seed * 100 + k))}
                   for k, (X, Y) in enumerate(clients)],
             {"m": np.zeros(P)}, rounds=rounds, local_steps=local_steps, hyper=hyper,
             callback=lambda r, g, s, d: acc.append(accuracy(g["m"], test)))
    return acc
