"""``memory_perturbation`` — leave-one-out posteriors from the BLR's per-example sites.

Nickl, Xu, Tailor, Möllenhoff & Khan, *The memory-perturbation equation: understanding model's sensitivity to
data* (NeurIPS 2023; code: ``team-approx-bayes/memory-perturbation``).  At a fixed point of the BLR (Eq. 6 with
ρ_t → any value) the natural parameter is the sum of the prior's site and one site per example (Khan & Rue 2023,
Sec. 5.4, Eqs. 59-60):

    λ* = λ̃_0 + Σ_i λ̃_i,      λ̃_i = −∇_μ E_q[ℓ_i]   (at μ*).

Removing example i removes its site, λ_{-i} = λ* − λ̃_i = λ* + ∇_μ E_q[ℓ_i], and mapping λ_{-i} back to the ordinary
parameters (the family's λ ↔ parameter solve, Eq. 9) gives the leave-one-out posterior q_{-i}; the memory-
perturbation equation is the statement that q_{-i} is the leave-one-out posterior to first order (exactly for a
conjugate model).  Nothing here is specific to a family: the site is the recipe's own natural gradient of one
example's loss, derived by its expectation rule (the delta method gives derivatives at the mean, ``exact`` the
closed-form expectations, Monte Carlo the averages over samples of q), then the family's ordinary(λ) solve.  Over
the full Gaussian with the delta method this yields S_{-i} = S − H_i, m_{-i} = m + S_{-i}⁻¹ g_i; over the diagonal one
the same elementwise.

One example's loss:

* an explicit loss with a data plate (data whose leading axis is a dimension N that θ does not have): the terms
  of the loss that read the plate data, with every plate array replaced by one row (``X`` → ``X_row`` of shape
  1×P, ``y`` → ``y_row``); terms without plate data (the prior) belong to no example;
* an abstract loss: the loss of the oracles, which the generated ``sensitivities`` asks for one example at a time
  (per-example arrays with a leading axis of examples).

The rule adds no step to the update; it records a :class:`LeaveOneOut` (``D.sensitivities``) that the IR turns
into the generated module's ``sensitivities`` entry point (``blr_derive/ir/sensitivities.py``).
"""
from __future__ import annotations

import dataclasses

import sympy as sp

from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.matexpr import is_mat, scalarize, simplify_mat
from blr_derive.core.pretty import pretty
from blr_derive.rules.base import RULES, Derivation, LeaveOneOut, Rule, register
from blr_derive.rules.blr import doit, expand, solve_ordinary
from blr_derive.rules.context import BLRContext
from blr_derive.spec.hyper import DataVar


# ---------------------------------------------------------------------------------- one example's loss

def _terms(loss):
    """The additive terms of a scalar loss, with the traces of sums split (tr(A + B) = tr A + tr B)."""
    out = []
    for t in sp.Add.make_args(scalarize(loss)):
        factors = sp.Mul.make_args(t)
        traces = [f for f in factors if isinstance(f, sp.Trace)]
        if len(traces) != 1:
            out.append(t)
            continue
        coeff = sp.Mul(*[f for f in factors if not isinstance(f, sp.Trace)])
        arg = traces[0].arg.expand()
        out += [coeff * sp.Trace(a) for a in (arg.args if isinstance(arg, sp.MatAdd) else (arg,))]
    return out


def plate(recipe):
    """(N, plate data) of an explicit loss: N is the leading dimension of the data that θ's shape does not use."""
    theta = recipe.family.theta
    own = set(theta.shape) if is_mat(theta) else set()
    firsts = [d.shape[0] for d in recipe.data if d.shape and isinstance(d.shape[0], sp.Symbol)
              and d.shape[0] not in own]
    if not firsts:
        return None, []
    n = firsts[0]
    return n, [d for d in recipe.data if d.shape and d.shape[0] == n]


def row_recipe(recipe, fail):
    """(the recipe of one example, [(row symbol, data name)], N) — see the module docstring."""
    if recipe.loss_kind != "explicit":
        return recipe, [], None
    n, rows = plate(recipe)
    if n is None:
        raise fail("an explicit loss needs data with a leading axis of examples (a data plate such as X: [N, P])")
    reps, data, names = {}, [], []
    taken = {d.name for d in recipe.data} | {h.name for h in recipe.hyper} | set(recipe.family.params)
    for d in rows:
        name = f"{d.name}_row"
        if name in taken:
            raise fail(f"the name '{name}' (one row of the data '{d.name}') is taken; rename it")
        sym = d.symbol
        new = sp.MatrixSymbol(name, 1, sym.shape[1]) if is_mat(sym) else sp.Symbol(name, real=True)
        reps[sym] = new
        data.append(DataVar(name, new, (1,) + tuple(d.shape[1:]), f"row i of {d.name}", d.symmetric))
        names.append((new, d.name))
    kept = [t.xreplace(reps) for t in _terms(recipe.loss) if t.has(*reps)]
    if not kept:
        raise fail("no term of the loss reads the plate data: no example has a site")
    others = [d for d in recipe.data if d not in rows]
    return dataclasses.replace(recipe, loss=sp.Add(*kept), data=data + others), names, n


# ---------------------------------------------------------------------------------- the derivation

def _site_gradients(ctx, row):
    """∇_μ E_q[ℓ_i] of one example by the recipe's own expectation rule, on a scratch record (its definitions,
    oracle calls and Monte Carlo statistics are the per-example program and inputs)."""
    D2 = Derivation(row)
    c2 = BLRContext(row, D2, candidate="single", sym=set(ctx.sym), rho=ctx.rho)
    c2.mean_mu, c2.cov_mu = ctx.mean_mu, ctx.cov_mu
    (expectation, _), = ctx.rules("expectation")
    grads = expectation.natural_gradient(c2)
    return grads, D2, c2.sym


def _inputs(D2):
    """Per-example inputs of an abstract loss: the oracle values the expectation rule reads (at the mean: the
    delta method) or averages over samples of q (Monte Carlo), one per example."""
    rows, inputs, program = [], [], []
    for s, oracle, arg, desc in D2.oracle_calls:
        rows.append((s, "oracles", oracle))
        inputs.append(("oracles", oracle, f"{desc}, of example i's loss ℓ_i"))
    sm = D2.sampling
    if sm is not None:
        per_call = dict(sm.calls)
        for avg, e in sm.stats:
            if e not in per_call:
                raise DerivationError(f"the Monte Carlo statistic {avg} = mean_k({pretty(e)}) is not an oracle value")
            rows.append((avg, "oracles", per_call[e]))
            inputs.append(("oracles", per_call[e], f"E_q[{per_call[e]} of ℓ_i] (its average over samples θ_k of q)"))
    program += list(D2.defs)
    return rows, inputs, program


def derive_leave_one_out(ctx):
    """The per-example site, λ_{-i} and q_{-i}'s ordinary parameters (sets ``ctx.D.sensitivities``)."""
    recipe, D, fam = ctx.recipe, ctx.D, ctx.family
    approx = ctx.approx("memory_perturbation")
    ctx.args("memory_perturbation").done()

    def fail(msg):
        return SpecError(f"approximation 'memory_perturbation': {msg}", recipe.file, approx.line)

    row, names, n_sym = row_recipe(recipe, fail)
    try:
        grads, D2, sym = _site_gradients(ctx, row)
    except (DerivationError, SpecError) as exc:
        raise fail(f"one example's natural gradient: {exc}") from None
    if recipe.loss_kind == "explicit":
        rows = [(s, "data", name) for s, name in names]
        inputs = [("data", name, f"row i of {name}") for _, name in names]
        program = list(D2.defs)
    else:
        n_sym = sp.Symbol("n_examples", integer=True, positive=True)
        rows, inputs, program = _inputs(D2)
    at_state = dict(zip(fam.mu, fam.mu_ord))
    site, lam_loo = [], []
    for e, g in zip(fam.eta, grads):
        g = simplify_mat(doit(g).xreplace(at_state), sym)
        site.append(simplify_mat(expand(-g), sym))
        lam_loo.append(simplify_mat(expand(e + g), sym))     # λ_{-i} = λ* − λ̃_i
    D3 = Derivation(recipe)
    try:
        solve_ordinary(recipe, D3, lam_loo, sym)
    except DerivationError as exc:
        raise fail(f"λ_(-i) cannot be solved for the family's parameters: {exc}") from None
    loo = {}
    for name, new, _ in D3.updates:
        loo[new] = sp.MatrixSymbol(f"{name}_loo", *new.shape) if is_mat(new) else sp.Symbol(f"{name}_loo", real=True)
    updates = [(loo[new], e.xreplace(loo)) for _, new, e in D3.updates]
    outputs = [(name, loo[new]) for name, new, _ in D3.updates]
    m = fam.gaussian_mean
    if m is not None:
        dev = sp.MatrixSymbol("mean_deviation", *m.shape) if is_mat(m) else sp.Symbol("mean_deviation", real=True)
        m_loo = dict((n_, s) for n_, s in outputs)[str(m)]
        updates.append((dev, simplify_mat(sp.MatAdd(m_loo, -m).doit(), sym) if is_mat(m) else m_loo - m))
        outputs.append(("mean_deviation", dev))
    declared = {h.name for h in recipe.hyper} | {d.name for d in recipe.data} | {str(n_sym)}
    clash = sorted(str(s) for s, _ in updates if str(s) in declared)
    if clash:
        raise fail(f"the name '{clash[0]}' is also used by the leave-one-out posterior; rename it")
    renamed = {fam.params[p].symbol: value for p, (_, _, value) in D.renamed.items()}
    program = [(s, e.xreplace(renamed)) for s, e in program + updates]
    lam_syms = [r"\tilde{\lambda}^{(%d)}_i" % (k + 1) for k in range(len(site))]
    for s, _ in updates:
        base = str(s)[:-4] if str(s).endswith("_loo") else None
        D.symbol_names[s] = ((r"\mathbf{%s}_{-i}" if is_mat(s) else "%s_{-i}") % base if base
                             else r"\Delta\mathbf{m}_i" if is_mat(s) else r"\Delta m_i")
    for s, name in names:
        D.symbol_names[s] = r"\mathbf{%s}_i" % name.lower() if is_mat(s) and s.shape[1] != 1 else "%s_i" % name
    D.add("memory_perturbation", RULES["memory_perturbation"].equation, "Leave-one-out posteriors (sites)",
          "At a fixed point λ* is the sum of the prior's site and the examples' sites λ̃_i = −∇_μ E_q[ℓ_i] (Eq. 60), "
          "the natural gradient of one example's loss by the recipe's expectation rule.  Removing example i: "
          "λ_{-i} = λ* − λ̃_i, solved for the ordinary parameters of q_{-i} (Eq. 9); to first order this is the "
          "leave-one-out posterior (the memory-perturbation equation).",
          [(s, e, "=") for s, e in program[:len(program) - len(updates)]]
          + [(l, s) for l, s in zip(lam_syms, site)] + [(s, e, r"\leftarrow") for s, e in updates])
    lines = [f"site{k + 1}_i = {pretty(s)}" for k, s in enumerate(site)]
    lines += [f"{s} = {pretty(e)}" for s, e in program]
    D.sensitivities = LeaveOneOut(n_sym, rows, program, outputs, inputs, lines)


class MemoryPerturbation(Rule):
    name = "memory_perturbation"
    takes_arguments = False
    kind = "step"
    equation = "Nickl et al. (2023), memory-perturbation eq.; Eqs. 59-60"
    summary = ("leave-one-out posteriors from the per-example sites: λ_{-i} = λ* − λ̃_i with λ̃_i = −∇_μ E_q[ℓ_i] "
               "(one example's natural gradient), solved for the family's parameters; a generated "
               "``sensitivities`` function")

    def check(self, ctx):
        approx = ctx.approx(self.name)
        if ctx.candidate != "single":
            raise ctx.fail("approximation 'memory_perturbation' applies to single-family recipes", approx)
        if ctx.recipe.federated is not None:
            raise ctx.fail("approximation 'memory_perturbation' does not combine with a 'federated' section", approx)
        if ctx.recipe.loss_kind == "explicit" and plate(ctx.recipe)[0] is None:
            raise ctx.fail("approximation 'memory_perturbation' needs data with a leading axis of examples "
                           "(a data plate such as X: [N, P]) or an abstract loss", approx)

    def finish(self, ctx):
        derive_leave_one_out(ctx)


register(MemoryPerturbation())
