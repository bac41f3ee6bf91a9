"""A whole training step (forward, backward, ``opt.step()``) under ``torch.compile(fullgraph=True)``: the generated
torch optimizer against torch.optim's own, compiled the same way (issue 39, item 4).

The model is sklearn digits' MLP (64-128-128-10, float32, batches of 64); ``zero_grad`` stays outside the
compiled function (torch needs that for its own optimizers) and ``backward`` inside needs dynamo's
``trace_autograd_ops``.  After a warm-up (compilation, the first steps' recompilations), the two compiled steps
are timed alternately in one process, ``--reps`` rounds of ``--steps`` steps each (the order reversed every round),
with the CPU time of the process (``--clock process``, the default: steadier than wall time on a shared machine; one
thread) or wall time (``--clock wall``); the median ms per step of each and their ratio are printed.  A torch.optim optimizer that does not compile with fullgraph=True is named.

Usage: python benchmarks/bench_torch_compile_step.py [--only sgd_momentum,rmsprop_momentum] [--steps 50] [--reps 7]
[--clock process|wall] [--device cuda]
(``--device cuda``: model and data on the GPU, wall time with the device synchronized around each block.)
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import itertools
import time
import types
from pathlib import Path

import torch
import torch._dynamo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "peers" / "torch_optim"))
from contract_helpers import generated_class  # noqa: E402  (a module dynamo can import back: sys.modules)

CASES = {   # name -> (recipe, torch.optim class, kwargs)
    "sgd_momentum": ("sgd", torch.optim.SGD, dict(lr=0.05, momentum=0.9)),
    "sgd_nesterov_wd": ("sgd", torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    "sgd_dampening": ("sgd", torch.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.3)),
    "rmsprop_momentum": ("rmsprop", torch.optim.RMSprop, dict(lr=1e-3, momentum=0.9)),
    "rmsprop_centered_mom_wd": ("rmsprop", torch.optim.RMSprop, dict(lr=1e-3, momentum=0.9, centered=True,
                                                                     weight_decay=1e-3)),
    "adam": ("adam", torch.optim.Adam, dict(lr=1e-3)),
}


def data():
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    return torch.tensor(x, dtype=torch.float32) / 16.0, torch.tensor(y)


_COUNT = itertools.count()


def make_step(opt, net, x, y, fullgraph=True):
    def train_step(xb, yb):
        loss = torch.nn.functional.cross_entropy(net(xb), yb)
        loss.backward()
        opt.step()
        return loss.detach()
    # a code object of its own per optimizer: dynamo keeps its compiled entries (and its recompilation count and
    # automatic-dynamic decisions) per code object, so two optimizers compiled from one ``train_step`` in one
    # process would share them -- the second one's compilation then recompiles the first's step with dynamic
    # shapes or falls back (measured: the generated Adam 1.07 ms/step sharing, 0.44-0.66 ms in a process of its own)
    train_step = types.FunctionType(train_step.__code__.replace(co_name=f"train_step_{next(_COUNT)}"),
                                    train_step.__globals__, None, None, train_step.__closure__)
    compiled = torch.compile(train_step, fullgraph=fullgraph)

    def run(k):
        opt.zero_grad()
        i = (k * 64) % (len(x) - 64)
        return compiled(x[i:i + 64], y[i:i + 64])
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--clock", choices=("process", "wall"), default="process")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("bench_torch_compile_step: no CUDA device here; nothing timed")
        return
    clock = time.process_time if args.clock == "process" and not cuda else time.perf_counter
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.set_num_threads(1)
    x, y = (t.to(args.device) for t in data())
    names = [n for n in CASES if not args.only or n in args.only.split(",")]
    print(f"{'case':26s} {'generated ms':>12s} {'torch ms':>9s} {'ratio':>6s}")
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        for name in names:
            recipe, peer, kw = CASES[name]
            torch._dynamo.reset()
            torch.manual_seed(0)
            net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                                      torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(args.device)
            twin = copy.deepcopy(net)
            runs, notes = {}, []
            for label, cls, model in (("generated", generated_class(recipe), net), ("torch", peer, twin)):
                for fullgraph in (True, False):
                    m = copy.deepcopy(model)
                    run = make_step(cls(m.parameters(), **kw), m, x, y, fullgraph)
                    try:
                        for k in range(5):          # compile, and the recompilation at the second step
                            run(k)
                    except Exception as exc:        # noqa: BLE001 -- reported, not hidden
                        notes.append(f"{label} does not compile with fullgraph=True: {type(exc).__name__}: "
                                     f"{str(exc).splitlines()[0][:120]}")
                        continue
                    runs[label] = run
                    break
            for n in notes:
                print(f"{name:26s} ({n}; timed with graph breaks)")
            if len(runs) < 2:
                continue
            times = {k: [] for k in runs}
            for rep in range(args.reps):
                for label in (list(runs) if rep % 2 == 0 else list(runs)[::-1]):
                    run = runs[label]
                    sync()
                    t0 = clock()
                    for k in range(args.steps):
                        run(k)
                    sync()
                    times[label].append((clock() - t0) / args.steps * 1e3)
            g, t = statistics.median(times["generated"]), statistics.median(times["torch"])
            print(f"{name:26s} {g:12.3f} {t:9.3f} {g / t:6.2f}", flush=True)


if __name__ == "__main__":
    main()
