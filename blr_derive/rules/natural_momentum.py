"""``natural_momentum`` — the BLR with momentum in natural parameters (App. F, Eqs. 79-80): λ_{t+1} += γ(λ_t − λ_{t−1}).

The previous ordinary parameters become state (``<p>_prev``, initialised to the parameter itself).  For the
mean-field Gaussian this gives s_{t+1} = (1−ρ)s + ρh + γ(s − s_{t−1}) and m_{t+1} = m − ρ g/s_{t+1} + γ s_{t−1}(m −
m_{t−1})/s_{t+1}, the exact form of Eq. 81."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.matexpr import is_mat, simplify_mat
from blr_derive.rules.base import RULES, AuxState, Rule, register
from blr_derive.rules.blr import expand


class NaturalMomentum(Rule):
    name = "natural_momentum"
    kind = "step"
    equation = "App. F, Eqs. 79-81"
    summary = "BLR with momentum in natural parameters: lambda <- ... + gamma (lambda_t - lambda_{t-1})"

    def adjust_lambda(self, ctx, lam_new):
        D, fam, sym, lam_next = ctx.D, ctx.family, ctx.sym, ctx.lam_next
        args = ctx.args(self.name)
        gamma = args.expr("momentum")
        args.done()
        prev, updates = {}, []
        for p in fam.params.values():
            if p.fixed:
                continue
            ps = p.symbol
            q = sp.MatrixSymbol(f"{p.name}_prev", *ps.shape) if is_mat(ps) else sp.Symbol(f"{p.name}_prev", **ps.assumptions0)
            q_new = sp.MatrixSymbol(f"{p.name}_prev_new", *ps.shape) if is_mat(ps) else sp.Symbol(f"{p.name}_prev_new", real=True)
            prev[ps] = q
            if ps in sym:
                sym.update({q, q_new})
            D.aux_state.append(AuxState(q.name, q, q_new, ps, f"{p.name} at the previous step (natural momentum)"))
            D.symbol_names[q] = (r"\mathbf{%s}_{t-1}" if is_mat(ps) else "%s_{t-1}") % p.name
            updates.append((q.name, q_new, ps))
        out = []
        for e, ln in zip(fam.eta, lam_new):
            out.append(simplify_mat(expand(ln + gamma * (e - e.xreplace(prev))), sym))
        D.add("natural_momentum", RULES["natural_momentum"].equation, "Momentum in natural parameters",
              "Mirror descent with a momentum term (Eq. 79) adds γ(λ_t − λ_{t−1}) to the BLR step (Eq. 80).",
              [(ln, e, r"\leftarrow") for ln, e in zip(lam_next, out)])
        ctx.prev_updates = updates
        return out


register(NaturalMomentum())
