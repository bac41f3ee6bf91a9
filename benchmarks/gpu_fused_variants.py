"""Variants of the generated fused path on one device, timed alternately in one process against torch's fused Adam
(issue 39, item 6 on a GPU): which part of a fused step costs what, and which inductor setting would remove it.

Each variant is the catalog's generated torch Adam, loaded as a module of its own (its own compiled kernel), with
one runtime setting changed by replacing a module-level function -- the generated file is not edited:

  current      as generated
  combo        inductor's ``combo_kernels`` on: the per-parameter kernels launched as one (horizontal fusion)
  cpu_numbers  the host numbers (lr, bias corrections) as a CPU tensor: no host-to-device copy per step
  combo+cpu    both

For each: median ms per step (the device synchronized around each step), its ratio to torch's fused Adam, the
number of device kernels one step launches (torch.profiler), the largest difference of the parameters from
torch's fused Adam after 5 steps, relative to their scale, and whether the variant's compiled kernel failed and the
module's multi-tensor (foreach) path ran instead (then its time is that path's, not the variant's).

    python benchmarks/gpu_fused_variants.py --device cuda [--totals 1.6e4,8e6] [--rounds 200]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

import bench_fused_ab

ROOT = Path(__file__).resolve().parent.parent
_N = [0]


def load():
    _N[0] += 1
    return bench_fused_ab.load(ROOT / "catalog/generated/torch/adam.py", f"adam_v{_N[0]}")


def variant(name):
    mod = load()
    combo = "combo" in name
    if combo:
        def compiled(mod=mod):
            if "kernel" not in mod._COMPILED:
                mod._COMPILED["kernel"] = torch.compile(mod._kernel_group, options={
                    "cpp.max_horizontal_fusion_size": mod._KERNEL_OUTPUTS, "size_asserts": False,
                    "combo_kernels": True})
            return mod._COMPILED["kernel"]
        mod._compiled_kernel = compiled
    if "cpu" in name:
        original = mod._host_args
        mod._host_args = lambda host, dtype, device, original=original: original(host, dtype, "cpu")
    return mod


def kernels_per_step(opt, device):
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device != "cpu" else [])
    with torch.profiler.profile(activities=acts) as prof:
        opt.step()
        if device != "cpu":
            torch.cuda.synchronize()
    if device == "cpu":
        return "-"
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--totals", default="1.6e4,8e6")
    ap.add_argument("--tensors", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--variants", default="current,combo")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_fused_variants: no CUDA device here; nothing timed")
        return
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for total in (int(float(t)) for t in args.totals.split(",")):
        mods = {}
        opts, diffs = {"torch fused": torch.optim.Adam(bench_fused_ab.params(total, args.tensors, args.device), fused=True)}, {}
        for name in args.variants.split(","):
            try:
                mods[name] = variant(name)
                opts[name] = mods[name].Adam(bench_fused_ab.params(total, args.tensors, args.device), fused=True)
                for _ in range(5):
                    opts[name].step()
            except Exception as exc:            # noqa: BLE001 -- a setting this torch refuses: reported
                print(f"{total:.0e} {name}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                opts.pop(name, None)
        for _ in range(5):
            opts["torch fused"].step()
        ref = [p.detach() for p in opts["torch fused"].param_groups[0]["params"]]
        scale = max(float(x.abs().max()) for x in ref)
        for name, o in opts.items():
            ps = [p.detach() for p in o.param_groups[0]["params"]]
            diffs[name] = max(float((a - b).abs().max()) for a, b in zip(ps, ref)) / scale
        launches = {name: kernels_per_step(o, args.device) for name, o in opts.items()}
        times = {k: [] for k in opts}
        for r in range(args.rounds):
            for k, o in (list(opts.items()) if r % 2 == 0 else list(opts.items())[::-1]):
                sync()
                t = time.perf_counter()
                o.step()
                sync()
                times[k].append(time.perf_counter() - t)
        base = statistics.median(times["torch fused"])
        where = torch.cuda.get_device_name(args.device) if cuda else "CPU"
        print(f"{total:.1e} fp32 parameters in {args.tensors} tensors, {args.rounds} rounds, {where}, torch {torch.__version__}")
        print(f"  {'variant':14s} {'median ms':>10s} {'ratio':>6s} {'min ms':>8s} {'kernels':>8s} {'diff (5 steps)':>15s}"
              "  path")
        for k, v in times.items():
            m = statistics.median(v)
            path = "torch" if k not in mods else ("foreach (compiled kernel failed)" if mods[k]._COMPILED.get("failed")
                                                  else "fused")
            print(f"  {k:14s} {m * 1e3:10.3f} {m / base:6.2f} {min(v) * 1e3:8.3f} {launches[k]!s:>8s} {diffs[k]:15.2e}"
                  f"  {path}", flush=True)


if __name__ == "__main__":
    main()
