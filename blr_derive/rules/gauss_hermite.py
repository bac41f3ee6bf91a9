"""``gauss_hermite`` — E_q[∇ℓ], E_q[∇²ℓ] of an explicit loss with sums over data of f(aᵀθ + b) (Sec. 5.4): Aᵀ E[f'],
Aᵀ diag(E[f'']) A, the one-dimensional Gaussian expectations by Gauss–Hermite quadrature (argument ``nodes``;
E[f''] in Stein's form E[f'(x)(x − η)]/σ², the exact variance derivative of the quadrature).  The derivation is
``blr_derive/rules/datasum.py``.  A loss of one coordinate θ over an elementwise Gaussian (``gaussian_diag``, no
data) takes the same quadrature coordinate by coordinate, its sum over the nodes written out (``scalar_gauss_hermite``)."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.nodes import gauss_hermite_rule
from blr_derive.rules.args import Ctx
from blr_derive.rules.base import RULES, NaturalGradient, Rule, register
from blr_derive.rules.datasum import explicit_expectations
from blr_derive.rules.delta import needs_gaussian_moments, needs_gaussian_vector, scalar_elementwise
from blr_derive.rules.gaussian import gaussian_natural_gradient

#: the most nodes whose sum is written out for one coordinate (each node is one more copy of ℓ' in the update;
#: 32 nodes already integrate a smooth loss to rounding error)
SCALAR_NODES = 128


class GaussHermite(Rule):
    name = "gauss_hermite"
    kind = "expectation"
    equation = "Sec. 5.4; Eqs. 10-11 (Bonnet, Price)"
    summary = ("E_q[∇ℓ], E_q[∇²ℓ] of an explicit loss with sums over data of f(aᵀθ + b): Aᵀ E[f'], Aᵀ diag(E[f'']) A, "
               "the one-dimensional Gaussian expectations by Gauss-Hermite quadrature (argument 'nodes'; E[f''] in "
               "Stein's form E[f'(x)(x - η)]/σ², the exact variance derivative of the quadrature); a loss of one "
               "coordinate over an elementwise Gaussian (gaussian_diag, no data): the same quadrature per coordinate, "
               "its sum written out (nodes a number, at most 128)")
    losses = ("explicit",)

    def check(self, ctx):
        if ctx.candidate != "single":
            return
        approx = ctx.approx(self.name)
        if ctx.recipe.loss_kind == "explicit":
            needs_gaussian_vector(ctx, approx)
            return
        needs_gaussian_moments(ctx, approx)
        raise ctx.fail("an abstract loss needs an expectation approximation for E_q[∇ℓ], E_q[∇²ℓ]: add 'delta' or "
                       "'monte_carlo'")

    def natural_gradient(self, ctx):
        ng, _, _ = gaussian_natural_gradient(ctx)
        if scalar_elementwise(ctx):
            return scalar_gauss_hermite(ctx, ng.grads, ng.Eg, ng.EH)
        return explicit_expectations(ctx.recipe, ctx.D, ng.grads, ng.Eg, ng.EH, ctx.mean_mu, ctx.cov_mu, ctx.sym)


def _quadrature(f, mean, var, z, w, stein=True):
    """Σ_k w_k f(mean + σ z_k), σ = √var (E[f(θ)] for θ ~ N(mean, var)), and with ``stein`` also
    Σ_k w_k f(mean + σ z_k) z_k / σ (Stein's form of E[f'(θ)] = E[f(θ)(θ − mean)]/var, the exact derivative of the
    first in the mean)."""
    sd = sp.sqrt(var)
    terms = [(wk, zk, f(mean + sd * zk)) for zk, wk in zip(z, w)]
    plain = sp.Add(*[wk * fx for wk, _, fx in terms])
    return (plain, sp.Add(*[wk * zk * fx for wk, zk, fx in terms]) / sd) if stein else plain


def scalar_gauss_hermite(ctx, grads, Eg, EH):
    """E_q[ℓ'(θ)] and E_q[ℓ''(θ)] for an explicit loss of one coordinate of an elementwise Gaussian N(m, v), by
    ``nodes``-point Gauss–Hermite quadrature (Sec. 5.4; Bonnet and Price, Eqs. 10-11): E[ℓ'] ≈ Σ_k w_k ℓ'(m + √v z_k)
    and E[ℓ''] in Stein's form Σ_k w_k ℓ'(m + √v z_k) z_k/√v, the exact derivative of the first in m, so that the
    natural gradient is the exact gradient of the quadrature E_q[ℓ] ≈ Σ_k w_k ℓ(m + √v z_k) (what ``check``
    differentiates).  The sum is written out, node by node, coordinate by coordinate (every target prints it), so
    ``nodes`` is a number here (at most SCALAR_NODES).  Derivatives almost everywhere, as in ``scalar_delta``."""
    recipe, D, fam = ctx.recipe, ctx.D, ctx.family
    approx = ctx.approx("gauss_hermite")
    args = Ctx(D, approx)
    nodes = args.count("nodes", None)
    args.done()
    if not nodes.is_Integer:
        raise ctx.fail(f"nodes = {nodes}: for a loss of one coordinate over an elementwise family the quadrature's "
                       "sum is written out node by node, so 'nodes' must be a number (e.g. nodes: 32)", approx)
    if nodes > SCALAR_NODES:
        raise ctx.fail(f"nodes = {nodes}: for a loss of one coordinate over an elementwise family the sum is written "
                       f"out node by node; at most {SCALAR_NODES} (32 nodes already integrate a smooth loss to "
                       "rounding error)", approx)
    theta, loss = fam.theta, recipe.loss
    zs, ws = gauss_hermite_rule(int(nodes))
    z = [sp.Float(repr(float(x)), 17) for x in zs]
    w = [sp.Float(repr(float(x)), 17) for x in ws]
    d1 = sp.diff(loss, theta).replace(sp.DiracDelta, lambda *a: sp.S.Zero)
    f1 = sp.Lambda(theta, d1)
    taken = {str(x) for x in fam.params} | {h.name for h in recipe.hyper}
    g = sp.Symbol("g" if "g" not in taken else "g_", real=True)
    H = sp.Symbol("H" if "H" not in taken else "H_", real=True)
    g_m, H_m = _quadrature(f1, fam.gaussian_mean, fam.gaussian_cov, z, w)
    D.defs += [(g, g_m), (H, H_m)]
    D.symbol_names.update({g: r"\hat{g}", H: r"\hat{H}"})
    g_mu, H_mu = _quadrature(f1, ctx.mean_mu, ctx.cov_mu, z, w)
    D.natural_gradient = NaturalGradient([x.xreplace({Eg: g_mu, EH: H_mu}) for x in grads], Eg, EH)
    D.expected_loss = _quadrature(sp.Lambda(theta, loss), ctx.mean_mu, ctx.cov_mu, z, w, stein=False)
    D.add("gauss_hermite", RULES["gauss_hermite"].equation, "Gauss–Hermite expectations of one coordinate",
          f"The loss reads one coordinate θ of an elementwise Gaussian N(m, v). E_q[ℓ'(θ)] (Bonnet, Eq. 10) is a "
          f"one-dimensional Gaussian integral, computed by {nodes}-point Gauss–Hermite quadrature at the nodes "
          "m + √v z_k, and E_q[ℓ''(θ)] (Price, Eq. 11) in Stein's form E[ℓ'(θ)(θ − m)]/v at the same nodes: the exact "
          "derivative of the quadrature in m, so the update follows the gradient of the quadrature E_q[ℓ].",
          [(Eg, g, r"\approx"), (EH, H, r"\approx")] + D.defs[-2:])
    return [x.xreplace({Eg: g, EH: H}) for x in grads]


register(GaussHermite())
