"""Which training examples does a model remember?  Memory-perturbation sensitivities from the BLR's sites.

`catalog/laplace.yaml` (numpy module `catalog/generated/numpy/laplace.py`) is Laplace's method for Bayesian logistic
regression; its rule `memory_perturbation` (Nickl et al., NeurIPS 2023) adds `sensitivities(state, data=...)`, which
removes one example's site from the trained posterior at a time and returns the leave-one-out posteriors.  This
script trains the model, predicts how each training prediction x_iᵀm moves when example i is left out, and checks
the predictions against leave-one-out retraining (Newton's method to convergence).  Run from the repository root:

    python examples/memory_perturbation.py
"""
import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("laplace", ROOT / "catalog" / "generated" / "numpy" / "laplace.py")
laplace = importlib.util.module_from_spec(spec)
spec.loader.exec_module(laplace)


def retrain(X, y, alpha, m):
    """The MAP without an example, by Newton's method from the trained mean (the ground truth)."""
    for _ in range(50):
        p = 1 / (1 + np.exp(-X @ m))
        m = m - np.linalg.solve(X.T @ (X * (p * (1 - p))[:, None]) + alpha * np.eye(len(m)), X.T @ (p - y) + alpha * m)
    return m


def main(N=200, P=5, alpha=1.0, seed=0, show=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, P))
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ rng.normal(size=P)))).astype(float)
    data = {"X": X, "y": y}
    state = {"m": np.zeros(P), "S": np.eye(P)}
    for _ in range(30):
        state = laplace.step(state, data=data, alpha=alpha)
    out = laplace.sensitivities(state, data=data, alpha=alpha)
    predicted = np.einsum("np,np->n", X, out["mean_deviation"])            # x_iᵀ(m_{-i} − m)
    true = np.array([X[i] @ (retrain(np.delete(X, i, 0), np.delete(y, i), alpha, state["m"]) - state["m"])
                     for i in range(N)])
    print(f"{'example':>8} {'label':>6} {'predicted shift':>16} {'retrained shift':>16}")
    for i in np.argsort(-np.abs(predicted))[:show]:
        print(f"{i:8d} {y[i]:6.0f} {predicted[i]:16.5f} {true[i]:16.5f}")
    corr = np.corrcoef(predicted, true)[0, 1]
    print(f"correlation of predicted and retrained shifts over all {N} examples: {corr:.4f}")
    return corr


if __name__ == "__main__":
    main()
