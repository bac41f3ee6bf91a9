"""Step time of generated torch optimizers against torch.optim on CPU (issue 3 performance target).

8e6 fp32 parameters in 16 tensors.  Variants are timed alternately (round robin) in one process so
machine noise hits them alike; peak memory is measured per variant in a fresh subprocess.

    python benchmarks/bench_torch.py            # full run
    python benchmarks/bench_torch.py --quick    # 1e6 parameters, fewer rounds
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from conftest import load_generated  # noqa: E402


def make_params(total, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    ps = [torch.nn.Parameter(torch.randn(total // n, generator=g)) for _ in range(n)]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g)
    return ps


def variants(total, n, only=None):
    """name -> a function doing one optimizer step; with ``only`` just that variant is built."""
    adam = load_generated("adam", "torch")
    ivon = load_generated("ivon", "torch")
    import ivon as ivon_opt

    def ivon_step(opt, ps):
        def run():
            with opt.sampled_params(train=True):
                for p in ps:
                    p.grad = torch.ones_like(p)
            opt.step()
        return run

    out = {}
    for name, make in [
        ("torch Adam for-loop", lambda ps: torch.optim.Adam(ps, foreach=False)),
        ("torch Adam foreach", lambda ps: torch.optim.Adam(ps, foreach=True)),
        ("torch Adam fused", lambda ps: torch.optim.Adam(ps, fused=True)),
        ("generated Adam foreach", lambda ps: adam.Adam(ps)),
        ("generated Adam fused", lambda ps: adam.Adam(ps, fused=True)),
    ]:
        if only in (None, name):
            ps = make_params(total, n)
            out[name] = make(ps).step
    rms = load_generated("rmsprop", "torch")
    sgd = load_generated("sgd", "torch")
    for name, make in [
        ("torch RMSprop foreach", lambda ps: torch.optim.RMSprop(ps, foreach=True)),
        ("generated RMSprop foreach", lambda ps: rms.RMSprop(ps)),
        ("generated RMSprop fused", lambda ps: rms.RMSprop(ps, fused=True)),
        ("torch SGD momentum foreach", lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, foreach=True)),
        ("generated SGD momentum foreach", lambda ps: sgd.SGD(ps, lr=0.01, momentum=0.9)),
        ("generated SGD momentum fused", lambda ps: sgd.SGD(ps, lr=0.01, momentum=0.9, fused=True)),
    ]:
        if only in (None, name):
            ps = make_params(total, n)
            out[name] = make(ps).step

    def ivon_update_only(opt, ps):
        """The update alone: one Monte Carlo sample is collected once and reused every call."""
        ivon_step(opt, ps)()
        with opt.sampled_params(train=True):
            for p in ps:
                p.grad = torch.ones_like(p)
        saved = dict(opt._samples)

        def run():
            opt._samples = dict(saved)
            opt.step()
        return run

    if only in (None, "generated IVON fused (update only)"):
        ps = make_params(total, n)
        out["generated IVON fused (update only)"] = ivon_update_only(ivon.IVON(ps, lr=0.1, ess=1e4, fused=True), ps)
    for name, make in [("ivon-opt IVON", lambda ps: ivon_opt.IVON(ps, lr=0.1, ess=1e4)),
                       ("generated IVON foreach", lambda ps: ivon.IVON(ps, lr=0.1, ess=1e4)),
                       ("generated IVON fused", lambda ps: ivon.IVON(ps, lr=0.1, ess=1e4, fused=True))]:
        if only in (None, name):
            ps = make_params(total, n)
            out[name] = ivon_step(make(ps), ps)
    return out


def bandwidth(total):
    """Achieved memory bandwidth of a triad z = x + 2y (12 bytes per element), GB/s."""
    x, y, z = torch.randn(total), torch.randn(total), torch.empty(total)
    for _ in range(3):
        torch.add(x, y, alpha=2.0, out=z)
    ts = []
    for _ in range(10):
        t = time.perf_counter()
        torch.add(x, y, alpha=2.0, out=z)
        ts.append(time.perf_counter() - t)
    return 12 * total / min(ts) / 1e9


def peak_memory(name, total, n):
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import bench_torch as b, resource;"
            f"v = b.variants({total}, {n}, only={name!r}); f = v[{name!r}]; [f() for _ in range(3)];"
            # VmHWM is the peak of this address space (ru_maxrss would carry the parent's peak over exec)
            "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(r.stdout.strip().splitlines()[-1]) / 1024


def numpy_adam(total, rounds):
    mod = load_generated("adam", "numpy")
    rng = np.random.default_rng(0)
    m, g = rng.normal(size=total), rng.normal(size=total)
    state = mod.init(m=m)
    grad = lambda x: g
    ref = {"m": m.copy(), "u": np.zeros(total), "v": np.zeros(total), "t": 0}

    def hand(st, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        t = st["t"] + 1
        u = b1 * st["u"] + (1 - b1) * g
        v = b2 * st["v"] + (1 - b2) * g * g
        m = st["m"] - lr * (u / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        return {"m": m, "u": u, "v": v, "t": t}
    tg, th = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        state = mod.step(state, oracles={"grad": grad})
        tg.append(time.perf_counter() - t)
        t = time.perf_counter()
        ref = hand(ref)
        th.append(time.perf_counter() - t)
    return statistics.median(tg) * 1e3, statistics.median(th) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    total, n, rounds = (1_000_000, 16, 5) if args.quick else (8_000_000, 16, 15)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {total:.0e} fp32 parameters in {n} tensors")
    bw = bandwidth(total)
    print(f"triad bandwidth: {bw:.1f} GB/s")
    vs = variants(total, n)
    first = {}
    for name, f in vs.items():                      # warm-up; the first fused call compiles
        t = time.perf_counter()
        f()
        first[name] = time.perf_counter() - t
        f()
    times = {k: [] for k in vs}
    for _ in range(rounds):                          # alternate the variants
        for name, f in vs.items():
            t = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    fused = med["torch Adam fused"]
    floor_adam = 28 * total / (bw * 1e9) * 1e3
    floor_ivon = 32 * total / (bw * 1e9) * 1e3
    results = {"total": total, "bandwidth_GBs": bw, "median_ms": med, "first_call_s": first,
               "floor_adam_ms": floor_adam, "floor_ivon_update_ms": floor_ivon}
    print(f"{'variant':28s} {'ms/step':>9s} {'vs fused':>9s} {'vs foreach':>10s} {'vs loop':>8s} {'first call':>11s}")
    for name, t in med.items():
        print(f"{name:28s} {t:9.2f} {t / fused:9.2f} {t / med['torch Adam foreach']:10.2f} "
              f"{t / med['torch Adam for-loop']:8.2f} {first[name]:10.2f}s")
    print(f"Adam bandwidth floor (28 B/param): {floor_adam:.2f} ms; generated Adam fused / floor = "
          f"{med['generated Adam fused'] / floor_adam:.2f}")
    print(f"IVON update-only fused / IVON update floor (32 B/param) = "
          f"{med['generated IVON fused (update only)'] / floor_ivon:.2f}")
    print(f"IVON update floor (32 B/param, sampling excluded): {floor_ivon:.2f} ms; generated IVON fused step "
          f"(sampling included) / floor = {med['generated IVON fused'] / floor_ivon:.2f}; "
          f"generated IVON fused / ivon-opt = {med['generated IVON fused'] / med['ivon-opt IVON']:.2f}")
    if not args.quick:
        mem = {name: peak_memory(name, total, n) for name in vs}
        results["peak_rss_MB"] = mem
        for name, v in mem.items():
            print(f"peak RSS {name:28s} {v:8.0f} MB")
    tg, th = numpy_adam(total, rounds)
    results["numpy_adam_ms"] = {"generated": tg, "hand_written": th}
    print(f"numpy Adam: generated {tg:.1f} ms, hand-written {th:.1f} ms, ratio {tg / th:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
