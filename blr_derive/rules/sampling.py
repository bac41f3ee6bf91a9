"""Natural gradients from samples of the candidate through its declared sampler θ = sampler(u; params):
the score-function and reparameterization estimators (``score_function``, ``reparameterization``) and the
relaxations of a binary family's hard threshold (``concrete_relaxation``, ``straight_through``)."""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.core.matexpr import is_mat
from blr_derive.core.specialfns import binary
from blr_derive.families.symbolic import SIMPLIFY_MAX_OPS, simplify_bounded
from blr_derive.rules.fisher import fisher_at_state, inverse, invertible_symbolically, natural_gradient_at_state
from blr_derive.rules.args import Ctx
from blr_derive.rules.base import RULES, NaturalGradient, OracleCall, Relaxation, Rule, Sampling, TexForm
from blr_derive.spec.sampler import sampler_draws

#: hard thresholds of a binary family's sampler, relaxed by concrete_relaxation and straight_through
THRESHOLDS = (sp.sign, binary)


def hard_thresholds(fam):
    """The thresholds sign(x)/binary(x) of the sampler whose argument depends on the parameters: the sample jumps
    as the parameters move (a binary family's sign(λ + logit(u)/2)), so its gradient in them is not the
    derivative of the sampler (0 a.e.) and the relaxation rules replace them.  A sign of the draws alone, e.g.
    sign(u − ½) in the Laplace inverse CDF −b sign(u − ½) log(1 − 2|u − ½|), is not one: that sampler is smooth in
    b for every u."""
    params = {p.symbol for p in fam.params.values()}
    return sorted((t for t in fam.sampler.atoms(*THRESHOLDS) if t.args[0].free_symbols & params),
                  key=sp.default_sort_key)


def check_sampler(ctx, rule_name):
    """The family must declare a sampler (θ as a function of a uniform draw u and the parameters) with scalar
    statistics; relaxations need a hard threshold sign(·)/binary(·) in it, the reparameterization needs none."""
    fam, approx = ctx.family, ctx.approx(rule_name)
    if ctx.recipe.loss_kind != "abstract":
        return
    if fam.sampler is None:
        raise ctx.fail(f"approximation '{rule_name}' needs samples of q: family '{fam.name}' declares no 'sampler'",
                       approx)
    if is_mat(fam.sampler):
        raise ctx.fail(f"approximation '{rule_name}' draws a scalar variable; family '{fam.name}' samples a matrix "
                       "(its sampler serves `check`)", approx)
    if isinstance(fam.sampler, sp.Tuple):
        raise ctx.fail(f"approximation '{rule_name}' draws one scalar variable; family '{fam.name}' samples "
                       f"{len(fam.sampler)} components (its sampler serves `check`)", approx)
    if any(is_mat(t) for t in fam.T):
        raise ctx.fail(f"approximation '{rule_name}' supports families with scalar statistics", approx)
    if fam.sampler_accept is not None and rule_name != "score_function":
        raise ctx.fail(f"approximation '{rule_name}' differentiates through the sampler; family '{fam.name}' "
                       "declares a rejection sampler (its acceptance depends on the parameters, so that gradient "
                       "is biased): use 'score_function'", approx)
    hard = bool(hard_thresholds(fam))
    if rule_name == "reparameterization" and hard:
        raise ctx.fail(f"approximation 'reparameterization' needs a differentiable sampler; family '{fam.name}' "
                       "samples through sign(·) (use 'concrete_relaxation')", approx)
    if rule_name in ("concrete_relaxation", "straight_through"):
        if not hard:
            raise ctx.fail(f"approximation '{rule_name}' relaxes a hard threshold sign(·) of the family's sampler; "
                           f"family '{fam.name}' has none", approx)
        if [d.name for d, _ in sampler_draws(fam.sampler)] != ["u"]:
            raise ctx.fail(f"approximation '{rule_name}' relaxes a threshold of one uniform draw u; family "
                           f"'{fam.name}' samples from other draws", approx)
        if len(fam.T) != 1 or len(fam.free_params) != 1:
            raise ctx.fail(f"approximation '{rule_name}' supports binary families (one sufficient statistic, one free "
                           "parameter)", approx)


def score_terms(fam, loss_k, theta_k):
    """ℓ(θ_k)(T(θ_k) − μ), whose average over θ_k ~ q is ∇_λ E_q[ℓ] (the score-function identity, Eq. 4)."""
    return [loss_k * (t.xreplace({fam.theta: theta_k}) - m) for t, m in zip(fam.T, fam.mu_ord)]


def sampled_natural_gradient(recipe, D, approx, mode):
    """∇_μ E_q[ℓ] = F(λ)⁻¹ ∇_λ E_q[ℓ] (Eq. 4) with ∇_λ E_q[ℓ] estimated at samples θ_k = sampler(u_k) of q:

    * ``score_function``: ∇_λ E_q[ℓ] = E_q[ℓ(θ)(T(θ) − μ)] (loss values at the samples);
    * ``reparameterization``: ∇_λ E_q[ℓ] = E_u[∇ℓ(θ) ∂θ/∂λ] through the sampler (gradients at the samples).
    """
    fam = recipe.family
    ctx = Ctx(D, approx)
    samples = ctx.count("samples")
    ctx.done()
    accept = fam.sampler_accept         # a rejection sampler's condition, or None
    (u, law), *more = sampler_draws(fam.sampler, accept)  # the draws, uniform or normal
    theta = sp.Symbol("theta_k", real=True)
    stats, per = [], []
    if mode == "score_function":
        o_k, oracle = sp.Symbol("loss_k", real=True), "loss"
        per = score_terms(fam, o_k, theta)
        what = r"\ell(\theta_k)(T_%d(\theta_k) - \mu_%d)"
    else:
        o_k, oracle = sp.Symbol("g_k", real=True), "grad"
        of_lam = fam.sampler.xreplace(fam.ord_from_nat)          # θ(u; λ)
        at = dict(zip(fam.lam, fam.eta))
        per = [o_k * sp.simplify(sp.diff(of_lam, l).xreplace(at)) for l in fam.lam]
        if any(e.has(sp.Derivative, sp.Subs) for e in per):       # e.g. gammaincinv(a, u) in its shape a
            raise ctx.fail(f"the derivative of family '{fam.name}''s sampler {fam.sampler} in its parameters "
                           "has no closed form; use 'score_function'")
        what = r"\nabla\ell(\theta_k)\,\partial\theta_k/\partial\lambda_%d"
    per_sample = per_sample_natural_gradient(fam, per, theta) if mode == "score_function" and accept is None \
        else None
    if per_sample is None:
        stats = [(sp.Symbol(f"dlam{i + 1}", real=True), e) for i, e in enumerate(per)]
        grads = natural_gradient_at_state(D, fam, sp.Matrix([a for a, _ in stats]))
        text = ("∇_λ E_q[ℓ] is estimated with samples θ_k of q (the family's sampler); the Fisher information "
                "F(λ) = ∇²A turns it into the natural gradient (Eq. 4).")
        eqs = [(theta, fam.sampler)] + ([(r"\text{accept}\ \theta_k\ \text{if}", accept, r"\;")] if accept is not None
                                        else []) \
            + [(avg, r"\frac{1}{S}\sum_k " + what % ((i + 1,) * what.count("%d"))) for i, (avg, _) in enumerate(stats)]
    else:
        # F(λ)⁻¹ is the same at every sample: moved inside the mean and written in the draws, the statistics are
        # the natural gradient per sample (no cancellation between averages: θ_k² − m² − 1/s becomes
        # (2m z/√s + (z² − 1)/s), and F⁻¹ of it (z² − 1)s/2)
        stats = [(sp.Symbol(f"ngrad{i + 1}", real=True), e) for i, e in enumerate(per_sample)]
        grads = [a for a, _ in stats]
        text = ("∇_λ E_q[ℓ] = E_q[ℓ(θ)(T(θ) − μ)] is estimated with samples θ_k of q (the family's sampler); the "
                "Fisher information F(λ) = ∇²A turns it into the natural gradient (Eq. 4).  F(λ)⁻¹ does not depend on "
                "the sample, so it is applied to each sample's term, written in the draws (the same estimate, "
                "without the cancellation of averaging T(θ_k) − μ first).")
        eqs = [(theta, fam.sampler)] + [(avg, TexForm(r"\frac{1}{S}\sum_k %s", (e,))) for avg, e in stats]
    D.sampling = Sampling(samples, u, theta, fam.sampler, [(o_k, oracle)], stats,
                          draw=law, more_draws=more, accept=accept)
    D.unsigned.update(a for a, _ in stats)          # estimates of either sign: the state's domain is checked
    D.natural_gradient = NaturalGradient(list(grads))
    D.add(mode, RULES[mode].equation, "Natural gradient from samples of q", text,
          eqs + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g, r"\approx") for i, g in enumerate(grads)])
    return grads


def per_sample_natural_gradient(fam, per, theta):
    """ℓ_k F(λ)⁻¹(T(θ_k) − μ) per sample, with θ_k written as the sampler of the draws and simplified; None for a
    discrete or piecewise sampler, where the Fisher information is too large to invert symbolically, or where a
    term stays larger than the simplification bound."""
    if fam.sampler.has(*THRESHOLDS, sp.Abs, sp.Piecewise, sp.floor, sp.ceiling, sp.Heaviside, sp.Min, sp.Max):
        return None          # a discrete or piecewise sampler: T(θ_k) stays the sample's value
    F = fisher_at_state(fam)
    if not invertible_symbolically(F):
        return None
    terms = [e.xreplace({theta: fam.sampler}) for e in per]
    out = [simplify_bounded(sp.expand(g)) for g in inverse(F) * sp.Matrix(terms)]
    if any(sp.count_ops(g) > SIMPLIFY_MAX_OPS for g in out):
        return None
    return out


def check_quadrature(ctx, rule_name):
    """The quadrature rule needs a scalar variable whose sampler is an inverse CDF of one uniform draw u (no
    rejection, no other draw), and scalar statistics; an explicit loss or the abstract loss oracle."""
    fam, approx = ctx.family, ctx.approx(rule_name)
    if fam.sampler is None or isinstance(fam.sampler, sp.Tuple) or is_mat(fam.sampler):
        raise ctx.fail(f"approximation '{rule_name}' integrates over u = F(θ) through the family's inverse-CDF "
                       f"sampler of a scalar variable; family '{fam.name}' declares none", approx)
    if fam.sampler_accept is not None or [d.name for d, _ in sampler_draws(fam.sampler)] != ["u"]:
        raise ctx.fail(f"approximation '{rule_name}' needs a sampler that is an inverse CDF of one uniform draw u; "
                       f"family '{fam.name}' samples from other draws (use 'score_function')", approx)
    if any(is_mat(t) for t in fam.T):
        raise ctx.fail(f"approximation '{rule_name}' supports families with scalar statistics", approx)
    middle = undefined_at_middle_node(fam)
    if middle is not None:
        raise ctx.fail(f"approximation '{rule_name}' evaluates the sampler at u = 1/2, the middle node of the "
                       f"tanh-sinh rule, where family '{fam.name}''s sampler is not a finite number (at {middle}); "
                       "write it in a form defined at u = 1/2 (a sign of u - 1/2 as sign(u - 1/2); x/abs(x) is read "
                       "as sign(x) already)", approx)


def undefined_at_middle_node(fam):
    """The parameters (as text) at which the sampler θ(u = ½) is not a finite number while θ(u) next to ½ is, or None:
    the tanh-sinh rule's middle node is exactly u = ½ (x/|x| is already written sign(x) there,
    ``core.specialfns.limit_safe``)."""
    ((u, _),) = sampler_draws(fam.sampler)
    rng = np.random.default_rng(41)

    def value(at, scalars):
        try:
            return float(fam.evaluate(fam.sampler.xreplace({u: at}), scalars))
        except (TypeError, ValueError, ZeroDivisionError, ArithmeticError):
            return float("nan")
    for vals in [fam.sample_params(rng, 2) for _ in range(3)]:
        scalars = {k: v for k, v in vals.items() if not is_mat(k) and np.ndim(v) == 0}
        if not np.isfinite(value(sp.Rational(1, 2), scalars)) and np.isfinite(value(sp.Rational(1, 2) + sp.Rational(1, 1000), scalars)):
            return ", ".join(f"{k} = {float(x):.4g}" for k, x in sorted(scalars.items(), key=lambda kv: str(kv[0])))
    return None


def quadrature_natural_gradient(recipe, D, approx, mode):
    """∇_μ E_q[ℓ] = F(λ)⁻¹ E_q[ℓ(θ)(T(θ) − μ)] (Eq. 4) with E_q by the tanh-sinh rule in u: θ_k = F⁻¹(u_k) (the
    sampler), weights w_k (Σ w_k = 1 up to e^(−34)); an explicit loss is written at θ_k, an abstract one is the
    ``loss`` oracle there."""
    fam = recipe.family
    ctx = Ctx(D, approx)
    nodes = ctx.count("nodes", 65)
    if nodes.is_number and (nodes < 3 or nodes % 2 == 0):
        raise ctx.fail(f"nodes must be an odd number of at least 3 (the rule is symmetric about u = 1/2), got {nodes}")
    ctx.done()
    ((u, _),) = sampler_draws(fam.sampler)
    theta = sp.Symbol("theta_k", real=True)
    if recipe.loss_kind == "explicit":
        o_k, calls = recipe.loss.xreplace({fam.theta: theta}), []
    else:
        o_k = sp.Symbol("loss_k", real=True)
        calls = [(o_k, "loss")]
    stats = [(sp.Symbol(f"dlam{i + 1}", real=True), e) for i, e in enumerate(score_terms(fam, o_k, theta))]
    D.sampling = Sampling(nodes, u, theta, fam.sampler, calls, stats, draw="tanh_sinh")
    D.unsigned.update(a for a, _ in stats)          # of either sign: the state's domain is checked
    grads = natural_gradient_at_state(D, fam, sp.Matrix([a for a, _ in stats]))
    D.natural_gradient = NaturalGradient(list(grads))
    D.add(mode, RULES[mode].equation, "Natural gradient by quadrature in the CDF coordinate",
          "∇_λ E_q[ℓ] = E_q[ℓ(θ)(T(θ) − μ)] (the score-function identity) is an integral over u = F(θ) ∈ (0, 1) "
          "with θ = F⁻¹(u) the family's sampler; the tanh-sinh rule u_k = σ(π sinh(t_k)), t_k = kh, with weights "
          "w_k = h π cosh(t_k) σ'(π sinh t_k) integrates it to near machine precision for a smooth ℓ, and F(λ) = ∇²A "
          "turns it into the natural gradient (Eq. 4).",
          [(theta, fam.sampler.xreplace({u: sp.Symbol("u_k", positive=True)}))]
          + [(avg, TexForm(r"\sum_k w_k\,%s", (e,))) for avg, e in stats]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g, r"\approx") for i, g in enumerate(grads)])
    return grads


def relaxed_natural_gradient(recipe, D, approx, mode):
    """Natural gradients of a binary family through its hard-threshold sampler θ = sign(x(u; params)).

    * ``concrete_relaxation`` (Eqs. 50-51): sign(x) → tanh(x/τ), the binary Concrete (Gumbel-softmax)
      relaxation on {-1, +1}; ∇_μ E_q[ℓ] ≈ s∘∇ℓ(θ̂) with s = ∇_μ θ̂ = (∂θ̂/∂p)/(∂μ/∂p) by the chain rule through
      the ordinary parameter p; averaged over ``samples`` uniform draws.  An optional ``eps`` > 0 floors both
      factors, s = (∂θ̂/∂λ + ε)/(∂μ/∂λ + ε), so that s stays finite where tanh saturates (as the BayesBiNN code
      does); ``eps: 0`` (the default) is Eq. 51 exactly.
    * ``straight_through`` (Eq. 48): the τ → 0, zero-noise limit: θ = sign(x(½; params)) and ∇_μ θ ≈ 1.
    """
    fam = recipe.family
    (p,) = [q.symbol for q in fam.free_params]
    (mu_p,) = fam.mu_ord
    u = [s_ for s_ in fam.sampler.free_symbols if s_.name == "u"][0]
    ctx = Ctx(D, approx)
    if mode == "straight_through":
        ctx.done()
        # the hard sample lies in {-1, +1}: the threshold is binary(x) (sign(0) = 0 is not a sample)
        point = fam.sampler.xreplace({u: sp.Rational(1, 2)}).replace(sp.sign, binary)
        taken = {str(s_) for s_ in fam.params} | {h.name for h in recipe.hyper}
        g = sp.Symbol("g" if "g" not in taken else "g_", real=True)
        D.symbol_names[g] = r"\hat{g}"
        D.oracle_calls.append(OracleCall(g, "grad", point, "∇_θ ℓ(θ) at the zero-noise hard sample (straight-through)"))
        D.natural_gradient = NaturalGradient([g])
        D.add(mode, RULES[mode].equation, "Straight-through estimator",
              "Zero noise (u = 1/2, δ = 0) and τ → 0 turn the relaxed sample into the hard one; the straight-through "
              "estimator (Bengio et al., 2013) takes the Jacobian of the threshold as the identity, ∇_μ θ ≈ 1, since "
              "E_q[θ] = μ (the delta method E_q[ℓ(θ)] ≈ ℓ(μ), with the gradient at the hard sample).",
              [(sp.Symbol("theta_t"), point), (r"\nabla_{\mu}\mathbb{E}_q[\bar\ell]", g, r"\approx")])
        return [g]
    tau = ctx.positive("temperature")
    samples = ctx.count("samples")
    eps = ctx.expr("eps", sp.Integer(0))
    ctx.done()
    relaxed = fam.sampler.replace(sp.sign, lambda x: sp.tanh(x / tau)).replace(binary, lambda x: sp.tanh(x / tau))
    theta = sp.Symbol("theta_k", real=True)
    # s = ∇_μ θ̂ = (∂θ̂/∂λ) / (∂μ/∂λ), each factor by the chain rule through the ordinary parameter p;
    # the threshold's argument x stays opaque (X) so that it is printed as the sampler writes it
    (hard,) = hard_thresholds(fam)
    X = sp.Dummy("x", real=True)
    outer = fam.sampler.xreplace({hard: sp.tanh(X / tau)})
    dlam = sp.diff(fam.eta[0], p)
    num = (sp.diff(outer, X) * sp.cancel(sp.diff(hard.args[0], p) / dlam)).xreplace({X: hard.args[0]})
    den = sp.cancel(sp.diff(mu_p, p) / dlam)
    # shown with tanh(x/τ) written as the sample θ_k (the paper's form); evaluated with 1 - tanh(z)² = sech(z)²,
    # which does not cancel to 0 where tanh rounds to ±1 (an exact identity, not an approximation)
    w = sp.Wild("w")
    num_e, den_e = (f.replace(1 - sp.tanh(w) ** 2, sp.sech(w) ** 2) for f in (num, den))
    if eps == 0:
        scale = sp.together(num.xreplace({relaxed: theta}) / den)
        scale_eval = num_e / den_e
    else:
        # a floor ε on both factors of the Jacobian keeps s finite where both underflow
        scale = (num.xreplace({relaxed: theta}) + eps) / (den + eps)
        scale_eval = (num_e + eps) / (den_e + eps)
    g_k = sp.Symbol("g_k", real=True)
    avg = sp.Symbol("ngrad", real=True)
    D.symbol_names.update({theta: r"\hat\theta_k", avg: r"\overline{s\hat g}", tau: r"\tau"})
    D.sampling = Sampling(samples, u, theta, relaxed, [(g_k, "grad")], [(avg, g_k * scale_eval)], draw="uniform",
                          grad_stat=avg)
    D.natural_gradient = NaturalGradient([avg])
    D.relaxation = Relaxation(temperature=tau, sample=relaxed, u=u, eps=eps,
                              scale_evaluated=scale_eval)
    s_sym = sp.Symbol("s_k")
    D.symbol_names[s_sym] = "s_k"
    D.add(mode, RULES[mode].equation, "Concrete relaxation of the binary sample",
          "The family's sampler is a hard threshold sign(x) of a uniform draw u; replacing it by tanh(x/τ) gives the "
          "relaxed sample θ̂ (Eq. 50).  The gradient of the expected loss is taken at θ̂ and carried to μ by the "
          "chain rule, s = ∇_μ θ̂ (Eq. 51); it is averaged over S = %s draws." % samples
          + " s is evaluated with 1 − tanh²(z) = sech²(z), which does not round to 0 where tanh saturates"
          + ("; a floor ε on its two factors keeps it finite where both underflow." if eps != 0 else "."),
          [(fam.theta, fam.sampler), (theta, relaxed), (s_sym, scale), (s_sym, scale_eval),
           (avg, r"\frac{1}{S}\sum_k s_k \nabla_\theta\bar\ell(\hat\theta_k)"),
           (r"\nabla_{\mu}\mathbb{E}_q[\bar\ell]", avg, r"\approx")])
    return [avg]


class SampledRule(Rule):
    """An expectation rule that draws from the family's sampler: the shared applicability check, and
    ``derive`` (one of the derivations above) for the natural gradient."""
    kind = "expectation"
    losses = ("abstract",)
    derive = staticmethod(sampled_natural_gradient)

    def check(self, ctx):
        if ctx.candidate == "single":
            check_sampler(ctx, self.name)

    def natural_gradient(self, ctx):
        return self.derive(ctx.recipe, ctx.D, ctx.approx(self.name), self.name)
