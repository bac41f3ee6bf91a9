"""``delta`` — the delta method (App. C, Eqs. 13, 65-66): E_q[∇ℓ(θ)] ≈ ∇ℓ(m), E_q[∇²ℓ(θ)] ≈ ∇²ℓ(m).

For an abstract loss the generated step calls the oracles at the mean; for an explicit loss the derivatives
are derived (``blr_derive/rules/datasum.py``: polynomials of degree ≤ 2 and sums over data of f(Aθ + b)).
Mixture candidates take it at the component means (``mixture_loss_gradient``), and product candidates for their
parameter blocks (``product_block``: the stationary point of the block's expected loss, Sec. 5.2)."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.budget import StepTimeout, step_limit
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.matexpr import is_mat, like_symbol, simplify_mat
from blr_derive.families.solve import isolate_block
from blr_derive.rules.base import RULES, NaturalGradient, OracleCall, Rule, register
from blr_derive.rules.datasum import explicit_expectations
from blr_derive.rules.gaussian import gaussian_natural_gradient
from blr_derive.rules.mixture import ComponentSymbol
from blr_derive.rules.components import simplex_block
from blr_derive.rules.product import expected_gradients, positive_inverses


#: wall-clock limit (seconds) of sympy's solve for a scalar block's stationary point (a transcendental condition such
#: as log(s2)/s2 + a/s2² = 0 ran to the derivation's whole budget)
STATIONARY_SECONDS = 20


def scalar_elementwise(ctx) -> bool:
    """An explicit loss of one coordinate θ over an elementwise (mean-field) Gaussian family, with no data sum: its
    derivatives ℓ'(m), ℓ''(m) are derived by sympy, coordinate by coordinate (``scalar_delta``)."""
    fam, loss = ctx.family, ctx.recipe.loss
    return (fam.is_gaussian and fam.elementwise and fam.theta is not None and not is_mat(fam.theta)
            and isinstance(loss, sp.Expr) and not loss.has(sp.MatrixSymbol) and not ctx.recipe.data
            and fam.depends_on_variable(loss))


def needs_gaussian_vector(ctx, approx):
    """Explicit losses: the derivatives are derived for Gaussian families over a vector, or for one coordinate of
    an elementwise one (``scalar_elementwise``)."""
    fam = ctx.family
    if approx.name in ("delta", "gauss_hermite") and scalar_elementwise(ctx):
        return
    if not (fam.is_gaussian and not fam.elementwise and is_mat(fam.theta)):
        raise ctx.fail(f"approximation '{approx.name}' does not apply to an explicit loss over family "
                       f"'{fam.name}': it needs a Gaussian family over a vector (e.g. gaussian_full), or an "
                       "elementwise one (gaussian_diag) with a loss of one coordinate theta and no data", approx)


def needs_gaussian_moments(ctx, approx):
    """Abstract losses: Bonnet's and Price's theorems need the family's Gaussian moments."""
    fam = ctx.family
    if not fam.is_gaussian:
        raise ctx.fail(f"approximation '{approx.name if approx else 'delta'}' does not apply to family "
                       f"'{fam.name}': Bonnet/Price gradients need a family with Gaussian moments (a 'gaussian' "
                       "section)", approx)


class Delta(Rule):
    name = "delta"
    takes_arguments = False
    kind = "expectation"
    equation = "App. C, Eqs. 13, 65-66"
    structures = ("single", "mixture")
    summary = ("first/second-order delta method: E_q[∇ℓ(θ)] ≈ ∇ℓ(m), E_q[∇²ℓ(θ)] ≈ ∇²ℓ(m) (oracles at the mean, "
               "or the derived derivatives of an explicit loss)")
    losses = ("abstract", "explicit")

    def check(self, ctx):
        if ctx.candidate != "single":
            return
        approx = ctx.approx(self.name)
        if ctx.recipe.loss_kind == "explicit":
            needs_gaussian_vector(ctx, approx)
        else:
            needs_gaussian_moments(ctx, approx)

    #: mixtures: the delta method also gives the loss term its Bonnet/Price form under component k
    mixture_note = "."
    mixture_bonnet_price = True

    def mixture_loss_gradient(self, ctx, M, grads):
        """Mixture candidates: E_{q_k}[∇ℓ̄] ≈ ∇ℓ̄(m_k), E_{q_k}[∇²ℓ̄] ≈ ∇²ℓ̄(m_k), one oracle call per free
        component (Eqs. 13, 85-86)."""
        D = ctx.D
        mean_b, cov_b = M.base.gaussian_mean, M.base.gaussian_cov
        g_k, H_k = like_symbol("g_k", mean_b), like_symbol("H_k", cov_b)
        D.symbol_names.update({g_k: r"\hat{g}_k", H_k: r"\hat{H}_k"})
        if is_mat(H_k):
            M.hsym.add(H_k)
        grads = [simplify_mat(g.xreplace({M.Eg_l: g_k, M.EH_l: H_k}), M.hsym) for g in grads]
        at = sp.latex(M.mean_k, mat_symbol_style="bold")
        D.add("delta", RULES["delta"].equation, "Delta method for the loss",
              "The expectations under component k are replaced by the values at its mean (Eq. 13).",
              [(M.Eg_l, r"\nabla_\theta\bar\ell(%s)" % at, r"\approx"), (g_k, r"\nabla_\theta\bar\ell(%s)" % at)]
              + ([(M.EH_l, r"\nabla^2_\theta\bar\ell(%s)" % at, r"\approx"),
                  (H_k, r"\nabla^2_\theta\bar\ell(%s)" % at)] if M.uses_hess else []))
        desc = "at the mean of each free component (delta method)"
        M.symbols += [
            ComponentSymbol(g_k, "g", mean_b, "grad", f"∇_θ ℓ̄(θ) {desc}",
                            lambda j, mean, one: r"\hat{g}" if one else r"\hat{g}_{%s}" % j),
            ComponentSymbol(H_k, "H", cov_b, "hess", f"∇²_θ ℓ̄(θ) {desc}",
                            lambda j, mean, one: r"\hat{H}" if one else r"\hat{H}_{%s}" % j,
                            symmetric=is_mat(H_k), copy=M.uses_hess)]
        return grads

    def product_block(self, R, D, sums, b, current):
        """Product candidates: a parameter block jumps to its stationary point (Sec. 5.2)."""
        product_block(R, D, sums, b, current)

    def natural_gradient(self, ctx):
        ng, uses_cov, csym = gaussian_natural_gradient(ctx)
        if ctx.recipe.loss_kind == "explicit" and scalar_elementwise(ctx):
            return scalar_delta(ctx, ng.grads, ng.Eg, ng.EH)
        if ctx.recipe.loss_kind == "explicit":
            return explicit_expectations(ctx.recipe, ctx.D, ng.grads, ng.Eg, ng.EH, ctx.mean_mu, ctx.cov_mu, ctx.sym)
        return oracles_at_the_mean(ctx, ng.grads, ng.Eg, ng.EH, uses_cov, csym)


def scalar_delta(ctx, grads, Eg, EH):
    """E_q[ℓ'(θ)] ≈ ℓ'(m), E_q[ℓ''(θ)] ≈ ℓ''(m) (Eq. 13) for an explicit loss of one coordinate of an elementwise
    Gaussian: the derivatives by sympy (almost everywhere, as autograd's: a kink's δ is dropped), named ``g`` and
    ``H`` in the update and evaluated at the mean; the natural gradient in μ keeps them as functions of μ (what
    ``check`` differentiates against)."""
    recipe, D, fam = ctx.recipe, ctx.D, ctx.family
    theta, loss = fam.theta, recipe.loss
    taken = {str(x) for x in fam.params} | {h.name for h in recipe.hyper}
    g = sp.Symbol("g" if "g" not in taken else "g_", real=True)
    H = sp.Symbol("H" if "H" not in taken else "H_", real=True)
    # the derivatives almost everywhere, as autograd takes them: |θ|'' = 2δ(θ) is 0 away from the kink (a point
    # mass has no value at a mean m ≠ 0, and the printers have no δ)
    d1, d2 = (sp.diff(loss, theta, k).replace(sp.DiracDelta, lambda *a: sp.S.Zero) for k in (1, 2))
    at_m = {theta: fam.gaussian_mean}
    D.defs += [(g, d1.xreplace(at_m)), (H, d2.xreplace(at_m))]
    D.symbol_names.update({g: r"\hat{g}", H: r"\hat{H}"})
    at_mu = {Eg: d1.xreplace({theta: ctx.mean_mu}), EH: d2.xreplace({theta: ctx.mean_mu})}
    D.natural_gradient = NaturalGradient([x.xreplace(at_mu) for x in grads], Eg, EH)
    D.add("delta", RULES["delta"].equation, "Delta method for an explicit loss",
          "The expectations of the loss's first and second derivatives under q are replaced by their values at the "
          "mean, coordinate by coordinate (Eq. 13); the derivatives are derived from the loss.",
          [(Eg, g, r"\approx"), (EH, H, r"\approx")] + D.defs[-2:])
    return [x.xreplace({Eg: g, EH: H}) for x in grads]


def oracles_at_the_mean(ctx, grads, Eg, EH, uses_cov, csym):
    """E_q[∇ℓ] ≈ grad(m), E_q[∇²ℓ] ≈ hess(m): oracle calls of the generated step."""
    recipe, D, fam, sym = ctx.recipe, ctx.D, ctx.family, ctx.sym
    mean_mu, cov_mu = ctx.mean_mu, ctx.cov_mu
    taken = {str(s) for s in fam.params} | {h.name for h in recipe.hyper}
    gname = "g" if "g" not in taken else "g_"
    hname = "H" if "H" not in taken else "H_"
    g = like_symbol(gname, mean_mu)
    H = like_symbol(hname, cov_mu)
    m_state = fam.gaussian_mean
    D.symbol_names[g] = r"\hat{g}"
    D.symbol_names[H] = r"\hat{H}"
    desc = "elementwise second derivative" if not is_mat(H) else "Hessian"
    D.oracle_calls.append(OracleCall(g, "grad", m_state, "∇_θ ℓ(θ) at the mean (delta method)"))
    reps = {Eg: g}
    eqs = [(Eg, (r"\nabla_\theta\bar\ell(%s)" % sp.latex(m_state, mat_symbol_style="bold")), r"\approx"),
           (g, (r"\nabla_\theta\bar\ell(%s)" % sp.latex(m_state, mat_symbol_style="bold")))]
    if uses_cov:
        D.oracle_calls.append(OracleCall(H, "hess", m_state, f"∇²_θ ℓ(θ) at the mean ({desc}; delta method)"))
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


# ------------------------------------------------------------------------------- product candidates

def product_block(R, D, ctx, b, current):
    """A parameter block q_b = N(θ_b, I) (Eq. 55) with ρ = 1: under the delta method its BLR step jumps to the
    stationary point ∇_θ E_{q_{−θ}}[ℓ](θ) = 0 (the M-step of Sec. 5.2), solved symbolically."""
    if b.simplex:                       # a point on the simplex over the components (blr_derive/rules/components.py)
        return simplex_block(R, D, ctx, b, current)
    grads = expected_gradients(R, D, ctx, b)
    return _stationary_point(R, D, ctx, b, current, grads)


def _stationary_point(R, D, ctx, b, current, grads):
    v0 = b.variables[0]
    try:
        if is_mat(v0):
            sol = [isolate_block(simplify_mat(grads[0], ctx.sym), sp.ZeroMatrix(*v0.shape), v0, ctx.sym)]
        else:
            try:
                with step_limit(STATIONARY_SECONDS):
                    s = sp.solve([sp.together(g) for g in grads], b.variables, dict=True)
            except StepTimeout:
                raise DerivationError(f"no closed form found within {STATIONARY_SECONDS} s") from None
            except NotImplementedError:
                raise DerivationError("sympy has no method for it") from None
            if len(s) != 1:
                raise DerivationError(f"{len(s)} stationary points")
            sol = [sp.factor_terms(s[0][v]) for v in b.variables]
    except DerivationError as exc:
        raise SpecError(f"block '{b.name}': cannot solve the stationarity condition: {exc}", R.file, b.line) from None
    sol = [positive_inverses(e, ctx.sym) for e in sol]
    out = []
    for v, e in zip(b.variables, sol):
        ns = (sp.MatrixSymbol(f"{v.name}_new", *v.shape) if is_mat(v) else sp.Symbol(f"{v.name}_new", real=True))
        D.symbol_names[ns] = (r"\mathbf{%s}'" if is_mat(v) else "%s'") % sp.latex(v)
        out.append((ns, e.xreplace(current)))
        D.outputs.append((str(v), ns))
        current[v] = ns
    D.assignments.extend(out)
    D.add("stationarity", RULES["stationarity"].equation, f"Block `{b.name}`: fixed point with ρ = 1",
          "With ρ = 1 the BLR step under the delta method lands where the expected gradient vanishes (the M-step of "
          "Sec. 5.2); solved for the block, with the blocks updated before it at their new values.",
          [(ns, e, r"\leftarrow") for ns, e in out])


register(Delta())
