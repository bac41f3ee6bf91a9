"""kronecker_vec (Magnus & Neudecker Thm. 2.2): (L ⊗ R) vec(V) = vec(R V Lᵀ), (L ⊗ R)⁻¹ = L⁻¹ ⊗ R⁻¹.

Checked numerically on the engine's interpreter of the full-Gaussian program (blr_derive/rules/kronecker.py) and
on the derived mean update: unvec((A ⊗ G)⁻¹ vec(V)) against a dense solve with numpy.kron."""
import numpy as np
import sympy as sp

from blr_derive import api
from kronecker_recipes import FULL, recipe_text
from blr_derive.rules.kronecker import Kron, interpret_vector

R_, C_ = 3, 2


def vec(W):
    return W.reshape(-1, order="F")


def test_interpreter_applies_the_identities():
    rows, cols = sp.Integer(R_), sp.Integer(C_)
    A, G = sp.MatrixSymbol("A", cols, cols), sp.MatrixSymbol("G", rows, rows)
    L, V = sp.MatrixSymbol("L", cols, cols), sp.MatrixSymbol("V", rows, cols)
    P = sp.Integer(R_ * C_)
    S, H, v = sp.MatrixSymbol("S", P, P), sp.MatrixSymbol("H", P, P), sp.MatrixSymbol("v", P, 1)
    env = {S: Kron([(1, A, G)]), H: Kron([(2, L, G)]), v: V}
    expr = sp.MatMul(sp.Inverse(S), v) + sp.MatMul(3, H, v)
    got = interpret_vector(expr, env, {A, G})
    rng = np.random.default_rng(0)
    QA, QG = rng.normal(size=(C_, C_)), rng.normal(size=(R_, R_))
    vals = {A: QA @ QA.T + np.eye(C_), G: QG @ QG.T + np.eye(R_), L: rng.normal(size=(C_, C_)),
            V: rng.normal(size=(R_, C_))}
    num = sp.lambdify(list(vals), got.doit(), "numpy")(*vals.values())
    dense = (np.linalg.solve(np.kron(vals[A], vals[G]), vec(vals[V]))
             + 6 * np.kron(vals[L], vals[G]) @ vec(vals[V]))
    np.testing.assert_allclose(vec(np.asarray(num, dtype=float)), dense, rtol=1e-12)


def test_the_derived_mean_step_never_forms_the_P_by_P_precision():
    mod = api.derive(recipe_text(FULL)).compile("numpy")
    rng = np.random.default_rng(2)
    X, b, g, M = (rng.normal(size=(5, C_)), rng.normal(size=(4, R_)), rng.normal(size=(R_, C_)),
                  rng.normal(size=(R_, C_)))
    out = mod.step(mod.init(M=M, A=np.eye(C_), G=np.eye(R_)),
                   oracles={"grad": lambda W: g, "activations": lambda W: X, "output_grads": lambda W: b},
                   rho=0.7, ess=2.0, delta=0.3, pi=1.5)
    S_new = np.kron(out["A"], out["G"])
    dense = vec(M) - 0.7 * np.linalg.solve(S_new, vec(2.0 * g + 0.3 * M))
    np.testing.assert_allclose(vec(out["M"]), dense, rtol=1e-12)
    assert "kron" not in "\n".join(mod.EQUATIONS)
