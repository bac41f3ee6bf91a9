"""Noisy K-FAC's update from the BLR: one linear layer with independent Bernoulli outputs, trained with the generated
matrix-normal modules `catalog/generated/numpy/noisy_kfac.py` (oracles at the mean) and `noisy_kfac_mc.py` (Zhang et
al.'s Alg. 1: the oracles at a sample W = M + L_G^-T E L_A^-1 of q each step; state M, A, G; q(W) = MN(M, A^-1,
G^-1)), next to the generated full-Gaussian Newton module on vec(W) with the exact Hessian (P x P, P = d_out * d_in).

The oracles are mini-batch means: `grad` (d_out x d_in), `activations` a (one input per row) and `output_grads` b
(gradients of the mean loss in the layer's outputs, targets sampled from the model: the Fisher's K-FAC factors).
Run from the repository root:

    python examples/noisy_kfac_example.py
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


kfac, kfac_mc, newton = load("noisy_kfac"), load("noisy_kfac_mc"), load("newton")


def main(d_in=6, d_out=4, n=400, batch=50, steps=200, rho=0.2, delta=1.0, seed=0):
    rng = np.random.default_rng(seed)
    W_true = rng.normal(size=(d_out, d_in))
    X = rng.normal(size=(n, d_in))
    Y = (rng.random(size=(n, d_out)) < 1 / (1 + np.exp(-X @ W_true.T))).astype(float)

    def loss(W):                                  # mean negative log-likelihood over the data set
        s = X @ W.T
        return np.mean(np.sum(np.logaddexp(0, s) - Y * s, axis=1))

    def oracles(idx):
        Xb, Yb = X[idx], Y[idx]
        sig = lambda W: 1 / (1 + np.exp(-Xb @ W.T))
        y_model = lambda W: (rng.random(size=(len(idx), d_out)) < sig(W)).astype(float)
        return {"grad": lambda W: (sig(W) - Yb).T @ Xb / len(idx),
                "activations": lambda W: Xb,
                "output_grads": lambda W: (sig(W) - y_model(W)) / len(idx)}

    state = kfac.init(M=np.zeros((d_out, d_in)), A=np.eye(d_in), G=np.eye(d_out))
    noisy = kfac_mc.init(M=np.zeros((d_out, d_in)), A=np.eye(d_in), G=np.eye(d_out))
    full = newton.init(m=np.zeros(d_out * d_in), S=np.eye(d_out * d_in))
    split = np.sqrt(n) * batch                   # Zhang et al.'s damping pi = 1 in this parametrization
    for t in range(steps):
        idx = rng.choice(n, size=batch, replace=False)
        state = kfac.step(state, oracles=oracles(idx), rho=rho, ess=float(n), prior_precision=delta,
                          damping_split=split)
        noisy = kfac_mc.step(noisy, oracles=oracles(idx), rng=rng, rho=rho, ess=float(n), prior_precision=delta,
                             damping_split=split, mc_samples=1)
        o = oracles(idx)
        vecW = lambda w: w.reshape((d_out, d_in), order="F")

        def hess(w):                              # exact Hessian of the data-set loss + prior on vec(W)
            s = 1 / (1 + np.exp(-X[idx] @ vecW(w).T))
            return n / batch * sum(np.kron(np.outer(x, x), np.diag(p * (1 - p))) for x, p in zip(X[idx], s)) \
                + delta * np.eye(d_out * d_in)

        full = newton.step(full, oracles={"grad": lambda w: n * o["grad"](vecW(w)).reshape(-1, order="F") + delta * w,
                                          "hess": hess}, rho=rho)
        if t % 50 == 0 or t == steps - 1:
            print(f"step {t:3d}: loss K-FAC {loss(state['M']):.4f}   noisy K-FAC {loss(noisy['M']):.4f}   "
                  f"full-Gaussian Newton {loss(full['m'].reshape((d_out, d_in), order='F')):.4f}   "
                  f"(truth {loss(W_true):.4f})")
    for name, s in (("K-FAC", state), ("noisy K-FAC", noisy)):
        cov_diag = np.kron(np.diag(np.linalg.inv(s["A"])), np.diag(np.linalg.inv(s["G"])))
        print(f"posterior std of W ({name}), first row:", np.sqrt(cov_diag.reshape((d_out, d_in), order="F")[0]).round(3))


if __name__ == "__main__":
    main()
