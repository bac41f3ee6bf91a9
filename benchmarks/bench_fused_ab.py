"""The fused path of a generated torch optimizer against torch's fused one and against another version of the same
generated module (A/B), timed alternately in one process (the machine's noise hits all alike).

    python benchmarks/bench_fused_ab.py                                  # catalog adam vs torch fused
    git show REV:catalog/generated/torch/adam.py > /tmp/adam_old.py
    python benchmarks/bench_fused_ab.py --other /tmp/adam_old.py         # ... and an older module

8e6 fp32 parameters in 16 tensors by default (``--device cuda``: on the GPU, wall time with the device synchronized
around each step; ``--path foreach``: the default path against torch's foreach Adam); prints the median (and the minimum) ms per step and the ratio to
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


def params(total, n, device="cpu"):
    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(total // n, generator=g).to(device)) for _ in range(n)]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g).to(device)
    return ps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", help="another generated adam.py to compare (e.g. from an earlier commit)")
    ap.add_argument("--total", type=float, default=8e6)
    ap.add_argument("--tensors", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("wall", "process"), default="wall")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--path", choices=("fused", "foreach"), default="fused",
                    help="fused: both fused=True; foreach: the generated default path against torch's foreach=True")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_fused_ab: no CUDA device here; nothing timed")
        return
    torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    clock = time.perf_counter if args.clock == "wall" or cuda else time.process_time
    total = int(args.total)
    theirs, ours = ({"fused": True}, {"fused": True}) if args.path == "fused" else ({"foreach": True}, {})
    tag = "fused" if args.path == "fused" else "foreach"
    base_name = f"torch Adam {tag}"
    opts = {base_name: torch.optim.Adam(params(total, args.tensors, args.device), **theirs),
            f"generated Adam {'fused' if ours else 'default'}": load(
                ROOT / "catalog/generated/torch/adam.py", "adam_now").Adam(
                params(total, args.tensors, args.device), **ours)}
    if args.other:
        opts["other generated Adam"] = load(args.other, "adam_other").Adam(
            params(total, args.tensors, args.device), **ours)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for o in opts.values():
        for _ in range(3):
            o.step()
    times = {k: [] for k in opts}
    for r in range(args.rounds):
        for k, o in (list(opts.items()) if r % 2 == 0 else list(opts.items())[::-1]):
            sync()
            t = clock()
            o.step()
            sync()
            times[k].append(clock() - t)
    base = statistics.median(times[base_name])
    low = min(times[base_name])
    where = torch.cuda.get_device_name(args.device) if cuda else f"CPU, {args.threads} thread(s), {args.clock} time"
    print(f"torch {torch.__version__}, {total:.0e} fp32 parameters in {args.tensors} tensors, {args.rounds} rounds, "
          f"{where}")
    for k, v in times.items():
        m = statistics.median(v)
        print(f"{k:28s} median {m * 1e3:7.3f} ms  {m / base:5.2f}x   min {min(v) * 1e3:7.3f} ms  {min(v) / low:5.2f}x")


if __name__ == "__main__":
    main()
