"""Finite mixtures with fixed weights: the mixture BLR (Sec. 3.2, Eqs. 27-30; App. E; App. G).

The candidate is q(θ) = Σ_k π_k q_k(θ) with q_k in the component family (``blr_derive/families/mixture.py``).
The mixture BLR (Eq. 28) updates each free component,

    λ_k ← λ_k − ρ ∇_{μ_k} [E_q[ℓ̄(θ)] − H(q)],      H(q) the entropy of the mixture,

and the per-component update is derived from the family and named rules only:

* ``mixture_blr`` (Eq. 28) with ∇_{μ_k}(−H) = ∇_{μ_k} E_q[log q] (log q held fixed: E_q[∇ log q] = 0);
* ``mixture_chain_rule`` (Eqs. 27, 67-68): ∇_{μ_k} through m_k(μ_k) = μ_k⁽¹⁾/π_k and C_k(μ_k);
* ``mixture_bonnet_price`` (App. E): ∇_{m_k} E_q[f] = π_k E_{q_k}[∇f], ∇_{C_k} E_q[f] = ½π_k E_{q_k}[∇²f];
* the loss term by the named expectation rule (its ``mixture_loss_gradient``): ``delta`` (Eqs. 13, 65-66) at the
  component means, ``exact`` (closed-form Gaussian moments of a polynomial loss) or ``dropout_masks`` (Eq. 84);
* the entropy term by the delta method at the component means (Eqs. 33, 85-86), then ``mixture_score``
  (Eqs. 69-71, the responsibilities) or a mixture rule's ``mixture_entropy`` (``separated_components``, Eq. 74).

The derivation is carried out once for a generic component k (symbols ``m_k``, ``S_k``, ``pi_k``) and then
instantiated for each free component, or, when the components are an array axis (``components: K``, K a size
name), written once for all of them (``blr_derive/candidates/mixture_axis.py``).
"""
from __future__ import annotations

from types import SimpleNamespace

import sympy as sp

from blr_derive.candidates.base import Candidate, check_structure, register
from blr_derive.candidates.mixture_axis import axis_update, check_axis
from blr_derive.candidates.single import parse_single
from blr_derive.core import matcalc
from blr_derive.core.matexpr import is_mat, like_symbol, simplify_mat
from blr_derive.core.pretty import pretty
from blr_derive.families.library import load_family
from blr_derive.families.mixture import MixtureFamily, build_mixture
from blr_derive.rules.base import PROGRAM_KINDS, RULES, Derivation, MixtureGradient, OracleCall
from blr_derive.rules.blr import doit, expand, solve_ordinary
from blr_derive.rules.context import BLRContext
from blr_derive.rules.mixture import ComponentSymbol, MixtureTerms, inner, mixture_score
from blr_derive.rules.program import apply_program_rules
from blr_derive.spec.family import Param
from blr_derive.spec.mixture import is_mixture_ref, parse_mixture


def check(ctx):
    recipe, names = ctx.recipe, ctx.names
    check_structure(ctx, fallback="single")
    if "delta" not in names:
        raise ctx.fail("a mixture candidate needs 'delta': E_{q_k}[∇ log q] and E_{q_k}[∇² log q] of the "
                       "entropy term are taken at the component means (Eqs. 33, 85-86)")
    if recipe.loss_kind == "explicit" and "exact" not in names:
        raise ctx.fail("an explicit loss needs 'exact' (closed-form Gaussian moments of the loss)")
    for a in recipe.approximations:
        RULES[a.name].check(ctx)
    check_axis(ctx)
    passes = [(r, a) for r, a in ctx.rules(*PROGRAM_KINDS) if not getattr(r, "each_component", False)]
    free = ctx.family.free_components
    if passes and len(free) > 1:       # a pass rewrites one gradient, Hessian or mean view; here there is one per component
        raise ctx.fail(f"approximation '{passes[0][1].name}' needs a mixture with one free component (this one has "
                       f"{len(free)}; fix the others, e.g. a spike as in dropout)", passes[0][1])


def loss_rule(ctx):
    """The rule that gives the loss term: the named expectation rule other than the delta method (which the
    entropy term always uses), else the delta method."""
    return next((r for r, _ in ctx.rules("expectation") if r.name != "delta"), RULES["delta"])


def generic_component(ctx, D):
    """The generic free component k: its parameters, λ_k, μ_k = π_k μ(m_k, S_k) (Eq. 27)."""
    fam, sym = ctx.family, ctx.sym
    base = fam.base
    gen, gparams = {}, {}
    for p in base.free_params:
        s = sp.MatrixSymbol(f"{p.name}_k", *p.symbol.shape) if is_mat(p.symbol) else \
            sp.Symbol(f"{p.name}_k", **p.symbol.assumptions0)
        gen[p.symbol] = s
        gparams[str(s)] = Param(str(s), s, p.shape, p.domain, False, p.description)
        D.symbol_names[s] = (r"\mathbf{%s}_k" if is_mat(s) else "%s_k") % p.name
        if p.symbol in base.symmetric:
            sym.add(s)
    pi_k = sp.Symbol("pi_k", positive=True)
    D.symbol_names[pi_k] = r"\pi_k"
    lam_k = [like_symbol(f"{l.name}_k", l) for l in base.lam]
    mu_k = [like_symbol(f"{u.name}_k", u) for u in base.mu]
    for i, (l, u) in enumerate(zip(lam_k, mu_k)):
        D.symbol_names[l] = r"\lambda^{(%d)}_k" % (i + 1)
        D.symbol_names[u] = r"\mu^{(%d)}_k" % (i + 1)
        if base.lam[i] in base.symmetric:
            sym.add(l)
        if base.mu[i] in base.symmetric:
            sym.add(u)
    return SimpleNamespace(
        gen=gen, gparams=gparams, pi_k=pi_k, lam_k=lam_k, mu_k=mu_k,
        eta_k=[base.simp(e.xreplace(gen)) for e in base.eta], mu_ord_k=[base.simp(e.xreplace(gen)) for e in base.mu_ord],
        mean_k=base.gaussian_mean.xreplace(gen), cov_k=base.simp(base.gaussian_cov.xreplace(gen)))


def state_family(ctx, D, G):
    """Steps: the candidate (Sec. 3.2), its joint parameters (Eq. 27) and the mixture BLR (Eq. 28)."""
    fam, rho = ctx.family, ctx.rho
    base = fam.base
    weights_tex = ", ".join(f"\\pi_{{{c.index}}} = {sp.latex(c.weight)}" for c in fam.components)
    if fam.axis:
        weights_tex = r"\pi_k = 1/%s" % fam.K
    fixed_txt = ""
    for c in fam.components:
        if c.fixed:
            fixed_txt += (f" Component {c.index} is fixed: "
                          + ", ".join(f"{p.name} = {pretty(c.subs[p.symbol])}" for p in base.params.values()
                                      if p.symbol in c.subs) + ".")
    D.add("family", "Sec. 3.2; Eq. 41" if any(c.fixed for c in fam.components) else "Sec. 3.2",
          f"Candidate: a mixture of {fam.K} `{base.name}` components",
          f"q(θ) = Σ_k π_k q_k(θ) with fixed weights; each free component has its own parameters.{fixed_txt}",
          [r"q(\theta) = \sum_{k=1}^{%s} \pi_k\, q_k(\theta)" % fam.K, weights_tex])
    D.add("mixture_parameters", RULES["mixture_parameters"].equation,
          "Natural and expectation parameters of the joint q(θ, z = k)",
          "The joint is a minimal conditional exponential family: λ_k are the natural parameters of component k "
          "and μ_k = E_q[1[z=k] T(θ)] = π_k E_{q_k}[T(θ)].",
          [(l, e) for l, e in zip(G.lam_k, G.eta_k)] + [(u, G.pi_k * e) for u, e in zip(G.mu_k, G.mu_ord_k)])
    G.gblock = [like_symbol(f"grad_mu{i + 1}_k", u) for i, u in enumerate(G.mu_k)]
    for i, g in enumerate(G.gblock):
        D.symbol_names[g] = r"\nabla_{\mu^{(%d)}_k} \mathbb{E}_q[\bar\ell + \log q]" % (i + 1)
    G.lam_next = [like_symbol(f"{l.name}_next", l) for l in G.lam_k]
    for i, l in enumerate(G.lam_next):
        D.symbol_names[l] = r"\lambda^{(%d)}_{k,t+1}" % (i + 1)
    D.add("mixture_blr", RULES["mixture_blr"].equation, "The BLR for mixtures",
          "Natural-gradient descent on E_q[ℓ̄] − H(q) for each component's λ_k, with H the entropy of the mixture "
          "q(θ) (not of the joint). ∇_{μ_k}(−H) = ∇_{μ_k} E_q[log q] with log q held fixed, since E_q[∇ log q] = 0.",
          [(ln, l - rho * g) for ln, l, g in zip(G.lam_next, G.lam_k, G.gblock)])


def chain_rule(ctx, D, G, rule):
    """Steps: the chain rule through m_k(μ_k), C_k(μ_k) (Eqs. 27, 67-68) and Bonnet/Price for a mixture component
    (App. E).  Returns the generic component's terms and its natural gradient in E_{q_k}[∇·], E_{q_k}[∇²·]."""
    base, sym = ctx.family.base, ctx.sym
    mean_b, cov_b = base.gaussian_mean, base.gaussian_cov
    to_comp = {u: u_k / G.pi_k for u, u_k in zip(base.mu, G.mu_k)}
    mean_mu = base.simp(base.mean_of_mu().xreplace(to_comp))
    cov_mu = base.simp(base.cov_of_mu().xreplace(to_comp))
    Gm_l, GC_l = like_symbol("gradm_loss_k", mean_b), like_symbol("gradC_loss_k", cov_b)
    Gm_q, GC_q = like_symbol("gradm_logq_k", mean_b), like_symbol("gradC_logq_k", cov_b)
    D.symbol_names.update({Gm_l: r"\nabla_{m_k}\mathbb{E}_q[\bar\ell]", GC_l: r"\nabla_{C_k}\mathbb{E}_q[\bar\ell]",
                           Gm_q: r"\nabla_{m_k}\mathbb{E}_q[\log q]", GC_q: r"\nabla_{C_k}\mathbb{E}_q[\log q]"})
    csym = set(sym) | ({GC_l, GC_q} if is_mat(GC_l) else set())
    phi = inner(Gm_l, mean_mu) + inner(Gm_q, mean_mu) + inner(GC_l, cov_mu) + inner(GC_q, cov_mu)
    grads = matcalc.gradient(phi, G.mu_k, csym)
    D.add("mixture_chain_rule", RULES["mixture_chain_rule"].equation,
          "Natural gradients through the component's mean and covariance",
          "Write m_k and C_k as functions of μ_k (Eq. 27) and apply the chain rule; the 1/π_k of Eqs. 67-68 "
          "appears here.",
          [(sp.Symbol("m_k"), mean_mu), (sp.Symbol("C_k"), cov_mu)] + [(g, e) for g, e in zip(G.gblock, grads)])
    Eg_l, EH_l = like_symbol("E_grad_loss_k", mean_b), like_symbol("E_hess_loss_k", cov_b)
    Eg_q, EH_q = like_symbol("E_grad_logq_k", mean_b), like_symbol("E_hess_logq_k", cov_b)
    D.symbol_names.update({Eg_l: r"\mathbb{E}_{q_k}[\nabla_\theta\bar\ell]",
                           EH_l: r"\mathbb{E}_{q_k}[\nabla^2_\theta\bar\ell]",
                           Eg_q: r"\mathbb{E}_{q_k}[\nabla_\theta\log q]", EH_q: r"\mathbb{E}_{q_k}[\nabla^2_\theta\log q]"})
    hsym = csym | ({EH_l, EH_q} if is_mat(EH_l) else set())
    bp = {Gm_q: G.pi_k * Eg_q, GC_q: G.pi_k * EH_q / 2}
    bp_loss = {Gm_l: G.pi_k * Eg_l, GC_l: G.pi_k * EH_l / 2}
    exact_grads = [simplify_mat(doit(g.xreplace({**bp, **bp_loss})), hsym) for g in grads]
    D.mixture_gradient = MixtureGradient({"grads": exact_grads, "mu": G.mu_k, "pi": G.pi_k,
                                          "E_grad": (Eg_l, Eg_q), "E_hess": (EH_l, EH_q)})
    if not rule.mixture_bonnet_price:
        subs_bp, shown = bp, [(Gm_q, bp[Gm_q]), (GC_q, bp[GC_q])]
    else:
        subs_bp, shown = {**bp, **bp_loss}, [(Gm_l, bp_loss[Gm_l]), (GC_l, bp_loss[GC_l]),
                                             (Gm_q, bp[Gm_q]), (GC_q, bp[GC_q])]
    grads = [simplify_mat(doit(g.xreplace(subs_bp)), hsym) for g in grads]
    D.add("mixture_bonnet_price", RULES["mixture_bonnet_price"].equation,
          "Bonnet's and Price's theorems for a mixture component",
          "E_q[f] = Σ_j π_j E_{q_j}[f], so only the k-th term depends on (m_k, C_k) (Lin et al. 2019a, Thms 6-7)"
          + rule.mixture_note, shown + [(g, e) for g, e in zip(G.gblock, grads)])
    M = MixtureTerms(base, G.gen, G.pi_k, G.mean_k, G.cov_k, G.gblock, Gm_l, GC_l, Eg_l, EH_l, hsym,
                     uses_hess=any(g.has(EH_l) for g in exact_grads))
    return M, grads, (Eg_q, EH_q)


def entropy_term(ctx, D, M, grads, E_logq):
    """The entropy term: the delta method at the component mean (Eqs. 33, 85-86), then either a mixture rule's
    ``mixture_entropy`` or, at instantiation, the responsibilities of ``mixture_score`` (Eqs. 69-71)."""
    base = M.base
    mean_b, cov_b = base.gaussian_mean, base.gaussian_cov
    Eg_q, EH_q = E_logq
    M.gq, M.Hq = like_symbol("gq_k", mean_b), like_symbol("Hq_k", cov_b)
    D.symbol_names.update({M.gq: r"\nabla_\theta\log q(%s)" % sp.latex(M.mean_k, mat_symbol_style="bold"),
                           M.Hq: r"\nabla^2_\theta\log q(%s)" % sp.latex(M.mean_k, mat_symbol_style="bold")})
    if is_mat(M.Hq):
        M.hsym.add(M.Hq)
    grads = [simplify_mat(g.xreplace({Eg_q: M.gq, EH_q: M.Hq}), M.hsym) for g in grads]
    D.add("delta", RULES["delta"].equation, "Delta method for the entropy term",
          "E_{q_k}[∇ log q] ≈ ∇ log q(m_k) and E_{q_k}[∇² log q] ≈ ∇² log q(m_k) (Eqs. 33, 85-86).",
          [(Eg_q, M.gq, r"\approx"), (EH_q, M.Hq, r"\approx")])
    theta, tsym = base.theta, set(base.symmetric)
    logq_b = base.simp(base.log_density())
    score = matcalc.gradient(logq_b, [theta], tsym)[0] if is_mat(theta) else sp.diff(logq_b, theta)
    score = base.simp(score)
    hess = matcalc.hessian_from_gradient(score, theta, tsym) if is_mat(theta) else sp.diff(score, theta)
    entropy = next((r for r, _ in ctx.rules("mixture") if hasattr(r, "mixture_entropy")), None)
    if entropy is not None:
        return entropy.mixture_entropy(ctx, M, grads, score, hess), None
    M.symbols += [
        ComponentSymbol(M.gq, "gq", mean_b, latex=lambda j, mean, one: r"\nabla_\theta\log q(%s)" % _bold(mean)),
        ComponentSymbol(M.Hq, "Hq", cov_b, latex=lambda j, mean, one: r"\nabla^2_\theta\log q(%s)" % _bold(mean),
                        symmetric=is_mat(M.Hq))]
    return grads, (score, hess)


def _bold(e):
    return sp.latex(e, mat_symbol_style="bold")


def solve_generic(ctx, D, M, G, grads):
    """λ_{k,t+1} at the current state (Eq. 28) solved for the generic component's parameters (Eq. 9)."""
    rho = ctx.rho
    at_state = {u: G.pi_k * e for u, e in zip(G.mu_k, G.mu_ord_k)}
    lam_new = []
    for i in range(len(G.lam_k)):
        g = simplify_mat(doit(grads[i]).xreplace(at_state), M.hsym)
        lam_new.append(simplify_mat(expand(G.eta_k[i] - rho * g), M.hsym))
    D.add("mixture_blr", RULES["mixture_blr"].equation, "Natural-parameter update of component k",
          "Substituting the natural gradients, evaluated at μ_k = π_k μ(m_k, S_k), into Eq. 28.",
          [(ln, e, r"\leftarrow") for ln, e in zip(G.lam_next, lam_new)])
    # what solve_ordinary reads of a recipe: the generic component's parameters and λ blocks (no closed-form inverse)
    generic = SimpleNamespace(family=SimpleNamespace(params=G.gparams, eta=G.eta_k, ord_from_nat={}))
    n_before = len(D.updates)
    # the generic oracle values are listed while solving so that the solver collects terms by them; the real
    # oracle calls, one per free component, are added when the update is instantiated
    D.oracle_calls.extend([OracleCall(c.generic, c.oracle, M.mean_k, "") for c in M.symbols if c.oracle])
    solve_ordinary(generic, D, lam_new, M.hsym)
    updates = D.updates[n_before:]
    del D.updates[n_before:]
    for name_k, new_k, _ in updates:
        D.symbol_names[new_k] = (r"\mathbf{%s}_{k,t+1}" if is_mat(new_k) else "%s_{k,t+1}") % name_k[:-2]
    D.oracle_calls = []
    return updates


def free_name(name, taken):
    base, i = name, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def instantiate(ctx, D, M, G, updates):
    """The generic update written for each free component (Eqs. 29-30), with its own copies of the generic
    component's symbols (oracle values at its mean, averages, the entropy term's score)."""
    fam, recipe, sym = ctx.family, ctx.recipe, ctx.sym
    base, free = fam.base, fam.free_components
    taken = {str(s) for s in fam.params} | {h.name for h in recipe.hyper} | {str(fam.theta)}
    one = len(free) == 1
    steps = []
    for c in free:
        j = c.index
        suffix = "" if one else str(j)
        reps = {G.gen[p.symbol]: c.subs[p.symbol] for p in base.free_params}
        reps[G.pi_k] = c.weight
        mean_j = base.gaussian_mean.xreplace(c.subs)
        copies = M.copies.setdefault(j, {})
        for cs in M.symbols:
            if not cs.copy:
                continue
            new = like_symbol(free_name(cs.prefix + suffix, taken), cs.like)
            copies[cs.generic] = reps[cs.generic] = new
            if cs.symmetric:
                sym.add(new)
            if cs.latex is not None:
                D.symbol_names[new] = cs.latex(j, mean_j, one)
            if cs.oracle:
                D.oracle_calls.append(OracleCall(new, cs.oracle, mean_j, cs.description))
        by_name = {str(G.gen[p.symbol]): p for p in base.free_params}
        for name_k, new_k, _ in updates:
            p_b = by_name[name_k]
            s = c.subs[p_b.symbol]
            new = like_symbol(f"{s.name}_new", s)
            if s in sym:
                sym.add(new)
            D.symbol_names[new] = (r"\mathbf{%s}_{%s}" if is_mat(s) else "%s_{%s}") % (
                p_b.name, "t+1" if one else f"{j},t+1")
            reps[new_k] = new
        for name_k, new_k, expr in updates:
            s = c.subs[by_name[name_k].symbol]
            e = expr.xreplace(reps)
            e = simplify_mat(e, sym) if is_mat(e) else e
            D.updates.append((s.name, reps[new_k], e))
            steps.append((reps[new_k], e, r"\leftarrow"))
    return steps


def derive_mixture(recipe) -> Derivation:
    D = Derivation(recipe)
    ctx = BLRContext(recipe, D, candidate="mixture")
    D.symbol_names[ctx.rho] = r"\rho" if recipe.learning_rate == "rho" else recipe.learning_rate
    check(ctx)
    rule = loss_rule(ctx)
    G = generic_component(ctx, D)
    state_family(ctx, D, G)
    M, grads, E_logq = chain_rule(ctx, D, G, rule)
    grads = rule.mixture_loss_gradient(ctx, M, grads)
    grads, score = entropy_term(ctx, D, M, grads, E_logq)
    updates = solve_generic(ctx, D, M, G, grads)
    fam = recipe.family
    # ∇² log q of the mixture at a component's mean (Eqs. 69-71) is indefinite in general
    D.indefinite.add(M.Hq)
    if fam.axis:
        steps = axis_update(ctx, D, M, G, updates, score)
        D.add("instantiate", "Eqs. 29-30", "Update of every component at once",
              f"The generic update of component k, for all {fam.K} components at once: arrays with a leading "
              f"component axis of length {fam.K}, known at run time (π_k = 1/{fam.K}).", steps)
        apply_program_rules(recipe, D, ctx.fail)
        return D
    steps = instantiate(ctx, D, M, G, updates)
    D.indefinite |= {c[M.Hq] for c in M.copies.values() if M.Hq in c}
    if score is not None:
        mixture_score(D, fam, *score, fam.free_components, {j: (c[M.gq], c[M.Hq]) for j, c in M.copies.items()})
    if hasattr(rule, "mixture_finish"):
        rule.mixture_finish(ctx, M, fam.free_components)
    equation = rule.instantiate_equation(M) if hasattr(rule, "instantiate_equation") else "Eqs. 29-30"
    D.add("instantiate", equation, "Update of every free component",
          "The generic update of component k, written for each free component.", steps)
    apply_program_rules(recipe, D, ctx.fail)
    return D


class Mixture(Candidate):
    name = "mixture"
    noun = "a mixture"
    declared_as = "family: {mixture: ...}"
    priority = 20

    def claims(self, spec) -> bool:
        return isinstance(spec, dict) and is_mixture_ref(spec.get("family"))

    def parse(self, spec, file, base_dir):
        def load(ref):
            decl = parse_mixture(ref)
            return build_mixture(decl, load_family(decl.family, base_dir))
        recipe = parse_single(spec, file, base_dir, load)
        # the weights and fixed components' values are expressions of the recipe's hyperparameters
        recipe.family.bind({**{h.name: h.symbol for h in recipe.hyper if h.kind in ("float", "int")},
                            **{en: es for h in recipe.hyper if h.kind == "tuple" for en, es in h.elements}},
                           {h.symbol: sp.Float(h.default) for h in recipe.hyper
                            if h.kind in ("float", "int") and isinstance(h.default, (int, float))})
        return recipe

    def owns(self, recipe) -> bool:
        return isinstance(recipe.family, MixtureFamily)

    def derive(self, recipe):
        return derive_mixture(recipe)


register(Mixture())


