"""SNES derived from the Bayesian learning rule, on a black-box function (no gradients).

The catalog recipe `catalog/snes.yaml` is the BLR over a mean-field Gaussian with the score-function natural
gradient (Eq. 4), no entropy, NES's rank-based utilities, and the step taken in (m, log s) coordinates; its numpy
module is `catalog/generated/numpy/snes.py`.  Run from the repository root:

    python examples/snes_blackbox.py

It minimises a 10-dimensional, non-differentiable function (a weighted L1 distance to 1 plus a staircase) from
the loss values alone and prints the loss of the mean.
"""
import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("snes", ROOT / "catalog" / "generated" / "numpy" / "snes.py")
snes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(snes)


def blackbox(x):
    d = np.arange(1, x.size + 1)
    return float(np.sum(d * np.abs(x - 1.0)) + np.sum(np.floor(4 * np.abs(x - 1.0))) / 4)


def main(generations=1000, dims=10, seed=0):
    rng = np.random.default_rng(seed)
    popsize = 4 + int(3 * np.log(dims))                  # NES's default population size
    hyper = {"lr_std": (3 + np.log(dims)) / (5 * np.sqrt(dims)), "popsize": popsize, "std_init": 0.5}
    state = snes.init(hyperparameters=hyper, m=np.zeros(dims))
    for g in range(generations + 1):
        if g % 250 == 0:
            print(f"generation {g:5d}  loss(mean) = {blackbox(state['m']):.3e}  mean std = {state['std'].mean():.2e}")
        state = snes.step(state, oracles={"loss": blackbox}, rng=rng, **hyper)
    return blackbox(state["m"])


if __name__ == "__main__":
    main()
