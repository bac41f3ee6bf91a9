"""Federated Bayesian ADMM, derived for the recipe's family (a recipe with a ``federated`` section).

Möllenhoff, Swaroop, Doshi-Velez & Khan, *Federated ADMM from Bayesian Duality* (ICLR 2026, arXiv
2506.13150; ``shared/references/federated-admm-from-bayesian-duality.md``) solve the variational objective
Σ_k E_q[ℓ_k] + KL(q ‖ p_0) over K clients with the primal-dual structure of ADMM, in natural (λ) and
expectation (μ) parameters.  Client k holds a local candidate q_k (λ_k) and a dual natural parameter η_k;
the server holds the global q_g (λ_g).  One round:

1. the server broadcasts q_g (its ordinary parameters, i.e. μ_g);
2. ``federated_local``: each client takes BLR steps (Eq. 6) on its local objective
       E_q[ℓ_k]/τ + <η_k, μ> + ρ KL(q ‖ q_g)
   (τ the temperature, default 1: the target is the tempered posterior ∝ p_0 Π_k exp(−ℓ_k/τ)), whose natural
   gradient is (∇_μ E_q[ℓ_k]/τ + η_k)/ρ − λ_g: the base measure cancels between the entropy and KL(q ‖ q_g), so
   λ_k ← (1−β)λ_k + β(λ_g − (∇_μ E_q[ℓ_k]/τ + η_k)/ρ);
3. ``federated_dual``: η_k ← η_k + dρ(λ_k − λ_g) (d the dual damping, default 1).  At the client's optimum this
   is η_k = −∇_μ E_{q_k}[ℓ_k]/τ, the local natural gradient (the site parameter of Khan & Rue, Sec. 5.4);
4. ``federated_server``: the clients send η_k + ρ_s λ_k, the server sums them and solves
       λ_g = −∇_μ E_{q_g}[ℓ_0 + log h] + Σ_k (η_k + ρ_s(λ_k − λ_g))
   for the ordinary parameters of q_g: the global natural parameter is the prior's site plus the sum of the
   clients' sites, Eq. 60 of Khan & Rue (2023); ρ_s > 0 adds ADMM's augmented term at the server.

Over the isotropic Gaussian N(m, I) these steps are federated ADMM (gradient steps on the augmented
Lagrangian, v_k ← v_k + ρ(θ_k − θ_g), θ_g = (Σ_k v_k + ρ_s Σ_k θ_k)/(δ + Kρ_s)); over the full Gaussian the
local step is Newton's and, with ρ_s = 0, one round solves a quadratic problem exactly.

Everything here is derived from the family (its λ(params), μ, base measure and Gaussian moments) and the
recipe (prior expression, penalty names); no update of a named algorithm is written down.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core import matcalc
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.matexpr import is_mat, simplify_mat
from blr_derive.core.pretty import pretty
from blr_derive.rules.base import RULES, FederatedSteps, Rule, register, rule
from blr_derive.rules.blr import isolate
from blr_derive.rules.program import scalar_expr
from blr_derive.rules.riemannian_correction import geometry


def _sym_set(fed, sym):
    out = set(sym)
    out |= {dv.symbol for _, dv in fed.globals if dv.symmetric}
    out |= {dv.symbol for dv in fed.duals if dv.symmetric}
    return out


def local_objective(recipe, D, g_loss, g_logh, sym):
    """``federated_local``: the natural gradient of the client objective (see the module docstring).

    Returns the blocks that the BLR step adds to ∇_μ E_q[log h], so that their sum is
    (∇_μ E_q[ℓ_k] + η_k)/ρ − λ_g."""
    fed, fam = recipe.federated, recipe.family
    sym.update(_sym_set(fed, ()))
    rho = fed.penalty
    to_global = {p.symbol: dv.symbol for p, dv in fed.globals}
    lam_g = [e.xreplace(to_global) for e in fam.eta]
    out = []
    tau = fed.temperature
    for gl, dv, lg, gh in zip(g_loss, fed.duals, lam_g, g_logh):
        out.append((gl / tau + dv.symbol) / rho - lg - gh)
    names = [dv.symbol for dv in fed.duals]
    for i, (dv, lg) in enumerate(zip(fed.duals, lam_g)):
        D.symbol_names[dv.symbol] = r"\eta^{(%d)}_k" % (i + 1)
    for p, dv in fed.globals:
        D.symbol_names[dv.symbol] = (r"\mathbf{%s}_g" if is_mat(p.symbol) else "%s_g") % p.name
    if fed.description:             # the recipe's words: which algorithm these penalties make, and its source
        D.add("federated_local", RULES["federated_local"].equation, "The federated algorithm", fed.description)
    D.add("federated_local", RULES["federated_local"].equation, "Client objective of Bayesian ADMM",
          "Client k minimises E_q[ℓ_k]/τ + <η_k, μ> + ρ KL(q ‖ q_g) (τ the temperature, 1 unless the recipe names "
          "one).  Divided by ρ this is a variational objective with loss ℓ_k/(τρ) + <η_k/ρ − λ_g, T(θ)> − log h(θ) "
          "(from −log q_g), so Eq. 6 needs ∇_μ E_q[ℓ̄ + log h] = (∇_μ E_q[ℓ_k]/τ + η_k)/ρ − λ_g: the base measure "
          "cancels.",
          [((r"\lambda^{(%d)}_g" % (i + 1)), lg) for i, lg in enumerate(lam_g)]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell + \log h]" % (i + 1)),
              simplify_mat((g / tau + d) / rho - lg, sym) if is_mat(g) else (g / tau + d) / rho - lg)
             for i, (g, d, lg) in enumerate(zip(g_loss, names, lam_g))])
    return out


def _prior_sites(fed, fam, eta, K, rho_s, sym):
    """∇_μ E_q[ℓ_0 + log h] (the prior's and the base measure's sites) at the global candidate, and the left side
    (1 + Kρ_s) λ(params) + ∇_μ E[ℓ_0 + log h](params) of the server's equation, block by block."""
    terms = [t for t in (fed.prior, fam.log_h) if t != 0 and fam.depends_on_variable(t)]
    mean_mu, cov_mu = fam.mean_of_mu(), fam.cov_of_mu()
    at_state = dict(zip(fam.mu, fam.mu_ord))
    grads = [sp.ZeroMatrix(*u.shape) if is_mat(u) else sp.Integer(0) for u in fam.mu]
    for t in terms:
        gs = matcalc.gradient(fam.expect_gaussian(t, mean=mean_mu, cov=cov_mu), fam.mu, sym)
        grads = [simplify_mat(sp.MatAdd(a, b).doit(), sym) if is_mat(a) else a + b for a, b in zip(grads, gs)]
    grads = [simplify_mat(g.doit().xreplace(at_state), sym) if is_mat(g) else sp.simplify(g.xreplace(at_state))
             for g in grads]
    if fam.elementwise:
        grads = [_scalar(g) for g in grads]
    # (1 + Kρ_s) λ(params) + ∇_μ E[ℓ_0 + log h](params) = Σ_k (η_k + ρ_s λ_k), solved block by block
    lhs = []
    for e, g in zip(eta, grads):
        lhs.append(simplify_mat(sp.MatAdd((1 + K * rho_s) * e, g).doit(), sym) if is_mat(e)
                   else sp.expand((1 + K * rho_s) * e + g))
    return grads, lhs


def _solve_server(recipe, fam, lhs, msgs, sym):
    """The server's equation lhs_i(params) = msg_i solved for the global parameters, block by block (later blocks
    use the parameters already solved); [(parameter name, expression)] in assignment order."""
    free = [p for p in fam.params.values() if not p.fixed]
    solved, server, remaining = set(), [], list(range(len(lhs)))
    while remaining:
        progress = False
        for i in list(remaining):
            unk = [p for p in free if lhs[i].has(p.symbol) and p.symbol not in solved]
            if len(unk) > 1:
                continue
            remaining.remove(i)
            progress = True
            if not unk:
                continue
            p = unk[0]
            try:
                val = isolate(lhs[i], msgs[i], p.symbol, sym)
            except DerivationError as exc:
                raise SpecError(f"federated server step: {exc}", recipe.file, recipe.spec.line_of("federated")) from None
            val = simplify_mat(val, sym) if is_mat(val) else sp.simplify(val)
            server.append((p.name, val))
            solved.add(p.symbol)
        if not progress:
            raise SpecError("federated server step: cannot solve the global natural parameters for the family's "
                            "parameters", recipe.file, recipe.spec.line_of("federated"))
    return server


def derive_server(recipe, D, sym):
    """``federated_dual`` and ``federated_server``: the dual step, the client message and the server's solve.

    Sets ``D.federated`` (:class:`~blr_derive.rules.base.FederatedSteps`): the dual step, the client message and
    the server's parameters in assignment order (later expressions use the ones already assigned)."""
    fed, fam = recipe.federated, recipe.family
    if D.renamed:
        raise SpecError("federated recipes need the family's own parameters as state (no change_variable)",
                        recipe.file, recipe.spec.line_of("federated"))
    sym = _sym_set(fed, sym)
    rho, rho_s, K, damp = fed.penalty, fed.server_penalty, fed.count, fed.damping
    to_global = {p.symbol: dv.symbol for p, dv in fed.globals}
    eta = list(fam.eta)
    if fam.elementwise:
        eta = [_scalar(e) for e in eta]
    lam_g = [e.xreplace(to_global) for e in eta]
    dual, message = [], []
    for dv, e, lg in zip(fed.duals, eta, lam_g):
        dual.append((dv.name, simplify_mat(dv.symbol + damp * rho * (e - lg), sym) if is_mat(e)
                     else sp.expand(dv.symbol + damp * rho * (e - lg))))
    msgs = []
    for i, (dv, e) in enumerate(zip(fed.duals, eta)):
        msgs.append(sp.MatrixSymbol(f"msg{i + 1}", *e.shape) if is_mat(e) else sp.Symbol(f"msg{i + 1}", real=True))
        message.append((msgs[-1].name, simplify_mat(dv.symbol + rho_s * e, sym) if is_mat(e)
                        else sp.expand(dv.symbol + rho_s * e)))
        if is_mat(e) and e.shape[0] == e.shape[1] and e.shape[1] != 1:
            sym.add(msgs[-1])
    D.add("federated_dual", RULES["federated_dual"].equation, "Dual step and client message",
          "After its local steps client k moves its dual natural parameter by dρ(λ_k − λ_g) (d the dual damping, 1 "
          "unless the recipe names one) and sends "
          "η_k + ρ_s λ_k to the server.",
          [((r"\eta^{(%d)}_k" % (i + 1)), e) for i, (_, e) in enumerate(dual)]
          + [(sp.Symbol(n), e, "=") for n, e in message])

    grads, lhs = _prior_sites(fed, fam, eta, K, rho_s, sym)
    server = _solve_server(recipe, fam, lhs, msgs, sym)
    D.add("federated_server", RULES["federated_server"].equation, "Server step: sum of the sites",
          "The global natural parameter is the prior's site −∇_μ E_q[ℓ_0 + log h] plus the sum of the clients' "
          "messages minus Kρ_s λ_g; solved for the parameters of q_g (with msg_i = Σ_k of the clients' messages).",
          [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_{q_g}[\ell_0 + \log h]" % (i + 1)), g) for i, g in enumerate(grads)]
          + [(sp.Symbol(f"{n}_g"), e, r"\leftarrow") for n, e in server])
    corrections = {n: c for n, c in D.corrected.items() if c is not None}
    if corrections:
        nats = []
        for i, e in enumerate(eta):
            nats.append(sp.MatrixSymbol(f"nat{i + 1}", *e.shape) if is_mat(e) else sp.Symbol(f"nat{i + 1}", real=True))
            message.append((nats[-1].name, e))
            msgs.append(nats[-1])
            if is_mat(e) and e.shape[0] == e.shape[1] and e.shape[1] != 1:
                sym.add(nats[-1])
        server = correct_server(recipe, D, fam, server, nats, K, corrections, sym)
    prior_e, entropy = global_objective_terms(recipe, D, sym)
    D.federated = FederatedSteps(
        dual=dual, message=message, server=server, count=K,
        globals=[(p.name, dv.name) for p, dv in fed.globals], duals=[dv.name for dv in fed.duals],
        messages=[m.name for m in msgs], eta=[(dv.name, e) for dv, e in zip(fed.duals, eta)],
        equations=[f"{n} <- {pretty(e)}" for n, e in dual] + [f"{n} = {pretty(e)}" for n, e in message]
        + [f"{n}_g <- {pretty(e)}" for n, e in server],
        prior_expectation=prior_e, entropy=entropy, temperature=fed.temperature)


def global_objective_terms(recipe, D, sym):
    """The closed-form terms of the global objective that Bayesian ADMM minimizes at q_g,
    L(q_g) = Σ_k E_{q_g}[ℓ_k]/τ + E_{q_g}[ℓ_0] − H(q_g) (Khan & Rue 2023, Eq. 2 with the loss Σ_k ℓ_k/τ + ℓ_0;
    the server's fixed points, Eq. 60, are its stationary points): (E_{q_g}[ℓ_0], H(q_g)) in the family's ordinary
    parameters.  E_{q_g}[ℓ_0] is the Gaussian expectation of the recipe's prior (the one whose gradient is the
    server's prior site), H the family's entropy A(λ) − ⟨λ, μ⟩ − E_q[log h] (App. B); the clients' terms are
    numbers the caller gives (their losses are abstract).  (None, None) where either does not close."""
    fed, fam = recipe.federated, recipe.family
    try:
        H = fam.entropy()
    except Exception:                   # noqa: BLE001 - a family whose entropy does not close: no global objective
        return None, None
    if not isinstance(H, sp.Basic) or is_mat(H) or H.has(sp.Integral, sp.zoo, sp.nan):
        return None, None
    prior = fed.prior
    if prior != 0 and fam.depends_on_variable(prior):
        try:
            E0 = fam.expect_gaussian(prior, mean=fam.mean_of_mu(), cov=fam.cov_of_mu())
        except Exception:               # noqa: BLE001 - no Gaussian expectation of the prior: no global objective
            return None, None
        E0 = E0.xreplace(dict(zip(fam.mu, fam.mu_ord)))
    else:
        E0 = prior
    if isinstance(E0, sp.Basic) and E0.has(sp.Trace):
        E0 = _small_traces(simplify_mat(E0, sym))
    if is_mat(E0):
        E0 = scalar_expr(E0)
    if not isinstance(E0, sp.Basic) or is_mat(E0) or E0.has(sp.Integral, sp.zoo, sp.nan):
        return None, None
    D.add("federated_server", RULES["federated_server"].equation, "Global objective at q_g",
          "The server's fixed point is a stationary point of L(q_g) = Σ_k E_{q_g}[ℓ_k]/τ + E_{q_g}[ℓ_0] − H(q_g) "
          "(Eq. 2 with the loss Σ_k ℓ_k/τ + ℓ_0): the prior's expectation and the entropy in the parameters of q_g; "
          "the clients' expected losses are numbers the clients give (their losses at the mean of q_g: the delta "
          "method, or at its samples).",
          [(r"\mathbb{E}_{q_g}[\ell_0]", E0), (r"\mathcal{H}(q_g)", H)])
    return E0, H


def _small_traces(e):
    """Every trace tr(A₁⋯Aₙ) rotated so that its product is 1×1 where a rotation makes it so (tr(m mᵀ) = mᵀm, a
    number, not a P×P outer product), a trace of a sum split into a sum of traces."""
    def rot(t):
        a = t.arg
        if isinstance(a, sp.MatAdd):
            return sp.Add(*[rot(sp.Trace(x)) for x in a.args])
        if isinstance(a, sp.MatMul):
            c, mats = a.as_coeff_mmul()
            mats = list(mats.args) if isinstance(mats, sp.MatMul) else [mats]
            for i in range(1, len(mats)):
                r = mats[i:] + mats[:i]
                if r[0].shape[0] == 1 and r[-1].shape[1] == 1:
                    return c * sp.Trace(sp.MatMul(*r))
        return t
    return e.replace(lambda n: isinstance(n, sp.Trace), rot)


def correct_server(recipe, D, fam, server, nats, K, corrections, sym):
    """The server's solve as a BLR step, λ_g = (1 − α)λ̄ + α(λ_0 + Σ_k η_k), α = 1/(1 + Kρ_s), from the clients'
    mean natural parameter λ̄ = Σ_k λ_k/K (the messages ``nat``): each corrected parameter p (rule
    riemannian_correction with ``server``) is completed at p̄ = p(λ̄) to p_g + (−½)Γ_p̄(p_g − p̄, p_g − p̄), the
    improved BLR's second-order term (α cancels), under the rule's condition."""
    base = {p.symbol: e.xreplace({lam: nat / K for lam, nat in zip(fam.lam, nats)})
            for p in fam.params.values() if p.symbol in fam.ord_from_nat
            for e in [fam.ord_from_nat[p.symbol]]}
    base = {k: (simplify_mat(v, sym) if is_mat(v) else sp.simplify(v)) for k, v in base.items()}
    out, shown = [], []
    for name, expr in server:
        if name in corrections:
            p = fam.params[name].symbol
            geo = geometry(fam, name, lambda msg: SpecError(f"federated server step: {msg}", recipe.file,
                                                            recipe.spec.line_of("federated")))
            delta = sp.MatrixSymbol("Delta_srv", *p.shape) if is_mat(p) else sp.Symbol("Delta_srv", real=True)
            diff = simplify_mat(sp.MatAdd(expr, -base[p]).doit(), sym) if is_mat(p) else expr - base[p]
            term = geo.term(delta, base)
            term = term.xreplace({delta: diff})
            cond = corrections[name]
            if is_mat(p):
                new = sp.MatAdd(expr, sp.MatMul(sp.Piecewise((1, cond), (0, True)), term))
            else:
                new = sp.Piecewise((expr + term, cond), (expr, True))
            shown.append((sp.Symbol(f"{name}_g"), new, r"\leftarrow"))
            expr = new
        out.append((name, expr))
    D.add("riemannian_correction", RULES["riemannian_correction"].equation, "Server step as an improved BLR step",
          "The server's solve is the BLR step λ_g = (1 − α)λ̄ + α(λ_0 + Σ_k η_k), α = 1/(1 + Kρ_s), from the clients' "
          "mean natural parameter λ̄ (sent as nat_i): its precision is completed at p̄ = p(λ̄) by the second-order term "
          "−½Γ_p̄(p_g − p̄, p_g − p̄) of the improved BLR (α cancels), which keeps q_g valid for any duals.",
          [(sp.Symbol(f"{k}_bar"), v, "=") for k, v in base.items()] + shown)
    return out


def _scalar(e):
    return scalar_expr(e) if is_mat(e) else e


class FederatedLocal(Rule):
    """Implied by a recipe's ``federated`` section: the client objective's natural gradient."""
    name = "federated_local"
    kind = "identity"
    equation = "Bayesian ADMM local step; Eq. 6"
    summary = ("client objective E_q[ℓ_k] + <η_k, μ> + ρ KL(q ‖ q_g): ∇_μ E_q[ℓ̄ + log h] = (∇_μ E_q[ℓ_k] + η_k)/ρ − λ_g "
               "(the base measure cancels)")

    def adjust_gradient(self, ctx, grads):
        return local_objective(ctx.recipe, ctx.D, grads, ctx.g_logh, ctx.sym)


class FederatedServer(Rule):
    """Implied by a recipe's ``federated`` section: the dual step, the client message and the server's solve."""
    name = "federated_server"
    kind = "identity"
    equation = "Bayesian ADMM global step; Eq. 60"
    summary = ("λ_g = −∇_μ E_{q_g}[ℓ_0 + log h] + Σ_k (η_k + ρ_s(λ_k − λ_g)): the global natural parameter is the "
               "prior's site plus the sum of the clients' sites (ρ_s = 0: their plain sum, Eq. 60)")

    def finish(self, ctx):
        derive_server(ctx.recipe, ctx.D, ctx.sym)


register(FederatedLocal())
rule("federated_dual", "identity", "Bayesian ADMM dual step",
     "η_k ← η_k + dρ(λ_k − λ_g) (d the damping, default 1): at the client's optimum η_k = −∇_μ E_{q_k}[ℓ_k]/τ, "
     "the local natural gradient")
register(FederatedServer())
#: the rules a recipe's ``federated`` section implies, in the order they act
IMPLIED = ("federated_local", "federated_dual", "federated_server")
