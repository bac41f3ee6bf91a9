"""Achieved memory bandwidth of the generated Triton Adam and IVON kernels (issue 7 performance target).

1e8 fp32 parameters in 64 tensors on one CUDA GPU.  For each variant: the median time of one optimizer
step (CUDA events, after warm-up), the bytes it must move per parameter, the achieved bandwidth
(bytes x parameters / time) and its ratio to the HBM peak, both the vendor figure of the GPU (table
below) and the bandwidth of a device-to-device copy measured in the same run.  Target: the generated
Adam at >= 85 % of the peak and faster than ``torch.optim.Adam(fused=True)``.

Bytes per parameter (fp32):
  Adam update     read p, g, u, s; write p, u, s                                        28 B
  IVON update     read m, h, momentum, g_avg, nxg_avg; write m, h, momentum               32 B
  IVON full step  draw (read m, h; write saved m, θ) 16 B + collect (read saved m, h, g;
                  write m, g_avg, nxg_avg) 24 B + update 32 B                            72 B

Without a CUDA GPU the script says so and exits 0.

    python benchmarks/bench_triton.py                   # 1e8 parameters
    python benchmarks/bench_triton.py --numel 1e7       # smaller
    TRITON_INTERPRET=1 python benchmarks/bench_triton.py --interpret   # exercise the script on CPU (timings meaningless)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

# vendor HBM bandwidth in GB/s by device-name substring (first match wins)
PEAK_GBS = [("H200", 4800.0), ("H100 PCIe", 2000.0), ("H100 NVL", 3900.0), ("H100", 3350.0), ("GH200", 4000.0),
            ("A100-SXM4-80GB", 2039.0), ("A100 80GB PCIe", 1935.0), ("A100", 1555.0), ("L40S", 864.0),
            ("L4", 300.0), ("A10G", 600.0), ("V100", 900.0), ("B200", 8000.0), ("MI300X", 5300.0)]

BYTES = {"Adam": 28, "IVON update": 32, "IVON step": 72}


def vendor_peak(name):
    for key, gbs in PEAK_GBS:
        if key in name:
            return gbs
    return None


def timer(device):
    import torch
    if device.type == "cuda":
        def run(fn, iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            out = []
            for _ in range(iters):
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                out.append(start.elapsed_time(end) / 1e3)
            return out
    else:
        def run(fn, iters):
            out = []
            for _ in range(iters):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
            return out
    return run


def make_params(total, n, device, seed=0):
    import torch
    g = torch.Generator(device=device).manual_seed(seed)
    ps = [torch.nn.Parameter(torch.randn(total // n, generator=g, device=device)) for _ in range(n)]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g, device=device)
    return ps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=float, default=1e8, help="parameters in total (default 1e8)")
    ap.add_argument("--tensors", type=int, default=64, help="parameter tensors (default 64)")
    ap.add_argument("--iters", type=int, default=30, help="timed steps per variant (default 30)")
    ap.add_argument("--interpret", action="store_true", help="run on CPU through TRITON_INTERPRET=1 (a smoke test)")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)

    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    if not args.interpret and not torch.cuda.is_available():
        print("bench_triton: no CUDA GPU on this machine; the bandwidth figures need one (GPU figures pending). "
              "Correctness of the generated kernels is tested on CPU by tests/unit/codegen/test_triton.py "
              "(TRITON_INTERPRET=1).")
        return 0
    from conftest import load_generated
    device = torch.device("cpu" if args.interpret else "cuda")
    total = int(args.numel) // args.tensors * args.tensors
    iters, warm = (2, 1) if args.interpret else (args.iters, 5)
    run = timer(device)
    name = "CPU (Triton interpreter)" if args.interpret else torch.cuda.get_device_name()
    peak = None if args.interpret else vendor_peak(name)

    # the copy bandwidth: read + write 4 bytes per element
    x = torch.empty(total, device=device)
    y = torch.empty_like(x)
    run(lambda: y.copy_(x), warm)
    copy_s = statistics.median(run(lambda: y.copy_(x), iters))
    copy_gbs = 8 * total / copy_s / 1e9
    del x, y

    adam_t = load_generated("adam", "triton")
    ivon_t = load_generated("ivon", "triton")
    ivon_torch = load_generated("ivon", "torch")

    def adam_variant(make):
        ps = make_params(total, args.tensors, device)
        opt = make(ps)
        return lambda: opt.step()

    def ivon_variants(cls, **kw):
        ps = make_params(total, args.tensors, device)
        opt = cls(ps, lr=0.1, ess=1e6, **kw)
        grads = [p.grad for p in ps]

        def sample():
            with opt.sampled_params(train=True):
                for p, g in zip(ps, grads):
                    p.grad = g

        def step():
            sample()
            opt.step()
        return opt, sample, step

    results = []

    def measure(label, fn, nbytes, prep=None):
        for _ in range(warm):
            if prep is not None:
                prep()
            run(fn, 1)
        if prep is None:
            times = run(fn, iters)
        else:
            times = []
            for _ in range(iters):
                prep()
                times += run(fn, 1)
        s = statistics.median(times)
        gbs = nbytes * total / s / 1e9
        results.append({"variant": label, "ms": 1e3 * s, "bytes_per_param": nbytes, "GB/s": gbs,
                        "of_copy": gbs / copy_gbs, "of_peak": gbs / peak if peak else None})

    measure("generated Triton Adam", adam_variant(lambda ps: adam_t.Adam(ps, lr=1e-3)), BYTES["Adam"])
    if device.type == "cuda":
        measure("torch.optim.Adam(fused=True)", adam_variant(lambda ps: torch.optim.Adam(ps, lr=1e-3, fused=True)),
                BYTES["Adam"])
    opt, sample, step = ivon_variants(ivon_t.IVON)
    measure("generated Triton IVON update", lambda: opt.step(), BYTES["IVON update"], prep=sample)
    measure("generated Triton IVON step (draw+collect+update)", step, BYTES["IVON step"])
    del opt, sample, step
    opt, sample, step = ivon_variants(ivon_torch.IVON)
    measure("generated torch IVON step (foreach)", step, BYTES["IVON step"])
    del opt, sample, step

    print(f"device: {name}; {total:.3g} fp32 parameters in {args.tensors} tensors; torch {torch.__version__}")
    print(f"copy bandwidth (device-to-device, measured): {copy_gbs:.0f} GB/s"
          + (f"; vendor HBM peak: {peak:.0f} GB/s" if peak else "; vendor peak: unknown for this device"))
    print(f"{'variant':52s} {'ms/step':>9s} {'B/param':>8s} {'GB/s':>8s} {'of copy':>8s} {'of peak':>8s}")
    for r in results:
        of_peak = f"{100 * r['of_peak']:.0f} %" if r["of_peak"] else "-"
        print(f"{r['variant']:52s} {r['ms']:9.3f} {r['bytes_per_param']:8d} {r['GB/s']:8.0f} "
              f"{100 * r['of_copy']:7.0f} % {of_peak:>8s}")
    by = {r["variant"]: r for r in results}
    if "torch.optim.Adam(fused=True)" in by:
        ratio = by["torch.optim.Adam(fused=True)"]["ms"] / by["generated Triton Adam"]["ms"]
        print(f"generated Triton Adam vs torch.optim.Adam(fused=True): {ratio:.2f}x "
              f"({'faster' if ratio > 1 else 'slower'})")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": name, "numel": total, "tensors": args.tensors,
                                               "copy_GB/s": copy_gbs, "peak_GB/s": peak, "results": results},
                                              indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
