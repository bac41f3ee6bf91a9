"""EM for a Gaussian mixture at scale (issue 17): derivation time against K, and the generated step against
scikit-learn's iteration.

(a) Derivation: ``em_gmm`` and ``svi`` (components as an array axis) derive once, for a generic component; K is
    not an input of the derivation at all.  For contrast the unrolled ``em_gmm_unrolled`` and ``svi_unrolled`` at
    several K (they grow with K and are limited to K <= 16), and vmp, dirichlet_categorical and multimodal.  Each in a fresh process with an empty family disk cache (``python -m blr_derive
    <recipe> --target numpy``, the whole command), median of 3.  Target: em_gmm under 2 s.
(b) One EM step at K = 16, P = 10, N = 1e6 (float64): the generated ``em_gmm`` step against scikit-learn's
    ``GaussianMixture(covariance_type='full')`` E-step + M-step (``_e_step`` and ``_m_step``, what one iteration of
    ``fit`` runs) and against a whole ``fit`` with ``max_iter=1`` from the same initialization (its start-up
    included), measured alternately in one process, median of ``--rounds``.  Target: ratio <= 1.
(c) One svi step (full batch, ρ = 1) at K = 16, N = 1e6 against a vectorized CAVI sweep written from Bishop PRML
    Sec. 10.2, and one vmp step at N = 1e6 against a vectorized CAVI sweep of Sec. 10.1.3 (alternately).

    python benchmarks/bench_em.py [--rounds 5] [--n 1000000] [--k 16] [--p 10]
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
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cli_seconds(args) -> float:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cache = tempfile.mkdtemp(prefix="blr-bench-cache-")
    env["BLR_DERIVE_CACHE_DIR"] = cache
    out = tempfile.mkdtemp(prefix="blr-bench-out-")
    try:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "blr_derive", *args, "-o", os.path.join(out, "m.py")], cwd=str(ROOT), env=env,
                           capture_output=True, text=True)
        dt = time.perf_counter() - t0
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    if r.returncode != 0:
        raise SystemExit(f"blr-derive {' '.join(args)} failed: {r.stderr.strip()}")
    return dt


def derive_seconds(args) -> float:
    """The derivation alone (recipe and its families, empty disk cache), timed inside a fresh process after the
    imports."""
    path = args[0]
    sizes = {args[-1].split("=")[0]: int(args[-1].split("=")[1])} if "--size" in args else None
    code = ("import time, sys; from blr_derive.api import derive_record; t = time.perf_counter(); "
            f"derive_record({path!r}, {sizes!r}); print(time.perf_counter() - t)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cache = tempfile.mkdtemp(prefix="blr-bench-cache-")
    env["BLR_DERIVE_CACHE_DIR"] = cache
    try:
        r = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), env=env, capture_output=True, text=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if r.returncode != 0:
        raise SystemExit(f"deriving {path} failed: {r.stderr.strip()[-300:]}")
    return float(r.stdout.strip().splitlines()[-1])


def derivation_table():
    rows = [("em_gmm (any K)", ["catalog/em_gmm.yaml", "--target", "numpy"])]
    rows += [(f"em_gmm_unrolled K = {k}", ["catalog/em_gmm_unrolled.yaml", "--target", "numpy", "--size", f"K={k}"])
             for k in (3, 5, 7)]
    rows += [("svi (any K)", ["catalog/svi.yaml", "--target", "numpy"])]
    rows += [(f"svi_unrolled K = {k}", ["catalog/svi_unrolled.yaml", "--target", "numpy", "--size", f"K={k}"])
             for k in (3, 5, 7)]
    rows += [(name, [f"catalog/{name}.yaml", "--target", "numpy"]) for name in ("vmp", "dirichlet_categorical",
                                                                                  "multimodal")]
    print("derivation, median of 3 (empty family disk cache): the derivation alone, timed in a fresh process after "
          "its imports; the whole command (start-up, imports, derivation, code):")
    for label, args in rows:
        alone = [derive_seconds(args) for _ in range(3)]
        times = [cli_seconds(args) for _ in range(3)]
        print(f"  {label:<28} {statistics.median(alone):6.2f} s   command {statistics.median(times):6.2f} s")


def load_generated():
    import importlib.util
    spec = importlib.util.spec_from_file_location("em_gmm_gen", ROOT / "catalog/generated/numpy/em_gmm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def step_benchmark(K, P, N, rounds):
    from sklearn.mixture import GaussianMixture
    mod = load_generated()
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=4.0, size=(K, P))
    Y = centers[rng.integers(K, size=N)] + rng.normal(size=(N, P))
    w0, m0, L0 = np.full(K, 1 / K), Y[rng.choice(N, K, replace=False)], np.array([np.eye(P)] * K)
    state = mod.init(pi=w0, m=m0, L=L0)

    def sk_model(max_iter):
        return GaussianMixture(K, covariance_type="full", max_iter=max_iter, tol=0, reg_covar=0, weights_init=w0,
                               means_init=m0, precisions_init=L0, init_params="random_from_data")
    gm = sk_model(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm.fit(Y[:200 * K])                          # fitted attributes, replaced by the initialization below

    def reset():
        gm.weights_, gm.means_, gm.precisions_cholesky_ = w0, m0, np.linalg.cholesky(L0)

    def ours():
        return mod.step(state, data={"y": Y})

    def theirs():
        _, log_resp = gm._e_step(Y)
        gm._m_step(Y, log_resp)

    def fit_one():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sk_model(1).fit(Y)
    out = ours()                                     # equal results (one step from the same point)
    reset()
    theirs()
    prec = np.einsum("kab,kcb->kac", gm.precisions_cholesky_, gm.precisions_cholesky_)   # _m_step sets the factor
    err = max(np.abs(out["pi"] - gm.weights_).max(), np.abs(out["m"] - gm.means_).max(),
              np.abs(out["L"] - prec).max() / np.abs(prec).max())
    a, b, c = alternate([ours, theirs, fit_one], rounds, before={theirs: reset})
    print(f"one EM step, K = {K}, P = {P}, N = {N} (float64; median of {rounds}, alternately):")
    print(f"  generated em_gmm step                  {a:7.3f} s")
    print(f"  scikit-learn _e_step + _m_step         {b:7.3f} s   ratio generated/sklearn {a / b:.2f}")
    print(f"  scikit-learn fit(max_iter=1), start-up {c:7.3f} s   ratio generated/sklearn {a / c:.2f}")
    print(f"  largest difference of the results: {err:.2e}")
    return a / b


def _load(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"{name}_gen", ROOT / f"catalog/generated/numpy/{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cavi_bgmm_sweep(y, a, m, s, sigma2, a0, m0, s0):
    """Vectorized full-batch CAVI sweep of the Bayesian mixture with known variance (Bishop PRML Sec. 10.2), the
    reference the generated svi step (full batch, ρ = 1) is timed against (the same formulas as
    tests/references/bgmm.py, repeated here so that the benchmark does not import the tests)."""
    from scipy.special import digamma, logsumexp
    logits = (digamma(a) - digamma(a.sum()))[None, :] - ((y[:, None] - m[None, :]) ** 2 + 1 / s[None, :]) / (2 * sigma2)
    r = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
    nk = r.sum(axis=0)
    s_new = s0 + nk / sigma2
    return a0 + nk, (s0 * m0 + r.T @ y / sigma2) / s_new, s_new, r


def cavi_normal_gamma(y, m, s, a, b, m0, kappa0, a0, b0):
    """One CAVI sweep for a Gaussian with unknown mean and precision (Bishop PRML Sec. 10.1.3), vectorized."""
    N, xbar = len(y), np.mean(y)
    mu_N = (kappa0 * m0 + N * xbar) / (kappa0 + N)
    lam_N = (kappa0 + N) * a / b
    e_sq = np.sum((y - mu_N) ** 2) + N / lam_N
    return mu_N, lam_N, a0 + (N + 1) / 2, b0 + 0.5 * (e_sq + kappa0 * ((mu_N - m0) ** 2 + 1 / lam_N))


def alternate(fns, rounds, before=None):
    """The median time of each of ``fns``, called one after the other in each of ``rounds`` rounds (alternately,
    in one process); ``before[f]`` runs untimed before each call of f."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for f, ts in zip(fns, times):
            if before and f in before:
                before[f]()
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
    return [statistics.median(ts) for ts in times]


def svi_vmp_benchmark(K, N, rounds):
    svi, vmp = _load("svi"), _load("vmp")
    rng = np.random.default_rng(1)
    y = rng.normal(scale=3.0 * np.sqrt(K), size=N)
    a, m, s = 1.0 + rng.random(K), rng.normal(scale=3.0 * np.sqrt(K), size=K), np.ones(K)
    hp = dict(sigma2=1.0, a0=1.0, m0=0.0, s0=0.1)
    state = {**svi.init(w_a=a, mu_m=m, mu_s=s), "step": np.asarray(0)}
    out = svi.step(state, data={"y": y}, N=N, delay=0.0, **hp)
    ref = cavi_bgmm_sweep(y, a, m, s, **hp)
    err = max(np.abs(out["w_a"] - ref[0]).max() / np.abs(ref[0]).max(), np.abs(out["mu_m"] - ref[1]).max())
    a_t, b_t = alternate([lambda: svi.step(state, data={"y": y}, N=N, delay=0.0, **hp),
                          lambda: cavi_bgmm_sweep(y, a, m, s, **hp)], rounds)
    print(f"one svi step (full batch, rho = 1), K = {K}, N = {N}: generated {a_t:.3f} s, vectorized CAVI sweep "
          f"{b_t:.3f} s, ratio {a_t / b_t:.2f} (results differ by {err:.1e})")
    hv = dict(m0=0.3, kappa0=2.0, alpha0=1.5, beta0=0.8)
    st = vmp.init(theta_m=0.0, theta_s=1.0, tau_alpha=1.0, tau_beta=1.0)
    o = vmp.step(st, data={"y": y}, **hv)
    r = cavi_normal_gamma(y, 0.0, 1.0, 1.0, 1.0, 0.3, 2.0, 1.5, 0.8)
    err = max(abs(o["theta_m"] - r[0]), abs(o["tau_beta"] - r[3]) / abs(r[3]))
    a_t, b_t = alternate([lambda: vmp.step(st, data={"y": y}, **hv),
                          lambda: cavi_normal_gamma(y, 0.0, 1.0, 1.0, 1.0, 0.3, 2.0, 1.5, 0.8)], rounds)
    print(f"one vmp step, N = {N}: generated {a_t:.4f} s, vectorized CAVI sweep {b_t:.4f} s, ratio "
          f"{a_t / b_t:.2f} (results differ by {err:.1e})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--p", type=int, default=10)
    ap.add_argument("--skip-derivation", action="store_true")
    args = ap.parse_args(argv)
    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs")
    if not args.skip_derivation:
        derivation_table()
    step_benchmark(args.k, args.p, args.n, args.rounds)
    svi_vmp_benchmark(args.k, args.n, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
