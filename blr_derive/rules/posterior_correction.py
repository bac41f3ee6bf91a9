"""Posterior correction (Khan 2025, *Knowledge Adaptation as Posterior Correction*; Daheim, Möllenhoff, Ang &
Khan, *SVRG and Beyond via Posterior Correction*, ICML 2026; shared/references/bayes-duality-project-summary-slides.md,
"Speeding up training with memories").

An old candidate q_old (a stored checkpoint, the recipe's ``posterior_correction`` section, spec/correction.py) is a
product of sites, q_old ∝ Π_j exp(−ℓ̂_{j|old}).  A BLR step on the mini-batch B replaces the batch's old sites by
new ones:

    q ← q^{1−ρ} q_old^ρ Π_{j∈B} exp(−ρ(ℓ̂_j − ℓ̂_{j|old})),

so the natural gradient of the step is corrected by the batch's natural gradient at q_old and completed by the
sum of q_old's sites:

    ∇_μ E_q[ℓ_B]  →  ∇_μ E_q[ℓ_B] − ∇_μ E_{q_old}[ℓ_B] + (sites of q_old).

The section says what stands for the sites of q_old (``sites``):

* ``gradient`` — the full-data natural gradient at q_old, ∇_μ E_{q_old}[ℓ] (the same derived expression of
  E_q[∇ℓ], E_q[∇²ℓ] and μ, with the stored full-data gradient and Hessian at q_old's mean): the sites recomputed
  from a snapshot.  Over N(m, I) this is SVRG, m ← m − ρ(g_B(m) − g_B(m_old) + ḡ_old); over the full Gaussian it
  adds Hessian corrections;
* ``posterior`` — q_old itself: the loss its sites stand for is −log q_old, whose natural gradient is
  −λ_old − ∇_μ E_q[log h], so Eq. 6 gives the slides' q^{1−ρ} q_old^ρ literally (q_old a BLR fixed point).

Where the correction acts.  With the delta method and no pass in the recipe, the three natural gradients are
combined before Eq. 6 is assembled (the step stage).  Otherwise (gradients at samples of q, passes such as
Price's estimator, mini-batch scaling, momentum) the correction acts on the update program at its place in the
recipe's approximations list: the estimates of E_q[∇ℓ_B], E_q[∇²ℓ_B] as they stand there (the ``grad`` and
``hess`` views) are evaluated again at q_old — every definition they read is copied with the state replaced by
q_old's parameters, an oracle at the mean is called at q_old's mean, an oracle at a sample θ_k = m + σε_k is
called at θ_k,old = m_old + σ_old ε_k with the same draw ε_k — and the views are replaced by the estimates whose
natural gradient at q is the corrected one (the natural gradient is linear in E_q[∇ℓ], E_q[∇²ℓ]: a linear solve).
Passes after it see the corrected estimate (IVON's momentum averages the corrected gradient).
"""
from __future__ import annotations


import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.matexpr import is_mat, like_symbol, simplify_mat
from blr_derive.rules.base import PROGRAM_KINDS, RULES, PendingCorrection, ChainedCall, OracleCall, Rule, TexForm, register
from blr_derive.rules.program import name_in_use, record, scalar_expr


def program_mode(recipe, D):
    """Whether the correction acts at its place among the passes (gradients at samples, or any pass)."""
    return D.sampling is not None or any(RULES[a.name].kind in PROGRAM_KINDS for a in recipe.approximations)


def _approx(recipe):
    return next(a for a in recipe.approximations if a.name == "posterior_correction")


def _setup(recipe, D, ctx_fail, g_logh, sym):
    """The checks and the pieces both modes share: (grads, Eg, EH, the old map, the sites of q_old per block)."""
    fam = recipe.family
    approx = _approx(recipe)
    if approx.args:
        raise SpecError(f"approximation 'posterior_correction' takes no arguments (got {', '.join(sorted(approx.args))}"
                        "); the old posterior and its sites are the recipe's posterior_correction section",
                        recipe.file, approx.line)
    if recipe.loss_kind != "abstract" or D.natural_gradient is None or D.natural_gradient.Eg is None:
        raise SpecError("approximation 'posterior_correction' needs an abstract loss whose expectations are E_q[∇ℓ], "
                        "E_q[∇²ℓ] (the delta method or Monte Carlo)", recipe.file, approx.line)
    corr = recipe.correction
    grads, Eg, EH = D.natural_gradient.grads, D.natural_gradient.Eg, D.natural_gradient.EH
    old = {fam.params[n].symbol: dv.symbol for n, dv in corr.single.params.items()}
    for d in recipe.data:
        if d.symmetric:
            sym.add(d.symbol)
    mu_old = {u: e.xreplace(old) for u, e in zip(fam.mu, fam.mu_ord)}
    if corr.sites == "gradient":
        reps = {Eg: corr.full["grad"].symbol}
        if EH is not None and "hess" in corr.full:
            reps[EH] = corr.full["hess"].symbol
        full = [g.xreplace(mu_old).xreplace(reps) for g in grads]
    else:       # −log q_old: −λ_old − ∇_μ E_q[log h] (at q)
        full = []
        for e, gh in zip(fam.eta, g_logh):
            lam_old = e.xreplace(old)
            full.append(simplify_mat(sp.MatAdd(-lam_old, -gh).doit(), sym) if is_mat(lam_old) else -lam_old - gh)
    return grads, Eg, EH, old, mu_old, full


def _describe(D, corr):
    if corr.description:
        D.add("posterior_correction", RULES["posterior_correction"].equation, "The old posterior and its sites",
              corr.description)


def record_loss(recipe, D):
    """What the correction does to the loss the objective reads (``Derivation.loss_model``).  With ``sites:
    gradient`` nothing: the batch's estimate at q minus the same estimate at q_old, plus the full-data estimate at
    q_old, has the full-data estimate at q as its expectation over the batches (a control variate, Daheim et al.
    2026), so the steps minimize the same ℓ of Eq. 1 and L(q) = E_q[ℓ] − H(q) is the uncorrected recipe's.  With
    ``sites: posterior`` the loss becomes the batch's sites plus −log q_old, which the objective does not follow."""
    if recipe.correction is not None and recipe.correction.sites != "gradient":
        D.loss_model.unfollow(
            "the step replaces the batch's sites in a stored posterior q_old by new ones with q_old itself standing "
            "for the sum of its sites (rule posterior_correction, sites: posterior), so the loss a step lowers is "
            "the batch's sites plus −log q_old, which the objective does not follow")


def posterior_correction(ctx, g_loss):
    """The step stage: the three natural gradients combined before Eq. 6 (delta method, no pass), or, in program
    mode, the pieces the program stage needs (``D.correction``)."""
    recipe, D, sym = ctx.recipe, ctx.D, ctx.sym
    grads, Eg, EH, old, mu_old, full = _setup(recipe, D, ctx.fail, ctx.g_logh, sym)
    record_loss(recipe, D)
    if program_mode(recipe, D):
        D.correction = PendingCorrection(grads, Eg, EH, full, old)
        return g_loss
    fam = recipe.family
    m_old = fam.gaussian_mean.xreplace(old)
    g_old = like_symbol("g_old", Eg)
    D.oracle_calls.append(OracleCall(g_old, "grad", m_old, "∇_θ ℓ(θ) at the snapshot's mean (posterior correction)"))
    if not corrects_hessian(recipe):        # E_q[∇ℓ] only: g_B(m) − g_B(m_old) + ḡ_old, the Hessian the batch's
        # the natural gradient is linear in E_q[∇ℓ]: add its change when E_q[∇ℓ] gains −g_B(m_old) + ḡ_old (the
        # natural gradients here read the step's own estimates, e.g. the delta method's oracle values)
        shift = -g_old + recipe.correction.full["grad"].symbol
        out = [g + gn.xreplace({Eg: Eg + shift}) - gn for g, gn in zip(g_loss, grads)]
        out = [simplify_mat(o, sym) if is_mat(o) else sp.expand(o) for o in out]
        D.symbol_names.update({g_old: r"\hat{g}_{old}"})
        _describe(D, recipe.correction)
        D.add("posterior_correction", RULES["posterior_correction"].equation, "Posterior correction (gradient)",
              "The batch's gradient estimate is corrected by its value at the snapshot q_old and completed by the "
              "stored full-data gradient there (estimates: [grad]); the Hessian estimate is the batch's own.",
              [((r"\tilde\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), o) for i, o in enumerate(out)])
        return out
    reps_batch = {Eg: g_old}
    if EH is not None and any(g.has(EH) for g in grads):
        H_old = like_symbol("H_old", EH)
        if is_mat(H_old):
            sym.add(H_old)
        D.oracle_calls.append(OracleCall(H_old, "hess", m_old, "∇²_θ ℓ(θ) at the snapshot's mean (posterior correction)"))
        reps_batch[EH] = H_old
    D.symbol_names.update({g_old: r"\hat{g}_{old}"})
    out, eqs = [], []
    for i, (g, gn, f) in enumerate(zip(g_loss, grads, full)):
        batch_old = gn.xreplace(mu_old).xreplace(reps_batch)
        new = g - batch_old + f
        new = simplify_mat(new, sym) if is_mat(new) else sp.expand(new)
        out.append(new)
        eqs.append(((r"\tilde\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), new))
    _describe(D, recipe.correction)
    D.add("posterior_correction", RULES["posterior_correction"].equation, "Posterior correction",
          "The batch's old sites in q_old are replaced by new ones: the natural gradient of the batch at q is "
          "corrected by the batch's natural gradient at the snapshot q_old and completed by "
          + _sites_text(recipe.correction.sites), eqs)
    return out


def _sites_text(sites):
    if sites == "gradient":
        return ("the full-data natural gradient at q_old (the same derived expression at the snapshot, with the "
                "batch oracles and with the stored full-data gradient and Hessian).")
    return ("the sites of q_old, which sum to q_old itself: the natural gradient of −log q_old, −λ_old − "
            "∇_μ E_q[log h], so that Eq. 6 reads q ← q^{1−ρ} q_old^ρ Π_{j∈B} exp(−ρ(ℓ̂_j − ℓ̂_{j|old})).")


# ------------------------------------------------------------------------------------------- the program stage

def _fresh(D, base, taken):
    name, i = base, 1
    while name in taken or name_in_use(D, name) is not None:
        i += 1
        name = f"{base}{i}"
    taken.add(name)
    return name


def corrects_hessian(recipe) -> bool:
    """Whether the correction replaces the Hessian estimate too (the section's ``estimates``, default both)."""
    return "hess" in recipe.correction.estimates


def at_old(ctx, hessian=True):
    """The estimates the ``grad`` and ``hess`` views stand for (the ``grad`` view only, without ``hessian``),
    evaluated again at q_old: every definition, Monte Carlo statistic and oracle call they read is copied with the
    state replaced by q_old's parameters (an oracle at a sample θ_k is called at θ_k,old with the same draw).
    Returns {view symbol: its copy}."""
    D = ctx.D
    pend = D.correction
    old = {scalar_expr(k): scalar_expr(v) for k, v in pend.old.items()}
    views = [v for v in (D.views.grad, D.views.hess if hessian else None) if v is not None]
    defs = dict(D.defs)
    sm = D.sampling
    stats = dict(sm.stats) if sm is not None else {}
    calls = {c[0]: c for c in D.oracle_calls}
    sample_calls = dict(sm.calls) if sm is not None else {}
    chained = {c[0]: c for c in sm.chained} if sm is not None else {}
    reductions = dict(sm.reductions) if sm is not None else {}
    states = {a.symbol: a.name for a in D.aux_state} | {a.new_symbol: a.name for a in D.aux_state} \
        | {u[1]: u[0] for u in D.updates}
    # the symbols whose value changes with q: the state, the calls, and what is computed from them
    varying = set(old)
    if sm is not None:
        varying |= {sm.theta} | set(sample_calls)
    order = []                   # the quantities to copy, dependencies first

    def visit(s, seen):
        if s in seen:
            return s in varying
        seen.add(s)
        if s in states and s not in old:
            raise ctx.fail(f"the estimate at its place reads '{states[s]}', a state that an earlier pass updates, "
                           "which has no value at q_old: list posterior_correction before that pass")
        if s in defs:
            expr = defs[s]
        elif s in stats:
            expr = stats[s]
        elif s in calls:
            expr = calls[s][2]
        elif s in chained:
            expr = chained[s][3]
        elif s in reductions:
            expr = reductions[s]
        else:
            return s in varying
        dep = [visit(x, seen) for x in sorted(expr.free_symbols, key=str)]
        if s in calls or s in chained or any(dep):
            varying.add(s)
            order.append(s)
            return True
        return False

    seen = set()
    for v in views:
        visit(v, seen)
    if sm is not None and sm.shaping is not None and sm.shaping.call in varying:
        raise ctx.fail("the estimate reads ranked loss values (fitness_shaping), which have no counterpart at q_old")
    taken = set()
    copy = dict(old)
    shown = []
    if sm is not None and any(s in varying for s in sample_calls):
        pt = sp.Symbol(_fresh(D, f"{sm.theta}_old", taken), real=True)
        copy[sm.theta] = pt
        point = sm.theta_expr.xreplace(copy)
        first = True
        for k, oracle in sm.calls:
            if k in varying:
                copy[k] = sp.Symbol(_fresh(D, f"{k}_old", taken), real=True)
                sm.chained.append(ChainedCall(copy[k], oracle, pt if first else sp.Symbol(_fresh(D, f"{pt}", taken), real=True),
                                               point))
                tex = {"grad": r"\nabla_\theta\ell(%s)", "hess": r"\nabla^2_\theta\ell(%s)", "loss": r"\ell(%s)"}.get(
                    oracle, r"\mathrm{" + oracle.replace("_", r"\_") + r"}(%s)")
                shown.append((copy[k], TexForm(tex, (point,))))
                first = False
        D.symbol_names[pt] = r"\theta_{k,old}"
    for s in order:
        if s in copy:
            continue
        name = _fresh(D, f"{s}_old", taken)
        new = sp.Symbol(name, real=True)
        copy[s] = new
        if s in defs:
            D.defs.append((new, defs[s].xreplace(copy)))
            shown.append(D.defs[-1])
            if s in D.frozen:
                D.frozen.add(new)
        elif s in stats:
            sm.stats.append((new, stats[s].xreplace(copy)))
            shown.append((new, TexForm(r"\frac{1}{S}\sum_k %s", (sm.stats[-1][1],))))
        elif s in calls:
            c = calls[s]
            D.oracle_calls.append(OracleCall(new, c[1], c[2].xreplace(copy), f"{c[3]}, at the old posterior q_old"))
            shown.append((new, TexForm(c[1].replace("_", r"\_") + r"(%s)", (D.oracle_calls[-1][2],))))
        elif s in chained:
            c = chained[s]
            pt = sp.Symbol(_fresh(D, f"{c[2]}_old", taken), real=True)
            sm.chained.append(ChainedCall(new, c[1], pt, c[3].xreplace(copy)))
        elif s in reductions:
            sm.reductions.append((new, reductions[s].xreplace(copy)))
    return {v: copy.get(v, v) for v in views}, shown


def correct_program(ctx):
    """The program stage: the ``grad``/``hess`` views replaced by the estimates whose natural gradient at q is
    ∇_μ E_q[ℓ_B] − ∇_μ E_{q_old}[ℓ_B] + (sites of q_old)."""
    D = ctx.D
    pend = D.correction
    fam = D.recipe.family
    g_view, h_view = D.views.grad, D.views.hess
    if g_view is None:
        raise ctx.fail("the update has no gradient to correct")
    if not corrects_hessian(D.recipe):      # E_q[∇ℓ] only (estimates: [grad]): g_B − g_B,old + ḡ_old
        olds, shown = at_old(ctx, hessian=False)
        g_new = sp.Symbol(_fresh(D, "g_pc", set()), real=True)
        added = [(g_new, g_view - olds[g_view] + scalar_expr(D.recipe.correction.full["grad"].symbol))]
        D.updates = [(n, sym_, e.xreplace({g_view: g_new})) for n, sym_, e in D.updates]
        D.defs = [(d, e if d in D.frozen else e.xreplace({g_view: g_new})) for d, e in D.defs] + added
        D.views.grad = g_new
        _describe(D, D.recipe.correction)
        record(ctx, "Posterior correction (gradient)",
               "The batch's gradient estimate as it stands here is evaluated again at q_old (its parameters in place "
               "of the state; an oracle at a sample θ_k = m + σε_k is called at m_old + σ_old ε_k, the same draw) and "
               "replaced by the estimate at q minus the estimate at q_old plus the stored full-data gradient at q_old "
               "(estimates: [grad]); the Hessian estimate is the batch's own.",
               [(a, b, "=") for a, b in shown + added])
        return
    uses_h = pend.EH is not None and any(g.has(pend.EH) for g in pend.grads)
    if uses_h and h_view is None:
        raise ctx.fail("the update has no Hessian to correct")
    olds, shown = at_old(ctx)
    s = scalar_expr
    old = {s(k): s(v) for k, v in pend.old.items()}
    at_state = {s(u): s(e) for u, e in zip(fam.mu, fam.mu_ord)}
    at_snapshot = {s(u): s(e).xreplace(old) for u, e in zip(fam.mu, fam.mu_ord)}
    Eg, EH = s(pend.Eg), s(pend.EH) if uses_h else None
    grads = [s(g) for g in pend.grads]
    x, y = sp.Dummy("x", real=True), sp.Dummy("y", real=True)
    reps_now = {Eg: g_view} | ({EH: h_view} if uses_h else {})
    reps_old = {Eg: olds[g_view]} | ({EH: olds[h_view]} if uses_h else {})
    target = [g.xreplace(at_state).xreplace(reps_now) - g.xreplace(at_snapshot).xreplace(reps_old)
              + s(f).xreplace(at_state) for g, f in zip(grads, pend.full)]
    unknown = {Eg: x} | ({EH: y} if uses_h else {})
    eqs = [sp.expand(g.xreplace(at_state).xreplace(unknown) - t) for g, t in zip(grads, target)]
    sol = sp.solve(eqs, [x, y] if uses_h else [x], dict=True)
    if len(sol) != 1:
        raise ctx.fail("the corrected natural gradient is not the natural gradient of one pair of estimates")
    sol = sol[0]
    taken = set()
    g_new = sp.Symbol(_fresh(D, "g_pc", taken), real=True)
    new = {g_view: g_new}
    added = [(g_new, sp.expand(sol[x]))]
    if uses_h:
        h_new = sp.Symbol(_fresh(D, "h_pc", taken), real=True)
        new[h_view] = h_new
        added.append((h_new, sp.expand(sol[y])))
    D.updates = [(n, sym_, e.xreplace(new)) for n, sym_, e in D.updates]
    D.defs = [(d, e if d in D.frozen else e.xreplace(new)) for d, e in D.defs] + added
    D.views.grad = g_new
    if uses_h:
        D.views.hess = h_new
    _describe(D, D.recipe.correction)
    record(ctx, "Posterior correction",
           "The batch's old sites in q_old are replaced by new ones.  The estimates as they stand here are "
           "evaluated again at q_old (its parameters in place of the state; an oracle at a sample θ_k = m + σε_k is "
           "called at m_old + σ_old ε_k, the same draw), and replaced by the estimates whose natural gradient at q is "
           "the batch's at q minus the batch's at q_old plus " + _sites_text(D.recipe.correction.sites),
           [(a, b, "=") for a, b in shown + added])


class PosteriorCorrection(Rule):
    name = "posterior_correction"
    kind = "step"
    equation = "Khan (2025) posterior correction; Daheim et al. (2026); the Bayes-duality slides"
    summary = ("replace the batch's old sites in a stored posterior q_old (the recipe's posterior_correction section): "
               "∇_μ E_q[ℓ_B] − ∇_μ E_{q_old}[ℓ_B] + the sites of q_old (the full-data gradient at q_old: SVRG over "
               "N(m, I); or q_old itself: q ← q^{1−ρ} q_old^ρ Π_{j∈B} exp(−ρ(ℓ̂_j − ℓ̂_{j|old}))); among passes, on "
               "the estimates as they stand at its place")

    def adjust_gradient(self, ctx, grads):
        return posterior_correction(ctx, grads)

    def rewrites_in_program(self, D):
        return D.correction is not None

    def rewrite(self, ctx):
        ctx.done()
        record_loss(ctx.D.recipe, ctx.D)
        correct_program(ctx)


register(PosteriorCorrection())
