"""``blr-derive check`` for a recipe: the derivation's correctness (its natural gradients against finite
differences of the expected loss it derived; a relaxation's chain rule against finite differences) and the
generated code's fidelity (the numpy module against the symbolic update, at random inputs)."""
from __future__ import annotations

import math
import types
import warnings

import numpy as np
import sympy as sp

from blr_derive.codegen.printing import numeric_lowering
from blr_derive.codegen.registry import emit
from blr_derive.core.matexpr import is_mat
from blr_derive.core.nodes import gauss_hermite_rule
from blr_derive.core.specialfns import softplus_form
from blr_derive.derive.driver import derive
from blr_derive.families.numeric import MODULES
from blr_derive.families.partition import support_points
from blr_derive.families.symbolic import evaluate, evaluator
from blr_derive.ir.build import build_ir
from blr_derive.rules.product import FactorizedDerivation
from blr_derive.verify.entry_points import federated_error
from blr_derive.verify.mixture_bound import mixture_bound_checks
from blr_derive.verify.product_objective import NAME as OBJECTIVE_CHECK
from blr_derive.verify.product_objective import TOLERANCE as OBJECTIVE_TOLERANCE
from blr_derive.verify.product_objective import product_objective_checks
from blr_derive.verify import descent, objective_components
from blr_derive.verify.objective_vector import vector_gaussian, vector_objective_checks
from blr_derive.verify.results import Check
from blr_derive.verify.update import GeneratedStepError, compare_update


#: random inputs drawn per point wanted, at most, where some fall outside the region the update is finite in
MAX_TRIES = 10


def _at_finite_inputs(points, at):
    """``at(seed)`` at seeds 0, 1, ... until ``points`` of them gave a value; None, or a TypeError (complex),
    ValueError, OverflowError or ZeroDivisionError, means the input lies where the derivation has no finite value,
    and a FloatingPointError (the generated module's run-time domain check: the update leaves the family there, e.g.
    a precision made negative by a dual of any sign) that the input lies outside the family's domain after the
    step; either way another is drawn, at most ``points × MAX_TRIES`` in all.  Returns (values, number skipped)."""
    values, skipped = [], 0
    for seed in range(points * MAX_TRIES):
        if len(values) == points:
            break
        try:
            with warnings.catch_warnings():
                # numpy's warnings at an input outside the region (sqrt of a negative, ...) are what the skip says:
                # printed, they would break the table `check` writes
                warnings.simplefilter("ignore", RuntimeWarning)
                v = at(seed)
        except (TypeError, ValueError, OverflowError, ZeroDivisionError, FloatingPointError):
            v = None
        if v is None:
            skipped += 1
        else:
            values.append(v)
    return values, skipped


def check_recipe_updates(recipe, points: int = 3) -> list:
    """The generated numpy update against the symbolic update it was derived as, at random inputs.

    Relative error max|generated - symbolic| / max(|symbolic|, 1), tolerance 1e-10."""
    D = derive(recipe)
    mod = types.ModuleType(f"_blr_check_{recipe.name}")
    ir = build_ir(D, recipe.name, numeric_lowering)
    exec(compile(emit(ir, "numpy"), f"<generated {recipe.name}>", "exec"), mod.__dict__)

    def at(seed):                            # complex or undefined (TypeError ...): no real value, drawn again
        pairs = [(np.asarray(g, dtype=float), np.asarray(s_, dtype=float))
                 for _, g, s_ in compare_update(recipe, D, mod, seed)]
        if not all(np.all(np.isfinite(s_)) for _, s_ in pairs):
            return None                      # outside the region where it is finite (E[θ] under an inverse gamma: α > 1)
        errs = [float(np.max(np.abs(g - s_)) / max(1.0, float(np.max(np.abs(s_))))) for g, s_ in pairs]
        return max((e if np.isfinite(e) else float("inf") for e in errs), default=0.0)   # a NaN generated value fails
    try:
        errors, skipped = _at_finite_inputs(points, at)
    except GeneratedStepError as exc:
        errors, skipped, failed = [], 0, str(exc)
    else:
        failed = None
    worst = max(errors, default=float("inf"))
    note = f"numpy target, {len(errors)} random inputs"
    if skipped:
        note += f" ({skipped} skipped where the symbolic update is not finite or leaves the family)"
    if failed is not None:
        note = failed
    elif not errors:
        note = f"no random input of {skipped} gave a finite symbolic update inside the family"
    checks = [Check("generated update vs symbolic update", worst, 1e-10, note=note, group="codegen")]
    if hasattr(mod, "objective") and isinstance(D, FactorizedDerivation):
        checks += product_objective_checks(recipe, D, mod, points)
    elif isinstance(D, FactorizedDerivation):
        checks.append(Check(OBJECTIVE_CHECK, float("nan"), OBJECTIVE_TOLERANCE, kind="na", group="codegen",
                            note="the module has no objective() (its docstring says why; docs/targets.md)"))
    elif hasattr(mod, "objective") and vector_gaussian(recipe.family):
        kind = getattr(mod, "OBJECTIVE_ESTIMATE", "exact")
        checks += vector_objective_checks(recipe, D, mod, kind, ir.objective_parts, points)
    elif hasattr(mod, "objective") and hasattr(mod, "OBJECTIVE_ESTIMATE"):
        checks += estimated_objective_checks(recipe, D, mod, points)
    elif hasattr(mod, "objective") and hasattr(mod, "OBJECTIVE_BOUND"):
        checks += mixture_bound_checks(recipe, mod, points)
    elif hasattr(mod, "objective"):
        checks += objective_checks(recipe, mod, points)
    if hasattr(mod, "server_step") and ir.entry_points is not None:
        checks.append(_federated_check(recipe, D, ir, mod, points))
        if hasattr(mod, "global_objective"):
            checks.append(global_objective_check(recipe, mod, points))
    if D.expected_loss is not None and D.natural_gradient is not None:
        checks.append(Check("natural gradient vs finite differences", _natural_gradient_fd(recipe, D, points), 1e-6,
                            note="∇_μ E_q[loss] against central differences of E_q[loss](μ)", group="derivation"))
    if D.relaxation is not None:
        checks.append(Check("relaxation scale vs finite differences", _relaxation_scale_fd(recipe, D, points), 1e-6,
                            note="s = ∇_μ θ̂ (Eq. 51) against central differences of θ̂(u; μ)", group="derivation"))
    return checks


def _federated_check(recipe, D, ir, mod, points):
    """Federated Bayesian ADMM's generated dual, message and server steps against their symbolic expressions
    (``verify/entry_points.py``), at random rounds."""
    errors, skipped = _at_finite_inputs(points, lambda seed: federated_error(recipe, D, ir, mod, seed))
    names = "dual_step, client_message, server_step" + (", global_objective" if hasattr(mod, "global_objective") else "")
    note = f"{names}; numpy target, {len(errors)} random rounds of 2 clients"
    if skipped:
        note += f" ({skipped} skipped where the symbolic value is not finite or q_g leaves the family)"
    if not errors:
        note = f"no random round of {skipped} gave a finite server state inside the family"
    return Check("generated federated steps vs symbolic", max(errors, default=float("inf")), 1e-10, note=note,
                 group="codegen")


def global_objective_check(recipe, mod, points: int = 3) -> Check:
    """The generated ``global_objective`` of a federated recipe (Bayesian ADMM's bound at q_g, blr_derive/ir/
    federated.py) against c/τ + quadrature of ∫ q_g(θ) (ℓ_0(θ) + log q_g(θ)) dθ with the family's log-density (not
    its entropy formula, not the derived prior expectation), c a random sum of the clients' expected losses, at
    random parameters of q_g and hyperparameters; one continuous scalar variable (a mean-field state of one
    coordinate), elsewhere one 'na' line (the symbolic comparison of the federated steps covers it there)."""
    from scipy import integrate
    fam, fed = recipe.family, recipe.federated
    name = "global objective vs quadrature"
    support = fam.component_supports[0] if len(fam.components) == 1 and fam.component_supports else None
    if support not in _RANGES or is_mat(fam.theta):
        return Check(name, float("nan"), 1e-7, kind="na", group="codegen",
                     note="quadrature of the global objective is checked for one continuous scalar variable")
    theta = fam.components[0]
    params = [p.symbol for p in fam.params.values()]
    hyper = [h for h in recipe.hyper if h.kind == "float" and h.symbol is not None]
    args = [theta] + params + [h.symbol for h in hyper]
    log_density = _log_density(fam)
    integrand = sp.lambdify(args, sp.exp(log_density) * (fed.prior + log_density), MODULES)
    tau = sp.lambdify([h.symbol for h in hyper], sp.sympify(fed.temperature), MODULES)
    lo, hi = _RANGES[support]
    worst, done = 0.0, 0
    for seed in range(points * MAX_TRIES):
        if done == points:
            break
        rng = np.random.default_rng(500 + seed)
        vals = fam.sample_params(rng, 1)
        pv = [float(np.ravel(vals[p])[0]) for p in params]
        hv = {h.name: float(rng.uniform(0.5, 2.0)) for h in hyper}
        state = {p.name: np.array([v]) for p, v in zip(fam.params.values(), pv)}
        known = {k: v for k, v in hv.items() if k in mod.HYPERPARAMETERS}
        c = float(rng.normal() * 10)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", integrate.IntegrationWarning)     # judged by the comparison itself
            try:
                value = lambda t: float(np.real(integrand(t, *pv, *hv.values())))  # noqa: E731
                quad, _ = integrate.quad(value, lo, hi, limit=400, epsabs=1e-12, epsrel=1e-12)
                want = c / float(tau(*hv.values())) + quad
                got = float(mod.global_objective(state, c, **known)["objective"])
            except descent.NO_VALUE:
                continue
        if not (np.isfinite(want) and np.isfinite(got)):
            continue
        worst = max(worst, abs(got - want) / max(1.0, abs(want)))
        done += 1
    if not done:
        return Check(name, float("nan"), 1e-7, kind="na", group="codegen",
                     note="no random input gave a finite global objective and quadrature")
    return Check(name, worst, 1e-7, group="codegen",
                 note=f"generated global_objective(q_g, c) = c/τ + E_q_g[prior] - H(q_g) against c/τ + quadrature of "
                      f"q_g (prior + log q_g), {done} random inputs")


#: the integration ranges of the continuous scalar supports, for the objective's quadrature
_RANGES = {"real": (-np.inf, np.inf), "positive": (0.0, np.inf), "unit_interval": (0.0, 1.0),
           "circular": (-np.pi, np.pi)}


def _exact(end):
    """A range's end (a float of _RANGES) as the exact number it stands for: 0, 1, ±π."""
    return sp.pi if end == math.pi else -sp.pi if end == -math.pi else sp.nsimplify(end)


def _log_density(fam):
    """The family's log-density for the quadrature references, with log(1 + e^θ) written softplus(θ) (logaddexp):
    evaluated as written it is inf from θ ≈ 710, and q's exponent inf − inf = NaN there (a logit-beta's T₂; the
    quadrature then called a logistic loss under it not integrable)."""
    return softplus_form(fam.log_density())


class NotIntegrable(ArithmeticError):
    """E_q[ℓ + log q] does not converge: the loss is not integrable under q (a pole where q > 0, a tail heavier than
    q's), so the objective (Eq. 2) is infinite and every estimate of its natural gradient is meaningless."""


def _quad_ends(lo, hi, near):
    """∫ f over (lo, hi) with each finite end e resolved to its own scale: ``near[e](s)`` is the integrand at
    θ = e ± e^(−s) times the Jacobian e^(−s), written symbolically in s (so that log(1 − θ) at θ = 1 − e^(−s) is −s,
    exact where 1 − θ is far below double precision's spacing at 1, and a pole (θ − e)^(a−1) is e^(−a s), which
    does not underflow before its mass is spent), integrated over s ∈ (−log|mid − e|, ∞): a Beta(0.08, 0.07) keeps
    8 % of its mass within 1e-16 of 1, which no rule in θ itself resolves (scipy's quad and mpmath's tanh-sinh were
    off by 2 % there).  Returns the value where it can be taken as it is (every end finite, the pieces' values finite
    with error estimates within 1e-6 of it), otherwise None (an infinite end's tail is for _quad's divergence
    test)."""
    from scipy import integrate
    if not (np.isfinite(lo) and np.isfinite(hi)) or not near:
        return None
    mid = (lo + hi) / 2
    value, err = 0.0, 0.0
    for end in (lo, hi):
        v, e = integrate.quad(near[end], -math.log(abs(mid - end)), np.inf, limit=400, epsabs=1e-13,
                              epsrel=1e-12)[:2]
        value, err = value + v, err + e
    return value if np.isfinite(value) and err <= 1e-6 * max(1.0, abs(value)) else None


def _quad(f, lo, hi, near=None):
    """∫ f over (lo, hi) by scipy's quad, or NotIntegrable where it diverges.  Over a finite range with ``near``
    (the integrand at each end as a function of the distance to it), _quad_ends' value where it is sure of it.
    A result whose error estimate is above
    1e-6 of it, or over an infinite range (where quad's transformed rule can miss a heavy tail with a small error
    estimate: t² under a Cauchy-like density), is tested for divergence at each end of the range: the integral from
    the middle towards the end in twelve geometric pieces (decades), whose contributions shrink where it converges
    (an integrable pole x^(-a), a < 1, by 10^(a - 1) a decade) and stay or grow where it diverges (1/x: q(0)·ln 10
    each).  Otherwise (a hard but convergent integrand) the value is returned as it is, judged by
    the comparison that reads it."""
    from scipy import integrate
    ends = _quad_ends(lo, hi, near)
    if ends is not None:
        return ends
    value, err = integrate.quad(f, lo, hi, limit=400, epsabs=1e-12, epsrel=1e-12)[:2]
    if np.isfinite(value) and err <= 1e-6 * max(1.0, abs(value)) and np.isfinite(lo) and np.isfinite(hi):
        return value
    mid = (lo + hi) / 2 if np.isfinite(lo) and np.isfinite(hi) else lo + 1.0 if np.isfinite(lo) else \
        hi - 1.0 if np.isfinite(hi) else 0.0

    def pieces(end):
        """∫ from mid towards ``end`` over 12 geometric pieces, whose far ends are 10⁻ʲ of the way left (a finite
        end) or 10ʲ out (an infinite one)."""
        out, start = [], mid
        for j in range(1, 13):
            stop = end - (end - mid) * 10.0 ** -j if np.isfinite(end) else mid + np.sign(end) * 10.0 ** j
            out.append(integrate.quad(f, min(start, stop), max(start, stop), limit=200, epsabs=1e-13,
                                      epsrel=1e-12)[0])
            start = stop
        return out
    for end in (lo, hi):
        p = pieces(end)
        total = math.fsum(p)
        # a convergent end's pieces shrink geometrically (x^(-a), a < 1, at a finite end: by 10^(a - 1) a decade);
        # a divergent one's stay (1/x: q(0)·ln 10 each) or grow
        if not np.all(np.isfinite(p)) or (abs(p[-1]) >= 0.9 * abs(p[-2]) and abs(p[-1]) > 1e-9 * max(1.0, abs(total))):
            where = "within 1e-12 of it" if np.isfinite(end) else f"{np.sign(end) * 1e12:g}"
            raise NotIntegrable(f"E_q[loss + log q] does not converge at {end:g} (quadrature {value:.6g} with error "
                                f"{err:.2g}; from {mid:g} to {where} in decades, the last two contribute "
                                f"{p[-2]:.3g} and {p[-1]:.3g})")
    return value


def _gauss_hermite_nodes(recipe):
    """The nodes and weights of a recipe's own Gauss–Hermite rule where its step takes E_q[loss] by it coordinate by
    coordinate (rules/gauss_hermite.py scalar_gauss_hermite: a loss of one coordinate of an elementwise Gaussian,
    ``nodes`` a number), else None."""
    fam = recipe.family
    approx = [a for a in recipe.approximations if a.name == "gauss_hermite"]
    if not approx or not (fam.is_gaussian and fam.elementwise) or recipe.loss_kind != "explicit":
        return None
    nodes = dict(approx[0].args).get("nodes")
    if isinstance(nodes, bool) or not isinstance(nodes, int):
        return None
    return gauss_hermite_rule(nodes)


def _weighted(log_q, expr):
    """q·expr = exp(log_q)·expr with each exponential factor of a term of ``expr`` moved into q's own exponential:
    exp(θ)·exp(log q) is exp(θ + log q).  Evaluated as a product, a loss that overflows where q underflows (the
    Poisson log link's e^θ under a Gaussian at θ = 1e12: inf·0) is NaN, which the divergence test reads as a loss
    that is not integrable; combined, the term underflows to 0 with q, as the integral it stands for does."""
    out = []
    for term in sp.Add.make_args(sp.expand_mul(expr)):
        factors = sp.Mul.make_args(term)
        grow = [f.args[0] for f in factors if isinstance(f, sp.exp)]
        rest = [f for f in factors if not isinstance(f, sp.exp)]
        out.append(sp.exp(log_q + sp.Add(*grow)) * sp.Mul(*rest))
    return sp.Add(*out)


def _not_integrable_check(name, tol, at, why):
    """The row of a check whose reference diverged (``why``, the NotIntegrable) at the parameters ``at`` (the first
    such point)."""
    return Check(name, float("inf"), tol, group="codegen",
                 note=f"the loss is not integrable under q at {at} ({why}): E_q[loss] is infinite (a pole where q > 0, or a "
                      "tail heavier than q's), so the objective (Eq. 2) and the step's expectations are meaningless "
                      "there; bound the loss on the support or choose a family under which it is integrable")


def _at(state, data):
    """The parameters and data of a check's point, for its message."""
    return ", ".join(f"{k} = {float(np.ravel(v)[0]):.6g}" for k, v in {**state, **data}.items())


def objective_checks(recipe, mod, points: int = 3) -> list:
    """The generated ``objective`` (blr_derive/ir/objective.py) against quadrature of ∫ q(θ) (ℓ(θ) + log q(θ)) dθ
    with the family's log-density (not its entropy formula, not the derived E_q[ℓ]) at random parameters, data and
    hyperparameters; and that one step with a small learning rate (ρ = 0.01 where the recipe has one, else its own)
    does not increase it (Eq. 2: the BLR is a natural-gradient descent on it).  A scalar variable over an interval,
    or over a finite set of points (the integral is then their sum); several scalar components (normal-gamma) by
    the family check's product quadrature, at points where it reproduces the family's normalization and mean
    (blr_derive/verify/objective_components.py); elsewhere one 'na' line."""
    from scipy import integrate
    fam = recipe.family
    support = fam.component_supports[0] if len(fam.components) == 1 and fam.component_supports else None
    points_of = support_points(fam, limit=1000) if support not in _RANGES and support is not None else None
    params = [p.symbol for p in fam.params.values()]
    data_syms = [d.symbol for d in recipe.data]
    hyper = [h for h in recipe.hyper if h.kind == "float" and h.symbol is not None]
    rule = None
    if objective_components.applies(recipe):       # several scalar components: the family check's quadrature
        reference = objective_components.ComponentsReference(recipe, data_syms, [h.symbol for h in hyper])
    elif (support not in _RANGES and not points_of) or any(d.shape for d in recipe.data):
        return [Check("objective vs quadrature", float("nan"), 1e-7, kind="na", group="codegen",
                      note="quadrature of the objective is checked for scalar variables and components")]
    else:                                           # one scalar variable: its sum or scipy's quad
        theta = fam.components[0]
        args = [theta] + params + data_syms + [h.symbol for h in hyper]
        log_density, loss = _log_density(fam), softplus_form(recipe.loss)
        rule = _gauss_hermite_nodes(recipe)
        # E_q[loss] by the recipe's own Gauss-Hermite rule where the step takes it so (a loss of one coordinate
        # of an elementwise Gaussian): the comparison measures the objective's formula, not the rule's error
        body = _weighted(log_density, log_density if rule else loss + log_density)
        if rule:
            rule_loss = sp.lambdify([theta] + args[1:], loss, MODULES)
            rule_at = sp.lambdify(args[1:], [fam.gaussian_mean, sp.sqrt(fam.gaussian_cov)], MODULES)
        integrand = sp.lambdify(args, body, MODULES)
        lo, hi = _RANGES.get(support, (None, None))
        near = {}
        if lo is not None and np.isfinite(lo) and np.isfinite(hi):     # each end in its own distance (_quad_ends)
            z = sp.Dummy("s", real=True)
            for end, sign in ((lo, 1), (hi, -1)):
                at = {theta: _exact(end) + sign * sp.exp(-z)}
                log_q = log_density.subs(at)                # the Jacobian's −s inside the one exponential
                near[end] = sp.lambdify([z] + args[1:], _weighted(log_q - z, loss.subs(at) + log_q), MODULES)

        def reference(vals, dvals, hvals):
            pv = [float(np.ravel(vals[p])[0]) for p in params]
            value = lambda t: float(np.real(integrand(t, *pv, *dvals, *hvals)))  # noqa: E731
            if points_of:
                return math.fsum(value(float(pt[theta])) for pt in points_of)
            ends = {e: (lambda x, g=g: float(np.real(g(x, *pv, *dvals, *hvals)))) for e, g in near.items()}
            if rule:
                z, w = rule
                m, sd = (float(x) for x in rule_at(*pv, *dvals, *hvals))
                expected = math.fsum(float(wk) * float(np.real(rule_loss(m + sd * zk, *pv, *dvals, *hvals)))
                                     for zk, wk in zip(z, w))
                return expected + _quad(value, lo, hi, ends)
            return _quad(value, lo, hi, ends)

    worst, rise, done = 0.0, 0.0, 0
    for seed in range(points * MAX_TRIES):
        if done == points:
            break
        rng = np.random.default_rng(300 + seed)
        vals = fam.sample_params(rng, 1)
        pv = [float(np.ravel(vals[p])[0]) for p in params]
        dv = {d.name: float(rng.uniform(0.5, 3.0)) for d in recipe.data}
        hv = {h.name: float(h.default) if isinstance(h.default, (int, float)) else float(rng.uniform(0.5, 2.0))
              for h in hyper}
        state = {p.name: np.array([v]) for p, v in zip(fam.params.values(), pv)}
        known = {k: v for k, v in hv.items() if k in getattr(mod, "HYPERPARAMETERS", {})}
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", integrate.IntegrationWarning)     # judged by the comparison itself
            try:
                want = reference(vals, list(dv.values()), list(hv.values()))
                got = float(mod.objective(state, data=dv, **known)["objective"])
            except NotIntegrable as e:
                return [_not_integrable_check("objective vs quadrature", 1e-7, _at(state, dv), e)]
            except descent.NO_VALUE:
                continue
        if not (np.isfinite(want) and np.isfinite(got)):
            continue
        worst = max(worst, abs(got - want) / max(1.0, abs(want)))
        rise = max(rise, descent.rise(mod, state, got, data=dv, hyper=known))
        done += 1
    if not done:
        return [Check("objective vs quadrature", float("nan"), 1e-7, kind="na", group="codegen",
                      note="no random input gave a finite objective and quadrature")]
    against = (f"the recipe's {len(rule[0])}-point Gauss-Hermite E_q[loss] (its rule's error is not measured here) "
               "and quadrature of q log q" if rule else "quadrature of q (loss + log q)")
    return [Check("objective vs quadrature", worst, 1e-7, group="codegen",
                  note=f"generated objective(state) = E_q[loss] - H(q) against {against}, {done} random inputs"),
            descent.descent_check(rise)]


#: the loss the oracles evaluate in check's test of an estimated objective: smooth, with finite moments under every
#: built-in scalar family, not linear in any family's statistics (so no closed form stands in for the estimate)
def _test_loss(theta):
    return 0.7 * (theta - 0.3) ** 2 + np.sin(2 * theta)


#: fresh samples for the Monte Carlo estimate in check; the test is |estimate - quadrature| <= Z_MC standard errors
MC_SAMPLES, Z_MC = 4000, 5.0
#: the node count check gives the step's quadrature rule (tanh-sinh) where the count is a hyperparameter
QUADRATURE_NODES = 257


def estimated_objective_checks(recipe, D, mod, points: int = 3) -> list:
    """The generated ``objective`` of a recipe whose E_q[ℓ] is estimated (``OBJECTIVE_ESTIMATE``: 'monte_carlo',
    'quadrature' or 'delta', blr_derive/ir/objective.py) with a test loss ℓ_o (:func:`_test_loss`) as
    ``oracles['loss']`` (quadrature of an explicit loss: the recipe's own loss, no oracle),
    against a reference that neither the derived entropy nor the closed-form expectations of the added terms
    enter: ℓ = scale·ℓ_o + R − log p₀ from the derivation's loss model (R and p₀ evaluated pointwise from their
    definitions) and log q from the family's log-density.  Monte Carlo: quadrature of ∫ q (ℓ + log q) (a sum over
    a finite support; without log q where the recipe drops the entropy), and the estimate from MC_SAMPLES fresh
    draws must lie within Z_MC of its own standard errors (value: the worst |estimate − reference| / SE);
    quadrature: the same integral, relative error 1e-7, and a step with ρ = 0.01 must not increase it; delta:
    ℓ(point) + ∫ q log q, relative error.  At random parameters of one scalar variable; elsewhere (a changed
    variable, data with a shape, samples of a relaxation rather than of q) one 'na' line."""
    from scipy import integrate
    fam = recipe.family
    kind = mod.OBJECTIVE_ESTIMATE
    name = f"objective ({kind}) vs quadrature"
    support = fam.component_supports[0] if len(fam.components) == 1 and fam.component_supports else None
    points_of = support_points(fam, limit=1000) if support not in _RANGES and support is not None else None
    why = None
    if (support not in _RANGES and not points_of) or any(d.shape for d in recipe.data):
        why = "the estimated objective is checked for one scalar variable"
    elif D.renamed:
        why = "the state holds a changed variable, not the family's parameters"
    elif not {p.name for p in fam.params.values()} <= set(getattr(mod, "STATE", ())):
        why = (f"the state ({', '.join(getattr(mod, 'STATE', ()))}) is not the family's parameters (a structured "
               "candidate, e.g. an eigenbasis)")
    elif kind == "monte_carlo" and D.relaxation is not None:
        why = "the samples are of the relaxation (Eq. 51), not of q: no quadrature of q is their expectation"
    if why:
        return [Check(name, float("nan"), Z_MC if kind == "monte_carlo" else 1e-7 if kind == "quadrature" else 1e-9,
                      kind="na", group="codegen", note=why)]
    theta = fam.components[0]
    params = [p.symbol for p in fam.params.values()]
    lm = D.loss_model
    added = lm.prior
    if lm.family_prior is not None:
        added += -sp.log(fam.h) - sum(l0 * t for l0, t in zip(lm.family_prior, fam.T)) \
            + fam.A.xreplace(dict(zip(fam.lam, lm.family_prior)))
    dropped = any(a.name == "no_entropy" for a in recipe.approximations)
    parts = build_ir(D, recipe.name).objective_parts
    worst, done, rise = 0.0, 0, 0.0
    # quadrature: a node count that is a hyperparameter is raised to QUADRATURE_NODES, so that the comparison
    # measures the objective's formula (loss, weights, entropy) and not the rule's error at the recipe's count
    count = D.sampling.samples if kind == "quadrature" and D.sampling is not None else None
    raised = next((h.name for h in recipe.hyper if h.symbol is not None and h.symbol == count
                   and h.name in getattr(mod, "HYPERPARAMETERS", {})), None)
    tol = 1e-9 if kind == "delta" else 1e-7 if kind != "quadrature" or raised else 1e-6
    for seed in range(points * MAX_TRIES):
        if done == points:
            break
        rng = np.random.default_rng(400 + seed)
        vals = fam.sample_params(rng, 1)
        pv = {p: float(np.ravel(vals[p])[0]) for p in params}
        dv = {d.name: float(rng.uniform(0.5, 3.0)) for d in recipe.data}
        hv = {}
        for h in recipe.hyper:
            if h.symbol is None or h.name not in getattr(mod, "HYPERPARAMETERS", {}):
                continue
            if h.kind == "float":
                hv[h.name] = float(h.default) if isinstance(h.default, (int, float)) else float(rng.uniform(0.5, 2.0))
            elif h.default is not None:
                hv[h.name] = h.default
        if raised:
            hv[raised] = QUADRATURE_NODES
        env = {**{p: sp.Float(v) for p, v in pv.items()}, **{d.symbol: sp.Float(dv[d.name]) for d in recipe.data},
               **{h.symbol: sp.sympify(hv[h.name]) for h in recipe.hyper if h.name in hv and h.symbol is not None}}
        scale = float(sp.sympify(lm.scale).xreplace(env))
        extra_fn = sp.lambdify([theta], added.xreplace(env), MODULES)
        logq = sp.lambdify([theta], _log_density(fam).xreplace(env), MODULES)
        own = None if parts.node_loss is None else \
            sp.lambdify([theta], softplus_form(recipe.loss).xreplace(env), MODULES)  # the module's own loss (no oracle)
        oracle = _test_loss if own is None else (lambda t: float(np.real(own(t))))
        loss = lambda t: scale * oracle(t) + float(np.real(extra_fn(t)))              # noqa: E731
        state = {fam.params[k].name: np.array([v]) for k, v in zip(fam.params, pv.values())}
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", integrate.IntegrationWarning)     # judged by the comparison itself
            try:
                if kind == "delta":
                    at = float(sp.sympify(parts.point_value).xreplace(env))
                    f = lambda t: float(np.real(np.exp(logq(t)) * logq(t)))           # noqa: E731
                    minus_h = 0.0 if dropped else (
                        math.fsum(f(float(pt[theta])) for pt in points_of) if points_of else
                        _quad(f, *_RANGES[support]))
                    want = loss(at) + minus_h
                    out = mod.objective(state, oracles={"loss": _test_loss}, data=dv, **hv)
                    got, err = float(out["objective"]), abs(float(out["objective"]) - want) / max(1.0, abs(want))
                elif kind == "quadrature":
                    f = lambda t: float(np.real(np.exp(logq(t)) * (loss(t) + (0.0 if dropped else logq(t)))))  # noqa: E731
                    want = (math.fsum(f(float(pt[theta])) for pt in points_of) if points_of else
                            _quad(f, *_RANGES[support]))
                    oracles = {"loss": _test_loss} if own is None else None
                    got = float(mod.objective(state, oracles=oracles, data=dv, **hv)["objective"])
                    err = abs(got - want) / max(1.0, abs(want))
                    rise = max(rise, descent.rise(mod, state, got, oracles=oracles, data=dv, hyper=hv))
                else:
                    f = lambda t: float(np.real(np.exp(logq(t)) * (loss(t) + (0.0 if dropped else logq(t)))))  # noqa: E731
                    want = (math.fsum(f(float(pt[theta])) for pt in points_of) if points_of else
                            _quad(f, *_RANGES[support]))
                    out = mod.objective(state, oracles={"loss": _test_loss}, data=dv,
                                        rng=np.random.default_rng(500 + seed), samples=MC_SAMPLES, **hv)
                    got = float(out["objective"])
                    err = abs(got - want) / float(out["standard_error"])
            except NotIntegrable as e:
                return [_not_integrable_check(name, tol, _at(state, dv), e)]
            except descent.NO_VALUE:
                continue
        if not (np.isfinite(want) and np.isfinite(got)):
            continue
        worst = max(worst, err)
        done += 1
    if not done:
        return [Check(name, float("nan"), 1.0, kind="na", group="codegen",
                      note="no random input gave a finite objective and reference")]
    if kind == "quadrature":
        loss_text = "the recipe's own loss" if recipe.loss_kind == "explicit" else "a test loss as oracles['loss']"
        nodes = (f"{raised} = {QUADRATURE_NODES} nodes" if raised else
                 f"the recipe's {sp.sstr(count)} nodes (a fixed count: tolerance 1e-6, the rule's own error)")
        return [Check(name, worst, tol, group="codegen",
                      note=f"generated objective (the step's deterministic quadrature of {loss_text}, {nodes}) "
                           f"against scipy quadrature of q (l + log q), relative, {done} random inputs"),
                descent.descent_check(rise)]
    if kind == "delta":
        return [Check(name, worst, 1e-9, group="codegen",
                      note=f"generated objective with oracles['loss'] = a test loss: l(point) - H(q) against l(point) "
                           f"+ quadrature of q log q, {done} random inputs")]
    return [Check(name, worst, Z_MC, group="codegen",
                  note=f"|Monte Carlo estimate ({MC_SAMPLES} samples) - quadrature of q (l + log q)| in standard "
                       f"errors, a test loss as oracles['loss'], {done} random inputs")]


def _relaxation_scale_fd(recipe, D, points):
    """Worst relative error of the derived s = ∇_μ θ̂ (``concrete_relaxation``, with ε = 0) against
    (θ̂(p + h) − θ̂(p − h)) / (μ(p + h) − μ(p − h)) at random draws u, parameters and temperatures."""
    rel = D.relaxation
    fam = recipe.family
    (p,) = [q.symbol for q in fam.free_params]
    eps = rel.eps
    scale = rel.scale_evaluated.xreplace({e: 0 for e in getattr(eps, "free_symbols", ())})
    args = (rel.u, p, rel.temperature)
    s_fn = sp.lambdify(args, scale, "numpy")
    th_fn = sp.lambdify(args, rel.sample, "numpy")
    mu_fn = sp.lambdify((p,), fam.mu_ord[0], "numpy")
    worst = 0.0
    for seed in range(points):
        rng = np.random.default_rng(200 + seed)
        vals = fam.sample_params(rng, 2)
        pv = float(vals[p])
        for _ in range(4):
            u, tau, h = float(rng.uniform(0.05, 0.95)), float(rng.uniform(0.3, 2.0)), 1e-6 * max(1.0, abs(pv))
            fd = (th_fn(u, pv + h, tau) - th_fn(u, pv - h, tau)) / (mu_fn(pv + h) - mu_fn(pv - h))
            got = float(s_fn(u, pv, tau))
            worst = max(worst, abs(got - fd) / max(1.0, abs(fd)))
    return worst


def _with_defs(D, e, values, dims):
    """``evaluate(D.expand_defs(e), values, dims)`` with each named quantity of ``D.defs`` that ``e`` reads evaluated
    once, in the order they read each other, and handed on as its value: written out, the definitions repeat as a
    tree what the derivation shares (binary-weight logistic regression's natural gradient: 9e5 nodes, 9 s to write out
    and 2.5 s an evaluation, where its definitions take milliseconds).  Definitions travel as float64 values; the
    finite-difference check they serve compares at 1e-6."""
    defs, done = dict(D.defs), {}

    def value(name):
        if name not in done:
            expr = defs[name]
            reads = expr.free_symbols & defs.keys() if isinstance(expr, sp.Basic) else set()
            done[name] = evaluate(expr, {**values, **{r: value(r) for r in reads}}, dims)
        return done[name]

    reads = e.free_symbols & defs.keys() if isinstance(e, sp.Basic) else set()
    return evaluate(e, {**values, **{r: value(r) for r in reads}}, dims)


def _natural_gradient_fd(recipe, D, points):
    """Worst relative error of the symbolic ∇_μ E_q[ℓ] against central finite differences in μ, at ``points``
    random parameters where E_q[ℓ] is real and finite (others are drawn again, at most MAX_TRIES times as many)."""
    fam = recipe.family
    E = D.expand_defs(D.expected_loss)
    grads = D.natural_gradient.grads
    ordinary = {p.symbol for p in fam.free_params} & getattr(E, "free_symbols", set())
    ordinary -= recipe.own_parameters()     # constants of ℓ (a prior at the step's start): held, not moved with μ

    def one(seed):
        worst = 0.0
        rng = np.random.default_rng(100 + seed)
        P = 3
        vals = fam.sample_params(rng, P)
        env = {}
        dims = {fam.dim: P} if fam.dim is not None else {}
        for d in recipe.data:
            shape = tuple(P if s_ == fam.dim else 5 for s_ in d.shape)
            v = rng.normal(size=shape) if shape else float(rng.uniform(0.5, 3.0))
            if d.symmetric:
                v = v @ v.T + shape[0] * np.eye(shape[0])
            env[d.symbol] = v
            dims.update({s_: 5 for s_ in d.shape if s_ != fam.dim})
        for h in recipe.hyper:
            if h.kind == "float":
                env[h.symbol] = float(rng.uniform(0.5, 2.0))
            elif h.kind == "int":                  # counts (e.g. quadrature nodes) at their defaults
                env[h.symbol] = h.default
        env.update({p.symbol: vals[p.symbol] for p in fam.params.values()})
        mu = {}
        for u, m in zip(fam.mu, fam.mu_ord):
            v = evaluate(m, env, dims)
            mu[u] = np.asarray(v, dtype=float) if is_mat(u) else float(v)
        E_at = evaluator(E, {k: v for k, v in env.items() if k not in ordinary}, dims)

        def f(point):
            if not ordinary:
                return float(E_at(point))
            # E_q[ℓ] written in the ordinary parameters (the exact rule's tilted and finite-sum forms): moving μ
            # moves them through the numeric inverse μ → λ → ordinary
            fixed = {p.symbol: env[p.symbol] for p in fam.fixed_params if p.symbol in env}
            ords = fam.numeric_ord_from_mu({**point, **fixed}, P if fam.dim is not None else None, tol=1e-15)
            return float(E_at({**point, **ords}))
        for u, g in zip(fam.mu, grads):
            gv = _with_defs(D, g, {**env, **mu}, dims)
            gv = np.atleast_2d(gv) if is_mat(u) else float(gv)
            h = 1e-5
            if not is_mat(u):
                fd = (f({**mu, u: mu[u] + h}) - f({**mu, u: mu[u] - h})) / (2 * h)
                worst = max(worst, abs(fd - gv) / max(1.0, abs(gv)))
                continue
            base = np.asarray(mu[u], dtype=float)
            n, k = base.shape
            for i in range(n):
                for j in range(k):
                    E_ = np.zeros_like(base)
                    E_[i, j] = 1.0
                    sym = u.shape[0] == u.shape[1] and n > 1 and u.shape[1] != 1
                    if sym:
                        E_[j, i] = 1.0
                    fd = (f({**mu, u: base + h * E_}) - f({**mu, u: base - h * E_})) / (2 * h)
                    want = (gv[i, j] if (not sym or i == j) else gv[i, j] + gv[j, i])
                    worst = max(worst, abs(fd - want) / max(1.0, abs(want)))
        return worst

    # E_q[ℓ] not real or not finite at a seed: outside the region where it is finite, drawn again
    errors, _ = _at_finite_inputs(points, lambda seed: (lambda v: v if np.isfinite(v) else None)(one(seed)))
    return max(errors, default=float("inf"))
