"""The BLR step (Eq. 6) and its approximation passes, producing a :class:`Derivation`.

Pipeline for one recipe::

    λ_{t+1} = (1-ρ) λ_t - ρ ∇_μ E_q[ℓ + log h]            (blr, Eq. 6)
    ∇_μ E_q[log h]     from Gaussian moments               (base_measure, App. B)
    ∇_μ E_q[ℓ]         exact (explicit loss, Eq. 14)  or
                       chain rule (App. D) + Bonnet (Eq. 10) + Price (Eq. 11)
                       + an expectation approximation (delta, App. C)
    ordinary params    solved block by block from λ_{t+1} (Eq. 9), with the
                       increment form where it is shorter (Eq. 12)
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core import budget
from blr_derive.core import matcalc
from blr_derive.derive.derivation import Derivation
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.matcalc import is_mat, like_symbol, simplify_mat
from blr_derive.spec.recipe import Recipe
from blr_derive.rules.registry import RULES
from blr_derive.core.specialfns import binary


def _fail(recipe, msg, approx=None):
    line = approx.line if approx is not None else None
    if line is None and recipe.spec is not None:
        line = recipe.spec.line_of("approximations") if "approximations" in recipe.spec else recipe.spec.line_of("loss")
    return SpecError(msg, recipe.file, line)


def derive(recipe: Recipe) -> Derivation:
    spec = recipe.spec
    budget.where(recipe.file, spec.line_of("loss") if hasattr(spec, "line_of") and "loss" in spec else 1)
    if getattr(recipe, "blocks", None):          # factorized candidate: coordinate-wise steps (Sec. 5.2-5.4)
        from blr_derive.candidates.product import derive_factorized
        return derive_factorized(recipe)
    fam = recipe.family
    if getattr(fam, "is_mixture", False):              # finite mixtures: the mixture BLR (Eq. 28)
        from blr_derive.candidates.mixture import derive_mixture
        return derive_mixture(recipe)
    D = Derivation(recipe)
    sym = set(fam.symmetric) | {d.symbol for d in recipe.data if d.symmetric}
    names = {a.name for a in recipe.approximations}
    approx_by_name = {a.name: a for a in recipe.approximations}
    rho = recipe.hyper_symbol(recipe.learning_rate)
    for p in fam.params.values():
        D.symbol_names[p.symbol] = (r"\mathbf{%s}" % p.name) if is_mat(p.symbol) else p.name
    for l, u in zip(fam.lam, fam.mu):
        D.symbol_names[l] = r"\lambda^{(%s)}" % l.name[6:]
        D.symbol_names[u] = r"\mu^{(%s)}" % u.name[2:]
    D.symbol_names[rho] = r"\rho" if recipe.learning_rate == "rho" else recipe.learning_rate

    # ---- applicability of the named approximations
    for a in recipe.approximations:
        if a.name in ("dropout_masks", "separated_components"):
            raise _fail(recipe, f"approximation '{a.name}' applies to mixture candidates (family: {{mixture: ...}}); "
                        f"'{fam.name}' is not a mixture", a)
    expectation_rules = [a for a in recipe.approximations if RULES[a.name].kind == "expectation"]
    if len(expectation_rules) > 1:
        raise _fail(recipe, "at most one expectation rule may be named (got "
                    + ", ".join(a.name for a in expectation_rules) + ")", expectation_rules[1])
    if recipe.loss_kind == "explicit":
        derived = [approx_by_name[n] for n in ("delta", "gauss_hermite") if n in names]
        if derived and not (fam.is_gaussian and not fam.elementwise and is_mat(fam.theta)):
            raise _fail(recipe, f"approximation '{derived[0].name}' does not apply to an explicit loss over family "
                        f"'{fam.name}': it needs a Gaussian family over a vector (e.g. gaussian_full)", derived[0])
        if "exact" not in names and not derived:
            raise _fail(recipe, "an explicit loss needs an expectation rule: add 'exact' (or 'delta', "
                        "'gauss_hermite' for sums over data)")
    elif names & set(SAMPLER_RULES):
        a = next(approx_by_name[n] for n in SAMPLER_RULES if n in names)
        if fam.sampler is None:
            raise _fail(recipe, f"approximation '{a.name}' needs samples of q: family '{fam.name}' declares no "
                        "'sampler'", a)
        if any(is_mat(t) for t in fam.T):
            raise _fail(recipe, f"approximation '{a.name}' supports families with scalar statistics", a)
        hard = fam.sampler.has(*THRESHOLDS)
        if a.name == "reparameterization" and hard:
            raise _fail(recipe, f"approximation 'reparameterization' needs a differentiable sampler; family "
                        f"'{fam.name}' samples through sign(·) (use 'concrete_relaxation')", a)
        if a.name in ("concrete_relaxation", "straight_through"):
            if not hard:
                raise _fail(recipe, f"approximation '{a.name}' relaxes a hard threshold sign(·) of the family's "
                            f"sampler; family '{fam.name}' has none", a)
            if len(fam.T) != 1 or len(fam.free_params) != 1:
                raise _fail(recipe, f"approximation '{a.name}' supports binary families (one sufficient statistic, "
                            "one free parameter)", a)
    else:
        if "exact" in names:
            raise _fail(recipe, "approximation 'exact' does not apply: the loss is abstract (use 'delta')",
                        approx_by_name["exact"])
        if not fam.is_gaussian:
            a = expectation_rules[0] if expectation_rules else None
            raise _fail(recipe, f"approximation '{a.name if a else 'delta'}' does not apply to family '{fam.name}': "
                        "Bonnet/Price gradients need a family with Gaussian moments (a 'gaussian' section)", a)
        if "delta" not in names and "monte_carlo" not in names:
            raise _fail(recipe, "an abstract loss needs an expectation approximation for E_q[∇ℓ], E_q[∇²ℓ]: "
                        "add 'delta' or 'monte_carlo'")
        if "monte_carlo" in names and not fam.elementwise:
            raise _fail(recipe, f"approximation 'monte_carlo' supports mean-field (elementwise) families; "
                        f"'{fam.name}' is not", approx_by_name["monte_carlo"])
    conjugate = finite = None
    if (recipe.loss_kind == "explicit" or "exact" in names) and not fam.is_gaussian:
        from blr_derive.families.family import linear_in_statistics, support_points
        conjugate = linear_in_statistics(fam, recipe.loss)
        if conjugate is None:
            finite = support_points(fam) if fam.is_discrete else None
        if conjugate is None and finite is None:
            raise _fail(recipe, f"approximation 'exact' does not apply to family '{fam.name}': the loss is not linear "
                        "in its sufficient statistics, the support is not finite and the family has no Gaussian "
                        "moments", approx_by_name.get("exact"))

    # ---- Step: the family
    D.add("family", fam.reference or "Table 2", f"Candidate family `{fam.name}`",
          "Natural parameters λ, sufficient statistics T(θ) and expectation parameters μ = ∇A(λ) "
          "(derived by matrix differential calculus).",
          [(l, e) for l, e in zip(fam.lam, fam.eta)] + [(u, e) for u, e in zip(fam.mu, fam.mu_ord)])

    # ---- Step: BLR (Eq. 6)
    gblock = [like_symbol(f"grad_mu{i + 1}", u) for i, u in enumerate(fam.mu)]
    for i, g in enumerate(gblock):
        D.symbol_names[g] = r"\nabla_{\mu^{(%d)}} \mathbb{E}_q[\bar\ell + \log h]" % (i + 1)
    lam_next = [like_symbol(f"{l.name}_next", l) for l in fam.lam]
    for i, l in enumerate(lam_next):
        D.symbol_names[l] = r"\lambda^{(%d)}_{t+1}" % (i + 1)
    D.add("blr", RULES["blr"].equation, "The Bayesian learning rule",
          "Natural-gradient descent on E_q[ℓ] - H(q) in the form of Eq. 6, which keeps the base-measure term "
          "∇_μ E_q[log h] explicit (App. B).",
          [(ln, (1 - rho) * l - rho * g) for ln, l, g in zip(lam_next, fam.lam, gblock)])
    keep = sp.Integer(1) - rho          # the coefficient of λ_t: the entropy's natural gradient is -λ (App. B)
    if "no_entropy" in names:
        keep = sp.Integer(1)
        D.add("no_entropy", RULES["no_entropy"].equation, "No entropy term",
              "Minimising E_q[ℓ] alone (Eq. 2 without -H(q)): ∇_μ H(q) = -λ - ∇_μ E_q[log h] drops out, so λ_t is "
              "not shrunk and the base-measure term vanishes: no exponential smoothing (Sec. 4.5, STE).",
              [(ln, l - rho * g) for ln, l, g in zip(lam_next, fam.lam, gblock)])

    mean_mu = fam.mean_of_mu() if fam.is_gaussian else None
    cov_mu = fam.cov_of_mu() if fam.is_gaussian else None

    # ---- Step: base measure
    logh = fam.log_h
    lin = fam.log_h_linear() if (not fam.is_gaussian and fam.depends_on_variable(logh)) else None
    if "no_entropy" in names:
        g_logh = [sp.ZeroMatrix(*u.shape) if is_mat(u) else sp.Integer(0) for u in fam.mu]
    elif lin is not None:
        g_logh = list(lin[1])
        D.add("base_measure", RULES["base_measure"].equation, "Gradient of the base-measure term",
              "log h(θ) is linear in the sufficient statistics, so ∇_μ E_q[log h] is its coefficient vector.",
              [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\log h]" % (i + 1)), g) for i, g in enumerate(g_logh)])
    elif fam.depends_on_variable(logh):
        if not fam.is_gaussian:
            raise _fail(recipe, f"family '{fam.name}': E_q[log h] has no closed form the BLR can use")
        e_logh = fam.expect_gaussian(logh, mean=mean_mu, cov=cov_mu)
        g_logh = matcalc.gradient(e_logh, fam.mu, sym)
        D.add("base_measure", RULES["base_measure"].equation, "Gradient of the base-measure term",
              "h(θ) is not constant, so E_q[log h(θ)] is computed from the Gaussian moments in μ and differentiated.",
              [((r"\mathbb{E}_q[\log h]"), e_logh)]
              + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\log h]" % (i + 1)), g) for i, g in enumerate(g_logh)])
    else:
        g_logh = [sp.ZeroMatrix(*u.shape) if is_mat(u) else sp.Integer(0) for u in fam.mu]
        D.add("base_measure", RULES["base_measure"].equation, "Constant base measure",
              f"h(θ) = {sp.sstr(fam.h)} does not depend on θ, so ∇_μ E_q[log h] = 0 and ∇_μ H(q) = -λ (App. B).")

    # ---- Step(s): natural gradient of the expected loss
    if "concrete_relaxation" in names or "straight_through" in names:
        mode = "concrete_relaxation" if "concrete_relaxation" in names else "straight_through"
        g_loss = _relaxed_natural_gradient(recipe, D, approx_by_name[mode], mode)
    elif "score_function" in names or "reparameterization" in names:
        mode = "score_function" if "score_function" in names else "reparameterization"
        g_loss = _sampled_natural_gradient(recipe, D, approx_by_name[mode], mode)
    elif finite is not None:
        g_loss = _finite_sum_gradient(recipe, D, finite)
    elif conjugate is not None:
        g_loss = _conjugate_gradient(recipe, D, conjugate)
    elif recipe.loss_kind == "explicit" and "exact" in names:
        g_loss = _exact_loss_gradient(recipe, D, mean_mu, cov_mu, sym)
    else:
        g_loss = _abstract_loss_gradient(recipe, D, mean_mu, cov_mu, sym)

    if "family_prior" in names:
        g_loss = _family_prior(recipe, D, g_loss, g_logh, approx_by_name["family_prior"], "no_entropy" in names)

    if "posterior_correction" in names:          # SVRG and beyond (blr_derive/poco.py)
        from blr_derive.rules.posterior_correction import posterior_correction
        g_loss = posterior_correction(recipe, D, g_loss, sym)
    if recipe.federated is not None:             # client step of Bayesian ADMM (blr_derive/federated.py)
        from blr_derive.rules.federated import local_objective
        g_loss = local_objective(recipe, D, g_loss, g_logh, sym)

    # ---- assemble λ_{t+1} at the current state: μ -> μ(ordinary)
    at_state = dict(zip(fam.mu, fam.mu_ord))
    lam_new = []
    for i in range(len(fam.lam)):
        g = g_loss[i] + g_logh[i] if not (is_mat(g_loss[i])) else sp.MatAdd(g_loss[i], g_logh[i])
        g = simplify_mat(_doit(g).xreplace(at_state), sym)
        new = simplify_mat(_expand(keep * fam.eta[i] - rho * g), sym)
        lam_new.append(new)
    D.add("blr", RULES["blr"].equation, "Natural-parameter update",
          "Substituting the natural gradients, evaluated at μ_t = μ(ordinary parameters), into Eq. 6.",
          [(ln, e, r"\leftarrow") for ln, e in zip(lam_next, lam_new)])

    # ---- step approximations
    if "unit_learning_rate" in names:
        lam_new = [simplify_mat(_expand(e.xreplace({rho: 1})), sym) for e in lam_new]
        D.add("unit_learning_rate", RULES["unit_learning_rate"].equation, "Learning rate ρ = 1",
              "With ρ_t = 1 the old natural parameters drop out: one step lands on the fixed point of Eq. 5.",
              [(ln, e, r"\leftarrow") for ln, e in zip(lam_next, lam_new)])

    prev_updates = []
    if "natural_momentum" in names:
        lam_new, prev_updates = _natural_momentum(recipe, D, lam_new, lam_next, sym, approx_by_name["natural_momentum"])

    _solve_ordinary(recipe, D, lam_new, sym)
    D.updates.extend(prev_updates)
    _apply_passes(recipe, D)
    if recipe.federated is not None:             # dual and server steps of Bayesian ADMM
        from blr_derive.rules.federated import derive_server
        derive_server(recipe, D, sym)
    return D


SAMPLER_RULES = ("score_function", "reparameterization", "concrete_relaxation", "straight_through")
#: hard thresholds of a binary family's sampler, relaxed by concrete_relaxation and straight_through
THRESHOLDS = (sp.sign, binary)


def _natural_momentum(recipe, D, lam_new, lam_next, sym, approx):
    """BLR with momentum in natural parameters (App. F, Eqs. 79-80): λ_{t+1} += γ(λ_t − λ_{t−1}).

    The previous ordinary parameters become state (``<p>_prev``, initialised to the parameter itself).
    For the mean-field Gaussian this gives s_{t+1} = (1−ρ)s + ρh + γ(s − s_{t−1}) and
    m_{t+1} = m − ρ g/s_{t+1} + γ s_{t−1}(m − m_{t−1})/s_{t+1}, the exact form of Eq. 81."""
    from blr_derive.rules.passes import AuxState, Ctx
    fam = recipe.family
    ctx = Ctx(D, approx)
    gamma = ctx.expr("momentum")
    ctx.done()
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
        out.append(simplify_mat(_expand(ln + gamma * (e - e.xreplace(prev))), sym))
    D.add("natural_momentum", RULES["natural_momentum"].equation, "Momentum in natural parameters",
          "Mirror descent with a momentum term (Eq. 79) adds γ(λ_t − λ_{t−1}) to the BLR step (Eq. 80).",
          [(ln, e, r"\leftarrow") for ln, e in zip(lam_next, out)])
    return out, updates


def _apply_passes(recipe, D):
    from blr_derive.rules.passes import PASSES, Ctx
    passes = [a for a in recipe.approximations if RULES[a.name].kind == "pass"]
    D.elementwise = recipe.family.elementwise or _scalarize_elementwise(D, dry=True)
    if not passes:
        return
    if not D.elementwise:
        raise _fail(recipe, f"approximation '{passes[0].name}' needs an elementwise update; this update mixes "
                    "coordinates (matrix products)", passes[0])
    if not recipe.family.elementwise:
        _scalarize_elementwise(D)
    D.views = {"grad": None, "hess": None}
    for sym, oracle, _, _ in D.oracle_calls:
        D.views[oracle] = sym
    if D.sampling is not None:
        for avg, e in D.sampling.stats:
            for k_sym, oracle in D.sampling.calls:
                if e == k_sym:
                    D.views[oracle] = avg
        D.views.update(D.sampling.views)
        if D.sampling.grad_stat is not None:
            D.views["grad"] = D.sampling.grad_stat
    for name, sym, _ in D.updates:
        D.views[name] = sym
    for a in passes:
        try:
            PASSES[a.name](Ctx(D, a))
        except SpecError as exc:                   # e.g. a helper's unlocated error: name the approximation's line
            raise exc.located(recipe.file, a.line) from None
    # dead definitions and oracle calls are dropped
    used = set()
    for _, _, e in D.updates:
        used |= e.free_symbols
    changed = True
    while changed:
        changed = False
        for s, e in D.defs:
            if s in used and not e.free_symbols <= used:
                used |= e.free_symbols
                changed = True
    D.defs = [(s, e) for s, e in D.defs if s in used]
    D.oracle_calls = [c for c in D.oracle_calls if c[0] in used]
    if D.sampling is not None:
        sm = D.sampling
        sm.stats = [(a, e) for a, e in sm.stats if a in used]
        needed = set()
        for _, e in sm.stats:
            needed |= e.free_symbols
        sm.calls = [(k, o) for k, o in sm.calls if k in needed]


def _scalarize_elementwise(D, dry=False):
    """Vector updates that only add and scale vectors act coordinate-wise: rewrite them with scalars."""
    def ok(e):
        for node in sp.preorder_traversal(e):
            if isinstance(node, (sp.Inverse, sp.Transpose, sp.Trace, sp.Determinant, sp.Identity)):
                return False
            if isinstance(node, sp.MatrixSymbol) and node.shape[1] != 1:
                return False
            if isinstance(node, sp.MatMul) and sum(1 for a in node.args if is_mat(a)) > 1:
                return False
        return True
    if not all(ok(e) for _, _, e in D.updates):
        return False
    if dry:
        return True

    def scal(e):
        return _scalar_expr(e)
    D.updates = [(n, sp.Symbol(s.name, real=True), scal(e)) for n, s, e in D.updates]
    D.oracle_calls = [(sp.Symbol(c[0].name, real=True), c[1], sp.Symbol(c[2].name, real=True), c[3])
                      for c in D.oracle_calls]
    return True


def _scalar_expr(e):
    """The same expression with vector symbols read as scalars (coordinate-wise)."""
    if isinstance(e, sp.MatrixSymbol):
        return sp.Symbol(e.name, real=True)
    if isinstance(e, sp.MatAdd):
        return sp.Add(*[_scalar_expr(a) for a in e.args])
    if isinstance(e, sp.MatMul):
        return sp.Mul(*[_scalar_expr(a) for a in e.args])
    if not e.args:
        return e
    return e.func(*[_scalar_expr(a) for a in e.args])


def _doit(e):
    return e.doit() if hasattr(e, "doit") else e


def _expand(e):
    try:
        return sp.expand(e)
    except Exception:  # pragma: no cover
        return e


# --------------------------------------------------------------------- loss gradients

def _exact_loss_gradient(recipe, D, mean_mu, cov_mu, sym):
    fam = recipe.family
    e_loss = fam.expect_gaussian(recipe.loss, mean=mean_mu, cov=cov_mu)
    grads = matcalc.gradient(e_loss, fam.mu, sym)
    D.placeholders["expected_loss"] = e_loss
    D.placeholders["natural_gradient"] = (list(grads), None, None)
    linear = all(not any(g.has(u) for u in fam.mu) for g in grads)
    D.add("exact", RULES["exact"].equation, "Exact expected loss",
          "The loss is a polynomial in θ: its expectation follows from E[θ] and E[θθᵀ] written in μ."
          + (" It is linear in μ, so the natural gradients are its coefficients (Eq. 14)." if linear else ""),
          [((r"\mathbb{E}_q[\bar\ell]"), e_loss)]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g) for i, g in enumerate(grads)])
    return grads


def _sampled_natural_gradient(recipe, D, approx, mode):
    """∇_μ E_q[ℓ] = F(λ)⁻¹ ∇_λ E_q[ℓ] (Eq. 4) with ∇_λ E_q[ℓ] estimated at samples θ_k = sampler(u_k) of q:

    * ``score_function``: ∇_λ E_q[ℓ] = E_q[ℓ(θ)(T(θ) − μ)] (loss values at the samples);
    * ``reparameterization``: ∇_λ E_q[ℓ] = E_u[∇ℓ(θ) ∂θ/∂λ] through the sampler (gradients at the samples).
    """
    from blr_derive.derive.derivation import Sampling
    from blr_derive.rules.passes import Ctx
    fam = recipe.family
    ctx = Ctx(D, approx)
    samples = ctx.count("samples")
    ctx.done()
    u = sp.Symbol("u", positive=True)
    theta = sp.Symbol("theta_k", real=True)
    th = fam.theta
    stats, per = [], []
    if mode == "score_function":
        o_k, oracle = sp.Symbol("loss_k", real=True), "loss"
        per = [o_k * (t.xreplace({th: theta}) - m) for t, m in zip(fam.T, fam.mu_ord)]
        what = r"\ell(\theta_k)(T_%d(\theta_k) - \mu_%d)"
    else:
        o_k, oracle = sp.Symbol("g_k", real=True), "grad"
        of_lam = fam.sampler.xreplace(fam.ord_from_nat)          # θ(u; λ)
        at = dict(zip(fam.lam, fam.eta))
        per = [o_k * sp.simplify(sp.diff(of_lam, l).xreplace(at)) for l in fam.lam]
        what = r"\nabla\ell(\theta_k)\,\partial\theta_k/\partial\lambda_%d"
    for i, e in enumerate(per):
        avg = sp.Symbol(f"dlam{i + 1}", real=True)
        stats.append((avg, e))
    D.sampling = Sampling(samples, u, theta, fam.sampler, [(o_k, oracle)], stats, draw="uniform")
    F = fam.fisher_matrix().xreplace(dict(zip(fam.lam, fam.eta))).applyfunc(sp.simplify)
    grads = [sp.simplify(g) for g in F.inv() * sp.Matrix([a for a, _ in stats])]
    D.placeholders["natural_gradient"] = (list(grads), None, None)
    D.add(mode, RULES[mode].equation, "Natural gradient from samples of q",
          "∇_λ E_q[ℓ] is estimated with samples θ_k of q (the family's sampler); the Fisher information "
          "F(λ) = ∇²A turns it into the natural gradient (Eq. 4).",
          [(theta, fam.sampler)] + [(avg, r"\frac{1}{S}\sum_k " + what % ((i + 1,) * what.count("%d")))
                                    for i, (avg, _) in enumerate(stats)]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g, r"\approx") for i, g in enumerate(grads)])
    return grads


def _finite_sum_gradient(recipe, D, points):
    """E_q[ℓ] = Σ_θ q(θ) ℓ(θ) over a finite support (exact for any explicit loss), then ∇_μ.

    With a closed-form μ → ordinary map the sum is written in μ and differentiated; otherwise it is
    written in λ and ∇_μ = F(λ)⁻¹ ∇_λ (Eq. 4)."""
    fam = recipe.family
    logq = fam.log_density()
    terms = [(sp.exp(logq.xreplace(pt)), recipe.loss.xreplace(pt)) for pt in points]
    if fam.ord_from_mu:
        e_loss = sp.Integer(0)
        for q, l in terms:
            e_loss += sp.simplify(q.xreplace(fam.ord_from_mu)) * l
        e_loss = sp.expand(e_loss)
        grads = [sp.expand(sp.diff(e_loss, u)) for u in fam.mu]
        D.placeholders["expected_loss"] = e_loss
        how = "the support probabilities written in μ"
    else:
        lam_of = dict(zip(fam.lam, fam.eta))
        e_lam = sum((q.xreplace(fam.ord_from_nat) * l for q, l in terms), sp.Integer(0))
        F = fam.fisher_matrix()
        d = sp.Matrix([sp.diff(e_lam, l) for l in fam.lam])
        grads = [sp.simplify(sp.simplify(g.rewrite(sp.exp)).xreplace(lam_of)) for g in F.inv() * d]
        e_loss = sp.simplify(e_lam.xreplace(lam_of))
        how = "the support probabilities written in λ; ∇_μ = F(λ)⁻¹∇_λ (Eq. 4)"
    D.placeholders["natural_gradient"] = (list(grads), None, None)
    D.add("exact", RULES["exact"].equation, "Exact expected loss: a finite sum over the support",
          f"The support of q is finite ({len(points)} points), so E_q[ℓ] = Σ_θ q(θ)ℓ(θ) is exact for any loss; "
          f"it is differentiated with {how}.",
          [((r"\mathbb{E}_q[\bar\ell]"), e_loss)]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g) for i, g in enumerate(grads)])
    return grads


def _relaxed_natural_gradient(recipe, D, approx, mode):
    """Natural gradients of a binary family through its hard-threshold sampler θ = sign(x(u; params)).

    * ``concrete_relaxation`` (Eqs. 50-51): sign(x) → tanh(x/τ), the binary Concrete (Gumbel-softmax)
      relaxation on {-1, +1}; ∇_μ E_q[ℓ] ≈ s∘∇ℓ(θ̂) with s = ∇_μ θ̂ = (∂θ̂/∂p)/(∂μ/∂p) by the chain rule through
      the ordinary parameter p; averaged over ``samples`` uniform draws.  An optional ``eps`` > 0 floors both
      factors, s = (∂θ̂/∂λ + ε)/(∂μ/∂λ + ε), so that s stays finite where tanh saturates (as the BayesBiNN code
      does); ``eps: 0`` (the default) is Eq. 51 exactly.
    * ``straight_through`` (Eq. 48): the τ → 0, zero-noise limit: θ = sign(x(½; params)) and ∇_μ θ ≈ 1.
    """
    from blr_derive.derive.derivation import Sampling
    from blr_derive.rules.passes import Ctx
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
        D.oracle_calls.append((g, "grad", point, "∇_θ ℓ(θ) at the zero-noise hard sample (straight-through)"))
        D.placeholders["natural_gradient"] = ([g], None, None)
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
    (hard,) = fam.sampler.atoms(*THRESHOLDS)
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
    D.placeholders["natural_gradient"] = ([avg], None, None)
    D.placeholders["relaxation"] = {"temperature": tau, "sample": relaxed, "scale": scale, "u": u, "theta": theta,
                                    "eps": eps, "scale_evaluated": scale_eval}
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


def _family_prior(recipe, D, g_loss, g_logh, approx, no_entropy=False):
    """A prior in the candidate's family, p₀ = q(·; λ₀): -log p₀ = -log h - <λ₀, T> + A(λ₀), so ℓ̄ = ℓ - log p₀ has
    ∇_μE_q[ℓ̄] = ∇_μE_q[ℓ] - λ₀ - ∇_μE_q[log h], and in Eq. 6 the base-measure term cancels:
    ∇_μE_q[ℓ̄ + log h] = ∇_μE_q[ℓ] - λ₀.  The returned blocks are those to which the BLR step adds ``g_logh``
    (∇_μE_q[log h]), i.e. ∇_μE_q[ℓ] - λ₀ - ∇_μE_q[log h]."""
    from blr_derive.rules.passes import Ctx
    fam = recipe.family
    ctx = Ctx(D, approx)
    if any(is_mat(l) for l in fam.lam):
        raise ctx.fail(f"family '{fam.name}' has vector or matrix natural parameters; family_prior takes scalar ones "
                       "(scalar or elementwise families)")
    if no_entropy and fam.depends_on_variable(fam.log_h):
        raise ctx.fail(f"with 'no_entropy' the prior's -log h(θ) does not cancel, and family '{fam.name}' has a "
                       "base measure that depends on θ")
    lam0 = [ctx.expr(l.name) for l in fam.lam]
    ctx.done()
    out = [g - l0 - gh for g, l0, gh in zip(g_loss, lam0, g_logh)]
    D.add("family_prior", RULES["family_prior"].equation, "Prior in the candidate family",
          "-log p₀(θ) = -log h(θ) - <λ₀, T(θ)> + A(λ₀) is linear in T up to log h, so its natural gradient is "
          "exact: -λ₀ - ∇_μE_q[log h], and the base-measure term of Eq. 6 cancels the latter.",
          [((r"\lambda^{(%d)}_0" % (i + 1)), l0) for i, l0 in enumerate(lam0)])
    return out


def _conjugate_gradient(recipe, D, conjugate):
    """ℓ = c0 + Σ c_i T_i(θ): E_q[ℓ] = c0 + Σ c_i μ_i, so ∇_μ E_q[ℓ] = c (Sec. 5.1; Eq. 14 for Gaussians)."""
    fam = recipe.family
    c0, cs = conjugate
    e_loss = c0 + sum((c * u for c, u in zip(cs, fam.mu)), sp.Integer(0))
    D.placeholders["expected_loss"] = e_loss
    D.placeholders["natural_gradient"] = (list(cs), None, None)
    D.add("exact", RULES["exact"].equation, "Conjugate loss: linear in the sufficient statistics",
          "Each term of the loss is a multiple of a sufficient statistic, so E_q[ℓ] is linear in μ and the "
          "natural gradients are its coefficients (Sec. 5.1).",
          [((r"\mathbb{E}_q[\bar\ell]"), e_loss)]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), c) for i, c in enumerate(cs)])
    return list(cs)


def _abstract_loss_gradient(recipe, D, mean_mu, cov_mu, sym):
    fam = recipe.family
    gm = like_symbol("grad_m_E", mean_mu)
    GC = like_symbol("grad_C_E", cov_mu)
    D.symbol_names[gm] = r"\nabla_{m}\mathbb{E}_q[\bar\ell]"
    D.symbol_names[GC] = r"\nabla_{C}\mathbb{E}_q[\bar\ell]"
    csym = set(sym) | ({GC} if is_mat(GC) else set())
    # E_q[ℓ] = Φ(m(μ), C(μ)); its differential is <∇_m Φ, dm> + <∇_C Φ, dC>
    phi = (sp.Trace(gm.T * mean_mu) if is_mat(gm) else gm * mean_mu) + \
          (sp.Trace(GC * cov_mu) if is_mat(GC) else GC * cov_mu)
    grads = matcalc.gradient(phi, fam.mu, csym)
    uses_cov = any(g.has(GC) for g in grads)
    D.add("chain_rule_gaussian", RULES["chain_rule_gaussian"].equation,
          "Natural gradients through the mean and covariance",
          "Write m and C as functions of μ and apply the chain rule (App. D).",
          [(sp.Symbol("m"), mean_mu), (sp.Symbol("C"), cov_mu)]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g) for i, g in enumerate(grads)])

    Eg = like_symbol("E_grad", mean_mu)
    EH = like_symbol("E_hess", cov_mu)
    D.symbol_names[Eg] = r"\mathbb{E}_q[\nabla_\theta \bar\ell]"
    D.symbol_names[EH] = r"\mathbb{E}_q[\nabla^2_\theta \bar\ell]"
    subs = {gm: Eg}
    D.add("bonnet", RULES["bonnet"].equation, "Bonnet's theorem", "", [(gm, Eg)])
    if uses_cov:
        subs[GC] = EH / 2
        D.add("price", RULES["price"].equation, "Price's theorem", "", [(GC, EH / 2)])
    grads = [simplify_mat(_doit(g.xreplace(subs)), csym | ({EH} if is_mat(EH) else set())) for g in grads]
    # exact natural gradient of E_q[ℓ] in terms of E_q[∇ℓ], E_q[∇²ℓ] (before any approximation)
    D.placeholders["natural_gradient"] = (list(grads), Eg, EH)
    D.steps[-1].equations += [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g)
                              for i, g in enumerate(grads)]

    if any(a.name == "monte_carlo" for a in recipe.approximations):
        return _monte_carlo(recipe, D, grads, Eg, EH, uses_cov, mean_mu, cov_mu)
    if recipe.loss_kind == "explicit":       # delta or gauss_hermite on an explicit loss (datasum.py)
        from blr_derive.rules.datasum import explicit_expectations
        return explicit_expectations(recipe, D, grads, Eg, EH, mean_mu, cov_mu, sym)

    # expectation approximation: delta method, oracles at the mean
    taken = {str(s) for s in fam.params} | {h.name for h in recipe.hyper}
    gname = "g" if "g" not in taken else "g_"
    hname = "H" if "H" not in taken else "H_"
    g = like_symbol(gname, mean_mu)
    H = like_symbol(hname, cov_mu)
    m_state = fam.gaussian_mean
    D.symbol_names[g] = r"\hat{g}"
    D.symbol_names[H] = r"\hat{H}"
    desc = "elementwise second derivative" if not is_mat(H) else "Hessian"
    D.oracle_calls.append((g, "grad", m_state, "∇_θ ℓ(θ) at the mean (delta method)"))
    reps = {Eg: g}
    eqs = [(Eg, (r"\nabla_\theta\bar\ell(%s)" % sp.latex(m_state, mat_symbol_style="bold")), r"\approx"),
           (g, (r"\nabla_\theta\bar\ell(%s)" % sp.latex(m_state, mat_symbol_style="bold")))]
    if uses_cov:
        D.oracle_calls.append((H, "hess", m_state, f"∇²_θ ℓ(θ) at the mean ({desc}; delta method)"))
        reps[EH] = H
        eqs += [(EH, (r"\nabla^2_\theta\bar\ell(%s)" % sp.latex(m_state, mat_symbol_style="bold")), r"\approx"),
                (H, (r"\nabla^2_\theta\bar\ell(%s)" % sp.latex(m_state, mat_symbol_style="bold")))]
    D.add("delta", RULES["delta"].equation, "Delta method",
          "Replace the expectations of the gradient and Hessian by their values at the mean (Eq. 13).", eqs)
    hsym = csym | ({H} if is_mat(H) else set())
    grads = [simplify_mat(g_.xreplace(reps), hsym) for g_ in grads]
    if is_mat(H):
        sym.add(H)
    return grads


def _monte_carlo(recipe, D, grads, Eg, EH, uses_cov, mean_mu, cov_mu):
    """Expectations by sampling θ_k = m + σ ε_k (reparameterization), averaged over the samples."""
    from blr_derive.derive.derivation import Sampling
    from blr_derive.rules.passes import Ctx
    fam = recipe.family
    approx = [a for a in recipe.approximations if a.name == "monte_carlo"][0]
    ctx = Ctx(D, approx)
    samples = ctx.count("samples")
    ctx.done()
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


# ------------------------------------------------------------------- solve for params

def _new_symbol(p):
    return like_symbol(f"{p.name}_new", p.symbol) if not is_mat(p.symbol) else sp.MatrixSymbol(f"{p.name}_new", *p.symbol.shape)


def _solve_ordinary(recipe, D, lam_new, sym):
    fam = recipe.family
    free = [p for p in fam.params.values() if not p.fixed]
    new_sym = {p.symbol: _new_symbol(p) for p in free}
    for p in free:
        D.symbol_names[new_sym[p.symbol]] = (r"\mathbf{%s}_{t+1}" if is_mat(p.symbol) else "%s_{t+1}") % p.name
        if new_sym[p.symbol] not in sym and p.symbol in sym:
            sym.add(new_sym[p.symbol])
    solved_expr: dict = {}     # param symbol -> expression (old state) of its new value
    remaining = list(range(len(fam.eta)))
    while remaining:
        progress = False
        for i in list(remaining):
            e = fam.eta[i]
            unk = [p for p in free if e.has(p.symbol) and p.symbol not in solved_expr]
            if not unk:
                remaining.remove(i)
                progress = True
                continue
            if len(unk) > 1:
                continue
            p = unk[0]
            known_new = {q: new_sym[q] for q in solved_expr}
            e_new = e.xreplace(known_new)
            inverse = getattr(fam, "ord_from_nat", {}).get(p.symbol)  # the family's closed-form ordinary(λ), verified at load
            if inverse is not None:
                inverse = inverse.xreplace(dict(zip(fam.lam, lam_new)))
            direct = _isolate(e_new, lam_new[i], p.symbol, sym, inverse)
            steps = [(new_sym[p.symbol], direct, r"\leftarrow")]
            chosen, rule, text = direct, "natural_to_ordinary", (
                f"Solve λ^({i + 1})_(t+1) = {sp.sstr(e)} for {p.name}, using the parameters already updated.")
            incr = _increment(e, lam_new[i], p.symbol, known_new, solved_expr, sym)
            if incr is not None and sp.count_ops(incr) < sp.count_ops(direct):
                chosen, rule = incr, "increment_form"
                text = (f"{p.name} enters λ^({i + 1}) linearly; writing {p.name}_(t+1) = {p.name}_t + Δ, the terms "
                        f"of λ^({i + 1})_(t+1) that reproduce the old {p.name} cancel (as in Eq. 12 / App. D).")
                steps = [(new_sym[p.symbol], incr, r"\leftarrow")]
            D.add(rule, RULES[rule].equation, f"Update of {p.name}", text, steps)
            solved_expr[p.symbol] = _tidy(chosen, fam, D, sym, new_sym)
            D.updates.append((p.name, new_sym[p.symbol], solved_expr[p.symbol]))
            remaining.remove(i)
            progress = True
        if not progress:
            # coupled blocks (e.g. the categorical's λ_k = log(p_k/p_K)): the family's closed-form inverse
            # ordinary(λ) at λ_{t+1}, for all the parameters still unknown at once
            unk = [p for p in free if p.symbol not in solved_expr]
            inv = getattr(fam, "ord_from_nat", None) or {}
            if not unk or any(p.symbol not in inv or is_mat(p.symbol) for p in unk) or any(is_mat(l) for l in lam_new):
                raise DerivationError("cannot solve the updated natural parameters for the ordinary parameters")
            at_new = dict(zip(fam.lam, lam_new))
            eqs = []
            for p in unk:
                solved_expr[p.symbol] = inv[p.symbol].xreplace(at_new)
                D.updates.append((p.name, new_sym[p.symbol], solved_expr[p.symbol]))
                eqs.append((new_sym[p.symbol], solved_expr[p.symbol], r"\leftarrow"))
            D.add("natural_to_ordinary", RULES["natural_to_ordinary"].equation,
                  "Update of " + ", ".join(p.name for p in unk),
                  "The natural parameters couple these parameters; the family's inverse map ordinary(λ) "
                  "is evaluated at λ_{t+1}.", eqs)
            remaining = []


def _tidy(e, fam, D, sym, new_sym):
    if is_mat(e):
        return simplify_mat(e, sym)
    keys = [p.symbol for p in fam.params.values()] + [c[0] for c in D.oracle_calls] + list(new_sym.values())
    return sp.collect(sp.expand(e), keys)


#: above this many operations in the updated natural parameter, a parameter that enters it linearly is isolated
#: without sympy's solve (which simplifies, and takes minutes on large polynomial losses)
ISOLATE_SIMPLIFY_OPS = 400


def _isolate(e, target, p, sym, inverse=None):
    """Solve e(p) = target for the parameter p (Eq. 9).  A scalar p that enters λ non-linearly is read off the
    family's closed-form inverse ``inverse`` = ordinary(λ_{t+1}) (the one solver of the family, checked when it
    was loaded), never re-solved: sympy's solve simplifies the whole target and can take minutes."""
    if not is_mat(p):
        x = sp.Dummy(p.name, **p.assumptions0)
        ex = e.xreplace({p: x})
        c = sp.diff(ex, x)
        if c != 0 and not c.has(x) and not target.has(x) and sp.count_ops(target) > ISOLATE_SIMPLIFY_OPS:
            # e linear in p (λ = c p + r) and a large target: p = (target - r)/c directly; sympy's solve would
            # simplify the whole target (a degree-32 polynomial loss took 40 s)
            return (target - ex.xreplace({x: 0})) / c
        if c.has(x) and inverse is not None:
            return inverse
        sol = sp.solve(sp.Eq(ex, target), x, dict=False)
        if len(sol) != 1:
            raise DerivationError(f"cannot isolate {p} in {e}")
        return sol[0]
    from blr_derive.families.family import _isolate as fam_isolate
    return fam_isolate(e, target, p, sym)


def _increment(e, target, p, known_new, solved_expr, sym):
    """p_{t+1} = p_t + Δ with Δ solving η(Δ; new others) = λ_{t+1} - η(p_t; new others), when η is linear in p."""
    zero = sp.ZeroMatrix(*p.shape) if is_mat(p) else sp.Integer(0)
    at_zero = simplify_mat(_doit(e.xreplace({p: zero})), sym)
    if not (at_zero == 0 or isinstance(at_zero, sp.ZeroMatrix)):
        return None
    if not is_mat(p) and sp.diff(e, p, 2) != 0:
        return None
    if is_mat(p) and any(isinstance(a, sp.Inverse) and a.has(p) for a in sp.preorder_traversal(e)):
        return None
    old_at_new = e.xreplace(solved_expr)
    resid = simplify_mat(_expand(_doit(target - old_at_new)), sym)
    e_new = e.xreplace(known_new)
    try:
        delta = _isolate(e_new, resid, p, sym)
    except DerivationError:
        return None
    return simplify_mat(p + delta, sym) if is_mat(p) else p + delta
