"""Sized families over a run-time axis (issue 17): derivation and rendering time of ``dirichlet_categorical`` (the
Dirichlet over K classes, K the length of the arrays) at K = 2, 7, 64 and 256, against the unrolled
``dirichlet_categorical_unrolled`` (one state variable per class, K <= 16) at K = 2, 7 and 16.

The axis recipe is derived once, for a generic coordinate k (blr_derive/candidates/sized_axis.py): K is not an input
of the derivation.  For each K the whole path from the recipe file is timed in this process (load, derive, build the
IR, render the numpy and the jax module; the registries warm, as in ``blr-derive catalog``; the unrolled family is
derived at each K, its disk cache emptied first), median of ``--rounds``; then the generated numpy step is run once
at that K to show it takes K classes.  No time is asserted here or in the tests.

    python benchmarks/bench_sized_derive.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import types
from pathlib import Path

import numpy as np

CATALOG = Path(__file__).resolve().parent.parent / "catalog"


def derive_and_render(path, sizes=None):
    from blr_derive.api import derive_record
    from blr_derive.codegen.registry import emit
    from blr_derive.ir.build import build_ir
    _, D = derive_record(path, sizes)
    ir = build_ir(D, path.name)
    return emit(ir, "numpy"), emit(ir, "jax")


def timed(fn, rounds):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def one_step(source, K):
    mod = types.ModuleType("bench_dirichlet_categorical")
    exec(compile(source, "bench_dirichlet_categorical", "exec"), mod.__dict__)
    c = np.bincount(np.random.default_rng(K).integers(0, K, size=100 * K), minlength=K).astype(float)
    t0 = time.perf_counter()
    out = mod.step(mod.init(a=np.ones(K)), data={"c": c}, a0=0.5)
    return time.perf_counter() - t0, out["a"].shape


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["BLR_DERIVE_CACHE_DIR"] = cache          # the unrolled family is derived, not read from disk
        axis = CATALOG / "dirichlet_categorical.yaml"
        derive_and_render(axis)                             # warm the registries (imports, rule loading)
        print("| recipe | K | derive + render numpy + jax (median) | one numpy step |")
        print("|---|---|---|---|")
        for K in (2, 7, 64, 256):
            t, (numpy_src, _) = timed(lambda: derive_and_render(axis), args.rounds)
            t_step, shape = one_step(numpy_src, K)
            print(f"| dirichlet_categorical | {K} | {t:.3f} s | {t_step * 1e6:.0f} µs, a {shape} |", flush=True)
        for K in (2, 7, 16):
            t, _ = timed(lambda: derive_and_render(CATALOG / "dirichlet_categorical_unrolled.yaml", {"K": K}), 1)
            print(f"| dirichlet_categorical_unrolled | {K} | {t:.2f} s | |", flush=True)


if __name__ == "__main__":
    main()
