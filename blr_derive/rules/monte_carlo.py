"""``monte_carlo`` — expectations at samples θ_k = m + σε_k of the candidate (weight perturbation, Sec. 4.4,
Eq. 46; the reparameterization trick): E_q[∇ℓ] and E_q[∇²ℓ] are averages of the oracles over the samples.

On the Kronecker (matrix-normal) candidate the samples are W_k = M + L_G⁻ᵀ E_k L_A⁻¹, the full Gaussian's sampler
m + L_S⁻ᵀ ε_k written with the candidate's identities (``blr_derive/rules/kronecker_sampling.py``)."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import RULES, Rule, Sampling, register
from blr_derive.rules.delta import needs_gaussian_moments
from blr_derive.rules.gaussian import gaussian_natural_gradient
from blr_derive.rules.kronecker_sampling import average_samples, sample_points


class MonteCarlo(Rule):
    name = "monte_carlo"
    kind = "expectation"
    equation = "Sec. 4.4 (weight perturbation), Eq. 46"
    summary = "Monte Carlo expectations at samples θ_k = m + σε_k of the candidate (reparameterization)"
    losses = ("abstract",)
    #: single families, and the Kronecker candidate's stages (kronecker_expectation, kronecker_statistics)
    structures = ("single", "kronecker")

    def check(self, ctx):
        if ctx.candidate != "single" or ctx.recipe.loss_kind != "abstract":
            return
        approx = ctx.approx(self.name)
        needs_gaussian_moments(ctx, approx)
        if not ctx.family.elementwise:
            raise ctx.fail(f"approximation 'monte_carlo' supports mean-field (elementwise) families; "
                           f"'{ctx.family.name}' is not", approx)

    def natural_gradient(self, ctx):
        ng, uses_cov, _ = gaussian_natural_gradient(ctx)
        grads, Eg, EH = ng.grads, ng.Eg, ng.EH
        D, fam = ctx.D, ctx.family
        args = ctx.args(self.name)
        samples = args.count("samples")
        args.done()
        m = fam.gaussian_mean
        eps = sp.Symbol("eps", real=True)
        theta = sp.Symbol("theta_k", real=True)
        g_k, h_k = sp.Symbol("g_k", real=True), sp.Symbol("h_k", real=True)
        g_bar, h_bar = sp.Symbol("g", real=True), sp.Symbol("h_bar", real=True)
        theta_expr = m + eps * sp.sqrt(fam.gaussian_cov)
        calls = [(g_k, "grad")] + ([(h_k, "hess")] if uses_cov else [])
        stats = [(g_bar, g_k)] + ([(h_bar, h_k)] if uses_cov else [])
        D.sampling = Sampling(samples, eps, theta, theta_expr, calls, stats)
        D.symbol_names.update({g_bar: r"\bar{g}", h_bar: r"\bar{h}", theta: r"\theta_k", eps: r"\epsilon_k"})
        reps = {Eg: g_bar}
        eqs = [(theta, theta_expr), (Eg, r"\frac{1}{S}\sum_k \nabla_\theta\bar\ell(\theta_k)", r"\approx")]
        if uses_cov:
            reps[EH] = h_bar
            eqs.append((EH, r"\frac{1}{S}\sum_k \nabla^2_\theta\bar\ell(\theta_k)", r"\approx"))
        D.add("monte_carlo", RULES["monte_carlo"].equation, "Monte Carlo expectations",
              "Sample θ_k = m + σε_k, ε_k ~ N(0, 1) (weight perturbation, Sec. 4.4) and average the oracles over "
              f"S = {samples} samples.", eqs)
        return [g_.xreplace(reps) for g_ in grads]

    def kronecker_expectation(self, kctx, args):
        """The Kronecker candidate: its oracles at samples W_k of MN(M, A⁻¹, G⁻¹) instead of the mean."""
        sample_points(kctx, args, self.name)

    def kronecker_statistics(self, kctx, args):
        """The Kronecker candidate: the per-sample gradient and Hessian factors averaged over the samples."""
        average_samples(kctx, self.name)


register(MonteCarlo())
