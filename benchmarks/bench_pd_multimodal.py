"""Does the multimodal recipe's mixture stay a mixture of Gaussians? (issue 37) — runs from random starts on standard
test functions with and without ``riemannian_correction`` (the improved BLR of Lin, Schmidt & Khan 2020).

The catalog's ``multimodal`` (K full-Gaussian components as an array axis, Newton-like steps, Eqs. 27-30, 69-71) is
derived twice in this process: as in the catalog, and with the ``riemannian_correction`` line removed (the plain
BLR).  Each is run from ``--seeds`` random starts per function: K component means uniform in the function's box,
every precision 10·I, ``--steps`` steps at the recipe's default ρ = 0.5.  A run *leaves the family* at the first
step where some component's precision has a non-positive eigenvalue or a non-finite entry (the plain step returned
NaN or garbage there silently; it now raises FloatingPointError naming the component, counted the same).  Reported per function: the share of runs that left the family, and for the
corrected recipe the share of all components that ended at a local minimum (gradient norm < 1e-3 and a
positive-definite Hessian there; components that share a basin push each other off it through the entropy term).

    python benchmarks/bench_pd_multimodal.py [--seeds 200] [--steps 100] [--K 3]
"""
from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np

from blr_derive.api import derive_record
from blr_derive.codegen.registry import emit
from blr_derive.ir.build import build_ir

CATALOG = Path(__file__).resolve().parent.parent / "catalog"


def functions():
    """name -> (grad, hess, box, dimension)."""
    def himmelblau_g(x):
        a, b = x[0] ** 2 + x[1] - 11, x[0] + x[1] ** 2 - 7
        return np.array([4 * x[0] * a + 2 * b, 2 * a + 4 * x[1] * b])

    def himmelblau_h(x):
        return np.array([[12 * x[0] ** 2 + 4 * x[1] - 42, 4 * x[0] + 4 * x[1]],
                         [4 * x[0] + 4 * x[1], 4 * x[0] + 12 * x[1] ** 2 - 26]])

    def camel_g(x):
        a, b = x
        return np.array([8 * a - 8.4 * a ** 3 + 2 * a ** 5 + b, a - 8 * b + 16 * b ** 3])

    def camel_h(x):
        a, b = x
        return np.array([[8 - 25.2 * a ** 2 + 10 * a ** 4, 1.0], [1.0, -8 + 48 * b ** 2]])
    return {
        "double well (x²−4)² + x/2": (lambda x: 4 * x * (x ** 2 - 4) + 0.5, lambda x: np.atleast_2d(12 * x ** 2 - 16),
                                      (-3, 3), 1),
        "triple well x²(x²−9)² + x": (lambda x: 2 * x * (x ** 2 - 9) ** 2 + 4 * x ** 3 * (x ** 2 - 9) + 1,
                                      lambda x: np.atleast_2d(30 * x ** 4 - 216 * x ** 2 + 162), (-4, 4), 1),
        "Himmelblau": (himmelblau_g, himmelblau_h, (-5, 5), 2),
        "Rastrigin (A = 10)": (lambda x: 2 * x + 20 * np.pi * np.sin(2 * np.pi * x),
                               lambda x: np.diag(2 + 40 * np.pi ** 2 * np.cos(2 * np.pi * x)), (-2, 2), 2),
        "six-hump camel": (camel_g, camel_h, (-2, 2), 2),
    }


def module(text, tmp):
    path = Path(tmp) / "multimodal.yaml"
    path.write_text(text)
    _, D = derive_record(path)
    out = Path(tmp) / f"mm_{abs(hash(text))}.py"
    out.write_text(emit(build_ir(D, path.name), "numpy"))
    import importlib.util
    spec = importlib.util.spec_from_file_location(out.stem, out)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(mod, g, H, box, P, K, seeds, steps):
    left, at_minima = 0, 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        st = mod.init(m=rng.uniform(*box, size=(K, P)), S=np.stack([10.0 * np.eye(P)] * K))
        bad = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(steps):
                try:
                    st = mod.step(st, oracles={"grad": g, "hess": H})
                except (FloatingPointError, ValueError, np.linalg.LinAlgError):
                    bad = True
                    break
                S = st["S"]
                if not np.all(np.isfinite(S)) or np.linalg.eigvalsh(0.5 * (S + np.swapaxes(S, -1, -2))).min() <= 0:
                    bad = True
                    break
        left += bad
        if not bad:
            at_minima += sum(np.linalg.norm(g(m)) < 1e-3 and np.linalg.eigvalsh(np.atleast_2d(H(m))).min() > 0
                             for m in st["m"])
    return left, at_minima


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--K", type=int, default=3)
    a = ap.parse_args(argv)
    text = (CATALOG / "multimodal.yaml").read_text()
    line = "  - riemannian_correction: {param: S}\n"
    assert line in text
    with tempfile.TemporaryDirectory() as tmp:
        corrected, plain = module(text, tmp), module(text.replace(line, ""), tmp)
        print(f"K = {a.K} components, {a.seeds} random starts per function, {a.steps} steps, rho = 0.5, S0 = 10 I")
        print(f"{'function':28s} {'plain BLR: left':>18s} {'corrected: left':>16s} {'corrected: components at minima':>33s}")
        for name, (g, H, box, P) in functions().items():
            lp, _ = run(plain, g, H, box, P, a.K, a.seeds, a.steps)
            lc, mc = run(corrected, g, H, box, P, a.K, a.seeds, a.steps)
            print(f"{name:28s} {100 * lp / a.seeds:16.1f} % {100 * lc / a.seeds:14.1f} % "
                  f"{100 * mc / (a.K * a.seeds):31.1f} %")


if __name__ == "__main__":
    main()
