"""IVON with posterior correction from a checkpoint (PoCo; the Bayes-duality slides, "Speeding up training with
memories": q ← q^{1−ρ} q_old^ρ Π_{j∈B} exp(−ρ(ℓ̂_j − ℓ̂_{j|old}))), next to plain IVON, on ridge regression at equal
per-example gradient evaluations.

Both are the catalog's generated numpy modules: `catalog/generated/numpy/ivon.py` and
`catalog/generated/numpy/ivon_poco.py` (catalog/ivon_poco.yaml: IVON's approximations with the gradient sites of a
stored checkpoint q_old = N(m_old, 1/s_old) corrected, `posterior_correction: {estimates: [grad]}`).  Every epoch
of steps the checkpoint is refreshed: m_old, s_old and the full-data gradient at m_old (n evaluations); a PoCo step
costs two batch gradients per sample (at the sample of q and at the same draw's sample of q_old).  Plain IVON stalls
at its mini-batch noise floor; the corrected gradient's variance vanishes as q approaches q_old, so PoCo, slower at
first, passes below it.  The printed errors are this problem's (relative distance of the mean to the full-batch
ridge solution), not a benchmark.  Run from the repository root:

    python examples/ivon_poco_example.py
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


def main(n=200, d=10, batch=10, epochs=(100, 200, 400), seed=0):
    ivon, poco = load("ivon"), load("ivon_poco")
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, d)) @ (np.eye(d) + 0.5 * rng.standard_normal((d, d)))
    b = A @ rng.standard_normal(d) + 0.5 * rng.standard_normal(n)
    delta = 1e-2                                     # the prior precision per example (IVON's weight decay)
    best = np.linalg.solve(A.T @ A / n + delta * np.eye(d), A.T @ b / n)
    grad_of = lambda idx: (lambda th: A[idx].T @ (A[idx] @ th - b[idx]) / len(idx))   # noqa: E731
    full_grad = grad_of(np.arange(n))
    hp = dict(lr=0.1, ess=float(n), weight_decay=delta, beta1=0.9, beta2=0.999, mc_samples=1, rescale_lr=False)
    budget = [e * n for e in epochs]

    def run(mod, corrected):
        pick, draws = np.random.default_rng(seed), np.random.default_rng(seed + 1000)
        st, evals, t, old, errs = mod.init(hp, m=np.zeros(d)), 0, 0, None, {}
        while evals < budget[-1]:
            if corrected and t % (n // batch) == 0:                  # refresh the checkpoint every epoch of steps
                old = {"m_old": st["m"].copy(), "s_old": n * (st["h"] + delta), "grad_full": full_grad(st["m"])}
                evals += n
            kw = dict(data=old) if corrected else dict(hess_approx="price")
            st = mod.step(st, oracles={"grad": grad_of(pick.choice(n, batch, replace=False))}, rng=draws, **hp, **kw)
            evals += batch * (2 if corrected else 1)
            t += 1
            for e in budget:
                if evals >= e and e not in errs:
                    errs[e] = float(np.linalg.norm(st["m"] - best) / np.linalg.norm(best))
        return [errs[e] for e in budget]

    plain, corrected = run(ivon, False), run(poco, True)
    print("epochs' worth of gradients | IVON   | IVON-PoCo (gradient sites)")
    for e, p, c in zip(epochs, plain, corrected):
        print(f"{e:>26} | {p:.1e} | {c:.1e}")
    return plain, corrected


if __name__ == "__main__":
    main()
