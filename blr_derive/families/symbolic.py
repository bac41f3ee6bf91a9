"""Symbolic helpers of the family engine: substitution, safe log expansion, tidying, log-gamma forms, and exact
numerical evaluation of expressions (infinite sums summed until negligible)."""
from __future__ import annotations

import functools

import mpmath
import numpy as np
import sympy as sp

from blr_derive.core.errors import DerivationError
from blr_derive.core.matexpr import is_mat
from blr_derive.families.numint import numeric_integrals


#: sympy's simplify is super-linear in the size of an expression: one with more operations than this (the von
#: Mises-Fisher's Bessel ratios in |λ|: 320; the GIG's Fisher information in its natural gradient: thousands) is kept
#: as it is — deterministic, unlike a time limit, so the generated code stays byte-identical; every catalog
#: derivation's simplifications are below it
SIMPLIFY_MAX_OPS = 250


@functools.lru_cache(maxsize=4096)
def simplify_bounded(e):
    """sympy.simplify(e) for an expression of at most SIMPLIFY_MAX_OPS operations, else e unchanged.  Remembered
    per expression (simplify is a function of its argument): a Fisher information repeats its entries (all the
    off-diagonal entries of a Dirichlet's are −ψ'(Σ_j a_j)), and a family is loaded at several sizes."""
    if sp.count_ops(e) > SIMPLIFY_MAX_OPS:
        return e
    if isinstance(e, sp.Expr) and len(e.atoms(sp.exp)) > EXP_ATOMS_TOGETHER:
        e = sp.cancel(sp.together(e))
    return sp.simplify(e)


#: an expression with more distinct exponentials than this is brought over one denominator (sympy's together, then
#: cancel) before simplify: the Fisher information of a family over a finite support, ∂²/∂λ² of log Σ_i e^{λ·T_i}
#: (Eq. 4's F = ∇²A), is a sum of ratios of such sums, and simplify's own rewritings of it expanded products of
#: e^{a+b} factors for 10-20 s an entry (two coupled ±1 spins, T = (s1, s2, s1·s2): 118 s for its Fisher
#: information, past the default time limit; 0.2-0.4 s an entry from the common denominator, with the same
#: simplified result)
EXP_ATOMS_TOGETHER = 3


def factor_repeated_denominator(e):
    """``e`` with its polynomial denominator factored where the factors repeat: sympy's simplify expands
    (4λ₃λ₄ − λ₅²)³, the Fisher information's denominator of a bivariate Gaussian, into 64λ₃³λ₄³ − 48λ₃²λ₄²λ₅² + …,
    whose terms cancel to 1e-17 of their size near a singular precision (F₃₃ = −1.8e10 in float64 where it is 5.0e11
    at a correlation of 1 − 1e-6); the factored cube loses only the rounding of the factor.  Unchanged otherwise
    (no denominator, not a polynomial, a denominator of more than 200 operations, or no repeated factor)."""
    if not isinstance(e, sp.Expr):
        return e
    n, d = sp.fraction(e)
    if d == 1 or d.is_Atom or sp.count_ops(d) > 200 or not d.is_polynomial():
        return e
    fd = sp.factor(d)
    if not any(isinstance(f, sp.Pow) and f.exp.is_Integer and f.exp > 1 and not f.base.is_Atom
               for f in sp.Mul.make_args(fd)):
        return e
    return n / fd


def subs(e, mapping):
    return e.xreplace(mapping) if mapping else e


def safe_expand_log(e):
    """Expand logarithms only where it is valid: each log's argument is first cancelled
    (log(x/y) with x, y < 0 must not become log(x) - log(y)), then split by assumptions."""
    if not isinstance(e, sp.Basic) or not e.has(sp.log):
        return e
    reps = {}
    for lg in e.atoms(sp.log):
        a = lg.args[0]
        if a.has(sp.Trace, sp.Determinant) or a.is_Atom:
            continue
        c = sp.factor(sp.cancel(a))
        if c != a:
            reps[lg] = sp.log(c)
    e = e.xreplace(reps) if reps else e
    return sp.expand_log(e, force=False)


def tidy(e):
    if is_mat(e):
        return e
    e = safe_expand_log(e) if e.has(sp.log) else e
    if e.has(sp.Sum):
        return e
    if sp.count_ops(e) >= 80 or e.has(sp.Trace):
        # kept as derived: expanding a large sum of terms such as C(n, k) p^k (1 − p)^(n−k) log C(n, k) into
        # monomials cancels catastrophically in floating point (the binomial entropy at n = 25 came out −26)
        return e
    return sp.simplify(e)


def loggamma_form(e):
    """log Γ(x) → loggamma(x), log x! → loggamma(x + 1) (numerically stable, differentiable)."""
    if not isinstance(e, sp.Basic) or not e.has(sp.log):
        return e
    reps = {}
    for lg in e.atoms(sp.log):
        a = lg.args[0]
        if isinstance(a, sp.gamma):
            reps[lg] = sp.loggamma(a.args[0])
        elif isinstance(a, sp.factorial):
            reps[lg] = sp.loggamma(a.args[0] + 1)
    return e.xreplace(reps) if reps else e


def _replacements(values: dict, dims: dict | None) -> dict:
    """:func:`evaluate`'s substitution: 30-digit Floats for numbers, explicit matrices for arrays, integers for
    dimensions."""
    reps = {}
    for k, v in values.items():
        if is_mat(k):
            arr = np.asarray(v, dtype=float)
            if arr.ndim == 1:
                arr = arr.reshape(-1, 1)
            reps[k] = sp.ImmutableMatrix(arr.tolist())
        else:
            reps[k] = sp.Float(float(v), 30)
    for k, v in (dims or {}).items():
        reps[k] = sp.Integer(v)
    return reps


def evaluator(expr, constants: dict, dims: dict | None = None):
    """``lambda values: evaluate(expr, {**constants, **values}, dims)``, with ``constants`` (the data, the
    hyperparameters) substituted and the sums over the data worked out once, where that is sound: ``expr`` holds
    no infinite sum or integral (they are summed or integrated only with every symbol a number).  A check that
    differentiates E_q[ℓ] by central differences evaluates it at 2·|μ| points per draw, and substituting five data
    vectors into eight enumerated support points each time was 0.4 s an evaluation (binary-weight logistic
    regression: 113 s of its check); the values are the same 30-digit numbers."""
    def whole(values):
        return evaluate(expr, {**constants, **values}, dims)
    if not isinstance(expr, sp.Basic) or expr.has(sp.Sum, sp.Integral):
        return whole
    try:
        pre = _value(expr.xreplace(_replacements(constants, dims)))
    except (TypeError, ValueError, ArithmeticError, NotImplementedError):
        return whole                # worked out only with every symbol a number, as before
    sizes = {k: sp.Integer(v) for k, v in (dims or {}).items()}
    # a matrix symbol's shape in ``pre`` has its dimensions substituted too: the keys given later are renamed alike
    return lambda values: evaluate(pre, {k.xreplace(sizes) if sizes and is_mat(k) else k: v
                                         for k, v in values.items()})


def evaluate(expr, values: dict, dims: dict | None = None):
    """Numerically evaluate ``expr`` with ``values`` (numpy arrays for matrix symbols)."""
    e = _value(expr.xreplace(_replacements(values, dims)))
    if isinstance(e, sp.MatrixBase) or is_mat(e):
        e = sp.Matrix(e).evalf(30)
        arr = np.array(e.tolist(), dtype=float)
        return arr
    return float(sp.N(e, 30))


def _value(e):
    """An expression with every symbol replaced by its value, worked out: infinite sums summed, integrals over one
    variable integrated (``numint.py``), matrix functions
    (:func:`_matrix_functions`) and inverses of numeric matrices evaluated, then ``doit``."""
    e = numeric_infinite_sums(e)
    e = numeric_integrals(e)
    e = _matrix_functions(e)
    if e.has(sp.Inverse):          # inverses of numeric matrices by LU (sympy's default elimination is far slower)
        e = e.replace(lambda n: isinstance(n, sp.Inverse) and not n.free_symbols and not n.atoms(sp.MatrixSymbol),
                      _numeric_inverse)
    return e.doit()


@functools.lru_cache(maxsize=4096)
def _numeric_inverse(n):
    """The value of Inverse(M) for a numeric M: LU in mpmath at :data:`DIGITS` digits (the working precision of
    sympy's LU on 30-digit Floats, about 100 times faster; partial pivoting).  A matrix with an entry that is not
    a finite real number at that precision, or one that mpmath finds singular, goes through sympy's LU as before
    (the same result or the same error).  Values are remembered by the (immutable) node, the 4096 latest: the
    Fisher information's columns and the hunt's quantities at one point invert the same λ block many times."""
    return _numeric_inverse_of(n)


def _numeric_inverse_of(n):
    m = sp.Matrix(n.arg.doit())
    try:
        with mpmath.workdps(DIGITS):
            A = mpmath.matrix(m.rows, m.cols)
            for k, x in enumerate(m):
                v = sp.Float(sp.N(x, DIGITS), DIGITS)
                if not v.is_finite:
                    raise ValueError
                A[k // m.cols, k % m.cols] = mpmath.mpf(v)
            inv = mpmath.inverse(A)
            out = [sp.Float(inv[i, j], DIGITS) for i in range(m.rows) for j in range(m.cols)]
    except (TypeError, ValueError, ZeroDivisionError):
        return sp.ImmutableMatrix(m.inv(method="LU"))
    return sp.ImmutableMatrix(m.rows, m.cols, out)


#: the working precision (digits) of :func:`evaluate`
DIGITS = 30


def _is_matrix_function(n) -> bool:
    """A node that defines its numeric value (a rule's matrix function such as expm), with numeric arguments."""
    return callable(getattr(type(n), "numeric_value", None)) and not n.free_symbols


def _matrix_functions(e):
    """Nodes with a ``numeric_value(*args)`` method (a rule's matrix functions: the matrix exponential, an entrywise
    exponential ...) replaced by their values, innermost first: each argument is worked out (:func:`_value`) and
    handed over as an mpmath matrix (or number) at :data:`DIGITS` digits; the result comes back as an explicit
    matrix (or number)."""
    if not isinstance(e, sp.Basic) or not any(_is_matrix_function(n) for n in sp.preorder_traversal(e)):
        return e

    def walk(n):
        if _is_matrix_function(n):
            with mpmath.workdps(DIGITS):
                out = n.numeric_value(*[_to_mpmath(_value(a)) for a in n.args])
                if isinstance(out, mpmath.matrix):
                    return sp.ImmutableMatrix(out.rows, out.cols,
                                              [sp.Float(out[i, j], DIGITS) for i in range(out.rows)
                                               for j in range(out.cols)])
                return sp.Float(out, DIGITS)
        if n.is_Atom or not n.args:
            return n
        args = [walk(a) for a in n.args]
        return n.func(*args) if any(a is not b for a, b in zip(args, n.args)) else n
    return walk(e)


def _to_mpmath(v):
    if isinstance(v, sp.MatrixBase) or is_mat(v):
        m = sp.Matrix(v).evalf(DIGITS)
        return mpmath.matrix([[mpmath.mpf(sp.Float(x, DIGITS)) for x in row] for row in m.tolist()])
    return mpmath.mpf(sp.Float(sp.N(v, DIGITS), DIGITS))


def numeric_infinite_sums(e):
    """Replace Σ_{k=a}^{∞} f(k) with numeric f by its value.  Terms are evaluated in floating point, and those that
    are not finite there (Γ(k + r)/Γ(k + 1) overflows past k ≈ 171 although the product with the pmf is tiny) again
    in 50-digit arithmetic, never dropped; summation stops when the terms decrease geometrically and the bound
    |f(k)| r/(1 − r) on the tail (r the largest ratio of successive terms in the last block) is below 1e-16 of the
    sum.  A term that stays non-finite, or a series that does not settle, is a DerivationError."""
    if not isinstance(e, sp.Basic) or not e.has(sp.Sum):
        return e
    reps = {}
    for s in e.atoms(sp.Sum):
        if len(s.limits) != 1:
            continue
        k, lo, hi = s.limits[0]
        if hi != sp.oo or not lo.is_Integer or (s.function.free_symbols - {k}):
            continue
        reps[s] = sp.Float(_series_value(loggamma_form(s.function), k, int(lo)), 30)
    return e.xreplace(reps)


#: terms of an infinite series summed at most (in blocks of growing size): about a second of numpy
MAX_SERIES_TERMS = 1 << 21


def _series_value(term, k, start):
    f = sp.lambdify([k], term, modules=["scipy", "numpy"])
    precise = None
    total, block = 0.0, 256
    while start < MAX_SERIES_TERMS:
        ks = np.arange(start, start + block, dtype=float)
        with np.errstate(all="ignore"):
            vals = np.asarray(f(ks), dtype=float) * np.ones_like(ks)
        bad = ~np.isfinite(vals)
        if bad.any():
            if precise is None:
                precise = sp.lambdify([k], term, modules="mpmath")
            with mpmath.workdps(50):
                vals[bad] = [float(precise(mpmath.mpf(int(x)))) for x in ks[bad]]
            if not np.all(np.isfinite(vals)):
                raise DerivationError(f"the series Σ {sp.sstr(term)} has a term that is not finite")
        total += float(vals.sum())
        tail = np.abs(vals[-17:])
        with np.errstate(all="ignore"):
            ratios = tail[1:] / tail[:-1]
        r = float(np.nanmax(ratios)) if np.any(tail > 0) else 0.0
        if tail[-1] == 0.0 or (r < 1.0 and tail[-1] * r / (1.0 - r) <= 1e-16 * max(1.0, abs(total))):
            return total
        start += block
        block *= 2
    raise DerivationError(f"the series Σ {sp.sstr(term)} did not settle (terms are not summable in double precision)")
