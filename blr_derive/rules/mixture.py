"""Identities of finite-mixture candidates (Sec. 3.2, Eqs. 27-30; App. E), applied by
``blr_derive/candidates/mixture.py``, and what the rules that take part in a mixture's derivation share: the
generic component k (:class:`MixtureTerms`) and the score of the mixture through its responsibilities
(``mixture_score``, Eqs. 69-71), and the sums over a generic other component j of a mixture whose components are
an array axis (:class:`SumOverComponents`, :class:`LogSumExpOverComponents`)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import sympy as sp
from sympy.matrices.expressions.matexpr import MatrixExpr

from blr_derive.core.matexpr import is_mat
from blr_derive.core.specialfns import logsumexp
from blr_derive.core.types import Expr, Sym
from blr_derive.families.model import Family
from blr_derive.rules.base import RULES, rule

rule('mixture_parameters', 'identity', 'Eq. 27',
     'the joint q(θ, z=k) = π_k q_k(θ) is a minimal conditional exponential family: λ_k of component k, μ_k = π_k E_{q_k}[T(θ)]')
rule('mixture_blr', 'identity', 'Eq. 28',
     'λ_k ← λ_k - ρ∇_{μ_k}[E_q ℓ - H(q)] with the entropy of the mixture; ∇_{μ_k}(-H) = ∇_{μ_k}E_q[log q] with log q held fixed (E_q[∇ log q] = 0)')
rule('mixture_chain_rule', 'identity', 'App. E, Eqs. 67-68',
     '∇_{μ_k} through m_k(μ_k) = μ_k⁽¹⁾/π_k and C_k(μ_k) = μ_k⁽²⁾/π_k - m_k m_kᵀ')
rule('mixture_bonnet_price', 'identity', 'App. E (Lin et al. 2019a, Thms 6-7)',
     '∇_{m_k}E_q[f] = π_k E_{q_k}[∇f], ∇_{C_k}E_q[f] = ½π_k E_{q_k}[∇²f]')
rule('mixture_score', 'identity', 'App. E, Eqs. 69-71',
     '∇log q = Σ_j r_j ∇log q_j, ∇²log q = Σ_j r_j(∇²log q_j + ∇log q_j∇log q_jᵀ) - ∇log q∇log qᵀ with the responsibilities r_j(θ) = π_j q_j(θ)/q(θ)')
rule('instantiate', 'identity', 'Eqs. 29-30',
     'the generic update of component k written for each free component of the mixture')


@dataclass
class ComponentSymbol:
    """A symbol of the generic component k's update that each free component gets its own copy of (an oracle
    value at its mean, or a Monte Carlo average)."""
    generic: Sym
    prefix: str                  # the copy is named prefix + component number (prefix alone for one component)
    like: Sym                    # shape of the copy (a symbol to imitate)
    oracle: str | None = None    # an oracle called at the component's mean, or None
    description: str = ""
    #: (component number, its mean, only one free component) -> LaTeX name, or None
    latex: Callable[[int, Expr, bool], str] | None = None
    symmetric: bool = False      # the copy is a symmetric matrix
    copy: bool = True            # False: the generic symbol only helps collect terms (not used by the update)


@dataclass
class MixtureTerms:
    """The generic component k of a mixture candidate (Eqs. 27-28, App. E), for the rules that take part in its
    derivation (``delta``, ``exact``, ``dropout_masks``, ``separated_components``)."""
    base: Family                 # the component family
    gen: dict[Sym, Sym]          # base parameter symbol -> generic symbol (m_k, S_k)
    pi_k: Sym
    mean_k: Expr                 # m_k, C_k in the generic parameters
    cov_k: Expr
    gblock: list[Sym]            # ∇_{μ_k} E_q[ℓ̄ + log q] per block
    Gm_l: Sym                    # ∇_{m_k} E_q[ℓ̄], ∇_{C_k} E_q[ℓ̄]
    GC_l: Sym
    Eg_l: Sym                    # E_{q_k}[∇ℓ̄], E_{q_k}[∇²ℓ̄]
    EH_l: Sym
    hsym: set[Sym]               # symmetric symbols
    uses_hess: bool = False      # the exact natural gradient needs E_{q_k}[∇²ℓ̄]
    gq: Expr | None = None       # ∇ log q(m_k), ∇² log q(m_k): the entropy term after the delta method
    Hq: Expr | None = None
    symbols: list[ComponentSymbol] = field(default_factory=list)
    copies: dict[int, dict[Sym, Sym]] = field(default_factory=dict)   # component index -> {generic symbol: copy}


def mixture_score(D, fam, score_b, shess_b, free, qsyms):
    """Eqs. 69-71 at θ = m_k: responsibilities r_j(m_k) (a softmax of log π_j + log q_j(m_k)), and
    ∇ log q = Σ_j r_j ∇ log q_j, ∇² log q = Σ_j r_j (∇² log q_j + ∇ log q_j ∇ log q_jᵀ) − ∇ log q ∇ log qᵀ."""
    base = fam.base
    theta = base.theta
    logq_b = base.simp(base.log_density())
    eqs = [r"r_j(\theta) = \frac{\pi_j q_j(\theta)}{\sum_i \pi_i q_i(\theta)}",
           r"\nabla_\theta \log q(\theta) = \sum_j r_j(\theta) \nabla_\theta \log q_j(\theta)",
           r"\nabla^2_\theta \log q(\theta) = \sum_j r_j(\theta)\left[\nabla^2_\theta \log q_j(\theta) + "
           r"\nabla_\theta \log q_j(\theta)\nabla_\theta \log q_j(\theta)^\top\right] - "
           r"\nabla_\theta \log q(\theta)\nabla_\theta \log q(\theta)^\top",
           (r"\nabla_\theta \log q_j(\theta)", score_b), (r"\nabla^2_\theta \log q_j(\theta)", shess_b)]
    for c in free:
        k = c.index
        mean_k = base.gaussian_mean.xreplace(c.subs)
        gq, Hq = qsyms[k]
        a_syms = []
        for j in fam.components:
            a = sp.Symbol(f"a_{j.index}_{k}", real=True)
            D.symbol_names[a] = r"a_{%d%d}" % (j.index, k)
            e = sp.log(j.weight) + logq_b.xreplace(j.subs).xreplace({theta: mean_k})
            D.defs.append((a, base.simp(e) if not is_mat(e) else e))
            a_syms.append(a)
        lse = logsumexp(*a_syms)
        g_terms, H_terms = [], []
        for j, a in zip(fam.components, a_syms):
            r = sp.Symbol(f"r_{j.index}_{k}", real=True)
            D.symbol_names[r] = r"r_{%d}(%s)" % (j.index, sp.latex(mean_k, mat_symbol_style="bold"))
            D.defs.append((r, sp.exp(a - lse)))
            s = base.simp(score_b.xreplace(j.subs).xreplace({theta: mean_k}))
            h = base.simp(shess_b.xreplace(j.subs).xreplace({theta: mean_k}))
            zero = isinstance(s, sp.ZeroMatrix) or s == 0
            if not zero:
                g_terms.append(r * s)
            H_terms.append(r * (h + outer(s, s)) if not zero else r * h)
        gexpr = (sp.MatAdd(*g_terms) if is_mat(gq) else sp.Add(*g_terms)) if g_terms else (
            sp.ZeroMatrix(*gq.shape) if is_mat(gq) else sp.Integer(0))
        D.defs.append((gq, gexpr))
        Hexpr = (sp.MatAdd(*H_terms, -gq * gq.T) if is_mat(Hq) else sp.Add(*H_terms) - gq**2)
        D.defs.append((Hq, Hexpr))
        eqs += [(gq, gexpr), (Hq, Hexpr)]
    D.add("mixture_score", RULES["mixture_score"].equation, "Gradient and Hessian of log q through the responsibilities",
          "The responsibilities (Eq. 71) weight the component scores, derived from the component family "
          "(∇_θ log q_j = ∇_θ [log h + ⟨λ_j, T(θ)⟩]); at θ = m_k the own term of the gradient vanishes (Eq. 72).", eqs)


def inner(a, b):
    return sp.Trace(a.T * b) if is_mat(a) else a * b


def outer(a, b):
    return a * b.T if is_mat(a) else a * b


# ------------------------------------------------------------------ the components as an array axis
class SumOverComponents(sp.Function):
    """Σ_j x_j over the generic other component j of a mixture whose components are an array axis (the argument is
    written in j's symbols, and possibly in the generic component k's; the result has no j)."""
    is_real = True
    nargs = 1

    def _latex(self, printer):
        return r"\sum_j %s" % printer.parenthesize(self.args[0], 40)

    def _sympystr(self, printer):
        return "sum_j(%s)" % printer._print(self.args[0])


class MatSumOverComponents(MatrixExpr):
    """Σ_j X_j of a matrix (or vector) expression over the generic other component j (see SumOverComponents)."""

    def __new__(cls, x):
        return sp.Basic.__new__(cls, x)

    @property
    def shape(self):
        return self.args[0].shape

    def _eval_transpose(self):
        return MatSumOverComponents(self.args[0].T)

    def doit(self, **hints):
        return self

    def _latex(self, printer):
        return r"\sum_j \left(%s\right)" % printer._print(self.args[0])

    def _sympystr(self, printer):
        return "sum_j(%s)" % printer._print(self.args[0])


class LogSumExpOverComponents(sp.Function):
    """log Σ_j exp(x_j) over the generic other component j (the normalizer of the responsibilities, evaluated as a
    stable log-sum-exp: no overflow, no cancellation)."""
    is_real = True
    nargs = 1

    def _latex(self, printer):
        return r"\log\sum_j e^{%s}" % printer._print(self.args[0])

    def _sympystr(self, printer):
        return "logsumexp_j(%s)" % printer._print(self.args[0])


OVER_COMPONENTS = (SumOverComponents, MatSumOverComponents, LogSumExpOverComponents)


def sum_over_components(e):
    """Σ_j e: a MatSumOverComponents for a matrix expression, else a SumOverComponents."""
    return MatSumOverComponents(e) if is_mat(e) else SumOverComponents(e)
