"""xNES derived from the Bayesian learning rule, on the 5-dimensional Rosenbrock function (no gradients).

The catalog recipe `catalog/xnes.yaml` is the BLR over the full Gaussian with the score-function natural gradient
(Eq. 4 with App. D), no entropy, NES's rank-based utilities, and the covariance factor stepped in exponential local
coordinates A <- A expm(lr_A M) (Wierstra et al. 2014, Algorithm 5); its numpy module is
`catalog/generated/numpy/xnes.py`.  Run from the repository root:

    python examples/xnes_blackbox.py

It prints the loss of the mean and the correlation the search distribution learned along Rosenbrock's valley.
"""
import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("xnes", ROOT / "catalog" / "generated" / "numpy" / "xnes.py")
xnes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(xnes)


def rosenbrock(x):
    return float(np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))


def main(generations=1500, dims=5, seed=0):
    rng = np.random.default_rng(seed)
    popsize = 4 + int(3 * np.log(dims))                  # NES's default population size
    hyper = {"lr_A": (9 + 3 * np.log(dims)) / (5 * dims * np.sqrt(dims)), "popsize": popsize}
    state = xnes.init(m=np.full(dims, -1.0), A=0.5 * np.eye(dims))
    for g in range(generations + 1):
        if g % 500 == 0:
            C = state["A"] @ state["A"].T
            corr = C[0, 1] / np.sqrt(C[0, 0] * C[1, 1])
            print(f"generation {g:5d}  loss(mean) = {rosenbrock(state['m']):.3e}  corr(x0, x1) = {corr:+.2f}")
        state = xnes.step(state, oracles={"loss": rosenbrock}, rng=rng, **hyper)
    return rosenbrock(state["m"])


if __name__ == "__main__":
    main()
