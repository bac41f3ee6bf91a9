"""The cost of the run-time domain checks (issue 37): a generated step with its checks against the same step with
the check helper replaced by a no-op, in the numpy and jax (eager) modules.

Where the derivation cannot guarantee that a positive (definite) parameter stays in its domain (``newton``,
``online_newton_diag``, a multimodal recipe without ``riemannian_correction``, federated server steps), the
generated function checks the new value (``_check_domain``: every entry > 0, or a Cholesky factorization of each
matrix) and raises FloatingPointError naming it.  This times, per recipe and size, ``--rounds``
repetitions of ``--steps`` steps (the fastest of each, alternating), with the module's own ``_check_domain`` and with a
no-op in its place.  Under
``jax.jit`` nothing is checked (a traced value cannot raise), so only eager jax is timed.

    python benchmarks/bench_domain_checks.py [--rounds 5] [--steps 50]
"""
from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

import numpy as np

from blr_derive.api import derive_record
from blr_derive.codegen.registry import emit
from blr_derive.ir.build import build_ir

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "catalog"


def load(path):
    spec = importlib.util.spec_from_file_location(f"m{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def generated(name, target, text=None, tmp=None):
    if text is None:
        return load(CATALOG / "generated" / target / f"{name}.py")
    path = Path(tmp) / f"{name}.yaml"
    path.write_text(text)
    _, D = derive_record(path)
    out = Path(tmp) / f"{name}_{target}.py"
    out.write_text(emit(build_ir(D, path.name), target))
    return load(out)


def compare(label, mod, run, rounds):
    """The fastest of ``rounds`` runs with the module's checks and without (alternating, so that a machine shared
    with other work slows both alike)."""
    own, off = mod._check_domain, (lambda *a, **k: None)
    with_, without = [], []
    run()                                      # warm (first calls, jax compilation of eager kernels)
    for _ in range(rounds):
        for fn, out in ((own, with_), (off, without)):
            mod._check_domain = fn
            t0 = time.perf_counter()
            run()
            out.append(time.perf_counter() - t0)
    mod._check_domain = own
    a, b = min(with_), min(without)
    print(f"{label:52s} {1e3 * a:10.2f} ms {1e3 * b:10.2f} ms {100 * (a / b - 1):+8.1f} %")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args(argv)
    n = a.steps
    print(f"{'recipe, target, size (' + str(n) + ' steps)':52s} {'checked':>13s} {'no check':>13s} {'cost':>9s}")
    with tempfile.TemporaryDirectory() as tmp:
        plain = (CATALOG / "multimodal.yaml").read_text().replace("  - riemannian_correction: {param: S}\n", "")
        for target in ("numpy", "jax"):
            mod = generated("newton", target)
            for P in (3, 30, 300):
                A = np.random.default_rng(P).normal(size=(P, P))
                H = A @ A.T + P * np.eye(P)
                orc = {"grad": lambda x: np.ones_like(x), "hess": lambda x, H=H: H}
                st = mod.init(m=np.zeros(P), S=np.eye(P))

                def run(mod=mod, st=st, orc=orc):
                    s = st
                    for _ in range(n):
                        s = mod.step(s, oracles=orc, rho=0.5)
                compare(f"newton, {target}, P = {P}", mod, run, a.rounds)
            mod = generated("online_newton_diag", target)
            for N in (1_000, 1_000_000):
                st = mod.init(m=np.zeros(N), s=np.ones(N))
                orc = {"grad": lambda x: x - 1.0, "hess": lambda x: 2.0 + np.cos(x)}
                hp = {k: v for k, v in {"rho": 0.1}.items() if k in mod.HYPERPARAMETERS}

                def run(mod=mod, st=st, orc=orc, hp=hp):
                    s = st
                    for _ in range(n):
                        s = mod.step(s, oracles=orc, **hp)
                compare(f"online_newton_diag, {target}, N = {N:,}", mod, run, a.rounds)
            mod = generated("multimodal_plain", target, plain.replace("name: multimodal", "name: multimodal_plain"),
                            tmp)
            for K in (3, 64):
                P = 3
                rng = np.random.default_rng(K)
                st = mod.init(m=rng.normal(size=(K, P)) * 3, S=np.stack([10 * np.eye(P)] * K))
                orc = {"grad": lambda x: x ** 3 - x, "hess": lambda x: np.diag(3 * x ** 2 + 1.0)}

                def run(mod=mod, st=st, orc=orc):
                    s = st
                    for _ in range(n):
                        s = mod.step(s, oracles=orc)
                compare(f"multimodal without the correction, {target}, K = {K}", mod, run, a.rounds)
            mod = generated("fed_admm_full", target)
            for P in (3, 300):
                msg = {"msg1": np.ones(P), "msg2": -np.eye(P) * 5}

                def run(mod=mod, msg=msg):
                    for _ in range(n):
                        mod.server_step(msg, 4)
                compare(f"fed_admm_full server_step, {target}, P = {P}", mod, run, a.rounds)
            mod = generated("fed_ivon_admm", target)
            for P in (1_000, 1_000_000):
                msg = {n: np.ones(P) if n.endswith("1") else -np.full(P, 5.0) for n in mod.FEDERATED_MESSAGES}

                def run(mod=mod, msg=msg):
                    for _ in range(n):
                        mod.server_step(msg, 4)
                compare(f"fed_ivon_admm server_step, {target}, P = {P:,}", mod, run, a.rounds)


if __name__ == "__main__":
    main()
