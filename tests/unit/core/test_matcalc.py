"""Matrix differential calculus (blr_derive.core.matcalc) against finite differences.

Every gradient is evaluated at random numeric values with concrete dimensions and
compared with central finite differences of the function itself.  For a matrix
variable declared symmetric the engine returns the symmetric gradient G, i.e. the
one with d f = tr(Gᵀ D) for every symmetric direction D; it is checked along the
symmetric basis directions E_ii and E_ij + E_ji.
"""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from blr_derive.core import matcalc, matexpr
from blr_derive.families.symbolic import evaluate

n = sp.Symbol("n", integer=True, positive=True)
X = sp.MatrixSymbol("X", n, n)
A = sp.MatrixSymbol("A", n, n)
B = sp.MatrixSymbol("B", n, n)
C = sp.MatrixSymbol("C", n, n)
a = sp.MatrixSymbol("a", n, 1)
b = sp.MatrixSymbol("b", n, 1)
x = sp.MatrixSymbol("x", n, 1)
c = sp.Symbol("c", real=True)

logdet = sp.log(sp.Determinant(X))

# id -> (scalar function, variables to differentiate)
FUNCTIONS = {
    "tr(AX)": (sp.Trace(A * X), [X, A]),
    "a'X^-1a": (a.T * X.I * a, [X, a]),
    "logdetX": (logdet, [X]),
    "x'Ax": (x.T * A * x, [x, A]),
    "tr(X^-1BX)": (sp.Trace(X.I * B * X), [X, B]),
    "tr(X^-1BXC)": (sp.Trace(X.I * B * X * C), [X, B, C]),
    "a'Xb": (a.T * X * b, [X, a, b]),
    "tr(X'A)": (sp.Trace(X.T * A), [X]),
    "tr(XAXB)": (sp.Trace(X * A * X * B), [X]),
    "tr(XAX'B)": (sp.Trace(X * A * X.T * B), [X]),
    "exp(c)tr(AX)+c^2logdetX": (sp.exp(c) * sp.Trace(A * X) + c**2 * logdet, [X, c]),
    "tr(AX)*a'X^-1a": (sp.Trace(A * X) * sp.Trace(a.T * X.I * a), [X]),
}

CASES = [(fid, sym, k) for fid in FUNCTIONS for sym in (False, True) for k in (2, 3)]
IDS = [f"{fid}-{'sym' if sym else 'nonsym'}-n{k}" for fid, sym, k in CASES]


def random_values(k, symmetric, seed):
    rng = np.random.default_rng(seed)
    if symmetric:
        R = rng.normal(size=(k, k))
        Xv = R @ R.T / k + 0.7 * np.eye(k)                 # symmetric positive definite
    else:
        Xv = 2.0 * np.eye(k) + 0.4 * rng.normal(size=(k, k))  # non-symmetric, det > 0
        assert np.linalg.det(Xv) > 0
        assert not np.allclose(Xv, Xv.T)
    vals = {
        X: Xv,
        A: rng.normal(size=(k, k)),
        B: rng.normal(size=(k, k)),
        C: rng.normal(size=(k, k)),
        a: rng.normal(size=(k, 1)),
        b: rng.normal(size=(k, 1)),
        x: rng.normal(size=(k, 1)),
        c: float(rng.normal()),
    }
    return vals


def scalar_value(expr, vals, k):
    v = np.asarray(evaluate(expr, vals, {n: k}), dtype=float)
    assert v.size == 1
    return float(v.reshape(-1)[0])


def fd_gradient(expr, vals, var, k, symmetric, eps=1e-6):
    def at(delta):
        v = dict(vals)
        v[var] = vals[var] + delta
        return scalar_value(expr, v, k)

    if not matexpr.is_mat(var):
        return (at(eps) - at(-eps)) / (2 * eps)
    base = np.asarray(vals[var], dtype=float)
    G = np.zeros_like(base)
    rows, cols = base.shape
    for i in range(rows):
        for j in range(cols):
            E = np.zeros_like(base)
            if symmetric:
                if j < i:
                    continue
                E[i, j] = E[j, i] = 1.0
            else:
                E[i, j] = 1.0
            d = (at(eps * E) - at(-eps * E)) / (2 * eps)
            if symmetric and i != j:
                G[i, j] = G[j, i] = d / 2
            else:
                G[i, j] = d
    return G


@pytest.mark.parametrize("fid,symmetric,k", CASES, ids=IDS)
def test_gradient_matches_finite_differences(fid, symmetric, k):
    expr, wrt = FUNCTIONS[fid]
    sym = [X] if symmetric else []
    grads = matcalc.gradient(expr, wrt, symmetric=sym)
    assert len(grads) == len(wrt)
    vals = random_values(k, symmetric, seed=CASES.index((fid, symmetric, k)))
    for var, g in zip(wrt, grads):
        got = evaluate(g, vals, {n: k})
        want = fd_gradient(expr, vals, var, k, symmetric and var in sym)
        if matexpr.is_mat(var):
            got = np.asarray(got, dtype=float)
            assert got.shape == np.shape(vals[var])
            if var in sym:
                np.testing.assert_allclose(got, got.T, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=f"d/d{var} of {fid}: engine {g}")


# ---------------------------------------------------------------------------
# Closed forms (independent of finite differences)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("symmetric", [False, True])
def test_textbook_gradients(symmetric):
    k = 3
    vals = random_values(k, symmetric, seed=99)
    Xv, Av, av, xv = vals[X], vals[A], vals[a], vals[x]
    Xi = np.linalg.inv(Xv)
    sym = [X] if symmetric else []

    def g(expr, var):
        return np.asarray(evaluate(matcalc.gradient(expr, [var], symmetric=sym)[0], vals, {n: k}), dtype=float)

    sym_part = (lambda M: 0.5 * (M + M.T)) if symmetric else (lambda M: M)
    np.testing.assert_allclose(g(sp.Trace(A * X), X), sym_part(Av.T), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g(a.T * X.I * a, X), sym_part(-Xi.T @ av @ av.T @ Xi.T), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(g(logdet, X), sym_part(Xi.T), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(g(x.T * A * x, x), (Av + Av.T) @ xv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g(sp.Trace(X.I * B * X), X), np.zeros((k, k)), atol=1e-12)
    np.testing.assert_allclose(g(sp.Trace(X.I * B * X), B), np.eye(k), atol=1e-12)


def test_scalar_variables_use_ordinary_derivative():
    s, t = sp.symbols("s t", real=True)
    f = s**2 * t + sp.log(t) * sp.exp(s)
    gs, gt = matcalc.gradient(f, [s, t])
    assert sp.simplify(gs - (2 * s * t + sp.log(t) * sp.exp(s))) == 0
    assert sp.simplify(gt - (s**2 + sp.exp(s) / t)) == 0


def test_gradient_of_constant_is_zero():
    g = matcalc.gradient(sp.Trace(A * B), [X])[0]
    assert np.allclose(np.asarray(evaluate(g, random_values(2, False, 1), {n: 2}), dtype=float), 0.0)


# ---------------------------------------------------------------------------
# simplify_mat preserves values
# ---------------------------------------------------------------------------

SIMPLIFY = {
    "(AB)'": ((A * B).T, []),
    "(X^-1)^-1": (X.I.I, []),
    "(2AX)^-1": ((2 * A * X).I, []),
    "X X^-1 A": (X * X.I * A, []),
    "(X'A)' sym": ((X.T * A).T, [X]),
    "(X^-1)' sym": (X.I.T, [X]),
    "(X^-1)' nonsym": (X.I.T, []),
    "(A X^-1)' nonsym": ((A * X.I).T, []),
    "tr(X^-1 A X)": (sp.Trace(X.I * A * X), []),
    "A + 2A - A'": (A + 2 * A - A.T, []),
}


@pytest.mark.parametrize("sid", list(SIMPLIFY))
def test_simplify_mat_preserves_value(sid):
    expr, sym = SIMPLIFY[sid]
    vals = random_values(3, bool(sym), seed=7)
    simp = matexpr.simplify_mat(expr, sym)
    np.testing.assert_allclose(np.asarray(evaluate(simp, vals, {n: 3}), dtype=float),
                               np.asarray(evaluate(expr, vals, {n: 3}), dtype=float), rtol=1e-12, atol=1e-12)
