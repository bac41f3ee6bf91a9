"""Posterior correction (blr_derive/rules/posterior_correction.py): SVRG over the isotropic Gaussian, and its
Newton-like extension."""
import numpy as np

from conftest import load_generated


def logistic(n=40, P=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, P))
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ rng.normal(size=P)))).astype(float)
    return X, y


def batch_grad(X, y, idx):
    """Mini-batch gradient of the summed loss, scaled to the data set (N/|B| Σ_{i∈B} ∇ℓ_i)."""
    return lambda th: len(y) / len(idx) * X[idx].T @ (1 / (1 + np.exp(-X[idx] @ th)) - y[idx])


def svrg(X, y, batches, epochs, inner, lr):
    """SVRG as written by Johnson & Zhang (2013): a snapshot w̃ and its full gradient μ̃ per epoch, inner steps
    w ← w − η(∇ℓ_B(w) − ∇ℓ_B(w̃) + μ̃)."""
    w = np.zeros(X.shape[1])
    out = []
    it = iter(batches)
    for _ in range(epochs):
        snap = w.copy()
        full = X.T @ (1 / (1 + np.exp(-X @ snap)) - y)
        for _ in range(inner):
            idx = next(it)
            w = w - lr * (batch_grad(X, y, idx)(w) - batch_grad(X, y, idx)(snap) + full)
            out.append(w.copy())
    return out


def test_posterior_correction_over_the_isotropic_gaussian_is_svrg():
    mod = load_generated("svrg")
    X, y = logistic()
    rng = np.random.default_rng(1)
    batches = [rng.choice(len(y), size=5, replace=False) for _ in range(60)]
    ref = svrg(X, y, batches, epochs=6, inner=10, lr=0.01)
    state, it, worst = {"m": np.zeros(4)}, iter(batches), 0.0
    for e in range(6):
        data = {"m_old": state["m"].copy(), "grad_full": X.T @ (1 / (1 + np.exp(-X @ state["m"])) - y)}
        for i in range(10):
            state = mod.step(state, oracles={"grad": batch_grad(X, y, next(it))}, data=data, rho=0.01)
            worst = max(worst, np.max(np.abs(state["m"] - ref[10 * e + i])))
    assert worst < 1e-13, worst
    # variance reduction at work: the full gradient shrinks
    full = lambda th: np.linalg.norm(X.T @ (1 / (1 + np.exp(-X @ th)) - y))
    assert full(state["m"]) < 0.1 * full(np.zeros(4))


def test_newton_like_correction_lands_on_the_full_data_solution_in_one_step():
    """Least squares: the corrected gradient and Hessian of any mini-batch equal the full-data ones, so one step
    with rho = 1 from any state (and any snapshot) is the full-data Newton step: the least-squares solution."""
    mod = load_generated("svrg_newton")
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(30, 3)), rng.normal(size=30)
    idx = rng.choice(30, size=4, replace=False)
    g_b = lambda th: 30 / 4 * X[idx].T @ (X[idx] @ th - y[idx])
    H_b = lambda th: 30 / 4 * X[idx].T @ X[idx]
    m_old = rng.normal(size=3)
    A = rng.normal(size=(3, 3))
    data = {"m_old": m_old, "S_old": np.eye(3), "grad_full": X.T @ (X @ m_old - y), "hess_full": X.T @ X}
    state = mod.step({"m": rng.normal(size=3), "S": A @ A.T + np.eye(3)}, oracles={"grad": g_b, "hess": H_b},
                     data=data, rho=1.0)
    m_star = np.linalg.solve(X.T @ X, X.T @ y)
    assert np.max(np.abs(state["m"] - m_star)) < 1e-12 * max(1, np.max(np.abs(m_star)))
    assert np.allclose(state["S"], X.T @ X, rtol=1e-13, atol=1e-12)


def test_a_data_name_clash_is_located_at_the_approximation(tmp_path):
    """posterior_correction adds the data m_old, grad_full; a recipe that already uses one of these names gets a
    located one-line error (exit 2) naming the approximation's line."""
    import subprocess
    import sys
    src = (tmp_path / "r.yaml")
    src.write_text("name: clash\nfamily: gaussian_fixed_cov\nloss: abstract\n"
                   "approximations:\n  - delta\n  - posterior_correction\n"
                   "hyperparameters:\n  rho: {default: 0.1}\n  grad_full: {default: 1.0}\n")
    r = subprocess.run([sys.executable, "-m", "blr_derive", str(src)], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert f"{src}:6:" in r.stderr and "grad_full" in r.stderr, r.stderr
