"""``sharpness_aware`` — the gradient of the mean step taken at an adversarially perturbed point (SAM).

Foret et al., "Sharpness-Aware Minimization for Efficiently Improving Generalization", ICLR 2021, Eq. 2 and
Algorithm 1: the inner maximisation max_{‖e‖ ≤ ρ} ℓ(m + e) is solved to first order, e = ρ ĝ/‖ĝ‖₂, and the step
uses ∇ℓ(m + e).  Möllenhoff & Khan, "SAM as an Optimal Relaxation of Bayes", ICLR 2023, Sec. 4 and Algorithm 1
(bSAM): SAM is the point-mass limit of a relaxation of the Bayes objective whose BLR step over a diagonal
Gaussian takes the gradient at m + ρ ĝ_k / s (s the per-example precision: the posterior covariance times the
gradient of the total loss) with ĝ_k the gradient at the sample θ_k of q.

The rule makes this a second oracle call per sample whose point depends on the first call's value:

    e_k = ρ · scale · ĝ_k [/ ‖ĝ_k‖₂],   ĝ^adv_k = ∇ℓ(m + e_k),   the mean step's gradient ← mean_k ĝ^adv_k

(``Sampling.chained``; ‖·‖₂ is the norm over every coordinate of the parameters, ``Sampling.reductions``).
Statistics made before the rule, and those made after it from the gradient oracle's own value
(``gradient_magnitude_hessian``), keep the gradient at the sample; a pass after it that reads the averaged
gradient (``squared_gradient_hessian``) sees the gradient at the ascent point.  Under the delta method
(``delta``: q a point mass at m) the rule turns the oracle call at the mean into ``samples`` sub-batches at the
point θ_k = m (Foret et al.'s m-sharpness, Sec. 4.1), each with its own ascent step.

Arguments: ``radius`` ρ; ``scale`` (default 1; may read the state, e.g. ``ess/s``); ``norm: l2`` to divide by the
global 2-norm of ĝ_k (SAM); ``samples`` (delta method only, default 1).  Place it before the passes that change
the gradient: it acts on the averaged gradient statistic.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.rules.base import ChainedCall, Rule, Sampling, register
from blr_derive.rules.program import is_stat, mean_name, record, replace, scalar


def state_expr(ctx, key, default):
    """Argument ``key`` parsed with the hyperparameters and the candidate's parameters (a renamed parameter is
    written through its map, as ``change_variable`` writes it)."""
    D = ctx.D
    if key not in ctx.args:
        return default
    fam = D.recipe.family
    syms = {**ctx.symbols(), **{name: scalar(p.symbol) for name, p in fam.params.items()}}
    reps = {}
    for old, (new, nsym, value) in D.renamed.items():
        syms[new] = nsym
        reps[scalar(fam.params[old].symbol)] = value
    try:
        e = parse_expression(ctx.args.pop(key), syms, what=f"{ctx.approx.name}.{key}", choices=D.recipe.choices())
    except SpecError as exc:
        raise exc.located(D.recipe.file, ctx.approx.line) from None
    return e.xreplace(reps)


def point_mass_sampling(ctx, samples):
    """The delta method's gradient at the mean as ``samples`` sub-batch calls at θ_k = m (no draw)."""
    D = ctx.D
    call = next((c for c in D.oracle_calls if c.oracle == "grad"), None)
    if call is None:
        raise ctx.fail("needs the gradient oracle: an expectation rule with gradients (delta, monte_carlo)")
    m = scalar(D.recipe.family.params[mean_name(D)].symbol)
    if scalar(call.argument) != m:
        raise ctx.fail(f"the gradient is taken at {call.argument}, not at the mean {m}")
    g_k = sp.Symbol("g_k", real=True)
    D.oracle_calls = [c for c in D.oracle_calls if c is not call]
    # the old oracle symbol now stands for the average over the sub-batches
    D.sampling = Sampling(samples, sp.Symbol("eps", real=True), sp.Symbol("theta_k", real=True), m,
                          [(g_k, "grad")], [(call.symbol, g_k)], draw="point")
    D.symbol_names.setdefault(g_k, r"\hat{g}_k")
    return call.symbol


class SharpnessAware(Rule):
    name = "sharpness_aware"
    kind = "pass"
    equation = "Foret et al. (2021) Eq. 2, Alg. 1; Möllenhoff & Khan (2023) Sec. 4, Alg. 1"
    summary = ("the mean step's gradient at the adversarial point m + ρ·scale·ĝ_k (/‖ĝ_k‖₂): a second oracle call "
               "per sample, at a point computed from the first")

    def rewrite(self, ctx):
        D = ctx.D
        # the loss ℓ is unchanged; the step descends a relaxation of L(q) (bSAM): the objective reports Eq. 2's L
        D.loss_model.relaxed = (
            "the mean step's gradient is taken at an adversarial point (rule sharpness_aware; Foret et al. 2021, "
            "Eq. 2; Möllenhoff & Khan 2023, Sec. 4), so the steps descend a sharpness-aware relaxation of L(q) "
            "(the loss near the worst point of a neighbourhood), not L(q) itself; the value here is Eq. 2's "
            "L(q) of the unperturbed loss ℓ at the state, the quantity the relaxation stands for")
        radius = ctx.expr("radius")
        scale = state_expr(ctx, "scale", sp.Integer(1))
        norm = ctx.args.pop("norm", None)
        if norm not in (None, "l2"):
            raise ctx.fail(f"norm must be 'l2' (the global 2-norm of the gradient), got {norm!r}")
        if D.sampling is None:
            samples = ctx.count("samples")
            ctx.done()
            point_mass_sampling(ctx, samples)
        else:
            if "samples" in ctx.args:
                raise ctx.fail("'samples' is for the delta method; the expectation rule already draws the samples")
            ctx.done()
        sm = D.sampling
        g = ctx.view("grad")
        if not is_stat(D, g):
            raise ctx.fail("acts on the gradient averaged over the samples: place it before the other passes")
        if sm.draw == "tanh_sinh":
            raise ctx.fail("needs gradients at random samples of q or at the mean, not quadrature nodes")
        per = dict(sm.stats)[g]                      # the per-sample gradient (e.g. g_k)
        k_calls = [k for k, o in sm.calls if o == "grad" and per.has(k)]
        if not k_calls:
            raise ctx.fail("the averaged gradient is not built from the gradient oracle at the samples")
        step_dir = scale * per
        if norm == "l2":
            red = sp.Symbol("gsq_k", positive=True)
            sm.reductions.append((red, per**2))
            step_dir = step_dir / sp.sqrt(red)
            D.symbol_names[red] = r"\|\hat{g}_k\|_2^2"
        m = scalar(D.recipe.family.params[mean_name(D)].symbol)
        point = sp.Symbol("theta_adv_k", real=True)
        g_adv = sp.Symbol("g_adv_k", real=True)
        expr = m + radius * step_dir
        sm.chained.append(ChainedCall(g_adv, "grad", point, expr))
        avg = sp.Symbol("g_adv", real=True)
        sm.stats.append((avg, per.xreplace({k: g_adv for k in k_calls})))
        replace(D, g, avg)
        D.views.grad = avg
        D.symbol_names.update({point: r"\theta^{\mathrm{adv}}_k", g_adv: r"\hat{g}^{\mathrm{adv}}_k", avg: r"\bar{g}^{\mathrm{adv}}"})
        record(ctx, "Sharpness-aware gradient",
               "The gradient of the mean step is taken at the adversarial point e_k = ρ·scale·ĝ_k"
               + (" / ‖ĝ_k‖₂ (the global 2-norm, Foret et al. 2021, Eq. 2)" if norm else
                  " (bSAM: around the mean, Möllenhoff & Khan 2023, Alg. 1)")
               + ": a second oracle call per sample whose point depends on the first call's value; the other "
               "statistics made from the oracle's value keep the gradient at the sample.",
               ([(red, per**2)] if norm else []) + [(point, expr), (g_adv, sp.Function("grad")(point)),
                                                    (avg, r"\frac{1}{S}\sum_k \hat{g}^{\mathrm{adv}}_k")])


register(SharpnessAware())
