"""IVON's training iteration by phase (issue 39, item 2): the draw (entering ``sampled_params``), forward + backward,
the exit (restoring the means, collecting the statistics) and ``step()``, in CPU time of the process (one thread),
ivon-opt, the generated torch IVON and optionally an earlier generated module alternating in blocks of 40
iterations (12 blocks each, the order reversed every block, the first block a warm-up); medians over the blocks.

Usage: python benchmarks/bench_ivon_phases.py [--size mlp] [--mc 1] [--before FILE]
(sizes as bench_ivon_small.py's: mlp, cnn, 1e4, 1e5, ...)
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
import bench_ivon_small as b  # noqa: E402
from conftest import load_generated, load_module_from_path  # noqa: E402
import ivon  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--size", default="mlp")
ap.add_argument("--mc", type=int, default=1)
ap.add_argument("--before", help="also time this generated torch IVON module file")
args = ap.parse_args()
size, mc = args.size, args.mc
torch.set_num_threads(1)
x, y = b.data()
mods = {"ivon-opt": ivon, "generated": load_generated("ivon", "torch")}
if args.before:
    mods["before"] = load_module_from_path(Path(args.before))
runs = {}
for k, m in mods.items():
    net = b.model(size)
    runs[k] = (net, m.IVON(net.parameters(), lr=0.1, ess=1797, mc_samples=mc))
lf = torch.nn.CrossEntropyLoss()
res = {k: {"enter": [], "fwd+bwd": [], "exit": [], "step": [], "iteration": []} for k in mods}
g = torch.Generator().manual_seed(0)
for r in range(12):
    order = list(mods) if r % 2 == 0 else list(mods)[::-1]
    for k in order:
        net, opt = runs[k]
        t = {"enter": 0.0, "fwd+bwd": 0.0, "exit": 0.0, "step": 0.0}
        n = 40
        for i in range(n):
            idx = torch.randint(0, len(x), (64,), generator=g)
            xb, yb = x[idx], y[idx]
            for _ in range(mc):
                c = opt.sampled_params(train=True)
                t0 = time.process_time(); c.__enter__(); t1 = time.process_time()
                loss = lf(net(xb), yb); opt.zero_grad(); loss.backward(); t2 = time.process_time()
                c.__exit__(None, None, None); t3 = time.process_time()
                t["enter"] += t1 - t0; t["fwd+bwd"] += t2 - t1; t["exit"] += t3 - t2
            t0 = time.process_time(); opt.step(); t["step"] += time.process_time() - t0
        if r == 0:
            continue            # warm-up round
        for key, v in t.items():
            res[k][key].append(v / n * 1e6)
        res[k]["iteration"].append(sum(t.values()) / n * 1e6)
print(f"{size} mc {mc}: per-iteration CPU time, us (median over 11 blocks of 40 iterations; min-max)")
for key in ("enter", "fwd+bwd", "exit", "step", "iteration"):
    print(f"{key:10s}", "  ".join(f"{k}: {statistics.median(res[k][key]):7.1f} ({min(res[k][key]):.0f}-{max(res[k][key]):.0f})" for k in mods))
