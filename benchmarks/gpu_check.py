"""The generated torch and Triton optimizers against torch.optim on one device (issue 39, item 7).

For every catalog optimizer that has a torch.optim peer, the same parameters and gradients are stepped by
torch.optim and by the generated module, on each path both offer:

  torch   default        generated default path      vs torch.optim default path
  torch   foreach        generated (foreach=True)    vs torch.optim(foreach=True)
  torch   fused          generated (fused=True)      vs torch.optim(fused=True)   (where torch has a fused kernel)
  torch   capturable     generated (capturable=True) vs torch.optim(capturable=True) (where the generated class
                         accepts it; a documented refusal is reported as such)
  triton  kernel         generated Triton optimizer  vs torch.optim default path

and the largest difference over all parameters after ``--steps`` float32 steps is printed, relative to the
parameters' scale, with ``ok`` when it is within ``--tol`` (the float32 rounding of a few steps; a bitwise
match prints 0).  Exit status 1 if any comparison fails, 0 otherwise.

On a CUDA machine (``benchmarks/gpu_check.sh`` runs this, then ``bench_triton.py`` for bandwidth against the
device's peak):

    python benchmarks/gpu_check.py --device cuda

Without a GPU the same checks run on CPU tensors, the Triton kernels in Triton's interpreter (slow: use small
sizes); tests/unit/test_gpu_check_script.py runs it so:

    TRITON_INTERPRET=1 python benchmarks/gpu_check.py --device cpu --numel 64 --tensors 2 --steps 3
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

#: catalog recipe -> (torch.optim class name, keyword arguments of the comparison)
PEERS = {
    "sgd": ("SGD", dict(lr=1e-2, momentum=0.9, weight_decay=1e-3)),
    "adam": ("Adam", dict(lr=1e-3, weight_decay=1e-2)),
    "adamw": ("AdamW", dict(lr=1e-3, weight_decay=1e-2)),
    "rmsprop": ("RMSprop", dict(lr=1e-3, momentum=0.9, centered=True)),
    "adagrad": ("Adagrad", dict(lr=1e-2, weight_decay=1e-3)),
    "adamax": ("Adamax", dict(lr=2e-3)),
    "nadam": ("NAdam", dict(lr=2e-3, weight_decay=1e-3)),
    "adadelta": ("Adadelta", dict(lr=1.0, weight_decay=1e-3)),
}
PATHS = {"default": {}, "foreach": dict(foreach=True), "fused": dict(fused=True), "capturable": dict(capturable=True)}


def _params(device, numel, tensors, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(numel, generator=g).to(device) for _ in range(tensors)]


def _grads(device, numel, tensors, steps, seed):
    import torch
    g = torch.Generator().manual_seed(seed + 1)
    return [[torch.randn(numel, generator=g).to(device) for _ in range(tensors)] for _ in range(steps)]


def _run(make, start, grads):
    """(the parameters after stepping an optimizer built by ``make`` through ``grads``, None) or (None, why it
    was refused at construction) or (None, "step: " + the error a step raised)."""
    import torch
    ps = [torch.nn.Parameter(x.clone()) for x in start]
    try:
        opt = make(ps)
    except (NotImplementedError, RuntimeError, ValueError, TypeError) as exc:
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    try:
        for gs in grads:
            for p, g in zip(ps, gs):
                p.grad = g.clone()
            opt.step()
    except Exception as exc:                  # noqa: BLE001 - reported, and a failure where it is ours
        return None, f"step: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return [p.detach() for p in ps], None


def _difference(a, b):
    import torch
    scale = max(float(torch.cat([x.abs().flatten() for x in b]).max()), 1e-30)
    return max(float((x - y).abs().max()) for x, y in zip(a, b)) / scale


def check(device: str, numel: int, tensors: int, steps: int, tol: float, targets=("torch", "triton")) -> list:
    """[(recipe, target, path, status, relative difference or refusal)] over every comparison."""
    import torch
    from conftest import load_generated
    rows = []
    start = _params(device, numel, tensors, 0)
    grads = _grads(device, numel, tensors, steps, 0)
    for recipe, (peer_name, kwargs) in PEERS.items():
        peer_cls = getattr(torch.optim, peer_name)
        for target in targets:
            try:
                cls = getattr(load_generated(recipe, target), peer_name)
            except (FileNotFoundError, AttributeError):
                continue
            paths = PATHS if target == "torch" else {"kernel": {}}
            for path, extra in paths.items():
                ours, refused = _run(lambda ps: cls(ps, **kwargs, **extra), start, grads)
                peer_extra = extra if target == "torch" else {}
                theirs, peer_refused = _run(lambda ps: peer_cls(ps, **kwargs, **peer_extra), start, grads)
                if theirs is None:
                    rows.append((recipe, target, path, "n/a", f"torch.optim: {peer_refused}"))
                elif ours is None:
                    rows.append((recipe, target, path, "FAIL" if refused.startswith("step: ") else "refused",
                                 refused))
                else:
                    d = _difference(ours, theirs)
                    rows.append((recipe, target, path, "ok" if d <= tol else "FAIL", f"{d:.2e}"))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--numel", type=int, default=1 << 20, help="elements per tensor")
    ap.add_argument("--tensors", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-5, help="largest relative difference accepted")
    ap.add_argument("--targets", default="torch,triton")
    args = ap.parse_args(argv)
    import torch
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); nothing checked")
        return 0
    where = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU"
    print(f"device {args.device} ({where}), torch {torch.__version__}, {args.tensors} tensors x {args.numel} "
          f"float32, {args.steps} steps, tolerance {args.tol:g}")
    rows = check(args.device, args.numel, args.tensors, args.steps, args.tol, tuple(args.targets.split(",")))
    for recipe, target, path, status, what in rows:
        print(f"  {recipe:9s} {target:7s} {path:11s} {status:8s} {what}")
    failed = [r for r in rows if r[3] == "FAIL"]
    print(f"{len(rows)} comparisons, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
