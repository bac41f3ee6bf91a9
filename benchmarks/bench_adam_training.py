"""Adam inside a real training loop on small models: the generated torch Adam against torch.optim.Adam (issue 39,
item 6), fused and default paths.

One iteration = ``zero_grad()`` + forward + backward + ``step()`` on sklearn's digits (mini-batches of 64, float32,
CPU, one thread).  Unlike bench_fused_ab.py, whose steps reuse the same gradient tensors back to back, every step
here gets fresh gradients (``zero_grad`` sets them to None) after a forward and backward pass has run through the
caches, as in training.  The optimizers alternate in one process (blocks of ``--iters`` iterations, ``--reps``
times each, the order reversed every repetition); the medians of ``step()`` alone and of the whole iteration are
compared with torch's (``--path fused``: both ``fused=True``; ``--path foreach``: the generated default path
against ``torch.optim.Adam(foreach=True)``).

Usage: python benchmarks/bench_adam_training.py [--path fused|foreach] [--models mlp,cnn] [--reps 40] [--iters 25]
[--other OLD_ADAM.py ...]   (``--other``, repeatable: another generated adam.py, e.g. ``git show REV:catalog/generated/torch/adam.py``)
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from bench_ivon_small import ROOT, data, load_module_from_path, model


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", choices=("fused", "foreach"), default="fused")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--iters", type=int, default=25)
    ap.add_argument("--other", action="append", default=[], help="another generated adam.py to time next to the catalog's (repeatable)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    x, y = data()
    mods = {"generated": load_module_from_path(ROOT / "catalog/generated/torch/adam.py", "adam_now")}
    for i, other in enumerate(args.other):
        mods[f"other {i + 1}"] = load_module_from_path(other, f"adam_other{i}")
    theirs, ours = ({"fused": True}, {"fused": True}) if args.path == "fused" else ({"foreach": True}, {})
    print(f"torch {torch.__version__}, CPU, 1 thread, process time, path {args.path}, {args.reps} x {args.iters} "
          "iterations each")
    for size in args.models.split(","):
        base = model(size)
        nets = {"torch": copy.deepcopy(base), **{k: copy.deepcopy(base) for k in mods}}
        opts = {"torch": torch.optim.Adam(nets["torch"].parameters(), lr=1e-3, **theirs),
                **{k: m.Adam(nets[k].parameters(), lr=1e-3, **ours) for k, m in mods.items()}}
        g = torch.Generator().manual_seed(0)
        batches = [torch.randint(0, len(x), (64,), generator=g) for _ in range(args.iters)]

        def iteration(name, idx):
            opt, net = opts[name], nets[name]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            t0 = time.process_time()
            opt.step()
            return time.process_time() - t0

        for name in opts:                   # compile and warm up
            for idx in batches[:10]:
                iteration(name, idx)
        steps = {k: [] for k in opts}
        whole = {k: [] for k in opts}
        for r in range(args.reps):
            for name in (list(opts) if r % 2 == 0 else list(opts)[::-1]):
                t0, s = time.process_time(), 0.0
                for idx in batches:
                    s += iteration(name, idx)
                whole[name].append((time.process_time() - t0) / args.iters)
                steps[name].append(s / args.iters)
        n = sum(p.numel() for p in base.parameters())
        ms, mw = statistics.median(steps["torch"]), statistics.median(whole["torch"])
        print(f"{size} ({n} parameters in {len(list(base.parameters()))} tensors): torch step {ms * 1e6:.1f} us, "
              f"iteration {mw * 1e6:.1f} us")
        for k in mods:
            s, w = statistics.median(steps[k]), statistics.median(whole[k])
            print(f"  {k:16s} step {s * 1e6:7.1f} us {s / ms:5.2f}x   iteration {w * 1e6:7.1f} us {w / mw:5.2f}x")


if __name__ == "__main__":
    main()
