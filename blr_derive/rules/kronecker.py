"""The Kronecker (matrix-normal) structure of a full Gaussian over vec(W), and the identities that carry the
full-Gaussian BLR (Khan & Rue Eq. 6, Sec. 1.3.2, Eq. 12) onto it.

q(W) = MN(M, A⁻¹, G⁻¹) is the Gaussian over vec(W) (column-major, W rows × cols) with mean vec(M) and precision
S = A ⊗ G.  The candidate (``blr_derive/candidates/kronecker.py``) derives the full-Gaussian BLR over vec(W) and
maps its program onto (M, A, G) with

* ``kronecker_vec`` (identity) — (L ⊗ R) vec(V) = vec(R V Lᵀ) (Magnus & Neudecker, Thm. 2.2) and
  (L ⊗ R)⁻¹ = L⁻¹ ⊗ R⁻¹, so that with A, G symmetric  S⁻¹ vec(V) = vec(G⁻¹ V A⁻¹);

* ``kronecker_cholesky`` (identity) — the Cholesky factor of a Kronecker product is the Kronecker product of the
  factors' Cholesky factors: A = L_A L_Aᵀ, G = L_G L_Gᵀ ⇒ A ⊗ G = (L_A ⊗ L_G)(L_A ⊗ L_G)ᵀ (mixed product), and
  L_A ⊗ L_G is lower triangular with a positive diagonal (:class:`CholeskyFactor`, used to sample q);

and the structure-specific rules (:class:`KroneckerRule`, ``structures = ("kronecker",)``), called at the stages
``kronecker_expectation`` (where the oracles are evaluated: the mean, or samples of q for ``monte_carlo``,
``blr_derive/rules/kronecker_sampling.py``), ``kronecker_hessian`` (a Kronecker-factored Hessian, e.g.
``kronecker_gauss_newton``), ``kronecker_damping`` (the prior's δI, e.g. ``factored_tikhonov``),
``kronecker_statistics`` (per-sample values averaged over the samples), ``kronecker_projection`` (the precision
update kept in the Kronecker set, e.g. ``kronecker_ema``).

A P×P matrix of the structure is a :class:`Kron`: a sum Σ_k c_k L_k ⊗ R_k of Kronecker products of a cols×cols
and a rows×rows matrix.  A vector of the full Gaussian (the mean, the gradient) stands for a rows×cols matrix V
(the vector is vec(V)).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import mpmath
import sympy as sp

from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.types import Expr, Sym
from blr_derive.rules.base import Derivation, Rule, rule
from blr_derive.spec.hyper import Approx
from blr_derive.spec.kronecker import KroneckerRecipe

rule("matrix_normal", "identity", "Gupta & Nagar (2000) Thm. 2.2.1; Zhang et al. (2018) Sec. 3.1",
     "q(W) = MN(M, A⁻¹, G⁻¹) is the Gaussian over vec(W) with mean vec(M) and precision A ⊗ G (column-major vec)")
rule("kronecker_vec", "identity", "Magnus & Neudecker (2019), Thm. 2.2; Khan & Rue Eq. 12",
     "(L ⊗ R) vec(V) = vec(R V Lᵀ) and (L ⊗ R)⁻¹ = L⁻¹ ⊗ R⁻¹: S⁻¹ vec(V) = vec(G⁻¹ V A⁻¹) for S = A ⊗ G, A, G "
     "symmetric")
rule("kronecker_cholesky", "identity", "Golub & Van Loan (2013) Sec. 12.3.1; Magnus & Neudecker (2019) Thm. 2.2",
     "chol(L ⊗ R) = chol(L) ⊗ chol(R): the Kronecker product of lower-triangular factors with positive diagonals "
     "is one, and (L_L ⊗ L_R)(L_L ⊗ L_R)ᵀ = L ⊗ R (mixed product)")


class CholeskyFactor(sp.MatrixExpr):
    """chol(S): the lower-triangular L with a positive diagonal and S = L Lᵀ (S symmetric positive definite)."""

    def __new__(cls, S):
        return super().__new__(cls, S)

    @property
    def arg(self):
        return self.args[0]

    @property
    def shape(self):
        return self.args[0].shape

    def _sympystr(self, printer):
        return f"chol({printer._print(self.arg)})"

    def _latex(self, printer):
        return r"\operatorname{chol}(%s)" % printer._print(self.arg)

    def numeric_value(self, S):
        """chol of a numeric matrix (an mpmath matrix; what ``families.symbolic.evaluate`` computes for this node)."""
        return mpmath.cholesky(S)


@dataclass
class Kron:
    """Σ_k c_k L_k ⊗ R_k: ``terms`` = [(c_k, L_k, R_k)] (L_k cols×cols, R_k rows×rows)."""
    terms: list[tuple[Expr, Expr, Expr]]

    def scaled(self, c) -> "Kron":
        return Kron([(c * ck, L, R) for ck, L, R in self.terms])

    def plus(self, other: "Kron") -> "Kron":
        return Kron(self.terms + other.terms)

    def sympy(self):
        """The sum as a sympy expression (for the derivation's steps)."""
        parts = [sp.MatMul(c, sp.KroneckerProduct(L, R)) if c != 1 else sp.KroneckerProduct(L, R)
                 for c, L, R in self.terms]
        return sp.MatAdd(*parts) if len(parts) > 1 else parts[0]

    def single(self):
        """(L, R) when the sum is one Kronecker product c L ⊗ R (c folded into L), else None."""
        if len(self.terms) != 1:
            return None
        c, L, R = self.terms[0]
        return (L if c == 1 else c * L), R


def kron_apply(k: Kron, V, inverse: bool, symmetric: set):
    """unvec((Σ c L ⊗ R) vec V) = Σ c R V Lᵀ, or unvec((L ⊗ R)⁻¹ vec V) = R⁻¹ V L⁻ᵀ (``kronecker_vec``)."""
    if inverse:
        one = k.single()
        if one is None:
            raise DerivationError("the inverse of a sum of Kronecker products has no Kronecker form: project the "
                                  "precision onto one Kronecker product first (e.g. 'kronecker_ema')")
        L, R = one
        return sp.MatMul(sp.Inverse(R), V, sp.Inverse(_t(L, symmetric)))
    parts = [sp.MatMul(c, R, V, _t(L, symmetric)) for c, L, R in k.terms]
    return sp.MatAdd(*parts) if len(parts) > 1 else parts[0]


def _t(L, symmetric):
    if isinstance(L, sp.Transpose):
        return L.arg
    return L if (L in symmetric or isinstance(L, sp.Identity)) else sp.Transpose(L)


def interpret_matrix(e, env: dict) -> Kron:
    """A P×P expression of the full Gaussian's program (sums, scalar multiples, the symbols bound in ``env`` to a
    :class:`Kron`) as a :class:`Kron`."""
    if isinstance(e, sp.MatrixSymbol):
        if e not in env or not isinstance(env[e], Kron):
            raise DerivationError(f"{e} has no Kronecker form in this derivation")
        return env[e]
    if isinstance(e, sp.MatAdd):
        out = Kron([])
        for a in e.args:
            out = out.plus(interpret_matrix(a, env))
        return out
    if isinstance(e, sp.MatMul):
        c, mats = e.as_coeff_mmul()
        mats = list(mats.args) if isinstance(mats, sp.MatMul) else [mats]
        if len(mats) == 1:
            return interpret_matrix(mats[0], env).scaled(c)
    if isinstance(e, sp.Transpose):             # (Σ c L ⊗ R)ᵀ = Σ c Lᵀ ⊗ Rᵀ
        return Kron([(c, _t(L, set()), _t(R, set())) for c, L, R in interpret_matrix(e.arg, env).terms])
    if isinstance(e, CholeskyFactor):           # kronecker_cholesky
        one = interpret_matrix(e.arg, env).single()
        if one is None:
            raise DerivationError("a sum of Kronecker products has no Kronecker Cholesky factor")
        return Kron([(sp.Integer(1), CholeskyFactor(one[0]), CholeskyFactor(one[1]))])
    raise DerivationError(f"cannot write {e} as a sum of Kronecker products")


def interpret_vector(e, env: dict, symmetric: set):
    """A P×1 expression of the full Gaussian's program as the rows×cols matrix V with vec(V) = e: symbols bound in
    ``env`` to matrices, sums, scalar multiples and products by (inverses of) Kronecker products."""
    if isinstance(e, sp.MatrixSymbol):
        if e not in env or isinstance(env[e], Kron):
            raise DerivationError(f"{e} has no matrix form in this derivation")
        return env[e]
    if isinstance(e, sp.MatAdd):
        return sp.MatAdd(*[interpret_vector(a, env, symmetric) for a in e.args])
    if isinstance(e, sp.MatMul):
        c, mats = e.as_coeff_mmul()
        mats = list(mats.args) if isinstance(mats, sp.MatMul) else [mats]
        V = interpret_vector(mats[-1], env, symmetric)
        for f in reversed(mats[:-1]):
            inverse = isinstance(f, sp.Inverse)
            V = kron_apply(interpret_matrix(f.arg if inverse else f, env), V, inverse, symmetric)
        return V if c == 1 else sp.MatMul(c, V)
    raise DerivationError(f"cannot write {e} as vec of a matrix")


@dataclass
class SamplePoints:
    """Samples W_k of the candidate, before the oracles at them are averaged (``kronecker_sampling.py``)."""
    samples: Expr           # K, the number of samples per step
    eps: Sym                # E_k (rows × cols), independent N(0, 1)
    point: Sym              # W_k
    expr: Expr              # W_k in terms of M, A, G and E_k


@dataclass
class KroneckerContext:
    """What the structure's rules read and extend while the candidate maps the full-Gaussian program."""
    recipe: KroneckerRecipe
    D: Derivation[KroneckerRecipe]      # the record being written (over M, A, G)
    rows: Sym                           # dimension symbols
    cols: Sym
    M: Sym                              # state symbols
    A: Sym
    G: Sym
    rho: Expr                           # the BLR's learning rate
    mean_point: Expr                    # where the oracles are evaluated (M under the delta method, W_k under
    #                                     monte_carlo)
    grad: Expr | None = None            # the rows×cols matrix standing for the full Gaussian's gradient vector
    hess: Kron | None = None            # the Kronecker form standing for the full Gaussian's Hessian
    precision_new: tuple[Expr, Expr] | None = None  # (A_{t+1} expression, G_{t+1} expression) once projected
    sym: set[Sym] = field(default_factory=set)
    approx: Approx | None = None        # the approximation entry of the rule being applied
    env: dict[Sym, Kron | Expr] = field(default_factory=dict)   # full Gaussian's symbols -> Kronecker/matrix forms
    base: tuple[Sym, Sym] | tuple[()] = ()    # (m, S): the full Gaussian's mean and precision over vec(W)
    sampling: SamplePoints | None = None      # samples of q when the oracles take them (``kronecker_sampling.py``)

    def fail(self, msg):
        """A located error at the approximation being applied (else at the recipe's ``kronecker`` section)."""
        line = self.approx.line if self.approx is not None else self.recipe.kronecker.line
        return SpecError(msg, self.recipe.file, line)


class KroneckerRule(Rule):
    """A rule of the Kronecker candidate: takes part in its stages (each a no-op unless overridden)."""
    structures = ("kronecker",)

    def kronecker_expectation(self, kctx, args):
        """Say where the oracles are evaluated (``kctx.mean_point``): samples of q instead of the mean."""

    def kronecker_hessian(self, kctx, args):
        """Replace the full Gaussian's Hessian (and scale its gradient) by a Kronecker form."""

    def kronecker_damping(self, kctx, args):
        """Add the prior's gradient and its precision δI, kept in one Kronecker product."""

    def kronecker_statistics(self, kctx, args):
        """Average per-sample values (the gradient, the Hessian's factors) over the samples of q."""

    def kronecker_projection(self, kctx, args, S_new):
        """Map the full-Gaussian precision update S_{t+1} (a :class:`Kron`) to (A_{t+1}, G_{t+1})."""

