"""``exponential_coordinates`` — take the natural-gradient step of a Gaussian's covariance in the exponential local
coordinates of a square-root factor A (C = A Aᵀ): A ← A expm(ρ M) with M symmetric (Wierstra et al., JMLR 2014,
Sec. 3.3, "exponential parameterization", Algorithm 5; Glasmachers et al. 2010).

A matrix generalization of ``step_coordinates``.  The BLR (Eq. 6) is an Euler step of the natural-gradient flow in λ;
its tangent at ρ = 0 is derived symbolically (matrix differential calculus, ``core/matcalc``) for every parameter:
ṗ = d p_{t+1}/dρ |_{ρ=0}.  The covariance C(p) of the family moves along Ċ = dC[ṗ].  In the local coordinates
M ↦ A expm(ρM) around the current factor, C(ρ) = A expm(ρM) expm(ρM)ᵀ Aᵀ has the tangent A(M + Mᵀ)Aᵀ, so the
symmetric M with the same tangent is

    M = ½ A⁻¹ Ċ A⁻ᵀ                 (the unique symmetric solution of A(M + Mᵀ)Aᵀ = Ċ)

and every other parameter moves along its own tangent (m ← m + ρ ṁ).  The step agrees with Eq. 6 to first order
in ρ, keeps C = A Aᵀ positive definite for any ρ, and stores the factor A in the state instead of the parameter
(p is written as a function of A everywhere: C(p) = A Aᵀ solved for p).

Recipe: ``exponential_coordinates: {S: A}`` (the family's matrix parameter S, the factor's name A).
"""
from __future__ import annotations

import mpmath
import sympy as sp
from sympy.matrices.expressions.matexpr import MatrixExpr

from blr_derive.core import matcalc
from blr_derive.core.matexpr import is_mat, simplify_mat
from blr_derive.core.names import name_problem
from blr_derive.core.pretty import pretty
from blr_derive.rules.base import Renamed, Rule, StateVar, register
from blr_derive.rules.blr import doit
from blr_derive.rules.program import record
from blr_derive.rules.step_coordinates import expanded


class Expm(MatrixExpr):
    """The matrix exponential of a symmetric matrix (printed through its eigendecomposition)."""

    def __new__(cls, M):
        return sp.Basic.__new__(cls, M)

    @property
    def shape(self):
        return self.args[0].shape

    def _latex(self, printer):
        return r"\operatorname{expm}\left(%s\right)" % printer._print(self.args[0])

    def _sympystr(self, printer):
        return f"expm({printer._print(self.args[0])})"

    def numeric_value(self, M):
        """expm of a numeric matrix (an mpmath matrix, at the caller's precision): what ``families.symbolic.evaluate``
        computes for this node — mpmath's Taylor series with scaling and squaring, independent of the
        eigendecomposition the targets print."""
        return mpmath.expm(M)


def tangent(expr, rho, sym):
    """d expr/dρ at ρ = 0 (matrix differential calculus for matrix expressions)."""
    if not is_mat(expr):
        return sp.simplify(sp.diff(expr, rho).xreplace({rho: 0}))
    d = sp.Symbol("d_rho", real=True)
    out = matcalc.differential(expr, {rho: d})
    return simplify_mat(doit(out.xreplace({rho: 0}).xreplace({d: 1})), sym)


def at_zero(expr, rho, sym):
    e = expr.xreplace({rho: 0})
    return simplify_mat(doit(e), sym) if is_mat(e) else sp.simplify(e)


def parameter_of_factor(cov, p, F, fail):
    """p as a function of the factor F, from C(p) = F Fᵀ (C = p or C = p⁻¹)."""
    if cov == p:
        return F * F.T
    if cov == sp.Inverse(p) or cov == p ** -1:
        return sp.Inverse(F * F.T)
    raise fail(f"the covariance {cov} is neither the parameter {p} nor its inverse")


def tangents_at_zero(ctx, rho, sym):
    """name -> (its new symbol, d p_{t+1}/dρ at ρ = 0) for every family parameter the update steps from."""
    D, fam = ctx.D, ctx.D.recipe.family
    tangents = {}
    for name, new_sym, expr in D.updates:
        if name not in fam.params:
            continue
        q = fam.params[name].symbol
        full = expanded(D, expr, new_sym)
        if not full.has(rho):
            raise ctx.fail(f"the update of '{name}' does not depend on the learning rate {rho}")
        rest = at_zero(full - q, rho, sym)
        if not (rest == 0 or isinstance(rest, sp.ZeroMatrix)):
            raise ctx.fail(f"the update of '{name}' is not a step from {name} (at {rho} = 0 it is {name} + {rest})")
        tangents[name] = new_sym, tangent(full, rho, sym)
    return tangents


class ExponentialCoordinates(Rule):
    name = "exponential_coordinates"
    kind = "pass"
    matrix_programs = True
    equation = "Eq. 6 stepped in exponential local coordinates A expm(ρM); Wierstra et al. (2014) Sec. 3.3, Alg. 5"
    summary = ("step a Gaussian's covariance in the exponential local coordinates of a factor A (C = A Aᵀ): "
               "A ← A expm(ρ M), M = ½ A⁻¹ Ċ A⁻ᵀ from the tangent of Eq. 6 at ρ = 0")

    def rewrite(self, ctx):
        D = ctx.D
        fam = D.recipe.family
        if D.recipe.learning_rate is None:
            raise ctx.fail("the step needs a learning rate (the recipe's learning_rate)")
        rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
        if len(ctx.args) != 1:
            raise ctx.fail("name one matrix parameter of the family and its factor, e.g. {S: A}")
        pname = next(iter(ctx.args))
        fname = ctx.args.pop(pname)
        ctx.done()
        if pname not in fam.params or not is_mat(fam.params[pname].symbol) or fam.params[pname].symbol.shape[1] == 1:
            raise ctx.fail(f"'{pname}' is not a matrix parameter of family '{fam.name}'")
        if name_problem(fname) is not None or fname in fam.params:
            raise ctx.fail(f"the factor's name must be a new identifier, got {fname!r}")
        cov = fam.gaussian_cov
        if cov is None or not is_mat(cov):
            raise ctx.fail(f"family '{fam.name}' has no matrix covariance (a 'gaussian' section)")
        p = fam.params[pname].symbol
        sym = set(fam.symmetric) | {s for s, _ in (D.sampling.stats if D.sampling else [])
                                                      if is_mat(s) and s.shape[0] == s.shape[1]}
        F = sp.MatrixSymbol(fname, *p.shape)
        reps = {}
        if D.views.covariance_factor is not None:    # the samples already go through a factor of C
            reps[D.views.covariance_factor] = F
            D.views.covariance_factor = None
            if D.sampling is not None:
                D.sampling.covariance_factor = None
        value = parameter_of_factor(cov, p, F, ctx.fail)
        reps[p] = value
        tangents = tangents_at_zero(ctx, rho, sym)
        if pname not in tangents:
            raise ctx.fail(f"'{pname}' is not updated by this recipe")
        dp = sp.MatrixSymbol("d_" + pname, *p.shape)
        cov_dot = matcalc.differential(cov, {p: dp}).xreplace({dp: tangents[pname][1]})
        M = simplify_mat(doit((sp.Inverse(F) * cov_dot * sp.Inverse(F).T / 2).xreplace(reps)), sym)
        if M.has(sp.Inverse):         # Aᵀ(A⁻¹)ᵀ = I: sympy cancels it once (A⁻¹)ᵀ is written (Aᵀ)⁻¹ and expanded
            M = simplify_mat(doit(sp.expand(M.replace(
                lambda x: isinstance(x, sp.Transpose) and isinstance(x.arg, sp.Inverse),
                lambda x: sp.Inverse(sp.Transpose(x.arg.arg)))).doit()), sym)
        if M.has(sp.Inverse):
            raise ctx.fail(f"the local coordinate M = {M} keeps an inverse of the factor")
        F_new = sp.MatrixSymbol(fname + "_new", *p.shape)
        Mdef = sp.MatrixSymbol("M_" + fname, *p.shape)
        updates, eqs = [], [(Mdef, M, "=")]
        for name, new_sym, expr in D.updates:
            if name == pname:
                new = F * Expm(rho * Mdef)
                updates.append((fname, F_new, new))
                eqs.append((F_new, new, r"\leftarrow"))
            elif name in tangents:
                q = fam.params[name].symbol
                step = tangents[name][1].xreplace(reps)
                step = simplify_mat(doit(step), sym) if is_mat(step) else sp.simplify(step)
                new = q + rho * step
                updates.append((name, new_sym, new))
                eqs.append((new_sym, new, r"\leftarrow"))
            else:
                updates.append((name, new_sym, expr.xreplace(reps)))
        old_sym = tangents[pname][0]
        D.updates = updates
        D.defs = [(s, e.xreplace(reps)) for s, e in D.defs if s != old_sym] + [(Mdef, M)]
        if D.sampling is not None:
            D.sampling.theta_expr = D.sampling.theta_expr.xreplace(reps)
            D.sampling.stats = [(a, e.xreplace(reps)) for a, e in D.sampling.stats]
        D.renamed[pname] = Renamed(fname, F, value)
        D.state_vars[fname] = StateVar(fname, F, "invertible", pname)
        D.views.set(fname, F_new)
        D.symbol_names.update({F_new: r"\mathbf{%s}_{t+1}" % fname, F: r"\mathbf{%s}" % fname,
                               Mdef: r"\mathbf{M}_{%s}" % fname})
        record(ctx, "Step in exponential local coordinates",
               f"Eq. 6 is an Euler step of the natural-gradient flow in λ; its tangent at ρ = 0 moves the covariance "
               f"C = {pretty(cov)} along Ċ = dC[d{pname}/dρ].  The factor {fname} (C = {fname} {fname}ᵀ) moves in the local "
               f"coordinates {fname} expm(ρM), whose tangent {fname}(M + Mᵀ){fname}ᵀ equals Ċ for the symmetric "
               f"M = ½ {fname}⁻¹ Ċ {fname}⁻ᵀ; the other parameters move along their tangents.  First-order equal to "
               "Eq. 6, and C stays positive definite (Wierstra et al. 2014, Sec. 3.3, Algorithm 5).", eqs)


register(ExponentialCoordinates())
