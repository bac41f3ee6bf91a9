"""Generated numpy code against hand-written references written from the paper's
equations, against closed forms, and against the symbolic update itself."""
import numpy as np
import pytest

from blr_derive.api import derive_record
from conftest import CATALOG, load_generated

RECIPES = sorted(p.stem for p in CATALOG.glob("*.yaml"))


def quad_fn(P, seed=0):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(P, P))
    A = B @ B.T + P * np.eye(P)
    b = rng.normal(size=P)
    return (lambda x: 0.5 * x @ A @ x - b @ x, lambda x: A @ x - b, lambda x: A)


def rosenbrock(P):
    def f(x):
        return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    def g(x):
        gr = np.zeros_like(x)
        gr[:-1] = -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
        gr[1:] += 200 * (x[1:] - x[:-1] ** 2)
        return gr

    def H(x):
        n = len(x)
        h = np.zeros((n, n))
        for i in range(n - 1):
            h[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
            h[i, i + 1] += -400 * x[i]
            h[i + 1, i] += -400 * x[i]
            h[i + 1, i + 1] += 200
        return h
    return f, g, H


def logistic(P, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, P))
    y = (rng.random(40) < 0.5).astype(float)
    delta = 0.5

    def g(w):
        p = 1 / (1 + np.exp(-X @ w))
        return X.T @ (p - y) + delta * w

    def H(w):
        p = 1 / (1 + np.exp(-X @ w))
        return X.T @ (X * (p * (1 - p))[:, None]) + delta * np.eye(P)
    return None, g, H


def nonconvex(P):
    # sum_i sin(x_i) + 0.05 x_i^4 + 0.1 x_i x_{i+1}: several minima
    def g(x):
        gr = np.cos(x) + 0.2 * x ** 3
        gr[:-1] += 0.1 * x[1:]
        gr[1:] += 0.1 * x[:-1]
        return gr

    def H(x):
        h = np.diag(-np.sin(x) + 0.6 * x ** 2)
        for i in range(len(x) - 1):
            h[i, i + 1] += 0.1
            h[i + 1, i] += 0.1
        return h
    return None, g, H


FUNCTIONS = {
    "quadratic": (quad_fn, 6),
    "rosenbrock": (rosenbrock, 5),
    "logistic": (logistic, 7),
    "nonconvex": (nonconvex, 5),
}


def oracles_for(fn):
    _, g, H = fn
    return {"grad": g, "hess": H}


# ----------------------------------------------------------------- GD (Sec. 1.3.1)
@pytest.mark.parametrize("fname", sorted(FUNCTIONS))
def test_gd_matches_handwritten_gradient_descent(fname):
    mod = load_generated("gd")
    make, P = FUNCTIONS[fname]
    fn = make(P)
    rho = 1e-3 if fname == "rosenbrock" else 0.02
    x0 = np.linspace(-0.8, 0.9, P)
    state = mod.init(m=x0)
    ref = x0.copy()
    for _ in range(60):
        state = mod.step(state, oracles={"grad": fn[1]}, rho=rho)
        ref = ref - rho * fn[1](ref)             # theta <- theta - rho grad (Sec. 1.3.1)
    np.testing.assert_allclose(state["m"], ref, rtol=0, atol=1e-10)
    assert mod.STATE == ("m",) and mod.ORACLES == ("grad",) and mod.HYPERPARAMETERS == {"rho": 0.1}


def test_gd_does_not_mutate_its_input():
    mod = load_generated("gd")
    s0 = mod.init(m=np.ones(5))
    before = s0["m"].copy()
    s1 = mod.step(s0, oracles={"grad": lambda x: 2 * x}, rho=0.5)
    np.testing.assert_array_equal(s0["m"], before)
    np.testing.assert_allclose(s1["m"], np.zeros(5))


# ----------------------------------------------------------------- Newton (Sec. 1.3.2)
@pytest.mark.parametrize("fname", sorted(FUNCTIONS))
def test_newton_matches_handwritten_newton(fname):
    mod = load_generated("newton")
    make, P = FUNCTIONS[fname]
    fn = make(P)
    # the BLR needs S_{t+1} in Ω (positive definite): start where the Hessian is PD
    x0 = {"rosenbrock": np.full(P, 1.05) + 0.03 * np.eye(P)[0],
          "nonconvex": np.full(P, -1.3)}.get(fname, np.full(P, 0.3))
    state = mod.init(m=x0, S=np.eye(P))
    ref = x0.copy()
    for _ in range(8):
        prev = ref
        state = mod.step(state, oracles=oracles_for(fn))           # rho = 1 default
        ref = ref - np.linalg.solve(fn[2](ref), fn[1](ref))         # Eq. 8
        np.testing.assert_allclose(state["m"], ref, rtol=0, atol=1e-10)
        np.testing.assert_allclose(state["S"], fn[2](prev), rtol=0, atol=1e-10)   # S_{t+1} = Hessian at m_t


def test_online_newton_matches_eq12():
    mod = load_generated("newton")
    make, P = FUNCTIONS["logistic"]
    fn = make(P)
    rho = 0.3
    m, S = np.full(P, 0.2), 2.0 * np.eye(P)
    state = mod.init(m=m, S=S)
    for _ in range(25):
        state = mod.step(state, oracles=oracles_for(fn), rho=rho)
        S = (1 - rho) * S + rho * fn[2](m)                         # Eq. 12, precision
        m = m - rho * np.linalg.solve(S, fn[1](m))                  # Eq. 12, mean
    np.testing.assert_allclose(state["m"], m, rtol=0, atol=1e-10)
    np.testing.assert_allclose(state["S"], S, rtol=0, atol=1e-10)
    # converges to the MAP with the Hessian there as precision
    for _ in range(200):
        state = mod.step(state, oracles=oracles_for(fn), rho=rho)
    assert np.linalg.norm(fn[1](state["m"])) < 1e-10
    np.testing.assert_allclose(state["S"], fn[2](state["m"]), atol=1e-10)


# ----------------------------------------------------------------- preconditioned SGD (Eq. 35)
def test_sgd_preconditioned_matches_eq35():
    mod = load_generated("sgd_preconditioned")
    make, P = FUNCTIONS["quadratic"]
    fn = make(P)
    rng = np.random.default_rng(3)
    B = rng.normal(size=(P, P))
    S = B @ B.T + np.eye(P)
    m = rng.normal(size=P)
    state = mod.init(m=m, S=S)
    for _ in range(30):
        state = mod.step(state, oracles={"grad": fn[1]}, rho=0.2)
        m = m - 0.2 * np.linalg.solve(S, fn[1](m))
    np.testing.assert_allclose(state["m"], m, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(state["S"], S)        # the fixed precision is carried unchanged


# ----------------------------------------------------------------- diagonal online Newton (Eq. 37)
def test_online_newton_diag_matches_eq37():
    mod = load_generated("online_newton_diag")
    rng = np.random.default_rng(4)
    shape = (3, 4)                                       # mean-field: any array shape
    a = rng.uniform(0.5, 2.0, size=shape)
    c = rng.normal(size=shape)
    grad = lambda x: a * (x - c) + 0.1 * np.sin(x)
    hess = lambda x: a + 0.1 * np.cos(x)
    m, s = np.zeros(shape), np.ones(shape)
    state = mod.init(m=m, s=s)
    for _ in range(40):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, rho=0.25)
        s = (1 - 0.25) * s + 0.25 * hess(m)              # Eq. 37
        m = m - 0.25 * grad(m) / s
    np.testing.assert_allclose(state["m"], m, rtol=0, atol=1e-12)
    np.testing.assert_allclose(state["s"], s, rtol=0, atol=1e-12)


# ----------------------------------------------------------------- ridge (Sec. 1.3.3)
def test_ridge_one_step_is_the_closed_form():
    mod = load_generated("ridge")
    rng = np.random.default_rng(5)
    N, P = 30, 6
    X, y = rng.normal(size=(N, P)), rng.normal(size=N)
    delta = 0.7
    state = mod.init(m=rng.normal(size=P), S=np.eye(P) * 3.0)      # any starting point
    new = mod.step(state, data={"X": X, "y": y}, delta=delta)
    prec = X.T @ X + delta * np.eye(P)
    np.testing.assert_allclose(new["S"], prec, rtol=0, atol=1e-10)
    np.testing.assert_allclose(new["m"], np.linalg.solve(prec, X.T @ y), rtol=0, atol=1e-10)
    assert mod.DATA == ("X", "y") and "rho" not in mod.HYPERPARAMETERS


# ----------------------------------------------------------------- generated == symbolic update
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", RECIPES)
def test_generated_equals_symbolic_update(name, seed):
    """Evaluate the derivation's own program (definitions + updates, in dependency order) with sympy
    and compare with the generated module's step (blr_derive.verify.update.compare_update)."""
    from blr_derive.verify.update import compare_update
    recipe, D = derive_record(CATALOG / f"{name}.yaml")
    pairs = compare_update(recipe, D, load_generated(name), seed)
    assert len(pairs) == len(D.updates)
    for _, generated, symbolic in pairs:
        np.testing.assert_allclose(generated, symbolic, rtol=1e-10, atol=1e-12)
