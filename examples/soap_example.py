"""SOAP from the BLR: Adam run in the coordinates where the Gaussian's precision is diagonal, the eigenbasis of
exponential averages of G Gᵀ and Gᵀ G (catalog/soap.yaml, the generated numpy module
`catalog/generated/numpy/soap.py`), next to Adam with decoupled weight decay (catalog/adamw.yaml) on a matrix
least-squares problem whose curvature is not aligned with the coordinates: ℓ(W) = ½‖X W − Y‖²/n with correlated
inputs X (rows of W) and correlated outputs (columns).  Adam's diagonal preconditioner sees the coordinates; SOAP's
sees the rotated ones, refreshed every `precondition_frequency` steps (both at the same learning rate and betas;
the printed gaps to the least-squares optimum are this problem's, not a benchmark).

The state L, R, Q_L, Q_R starts from the first gradient (as pytorch-optimizer's SOAP does in its first call:
L = (1 − β) G Gᵀ, R = (1 − β) Gᵀ G, Q their eigenvectors by decreasing eigenvalue).  Run from the repository root:

    python examples/soap_example.py
"""
import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "catalog" / "generated" / "numpy" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def correlated(rng, d, rho):
    """d × d covariance factor with correlation rho between every pair of coordinates."""
    C = (1 - rho) * np.eye(d) + rho * np.ones((d, d))
    return np.linalg.cholesky(C)


def main(d_in=8, d_out=5, n=200, steps=300, lr=0.1, seed=0):
    soap, adamw = load("soap"), load("adamw")
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d_in)) @ correlated(rng, d_in, 0.9).T
    W_true = rng.normal(size=(d_in, d_out)) @ correlated(rng, d_out, 0.8).T
    Y = X @ W_true + 0.1 * rng.normal(size=(n, d_out))
    loss = lambda W: 0.5 * np.sum((X @ W - Y) ** 2) / n             # noqa: E731
    grad = lambda W: X.T @ (X @ W - Y) / n                          # noqa: E731
    W0 = np.zeros((d_in, d_out))
    beta = soap.HYPERPARAMETERS["shampoo_beta"]
    G0 = grad(W0)
    L, R = (1 - beta) * G0 @ G0.T, (1 - beta) * G0.T @ G0
    eig = lambda S: np.linalg.eigh(S)[1][:, ::-1]                   # noqa: E731
    s = soap.init(M=W0, L=L, R=R, Q_L=eig(L), Q_R=eig(R))
    a = adamw.init(m=W0)
    best = loss(np.linalg.lstsq(X, Y, rcond=None)[0])
    for t in range(1, steps + 1):
        s = soap.step(s, oracles={"grad": grad}, lr=lr, weight_decay=0.0)
        a = adamw.step(a, oracles={"grad": grad}, lr=lr, betas=(0.95, 0.95), weight_decay=0.0)
        if t % 50 == 0:
            print(f"step {t:4d}   loss - optimum: SOAP {loss(s['M']) - best:.2e}   AdamW {loss(a['m']) - best:.2e}")
    return loss(s["M"]) - best, loss(a["m"]) - best


if __name__ == "__main__":
    main()
