"""``exact`` — closed-form expectations of an explicit loss (Sec. 1.3.3, Eq. 14):

* a polynomial loss under a Gaussian candidate: E_q[ℓ] from the Gaussian moments written in μ, then ∇_μ;
* a loss linear in the sufficient statistics (a conjugate loss, Sec. 5.1): ∇_μ E_q[ℓ] is its coefficient vector;
* any loss over a finite support: E_q[ℓ] = Σ_θ q(θ)ℓ(θ), differentiated in μ (or in λ, then F(λ)⁻¹, Eq. 4).

Mixture candidates take it under each component (``mixture_loss_gradient``: closed-form Gaussian moments), and
product candidates for each exponential-family block (``product_block``: the factors' messages, Eqs. 58-60).
"""
from __future__ import annotations

import re

import sympy as sp

from blr_derive.core import matcalc
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.expect import scalar_form_error, gaussian_expectation
from blr_derive.core.matexpr import is_mat, simplify_mat
from blr_derive.families.partition import support_points
from blr_derive.families.matstats import linear_in_matrix_statistics
from blr_derive.families.symbolic import loggamma_form, simplify_bounded
from blr_derive.rules.fisher import natural_gradient_at_state, settle_lambdas, state_lambdas
from blr_derive.families.tilting import tilted_expectation
from blr_derive.rules.base import RULES, NaturalGradient, Rule, register
from blr_derive.core.nodes import DataSum
from blr_derive.rules.blr import doit
from blr_derive.rules.finite_support import FINITE_SIMPLIFY_POINTS, finite_sum
from blr_derive.rules.datasum import explicit_expectations
from blr_derive.rules.gaussian import gaussian_natural_gradient
from blr_derive.core.specialfns import nan_outside, shifted_differences, stable_softmax
from blr_derive.core.pretty import pretty
from blr_derive.rules.components import dirichlet_block, one_hot_block
from blr_derive.families.statistics import NotLinearInStatistics, linear_in_statistics
from blr_derive.rules.product import expect_over_blocks, linear_in_block, tex_name


class Exact(Rule):
    name = "exact"
    takes_arguments = False
    kind = "expectation"
    equation = "Sec. 1.3.3, Eq. 14"
    structures = ("single", "mixture")
    summary = "closed-form E_q[ℓ(θ)] of an explicit polynomial loss from the Gaussian moments; ∇_μ read off"
    losses = ("explicit",)

    def check(self, ctx):
        approx, fam = ctx.approx(self.name), ctx.family
        if ctx.recipe.loss_kind != "explicit":
            raise ctx.fail("approximation 'exact' does not apply: the loss is abstract (use 'delta')", approx)
        if ctx.candidate == "mixture":
            theta = fam.base.theta
            if theta is None or (is_mat(theta) and theta.shape[1] != 1):
                raise ctx.fail("'exact' supports mixtures of scalar or vector Gaussian components", approx)
            return
        if fam.is_gaussian:
            theta = fam.theta
            why = None if theta is None or is_mat(theta) else scalar_form_error(ctx.recipe.loss, theta)
            if why is not None:     # beyond the rule (the derivation would fail): said where the rule is named
                raise DerivationError(why)
            return
        matrix_stats = any(is_mat(t) for t in fam.T)
        ctx.conjugate = (linear_in_matrix_statistics if matrix_stats else linear_in_statistics)(fam, ctx.recipe.loss)
        alone = []                      # E_q[ℓ] from the tilted log-partition, computed at most once

        def tilted_alone():
            if not alone:
                alone.append(tilted_expectation(fam, ctx.recipe.loss))
            return alone[0]
        if ctx.conjugate is None and not matrix_stats:
            ctx.with_log_h = linear_with_log_h(fam, ctx.recipe.loss)
            rest = None if ctx.with_log_h is not None else tilted_with_log_h(fam, ctx.recipe.loss, tilted_alone)
            if ctx.with_log_h is not None or rest is not None:
                _refuse_a_second_log_h(ctx, fam, approx, linear=ctx.with_log_h is not None)
                if rest is not None:
                    ctx.tilted, ctx.tilted_with_log_h = rest, True
                return
        if ctx.conjugate is None:
            ctx.finite = support_points(fam) if fam.is_discrete else None
        if ctx.conjugate is None and (ctx.finite is None or len(ctx.finite) > FINITE_SIMPLIFY_POINTS):
            # on a large finite support (hundreds of count vectors) the closed form from A, when there is one, is
            # far cheaper than the sum over the support
            ctx.tilted = tilted_alone()
            if ctx.tilted is not None:
                ctx.finite = None
        if ctx.conjugate is None and ctx.finite is None and ctx.tilted is None:
            raise ctx.fail(f"approximation 'exact' does not apply to family '{fam.name}': the loss is not linear "
                           "in its sufficient statistics, nor a sum of polynomials in them times exponentials of "
                           "linear combinations of them (closed forms from the tilted log-partition), the support is "
                           "not finite and the family has no Gaussian moments; use a rule that integrates numerically "
                           "('quadrature' over the family's inverse-CDF 'sampler', or `loss: abstract` with "
                           "'score_function' or 'monte_carlo') or a family with a closed form", approx)

    #: mixtures: the loss term is differentiated in closed form under component k
    mixture_note = " — applied to the entropy term; the loss term is differentiated in closed form below."
    mixture_bonnet_price = False

    def mixture_loss_gradient(self, ctx, M, grads):
        """Mixture candidates: E_{q_k}[ℓ̄] = Φ(m_k, C_k) from the Gaussian moments (any degree for scalar components;
        Isserlis' theorem for vector ones), ∇_{m_k} E_q[ℓ̄] = π_k ∂Φ/∂m_k, ∇_{C_k} E_q[ℓ̄] = π_k ∂Φ/∂C_k."""
        D, base, recipe, hsym = ctx.D, M.base, ctx.recipe, M.hsym
        mean_b, cov_b = base.gaussian_mean, base.gaussian_cov
        if is_mat(mean_b):            # Φ(M, C) = E_{N(M, C)}[ℓ̄] by matrix calculus (C symmetric)
            Mm, C = sp.MatrixSymbol("M", *mean_b.shape), sp.MatrixSymbol("C", *cov_b.shape)
            msym = set(hsym) | {C}
            try:
                e_loss = simplify_mat(gaussian_expectation(recipe.loss, base.theta, Mm, C + Mm * Mm.T, msym), msym)
                dM, dC = matcalc.gradient(e_loss, [Mm, C], msym)
            except DerivationError as exc:
                raise ctx.fail(f"approximation 'exact': {exc}", ctx.approx(self.name)) from None
        else:
            Mm, C = sp.Symbol("M", real=True), sp.Symbol("C", positive=True)
            e_loss = base.expect_gaussian(recipe.loss, mean=Mm, cov=C)
            dM, dC = sp.diff(e_loss, Mm), sp.diff(e_loss, C)
        at = {Mm: M.mean_k, C: M.cov_k}
        reps = {M.Gm_l: simplify_mat(doit((M.pi_k * dM).xreplace(at)), hsym),
                M.GC_l: simplify_mat(doit((M.pi_k * dC).xreplace(at)), hsym)}
        grads = [simplify_mat(doit(g.xreplace(reps)), hsym) if is_mat(g) else sp.expand(doit(g.xreplace(reps)))
                 for g in grads]
        D.add("exact", RULES["exact"].equation, "Exact expected loss under a component",
              "The loss is a polynomial in θ: E_{q_k}[ℓ̄] = Φ(m_k, C_k) from the Gaussian moments, and "
              "∇_{m_k} E_q[ℓ̄] = π_k ∂Φ/∂m_k, ∇_{C_k} E_q[ℓ̄] = π_k ∂Φ/∂C_k.",
              [(r"\mathbb{E}_{q_k}[\bar\ell]", e_loss.xreplace(at)), (M.Gm_l, reps[M.Gm_l]), (M.GC_l, reps[M.GC_l])]
              + [(g, e) for g, e in zip(M.gblock, grads)])
        return grads

    def product_block(self, R, D, sums, b, current):
        """Product candidates: the natural-gradient messages of the factors to block b (Eqs. 58-60); the
        categorical over a recipe's components in blr_derive/rules/components.py."""
        if b.one_hot:
            return one_hot_block(R, D, sums, b, current)
        if b.simplex:
            return dirichlet_block(R, D, sums, b, current, learning_rate(D, sums, b))
        product_block(R, D, sums, b, current)

    def natural_gradient(self, ctx):
        if ctx.finite is not None:
            return finite_sum(ctx.recipe, ctx.D, ctx.finite)
        if ctx.conjugate is not None:
            return conjugate(ctx.recipe, ctx.D, ctx.conjugate)
        if ctx.with_log_h is not None:
            return conjugate_with_log_h(ctx.recipe, ctx.D, ctx.with_log_h, ctx.g_logh)
        if ctx.tilted is not None and ctx.tilted_with_log_h:
            grads = tilted(ctx.recipe, ctx.D, *ctx.tilted, plus_log_h=True)
            return [g - gh for g, gh in zip(grads, ctx.g_logh)]
        if ctx.tilted is not None:
            return tilted(ctx.recipe, ctx.D, *ctx.tilted)
        fam = ctx.family
        theta, loss = fam.theta, ctx.recipe.loss
        if is_mat(theta) and not fam.elementwise and any(x.has(theta) for x in loss.atoms(sp.exp, DataSum)):
            # a vector Gaussian and exponentials of projections aᵀθ + b (alone or in data sums): their expectations
            # are the Gaussian moment-generating function of each projection (blr_derive/rules/datasum.py); any
            # other data sum is a located error there
            ng, _, _ = gaussian_natural_gradient(ctx)
            return explicit_expectations(ctx.recipe, ctx.D, ng.grads, ng.Eg, ng.EH, ctx.mean_mu, ctx.cov_mu, ctx.sym)
        return polynomial_expectation(ctx.recipe, ctx.D, ctx.mean_mu, ctx.cov_mu, ctx.sym)


def polynomial_expectation(recipe, D, mean_mu, cov_mu, sym):
    """A polynomial loss under a Gaussian: E_q[ℓ] from E[θ] and E[θθᵀ] written in μ, differentiated (Eq. 14)."""
    fam = recipe.family
    e_loss = fam.expect_gaussian(recipe.loss, mean=mean_mu, cov=cov_mu)
    grads = matcalc.gradient(e_loss, fam.mu, sym)
    D.expected_loss = e_loss
    D.natural_gradient = NaturalGradient(list(grads))
    linear = all(not any(g.has(u) for u in fam.mu) for g in grads)
    D.add("exact", RULES["exact"].equation, "Exact expected loss",
          "The loss is a polynomial in θ: its expectation follows from E[θ] and E[θθᵀ] written in μ."
          + (" It is linear in μ, so the natural gradients are its coefficients (Eq. 14)." if linear else ""),
          [((r"\mathbb{E}_q[\bar\ell]"), e_loss)]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g) for i, g in enumerate(grads)])
    return grads


#: a parameter's domain as the quantities that must be positive for a value x to lie in it
_DOMAIN_POSITIVE = {"positive": lambda x: [x], "negative": lambda x: [-x], "unit_interval": lambda x: [x, 1 - x]}


def shifted_domain(fam, shifts):
    """Where E_q[e^{cᵀT}] is finite for every shift c: λ + c in Ω (each free parameter, written in λ + c, in its
    domain), as quantities in the ordinary parameters that must be positive (e.g. α − 1 for E[θ] under an inverse
    gamma); [] when no shift restricts anything (a quantity positive wherever the parameters are valid)."""
    lam_of = dict(zip(fam.lam, fam.eta))
    valid = {p.symbol: sp.Dummy(positive=True) for p in fam.free_params if p.domain == "positive"}
    out = []
    for c in shifts or ():
        moved = {l: l + ci for l, ci in zip(fam.lam, c) if ci != 0}
        if not moved:
            continue
        for _, expr, domain in fam.domain_conditions():
            for q in _DOMAIN_POSITIVE.get(domain, lambda x: [])(sp.simplify(expr.xreplace(moved).xreplace(lam_of))):
                if q.xreplace(valid).is_positive is not True and q not in out:
                    out.append(q)
    return out


def _opaque_tilts(exprs, fam, named=()):
    """The tilt factors exp(A(λ + c) − A(λ)) of ``exprs`` (in the ordinary parameters) each as a positive symbol,
    and the way back: simplified with the factor in sight, sympy splits e^{α log β − α log(β + 1)} into the powers
    β^α·(β + 1)^{−α}, each of which overflows at α = 500, β = 300 (inf/inf = NaN where E[e^{−θ}] under a gamma is
    (300/301)^500 = 0.19), and folds c·(β/(β + 1))^α·log(β/(β + 1)) into log((β/(β + 1))^{c(β/(β + 1))^α}).  The
    factor is positive and its exponent finite wherever the expectation is, so it is kept as that exponential."""
    params = {p.symbol for p in fam.params.values()} | set(named)     # (or λ named at the state)
    tilts = sorted({e for x in exprs for e in x.atoms(sp.exp) if e.free_symbols & params}, key=sp.default_sort_key)
    hidden = {e: sp.Dummy("tilt", positive=True) for e in tilts}
    return hidden, {v: k for k, v in hidden.items()}


def tilted(recipe, D, e_lam, shifts, plus_log_h=False):
    """``plus_log_h``: e_lam is E_q[ℓ + log h] of a loss that contains −log h (tilted_with_log_h), so the base-measure
    term of Eq. 6 cancels (the caller subtracts the placeholders of ∇_μE_q[log h]) and the objective reads
    D.expected_loss_plus_log_h.  E_q[ℓ] for ℓ = Σ P(T)·exp(d + cᵀT) from the tilted log-partition, E_q[Tᵏe^{cᵀT}] = ∂ᵏ_c exp(A(λ + c) − A(λ))
    (App. B; ``blr_derive/families/tilting.py``), written in λ; ∇_μ E_q[ℓ] = F(λ)⁻¹ ∇_λ E_q[ℓ] (Eq. 4), in the
    ordinary parameters."""
    fam = recipe.family
    lam_of = dict(zip(fam.lam, fam.eta))
    # λ at the state: a named number where η is nonlinear, so that ∇_λE_q[ℓ] and F(λ) stay functions of λ
    at = state_lambdas(fam)
    # differences of shifted log Γ and ψ (a beta's E[θ²]: ψ(a + 2) − ψ(a)) as the recurrence's finite sums, each
    # an intermediate definition of the update (shift1, shift2, ...), so that no simplification expands it
    sums = {}
    d = sp.Matrix([shifted_differences(sp.diff(e_lam, l).xreplace(at), sums) for l in fam.lam])
    hidden, shown = _opaque_tilts(list(d) + [shifted_differences(e_lam.xreplace(lam_of))], fam,
                                  {v for v in at.values() if isinstance(v, sp.Dummy)})
    named = {}
    for i, (total, dummy) in enumerate(sums.items()):
        named[dummy] = sp.Symbol(f"shift{i + 1}", real=True)
        D.defs.append((named[dummy], total))
    # (the tilts first: a tilt's exponent may hold a sum, e^{shift3 − shift4} = a(a + 1)/((a + b)(a + b + 1)))
    grads = [simplify_bounded(g).xreplace(shown).xreplace(named)
             for g in natural_gradient_at_state(D, fam, d.xreplace(hidden), at)]
    grads = settle_lambdas(D, fam, at, grads)
    finite = shifted_domain(fam, shifts)
    if finite:                      # outside, E_q[ℓ] is infinite: the update is NaN, never a finite wrong number
        grads = [nan_outside(g, *finite) for g in grads]
    e_loss = simplify_bounded(shifted_differences(e_lam.xreplace(lam_of)).xreplace(hidden)).xreplace(shown)
    if plus_log_h:
        D.expected_loss, D.expected_loss_plus_log_h = None, e_loss
    else:
        D.expected_loss = e_loss
    D.unsigned_gradient = not fam.is_gaussian     # of either sign: the new state is checked (ir/validity.py)
    D.gradient_reads_state = D.unsigned_gradient  # a tilted E_q[ℓ]: its gradient moves with the state
    D.natural_gradient = NaturalGradient(list(grads))
    where = ""
    if shifts:
        where = (" The value is finite only while λ + c stays in the natural parameter space for each shift c used ("
                 + "; ".join("(" + ", ".join(pretty(x) for x in c) + ")" for c in shifts)
                 + "), e.g. E[1/θ] under a gamma needs α > 1.")
    lhs = r"\bar\ell + \log h" if plus_log_h else r"\bar\ell"
    D.add("exact", RULES["exact"].equation, "Exact expected loss from the tilted log-partition",
          ("The loss is −log h(θ) (the full negative log-joint) plus terms that are each " if plus_log_h else
           "Each term of the loss is ")
          + "a polynomial in the sufficient statistics times an exponential of a linear "
          "combination cᵀT of them, so E_q[Tᵏ e^{cᵀT}] = ∂ᵏ_c exp(A(λ + c) − A(λ)) (App. B) gives E_q[ℓ"
          + (" + log h] in λ, and the base-measure term of Eq. 6 cancels (Sec. 5.1)" if plus_log_h else "] in λ")
          + "; ∇_μ = F(λ)⁻¹∇_λ (Eq. 4)." + where,
          [((r"\mathbb{E}_q[%s]" % lhs), e_loss)]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[%s]" % (i + 1, lhs)), g) for i, g in enumerate(grads)])
    return grads


def linear_with_log_h(fam, loss):
    """(c0, [c_i]) with ℓ = −log h(θ) + c0 + Σ c_i T_i(θ), or None: a loss written as the full negative log-joint
    of a conjugate model (the prior's log-density −log p₀ = −log h − <λ₀, T> + A(λ₀) in it), for a family whose
    log h is not itself linear in T (else the loss is, and ``conjugate`` takes it).  Logs of factorials and Γ are
    compared in one form (log θ! = lgamma(θ + 1))."""
    log_h = fam.log_h
    if not fam.depends_on_variable(log_h) or fam.log_h_linear() is not None:
        return None
    total = sp.expand(loggamma_form(sp.expand_log(loss, force=True)) + log_h)
    return linear_in_statistics(fam, total)


def tilted_with_log_h(fam, loss, tilted_alone):
    """(E_q[ℓ + log h](λ), shifts) from the tilted log-partition for a loss that contains −log h(θ) of a family whose
    log h is not linear in T (the full negative log-joint of a non-conjugate model, e.g. c·θ² + lgamma(θ + 1) under
    the Poisson), where ℓ + log h is tilted (a sum of polynomials in T times exponentials of cᵀT) and ℓ alone is not
    (``tilted_alone()``: the caller's E_q[ℓ], computed once for both); None otherwise.  Eq. 6 needs only
    ∇_μE_q[ℓ + log h], so E_q[log h] is never needed (App. B; Sec. 5.1)."""
    log_h = fam.log_h
    if not fam.depends_on_variable(log_h) or fam.log_h_linear() is not None:
        return None
    total = sp.expand(loggamma_form(sp.expand_log(loss, force=True)) + log_h)
    if total == sp.expand(loss) or not fam.depends_on_variable(total) or tilted_alone() is not None:
        return None
    return tilted_expectation(fam, total)


def _refuse_a_second_log_h(ctx, fam, approx, linear):
    """A loss that contains −log h(θ) cancels the base-measure term of Eq. 6 once: not with ``no_entropy`` (nothing
    to cancel), nor with ``family_prior`` (a second −log h).  ``linear``: ℓ + log h is linear in T (else tilted)."""
    for other, why in (("no_entropy", "without the entropy term nothing cancels it"),
                       ("family_prior", "family_prior brings another −log h(θ), and only one cancels")):
        if other not in ctx.names:
            continue
        if other == "no_entropy":
            raise ctx.fail(f"approximation 'exact': the loss contains −log h(θ) of family '{fam.name}', but with "
                           f"'no_entropy' {why}: E_q[log h] would be needed in closed form; drop no_entropy or write "
                           "the loss without −log h", approx)
        if linear:
            raise ctx.fail(f"approximation 'exact': the loss contains −log h(θ) of family '{fam.name}' (it is linear in "
                           f"the sufficient statistics once log h is added), but {why} the base-measure term of Eq. 6; "
                           "write the prior either in the loss or as family_prior, not both", approx)
        raise ctx.fail(f"approximation 'exact': the loss contains −log h(θ) of family '{fam.name}', but {why}: write "
                       "the prior either in the loss or as family_prior, not both", approx)


def conjugate_with_log_h(recipe, D, linear, g_logh):
    """ℓ = −log h + c0 + Σ c_i T_i: E_q[ℓ] = −E_q[log h] + c0 + Σ c_i μ_i, so ∇_μ E_q[ℓ] = c − ∇_μ E_q[log h], and in
    Eq. 6 (∇_μ E_q[ℓ + log h]) the base-measure term cancels exactly: the update is the conjugate one, with no
    E_q[log h] in closed form needed (App. B; Sec. 5.1, as with a prior in the family)."""
    fam = recipe.family
    c0, cs = linear
    D.expected_loss = None            # E_q[ℓ] itself needs E_q[log h]; Eq. 6 needs only E_q[ℓ + log h]
    D.expected_loss_plus_log_h = c0 + fam.inner(cs, fam.mu)    # the objective adds −E_q[log h] where it closes
    grads = [c - g for c, g in zip(cs, g_logh)]
    D.unsigned_gradient = not fam.is_gaussian     # of either sign: the new state is checked (ir/validity.py)
    D.natural_gradient = NaturalGradient(list(grads))
    D.add("exact", RULES["exact"].equation, "Loss with −log h: linear in the statistics once log h is added",
          "The loss is −log h(θ) plus a linear combination of the sufficient statistics (the negative log-joint of a "
          "conjugate model, whose prior brings −log h), so ∇_μ E_q[ℓ] = c − ∇_μ E_q[log h] and the base-measure "
          "term of Eq. 6 cancels: ∇_μ E_q[ℓ + log h] = c (Sec. 5.1; App. B).",
          [((r"\mathbb{E}_q[\bar\ell + \log h]"), c0 + fam.inner(cs, fam.mu))]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell + \log h]" % (i + 1)), c) for i, c in enumerate(cs)])
    return grads


def conjugate(recipe, D, linear):
    """ℓ = c0 + Σ c_i T_i(θ): E_q[ℓ] = c0 + Σ c_i μ_i, so ∇_μ E_q[ℓ] = c (Sec. 5.1; Eq. 14 for Gaussians)."""
    fam = recipe.family
    c0, cs = linear
    e_loss = c0 + fam.inner(cs, fam.mu)
    D.expected_loss = e_loss
    D.unsigned_gradient = not fam.is_gaussian     # of either sign: the new state is checked (ir/validity.py)
    D.natural_gradient = NaturalGradient(list(cs))
    D.add("exact", RULES["exact"].equation, "Conjugate loss: linear in the sufficient statistics",
          "Each term of the loss is a multiple of a sufficient statistic, so E_q[ℓ] is linear in μ and the "
          "natural gradients are its coefficients (Sec. 5.1).",
          [((r"\mathbb{E}_q[\bar\ell]"), e_loss)]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), c) for i, c in enumerate(cs)])
    return list(cs)


# ------------------------------------------------------------------------------- product candidates

def factor_messages(R, D, ctx, b, current):
    """The natural-gradient messages of the factors to block b (Sec. 5.1), summed over the plate for a global
    block (Eq. 54), with the base measure's coefficients when log h is linear in T."""
    fam = b.family
    msgs = [sp.Integer(0)] * len(fam.T)
    eqs, per = [], []
    for f in R.factors:
        if not any(f.expr.has(v) for v in b.variables):
            continue
        try:
            _, cs = linear_in_block(b, f.expr, ctx.sym)
        except NotLinearInStatistics as exc:
            raise SpecError(f"factor '{f.name}' is not linear in the sufficient statistics of block '{b.name}', so "
                            f"the exact rule does not apply: {exc}", R.file, f.line or b.line) from None
        try:
            m = [-expect_over_blocks(R, ctx, c, b, current) for c in cs]
        except DerivationError as exc:
            raise SpecError(f"factor '{f.name}', block '{b.name}': {exc}", R.file, f.line or b.line) from None
        if f.plate and not b.local:
            try:
                m = [ctx.plate_sum(x) for x in m]
            except DerivationError as exc:
                raise SpecError(f"factor '{f.name}', block '{b.name}': {exc}", R.file, f.line or b.line) from None
        msgs = [a + x for a, x in zip(msgs, m)]
        per.append((f, m))
        for i, x in enumerate(m):
            eqs.append((sp.Symbol(r"\tilde\lambda^{(%d)}_{%s \to %s}" % (i + 1, tex_name(f.name), tex_name(b.name))), x))
    logh = fam.log_h
    if fam.depends_on_variable(logh):
        lin = fam.log_h_linear()
        if not lin:
            raise SpecError(f"block '{b.name}': E_q[log h] of family '{fam.name}' is not linear in T", R.file, b.line)
        msgs = [a - c for a, c in zip(msgs, lin[1])]
    if b.local:
        for _, s, _ in b.state:
            ctx.row.add(s)
    D.add("exact", RULES["exact"].equation, f"Block `{b.name}`: natural-gradient messages of the factors",
          f"Each factor is linear in T(x_{b.name}) of `{fam.name}`, so its natural gradient is minus its coefficients "
          "(Sec. 5.1); the coefficients are averaged over the other blocks' current candidates (exactly, since "
          "they are linear in those blocks' statistics, or at the point value of a delta block)"
          + (", and summed over the plate rows into plate statistics (Eq. 54)" if any(
              f.plate for f in R.factors) and not b.local else "") + ".", eqs)
    return msgs, per


def learning_rate(D, ctx, b):
    """ρ of block b: a number, a hyperparameter or a Robbins-Monro schedule in t (one symbol per schedule)."""
    rho = b.rho
    if b.schedule is not None:
        if rho not in ctx.rates:
            rs = sp.Symbol("rho_t" if not ctx.rates else f"rho_t{len(ctx.rates) + 1}", positive=True)
            D.symbol_names[rs] = r"\rho_t" if not ctx.rates else r"\rho_t^{(%d)}" % (len(ctx.rates) + 1)
            ctx.rates[rho] = rs
            D.assignments.append((rs, rho))
            D.add("robbins_monro", RULES["robbins_monro"].equation, "Robbins-Monro learning rate",
                  "ρ_t = (t + delay)^(-forgetting) with forgetting in (1/2, 1]: Σρ_t = ∞ and Σρ_t² < ∞, so the "
                  "stochastic steps converge to a fixed point of the full-batch update (Sec. 5.3).",
                  [(rs, rho)])
        rho = ctx.rates[rho]
    return rho


def product_block(R, D, ctx, b, current):
    """A block with an exponential family: the BLR step (Eq. 6) on q_b with the other blocks fixed; each factor
    linear in T_b sends the message λ̃_f = −E_{q_{−b}}[c_f] (Sec. 5.1) and λ_b ← (1−ρ_b)λ_b + ρ_b Σ_f λ̃_f (Eq. 58)."""
    fam = b.family
    pmap = {p: s for _, s, p in b.state}
    msgs, per = factor_messages(R, D, ctx, b, current)
    rho = learning_rate(D, ctx, b)
    eta_now = [e.xreplace(pmap) for e in fam.eta]
    lam_new = [sp.Symbol(f"{b.name}_lambda{i + 1}", real=True) for i in range(len(fam.lam))]
    for i, l in enumerate(lam_new):
        D.symbol_names[l] = r"\lambda^{(%d)}_{%s}" % (i + 1, tex_name(b.name))
    upd = [sp.expand(msg) if rho == 1 else (1 - rho) * e + rho * msg for e, msg in zip(eta_now, msgs)]
    if b.messages:
        upd = message_form(R, D, b, per, rho)
    rule_text = ("With ρ = 1 the old natural parameters drop out: λ is the sum of the messages (Eq. 58; the same as "
                 "Eq. 60 with every message replaced)." if rho == 1 else
                 "λ ← (1 - ρ)λ + ρ Σ_f λ̃_f (Eq. 58), equivalently every message smoothed with the same ρ (Eq. 60).")
    D.add("factor_messages", RULES["factor_messages"].equation,
          f"Block `{b.name}`: {'local ' if b.local else ''}BLR step", rule_text,
          [(l, u, r"\leftarrow") for l, u in zip(lam_new, upd)])
    target = D.local_assign if b.local else D.assignments
    target.extend(zip(lam_new, upd))
    outs = []
    for name, s, p in b.state:
        e = stable_softmax(fam.ord_from_nat[p].xreplace(dict(zip(fam.lam, lam_new))))
        if b.local:
            outs.append((s, e))
            D.local_outputs.append((name, s))
        else:
            ns = sp.Symbol(f"{name}_new", **s.assumptions0)
            D.symbol_names[ns] = "{%s}'" % D.symbol_names.get(s, str(s))
            outs.append((ns, e))
            D.outputs.append((name, ns))
            current[s] = ns
    text = f"The inverse map of `{fam.name}` from natural to ordinary parameters."
    if b.local and b.constraint:
        # the last one-hot component's probability, from λ directly (Sec. 1.2: E[θ_K] = 1 − Σ_k μ_k, written as
        # exp(−logsumexp(0, λ)) by the stable softmax): the other blocks average that component with it
        (last, rest), = b.constraint.items()
        ords = {p: e for p, e in fam.ord_from_nat.items()}
        mean = rest.xreplace({v: m for v, m in zip(b.variables[:-1], fam.mu_ord)}).xreplace(ords)
        mean = stable_softmax(sp.together(mean.xreplace(dict(zip(fam.lam, lam_new)))))
        name = implied_name(b)
        s = sp.Symbol(name, positive=True)
        D.symbol_names[s] = r"\mathbb{E}[%s]" % sp.latex(last)
        outs_last = [(s, mean)]
        target.append((s, mean))
        D.local_outputs.append((name, s))
        ctx.row.add(s)
        ctx.implied[b.name] = (last, s)
        text += (f" The probability of the last component, {last} = 1 − the others, is computed from λ directly "
                 "(never as one minus the other probabilities, which cancels when it is small).")
    else:
        outs_last = []
    target.extend(outs)
    D.add("natural_to_ordinary", RULES["natural_to_ordinary"].equation, f"Block `{b.name}`: ordinary parameters",
          text, [(s, e, r"\leftarrow") for s, e in outs + outs_last])


def implied_name(b):
    """The name of a one-hot block's last probability: the pattern of its parameters' names continued (``z_p1``,
    ``z_p2`` → ``z_p3``), else ``<block>_mean_<component>``; never one of the block's own names."""
    params = [name for name, _, _ in b.state]
    m = re.fullmatch(r"(.*?)(\d+)", params[-1]) if params else None
    name = f"{m.group(1)}{int(m.group(2)) + 1}" if m and int(m.group(2)) == len(params) else None
    if name is None or name in params:
        name = f"{b.name}_mean_{b.variables[-1].name}"
    return name


def message_form(R, D, b, per, rho):
    """Eq. 60: one natural parameter λ̃_f per factor is the state; each is smoothed with ρ and λ = Σ_f λ̃_f.
    The block's ordinary parameters are computed from the stored messages before the step (prelude)."""
    fam = b.family
    syms, news, eqs = [], [], []
    for f, m in per:
        row, new_row = [], []
        for i, x in enumerate(m):
            name = f"{b.name}_{f.name}_msg{i + 1}"
            ms, ns = sp.Symbol(name, real=True), sp.Symbol(f"{name}_new", real=True)
            D.symbol_names[ms] = r"\tilde\lambda^{(%d)}_{%s \to %s}" % (i + 1, tex_name(f.name), tex_name(b.name))
            D.symbol_names[ns] = "{%s}'" % D.symbol_names[ms]
            D.message_state.setdefault(b.name, []).append((name, ms, f.name, i))
            D.assignments.append((ns, sp.expand(x) if rho == 1 else (1 - rho) * ms + rho * x))
            D.outputs.append((name, ns))
            eqs.append((ns, D.assignments[-1][1], r"\leftarrow"))
            row.append(ms)
            new_row.append(ns)
        syms.append(row)
        news.append(new_row)
    lam_old = [sp.Add(*[r[i] for r in syms]) for i in range(len(fam.T))]
    for name, s, p in b.state:
        D.prelude.append((s, stable_softmax(fam.ord_from_nat[p].xreplace(dict(zip(fam.lam, lam_old))))))
    D.add("factor_messages", "Eq. 60", f"Block `{b.name}`: messages as state (Eq. 60)",
          "Each factor's message is stored and smoothed with the same ρ; the block's natural parameter is their "
          "sum, and its current parameters are computed from the stored messages at the start of the step.",
          [(s, e, "=") for s, e in D.prelude[-len(b.state):]] + eqs)
    return [sp.Add(*[r[i] for r in news]) for i in range(len(fam.T))]


register(Exact())
