"""The BLR step itself (Eq. 6) and the way back to ordinary parameters (Eqs. 9, 12): identities applied by every
candidate.

* ``blr`` — λ ← (1−ρ)λ − ρ∇_μ E_q[ℓ + log h], the BLR (Eq. 3) with ∇_μ H(q) = −λ − ∇_μ E_q[log h] (App. B);
* ``base_measure`` — ∇_μ E_q[log h] (App. B, Eq. 64): zero for a constant h, the coefficients when log h is
  linear in the statistics, Gaussian moments otherwise;
* ``natural_to_ordinary`` — the updated λ solved for the ordinary parameters block by block (Eq. 9), with the
  family's closed-form inverse ordinary(λ) where a parameter enters λ non-linearly;
* ``increment_form`` — p_{t+1} = p_t + Δ where a parameter enters λ linearly (Eq. 12).
"""
from __future__ import annotations

import functools

import sympy as sp

from blr_derive.core import matcalc
from blr_derive.core.errors import DerivationError
from blr_derive.core.matexpr import is_mat, like_symbol, simplify_mat
from blr_derive.core.specialfns import stable_softmax
from blr_derive.core.pretty import pretty


def _sup(n: int) -> str:
    """The index of the n-th natural parameter as Unicode superscripts, λ⁽²⁾ (report prose, not ASCII maths)."""
    return "⁽" + str(n).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")) + "⁾"
from blr_derive.families.solve import isolate_block
from blr_derive.families.symbolic import simplify_bounded
from blr_derive.rules.base import RULES, rule
from blr_derive.rules.program import new_def

rule("blr", "identity", "Eq. 6",
     "λ ← (1-ρ)λ - ρ ∇_μ E_q[ℓ(θ) + log h(θ)]: the BLR (Eq. 3) with ∇_μ H(q) = -λ - ∇_μ E_q[log h] (App. B)")
rule("base_measure", "identity", "App. B, Eq. 64",
     "∇_μ E_q[log h(θ)] from the closed-form Gaussian moments of log h (zero when h is constant)")
rule("natural_to_ordinary", "identity", "Eq. 9",
     "solve the updated natural parameters for the ordinary parameters, block by block")
rule("increment_form", "identity", "Eq. 12",
     "for parameters that enter λ linearly, write p_{t+1} = p_t + M_{t+1}^{-1}(λ_{t+1} - M_{t+1} p_t) and cancel")


def doit(e):
    return e.doit() if hasattr(e, "doit") else e


#: an update with more operations than this keeps its powers of sums as they are (a sum over tens of support
#: points, such as the multinomial's E_q[log h] with (1 - p1 - p2)^k in every term, multiplied out runs for minutes)
EXPAND_MAX_OPS = 1000


def expand(e):
    """``e`` multiplied out (powers of big sums kept, :data:`EXPAND_MAX_OPS`).  The result is remembered by the
    (immutable) expression: a family derived again from a file that differs only in its text (a description, the
    tests' payloads) assembles the same update, whose expansion is the costly part of :func:`assemble`."""
    if not isinstance(e, sp.Basic):
        return _expand(e)
    return _expand_remembered(e)


def _expand(e):
    big = isinstance(e, sp.Basic) and sp.count_ops(e) > EXPAND_MAX_OPS
    try:
        return sp.expand(e, power_exp=False, multinomial=not big)    # exp(a + b) stays whole (no overflow of one factor)
    except Exception:  # pragma: no cover
        return e


#: expression -> its expansion (see :func:`expand`), the 256 latest
_expand_remembered = functools.lru_cache(maxsize=256)(_expand)


def new_symbol(p):
    return like_symbol(f"{p.name}_new", p.symbol) if not is_mat(p.symbol) else sp.MatrixSymbol(f"{p.name}_new", *p.symbol.shape)


def solve_ordinary(recipe, D, lam_new, sym):
    fam = recipe.family
    free = [p for p in fam.params.values() if not p.fixed]
    new_sym = {p.symbol: new_symbol(p) for p in free}
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
            inverse = fam.ord_from_nat.get(p.symbol)  # the family's closed-form ordinary(λ), verified at load
            if inverse is not None:
                inverse = inverse_at(D, fam, inverse, lam_new)
            direct = isolate(e_new, lam_new[i], p.symbol, sym, inverse)
            steps = [(new_sym[p.symbol], direct, r"\leftarrow")]
            chosen, rule, text = direct, "natural_to_ordinary", (
                f"Solve λ{_sup(i + 1)}ₜ₊₁ = {pretty(e)} for {p.name}, using the parameters already updated.")
            incr = increment(e, lam_new[i], p.symbol, known_new, solved_expr, sym)
            # the increment form m + Δ (Eq. 12) unless the direct solve is shorter once expanded: passes that
            # rewrite learning rates (separate_learning_rates) then act on the step Δ, as in the peers
            direct_size = sp.count_ops(direct if is_mat(direct) else sp.expand(direct))
            if incr is not None and sp.count_ops(incr) < direct_size:
                chosen, rule = incr, "increment_form"
                text = (f"{p.name} enters λ{_sup(i + 1)} linearly; writing {p.name}ₜ₊₁ = {p.name}ₜ + Δ, the terms "
                        f"of λ{_sup(i + 1)}ₜ₊₁ that reproduce the old {p.name} cancel (as in Eq. 12 / App. D).")
                steps = [(new_sym[p.symbol], incr, r"\leftarrow")]
            D.add(rule, RULES[rule].equation, f"Update of {p.name}", text, steps)
            solved_expr[p.symbol] = tidy(chosen, fam, D, sym, new_sym)
            D.updates.append((p.name, new_sym[p.symbol], solved_expr[p.symbol]))
            remaining.remove(i)
            progress = True
        if not progress:
            # coupled blocks (e.g. the categorical's λ_k = log(p_k/p_K)): the family's closed-form inverse
            # ordinary(λ) at λ_{t+1}, for all the parameters still unknown at once
            unk = [p for p in free if p.symbol not in solved_expr]
            inv = fam.ord_from_nat
            if not unk or any(p.symbol not in inv or is_mat(p.symbol) for p in unk) or any(is_mat(l) for l in lam_new):
                raise DerivationError("cannot solve the updated natural parameters for the ordinary parameters")
            eqs = []
            for p in unk:
                solved_expr[p.symbol] = inverse_at(D, fam, inv[p.symbol], lam_new)
                D.updates.append((p.name, new_sym[p.symbol], solved_expr[p.symbol]))
                eqs.append((new_sym[p.symbol], solved_expr[p.symbol], r"\leftarrow"))
            D.add("natural_to_ordinary", RULES["natural_to_ordinary"].equation,
                  "Update of " + ", ".join(p.name for p in unk),
                  "The natural parameters couple these parameters; the family's inverse map ordinary(λ) "
                  "is evaluated at λ_{t+1}.", eqs)
            remaining = []


#: the size (sympy's count_ops) of a λ_{t+1} above which inverse_at computes it once as a definition
INLINE_OPS = 150


def inverse_at(D, fam, inverse, lam_new):
    """The family's inverse map ordinary(λ) at λ_{t+1} (Eq. 9).  A softmax of λ (Bernoulli, categorical) is
    evaluated stably, exp(a − logsumexp(...)), at λ_{t+1} computed once as a definition: substituted into exp(...),
    sympy would split it into products of powers that overflow or cancel (p near 0 or 1)."""
    if is_mat(inverse) or any(is_mat(l) for l in lam_new):
        return inverse.xreplace(dict(zip(fam.lam, lam_new)))
    stable = stable_softmax(inverse)
    # a large λ_{t+1} (an exact expectation summed over a finite support: Σ_k q_k ℓ(k) T(k) with q_k = e^{λk}/Σ...)
    # is computed once as a definition too: substituted into the inverse (exp(λ) of a truncated Poisson) sympy
    # evaluates the function of it, asking whether the sum is positive or zero, which expands it and looks for the
    # real roots of polynomials in it (a support of 6 points: past 250 s; one of 5: 88 s)
    large = {l for l, new in zip(fam.lam, lam_new) if stable.has(l) and sp.count_ops(new) > INLINE_OPS}
    if stable == inverse and not large:
        return inverse.xreplace(dict(zip(fam.lam, lam_new)))
    taken = {p.name for p in fam.params.values()}
    at = {}
    for i, (l, new) in enumerate(zip(fam.lam, lam_new)):
        if l in large or (stable != inverse and stable.has(l)):
            name = f"lambda{i + 1}_next"
            at[l] = new_def(D, name if name not in taken else f"{name}_", new)
        else:
            at[l] = new
    return stable.xreplace(at)


def tidy(e, fam, D, sym, new_sym):
    if is_mat(e):
        return simplify_mat(e, sym)
    keys = [p.symbol for p in fam.params.values()] + [c.symbol for c in D.oracle_calls] + list(new_sym.values())
    if e.atoms(sp.MatrixSymbol):     # a scalar with matrix parts (tr(H)/P of an isotropic Gaussian): collect by
        keys = [k for k in keys if not is_mat(k)]      # the scalar keys (sympy cannot collect by a matrix symbol)
    # exp(a + b) stays whole: split into exp(a)·exp(b) it overflows where the whole does not (a softmax)
    if e.has(sp.exp):      # exp(a)·exp(b) → exp(a + b): one factor cannot overflow while the product is finite
        e = sp.powsimp(e, combine="exp")
    return sp.collect(sp.expand(e, power_exp=False), keys)


def isolate(e, target, p, sym, inverse=None):
    """Solve e(p) = target for the parameter p (Eq. 9).  A scalar p that enters λ non-linearly is read off the
    family's closed-form inverse ``inverse`` = ordinary(λ_{t+1}) (the one solver of the family, checked when it
    was loaded), never re-solved: sympy's solve simplifies the whole target and can take minutes."""
    if not is_mat(p):
        x = sp.Dummy(p.name, **p.assumptions0)
        ex = e.xreplace({p: x})
        c = sp.diff(ex, x)
        if c != 0 and not c.has(x) and not target.has(x):
            # e linear in p (λ = c p + r): p = (target - r)/c directly.  sympy's solve would simplify the whole
            # target (a degree-32 polynomial loss took 40 s) and, on its first call, import sympy.physics.units
            return (target - ex.xreplace({x: 0})) / c
        if c.has(x) and inverse is not None:
            return inverse
        # solve e(x) = L for a placeholder L, then put the target in: the target (old state, oracles, data sums)
        # never enters sympy's solver, whose simplification cannot handle data-sum nodes and is slow on big targets
        level = sp.Dummy("L", real=True)
        sol = roots_in_domain(sp.solve(sp.Eq(ex, level), x, dict=False), ex, x, level)
        if len(sol) != 1:
            raise DerivationError(f"cannot isolate {p} in {e}")
        return sol[0].xreplace({level: target})
    return isolate_block(e, target, p, sym)


#: sample points of a scalar parameter's domain, used to tell apart the roots of λ = e(x) (Eq. 9)
DOMAIN_POINTS = {"positive": (0.7, 1.9), "negative": (-0.7, -1.9), "nonnegative": (0.7, 1.9),
                 "real": (-0.6, 1.3)}


def roots_in_domain(roots, ex, x, level):
    """The roots x(L) of e(x) = L that give back the parameter at points of its domain: for x₀ in the domain,
    x(e(x₀)) = x₀.  The other symbols of e are set to positive sample values (every root is checked at the same
    values).  With a single root nothing is checked."""
    if len(roots) <= 1:
        return roots
    kind = next((k for k in ("positive", "negative", "nonnegative") if x.assumptions0.get(k)), "real")
    others = {s: sp.Float(1.3) + sp.Float(0.1) * i for i, s in enumerate(sorted(ex.free_symbols - {x}, key=str))}
    keep = []
    for r in roots:
        ok = True
        for x0 in DOMAIN_POINTS[kind]:
            at = sp.N(ex.xreplace({**others, x: sp.Float(x0)}))
            if not at.is_finite or not at.is_real:
                continue
            got = sp.N(r.xreplace({**others, level: at}))
            if not got.is_finite or abs(complex(got) - x0) > 1e-9 * (1 + abs(x0)):
                ok = False
                break
        if ok:
            keep.append(r)
    return keep


def increment(e, target, p, known_new, solved_expr, sym):
    """p_{t+1} = p_t + Δ with Δ solving η(Δ; new others) = λ_{t+1} - η(p_t; new others), when η is linear in p."""
    if is_mat(p) and any(isinstance(a, sp.Inverse) and a.has(p) for a in sp.preorder_traversal(e)):
        return None                  # not linear (and inv(0) below would not exist: λ = -inv(Sigma)/2)
    zero = sp.ZeroMatrix(*p.shape) if is_mat(p) else sp.Integer(0)
    at_zero = simplify_mat(doit(e.xreplace({p: zero})), sym)
    if not (at_zero == 0 or isinstance(at_zero, sp.ZeroMatrix)):
        return None
    if not is_mat(p) and sp.diff(e, p, 2) != 0:
        return None
    old_at_new = e.xreplace(solved_expr)
    resid = simplify_mat(expand(doit(target - old_at_new)), sym)
    e_new = e.xreplace(known_new)
    try:
        delta = isolate(e_new, resid, p, sym)
    except DerivationError:
        return None
    return simplify_mat(p + delta, sym) if is_mat(p) else p + delta


def introduce(ctx):
    """The candidate family (λ, T, μ) and the statement of the BLR (Eq. 6) with the symbols λ_{t+1}."""
    recipe, D, fam = ctx.recipe, ctx.D, ctx.family
    for p in fam.params.values():
        D.symbol_names[p.symbol] = (r"\mathbf{%s}" % p.name) if is_mat(p.symbol) else p.name
    for l, u in zip(fam.lam, fam.mu):
        D.symbol_names[l] = r"\lambda^{(%s)}" % l.name[6:]
        D.symbol_names[u] = r"\mu^{(%s)}" % u.name[2:]
    D.symbol_names[ctx.rho] = r"\rho" if recipe.learning_rate == "rho" else recipe.learning_rate
    D.add("family", fam.reference or "Table 2", f"Candidate family `{fam.name}`",
          "Natural parameters λ, sufficient statistics T(θ) and expectation parameters μ = ∇A(λ) "
          "(derived by matrix differential calculus).",
          [(l, e) for l, e in zip(fam.lam, fam.eta)] + [(u, e) for u, e in zip(fam.mu, fam.mu_ord)])
    gblock = ctx.gblock = [like_symbol(f"grad_mu{i + 1}", u) for i, u in enumerate(fam.mu)]
    for i, g in enumerate(gblock):
        D.symbol_names[g] = r"\nabla_{\mu^{(%d)}} \mathbb{E}_q[\bar\ell + \log h]" % (i + 1)
    ctx.lam_next = [like_symbol(f"{l.name}_next", l) for l in fam.lam]
    for i, l in enumerate(ctx.lam_next):
        D.symbol_names[l] = r"\lambda^{(%d)}_{t+1}" % (i + 1)
    D.add("blr", RULES["blr"].equation, "The Bayesian learning rule",
          "Natural-gradient descent on E_q[ℓ] - H(q) in the form of Eq. 6, which keeps the base-measure term "
          "∇_μ E_q[log h] explicit (App. B).",
          [(ln, (1 - ctx.rho) * l - ctx.rho * g) for ln, l, g in zip(ctx.lam_next, fam.lam, gblock)])
    if fam.is_gaussian:
        ctx.mean_mu, ctx.cov_mu = fam.mean_of_mu(), fam.cov_of_mu()


def zeros_like_mu(fam):
    return [sp.ZeroMatrix(*u.shape) if is_mat(u) else sp.Integer(0) for u in fam.mu]


def base_measure(ctx):
    """``base_measure`` (App. B): ∇_μ E_q[log h] into ``ctx.g_logh`` (kept when a rule already set it)."""
    if ctx.g_logh is not None:
        return
    D, fam = ctx.D, ctx.family
    logh = fam.log_h
    lin = fam.log_h_linear() if (not fam.is_gaussian and fam.depends_on_variable(logh)) else None
    if lin is not None:
        ctx.g_logh = list(lin[1])
        D.add("base_measure", RULES["base_measure"].equation, "Gradient of the base-measure term",
              "log h(θ) is linear in the sufficient statistics, so ∇_μ E_q[log h] is its coefficient vector.",
              [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\log h]" % (i + 1)), g) for i, g in enumerate(ctx.g_logh)])
    elif fam.depends_on_variable(logh) and not fam.is_gaussian and cancelled_by_prior(ctx):
        # a prior in the candidate family brings -log h, which cancels this term exactly (family_prior); the
        # placeholders must be gone from λ_{t+1} (assemble checks)
        ctx.g_logh = [sp.Dummy(f"grad_mu{i + 1}_E_log_h") for i in range(len(fam.mu))]
        ctx.logh_placeholders = set(ctx.g_logh)
        D.add("base_measure", RULES["base_measure"].equation, "Base-measure term",
              ("E_q[log h] is not needed: the loss contains -log h(θ), whose natural gradient -∇_μE_q[log h] cancels "
               "it exactly (App. B; Sec. 5.1)." if ctx.with_log_h is not None or ctx.tilted_with_log_h else
               "E_q[log h] has no closed form here, but the prior in the candidate family contributes "
               "-∇_μE_q[log h], which cancels it exactly (App. B; Sec. 5.1)."),
              [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\log h]" % (i + 1)), g) for i, g in enumerate(ctx.g_logh)])
    elif fam.depends_on_variable(logh) and not fam.is_gaussian and (tilted := gradient_through_ordinary(fam)):
        e_logh, ctx.g_logh = tilted
        D.add("base_measure", RULES["base_measure"].equation, "Gradient of the base-measure term",
              "E_q[log h] in closed form from the tilted log-partition, d/ds log ∫ h^{1+s} exp(<λ,T>) at s = 0, "
              "differentiated through the ordinary parameters o: ∇_μ = (∂μ/∂o)^{-T} ∂/∂o.",
              [((r"\mathbb{E}_q[\log h]"), e_logh)]
              + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\log h]" % (i + 1)), g) for i, g in enumerate(ctx.g_logh)])
    elif fam.depends_on_variable(logh):
        if not fam.is_gaussian:
            raise ctx.fail(f"family '{fam.name}': E_q[log h] has no closed form the BLR can use (a prior in the "
                           "candidate family, approximation 'family_prior', cancels it, as does an explicit loss "
                           "under 'exact' that contains −log h(θ): the full negative log-joint)")
        e_logh = fam.expect_gaussian(logh, mean=ctx.mean_mu, cov=ctx.cov_mu)
        ctx.g_logh = matcalc.gradient(e_logh, fam.mu, ctx.sym)
        D.add("base_measure", RULES["base_measure"].equation, "Gradient of the base-measure term",
              "h(θ) is not constant, so E_q[log h(θ)] is computed from the Gaussian moments in μ and differentiated.",
              [((r"\mathbb{E}_q[\log h]"), e_logh)]
              + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\log h]" % (i + 1)), g) for i, g in enumerate(ctx.g_logh)])
    else:
        ctx.g_logh = zeros_like_mu(fam)
        D.add("base_measure", RULES["base_measure"].equation, "Constant base measure",
              f"h(θ) = {pretty(fam.h)} does not depend on θ, so ∇_μ E_q[log h] = 0 and ∇_μ H(q) = -λ (App. B).")


def gradient_through_ordinary(fam):
    """(E_q[log h], ∇_μ E_q[log h]) for a scalar family whose E_q[log h] has a closed form in the ordinary
    parameters o (the tilted log-partition, App. B): ∇_μ E = (∂μ/∂o)^{-T} ∂E/∂o.  None otherwise."""
    if any(is_mat(l) for l in fam.lam) or not fam.components:
        return None
    try:
        e = fam.expect_log_h()
    except DerivationError:
        return None
    if e.has(sp.Sum, sp.Integral):           # an infinite series (the Poisson's E[log θ!]) is not a closed form
        return None
    free = [p.symbol for p in fam.params.values() if not p.fixed]
    if len(free) != len(fam.mu_ord):
        return None
    J = sp.Matrix([[sp.diff(m, o) for o in free] for m in fam.mu_ord])
    grad_o = sp.Matrix([sp.diff(e, o) for o in free])
    try:
        g = J.T.LUsolve(grad_o)
    except (ValueError, ZeroDivisionError):
        return None
    return e, [simplify_bounded(x) for x in g]


def cancelled_by_prior(ctx):
    """Whether a ``family_prior`` step, or an explicit loss that contains −log h (``exact``: ctx.with_log_h), will
    cancel the base-measure term (not with ``no_entropy``)."""
    return (("family_prior" in ctx.names or ctx.with_log_h is not None or ctx.tilted_with_log_h)
            and "no_entropy" not in ctx.names)


def assemble(ctx, g_loss):
    """λ_{t+1} = keep·λ(params) − ρ(∇_μ E_q[ℓ] + ∇_μ E_q[log h]) at μ = μ(params) (Eq. 6)."""
    fam, sym = ctx.family, ctx.sym
    at_state = dict(zip(fam.mu, fam.mu_ord))
    lam_new = []
    for i in range(len(fam.lam)):
        g = g_loss[i] + ctx.g_logh[i] if not (is_mat(g_loss[i])) else sp.MatAdd(g_loss[i], ctx.g_logh[i])
        g = simplify_mat(doit(g).xreplace(at_state), sym)
        lam_new.append(simplify_mat(expand(ctx.keep * fam.eta[i] - ctx.rho * g), sym))
        if ctx.logh_placeholders and lam_new[-1].has(*ctx.logh_placeholders):
            raise ctx.fail(f"family '{fam.name}': E_q[log h] has no closed form, and the rules between the prior "
                           "and the BLR step keep it from cancelling")
    ctx.D.add("blr", RULES["blr"].equation, "Natural-parameter update",
              "Substituting the natural gradients, evaluated at μ_t = μ(ordinary parameters), into Eq. 6.",
              [(ln, e, r"\leftarrow") for ln, e in zip(ctx.lam_next, lam_new)])
    return lam_new
