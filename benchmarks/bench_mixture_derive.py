"""Mixture candidates at many components (issue 17): derivation and rendering time of ``multimodal`` (the
components as an array axis) at K = 2, 7, 64 and 256, against the unrolled ``multimodal_unrolled`` at K = 2..9.

The component-axis recipe is derived once, for a generic component k and a generic other component j: K is not an
input of the derivation, only the length of the state arrays at run time.  For each K the whole path from the
recipe file is timed in this process (load, derive, build the IR, render the numpy and the jax module; the family
and rule registries warm, as in ``blr-derive catalog``), median of ``--rounds``; then the generated numpy step is
run once at that K (P = 3) to show it takes K components.  The unrolled recipe is derived at K components (its
derivation and code grow with K², and K <= 9).  No time is asserted here or in the tests.

    python benchmarks/bench_mixture_derive.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import types
from pathlib import Path

import numpy as np

from blr_derive.api import derive_record
from blr_derive.codegen.registry import emit
from blr_derive.ir.build import build_ir

CATALOG = Path(__file__).resolve().parent.parent / "catalog"


def derive_and_render(path):
    _, D = derive_record(path)
    ir = build_ir(D, path.name)
    return emit(ir, "numpy"), emit(ir, "jax")


def timed(fn, rounds):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def one_step(source, K, P=3):
    mod = types.ModuleType("bench_multimodal")
    exec(compile(source, "bench_multimodal", "exec"), mod.__dict__)
    rng = np.random.default_rng(K)
    A = rng.normal(size=(K, P, P))
    S = np.einsum("kab,kcb->kac", A, A) / P + np.eye(P)
    oracles = {"grad": lambda x: x - np.sin(x), "hess": lambda x: np.eye(P) - np.diag(np.cos(x))}
    t0 = time.perf_counter()
    out = mod.step(mod.init(m=rng.normal(size=(K, P)) * 3, S=S), oracles=oracles)
    return time.perf_counter() - t0, out["m"].shape


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    derive_and_render(CATALOG / "multimodal.yaml")          # warm the registries (imports, rule loading)
    print("| recipe | K | derive + render numpy + jax (median) | one numpy step (P = 3) |")
    print("|---|---|---|---|")
    for K in (2, 7, 64, 256):
        t, (numpy_src, _) = timed(lambda: derive_and_render(CATALOG / "multimodal.yaml"), args.rounds)
        t_step, shape = one_step(numpy_src, K)
        print(f"| multimodal | {K} | {t:.2f} s | {t_step * 1e3:.1f} ms, m {shape} |", flush=True)
    text = (CATALOG / "multimodal_unrolled.yaml").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        for K in (2, 5, 7, 9):
            p = Path(tmp) / f"multimodal_unrolled{K}.yaml"
            p.write_text(text.replace("components: 2", f"components: {K}"))
            t, _ = timed(lambda: derive_and_render(p), 1)
            print(f"| multimodal_unrolled | {K} | {t:.2f} s | |", flush=True)


if __name__ == "__main__":
    main()
