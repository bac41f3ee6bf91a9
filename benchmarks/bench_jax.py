"""Step time of the generated jax Adam (catalog/generated/jax/adam.py, an optax transformation) against optax.adam.

8e6 float32 parameters in 16 tensors (a pytree: a dict of 16 arrays).  Both updates are jitted as
``params, state = step(grads, state, params)`` (update + optax.apply_updates), with the parameter and state
buffers donated, and timed alternately (round robin) in one process, so that machine noise hits them alike; each
timing blocks on the result.  Reports the median step time of each and the ratio generated/optax (target <= 1.05).

    python benchmarks/bench_jax.py            # full run: 8e6 parameters, 30 rounds of 10 steps
    python benchmarks/bench_jax.py --quick    # 1e6 parameters, 10 rounds
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import optax

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from conftest import load_generated  # noqa: E402


def make(total, n, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), 2 * n)
    size = total // n
    params = {f"w{i:02d}": jax.random.normal(keys[i], (size,), jnp.float32) for i in range(n)}
    grads = {f"w{i:02d}": jax.random.normal(keys[n + i], (size,), jnp.float32) for i in range(n)}
    return params, grads


def stepper(tx):
    def step(grads, state, params):
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state
    return jax.jit(step, donate_argnums=(1, 2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    total, rounds, per_round = (1_000_000, 10, 10) if args.quick else (8_000_000, 30, 10)
    n = 16
    adam = load_generated("adam", "jax")
    variants = {"optax.adam": optax.adam(1e-3), "generated adam": adam.adam(lr=1e-3)}
    runs = {}
    for name, tx in variants.items():
        params, grads = make(total, n)
        state = tx.init(params)
        step = stepper(tx)
        params, state = step(grads, state, params)          # compile
        jax.block_until_ready(params)
        runs[name] = [step, grads, state, params]
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in runs.items():
            step, grads, state, params = run
            t0 = time.perf_counter()
            for _ in range(per_round):
                params, state = step(grads, state, params)
            jax.block_until_ready(params)
            times[name].append((time.perf_counter() - t0) / per_round)
            run[2], run[3] = state, params
    med = {name: statistics.median(ts) for name, ts in times.items()}
    ratio = med["generated adam"] / med["optax.adam"]
    print(f"jax {jax.__version__}, optax {optax.__version__}, device {jax.devices()[0].platform}; "
          f"{total:.0e} float32 parameters in {n} tensors; {rounds} rounds of {per_round} steps")
    for name, ts in times.items():
        print(f"{name:16s} median {med[name] * 1e3:8.3f} ms/step   min {min(ts) * 1e3:8.3f}   max {max(ts) * 1e3:8.3f}")
    print(f"ratio generated/optax: {ratio:.3f} (target <= 1.05)")
    if args.json:
        Path(args.json).write_text(json.dumps({"median_s": med, "ratio": ratio, "total": total}, indent=1))


if __name__ == "__main__":
    main()
