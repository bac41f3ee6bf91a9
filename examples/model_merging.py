"""Model merging as the product of Gaussian posteriors (catalog/task_arithmetic.yaml, catalog/fisher_merging.yaml).

Two linear-regression "fine-tunings" of a base model, each on its own task whose inputs touch different
coordinates.  Each fine-tuned model is a Laplace posterior: its mean theta_t and its diagonal Fisher F_t (the
diagonal of beta X_t^T X_t plus the base's precision).  The generated modules merge them: task arithmetic
theta0 + sum_t alpha_t (theta_t - theta0), and Fisher merging sum_t F_t theta_t / sum_t F_t, which keeps each
coordinate where the task that saw it put it.  Run from the repository root:

    python examples/model_merging.py
"""
import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "catalog" / "generated" / "numpy" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(P=6, n=40, beta=25.0, prior=1.0, seed=0):
    ta, fm = _load("task_arithmetic"), _load("fisher_merging")
    rng = np.random.default_rng(seed)
    w = rng.normal(size=P)
    theta0 = np.zeros(P)                                  # the base model (the prior's mean)
    tasks, thetas, fishers = [], [], []
    for t in range(2):
        X = rng.normal(size=(n, P)) * (np.arange(P) % 2 == t) + 0.05 * rng.normal(size=(n, P))
        y = X @ w + rng.normal(size=n) / np.sqrt(beta)
        A = beta * X.T @ X + prior * np.eye(P)            # fine-tuning = the posterior with the base as prior
        tasks.append((X, y))
        thetas.append(np.linalg.solve(A, beta * X.T @ y + prior * theta0))
        fishers.append(np.diag(A).copy())
    data = {"theta0": theta0, "theta1": thetas[0], "theta2": thetas[1]}
    arithmetic = ta.step(ta.init(m=theta0), data=data, alpha1=1.0, alpha2=1.0)["m"]
    fisher = fm.step(fm.init(m=theta0, s=np.ones(P)),
                     data={"theta1": thetas[0], "theta2": thetas[1], "F1": fishers[0], "F2": fishers[1]})["m"]
    assert np.allclose(arithmetic, thetas[0] + thetas[1] - theta0, rtol=0, atol=1e-12)
    assert np.allclose(fisher, (fishers[0] * thetas[0] + fishers[1] * thetas[1]) / (fishers[0] + fishers[1]),
                       rtol=0, atol=1e-12)
    loss = lambda th: sum(0.5 * np.mean((X @ th - y) ** 2) for X, y in tasks)
    errors = {"fine-tuned 1": loss(thetas[0]), "fine-tuned 2": loss(thetas[1]),
              "task arithmetic": loss(arithmetic), "Fisher merging": loss(fisher)}
    for name, value in errors.items():
        print(f"{name:16s} mean squared error over both tasks: {value:.4f}")
    return errors


if __name__ == "__main__":
    main()
