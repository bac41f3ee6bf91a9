"""Wall-clock benchmarks of the ``blr-derive`` command line.

    python benchmarks/bench_cli.py [--strict]

(a) ``blr-derive catalog/newton.yaml --target numpy``: one fresh subprocess per run,
    so the time includes interpreter start-up and every import (sympy, numpy, jinja2);
    median of 5 runs.  Target: under 2 s.
(b) ``blr-derive catalog --check``: derive every built-in family and catalog recipe and render every artifact
    in a fresh ("cold") subprocess, with no in-process caches and an empty family disk cache
    (``BLR_DERIVE_CACHE_DIR`` a new folder each run); median of 3 runs.  Target: under 10 s.  The same with
    ``--jobs 1`` (one process) and with a warm disk cache, for comparison (no target).
(c) ``blr-derive families`` (reads the generated index): target under 1 s (issue 17).
(d) one recipe with a warm family disk cache (``adam``, ``newton``, ``ivon`` to numpy): target under 0.8 s each
    (issue 17).

Python's bytecode cache is allowed in every run (``PYTHONDONTWRITEBYTECODE`` is removed from the environment, and
one unmeasured warm-up run writes the ``.pyc`` files first), as on a user's machine: without it every run would
also compile the ~160 modules of the package from source (about 0.17 s).

Each run is ``python -m blr_derive ...`` started in the repository root with this
checkout first on ``PYTHONPATH``.  With ``--strict`` the exit status is 1 if a target
is missed (by default the script only reports).
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BENCHES = [
    # (label, argv after "blr-derive", runs, target seconds or None, empty disk cache)
    ("blr-derive catalog/newton.yaml --target numpy", ["catalog/newton.yaml", "--target", "numpy"], 5, 2.0, True),
    ("blr-derive catalog --check (cold)", ["catalog", "--check"], 3, 10.0, True),
    ("blr-derive catalog --check --jobs 1 (cold)", ["catalog", "--check", "--jobs", "1"], 3, None, True),
    ("blr-derive catalog --check (warm disk cache)", ["catalog", "--check"], 3, None, False),
    ("blr-derive families", ["families"], 5, 1.0, False),
    ("blr-derive catalog/adam.yaml --target numpy (warm)", ["catalog/adam.yaml", "--target", "numpy"], 5, 0.8, False),
    ("blr-derive catalog/newton.yaml --target numpy (warm)", ["catalog/newton.yaml", "--target", "numpy"], 5, 0.8,
     False),
    ("blr-derive catalog/ivon.yaml --target numpy (warm)", ["catalog/ivon.yaml", "--target", "numpy"], 5, 0.8, False),
]


def time_once(args, cold=True) -> float:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cache = tempfile.mkdtemp(prefix="blr-bench-cache-") if cold else None
    if cache:
        env["BLR_DERIVE_CACHE_DIR"] = cache
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "blr_derive", *args], cwd=str(ROOT), env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if cache:
        shutil.rmtree(cache, ignore_errors=True)
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
    for label, cli_args, runs, target, cold in BENCHES:
        time_once(cli_args, cold)        # warm-up, not measured: writes the bytecode cache (and the disk cache)
        times = [time_once(cli_args, cold) for _ in range(runs)]
        med = statistics.median(times)
        ok = target is None or med < target
        missed += not ok
        goal = f"target < {target:g} s: {'OK' if ok else 'MISSED'}" if target is not None else "(no target)"
        print(f"{label:<50} median {med:6.2f} s of {runs} (min {min(times):.2f}, max {max(times):.2f})   {goal}")
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
