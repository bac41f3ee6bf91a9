"""``prior_site`` — a Gaussian prior site with a per-coordinate mean and precision given as data.

The regularizer R(θ) = −log N(θ | m₀, diag(p₀)⁻¹) = ½ Σᵢ p₀ᵢ (θᵢ − m₀ᵢ)² + const of Eq. 1 (Khan & Rue 2023) enters
the BLR's loss ℓ̄ = ℓ + R.  Its expected gradient and Hessian under any Gaussian q = N(m, diag(s)⁻¹) are exact and
do not depend on how ℓ's expectations are estimated (delta method, Monte Carlo at samples, Bonnet/Price):

    E_q[∇R] = p₀ (m − m₀),        E_q[∇²R] = p₀,

so the rule adds p₀(m − m₀) to the gradient view and p₀ to the Hessian view of the update (as ``weight_decay``
does for the isotropic prior m₀ = 0, p₀ = δ, Eq. 34).  With m₀, p₀ the mean and precision of the posterior after
the previous tasks, this is the continual-learning step of Sec. 5.1 (the past posterior merged into the prior;
Khan, "Knowledge Adaptation as Posterior Correction", 2025; continual IVON in the Bayes-duality slides): the
prior site carries every earlier task's sites.

Arguments: ``mean`` (default 0) and ``precision`` (required), expressions of the hyperparameters and of the
scalar (per-coordinate) data the recipe's abstract loss declares (``loss: {kind: abstract, data: {m_past: ...}}``);
``when``: a condition that switches the site off.  A mean-field (elementwise) candidate only.
"""
from __future__ import annotations

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.matexpr import is_mat
from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import cond, mean_name, record, record_prior, scalar, substitute_def


def site_expr(ctx, key, raw):
    """An argument of the rule (its raw recipe text ``raw``): an expression of hyperparameters and of the recipe's
    scalar (per-coordinate) data, parsed by the restricted grammar."""
    if raw is None:
        raise ctx.fail(f"missing argument '{key}'")
    symbols = dict(ctx.symbols())
    symbols.update({d.name: d.symbol for d in ctx.r.data if not d.shape})
    try:
        return parse_expression(raw, symbols, what=f"{ctx.approx.name}.{key}")
    except SpecError as exc:
        raise exc.located(ctx.r.file, ctx.approx.line) from None


class PriorSite(Rule):
    name = "prior_site"
    kind = "pass"
    equation = "Eq. 1; Sec. 5.1; Khan (2025)"
    summary = ("a Gaussian prior site N(θ | m₀, diag(p₀)⁻¹) with mean and precision given as data: adds p₀(m − m₀) "
               "to the gradient and p₀ to the Hessian (exact under any Gaussian expectation)")

    def rewrite(self, ctx):
        D = ctx.D
        m0 = site_expr(ctx, "mean", ctx.args.pop("mean", 0))
        p0 = site_expr(ctx, "precision", ctx.args.pop("precision", None))
        when = ctx.when()
        ctx.done()
        record_prior(D, lambda theta: p0 * (theta - m0)**2 / 2, when)   # R(θ) of Eq. 1, for the objective
        m = D.recipe.family.params[mean_name(D)].symbol
        if is_mat(m) and not (D.recipe.family.elementwise or D.elementwise):
            raise ctx.fail("needs a mean-field (elementwise) Gaussian candidate: the site's precision is diagonal")
        m = scalar(m)
        g_old = D.views.grad
        term = p0 * (m - m0)
        gs = substitute_def(D, "g_prior", g_old, cond(when, g_old + term, g_old))
        D.views.grad = gs
        eqs = [(gs, g_old + term)]
        if D.views.hess is not None:
            h_old = D.views.hess
            hs = substitute_def(D, "h_prior", h_old, cond(when, h_old + p0, h_old))
            D.views.hess = hs
            eqs.append((hs, h_old + p0))
        record(ctx, "Gaussian prior site",
               "R(θ) = ½ p₀ (θ − m₀)² added to the loss (Eq. 1): its expected gradient p₀(m − m₀) and Hessian p₀ "
               "are exact under any Gaussian q (the previous posterior as the prior: Sec. 5.1, Khan 2025).", eqs)


register(PriorSite())
