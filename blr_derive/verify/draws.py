"""Draws of a family's declared matrix sampler (or of a sampler of components with different shapes), evaluated on
stacks of matrices with numpy, and the sufficient statistics at such draws through the check's coordinates."""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.core.matexpr import is_mat
from blr_derive.core.nodes import BartlettDraw, Cholesky, NormalVectorDraw
from blr_derive.families.numeric import MODULES
from blr_derive.spec.sampler import NORMAL_DRAWS, UNIFORM_DRAWS


def draw_matrix_sampler(fam, vals, rng, n, d):
    """n draws (n, P, P) of a matrix family's declared sampler at ``vals`` (for components of several shapes, a
    list of draws per component, (n, P, 1) for a vector and (n,) for a scalar), evaluated on stacks of matrices
    with numpy (an evaluator of its own: products, sums, transposes, inverses, chol, Bartlett draws A with A_ii =
    √χ²(ν − i + 1) and N(0, 1) below the diagonal, normal vectors, and the scalar draws u, z)."""
    draws = {}

    def ev(e):
        if isinstance(e, NormalVectorDraw):
            if e not in draws:
                draws[e] = rng.standard_normal((n, int(ev(e.args[0])), 1))
            return draws[e]
        if isinstance(e, sp.Symbol) and e.name in UNIFORM_DRAWS + NORMAL_DRAWS and e not in vals:
            if e not in draws:
                draws[e] = (rng.random(n) if e.name in UNIFORM_DRAWS else rng.standard_normal(n))[:, None, None]
            return draws[e]
        if isinstance(e, BartlettDraw):
            if e not in draws:
                nu, P = float(ev(e.args[0])), int(ev(e.args[1]))
                A = np.zeros((n, P, P))
                for i in range(P):
                    A[:, i, i] = np.sqrt(rng.chisquare(nu - i, size=n))
                    A[:, i, :i] = rng.standard_normal((n, i))
                draws[e] = A
            return draws[e]
        if isinstance(e, sp.MatrixSymbol):
            return np.asarray(vals[e], dtype=float).reshape(d, -1)
        if isinstance(e, sp.Symbol) and e in vals:
            return np.asarray(vals[e], dtype=float)
        if isinstance(e, Cholesky):
            return np.linalg.cholesky(ev(e.args[0]))
        if isinstance(e, sp.Transpose):
            return np.swapaxes(ev(e.arg), -1, -2)
        if isinstance(e, sp.Inverse) or (isinstance(e, sp.MatPow) and e.args[1] == -1):
            return np.linalg.inv(ev(e.args[0]))
        if isinstance(e, (sp.MatMul, sp.Mul)):
            out, out_mat = 1.0, False
            for a in e.args:           # matrix factors multiply as matrices, scalars (arrays of draws too) entrywise
                x = ev(a)
                out = np.matmul(out, x) if out_mat and is_mat(a) else out * x
                out_mat = out_mat or is_mat(a)
            return out
        if isinstance(e, (sp.MatAdd, sp.Add)):
            return sum(ev(a) for a in e.args)
        if not e.free_symbols:
            return float(e)
        drawn = sorted((s for s in e.free_symbols if s.name in UNIFORM_DRAWS + NORMAL_DRAWS and s not in vals), key=str)
        if drawn and not is_mat(e):       # a scalar of the draws (an inverse CDF of u): numpy over the n draws
            params = sorted((s for s in e.free_symbols if s not in drawn), key=str)
            f = sp.lambdify(drawn + params, e, modules=MODULES)
            with np.errstate(all="ignore"):
                return np.asarray(f(*[ev(s) for s in drawn], *[vals[s] for s in params]), dtype=float)
        return float(fam.evaluate(e, vals, d))
    if fam.variable_kind == "mixed":
        return [np.broadcast_to(ev(v), (n,) + ((d, 1) if c.shape[1] == 1 else (d, d))) if is_mat(c)
                else np.broadcast_to(ev(v), (n, 1, 1))[:, 0, 0] for v, c in zip(fam.sampler, fam.components)]
    X = ev(fam.sampler)
    return np.broadcast_to(X, (n,) + np.shape(X)[-2:])


def mixed_t(model, draws, quad):
    """T at draws of a variable of components of several shapes, through the model's coordinates (a vector's
    entries, a matrix's Cholesky coordinates, a positive scalar's logarithm)."""
    coords = []
    if model.whiten is not None:           # the model's vector coordinates: v = Lᵀθ (or L⁻¹θ) with L Lᵀ = the matrix
        iv, im, kind = model.whiten
        Lm = np.linalg.cholesky(0.5 * (draws[im] + np.swapaxes(draws[im], -1, -2)))
        draws = list(draws)
        draws[iv] = (np.swapaxes(Lm, -1, -2) @ draws[iv] if kind == "precision"
                     else np.linalg.solve(Lm, draws[iv]))
    for x, c, sup in zip(draws, model.fam.components, model.fam.component_supports):
        if not is_mat(c):
            coords.append(np.log(x) if sup == "positive" else x)
        elif c.shape[1] == 1:
            coords.extend(x[:, i, 0] for i in range(x.shape[1]))
        else:
            L = np.linalg.cholesky(0.5 * (x + np.swapaxes(x, -1, -2)))
            coords.extend(np.log(L[:, i, i]) if i == j else L[:, i, j] for i in range(x.shape[1]) for j in range(i + 1))
    return model.evaluate(coords, [], quad.fixed_vals)[1]


def matrix_t(model, X, quad):
    """T at draws X (n, P, P) of a matrix variable: through the model's Cholesky coordinates (log L_ii, L_ij) of X,
    or of X⁻¹ where the model integrates in those (``model.inverse_coords``)."""
    if getattr(model, "inverse_coords", False):
        X = np.linalg.inv(X)
    L = np.linalg.cholesky(0.5 * (X + np.swapaxes(X, -1, -2)))
    P = X.shape[-1]
    coords = [np.log(L[:, i, i]) if i == j else L[:, i, j] for i in range(P) for j in range(i + 1)]
    return model.evaluate(coords, [], quad.fixed_vals)[1]
