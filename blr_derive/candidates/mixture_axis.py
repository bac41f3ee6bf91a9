"""A mixture whose components are an array axis (``family: {mixture: F, components: K}`` with K a size name):
the update of Eqs. 28-30 and the entropy term of Eqs. 69-71 written once, for a generic component k and a generic
other component j, whatever K is.

``blr_derive/candidates/mixture.py`` derives the generic component k's update (Eqs. 27-28, 67-68, App. E, the
delta method) exactly as for a fixed number of components.  Here, instead of writing it out per component:

* the oracle values at the component means (``g_k = grad(m_k)``) are one array over the components;
* ∇ log q(m_k) and ∇² log q(m_k) (Eqs. 69-71) are sums over j of the responsibilities
  r_jk = π_j q_j(m_k) / Σ_i π_i q_i(m_k) = exp(a_jk − log Σ_i exp a_ik), a_jk = log π_j + log q_j(m_k),
  computed as a stable log-softmax over all K (no overflow; a far-away component's responsibility keeps its
  relative precision), with the component family's log density, score and Hessian written at θ = m_j + δ_jk,
  δ_jk = m_k − m_j (the same values as at θ = m_k; the quadratic form is then δᵀS_jδ, with no cancellation between
  m_kᵀS_jm_k, m_jᵀS_jm_k and m_jᵀS_jm_j, and the own term j = k is exactly zero);
* π_j = π_k = 1/K (equal weights).

The derivation record keeps the generic symbols (``m_k``, ``m_j``, ``a_j_k`` ...) and ``D.component_axis`` says
which array each stands for; ``blr_derive/ir/mixture_axis.py`` infers every quantity's component axes from it and
the targets print batched einsum/matmul over them.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.matexpr import is_mat, like_symbol, simplify_mat
from blr_derive.rules.base import PROGRAM_KINDS, RULES, ComponentAxis, OracleCall
from blr_derive.rules.mixture import LogSumExpOverComponents, sum_over_components


def check_axis(ctx):
    """Rules that need a list of components (passes on one free component's views, sampled dropout masks) do not
    apply to a mixture whose components are an array axis: a located error."""
    fam = ctx.family
    if not fam.axis:
        return
    for r, a in ctx.rules(*PROGRAM_KINDS):
        if getattr(r, "each_component", False):     # acts on every component's own update (riemannian_correction)
            continue
        raise ctx.fail(f"approximation '{r.name}' needs a mixture with one free component (this one has {fam.K}, an "
                       "array axis)", a)
    for r, a in ctx.rules("expectation", "mixture"):
        if hasattr(r, "mixture_finish"):
            raise ctx.fail(f"approximation '{r.name}' needs a fixed number of components with fixed ones (give "
                           "components as an integer)", a)


def _names(fam, recipe):
    taken = {p.name for p in fam.params.values()} | {h.name for h in recipe.hyper} | {str(fam.theta), str(fam.K)}
    if fam.dim is not None:
        taken.add(str(fam.dim))
    return taken


def _free(name, taken):
    base, i = name, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def _canonical(e, sym, base):
    """A log density, score or Hessian at θ = m_j + δ with the terms in m_j cancelled: traces of a product and of
    its transpose are one (S symmetric), scalar polynomials are expanded."""
    if not is_mat(e) and not e.has(sp.Trace):
        return base.simp(sp.expand(e))
    e = simplify_mat(sp.expand(e) if is_mat(e) else e, sym)
    reps = {}
    for t in e.atoms(sp.Trace):
        reps[t] = min(simplify_mat(t, sym), simplify_mat(sp.Trace(t.arg.T), sym), key=str)
    return simplify_mat(e.xreplace(reps), sym)


def axis_update(ctx, D, M, G, updates, score):
    """The generic update for all components at once (Eqs. 29-30) and, with ``score`` (the component family's
    score and its Jacobian in θ), the entropy term through the responsibilities over a generic j (Eqs. 69-71).
    Returns the update steps."""
    fam, recipe = ctx.family, ctx.recipe
    base, K = fam.base, fam.K
    taken = _names(fam, recipe)
    leaves, names = {}, {}
    for p in base.free_params:
        leaves[G.gen[p.symbol]], names[G.gen[p.symbol]] = "k", p.name
    for cs in M.symbols:
        if not cs.copy or cs.generic in (M.gq, M.Hq):
            continue
        if not cs.oracle:
            raise ctx.fail(f"a mixture with the components as an array axis cannot write '{cs.prefix}' per component")
        D.oracle_calls.append(OracleCall(cs.generic, cs.oracle, M.mean_k, cs.description))
        leaves[cs.generic], names[cs.generic] = "k", _free(cs.prefix, taken)
    if score is not None:
        pair_terms(ctx, D, M, G, score, leaves, names, taken)
    steps = []
    by_name = {str(G.gen[p.symbol]): p for p in base.free_params}
    for name_k, new_k, _ in updates:
        names[new_k] = _free(f"{by_name[name_k].name}_new", taken)
    for name_k, new_k, expr in updates:
        e = expr.xreplace({G.pi_k: 1 / K})
        D.updates.append((by_name[name_k].name, new_k, e))
        steps.append((new_k, e, r"\leftarrow"))
    D.component_axis = ComponentAxis(K, leaves, names)
    return steps


def pair_terms(ctx, D, M, G, score, leaves, names, taken):
    """Eqs. 69-71 at θ = m_k over a generic other component j: δ_jk = m_k − m_j, a_jk = log π_j + log q_j(m_j +
    δ_jk), r_jk = exp(a_jk − log Σ_j exp a_jk), s_jk = ∇ log q_j(m_k), ∇ log q(m_k) = Σ_j r_jk s_jk and
    ∇² log q(m_k) = Σ_j r_jk (∇² log q_j(m_k) + s_jk s_jkᵀ) − ∇ log q(m_k) ∇ log q(m_k)ᵀ."""
    fam = ctx.family
    base, K, sym = fam.base, fam.K, M.hsym
    theta = base.theta
    score_b, shess_b = score
    genj = {}
    for p in base.free_params:
        s = sp.MatrixSymbol(f"{p.name}_j", *p.symbol.shape) if is_mat(p.symbol) else \
            sp.Symbol(f"{p.name}_j", **p.symbol.assumptions0)
        genj[p.symbol] = s
        leaves[s], names[s] = "j", p.name
        D.symbol_names[s] = (r"\mathbf{%s}_j" if is_mat(s) else "%s_j") % p.name
        if p.symbol in base.symmetric:
            sym.add(s)
    mean_j = base.gaussian_mean.xreplace(genj)
    d, a, r = like_symbol("delta_j_k", mean_j), sp.Symbol("a_j_k", real=True), sp.Symbol("r_j_k", real=True)
    s = like_symbol("score_j_k", mean_j)
    for x, prefix, tex in [(d, "delta", r"\boldsymbol{\delta}_{jk}" if is_mat(d) else r"\delta_{jk}"),
                           (a, "a", "a_{jk}"), (r, "r", r"r_j(\mathbf{m}_k)" if is_mat(d) else "r_j(m_k)"),
                           (s, "score", r"\nabla_\theta\log q_j(%s)" % ("\\mathbf{m}_k" if is_mat(d) else "m_k"))]:
        names[x] = _free(prefix, taken)
        D.symbol_names[x] = tex
    names[M.gq], names[M.Hq] = _free("gq", taken), _free("Hq", taken)
    at = {theta: mean_j + d}
    logq_b = base.simp(base.log_density())
    a_e = -sp.log(K) + _canonical(logq_b.xreplace(genj).xreplace(at), sym, base)
    s_e = _canonical(score_b.xreplace(genj).xreplace(at), sym, base)
    h_e = _canonical(shess_b.xreplace(genj).xreplace(at), sym, base)
    r_e = sp.exp(a - LogSumExpOverComponents(a))
    gq_e = sum_over_components(r * s)
    if is_mat(M.Hq):
        Hq_e = sp.MatAdd(sum_over_components(r * h_e), sum_over_components(r * s * s.T), -M.gq * M.gq.T)
    else:
        Hq_e = sum_over_components(r * h_e) + sum_over_components(r * s**2) - M.gq**2
    defs = [(d, M.mean_k - mean_j), (a, a_e), (r, r_e), (s, s_e), (M.gq, gq_e), (M.Hq, Hq_e)]
    D.defs.extend(defs)
    D.add("mixture_score", RULES["mixture_score"].equation,
          "Gradient and Hessian of log q through the responsibilities, over a generic other component j",
          "Written once for a generic component k and a generic other component j, whatever K is: the "
          "responsibilities (Eq. 71) are a log-softmax over all K components (π_j = 1/K), and the component "
          "family's log density, score and Hessian are taken at θ = m_j + δ_jk (= m_k), so the quadratic form "
          "has no cancellation and the own term (j = k) of the score is exactly zero (Eq. 72).",
          [r"r_j(\theta) = \frac{\pi_j q_j(\theta)}{\sum_i \pi_i q_i(\theta)}"] + defs)
