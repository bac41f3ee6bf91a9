"""``dropout_masks`` — reparameterize the mixture by its indicator z ~ π (Bernoulli masks from uniform draws), drop
the noise: ∇ℓ, ∇²ℓ at the dropout mean θ̃ = Σ_k 1[z=k] m_k, times ∂θ̃/∂m_k (argument 'samples') (App. G, Eq. 84).
Applied by mixture candidates (``blr_derive/candidates/mixture.py``) to the loss term of the generic component."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.args import Ctx
from blr_derive.rules.base import RULES, Rule, Sampling, register
from blr_derive.rules.blr import doit
from blr_derive.rules.mixture import ComponentSymbol


def indicator_idempotent(e):
    """1[z=k]² = 1[z=k] for the Heaviside indicators of the masks."""
    return e.replace(lambda x: x.is_Pow and isinstance(x.base, sp.Heaviside) and x.exp.is_Integer and x.exp > 0,
                     lambda x: x.base)


def mask_indicators(fam, u):
    """1[z=j] = H(c_j − u) − H(c_{j−1} − u) from the cumulative weights c_j."""
    ind, cum = [], sp.Integer(0)
    for j, c in enumerate(fam.components):
        lo = cum
        cum = cum + c.weight
        up = sp.Integer(1) if j == fam.K - 1 else sp.Heaviside(cum - u, 0)
        ind.append(up - (sp.Heaviside(lo - u, 0) if j > 0 else 0))
    return ind


class DropoutMasks(Rule):
    name = 'dropout_masks'
    kind = 'expectation'
    equation = 'App. G, Eq. 84'
    structures = ("mixture",)
    losses = ("abstract",)
    summary = ("reparameterize the mixture by its indicator z ~ π (Bernoulli masks from uniform draws), drop the "
               "noise: ∇ℓ, ∇²ℓ at the dropout mean θ̃ = Σ_k 1[z=k] m_k, times ∂θ̃/∂m_k (argument 'samples')")
    mixture_note = " — applied to the entropy term; the loss term follows the dropout masks below."
    mixture_bonnet_price = False

    def check(self, ctx):
        approx = ctx.approx(self.name)
        if ctx.recipe.loss_kind == "explicit":
            raise ctx.fail("'dropout_masks' is for an abstract loss (gradients at the masked means)", approx)
        if not ctx.family.base.elementwise:
            raise ctx.fail("'dropout_masks' supports mean-field (elementwise) components", approx)

    def instantiate_equation(self, M):
        # with masks: Newton with dropout (Eqs. 42-43), or SGD with dropout (Eq. 40) when the covariance is fixed
        return "Eqs. 42-43" if M.uses_hess else "Eq. 40"

    def mixture_loss_gradient(self, ctx, M, grads):
        D = ctx.D
        ghat_k, hhat_k = sp.Symbol("ghat_k", real=True), sp.Symbol("hhat_k", real=True)
        D.symbol_names.update({ghat_k: r"\hat{g}_k", hhat_k: r"\hat{h}_k"})
        grads = [sp.expand(doit(g.xreplace({M.Gm_l: ghat_k, M.GC_l: hhat_k / 2}))) for g in grads]
        # the masks' sampler is built once the components are known (mixture_finish); shown generically here
        D.add("dropout_masks", RULES["dropout_masks"].equation, "Dropout masks: reparameterization by the indicator",
              "θ = Σ_j 1[z=j](m_j + σ_j ε_j) with z ~ π drawn as masks; the noise ε is dropped, so ∇ℓ̄ and ∇²ℓ̄ are "
              "taken at the dropout mean θ̃ = Σ_j 1[z=j] m_j (the delta method, Eq. 84), and "
              "∇_{m_k} E_q[ℓ̄] ≈ (∂θ̃/∂m_k) ∇ℓ̄(θ̃), 2∇_{C_k} E_q[ℓ̄] = ∇²_{m_k} E_q[ℓ̄] ≈ (∂θ̃/∂m_k)² ∇²ℓ̄(θ̃), "
              "averaged over the mask draws.",
              [(M.Gm_l, ghat_k, r"\approx"), (M.GC_l, hhat_k / 2, r"\approx")]
              + [(g, e) for g, e in zip(M.gblock, grads)])
        M.symbols += [ComponentSymbol(ghat_k, "g", ghat_k), ComponentSymbol(hhat_k, "h", hhat_k)]
        return grads

    def mixture_finish(self, ctx, M, free):
        """Eq. 84: masks z ~ π from uniform draws u, θ̃ = Σ_j 1[z=j] m_j, per-sample (∂θ̃/∂m_k)∇ℓ̄(θ̃) and
        (∂θ̃/∂m_k)²∇²ℓ̄(θ̃), averaged over the draws."""
        D, fam = ctx.D, ctx.family
        args = Ctx(D, ctx.approx(self.name))
        samples = args.count("samples")
        args.done()
        u = sp.Symbol("u_mask", positive=True)
        theta = sp.Symbol("theta_tilde", real=True)
        D.symbol_names.update({u: "u", theta: r"\tilde\theta"})
        ind = mask_indicators(fam, u)
        mean_b = fam.base.gaussian_mean
        theta_expr = sp.Add(*[z * mean_b.xreplace(c.subs) for z, c in zip(ind, fam.components)])
        g_s, h_s = sp.Symbol("g_s", real=True), sp.Symbol("h_s", real=True)
        D.symbol_names.update({g_s: r"\nabla\bar\ell(\tilde\theta)", h_s: r"\nabla^2\bar\ell(\tilde\theta)"})

        def show(e):            # H(c − u) is the event u < c
            out = e
            for hv in e.atoms(sp.Heaviside):
                t = sp.Symbol(f"ind_{sp.srepr(hv.args[0])}")
                D.symbol_names[t] = r"1[u < %s]" % D.latex(hv.args[0] + u)
                out = out.xreplace({hv: t})
            return D.latex(out)
        eqs = [("1[z = %d]" % c.index, show(z)) for z, c in zip(ind, fam.components)]
        eqs.append((theta, show(theta_expr)))
        # only the statistics the update uses are drawn: with a fixed covariance (SGD with dropout, Eq. 40)
        # no Hessian enters the update, so no Hessian is evaluated at the masked means
        used = set().union(*(e.free_symbols for _, _, e in D.updates))
        ghat_k, hhat_k = sp.Symbol("ghat_k", real=True), sp.Symbol("hhat_k", real=True)   # mixture_loss_gradient's
        stats, views = [], {}
        for c in free:
            dth = sp.diff(theta_expr, mean_b.xreplace(c.subs))
            gbar, hbar = M.copies[c.index][ghat_k], M.copies[c.index][hhat_k]
            for avg, per, oracle in [(gbar, dth * g_s, "grad"),
                                     (hbar, indicator_idempotent(sp.expand(dth**2)) * h_s, "hess")]:
                if avg not in used:
                    continue
                stats.append((avg, per))
                eqs.append((avg, r"\frac{1}{S}\sum_s %s" % show(per), r"\approx"))
                if len(free) == 1:
                    views[oracle] = avg
        calls = [(k, o) for k, o in [(g_s, "grad"), (h_s, "hess")] if any(e.has(k) for _, e in stats)]
        D.sampling = Sampling(samples, u, theta, theta_expr, calls, stats, draw="uniform", views=views)
        D.add("dropout_masks", RULES["dropout_masks"].equation, "Mask draws",
              f"u ~ U(0, 1) per coordinate gives the indicator z (keep with probability π_1); S = {samples} draw(s). "
              "To drop whole units, let the draws u agree across a unit's weights.", eqs)


register(DropoutMasks())
