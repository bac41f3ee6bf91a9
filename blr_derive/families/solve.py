"""The one solver for λ ↔ ordinary parameters: params = η⁻¹(λ) (and μ → params where a closed form exists), block
by block, each symbolic solution checked by a numerical round trip at random valid parameters.  Where no closed
form exists the map is numeric (``numeric.py``), with the damped Newton method the generated modules use."""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.core.budget import StepTimeout, step_limit
from blr_derive.core.errors import DerivationError
from blr_derive.core.matexpr import is_mat, simplify_mat, split_coeff


#: wall-clock limits (seconds) for sympy steps that can run away on unusual declarations
SOLVE_SECONDS = 20


def solve(exprs, targets, unknown_params, symmetric, fam=None, what=None):
    """Solve exprs[i](params) = targets[i] for the unknown parameters, block by block."""
    try:
        with step_limit(SOLVE_SECONDS):
            sol = solve_blocks(exprs, targets, unknown_params, symmetric, fam, what)
    except DerivationError:
        raise
    except StepTimeout as exc:
        raise DerivationError(f"the solver {exc}") from None
    except Exception as exc:  # sympy's solvers raise NotImplementedError and friends
        raise DerivationError(f"the solver failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") from None
    if fam is not None and not round_trips(fam, exprs, targets, sol):
        raise DerivationError("the symbolic solution does not reproduce the parameters numerically")
    return sol


def round_trips(fam, exprs, targets, sol, trials=3):
    """params → exprs(params) = targets → sol(targets) gives back params, at random valid parameters."""
    rng = np.random.default_rng(99)
    try:
        for _ in range(trials):
            vals = fam.sample_params(rng, 2)
            tv = {t: fam.evaluate(e, vals, 2) for t, e in zip(targets, exprs)}
            tv.update({p.symbol: vals[p.symbol] for p in fam.fixed_params})
            for s, e in sol.items():
                got = np.asarray(fam.evaluate(e, tv, 2), dtype=float)
                want = np.asarray(vals[s], dtype=float).reshape(got.shape)
                if not np.allclose(got, want, rtol=1e-8, atol=1e-10):
                    return False
    except (TypeError, ValueError, ZeroDivisionError):
        return False
    return True


#: a polynomial equation of higher degree than this (with more than two terms) has no solution in radicals in
#: general: sympy is not asked (it ground for the whole SOLVE_SECONDS on a 60-point support's μ(p))
MAX_RADICAL_DEGREE = 4


def _beyond_radicals(eqs, unknown) -> int | None:
    """The degree of an equation that is a polynomial (after clearing denominators) of degree above
    MAX_RADICAL_DEGREE with more than two terms in one unknown, or None."""
    for eq in eqs:
        num = sp.numer(sp.together(eq.lhs - eq.rhs))
        for u in unknown:
            try:
                poly = sp.Poly(num, u)
            except (sp.PolynomialError, sp.GeneratorsNeeded):
                continue
            if poly.degree() > MAX_RADICAL_DEGREE and len(poly.terms()) > 2:
                return poly.degree()
    return None


def _cancelled(e, unknown):
    """``e`` with numerator and denominator cancelled (sp.cancel) when it is a rational function of the unknowns
    and that makes it shorter, else ``e`` as it is."""
    if not e.is_rational_function(*unknown):
        return e
    c = sp.cancel(e)
    return c if sp.count_ops(c) < sp.count_ops(e) else e


def solve_blocks(exprs, targets, unknown_params, symmetric, fam=None, what=None):
    unknown = [p.symbol for p in unknown_params]
    if all(not is_mat(u) for u in unknown) and all(not is_mat(e) for e in exprs):
        # log(a) = t is a = e^t (log is one-to-one on the reals): a categorical's logits log(p_k/(1 − Σ_j p_j)) = λ_k
        # become p_k = e^{λ_k}(1 − Σ_j p_j), a linear system that sympy solves at once (the logarithms took it
        # 12 s at K = 9 and more than SOLVE_SECONDS from K = 10, though the docs allow K = 16)
        # a rational μ(p) is cancelled first where that shortens it: the categorical's derived μ_k, p_k/((1 − Σp)(Σ_j
        # p_j/(1 − Σp) + 1)), is p_k, which sympy's solve did not see within SOLVE_SECONDS from K = 12 (the map
        # fell back to Newton's method)
        eqs = [sp.Eq(e.args[0], sp.exp(t)) if isinstance(e, sp.log) else sp.Eq(_cancelled(e, unknown), t)
               for e, t in zip(exprs, targets)]
        degree = _beyond_radicals(eqs, unknown)
        if degree is not None:
            raise DerivationError(f"no closed form: the equations are polynomials of degree {degree} in the "
                                  "parameters (no solution in radicals)")
        if fam is not None:
            # sympy's own simplification and checking of every candidate (against the unknowns' assumptions) is
            # most of its time (von Mises: 1.2 s of 1.3 s); the numerical round trip is the check here, so the
            # unchecked candidates are simplified once each and the first that reproduces valid parameters is
            # kept; sympy's checked solve remains the fallback
            try:
                fast = sp.solve(eqs, unknown, dict=True, simplify=False, check=False)
            except NotImplementedError:
                fast = []
            for s in fast:
                if all(u in s for u in unknown):
                    s = {u: sp.simplify(s[u]) for u in unknown}
                    if round_trips(fam, exprs, targets, s):
                        return s
        sols = sp.solve(eqs, unknown, dict=True)
        sols = [s for s in sols if all(u in s for u in unknown)]
        if not sols:
            raise DerivationError("no solution found")
        sols = [{u: sp.simplify(s[u]) for u in unknown} for s in sols]
        if fam is not None and len(sols) > 1:
            # several branches: keep the one that reproduces valid parameters
            for s in sols:
                if round_trips(fam, exprs, targets, s):
                    return s
        return sols[0]
    solved: dict = {}
    remaining = list(range(len(exprs)))
    progress = True
    while remaining and progress:
        progress = False
        for i in list(remaining):
            e = simplify_mat(exprs[i].xreplace(solved), symmetric) if solved else exprs[i]
            unk = [u for u in unknown if u not in solved and e.has(u)]
            if len(unk) == 0:
                remaining.remove(i)
                progress = True
                continue
            if len(unk) == 1:
                solved[unk[0]] = isolate_block(e, targets[i], unk[0], symmetric)
                remaining.remove(i)
                progress = True
    missing = [u for u in unknown if u not in solved]
    if missing:
        raise DerivationError(f"could not solve for {', '.join(map(str, missing))}")
    return solved


def _collect_left(terms, p):
    """Σ_i c_i M_i p as (Σ_i c_i M_i) p when every term is a left multiple of p (M_i free of p, I when absent);
    None otherwise."""
    parts = []
    for t in terms:
        c, mats = split_coeff(t.args) if isinstance(t, sp.MatMul) else (sp.Integer(1), [t])
        if not mats or mats[-1] != p or any(m.has(p) for m in mats[:-1]) or c.has(p):
            return None
        left = mats[:-1]
        M = sp.MatMul(*left) if len(left) > 1 else (left[0] if left else sp.Identity(p.shape[0]))
        parts.append(sp.MatMul(c, M) if c != 1 else M)
    return sp.MatMul(sp.MatAdd(*parts), p)


def isolate_block(e, target, p, symmetric):
    """Solve e(p) = target for p when e = c*p + r, c*M*p + r or c*inv(p) + r."""
    if not is_mat(e):
        sol = sp.solve(sp.Eq(e, target), p)
        if len(sol) != 1:
            raise DerivationError(f"cannot isolate {p} in {e}")
        return sol[0]
    terms = e.args if isinstance(e, sp.MatAdd) else (e,)
    with_p = [t for t in terms if t.has(p)]
    rest = [t for t in terms if not t.has(p)]
    if not with_p:
        raise DerivationError(f"{p} does not appear in {e} (it is linear in {p}: no stationary point)"
                              if target == sp.ZeroMatrix(*target.shape) else f"{p} does not appear in {e}")
    if len(with_p) > 1:
        collected = _collect_left(with_p, p)
        if collected is None:
            raise DerivationError(f"{p} appears in more than one term of {e}")
        with_p = [collected]
    t = with_p[0]
    c, mats = split_coeff(t.args) if isinstance(t, sp.MatMul) else (sp.Integer(1), [t])
    rhs = target - sp.MatAdd(*rest) if rest else target
    rhs = simplify_mat(rhs * (1 / c) if c != 1 else rhs, symmetric)
    if mats == [p]:
        return rhs
    if len(mats) == 1 and mats[0] == sp.Inverse(p):
        return simplify_mat(sp.Inverse(rhs), symmetric)
    if mats[-1] == p and all(not m.has(p) for m in mats[:-1]):
        M = sp.MatMul(*mats[:-1]) if len(mats) > 2 else mats[0]
        return simplify_mat(sp.Inverse(M) * rhs, symmetric)
    raise DerivationError(f"cannot isolate {p} in {e}")
