"""Finite mixtures with fixed weights: the mixture BLR (Sec. 3.2, Eqs. 27-30; App. E; App. G).

A recipe declares a mixture candidate as

.. code-block:: yaml

    family: {mixture: gaussian_full, components: 3}                  # equal weights 1/K
    family: {mixture: gaussian_diag, components: 2, weights: [pi1],  # pi_K = 1 - the others
             fixed: {2: {m: 0, s: s0}}}                              # a component with known parameters

A fixed component gives every free parameter of the component family and may override the family's own
fixed parameters (``gaussian_diag_fixed_precision``: the slab shares the known precision ``s``, the spike
takes ``s0``; SGD with dropout, Eq. 40).

The candidate is q(θ) = Σ_k π_k q_k(θ) with q_k in the component family.  The joint
q(θ, z = k) = π_k q_k(θ) is a minimal conditional exponential family (Eq. 27): its natural
parameters λ_k are those of q_k and its expectation parameters are μ_k = π_k E_{q_k}[T(θ)].  The
mixture BLR (Eq. 28) updates each free component,

    λ_k ← λ_k − ρ ∇_{μ_k} [E_q[ℓ̄(θ)] − H(q)],      H(q) the entropy of the mixture,

and the engine derives the per-component update from the family and named rules only:

* ``mixture_blr`` (Eq. 28) with ∇_{μ_k}(−H) = ∇_{μ_k} E_q[log q] (log q held fixed: E_q[∇ log q] = 0);
* ``mixture_chain_rule`` (Eqs. 27, 67-68): ∇_{μ_k} through m_k(μ_k) = μ_k⁽¹⁾/π_k and C_k(μ_k);
* ``mixture_bonnet_price`` (App. E): ∇_{m_k} E_q[f] = π_k E_{q_k}[∇f], ∇_{C_k} E_q[f] = ½π_k E_{q_k}[∇²f];
* the expectation rules: ``delta`` (Eqs. 13, 65-66) at the component means, ``exact`` (closed-form
  Gaussian moments of a polynomial loss: any degree for scalar components; products of two linear or
  quadratic forms, degree <= 4 by Isserlis' theorem, for vector ones) or ``dropout_masks`` (Eq. 84:
  reparameterization by the indicator z, drawn by Bernoulli/categorical masks, noise dropped);
* ``mixture_score`` (Eqs. 69-71): ∇ log q and ∇² log q through the responsibilities r_j(θ), with
  the component scores ∇_θ log q_j derived from the component family, or ``separated_components``
  (Eq. 74, Eqs. 85-86): r_k(m_k) ≈ 1, so the entropy term is that of component k alone.

The derivation is carried out once for a generic component k (symbols ``m_k``, ``S_k``, ``pi_k``)
and then instantiated for each free component.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import sympy as sp

from blr_derive.core import matcalc
from blr_derive.derive.derivation import Derivation, Sampling
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.expect import gaussian_expectation
from blr_derive.core.exprparse import parse_expression
from blr_derive.families.family import Family, Param, load_family
from blr_derive.core.matcalc import is_mat, like_symbol, simplify_mat
from blr_derive.rules.registry import RULES
from blr_derive.core.yamlio import LDict, check_keys, where

MIXTURE_KEYS = {"mixture", "components", "weights", "fixed", "description"}
MAX_COMPONENTS = 9


@dataclass
class MixtureComponent:
    index: int                       # 1-based
    fixed: bool
    subs: dict                       # base parameter symbol -> this component's symbol or (fixed) value
    params: list = field(default_factory=list)   # [Param] of a free component (renamed)
    weight: object = None            # π_k (set by bind)
    decl: object = None              # the declared values of a fixed component


@dataclass
class MixtureFamily:
    """q(θ) = Σ_k π_k q_k(θ), components in ``base``, fixed weights (Sec. 3.2)."""
    base: Family
    K: int
    components: list
    params: dict                     # name -> Param: the free components' parameters (and base-fixed ones)
    spec: object
    file: str | None = None
    is_mixture: bool = True
    mu_inverse: str = "symbolic"
    sampler: object = None
    lam: list = field(default_factory=list)

    @property
    def name(self):
        return f"mixture_{self.K}_{self.base.name}"

    @property
    def description(self):
        fixed = [c.index for c in self.components if c.fixed]
        extra = f"; component(s) {', '.join(map(str, fixed))} fixed" if fixed else ""
        return (f"finite mixture of {self.K} `{self.base.name}` components with fixed weights{extra} "
                f"(T, h, λ, μ and A are those of one component)")

    reference = "Sec. 3.2, Eq. 27; App. E"

    @property
    def theta(self):
        return self.base.theta

    @property
    def dim(self):
        return self.base.dim

    @property
    def elementwise(self):
        return self.base.elementwise

    @property
    def is_gaussian(self):
        return False

    @property
    def symmetric(self):
        out = set(self.base.symmetric)
        for c in self.components:
            for k, v in c.subs.items():
                if k in self.base.symmetric and isinstance(v, sp.MatrixSymbol):
                    out.add(v)
        return frozenset(out)

    @property
    def variable_symbols(self):
        return self.base.variable_symbols

    def depends_on_variable(self, expr):
        return self.base.depends_on_variable(expr)

    @property
    def free_params(self):
        return [p for p in self.params.values() if not p.fixed]

    @property
    def fixed_params(self):
        return [p for p in self.params.values() if p.fixed]

    @property
    def free_components(self):
        return [c for c in self.components if not c.fixed]

    @property
    def gaussian_mean(self):
        """The mean parameter of the one free component (passes and targets use it), else None."""
        free = self.free_components
        if len(free) != 1 or self.base.gaussian_mean is None:
            return None
        return free[0].subs.get(self.base.gaussian_mean, self.base.gaussian_mean)

    @property
    def gaussian_cov(self):
        free = self.free_components
        if len(free) != 1 or self.base.gaussian_cov is None:
            return None
        return self.base.gaussian_cov.xreplace(free[0].subs)

    # the component family's declaration (reports show it as the family of the mixture's components)
    @property
    def T(self):
        return self.base.T

    @property
    def h(self):
        return self.base.h

    @property
    def eta(self):
        return self.base.eta

    @property
    def mu_ord(self):
        return self.base.mu_ord

    @property
    def A(self):
        return self.base.A

    @property
    def A_given(self):
        return self.base.A_given

    def sample_params(self, rng, dim: int = 2):
        vals = {}
        for c in self.free_components:
            v = self.base.sample_params(rng, dim)
            for p in self.base.params.values():
                vals[c.subs.get(p.symbol, p.symbol)] = v[p.symbol]
        return vals

    def evaluate(self, expr, values, dim=None):
        return self.base.evaluate(expr, values, dim)

    # ------------------------------------------------------------------ weights and fixed values
    def bind(self, hyper_symbols: dict):
        """Parse the weights and the fixed components' values (expressions in the recipe's hyperparameters)."""
        spec = self.spec
        syms = dict(hyper_symbols)
        if self.base.dim is not None:
            syms[str(self.base.dim)] = self.base.dim
        weights = spec.get("weights")
        if weights is None:
            ws = [sp.Rational(1, self.K)] * self.K
        else:
            if not isinstance(weights, list) or len(weights) != self.K - 1:
                f, l = where(spec, "weights")
                raise SpecError(f"mixture weights: give a list of K - 1 = {self.K - 1} weights "
                                "(the last one is 1 minus their sum, Sec. 3.2)", f, l)
            ws = []
            for i, w in enumerate(weights):
                ws.append(_parse(w, syms, f"weight {i + 1}", weights, i))
            ws.append(1 - sp.Add(*ws))
            for w in ws:
                if w.is_number and not (0 < float(w) < 1):
                    f, l = where(spec, "weights")
                    raise SpecError("mixture weights must lie in (0, 1) and sum to 1", f, l)
        for c, w in zip(self.components, ws):
            c.weight = w
        for c in self.components:
            if not c.fixed:
                continue
            decl = c.decl
            # its free parameters, and any of the family's fixed parameters it overrides (a spike's own
            # precision s0 while the free components share the family's fixed s, Eq. 41)
            for p in self.base.params.values():
                if p.name not in decl:
                    continue
                v = _parse(decl[p.name], syms, f"component {c.index}: {p.name}", decl, p.name)
                c.subs[p.symbol] = v
        return self


def _parse(text, syms, what, container, key):
    try:
        return parse_expression(text, syms, what=what)
    except SpecError as exc:
        f, l = where(container, key)
        raise exc.located(f, l) from None


def load_mixture(spec, base_dir=None) -> MixtureFamily:
    check_keys(spec, MIXTURE_KEYS, ("mixture", "components"), "mixture family")
    base = load_family(spec["mixture"], base_dir)
    if getattr(base, "is_mixture", False):
        raise SpecError("a mixture's components cannot be mixtures", *where(spec, "mixture"))
    if not base.is_gaussian:
        raise SpecError(f"mixture components must have Gaussian moments (a 'gaussian' section): '{base.name}' has "
                        "none (the mixture rules of App. E use Bonnet's and Price's theorems)", *where(spec, "mixture"))
    if not (sp.sympify(base.gaussian_mean).free_symbols & {p.symbol for p in base.free_params}):
        raise SpecError(f"mixture components need a Gaussian mean that depends on the parameters of '{base.name}' "
                        f"(its mean is {base.gaussian_mean})", *where(spec, "mixture"))
    K = spec["components"]
    if isinstance(K, bool) or not isinstance(K, int) or not 2 <= K <= MAX_COMPONENTS:
        raise SpecError(f"components must be an integer from 2 to {MAX_COMPONENTS}", *where(spec, "components"))
    fixed = spec.get("fixed") or LDict()
    if not isinstance(fixed, dict):
        raise SpecError("fixed must map component numbers to parameter values", *where(spec, "fixed"))
    fixed_idx = {}
    for key, decl in fixed.items():
        k = int(key) if isinstance(key, str) and key.isdigit() else key
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= K:
            raise SpecError(f"fixed: '{key}' is not a component number 1..{K}", *where(fixed, key))
        fixed_idx[k] = decl
        if not isinstance(decl, dict):
            raise SpecError(f"fixed component {k}: give a mapping parameter -> value", *where(fixed, key))
        names = {p.name for p in base.free_params}
        known = names | {p.name for p in base.fixed_params}     # a family-fixed parameter may be overridden
        for n in decl:
            if n not in known:
                raise SpecError(f"fixed component {k}: '{n}' is not a parameter of '{base.name}'", *where(decl, n))
        for n in sorted(names - set(decl)):
            raise SpecError(f"fixed component {k}: missing a value for '{n}'", *where(fixed, key))
        for p in base.params.values():
            if p.name in decl and p.shape != "scalar":
                raise SpecError(f"fixed component {k}: only scalar parameters can be fixed ('{p.name}' is a {p.shape})",
                                *where(decl, p.name))
    free_idx = [k for k in range(1, K + 1) if k not in fixed_idx]
    if not free_idx:
        raise SpecError("every component is fixed: nothing to learn", *where(spec, "fixed"))
    comps, params = [], {}
    for k in range(1, K + 1):
        if k in fixed_idx:
            comps.append(MixtureComponent(k, True, {}, decl=fixed_idx[k]))
            continue
        subs, ps = {}, []
        for p in base.free_params:
            if len(free_idx) == 1:
                s = p.symbol
            elif is_mat(p.symbol):
                s = sp.MatrixSymbol(f"{p.name}{k}", *p.symbol.shape)
            else:
                s = sp.Symbol(f"{p.name}{k}", **p.symbol.assumptions0)
            subs[p.symbol] = s
            q = Param(str(s), s, p.shape, p.domain, False, f"{p.description} of component {k}".strip(), p.greater_than)
            ps.append(q)
            params[q.name] = q
        comps.append(MixtureComponent(k, False, subs, ps))
    # the family's fixed parameters after the free ones, as in the component family (the generated code takes
    # the shape of its draws from the first state variable: the mean, not a fixed precision given as a scalar)
    for p in base.fixed_params:
        params[p.name] = p
    return MixtureFamily(base, K, comps, params, spec, getattr(spec, "file", None))


# =============================================================================== derivation

def _inner(a, b):
    return sp.Trace(a.T * b) if is_mat(a) else a * b


def _outer(a, b):
    return a * b.T if is_mat(a) else a * b


def _fail(recipe, msg, approx=None):
    line = approx.line if approx is not None else None
    if line is None and recipe.spec is not None:
        line = recipe.spec.line_of("approximations") if "approximations" in recipe.spec else recipe.spec.line_of("loss")
    return SpecError(msg, recipe.file, line)


def _indicator_idempotent(e):
    """1[z=k]² = 1[z=k] for the Heaviside indicators of the masks."""
    return e.replace(lambda x: x.is_Pow and isinstance(x.base, sp.Heaviside) and x.exp.is_Integer and x.exp > 0,
                     lambda x: x.base)


def derive_mixture(recipe) -> Derivation:
    from blr_derive.candidates.single import _apply_passes, _doit, _expand, _solve_ordinary
    fam: MixtureFamily = recipe.family
    base = fam.base
    D = Derivation(recipe)
    names = {a.name for a in recipe.approximations}
    by_name = {a.name: a for a in recipe.approximations}
    rho = recipe.hyper_symbol(recipe.learning_rate)
    D.symbol_names[rho] = r"\rho" if recipe.learning_rate == "rho" else recipe.learning_rate
    sym = set(fam.symmetric)

    # ---- applicability
    supported = {"delta", "exact", "dropout_masks", "separated_components"}
    for a in recipe.approximations:
        if a.name not in supported and RULES[a.name].kind != "pass":
            raise _fail(recipe, f"approximation '{a.name}' does not apply to a mixture candidate (supported: "
                        f"{', '.join(sorted(supported))} and the update passes)", a)
    if "delta" not in names:
        raise _fail(recipe, "a mixture candidate needs 'delta': E_{q_k}[∇ log q] and E_{q_k}[∇² log q] of the "
                    "entropy term are taken at the component means (Eqs. 33, 85-86)")
    loss_rule = "delta"
    if recipe.loss_kind == "explicit":
        if "exact" not in names:
            raise _fail(recipe, "an explicit loss needs 'exact' (closed-form Gaussian moments of the loss)")
        if "dropout_masks" in names:
            raise _fail(recipe, "'dropout_masks' is for an abstract loss (gradients at the masked means)",
                        by_name["dropout_masks"])
        if base.theta is None or (is_mat(base.theta) and base.theta.shape[1] != 1):
            raise _fail(recipe, "'exact' supports mixtures of scalar or vector Gaussian components", by_name["exact"])
        loss_rule = "exact"
    else:
        if "exact" in names:
            raise _fail(recipe, "approximation 'exact' does not apply: the loss is abstract (use 'delta')",
                        by_name["exact"])
        if "dropout_masks" in names:
            if not base.elementwise:
                raise _fail(recipe, "'dropout_masks' supports mean-field (elementwise) components", by_name["dropout_masks"])
            loss_rule = "dropout_masks"
    separated = "separated_components" in names

    free = fam.free_components
    K = fam.K
    passes = [a for a in recipe.approximations if RULES[a.name].kind == "pass"]
    if passes and len(free) > 1:       # a pass rewrites one gradient, Hessian or mean view; here there is one per component
        raise _fail(recipe, f"approximation '{passes[0].name}' needs a mixture with one free component (this one has "
                    f"{len(free)}; fix the others, e.g. a spike as in dropout)", passes[0])

    # ---- generic component k
    gen = {}
    gparams = {}
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
    eta_k = [base.simp(e.xreplace(gen)) for e in base.eta]
    mu_ord_k = [base.simp(e.xreplace(gen)) for e in base.mu_ord]
    lam_k = [like_symbol(f"{l.name}_k", l) for l in base.lam]
    mu_k = [like_symbol(f"{u.name}_k", u) for u in base.mu]
    for i, (l, u) in enumerate(zip(lam_k, mu_k)):
        D.symbol_names[l] = r"\lambda^{(%d)}_k" % (i + 1)
        D.symbol_names[u] = r"\mu^{(%d)}_k" % (i + 1)
        if base.lam[i] in base.symmetric:
            sym.add(l)
        if base.mu[i] in base.symmetric:
            sym.add(u)
    mean_b, cov_b = base.gaussian_mean, base.gaussian_cov
    mean_k = mean_b.xreplace(gen)
    cov_k = base.simp(cov_b.xreplace(gen))

    # ---- Step: the family
    weights_tex = ", ".join(f"\\pi_{{{c.index}}} = {sp.latex(c.weight)}" for c in fam.components)
    fixed_txt = ""
    for c in fam.components:
        if c.fixed:
            fixed_txt += (f" Component {c.index} is fixed: "
                          + ", ".join(f"{p.name} = {sp.sstr(c.subs[p.symbol])}" for p in base.params.values()
                                      if p.symbol in c.subs) + ".")
    D.add("family", "Sec. 3.2; Eq. 41" if any(c.fixed for c in fam.components) else "Sec. 3.2",
          f"Candidate: a mixture of {K} `{base.name}` components",
          f"q(θ) = Σ_k π_k q_k(θ) with fixed weights; each free component has its own parameters.{fixed_txt}",
          [r"q(\theta) = \sum_{k=1}^{%d} \pi_k\, q_k(\theta)" % K, weights_tex])

    # ---- Step: joint parameters (Eq. 27)
    D.add("mixture_parameters", RULES["mixture_parameters"].equation,
          "Natural and expectation parameters of the joint q(θ, z = k)",
          "The joint is a minimal conditional exponential family: λ_k are the natural parameters of component k "
          "and μ_k = E_q[1[z=k] T(θ)] = π_k E_{q_k}[T(θ)].",
          [(l, e) for l, e in zip(lam_k, eta_k)] + [(u, pi_k * e) for u, e in zip(mu_k, mu_ord_k)])

    # ---- Step: mixture BLR (Eq. 28)
    gblock = [like_symbol(f"grad_mu{i + 1}_k", u) for i, u in enumerate(mu_k)]
    for i, g in enumerate(gblock):
        D.symbol_names[g] = r"\nabla_{\mu^{(%d)}_k} \mathbb{E}_q[\bar\ell + \log q]" % (i + 1)
    lam_next = [like_symbol(f"{l.name}_next", l) for l in lam_k]
    for i, l in enumerate(lam_next):
        D.symbol_names[l] = r"\lambda^{(%d)}_{k,t+1}" % (i + 1)
    D.add("mixture_blr", RULES["mixture_blr"].equation, "The BLR for mixtures",
          "Natural-gradient descent on E_q[ℓ̄] − H(q) for each component's λ_k, with H the entropy of the mixture "
          "q(θ) (not of the joint). ∇_{μ_k}(−H) = ∇_{μ_k} E_q[log q] with log q held fixed, since E_q[∇ log q] = 0.",
          [(ln, l - rho * g) for ln, l, g in zip(lam_next, lam_k, gblock)])

    # ---- Step: chain rule through m_k(μ_k), C_k(μ_k) (Eqs. 27, 67-68)
    to_comp = {u: u_k / pi_k for u, u_k in zip(base.mu, mu_k)}
    mean_mu = base.simp(base.mean_of_mu().xreplace(to_comp))
    cov_mu = base.simp(base.cov_of_mu().xreplace(to_comp))
    Gm_l, GC_l = like_symbol("gradm_loss_k", mean_b), like_symbol("gradC_loss_k", cov_b)
    Gm_q, GC_q = like_symbol("gradm_logq_k", mean_b), like_symbol("gradC_logq_k", cov_b)
    D.symbol_names.update({Gm_l: r"\nabla_{m_k}\mathbb{E}_q[\bar\ell]", GC_l: r"\nabla_{C_k}\mathbb{E}_q[\bar\ell]",
                           Gm_q: r"\nabla_{m_k}\mathbb{E}_q[\log q]", GC_q: r"\nabla_{C_k}\mathbb{E}_q[\log q]"})
    csym = set(sym) | ({GC_l, GC_q} if is_mat(GC_l) else set())
    phi = _inner(Gm_l, mean_mu) + _inner(Gm_q, mean_mu) + _inner(GC_l, cov_mu) + _inner(GC_q, cov_mu)
    grads = matcalc.gradient(phi, mu_k, csym)
    D.add("mixture_chain_rule", RULES["mixture_chain_rule"].equation,
          "Natural gradients through the component's mean and covariance",
          "Write m_k and C_k as functions of μ_k (Eq. 27) and apply the chain rule; the 1/π_k of Eqs. 67-68 "
          "appears here.",
          [(sp.Symbol("m_k"), mean_mu), (sp.Symbol("C_k"), cov_mu)]
          + [(g, e) for g, e in zip(gblock, grads)])

    # ---- Step: Bonnet and Price for mixtures (App. E)
    Eg_l, EH_l = like_symbol("E_grad_loss_k", mean_b), like_symbol("E_hess_loss_k", cov_b)
    Eg_q, EH_q = like_symbol("E_grad_logq_k", mean_b), like_symbol("E_hess_logq_k", cov_b)
    D.symbol_names.update({Eg_l: r"\mathbb{E}_{q_k}[\nabla_\theta\bar\ell]", EH_l: r"\mathbb{E}_{q_k}[\nabla^2_\theta\bar\ell]",
                           Eg_q: r"\mathbb{E}_{q_k}[\nabla_\theta\log q]", EH_q: r"\mathbb{E}_{q_k}[\nabla^2_\theta\log q]"})
    hsym = csym | ({EH_l, EH_q} if is_mat(EH_l) else set())
    bp = {Gm_q: pi_k * Eg_q, GC_q: pi_k * EH_q / 2}
    bp_loss = {Gm_l: pi_k * Eg_l, GC_l: pi_k * EH_l / 2}
    exact_grads = [simplify_mat(_doit(g.xreplace({**bp, **bp_loss})), hsym) for g in grads]
    D.placeholders["mixture_natural_gradient"] = {
        "grads": exact_grads, "mu": mu_k, "pi": pi_k, "E_grad": (Eg_l, Eg_q), "E_hess": (EH_l, EH_q)}
    if loss_rule != "delta":
        subs_bp, shown = bp, [(Gm_q, bp[Gm_q]), (GC_q, bp[GC_q])]
    else:
        subs_bp, shown = {**bp, **bp_loss}, [(Gm_l, bp_loss[Gm_l]), (GC_l, bp_loss[GC_l]),
                                             (Gm_q, bp[Gm_q]), (GC_q, bp[GC_q])]
    grads = [simplify_mat(_doit(g.xreplace(subs_bp)), hsym) for g in grads]
    D.add("mixture_bonnet_price", RULES["mixture_bonnet_price"].equation,
          "Bonnet's and Price's theorems for a mixture component",
          "E_q[f] = Σ_j π_j E_{q_j}[f], so only the k-th term depends on (m_k, C_k) (Lin et al. 2019a, Thms 6-7)"
          + ({"dropout_masks": " — applied to the entropy term; the loss term follows the dropout masks below.",
              "exact": " — applied to the entropy term; the loss term is differentiated in closed form below."}
             .get(loss_rule, ".")),
          shown + [(g, e) for g, e in zip(gblock, grads)])

    # ---- loss term
    g_k = H_k = ghat_k = hhat_k = None
    taken = {str(s) for s in fam.params} | {h.name for h in recipe.hyper} | {str(fam.theta)}
    uses_hess = any(g.has(EH_l) for g in exact_grads)
    if loss_rule == "delta":
        g_k, H_k = like_symbol("g_k", mean_b), like_symbol("H_k", cov_b)
        D.symbol_names.update({g_k: r"\hat{g}_k", H_k: r"\hat{H}_k"})
        reps = {Eg_l: g_k, EH_l: H_k}
        if is_mat(H_k):
            hsym.add(H_k)
        grads = [simplify_mat(g.xreplace(reps), hsym) for g in grads]
        D.add("delta", RULES["delta"].equation, "Delta method for the loss",
              "The expectations under component k are replaced by the values at its mean (Eq. 13).",
              [(Eg_l, r"\nabla_\theta\bar\ell(%s)" % sp.latex(mean_k, mat_symbol_style="bold"), r"\approx"),
               (g_k, r"\nabla_\theta\bar\ell(%s)" % sp.latex(mean_k, mat_symbol_style="bold"))]
              + ([(EH_l, r"\nabla^2_\theta\bar\ell(%s)" % sp.latex(mean_k, mat_symbol_style="bold"), r"\approx"),
                  (H_k, r"\nabla^2_\theta\bar\ell(%s)" % sp.latex(mean_k, mat_symbol_style="bold"))] if uses_hess else []))
    elif loss_rule == "exact":
        if is_mat(mean_b):            # Φ(M, C) = E_{N(M, C)}[ℓ̄] by matrix calculus (C symmetric)
            M, C = sp.MatrixSymbol("M", *mean_b.shape), sp.MatrixSymbol("C", *cov_b.shape)
            msym = set(hsym) | {C}
            try:
                e_loss = simplify_mat(gaussian_expectation(recipe.loss, base.theta, M, C + M * M.T, msym), msym)
                dM, dC = matcalc.gradient(e_loss, [M, C], msym)
            except DerivationError as exc:
                raise _fail(recipe, f"approximation 'exact': {exc}", by_name["exact"]) from None
        else:
            M, C = sp.Symbol("M", real=True), sp.Symbol("C", positive=True)
            e_loss = base.expect_gaussian(recipe.loss, mean=M, cov=C)
            dM, dC = sp.diff(e_loss, M), sp.diff(e_loss, C)
        at = {M: mean_k, C: cov_k}
        reps = {Gm_l: simplify_mat(_doit((pi_k * dM).xreplace(at)), hsym),
                GC_l: simplify_mat(_doit((pi_k * dC).xreplace(at)), hsym)}
        grads = [simplify_mat(_doit(g.xreplace(reps)), hsym) if is_mat(g) else sp.expand(_doit(g.xreplace(reps)))
                 for g in grads]
        D.add("exact", RULES["exact"].equation, "Exact expected loss under a component",
              "The loss is a polynomial in θ: E_{q_k}[ℓ̄] = Φ(m_k, C_k) from the Gaussian moments, and "
              "∇_{m_k} E_q[ℓ̄] = π_k ∂Φ/∂m_k, ∇_{C_k} E_q[ℓ̄] = π_k ∂Φ/∂C_k.",
              [(r"\mathbb{E}_{q_k}[\bar\ell]", e_loss.xreplace(at)), (Gm_l, reps[Gm_l]), (GC_l, reps[GC_l])]
              + [(g, e) for g, e in zip(gblock, grads)])
    else:
        ghat_k, hhat_k = sp.Symbol("ghat_k", real=True), sp.Symbol("hhat_k", real=True)
        D.symbol_names.update({ghat_k: r"\hat{g}_k", hhat_k: r"\hat{h}_k"})
        reps = {Gm_l: ghat_k, GC_l: hhat_k / 2}
        grads = [sp.expand(_doit(g.xreplace(reps))) for g in grads]
        # the masks' sampler is built below, once the components are known; shown generically here
        D.add("dropout_masks", RULES["dropout_masks"].equation, "Dropout masks: reparameterization by the indicator",
              "θ = Σ_j 1[z=j](m_j + σ_j ε_j) with z ~ π drawn as masks; the noise ε is dropped, so ∇ℓ̄ and ∇²ℓ̄ are "
              "taken at the dropout mean θ̃ = Σ_j 1[z=j] m_j (the delta method, Eq. 84), and "
              "∇_{m_k} E_q[ℓ̄] ≈ (∂θ̃/∂m_k) ∇ℓ̄(θ̃), 2∇_{C_k} E_q[ℓ̄] = ∇²_{m_k} E_q[ℓ̄] ≈ (∂θ̃/∂m_k)² ∇²ℓ̄(θ̃), "
              "averaged over the mask draws.",
              [(Gm_l, ghat_k, r"\approx"), (GC_l, hhat_k / 2, r"\approx")]
              + [(g, e) for g, e in zip(gblock, grads)])

    # ---- entropy term: delta at the component mean, then Eqs. 69-71 or the separated-components rule
    gq_k, Hq_k = like_symbol("gq_k", mean_b), like_symbol("Hq_k", cov_b)
    D.symbol_names.update({gq_k: r"\nabla_\theta\log q(%s)" % sp.latex(mean_k, mat_symbol_style="bold"),
                           Hq_k: r"\nabla^2_\theta\log q(%s)" % sp.latex(mean_k, mat_symbol_style="bold")})
    if is_mat(Hq_k):
        hsym.add(Hq_k)
    grads = [simplify_mat(g.xreplace({Eg_q: gq_k, EH_q: Hq_k}), hsym) for g in grads]
    D.add("delta", RULES["delta"].equation, "Delta method for the entropy term",
          "E_{q_k}[∇ log q] ≈ ∇ log q(m_k) and E_{q_k}[∇² log q] ≈ ∇² log q(m_k) (Eqs. 33, 85-86).",
          [(Eg_q, gq_k, r"\approx"), (EH_q, Hq_k, r"\approx")])

    theta = base.theta
    tsym = set(base.symmetric)
    logq_b = base.simp(base.log_density())
    score_b = matcalc.gradient(logq_b, [theta], tsym)[0] if is_mat(theta) else sp.diff(logq_b, theta)
    score_b = base.simp(score_b)
    shess_b = matcalc.hessian_from_gradient(score_b, theta, tsym) if is_mat(theta) else sp.diff(score_b, theta)
    if separated:
        own_g = base.simp(score_b.xreplace(gen).xreplace({theta: mean_k}))
        own_H = base.simp(shess_b.xreplace(gen).xreplace({theta: mean_k}))
        grads = [simplify_mat(_doit(g.xreplace({gq_k: own_g, Hq_k: own_H})), hsym) for g in grads]
        D.add("separated_components", RULES["separated_components"].equation, "Separated components",
              "The components are far apart, so r_k(m_k) ≈ 1 and r_j(m_k) ≈ 0 for j ≠ k (Eq. 74; for the "
              "spike-and-slab of dropout, Eqs. 85-86): ∇ log q(m_k) ≈ ∇ log q_k(m_k), ∇² log q(m_k) ≈ ∇² log q_k(m_k), "
              "with the component's score derived from its family.",
              [(r"\nabla_\theta \log q_k(\theta)", score_b.xreplace(gen)), (gq_k, own_g, r"\approx"),
               (Hq_k, own_H, r"\approx")])

    # ---- natural-parameter update at the current state
    at_state = {u: pi_k * e for u, e in zip(mu_k, mu_ord_k)}
    lam_new = []
    for i in range(len(lam_k)):
        g = simplify_mat(_doit(grads[i]).xreplace(at_state), hsym)
        lam_new.append(simplify_mat(_expand(eta_k[i] - rho * g), hsym))
    D.add("mixture_blr", RULES["mixture_blr"].equation, "Natural-parameter update of component k",
          "Substituting the natural gradients, evaluated at μ_k = π_k μ(m_k, S_k), into Eq. 28.",
          [(ln, e, r"\leftarrow") for ln, e in zip(lam_next, lam_new)])
    shim = SimpleNamespace(family=SimpleNamespace(params=gparams, eta=eta_k))
    n_before = len(D.updates)
    # the generic oracle values are listed while solving so that _solve_ordinary collects terms by them; the
    # real oracle calls, one per free component, are added when the update is instantiated below
    D.oracle_calls.extend([(g_k, "grad", mean_k, ""), (H_k, "hess", mean_k, "")] if g_k is not None else [])
    _solve_ordinary(shim, D, lam_new, hsym)
    generic_updates = D.updates[n_before:]
    del D.updates[n_before:]
    for name_k, new_k, _ in generic_updates:
        D.symbol_names[new_k] = (r"\mathbf{%s}_{k,t+1}" if is_mat(new_k) else "%s_{k,t+1}") % name_k[:-2]
    D.oracle_calls = []

    # ---- instantiate for each free component
    steps, csyms, qsyms = [], {}, {}
    for c in free:
        j = c.index
        one = len(free) == 1
        suffix = "" if one else str(j)
        reps = {gen[p.symbol]: c.subs[p.symbol] for p in base.free_params}
        reps[pi_k] = c.weight
        mean_j = mean_b.xreplace(c.subs)
        if g_k is not None:
            gj = like_symbol(_free_name("g" + suffix, taken), mean_b)
            reps[g_k] = gj
            D.symbol_names[gj] = r"\hat{g}_{%s}" % j if not one else r"\hat{g}"
            D.oracle_calls.append((gj, "grad", mean_j, "∇_θ ℓ̄(θ) at the mean of each free component (delta method)"))
            if uses_hess:
                Hj = like_symbol(_free_name("H" + suffix, taken), cov_b)
                reps[H_k] = Hj
                if is_mat(Hj):
                    sym.add(Hj)
                D.symbol_names[Hj] = r"\hat{H}_{%s}" % j if not one else r"\hat{H}"
                D.oracle_calls.append((Hj, "hess", mean_j, "∇²_θ ℓ̄(θ) at the mean of each free component (delta method)"))
        if ghat_k is not None:
            reps[ghat_k] = sp.Symbol(_free_name("g" + suffix, taken), real=True)
            reps[hhat_k] = sp.Symbol(_free_name("h" + suffix, taken), real=True)
            csyms[j] = (reps[ghat_k], reps[hhat_k])
        if not separated:
            gq = like_symbol(_free_name("gq" + suffix, taken), mean_b)
            Hq = like_symbol(_free_name("Hq" + suffix, taken), cov_b)
            if is_mat(Hq):
                sym.add(Hq)
            reps[gq_k], reps[Hq_k] = gq, Hq
            qsyms[j] = (gq, Hq)
            at = sp.latex(mean_j, mat_symbol_style="bold")
            D.symbol_names[gq] = r"\nabla_\theta\log q(%s)" % at
            D.symbol_names[Hq] = r"\nabla^2_\theta\log q(%s)" % at
        for name_k, new_k, expr in generic_updates:
            p_b = next(p for p in base.free_params if gen[p.symbol] == gparams[name_k].symbol)
            s = c.subs[p_b.symbol]
            new = like_symbol(f"{s.name}_new", s)
            if s in sym:
                sym.add(new)
            sub = "t+1" if one else f"{j},t+1"
            D.symbol_names[new] = (r"\mathbf{%s}_{%s}" if is_mat(s) else "%s_{%s}") % (p_b.name, sub)
            reps[new_k] = new
        for name_k, new_k, expr in generic_updates:
            p_b = next(p for p in base.free_params if gen[p.symbol] == gparams[name_k].symbol)
            s = c.subs[p_b.symbol]
            e = expr.xreplace(reps)
            e = simplify_mat(e, sym) if is_mat(e) else e
            D.updates.append((s.name, reps[new_k], e))
            steps.append((reps[new_k], e, r"\leftarrow"))
    if not separated:
        _mixture_score(recipe, D, fam, score_b, shess_b, free, qsyms)
    if loss_rule == "dropout_masks":
        _dropout_masks(recipe, D, fam, by_name["dropout_masks"], free, csyms)
    # with masks: Newton with dropout (Eqs. 42-43), or SGD with dropout (Eq. 40) when the covariance is fixed
    D.add("instantiate", "Eqs. 29-30" if loss_rule != "dropout_masks" else ("Eqs. 42-43" if uses_hess else "Eq. 40"),
          "Update of every free component",
          "The generic update of component k, written for each free component.", steps)
    _apply_passes(recipe, D)
    return D


def _free_name(name, taken):
    base, i = name, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def _mixture_score(recipe, D, fam, score_b, shess_b, free, qsyms):
    """Eqs. 69-71 at θ = m_k: responsibilities r_j(m_k) (a softmax of log π_j + log q_j(m_k)), and
    ∇ log q = Σ_j r_j ∇ log q_j, ∇² log q = Σ_j r_j (∇² log q_j + ∇ log q_j ∇ log q_jᵀ) − ∇ log q ∇ log qᵀ."""
    from blr_derive.core.specialfns import logsumexp
    base = fam.base
    theta = base.theta
    logq_b = base.simp(base.log_density())
    eqs = [r"r_j(\theta) = \frac{\pi_j q_j(\theta)}{\sum_i \pi_i q_i(\theta)}",
           r"\nabla_\theta \log q(\theta) = \sum_j r_j(\theta) \nabla_\theta \log q_j(\theta)",
           r"\nabla^2_\theta \log q(\theta) = \sum_j r_j(\theta)\left[\nabla^2_\theta \log q_j(\theta) + "
           r"\nabla_\theta \log q_j(\theta)\nabla_\theta \log q_j(\theta)^\top\right] - "
           r"\nabla_\theta \log q(\theta)\nabla_\theta \log q(\theta)^\top",
           (r"\nabla_\theta \log q_j(\theta)", score_b), (r"\nabla^2_\theta \log q_j(\theta)", shess_b)]
    for c in free:
        k = c.index
        mean_k = base.gaussian_mean.xreplace(c.subs)
        gq, Hq = qsyms[k]
        a_syms = []
        for j in fam.components:
            a = sp.Symbol(f"a_{j.index}_{k}", real=True)
            D.symbol_names[a] = r"a_{%d%d}" % (j.index, k)
            e = sp.log(j.weight) + logq_b.xreplace(j.subs).xreplace({theta: mean_k})
            D.defs.append((a, base.simp(e) if not is_mat(e) else e))
            a_syms.append(a)
        lse = logsumexp(*a_syms)
        g_terms, H_terms = [], []
        for j, a in zip(fam.components, a_syms):
            r = sp.Symbol(f"r_{j.index}_{k}", real=True)
            D.symbol_names[r] = r"r_{%d}(%s)" % (j.index, sp.latex(mean_k, mat_symbol_style="bold"))
            D.defs.append((r, sp.exp(a - lse)))
            s = base.simp(score_b.xreplace(j.subs).xreplace({theta: mean_k}))
            h = base.simp(shess_b.xreplace(j.subs).xreplace({theta: mean_k}))
            zero = isinstance(s, sp.ZeroMatrix) or s == 0
            if not zero:
                g_terms.append(r * s)
            H_terms.append(r * (h + _outer(s, s)) if not zero else r * h)
        gexpr = (sp.MatAdd(*g_terms) if is_mat(gq) else sp.Add(*g_terms)) if g_terms else (
            sp.ZeroMatrix(*gq.shape) if is_mat(gq) else sp.Integer(0))
        D.defs.append((gq, gexpr))
        Hexpr = (sp.MatAdd(*H_terms, -gq * gq.T) if is_mat(Hq) else sp.Add(*H_terms) - gq**2)
        D.defs.append((Hq, Hexpr))
        eqs += [(gq, gexpr), (Hq, Hexpr)]
    D.add("mixture_score", RULES["mixture_score"].equation, "Gradient and Hessian of log q through the responsibilities",
          "The responsibilities (Eq. 71) weight the component scores, derived from the component family "
          "(∇_θ log q_j = ∇_θ [log h + ⟨λ_j, T(θ)⟩]); at θ = m_k the own term of the gradient vanishes (Eq. 72).", eqs)


def _dropout_masks(recipe, D, fam, approx, free, csyms):
    """Eq. 84: masks z ~ π from uniform draws u, θ̃ = Σ_j 1[z=j] m_j, per-sample (∂θ̃/∂m_k)∇ℓ̄(θ̃) and
    (∂θ̃/∂m_k)²∇²ℓ̄(θ̃), averaged over the draws."""
    from blr_derive.rules.passes import Ctx
    base = fam.base
    ctx = Ctx(D, approx)
    samples = ctx.count("samples")
    ctx.done()
    u = sp.Symbol("u_mask", positive=True)
    theta = sp.Symbol("theta_tilde", real=True)
    D.symbol_names.update({u: "u", theta: r"\tilde\theta"})
    # indicators from the cumulative weights: 1[z=j] = H(c_j − u) − H(c_{j−1} − u)
    ind, cum = [], sp.Integer(0)
    for j, c in enumerate(fam.components):
        lo = cum
        cum = cum + c.weight
        up = sp.Integer(1) if j == fam.K - 1 else sp.Heaviside(cum - u, 0)
        ind.append(up - (sp.Heaviside(lo - u, 0) if j > 0 else 0))
    mean_b = base.gaussian_mean
    theta_expr = sp.Add(*[z * mean_b.xreplace(c.subs) for z, c in zip(ind, fam.components)])
    g_s, h_s = sp.Symbol("g_s", real=True), sp.Symbol("h_s", real=True)
    D.symbol_names.update({g_s: r"\nabla\bar\ell(\tilde\theta)", h_s: r"\nabla^2\bar\ell(\tilde\theta)"})
    stats, views = [], {}

    def show(e):            # H(c − u) is the event u < c
        out = e
        for hv in e.atoms(sp.Heaviside):
            t = sp.Symbol(f"ind_{sp.srepr(hv.args[0])}")
            D.symbol_names[t] = r"1[u < %s]" % D.latex(hv.args[0] + u)
            out = out.xreplace({hv: t})
        return D.latex(out)
    eqs = [("1[z = %d]" % c.index, show(z)) for z, c in zip(ind, fam.components)]
    eqs.append((theta, show(theta_expr)))
    # only the statistics the update uses are drawn: with a fixed covariance (SGD with dropout, Eq. 40)
    # no Hessian enters the update, so no Hessian is evaluated at the masked means
    used = set().union(*(e.free_symbols for _, _, e in D.updates))
    for c in free:
        m_c = mean_b.xreplace(c.subs)
        dth = sp.diff(theta_expr, m_c)
        gbar, hbar = csyms[c.index]
        for avg, per, oracle in [(gbar, dth * g_s, "grad"), (hbar, _indicator_idempotent(sp.expand(dth**2)) * h_s, "hess")]:
            if avg not in used:
                continue
            stats.append((avg, per))
            eqs.append((avg, r"\frac{1}{S}\sum_s %s" % show(per), r"\approx"))
            if len(free) == 1:
                views[oracle] = avg
    calls = [(k, o) for k, o in [(g_s, "grad"), (h_s, "hess")] if any(e.has(k) for _, e in stats)]
    D.sampling = Sampling(samples, u, theta, theta_expr, calls, stats, draw="uniform", views=views)
    D.add("dropout_masks", RULES["dropout_masks"].equation, "Mask draws",
          f"u ~ U(0, 1) per coordinate gives the indicator z (keep with probability π_1); S = {samples} draw(s). "
          "To drop whole units, let the draws u agree across a unit's weights.", eqs)
