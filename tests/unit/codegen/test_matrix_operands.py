"""The array printer's matrix chains read their right operand as one factor (codegen/arrays/printer.py
``_operand``).  A data sum's derivative is an elementwise vector printed as an arithmetic expression; after
``X.T @`` Python's left-to-right ``*``/``@`` made ``X.T @ 2*eta/(...)`` a matmul with the number 2 (a ValueError
at every step of a Student-t regression under the delta method, which ``check`` reported as "no random input
gave a finite symbolic update"), and after ``A *`` (a column scaling, diag(w)) a sum ``a + b`` added b to the
product (wrong numbers, silently broadcast)."""
from __future__ import annotations

import textwrap

import numpy as np

from blr_derive import api
from blr_derive.codegen.arrays.printer import _operand

STUDENT_T = textwrap.dedent("""\
    name: student_t_delta_unit
    family: gaussian_full
    loss:
      expression: sum(log1p((y - X*theta)**2/nu))*(nu + 1)/2 + 0.5*theta.T*theta
      data:
        X: {shape: [N, P]}
        y: {shape: [N]}
    approximations: [delta]
    hyperparameters:
      rho: 0.5
      nu: 3.0
    """)


def test_operands_are_grouped_where_python_would_read_another_product():
    assert _operand("2*eta/(nu*(eta**2/nu + 1))", "@") == "(2*eta/(nu*(eta**2/nu + 1)))"
    assert _operand("-4*eta**2/c + 2/d", "*") == "(-4*eta**2/c + 2/d)"
    assert _operand("A @ b", "*") == "(A @ b)"
    assert _operand("w if flag else v", "@") == "(w if flag else v)"
    # already one factor: left as printed (byte-identical catalog)
    for text in ("eta", "numpy.exp(eta)", "X.T", "(a + b)", "-eta", "eta**2", "scipy.special.expit(eta)"):
        assert _operand(text, "@") == text and _operand(text, "*") == text
    assert _operand("A @ B", "@") == "A @ B"                 # a matrix product is associative
    assert _operand("a*b/c", "*") == "a*b/c"                 # so is an elementwise product after a column scaling
    assert _operand("(a) + (b)", "*") == "((a) + (b))"
    # the left operand of a chain: only a looser operator needs the group ('a + b @ X' is a + (b @ X))
    assert _operand("a + b", "first") == "(a + b)"
    assert _operand("2*eta/c", "first") == "2*eta/c" and _operand("X.T", "first") == "X.T"


def test_student_t_regression_under_delta_is_newtons_step_on_its_gradient_and_hessian():
    """ℓ = (ν+1)/2 Σ log(1 + r_n²/ν) + ½θᵀθ, r = y − Xθ: ∇ℓ = −Xᵀ((ν+1)r/(ν + r²)) + θ and
    ∇²ℓ = Xᵀdiag((ν+1)(ν − r²)/(ν + r²)²)X + I at the mean; S ← (1−ρ)S + ρ∇²ℓ, m ← m − ρS⁻¹∇ℓ (Eqs. 12-13)."""
    mod = api.derive(STUDENT_T).compile("numpy")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(9, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3 * rng.standard_t(3, size=9)
    nu, rho = 3.0, 0.5
    m, S = np.zeros(3), 10 * np.eye(3)
    state = mod.init(m=m, S=S)
    for _ in range(8):
        r = y - X @ m
        g = -X.T @ ((nu + 1) * r / (nu + r * r)) + m
        H = (X.T * ((nu + 1) * (nu - r * r) / (nu + r * r) ** 2)) @ X + np.eye(3)
        S = (1 - rho) * S + rho * H
        m = m - rho * np.linalg.solve(S, g)
        state = mod.step(state, data={"X": X, "y": y}, rho=rho, nu=nu)
        assert np.max(np.abs(state["S"] - S)) <= 1e-12 * np.max(np.abs(S))
        assert np.max(np.abs(state["m"] - m)) <= 1e-12 * max(1.0, np.max(np.abs(m)))
    assert np.max(np.abs(m - np.array([1.0, -2.0, 0.5]))) < 0.5      # moved from 0 to near the generating weights


def test_check_passes_the_student_t_recipe_and_compares_it():
    from blr_derive.verify.recipe import check_recipe_updates
    checks = {c.name: c for c in check_recipe_updates(api.recipe(STUDENT_T))}
    c = checks["generated update vs symbolic update"]
    assert c.value <= 1e-12 and "3 random inputs" in c.note


QUARTIC = textwrap.dedent("""\
    name: quartic_exact_unit
    family: gaussian_full
    loss:
      expression: 0.25*(theta.T*theta - 1)**2 - b.T*theta
      data:
        b: {shape: [P]}
    approximations: [exact]
    hyperparameters:
      rho: 0.3
    """)


def test_a_quadratic_form_is_grouped_as_a_power_base_and_as_a_divisor():
    """A 1×1 trace prints as a product chain (``m @ S @ m``), which sympy takes for an atom: as the base of a power
    it printed ``m @ m**2`` (m @ (m**2), the sum of the cubes) and as a divisor ``x/m @ m`` ((x/m) @ m)."""
    import sympy as sp
    from blr_derive.codegen.arrays.printer import ArrayPrinter
    P = sp.Symbol("P", integer=True, positive=True)
    m, S, x = sp.MatrixSymbol("m", P, 1), sp.MatrixSymbol("S", P, P), sp.Symbol("x")
    t, u = sp.Trace(m.T * m), sp.Trace(m.T * S * m)
    printed = {e: ArrayPrinter().doprint(e) for e in (t**2, x / t, 2 * t / u, x**t, u**2, x / t**2)}
    assert list(printed.values()) == ["(m @ m)**2", "x/(m @ m)", "2*m @ m/(m @ S @ m)", "x**(m @ m)",
                                      "(m @ S @ m)**2", "x/(m @ m)**2"]
    mv, Sv, xv = np.array([0.5, -2.0, 1.5]), np.array([[2.0, 0.3, 0], [0.3, 1.0, 0.2], [0, 0.2, 3.0]]), 1.7
    values = [float(eval(text, {"m": mv, "S": Sv, "x": xv})) for text in printed.values()]
    q, r = mv @ mv, mv @ Sv @ mv
    np.testing.assert_allclose(values, [q**2, xv / q, 2 * q / r, xv**q, r**2, xv / q**2], rtol=1e-14)
    # names, calls, powers and sums are grouped as sympy groups them (the printed forms that were right stay)
    y = sp.Symbol("y")
    assert [ArrayPrinter().doprint(e) for e in (x / (x + 1), x**-2, 1 / (x * y), -x**2, sp.exp(t) / y)] == \
        ["x/(x + 1)", "x**(-2.0)", "1/(x*y)", "-x**2", "numpy.exp(m @ m)/y"]


def test_quartic_objective_under_exact_is_isserlis():
    """E_q[¼(θᵀθ − 1)² − bᵀθ] under N(m, S⁻¹) by Isserlis' theorem: with q = mᵀm + tr Σ,
    E[(θᵀθ)²] = q² + 2 tr Σ² + 4 mᵀΣm.  The objective printed ``(1/4)*m @ m**2`` for ¼(mᵀm)² (0.025 off at
    check's random states)."""
    mod = api.derive(QUARTIC).compile("numpy")
    b = np.array([0.3, -0.2])
    m, S = np.array([1.2, -0.7]), np.array([[3.0, 0.5], [0.5, 2.0]])
    Sig = np.linalg.inv(S)
    q = m @ m + np.trace(Sig)
    expected = 0.25 * (q**2 + 2 * np.trace(Sig @ Sig) + 4 * m @ Sig @ m - 2 * q + 1) - b @ m
    entropy = 0.5 * np.log(np.linalg.det(2 * np.pi * np.e * Sig))
    out = mod.objective(mod.init(m=m, S=S), data={"b": b})
    np.testing.assert_allclose(out["expected_loss"], expected, rtol=1e-14)
    np.testing.assert_allclose(out["objective"], expected - entropy, rtol=1e-14)
