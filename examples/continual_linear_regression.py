"""Continual learning with the BLR: the previous tasks' posterior is the next task's prior site.

`catalog/continual_gaussian.yaml` (numpy module `catalog/generated/numpy/continual_gaussian.py`) takes the posterior
(m_past, S_past) after the earlier tasks as a prior site; one step with rho = 1 per task gives the posterior of all
tasks so far, which this script compares with joint Bayesian linear regression and with training that forgets
(a plain prior for every task).  Run from the repository root:

    python examples/continual_linear_regression.py
"""
import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("cg", ROOT / "catalog" / "generated" / "numpy" / "continual_gaussian.py")
cg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cg)


def main(P=8, T=5, alpha=1.0, beta=25.0, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=P)
    keep = {"m": np.zeros(P), "S": alpha * np.eye(P)}
    forget = dict(keep)
    XX, Xy = alpha * np.eye(P), np.zeros(P)
    for t in range(T):
        X = rng.normal(size=(10, P)) * (np.arange(P) % T == t + 0.0) + 0.05 * rng.normal(size=(10, P))  # task t sees a few inputs
        y = X @ w + rng.normal(size=10) / np.sqrt(beta)
        keep = cg.step(keep, data={"X": X, "y": y, "m_past": keep["m"], "S_past": keep["S"]}, beta=beta)
        forget = cg.step(forget, data={"X": X, "y": y, "m_past": np.zeros(P), "S_past": alpha * np.eye(P)}, beta=beta)
        XX, Xy = XX + beta * X.T @ X, Xy + beta * X.T @ y
        joint = np.linalg.solve(XX, Xy)
        print(f"after task {t + 1}: |m - joint| = {np.abs(keep['m'] - joint).max():.1e}   "
              f"error to the true weights: continual {np.linalg.norm(keep['m'] - w):.3f}, "
              f"forgetting {np.linalg.norm(forget['m'] - w):.3f}")


if __name__ == "__main__":
    main()
