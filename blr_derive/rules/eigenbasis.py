"""The eigenbasis structure: a Gaussian over one weight matrix W (rows × cols) whose precision is diagonal in a
Kronecker basis,

    q(W):  vec(W) ~ N(vec(M), S⁻¹),   S = Q diag(vec(s)) Qᵀ,   Q = Q_R ⊗ Q_L   (Q_L, Q_R orthogonal),

and the identity that carries the diagonal Gaussian's BLR onto it (``eigenbasis_rotation``): with the basis fixed,
θ' = Qᵀ vec(W) = vec(Q_Lᵀ W Q_R) is a mean-field Gaussian N(vec(M'), diag(vec(s))⁻¹), M' = Q_Lᵀ M Q_R; the BLR
(Khan & Rue Eq. 6) in θ' is the diagonal Gaussian's (Sec. 1.3.2, Eq. 12 with a diagonal precision; the delta method,
Sec. 4.2, Eqs. 34-36) with the gradient g' = Qᵀ vec(∇ℓ) = vec(Q_Lᵀ G Q_R) (the chain rule of an orthogonal change of
variables) and the Hessian's diagonal in the basis; the mean's step is rotated back, M ← M + Q_L ΔM' Q_Rᵀ.

The candidate (``blr_derive/candidates/eigenbasis.py``) derives the diagonal Gaussian's BLR with the recipe's rules
and maps its elementwise program onto (M, s, Q_L, Q_R).  The structure's rules (``structures = ("eigenbasis",)``)
act at the stage ``eigenbasis_refresh``: how the basis moves (``kronecker_eigenbasis``: the eigenbases of
exponential averages of G Gᵀ and Gᵀ G, refreshed every T steps).

The nodes below are what the generated code computes with matrices: an elementwise quantity seen as the rows × cols
array it is (:class:`Entrywise`), the eigenvectors of a symmetric matrix (:class:`Eigenbasis`), one power iteration
and a QR step (:class:`PowerBasis`), an elementwise state's entries reordered with the basis' columns
(:class:`Reordered`) and a choice between two matrices on a host condition (:class:`MatSelect`).  Each prints as one
call of the target (``codegen/arrays/printer.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

import mpmath
import numpy as np

from blr_derive.core.errors import SpecError
from blr_derive.core.types import Expr, Sym
from blr_derive.rules.base import Derivation, Rule, rule
from blr_derive.spec.hyper import Approx

rule("eigenbasis_rotation", "identity", "Khan & Rue Eqs. 6, 12, 34-36 (in θ' = Qᵀθ); Magnus & Neudecker Thm. 2.2",
     "with S = Q diag(s) Qᵀ, Q = Q_R ⊗ Q_L orthogonal and fixed, θ' = Qᵀ vec(W) is a mean-field Gaussian: the BLR "
     "in θ' is the diagonal one with ∇_θ' ℓ = vec(Q_Lᵀ G Q_R); the mean moves by vec(Q_L ΔM' Q_Rᵀ)")


class Entrywise(sp.MatrixExpr):
    """An elementwise quantity ``x`` (a scalar expression of the elementwise program) as the rows × cols array it
    is at run time."""

    def __new__(cls, x, rows, cols):
        return super().__new__(cls, sp.sympify(x), sp.sympify(rows), sp.sympify(cols))

    @property
    def arg(self):
        return self.args[0]

    @property
    def shape(self):
        return (self.args[1], self.args[2])

    @property
    def free_symbols(self):
        return self.args[0].free_symbols

    def _eval_transpose(self):
        return None

    def _sympystr(self, printer):
        return f"({printer._print(self.arg)})"

    def _latex(self, printer):
        return rf"\left[{printer._print(self.arg)}\right]"


class EntryOf(sp.Expr):
    """The entries of a rows × cols matrix expression ``X`` as an elementwise quantity of the program (the inverse
    view of :class:`Entrywise`): e.g. the gradient at a sample rotated into the basis, Q_Lᵀ G_k Q_R, inside a
    per-sample statistic of the diagonal program."""
    is_commutative = True
    is_real = True

    def __new__(cls, X):
        return super().__new__(cls, X)

    @property
    def arg(self):
        return self.args[0]

    @property
    def free_symbols(self):
        return self.args[0].free_symbols

    def _eval_derivative(self, s):
        return sp.Integer(0) if s not in self.free_symbols else sp.Derivative(self, s)

    def _sympystr(self, printer):
        return f"[{printer._print(self.arg)}]"

    def _latex(self, printer):
        return rf"\left[{printer._print(self.arg)}\right]"


class Eigenbasis(sp.MatrixExpr):
    """The eigenvectors of the symmetric S as the columns of an orthogonal matrix, in decreasing order of their
    eigenvalues."""

    def __new__(cls, S):
        return super().__new__(cls, S)

    @property
    def arg(self):
        return self.args[0]

    @property
    def shape(self):
        return self.args[0].shape

    def numeric_value(self, S):
        """The value (verify: generated code against the symbolic update), in float64 with numpy's LAPACK, as the
        generated code computes it: an eigenvector's sign is LAPACK's choice."""
        return _mp(_eigenbasis(_np(S)))

    def _sympystr(self, printer):
        return f"eigenbasis({printer._print(self.arg)})"

    def _latex(self, printer):
        return rf"\operatorname{{eig}}\left({printer._print(self.arg)}\right)"


class PowerBasis(sp.MatrixExpr):
    """One power iteration of the symmetric S from the orthogonal Q, orthonormalised: the Q factor of the QR
    decomposition of S Q Π, Π ordering the columns by decreasing Rayleigh quotient diag(Qᵀ S Q) (Vyas et al. 2025,
    Alg. 4: the cheap refresh of an eigenbasis that moves slowly)."""

    def __new__(cls, S, Q):
        return super().__new__(cls, S, Q)

    @property
    def shape(self):
        return self.args[1].shape

    def numeric_value(self, S, Q):
        """The value in float64 (numpy's QR: the signs of the columns are LAPACK's choice)."""
        return _mp(_power_basis(_np(S), _np(Q)))

    def _sympystr(self, printer):
        return f"power_qr({printer._print(self.args[0])}, {printer._print(self.args[1])})"

    def _latex(self, printer):
        S, Q = (printer._print(a) for a in self.args)
        return rf"\operatorname{{qr}}\left({S} {Q} \Pi\right)_Q"


class Reordered(sp.MatrixExpr):
    """The rows × cols array X with its rows in the order Π_L of :class:`PowerBasis` (S_L, Q_L) and its columns in the
    order Π_R of (S_R, Q_R): the diagonal of the precision, kept with the basis' columns it belongs to."""

    def __new__(cls, X, SL, QL, SR, QR):
        return super().__new__(cls, X, SL, QL, SR, QR)

    @property
    def shape(self):
        return self.args[0].shape

    def numeric_value(self, X, SL, QL, SR, QR):
        return _mp(_np(X)[_order(_np(SL), _np(QL))][:, _order(_np(SR), _np(QR))])

    def _sympystr(self, printer):
        X, SL, QL, SR, QR = (printer._print(a) for a in self.args)
        return f"reordered({X}; {SL}, {QL}, {SR}, {QR})"

    def _latex(self, printer):
        X, SL, QL, SR, QR = (printer._print(a) for a in self.args)
        return rf"\Pi_L^\top {X} \Pi_R"


class MatSelect(sp.MatrixExpr):
    """``a`` where the host condition ``cond`` holds, else ``b`` (matrices of one shape)."""

    def __new__(cls, cond, a, b):
        return super().__new__(cls, cond, a, b)

    @property
    def shape(self):
        return self.args[1].shape

    @property
    def free_symbols(self):
        return set().union(*(a.free_symbols for a in self.args))

    def doit(self, **hints):
        c, a, b = self.args
        if c in (sp.true, sp.false):
            return (a if c == sp.true else b).doit(**hints)
        return self.func(c, a.doit(**hints), b.doit(**hints))

    def _sympystr(self, printer):
        c, a, b = (printer._print(x) for x in self.args)
        return f"({a} if {c} else {b})"

    def _latex(self, printer):
        c, a, b = (printer._print(x) for x in self.args)
        return rf"\begin{{cases}} {a} & {c} \\ {b} & \text{{otherwise}} \end{{cases}}"


def _np(m):
    return np.array(m.tolist(), dtype=float)


def _mp(a):
    return mpmath.matrix(a.tolist())


def _eigenbasis(S):
    return np.linalg.eigh(S)[1][:, ::-1]


def _order(S, Q):
    return np.argsort(-(Q * (S @ Q)).sum(axis=0), kind="stable")


def _power_basis(S, Q):
    return np.linalg.qr((S @ Q)[:, _order(S, Q)])[0]


@dataclass
class EigenbasisContext:
    """What the structure's rules read and write at the stage ``eigenbasis_refresh``."""
    D: Derivation
    rows: Sym
    cols: Sym
    G: Sym                                  # the gradient oracle's value (rows × cols)
    QL: Sym
    QR: Sym
    step: Sym | None = None                 # t, when a rule needs it
    #: the elementwise states of the diagonal program: name -> (its new symbol, the matrix it is at run time)
    carried: dict[str, Expr] = field(default_factory=dict)
    #: the refreshed basis (new symbols) a rule sets, and the new values of the elementwise states it changes:
    #: name -> (the scalar symbol the program's output becomes, its expression)
    QL_new: Expr | None = None
    QR_new: Expr | None = None
    state_after: dict[str, tuple[Sym, Expr]] = field(default_factory=dict)
    #: the symmetric matrices among the state rules add (checked as such by the generated modules)
    symmetric: set[Sym] = field(default_factory=set)
    approx: Approx | None = None         # the rule's entry in the recipe (for located errors)

    def fail(self, msg) -> SpecError:
        a = self.approx
        if a is None:
            return SpecError(msg, self.D.recipe.file, None)
        return SpecError(f"approximation '{a.name}': {msg}", self.D.recipe.file, a.line)


class EigenbasisRule(Rule):
    """A rule of the eigenbasis structure (the stage method ``eigenbasis_refresh(ectx, args)``)."""
    structures = ("eigenbasis",)
