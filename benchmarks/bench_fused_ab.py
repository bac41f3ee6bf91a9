"""The fused path of a generated torch optimizer against torch's fused one and against another version of the same
generated module (A/B), timed alternately in one process (the machine's noise hits all alike).

    python benchmarks/bench_fused_ab.py                                  # catalog adam vs torch fused
    git show REV:catalog/generated/torch/adam.py > /tmp/adam_old.py
    python benchmarks/bench_fused_ab.py --other /tmp/adam_old.py         # ... and an older module

8e6 fp32 parameters in 16 tensors by default; prints the median (and the minimum) ms per step and the ratio to
torch's fused Adam.  The order of the variants is reversed every round.  On a shared machine ``--threads 1 --clock
process`` (CPU time of the process, one thread) is the steadier measure: with two threads on two busy cores an
OpenMP loop waits for a descheduled thread at every barrier, and wall times move by several times.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def params(total, n):
    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(total // n, generator=g)) for _ in range(n)]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g)
    return ps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", help="another generated adam.py to compare (e.g. from an earlier commit)")
    ap.add_argument("--total", type=float, default=8e6)
    ap.add_argument("--tensors", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("wall", "process"), default="wall")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    total = int(args.total)
    opts = {"torch Adam fused": torch.optim.Adam(params(total, args.tensors), fused=True),
            "generated Adam fused": load(ROOT / "catalog/generated/torch/adam.py", "adam_now").Adam(
                params(total, args.tensors), fused=True)}
    if args.other:
        opts["other generated Adam fused"] = load(args.other, "adam_other").Adam(params(total, args.tensors), fused=True)
    for o in opts.values():
        for _ in range(3):
            o.step()
    times = {k: [] for k in opts}
    for r in range(args.rounds):
        for k, o in (list(opts.items()) if r % 2 == 0 else list(opts.items())[::-1]):
            t = clock()
            o.step()
            times[k].append(clock() - t)
    base = statistics.median(times["torch Adam fused"])
    low = min(times["torch Adam fused"])
    print(f"torch {torch.__version__}, {total:.0e} fp32 parameters in {args.tensors} tensors, {args.rounds} rounds, "
          f"{args.threads} thread(s), {args.clock} time")
    for k, v in times.items():
        m = statistics.median(v)
        print(f"{k:28s} median {m * 1e3:7.3f} ms  {m / base:5.2f}x   min {min(v) * 1e3:7.3f} ms  {min(v) / low:5.2f}x")


if __name__ == "__main__":
    main()
