"""Derivation time against the depth and width of an explicit loss (issue 36, item 7).

    python benchmarks/bench_depth.py [--depths 1,2,4,8,12] [--families bernoulli,binomial] [--strict]

For every scalar elementwise function f of the expression grammar and every nesting depth d, the loss
``y*f(sigmoid(f(sigmoid(... theta ...))))`` (f applied d times; the sigmoid keeps every argument inside every
f's domain) is derived with the ``exact`` rule over a family with a finite support (an expectation that is a sum
over the support), and then rendered for numpy; the "wide" input sums every function at that depth
(``y*f1(...) + y*f2(...) + ...``).  Each input is derived in this process, one after the other, under the
engine's own time limit (120 s), with the family already derived once (the first input is not charged for it).
The table gives the CPU seconds per input; the target is a few seconds for every input (``--strict``: exit 1 if one
takes more than ``--target`` seconds, default 5).
"""
from __future__ import annotations

import argparse
import sys
import time

import blr_derive.api as api

FUNCS = ("log", "exp", "sqrt", "abs", "tanh", "sin", "cos", "sigmoid", "softplus", "log1p", "acos", "lgamma",
         "digamma", "gamma", "exp1", "sign")


def nested(f: str, depth: int, arg: str = "theta") -> str:
    e = arg
    for _ in range(depth):
        # sign of a sigmoid is 1: the sign of its distance from 1/2 varies with theta
        e = (f"sigmoid({e})" if f == "sigmoid" else f"sign(sigmoid({e}) - 1/2)" if f == "sign"
             else f"{f}(sigmoid({e}))")
    return e


def recipe_text(family: str, loss: str) -> str:
    fam = {"binomial": "{name: binomial, n: 6}"}.get(family, family)
    return (f"name: bench_depth\nfamily: {fam}\nloss:\n  expression: {loss}\n  data:\n    y: {{description: w}}\n"
            "approximations:\n  - exact\nhyperparameters:\n  rho: {default: 0.5}\n")


def one(family: str, loss: str) -> float:
    """CPU seconds of this process (the derivation is single-threaded: on an idle machine the wall time; on a
    shared one the wall time is inflated by the other processes and the CPU time is not)."""
    t0 = time.process_time()
    with api.time_limited(120):
        rec = api.recipe(recipe_text(family, loss))
        view = api.derive(rec)
        view.code("numpy")
    return time.process_time() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depths", default="1,2,4,8,12")
    ap.add_argument("--families", default="bernoulli,binomial")
    ap.add_argument("--target", type=float, default=5.0)
    ap.add_argument("--strict", action="store_true")
    a = ap.parse_args(argv)
    depths = [int(d) for d in a.depths.split(",")]
    worst = 0.0
    for family in a.families.split(","):
        one(family, "y*theta")        # derive the family once, outside the measurement
        print(f"\n{family}: seconds per input (exact expectation over the support, numpy module)")
        print("| f | " + " | ".join(f"d={d}" for d in depths) + " |")
        print("|---|" + "---|" * len(depths))
        rows = [(f, [f"y*{nested(f, d)}" for d in depths]) for f in FUNCS]
        rows.append(("wide (all)", [" + ".join(f"y*{nested(f, d)}" for f in FUNCS) for d in depths]))
        for label, losses in rows:
            cells = []
            for loss in losses:
                try:
                    s = one(family, loss)
                    worst = max(worst, s)
                    cells.append(f"{s:.2f}")
                except Exception as exc:     # noqa: BLE001 - a benchmark reports every outcome
                    cells.append(f"error: {type(exc).__name__}: {str(exc)[:60]}")
                    worst = float("inf")
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    print(f"\nslowest input: {worst:.2f} s (target {a.target:.0f} s)")
    return 1 if a.strict and worst > a.target else 0


if __name__ == "__main__":
    sys.exit(main())
