"""Blocks over a recipe's component axis (``components: {index: k, size: K}``; Secs. 5.2-5.3): the factors are
written for one generic component k and summed over the components, so everything here is derived once, for
that component, whatever K is; the generated code holds the K copies as arrays with a component axis.

* ``component_softmax`` (identity; Sec. 1.2, Eqs. 56, 58): the categorical over the components, local to the
  plate rows, in its overcomplete form q(z) ∝ exp(Σ_k λ_k z_k) with A(λ) = log Σ_k exp λ_k.  Each factor is linear
  in z_k, so its message is minus its coefficient averaged over the other blocks (Sec. 5.1), and with ρ = 1 the
  step sets λ_k to their sum; the probabilities are ∂A/∂λ_k = exp(λ_k − A(λ)), every class computed from λ
  directly (no class is implied by the others, so none is lost to cancellation).
* ``component_dirichlet`` (identity; Sec. 1.2, Sec. 5.1, Eq. 58): the Dirichlet over the components, a global block
  q(w) ∝ exp(Σ_k λ_k log w_k) with λ_k = a_k − 1 and A(λ) = Σ_k log Γ(λ_k + 1) − log Γ(Σ_k (λ_k + 1)); each factor
  linear in log w_k sends minus its coefficient (Sec. 5.1), λ ← (1 − ρ)λ + ρ Σ_f λ̃_f (Eq. 58), and the other
  blocks average log w_k as ∂A/∂λ_k = ψ(a_k) − ψ(Σ_j a_j).
* ``simplex_stationarity`` (identity; Sec. 5.2): a delta block θ on the probability simplex over the components
  jumps to the stationary point of E[ℓ] + ν(Σ_k θ_k − 1): ∇_{θ_k} E[ℓ] + ν = 0 is solved for θ_k = a_k/ν, and the
  constraint gives ν = Σ_k a_k (the multiplier of the constraint, derived, not assumed).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.nodes import ComponentLogSumExp, ComponentSum
from blr_derive.core.pretty import pretty
from blr_derive.rules.base import RULES, rule
from blr_derive.families.statistics import separate_scalars
from blr_derive.rules.product import expect_over_blocks, expected_gradients, linear_in_log, tex_name

rule('component_softmax', 'identity', 'Sec. 1.2 (overcomplete categorical); Eqs. 56, 58',
     'the categorical over the components: λ_k = −E[coefficient of z_k] (ρ = 1), probabilities exp(λ_k − log Σ_j '
     'exp λ_j)')
rule('component_dirichlet', 'identity', 'Sec. 1.2; Sec. 5.1 (conjugate prior of the weights); Eq. 58',
     'the Dirichlet over the components: λ_k = a_k − 1 from the factors linear in log w_k, E[log w_k] = ψ(a_k) − '
     'ψ(Σ_j a_j)')
rule('simplex_stationarity', 'identity', 'Sec. 5.2 (M-step with the constraint Σ_k θ_k = 1)',
     'a delta block on the simplex over the components: ∇_{θ_k} E[ℓ] + ν = 0 with ν from Σ_k θ_k = 1')


def _messages(R, ctx, b, current, coefficient):
    """(Σ_f λ̃_f, equations) of a block over the components: each factor that uses it sends minus its coefficient
    (``coefficient(f)``: of z_k, of log w_k; None when the factor does not use the block) averaged over the other
    blocks (Sec. 5.1), summed over the plate rows for a global block (Eq. 54)."""
    total, eqs = sp.Integer(0), []
    for f in R.factors:
        coeff = coefficient(f)
        if coeff is None:
            continue
        try:
            m = -expect_over_blocks(R, ctx, coeff, b, current)
            if f.plate and not b.local:
                m = ctx.plate_sum(m)
        except DerivationError as exc:
            raise SpecError(f"factor '{f.name}', block '{b.name}': {exc}", R.file, f.line or b.line) from None
        eqs.append((sp.Symbol(r"\tilde\lambda_{%s \to %s, k}" % (tex_name(f.name), tex_name(b.name))), m))
        total += m
    if not eqs:
        raise SpecError(f"block '{b.name}' appears in no factor", R.file, b.line)
    return total, eqs


def derivative_in(e, z, symmetric):
    """∂e/∂z for a scalar z that may sit inside matrix products ((y − m)ᵀ(zL)(y − m)); where sympy cannot
    differentiate through the matrices (z inside an inverse or a power of a sum), the scalars are taken out of the
    traces first; None when neither gives a closed form."""
    for separate in (False, True):
        try:
            d = sp.diff(separate_scalars(e, symmetric) if separate else e, z)
        except (DerivationError, NotImplementedError, TypeError, ValueError):
            continue
        if not d.has(sp.Derivative, sp.Subs):
            return d
    return None


def one_hot_block(R, D, ctx, b, current):
    """The local BLR step of the categorical over the components (ρ = 1; the E-step of Eq. 56)."""
    z = b.variables[0]
    name, p, _ = b.state[0]

    def coefficient(f):
        if not f.expr.has(z):
            return None
        coeff = derivative_in(f.expr, z, ctx.sym)
        if coeff is None or coeff.has(z):
            raise SpecError(f"factor '{f.name}' is not linear in the one-hot '{z}' of block '{b.name}': the exact "
                            "rule does not apply", R.file, f.line or b.line)
        return coeff
    lam, eqs = _messages(R, ctx, b, current, coefficient)
    lam_s = sp.Symbol(f"{b.name}_lambda", real=True)
    log_z = sp.Symbol(f"{b.name}_log_partition", real=True)
    D.symbol_names.update({lam_s: r"\lambda_{%s,k}" % tex_name(b.name), log_z: r"A_{%s}" % tex_name(b.name),
                           p: r"\mathbb{E}[%s_k]" % tex_name(b.name)})
    D.add("exact", RULES["exact"].equation, f"Block `{b.name}`: natural-gradient messages of the factors",
          "Each factor is linear in the one-hot z_k of the categorical over the components, so its message is minus "
          "its coefficient averaged over the other blocks (Sec. 5.1):", eqs)
    # A(λ) = log Σ_j exp λ_j and its gradient ∂A/∂λ_k (the mean of z_k), derived on the indexed form
    j, k = sp.symbols("j k", integer=True, positive=True)
    lam_i = sp.IndexedBase("lambda")
    A = sp.log(sp.Sum(sp.exp(lam_i[j]), (j, 1, R.components["size"])))
    mean = sp.simplify(sp.diff(A, lam_i[k]).doit())
    if isinstance(mean, sp.Piecewise):          # sympy's case k > K: k is one of the components
        mean = mean.args[0][0]
    steps = [(lam_s, sp.expand(lam), r"\leftarrow"), (log_z, ComponentLogSumExp(lam_s), "="),
             (p, sp.exp(lam_s - log_z), r"\leftarrow")]
    D.add("component_softmax", RULES["component_softmax"].equation, f"Block `{b.name}`: local BLR step",
          f"With ρ = 1, λ_k is the sum of the messages (Eq. 58); the mean of z_k is ∂A/∂λ_k = {pretty(mean)} for "
          "A(λ) = log Σ_j exp λ_j (Sec. 1.2), computed as exp(λ_k − A) with A by log-sum-exp: every component's "
          "probability from λ directly.", steps)
    for s, e, _ in steps:
        D.local_assign.append((s, e))
    D.local_outputs.append((name, p))
    ctx.row |= {lam_s, log_z, p}


def simplex_block(R, D, ctx, b, current):
    """A delta block on the simplex over the components (ρ = 1): the constrained stationary point (Sec. 5.2)."""
    grads = expected_gradients(R, D, ctx, b)
    v = b.variables[0]
    nu = sp.Symbol(f"{b.name}_multiplier", positive=True)
    try:
        sols = sp.solve(sp.together(grads[0] + nu), v, dict=True)
        if len(sols) != 1:
            raise DerivationError(f"{len(sols)} stationary points")
        a = sp.factor_terms(sp.simplify(sols[0][v] * nu))
        if a.has(nu):
            raise DerivationError(f"the stationary point {sols[0][v]} is not of the form a_k/ν")
    except DerivationError as exc:
        raise SpecError(f"block '{b.name}': cannot solve the stationarity condition on the simplex: {exc}",
                        R.file, b.line) from None
    weight = sp.Symbol(f"{b.name}_weight", real=True)
    new = sp.Symbol(f"{v.name}_new", positive=True)
    D.symbol_names.update({weight: "a_{%s,k}" % tex_name(b.name), nu: r"\nu_{%s}" % tex_name(b.name),
                           new: "%s'" % sp.latex(v)})
    steps = [(weight, a.xreplace(current)), (nu, ComponentSum(weight)), (new, weight / nu)]
    D.assignments.extend(steps)
    D.outputs.append((b.name, new))
    current[v] = new
    D.add("simplex_stationarity", RULES["simplex_stationarity"].equation,
          f"Block `{b.name}`: fixed point on the simplex",
          "∇_θ E[ℓ] + ν = 0 (the Lagrangian of the constraint Σ_k θ_k = 1) gives θ_k = a_k/ν; the constraint gives "
          "ν = Σ_k a_k.", [(s, e, r"\leftarrow") for s, e in steps])


def dirichlet_block(R, D, ctx, b, current, rho):
    """The BLR step of the Dirichlet over the components (a global block, learning rate ``rho``; Eq. 58)."""
    w = b.variables[0]
    name, a, _ = b.state[0]

    def coefficient(f):
        if not f.expr.has(w):
            return None
        lin = linear_in_log(f.expr, w)
        if lin is None:
            raise SpecError(f"factor '{f.name}' is not linear in log({w}): the Dirichlet over the components "
                            "does not apply", R.file, f.line or b.line)
        return lin[1]
    msg, eqs = _messages(R, ctx, b, current, coefficient)
    D.add("exact", RULES["exact"].equation, f"Block `{b.name}`: natural-gradient messages of the factors",
          f"Each factor is linear in log {w}_k, the statistic of the Dirichlet over the components, so its message is "
          "minus its coefficient averaged over the other blocks (Sec. 5.1), summed over the plate rows (Eq. 54):",
          eqs)
    lam = sp.Symbol(f"{b.name}_lambda", real=True)
    new = sp.Symbol(f"{name}_new", positive=True)
    upd = sp.expand(msg) if rho == 1 else (1 - rho) * (a - 1) + rho * msg
    # A(λ) = Σ_j log Γ(λ_j + 1) − log Γ(Σ_j (λ_j + 1)) and ∂A/∂λ_k, derived on the indexed form
    j, k = sp.symbols("j k", integer=True, positive=True)
    lam_i = sp.IndexedBase("lambda")
    K = R.components["size"]
    A = sp.Sum(sp.loggamma(lam_i[j] + 1), (j, 1, K)) - sp.loggamma(sp.Sum(lam_i[j] + 1, (j, 1, K)))
    dA = sp.diff(A, lam_i[k]).doit()
    dA = dA.replace(lambda x: isinstance(x, sp.Piecewise), lambda x: x.args[0][0])   # k is one of the components
    D.symbol_names.update({lam: r"\lambda_{%s,k}" % tex_name(b.name), new: "%s'" % sp.latex(a)})
    steps = [(lam, upd), (new, lam + 1)]
    D.assignments.extend(steps)
    D.outputs.append((name, new))
    current[a] = new
    D.add("component_dirichlet", RULES["component_dirichlet"].equation, f"Block `{b.name}`: BLR step",
          f"λ_k = a_k − 1 ← (1 − ρ)λ_k + ρ Σ_f λ̃_f (Eq. 58); the other blocks average log {w}_k as ∂A/∂λ_k = "
          f"{pretty(sp.simplify(dA))} for A(λ) = Σ_j log Γ(λ_j + 1) − log Γ(Σ_j (λ_j + 1)) (Sec. 1.2), i.e. "
          "ψ(a_k) − ψ(Σ_j a_j).", [(s_, e_, r"\leftarrow") for s_, e_ in steps])
