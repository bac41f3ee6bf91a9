"""Wall-clock benchmarks of the ``blr-derive`` command line.

    python benchmarks/bench_cli.py [--strict]

(a) ``blr-derive catalog/newton.yaml --target numpy``: one fresh subprocess per run,
    so the time includes interpreter start-up and every import (sympy, numpy, jinja2);
    median of 5 runs.  Target: under 2 s.
(b) ``blr-derive catalog --check``: derive and render every catalog recipe in a fresh
    ("cold") subprocess, with no in-process caches; median of 3 runs.  Target: under 10 s.

Each run is ``python -m blr_derive ...`` started in the repository root with this
checkout first on ``PYTHONPATH``.  With ``--strict`` the exit status is 1 if a target
is missed (by default the script only reports).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BENCHES = [
    # (label, argv after "blr-derive", runs, target seconds)
    ("blr-derive catalog/newton.yaml --target numpy", ["catalog/newton.yaml", "--target", "numpy"], 5, 2.0),
    ("blr-derive catalog --check (cold)", ["catalog", "--check"], 3, 10.0),
]


def time_once(args) -> float:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "blr_derive", *args], cwd=str(ROOT), env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"blr-derive {' '.join(args)} failed with status {r.returncode}: {r.stderr.strip()}")
    return dt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = ap.parse_args(argv)
    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}, "
          f"{os.cpu_count()} CPUs")
    missed = 0
    for label, cli_args, runs, target in BENCHES:
        times = [time_once(cli_args) for _ in range(runs)]
        med = statistics.median(times)
        ok = med < target
        missed += not ok
        print(f"{label:<48} median {med:6.2f} s of {runs} "
              f"(min {min(times):.2f}, max {max(times):.2f})   target < {target:g} s: {'OK' if ok else 'MISSED'}")
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
