"""IVON per training iteration on small models: the generated torch IVON against ivon-opt (issue 39, item 2).

One training iteration = ``mc`` samples (``with opt.sampled_params(train=True):`` forward + backward) + ``step()``,
on sklearn's digits (mini-batches of 64, float32, CPU).  The two optimizers alternate in one process (blocks of
``--iters`` iterations, ``--reps`` times each, the order swapped every repetition) and the medians of the
per-iteration times are compared; ``step()`` alone is timed the same way (one sample is collected, untimed,
before each timed ``step()``).

Usage: python benchmarks/bench_ivon_small.py [--reps 7] [--iters 20] [--mc 1,3] [--sizes mlp,cnn,1e5,1e6]
[--clock process|wall] [--device cuda]
(``1e5``, ``1e6``, ``1e7``: an MLP 64-w-w-10 with about that many parameters.)  ``--clock process`` (default) times
with time.process_time (CPU time of this process: steadier than wall time on a shared machine; with one thread
the two agree up to the other processes' load), ``--clock wall`` with time.perf_counter.  ``--device cuda`` puts the
data and models on the GPU and times wall time with the device synchronized around each timed call.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from conftest import load_generated, load_module_from_path  # noqa: E402


def data():
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    return torch.tensor(x, dtype=torch.float32) / 16.0, torch.tensor(y)


def mlp(widths):
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def cnn():
    return torch.nn.Sequential(
        torch.nn.Unflatten(1, (1, 8, 8)), torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(32 * 16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def model(size):
    torch.manual_seed(0)
    if size == "mlp":
        return mlp([64, 128, 128, 10])
    if size == "cnn":
        return cnn()
    n = float(size)                     # w² + 76 w ≈ n
    w = int((-76 + (76 ** 2 + 4 * n) ** 0.5) / 2)
    return mlp([64, w, w, 10])


def iteration(opt, net, x, y, idx, mc):
    for _ in range(mc):
        with opt.sampled_params(train=True):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
    opt.step()


CLOCK = [time.process_time]
SYNC = [lambda: None]


def time_block(fn, iters):
    out = []
    for _ in range(iters):
        SYNC[0]()
        t0 = CLOCK[0]()
        fn()
        SYNC[0]()
        out.append(CLOCK[0]() - t0)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--mc", default="1,3")
    ap.add_argument("--sizes", default="mlp,cnn,1e5,1e6")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=("process", "wall"), default="process")
    ap.add_argument("--before", help="also time this generated torch IVON module file (e.g. an earlier version, "
                                     "from `git show REV:catalog/generated/torch/ivon.py`) in the same alternation")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("bench_ivon_small: no CUDA device here; nothing timed")
        return
    CLOCK[0] = time.process_time if args.clock == "process" and not cuda else time.perf_counter
    if cuda:
        SYNC[0] = torch.cuda.synchronize
    torch.set_num_threads(args.threads)
    import ivon as ivon_opt
    gen = load_generated("ivon", "torch")
    before = load_module_from_path(Path(args.before)) if args.before else None
    x, y = (t.to(args.device) for t in data())
    g = torch.Generator().manual_seed(0)
    batches = [torch.randperm(len(x), generator=g)[:64].to(args.device) for _ in range(64)]
    where = torch.cuda.get_device_name(args.device) if cuda else f"{args.threads} thread(s), {args.clock} time"
    print(f"torch {torch.__version__}, {where}; medians over {args.reps} x {args.iters} iterations")
    print(f"{'model':6s} {'params':>9s} {'mc':>3s} {'ivon-opt ms':>12s} {'generated ms':>13s} {'ratio':>6s} "
          f"{'step-only ratio':>16s}" + (f" {'before ms':>10s} {'before ratio':>13s} {'before step-only':>17s}"
                                         if before else ""))
    for size in args.sizes.split(","):
        for mc in [int(v) for v in args.mc.split(",")]:
            nets = {"ivon-opt": model(size).to(args.device), "generated": model(size).to(args.device)}
            if before:
                nets["before"] = model(size).to(args.device)
            n = sum(p.numel() for p in nets["generated"].parameters())
            opts = {"ivon-opt": ivon_opt.IVON(nets["ivon-opt"].parameters(), lr=0.1, ess=1797, mc_samples=mc),
                    "generated": gen.IVON(nets["generated"].parameters(), lr=0.1, ess=1797, mc_samples=mc)}
            if before:
                opts["before"] = before.IVON(nets["before"].parameters(), lr=0.1, ess=1797, mc_samples=mc)
            times = {k: [] for k in opts}
            step_times = {k: [] for k in opts}
            k_batch = [0]

            def run(name):
                idx = batches[k_batch[0] % len(batches)]
                k_batch[0] += 1
                iteration(opts[name], nets[name], x, y, idx, mc)

            for name in opts:                       # warm-up
                for _ in range(3):
                    run(name)
            for rep in range(args.reps):
                for name in (list(opts) if rep % 2 == 0 else list(opts)[::-1]):
                    times[name] += time_block(lambda name=name: run(name), args.iters)
                    step_times[name] += step_only(opts[name], nets[name], x, y, batches[0], args.iters)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            smed = {k: statistics.median(v) * 1e3 for k, v in step_times.items()}
            print(f"{size:6s} {n:9d} {mc:3d} {med['ivon-opt']:12.3f} {med['generated']:13.3f} "
                  f"{med['generated'] / med['ivon-opt']:6.2f} {smed['generated'] / smed['ivon-opt']:16.2f}"
                  + (f" {med['before']:10.3f} {med['before'] / med['ivon-opt']:13.2f} "
                     f"{smed['before'] / smed['ivon-opt']:17.2f}" if before else ""), flush=True)


def step_only(opt, net, x, y, idx, iters):
    """step() alone: one sample collected (untimed) before each timed step()."""
    out = []
    for _ in range(iters):
        with opt.sampled_params(train=True):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
        SYNC[0]()
        t0 = CLOCK[0]()
        opt.step()
        SYNC[0]()
        out.append(CLOCK[0]() - t0)
    return out


if __name__ == "__main__":
    main()
