"""float32 agreement of the generated torch optimizers with torch.optim on a small chaotic CNN (issue 39, item 3).

A small CNN on sklearn's digits (8x8 images, 10 classes), full-batch-ish mini-batches of 64 drawn by a fixed
permutation, float32, 200 steps.  For each pair (the catalog's generated optimizer vs torch.optim's default
path, asked for explicitly with foreach=True (on CPU torch's default is its for-loop path), and the for-loop
path; torch's own fused vs its foreach path as the yardstick, or its for-loop vs its foreach path where torch
has no fused implementation) it reports:

- ``differ``: the mean over steps of the fraction of parameter entries that differ after ONE step from the
  same parameters, state and gradients (the second run is put back onto the first's parameters and state after
  every step, so differences do not accumulate): how often the two paths round differently;
- ``drift``: the largest relative difference of the loss curves of two free runs (never re-synchronized) over
  the steps: how far the differences grow on a chaotic problem;
- ``bitwise``: whether the free runs' final parameters are identical.

Usage: python benchmarks/bench_torch_order.py [--steps 200] [--only adam,sgd_nesterov] [--artifacts DIR] [--fused]
(DIR: e.g. ``git archive REV catalog/generated/torch | tar -x -C /tmp/rev`` then /tmp/rev/catalog/generated/torch;
``--fused``: also the generated ``fused=True`` path against torch's fused path and against the generated default.)
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from conftest import GENERATED, load_module_from_path  # noqa: E402

CASES = {   # name -> (recipe, torch.optim class, kwargs)
    "adam": ("adam", torch.optim.Adam, dict(lr=3e-3)),
    "adam_wd": ("adam", torch.optim.Adam, dict(lr=3e-3, weight_decay=1e-2)),
    "adam_amsgrad": ("adam", torch.optim.Adam, dict(lr=3e-3, amsgrad=True)),
    "adamw": ("adamw", torch.optim.AdamW, dict(lr=3e-3, weight_decay=1e-2)),
    "rmsprop": ("rmsprop", torch.optim.RMSprop, dict(lr=1e-3)),
    "rmsprop_centered_mom": ("rmsprop", torch.optim.RMSprop, dict(lr=1e-3, momentum=0.9, centered=True,
                                                                  weight_decay=1e-3)),
    "sgd_momentum": ("sgd", torch.optim.SGD, dict(lr=0.05, momentum=0.9, weight_decay=1e-3)),
    "sgd_nesterov": ("sgd", torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True)),
    "adagrad": ("adagrad", torch.optim.Adagrad, dict(lr=0.05)),
    "nadam": ("nadam", torch.optim.NAdam, dict(lr=3e-3)),
    "nadam_wd_mdecay": ("nadam", torch.optim.NAdam, dict(lr=3e-3, weight_decay=1e-2, momentum_decay=6e-3)),
    "nadam_decoupled": ("nadam", torch.optim.NAdam, dict(lr=3e-3, weight_decay=1e-2, decoupled_weight_decay=True)),
    "adamax": ("adamax", torch.optim.Adamax, dict(lr=3e-3)),
    "adamax_wd": ("adamax", torch.optim.Adamax, dict(lr=3e-3, weight_decay=1e-2)),
    "adadelta": ("adadelta", torch.optim.Adadelta, dict(lr=1.0)),
    "adadelta_rho_wd": ("adadelta", torch.optim.Adadelta, dict(lr=1.0, rho=0.95, weight_decay=1e-2)),
}
FUSED = {torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.Adagrad}


def data():
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0
    return x, torch.tensor(y)


def model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(32 * 16, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 10))


def batches(x, steps, size=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    perm = torch.cat([torch.randperm(len(x), generator=g) for _ in range(steps * size // len(x) + 1)])
    return [perm[k * size:(k + 1) * size] for k in range(steps)]


def grads(net, x, y, idx):
    net.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
    loss.backward()
    return float(loss.detach())


def compare(make_a, make_b, steps, x, y):
    """(differ, drift, bitwise) of optimizer factories a and b (see the module docstring)."""
    idx = batches(x, steps)
    # one-step differences from the same parameters, state and gradients
    net_a, net_b = model(), model()
    opt_a, opt_b = make_a(net_a.parameters()), make_b(net_b.parameters())
    fractions = []
    for k in range(steps):
        grads(net_a, x, y, idx[k])
        with torch.no_grad():
            for p, q in zip(net_a.parameters(), net_b.parameters()):
                q.grad = p.grad.clone()
        opt_a.step()
        opt_b.step()
        pa = torch.cat([p.detach().reshape(-1) for p in net_a.parameters()])
        pb = torch.cat([p.detach().reshape(-1) for p in net_b.parameters()])
        fractions.append(float((pa != pb).float().mean()))
        with torch.no_grad():                       # back onto a's parameters and state
            for p, q in zip(net_a.parameters(), net_b.parameters()):
                q.copy_(p)
        own = [{k: g[k] for k in ("foreach", "fused") if k in g} for g in opt_b.param_groups]
        opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))
        for g, kept in zip(opt_b.param_groups, own):   # a's groups carry a's path: b keeps its own
            g.update(kept)
    # free runs
    net_a, net_b = model(), model()
    opt_a, opt_b = make_a(net_a.parameters()), make_b(net_b.parameters())
    drift = 0.0
    for k in range(steps):
        la, lb = grads(net_a, x, y, idx[k]), grads(net_b, x, y, idx[k])
        opt_a.step()
        opt_b.step()
        drift = max(drift, abs(la - lb) / abs(la))
    same = all(torch.equal(p, q) for p, q in zip(net_a.parameters(), net_b.parameters()))
    return sum(fractions) / len(fractions), drift, same


def generated(recipe, folder):
    mod = load_module_from_path(Path(folder) / f"{recipe}.py")
    return next(v for v in vars(mod).values()
                if isinstance(v, type) and issubclass(v, torch.optim.Optimizer) and v.__module__ == mod.__name__)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--only", default="")
    ap.add_argument("--artifacts", default=str(GENERATED / "torch"),
                    help="the folder of generated torch modules (e.g. one checked out from another revision)")
    ap.add_argument("--fused", action="store_true",
                    help="also compare the generated fused=True path with torch's fused path and the generated default")
    args = ap.parse_args()
    torch.set_num_threads(1)
    x, y = data()
    names = [n for n in CASES if not args.only or n in args.only.split(",")]
    print(f"{'case':24s} {'pair':26s} {'differ/step':>12s} {'loss drift':>11s} bitwise")
    for name in names:
        recipe, peer, kw = CASES[name]
        ours = generated(recipe, args.artifacts)
        rows = [("generated vs foreach", lambda ps: peer(ps, **kw, foreach=True), lambda ps: ours(ps, **kw)),
                ("generated vs for-loop", lambda ps: peer(ps, **kw, foreach=False), lambda ps: ours(ps, **kw))]
        if peer in FUSED:
            rows.append(("torch fused vs foreach", lambda ps: peer(ps, **kw, foreach=True),
                         lambda ps: peer(ps, **kw, fused=True)))
        else:       # the yardstick where torch has no fused path: its own for-loop against its foreach path
            rows.append(("torch for-loop vs foreach", lambda ps: peer(ps, **kw, foreach=True),
                         lambda ps: peer(ps, **kw, foreach=False)))
        if args.fused:          # the generated fused path against torch's fused path and the generated default
            if peer in FUSED:
                rows.append(("gen. fused vs torch fused", lambda ps: peer(ps, **kw, fused=True),
                             lambda ps: ours(ps, **kw, fused=True)))
            rows.append(("gen. fused vs gen. default", lambda ps: ours(ps, **kw),
                         lambda ps: ours(ps, **kw, fused=True)))
        for pair, a, b in rows:
            differ, drift, same = compare(a, b, args.steps, x, y)
            print(f"{name:24s} {pair:26s} {differ:12.2e} {drift:11.2e} {'yes' if same else 'no'}", flush=True)


if __name__ == "__main__":
    main()
