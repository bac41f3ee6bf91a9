"""FedDyn and partitioned variational inference from Bayesian duality (catalog/feddyn.yaml,
catalog/pvi_gaussian.yaml), run by blr_derive.runtime.fedrun.simulate on heterogeneous least-squares clients.

FedDyn (Acar et al. 2021) reaches the minimizer of the sum of the clients' losses (the centralized solution); PVI
(Bui et al. 2018, Ashman et al. 2022) with damped, inexact local steps reaches the exact Bayesian posterior of
linear regression with a Gaussian prior.  Run from the repository root:

    python examples/feddyn_pvi.py
"""
import importlib.util
from pathlib import Path

import numpy as np

from blr_derive.runtime.fedrun import simulate

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "catalog" / "generated" / "numpy" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def clients(K=5, P=4, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(K):
        X = rng.normal(size=(8 + 3 * k, P)) * rng.uniform(0.3, 2.0, size=P) + 0.3 * k
        out.append((X, X @ rng.normal(size=P) * (k + 1) + rng.normal(size=len(X))))
    return out


def main(rounds=100):
    data = clients()
    P = data[0][0].shape[1]
    grad = lambda X, y: lambda th: X.T @ (X @ th - y)
    # FedDyn: eta = 1/(L + alpha) local gradient steps; the recipe's lr is eta*alpha
    alpha = 30.0
    eta = 1.0 / (max(np.linalg.eigvalsh(X.T @ X).max() for X, _ in data) + alpha)
    g, _, _ = simulate(_load("feddyn"), [{"grad": grad(X, y)} for X, y in data], {"m": np.zeros(P)}, rounds=rounds,
                       local_steps=10, hyper={"lr": eta * alpha, "alpha": alpha}, client_start="global")
    central = np.linalg.lstsq(np.vstack([X for X, _ in data]), np.concatenate([y for _, y in data]), rcond=None)[0]
    feddyn_error = float(np.max(np.abs(g["m"] - central)))
    print(f"FedDyn after {rounds} rounds: |m - centralized least squares| = {feddyn_error:.1e}")
    # PVI: damped sites, three natural-gradient steps of size 0.5 per round, prior N(0, I/2)
    delta = 2.0
    oracles = [{"grad": grad(X, y), "hess": (lambda X: lambda th: X.T @ X)(X)} for X, y in data]
    q, _, _ = simulate(_load("pvi_gaussian"), oracles, {"m": np.zeros(P), "S": delta * np.eye(P)}, rounds=rounds,
                       local_steps=3, hyper={"lr": 0.5, "damping": 0.5, "delta": delta}, client_start="global")
    S = sum(X.T @ X for X, _ in data) + delta * np.eye(P)
    m = np.linalg.solve(S, sum(X.T @ y for X, y in data))
    pvi_error = float(max(np.max(np.abs(q["m"] - m)), np.max(np.abs(q["S"] - S))))
    print(f"PVI after {rounds} rounds: |q_g - exact posterior| = {pvi_error:.1e}")
    return feddyn_error, pvi_error


if __name__ == "__main__":
    main()
