"""The generated Triton Adam's block size and warps per program on one GPU (issue 7's bandwidth target, issue 39 item
7): for each (BLOCK, num_warps), the median time of one step of 1e8 fp32 parameters in 64 tensors, the achieved
bandwidth at 28 B per parameter against a device-to-device copy measured in the same run, and the largest difference
of the parameters from the generated module as shipped (BLOCK 1024, Triton's default warps) after 3 steps, relative
to their scale (the kernel is elementwise: any block size must give the same bits).  The module is the catalog's,
loaded once per setting, with its ``BLOCK`` global and the launch's ``num_warps`` changed (the file is not edited).

    python benchmarks/gpu_triton_block.py [--numel 1e8] [--blocks 1024,2048,4096] [--warps 4,8] [--iters 30]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from bench_fused_ab import load as load_module
from bench_triton import make_params, timer

ROOT = Path(__file__).resolve().parent.parent
_N = [0]


def load(block, warps):
    _N[0] += 1
    mod = load_module(ROOT / "catalog/generated/triton/adam.py", f"adam_tr{_N[0]}")
    mod.BLOCK = block
    if warps:
        kernel = mod._update_kernel

        class _Launch:
            def __getitem__(self, grid):
                return lambda *a, **k: kernel[grid](*a, num_warps=warps, **k)
        mod._update_kernel = _Launch()
    return mod


DEVICE = ["cuda"]


def params(total, n, seed=0):
    return make_params(total, n, DEVICE[0], seed)


def timed(fn, iters):
    """The median seconds of ``iters`` calls: bench_triton's timer (CUDA events on a GPU, a host clock on the CPU,
    where the interpreter makes the numbers a smoke test only)."""
    return statistics.median(timer(torch.device(DEVICE[0]))(fn, iters))


def copy_time(total, iters):
    x = torch.randn(total, device=DEVICE[0])
    y = torch.empty_like(x)
    timed(lambda: y.copy_(x), 5)
    return timed(lambda: y.copy_(x), iters)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=float, default=1e8)
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--blocks", default="1024,2048,4096")
    ap.add_argument("--warps", default="0,4,8", help="0: Triton's default")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--interpret", action="store_true", help="CPU tensors, TRITON_INTERPRET=1 set before the import")
    args = ap.parse_args(argv)
    if args.interpret:
        DEVICE[0] = "cpu"
    elif not torch.cuda.is_available():
        print("gpu_triton_block: no CUDA device here; nothing timed")
        return 0
    total = int(args.numel) // args.tensors * args.tensors
    copy_gbs = 8 * total / copy_time(total, args.iters) / 1e9
    ref = None
    rows = []
    for block in (int(b) for b in args.blocks.split(",")):
        for warps in (int(w) for w in args.warps.split(",")):
            mod = load(block, warps)
            ps = params(total, args.tensors)
            opt = mod.Adam(ps, lr=1e-3)
            for _ in range(3):
                opt.step()
            if DEVICE[0] == "cuda":
                torch.cuda.synchronize()
            flat = torch.cat([p.detach().flatten() for p in ps])
            if ref is None:
                ref = flat.clone()
            diff = float((flat - ref).abs().max() / ref.abs().max())
            s = timed(opt.step, args.iters)
            gbs = 28 * total / s / 1e9
            rows.append((block, warps or "default", 1e3 * s, gbs, gbs / copy_gbs, diff))
            print(f"  BLOCK {block:5d} warps {warps or 'default'!s:>7s} {1e3 * s:8.3f} ms {gbs:7.0f} GB/s "
                  f"{100 * gbs / copy_gbs:5.1f} % of copy  diff {diff:.1e}", flush=True)
            del opt, ps, mod
            if DEVICE[0] == "cuda":
                torch.cuda.empty_cache()
    ps = params(total, args.tensors)
    opt = torch.optim.Adam(ps, lr=1e-3, fused=DEVICE[0] == "cuda")
    for _ in range(3):
        opt.step()
    s = timed(opt.step, args.iters)
    name = torch.cuda.get_device_name() if DEVICE[0] == "cuda" else "CPU (Triton interpreter)"
    print(f"device {name}, torch {torch.__version__}; {total:.2e} parameters in {args.tensors} "
          f"tensors; copy {copy_gbs:.0f} GB/s; torch.optim.Adam(fused=True) {1e3 * s:.3f} ms "
          f"({28 * total / s / 1e9:.0f} GB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
