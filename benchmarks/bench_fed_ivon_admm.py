"""IVON-ADMM as published against federated ADMM on a small non-IID problem (issue 37): softmax regression on
scikit-learn's digits, five clients with two classes each, ``--rounds`` rounds of ``--local`` minibatch steps
(tests/peers/federated_admm/digits_problem.py describes the problem and how each method runs).

Reported, over ``--seeds`` seeds (the split of the test images and the minibatch and noise streams):

* IVON-ADMM at the catalog recipe's defaults (the official MNIST configuration): the test accuracy after the last
  round and the smallest global precision over all rounds;
* IVON-ADMM, best over a grid of 12 (lr × ρ = ρ_s), and federated ADMM, best over a grid of 12 (lr × ρ = ρ_s, the
  prior δ = 0.01 of both), each grid point chosen per seed by its final test accuracy;
* the recipe's earlier defaults (ρ_s = 0, δ = 1, no damping, no temperature, clients continuing from their own
  state): the round at which the server's precision leaves the family (the server step raises FloatingPointError),
  and the same with ``pd_server=True`` (the server's precision completed to the improved BLR step).

    python benchmarks/bench_fed_ivon_admm.py [--seeds 3] [--rounds 10] [--local 50]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "peers" / "federated_admm"))
sys.path.insert(0, str(ROOT / "tests"))

import digits_problem as dp  # noqa: E402
from conftest import load_generated  # noqa: E402
from blr_derive.runtime.fedrun import simulate  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--local", type=int, default=50)
    a = ap.parse_args(argv)
    ivon, iso = load_generated("fed_ivon_admm"), load_generated("fed_admm_isotropic")
    R, L = a.rounds, a.local
    rows = []
    for seed in range(a.seeds):
        clients, test = dp.digits_clients(seed)
        t0 = time.perf_counter()
        acc, low = dp.ivon_admm(ivon, clients, test, R, L, seed)
        t_default = time.perf_counter() - t0
        grid_ivon = max((dp.ivon_admm(ivon, clients, test, R, L, seed, lr=lr, rho=rho, rho_server=rho)[0][-1], lr, rho)
                        for lr in (0.02, 0.05, 0.1, 0.2) for rho in (1.0, 5.0, 25.0))
        t0 = time.perf_counter()
        grid_admm = max((dp.fed_admm(iso, clients, test, R, L, seed, lr=lr, rho=rho, rho_server=rho, delta=0.01)[-1],
                         lr, rho) for lr in (0.01, 0.03, 0.1, 0.3) for rho in (1.0, 10.0, 100.0))
        t_admm = (time.perf_counter() - t0) / 12
        rows.append((seed, acc[-1], min(low), t_default, grid_ivon, grid_admm, t_admm))
        print(f"seed {seed}: IVON-ADMM defaults {acc[-1]:.3f} (rounds: {' '.join(f'{x:.2f}' for x in acc)}; "
              f"min s_g {min(low):.3g}; {t_default:.1f} s) | IVON-ADMM best of grid {grid_ivon[0]:.3f} "
              f"(lr {grid_ivon[1]}, rho {grid_ivon[2]}) | FedADMM best of grid {grid_admm[0]:.3f} "
              f"(lr {grid_admm[1]}, rho {grid_admm[2]}; {t_admm:.1f} s a run)")
    mean = lambda i: np.mean([r[i] if not isinstance(r[i], tuple) else r[i][0] for r in rows])  # noqa: E731
    print(f"mean over {a.seeds} seeds: IVON-ADMM defaults {mean(1):.3f}, IVON-ADMM best of grid {mean(4):.3f}, "
          f"FedADMM best of grid {mean(5):.3f}; smallest global precision {min(r[2] for r in rows):.3g}")
    # the earlier defaults
    clients, test = dp.digits_clients(0)
    P = clients[0][0].shape[1] * dp.C
    old = dict(lr=0.1, rho=1.0, rho_server=0.0, delta=1.0, beta2=0.99, temperature=1.0, dual_damping=1.0)
    for pd in (False, True):
        seen = []
        try:
            simulate(ivon, [{"grad": dp.minibatch_grad(X, Y, np.random.default_rng(k))} for k, (X, Y) in enumerate(clients)],
                     {"m": np.zeros(P), "s": np.full(P, 10.0)}, rounds=30, local_steps=L, hyper={**old, "pd_server": pd},
                     rngs=[np.random.default_rng(50 + k) for k in range(5)],
                     callback=lambda r, g, s, d: seen.append((dp.accuracy(g["m"], test), float(g["s"].min()))))
            print(f"earlier defaults, pd_server={pd}: 30 rounds, accuracy {seen[-1][0]:.3f}, "
                  f"min s_g {min(x[1] for x in seen):.3g}")
        except FloatingPointError as exc:
            print(f"earlier defaults, pd_server={pd}: round {len(seen) + 1} raised: {exc}")


if __name__ == "__main__":
    main()
