"""Approximation passes applied to a derived update (deep-learning conventions).

After :func:`blr_derive.blr.derive` has produced the update of the ordinary parameters,
the recipe may name further approximations.  Each one is a small, generic rewrite of the
update program and cites the equation of Khan & Rue (2023) it implements, or, where a
peer optimizer follows a convention that is not a consequence of the BLR (Adam's bias
corrections, eps outside the square root, SGD's first momentum step), says so.

The program is: oracle calls, intermediate definitions ``D.defs`` and the state updates
``D.updates``.  Passes never pattern-match the algebra produced by sympy; they work on
*views*: ``D.views['grad']`` is the symbol that currently stands for the gradient,
``D.views['hess']`` for the Hessian, and ``D.views[p]`` for the way parameter ``p``
enters the other updates.  A pass defines a new symbol, substitutes it for the view in
the consuming updates and moves the view, so passes compose in recipe order.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.matcalc import is_mat
from blr_derive.core.names import name_problem


@dataclass
class AuxState:
    name: str
    symbol: object
    new_symbol: object
    init: object          # sympy expression of hyperparameters (broadcast to the parameter's shape)
    description: str


PASSES: dict = {}


def register(name):
    def deco(fn):
        PASSES[name] = fn
        return fn
    return deco


# ----------------------------------------------------------------------------- helpers

class Ctx:
    def __init__(self, D, approx):
        self.D = D
        self.r = D.recipe
        self.approx = approx
        self.args = dict(approx.args)

    def fail(self, msg):
        return SpecError(f"approximation '{self.approx.name}': {msg}", self.r.file, self.approx.line)

    def symbols(self):
        syms = dict(self.r.hyper_symbols())
        if self.D.step_symbol is not None:
            syms["t"] = self.D.step_symbol
        return syms

    def expr(self, key, default=None, logic=False):
        if key not in self.args:
            if default is None:
                raise self.fail(f"missing argument '{key}'")
            return default
        try:
            return parse_expression(self.args.pop(key), self.symbols(), what=f"{self.approx.name}.{key}", logic=logic,
                                    choices=self.r.choices())
        except SpecError as exc:
            raise exc.located(self.r.file, self.approx.line) from None

    def count(self, key, default=1):
        """A number of draws or nodes: a positive integer, or an expression of hyperparameters (required when
        ``default`` is None)."""
        e = self.expr(key, None if default is None else sp.Integer(default))
        if e.is_number and not (e.is_Integer and e >= 1):
            raise self.fail(f"{key} must be a positive integer (or an int hyperparameter), got {e}")
        return e

    def positive(self, key, default=None):
        """A strictly positive number, or an expression of hyperparameters."""
        e = self.expr(key, default)
        if e.is_number and not (e.is_real and e > 0):
            raise self.fail(f"{key} must be positive, got {e}")
        return e

    def name(self, key, default=None):
        v = self.args.pop(key, default)
        if v is None:
            raise self.fail(f"missing argument '{key}'")
        if not isinstance(v, str):
            raise self.fail(f"argument '{key}' must be a name")
        problem = name_problem(v)
        if problem is not None:
            raise self.fail(f"argument '{key}': {problem}")
        return v

    def view(self, key):
        """The symbol through which ``key`` (a parameter, a state, 'grad' or 'hess') currently enters the update;
        a name the update does not have is a located error (recipe arguments are untrusted)."""
        v = self.D.views.get(key) if isinstance(key, str) else None
        if v is None:
            if key in ("grad", "hess"):
                raise self.fail(f"the update has no {'gradient' if key == 'grad' else 'Hessian'} to act on")
            known = ", ".join(sorted(k for k, x in self.D.views.items() if x is not None and k not in ("grad", "hess")))
            raise self.fail(f"'{key}' is not a parameter or state of this update (known: {known})")
        return v

    def when(self):
        if "when" not in self.args:
            return None
        w = self.expr("when", logic=True)
        if not isinstance(w, sp.logic.boolalg.Boolean) or (w.is_Symbol and w.is_real):
            raise self.fail(f"'when' must be a condition (a comparison or a boolean hyperparameter), got {w}")
        return w

    def done(self):
        if self.args:
            raise self.fail(f"unknown argument(s): {', '.join(sorted(self.args))}")


def _step(D):
    if D.step_symbol is None:
        D.step_symbol = sp.Symbol("t", positive=True, integer=True)
        D.symbol_names[D.step_symbol] = "t"
    return D.step_symbol


def _new_def(D, name, expr):
    taken = {str(s) for s, _ in D.defs} | {str(u[1]) for u in D.updates} | {a.name for a in D.aux_state}
    base, i = name, 1
    while name in taken:
        i += 1
        name = f"{base}{i}"
    sym = sp.Symbol(name, real=True)
    D.defs.append((sym, expr))
    return sym


def _replace(D, old, new, only=None, skip=()):
    """Substitute ``new`` for ``old`` in the updates (``only`` = names) and definitions."""
    out = []
    for name, sym, expr in D.updates:
        if name in skip or (only is not None and name not in only):
            out.append((name, sym, expr))
        else:
            out.append((name, sym, expr.xreplace({old: new})))
    D.updates = out
    if only is None:
        D.defs = [(s, e.xreplace({old: new})) for s, e in D.defs]


def _substitute_def(D, name, old, expr, skip=()):
    """Define ``name = expr`` and use it in place of ``old`` in the program (but not in the updates named
    in ``skip``, nor in the new definition itself).  Returns the new symbol."""
    sym = _new_def(D, name, expr)
    _replace(D, old, sym, skip=skip)
    D.defs[-1] = (sym, expr)
    return sym


def _rebind(D, old, new):
    """Every view that pointed at ``old`` now points at ``new``."""
    for k, v in list(D.views.items()):
        if v == old:
            D.views[k] = new


def _update_of(D, name):
    for n, sym, expr in D.updates:
        if n == name:
            return sym, expr
    raise SpecError(f"'{name}' is not a parameter updated by this recipe "
                    f"(updated: {', '.join(n for n, _, _ in D.updates)})")


def _set_update(D, name, expr):
    D.updates = [(n, s, expr if n == name else e) for n, s, e in D.updates]


def _cond(when, a, b):
    return a if when is None else sp.Piecewise((a, when), (b, True))


def _add_aux(ctx, name, init, description, when=None):
    D = ctx.D
    if name in D.recipe.family.params or any(a.name == name for a in D.aux_state):
        raise ctx.fail(f"state '{name}' already exists")
    if D.sampling is not None and name in (str(D.sampling.eps), str(D.sampling.theta)):
        raise ctx.fail(f"state '{name}' would shadow the random draw '{name}' of the sampler: pass another 'state'")
    sym = sp.Symbol(name, real=True)
    new = sp.Symbol(f"{name}_new", real=True)
    D.aux_state.append(AuxState(name, sym, new, init, description))
    D.symbol_names[new] = f"{name}_{{t+1}}"
    return sym, new


def _mean_name(D):
    """The parameter whose update consumes the gradient: the Gaussian mean, or the only free parameter of a
    non-Gaussian family (e.g. the latent weight of a Bernoulli, Sec. 4.5)."""
    fam = D.recipe.family
    m = fam.gaussian_mean
    for p in fam.params.values():
        if p.symbol == m:
            return p.name
    if m is None and len(fam.free_params) == 1:
        return fam.free_params[0].name
    raise SpecError("this approximation needs a family whose mean is one of its parameters")


def _record(ctx, title, text, eqs=()):
    from blr_derive.rules.registry import RULES
    rule = RULES[ctx.approx.name]
    ctx.D.add(ctx.approx.name, rule.equation, title, text, eqs)


# ----------------------------------------------------------------------------- passes

@register("weight_decay")
def weight_decay(ctx):
    """Coupled weight decay: the prior R(θ) = δ/2 ||θ||² of Eq. 1 under the delta method adds δm to
    the gradient and δ to the Hessian (Eq. 34 with R)."""
    D = ctx.D
    delta = ctx.expr("coefficient")
    ctx.done()
    m = D.recipe.family.params[_mean_name(D)].symbol
    g_old = D.views["grad"]
    # a zero coefficient (a runtime hyperparameter) skips the term: no work when weight decay is off
    active = sp.Ne(delta, 0) if not delta.is_number else None
    value = _cond(active, g_old + delta * _scalar(m), g_old)
    gw = _substitute_def(D, "g_wd", g_old, value)
    D.views["grad"] = gw
    eqs = [(gw, g_old + delta * _scalar(m))]
    if D.views.get("hess") is not None:
        h_old = D.views["hess"]
        hw = _substitute_def(D, "h_wd", h_old, h_old + delta)
        D.views["hess"] = hw
        eqs.append((hw, h_old + delta))
    _record(ctx, "Weight decay as a Gaussian prior", "R(θ) = δ‖θ‖²/2 added to the loss (Eq. 1), through the delta method.",
            eqs)


@register("squared_gradient_hessian")
def squared_gradient_hessian(ctx):
    """Replace the Hessian by the squared gradient (gradient magnitude, Eqs. 38 and 45)."""
    D = ctx.D
    scale = ctx.expr("scale", sp.Integer(1))
    ctx.done()
    h = D.views.get("hess")
    if h is None:
        raise ctx.fail("the update has no Hessian to approximate")
    if D.sampling is not None and _is_stat(D, h):
        # at samples: the average of the squared per-sample gradients (Eq. 45 with weight perturbation);
        # the per-sample gradient is the statistic the gradient view averages (e.g. z·∇ℓ(θ̃) under dropout masks)
        g_k = next((e for a, e in D.sampling.stats if a == D.views.get("grad")), None) or _call_symbol(D, "grad")
        est = _new_stat(D, "gsq", g_k**2)
        d = _substitute_def(D, "h_gsq", h, scale * est)
        D.views["hess"] = d
        _record(ctx, "Squared-gradient Hessian at samples", "∇²ℓ ≈ mean_k ĝ_k∘ĝ_k (Eqs. 38, 45).",
                [(h, scale * est, r"\approx")])
        return
    g = ctx.view("grad")
    _replace(D, h, scale * g**2)
    D.views["hess"] = None
    _record(ctx, "Squared-gradient Hessian", "∇²ℓ ≈ ĝ∘ĝ (Eq. 38; the Gauss–Newton/gradient-magnitude approximation of Eq. 45).",
            [(h, scale * g**2, r"\approx")])


@register("separate_learning_rates")
def separate_learning_rates(ctx):
    """Different learning rates for the mean and the scale (Eq. 36)."""
    D = ctx.D
    rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
    eqs = []
    for pname in list(ctx.args):
        if pname not in D.recipe.family.params:
            raise ctx.fail(f"'{pname}' is not a parameter of family '{D.recipe.family.name}'")
        rate = ctx.expr(pname)
        sym, expr = _update_of(D, pname)
        new = expr.xreplace({rho: rate})
        _set_update(D, pname, new)
        eqs.append((sym, new, r"\leftarrow"))
    ctx.done()
    _record(ctx, "Separate learning rates", "Each named parameter gets its own learning rate (Eq. 36).", eqs)


@register("square_root_scaling")
def square_root_scaling(ctx):
    """Precondition with sqrt(s) + eps instead of s (Eq. 38)."""
    D = ctx.D
    p = ctx.name("param")
    eps = ctx.expr("eps", sp.Integer(0))
    ctx.done()
    v = ctx.view(p)
    r = _substitute_def(D, f"{p}_root", v, sp.sqrt(v) + eps, skip=(p,))
    D.views[p] = r
    _record(ctx, "Square-root scaling", f"{p} enters the other updates as √{p} + ε (Eq. 38; ε outside the root, "
            "as RMSprop and Adam do).", [(r, sp.sqrt(v) + eps)])


@register("ema_momentum")
def ema_momentum(ctx):
    """Exponential-moving-average momentum of the gradient in the mean update (App. F, Eq. 77)."""
    D = ctx.D
    rate = ctx.expr("rate")
    name = ctx.name("state", "u")
    ctx.done()
    mean = _mean_name(D)
    g = ctx.view("grad")
    u, u_new = _add_aux(ctx, name, sp.Integer(0), "exponential moving average of the gradient")
    _replace(D, g, u_new, only=(mean,))
    D.updates.insert(0, (name, u_new, rate * u + (1 - rate) * g))
    D.views[name] = u_new
    D.views["grad"] = u_new       # later gradient passes act on what the mean update sees
    _record(ctx, "Momentum by exponential smoothing", "The mean update uses an EMA of the gradient (Eq. 77).",
            [(u_new, rate * u + (1 - rate) * g, r"\leftarrow")])


@register("debias")
def debias(ctx):
    """Adam's bias correction x / (1 - rate^t) of an EMA started at zero (a convention, not a BLR consequence)."""
    D = ctx.D
    p = ctx.name("param")
    rate = ctx.expr("rate")
    t = _step(D)
    v = ctx.view(p)
    when = ctx.when()
    ctx.done()
    h = _substitute_def(D, f"{p}_hat", v, _cond(when, v / (1 - rate**t), v), skip=(p,))
    _rebind(D, v, h)
    _record(ctx, "Bias correction", "Divide the zero-initialised average by 1 − rate^t (Adam's convention).",
            [(h, v / (1 - rate**t))])


@register("running_max")
def running_max(ctx):
    """Precondition with the running maximum of the scale (AMSGrad's convention)."""
    D = ctx.D
    p = ctx.name("param")
    when = ctx.when()
    name = ctx.name("state", f"{p}_max")
    ctx.done()
    v = ctx.view(p)
    mx, mx_new = _add_aux(ctx, name, sp.Integer(0), f"running maximum of {p}")
    D.updates.append((name, mx_new, _cond(when, sp.Max(mx, v), mx)))
    used = _substitute_def(D, f"{p}_used", v, _cond(when, mx_new, v), skip=(p, name))
    D.views[p] = used
    _record(ctx, "Running maximum", "The preconditioner uses max over time of the scale (AMSGrad).",
            [(mx_new, _cond(when, sp.Max(mx, v), mx), r"\leftarrow")])


@register("centered")
def centered(ctx):
    """Precondition with the variance of the gradient instead of its second moment (centered RMSprop)."""
    D = ctx.D
    p = ctx.name("param")
    rate = ctx.expr("rate")
    when = ctx.when()
    name = ctx.name("state", "grad_avg")
    ctx.done()
    g = ctx.view("grad")
    ga, ga_new = _add_aux(ctx, name, sp.Integer(0), "exponential moving average of the gradient")
    D.updates.insert(0, (name, ga_new, _cond(when, rate * ga + (1 - rate) * g, ga)))
    v = ctx.view(p)
    c = _substitute_def(D, f"{p}_centered", v, _cond(when, v - ga_new**2, v), skip=(p, name))
    D.views[p] = c
    _record(ctx, "Centering", "Subtract the squared running mean of the gradient from the scale.",
            [(c, _cond(when, v - ga_new**2, v))])


@register("heavy_ball_momentum")
def heavy_ball_momentum(ctx):
    """Heavy-ball momentum on the mean step (Eq. 75; Eq. 80 for a fixed-covariance Gaussian), in buffer form
    b ← γb + (1-d)·direction, m ← m - ρ·b.  dampening d, Nesterov's look-ahead and starting the buffer at
    the first direction are torch.optim conventions."""
    D = ctx.D
    gamma = ctx.expr("momentum")
    damp = ctx.expr("dampening", sp.Integer(0))
    nesterov = ctx.expr("nesterov", sp.false, logic=True) if "nesterov" in ctx.args else sp.false
    when = ctx.when()
    name = ctx.name("state", "momentum_buffer")
    ctx.done()
    rho, mean, m, d = _mean_direction(ctx)
    t = _step(D)
    b, b_new = _add_aux(ctx, name, sp.Integer(0), "momentum buffer")
    b_rule = sp.Piecewise((d, sp.Eq(t, 1)), (gamma * b + (1 - damp) * d, True))
    D.updates.insert(0, (name, b_new, _cond(when, b_rule, b)))
    step_dir = sp.Piecewise((d + gamma * b_new, nesterov), (b_new, True)) if nesterov != sp.false else b_new
    _set_update(D, mean, _cond(when, m - rho * step_dir, m - rho * d))
    _record(ctx, "Heavy-ball momentum", "Momentum on the mean step (Eq. 75; the BLR with momentum, Eq. 80, "
            "reduces to it for a fixed covariance).", [(b_new, b_rule, r"\leftarrow")])


@register("decoupled_weight_decay")
def decoupled_weight_decay(ctx):
    """AdamW: shrink the mean by ρδ outside the preconditioned step (the prior's natural gradient applied
    to the mean only)."""
    D = ctx.D
    delta = ctx.expr("coefficient")
    ctx.done()
    rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
    mean = _mean_name(D)
    m = _scalar(D.recipe.family.params[mean].symbol)
    sym, expr = _update_of(D, mean)
    _set_update(D, mean, expr - rho * delta * m)
    _record(ctx, "Decoupled weight decay", "m ← m − ρδm added to the mean update (AdamW).",
            [(sym, expr - rho * delta * m, r"\leftarrow")])


def _mean_direction(ctx):
    """Write the mean update as m − ρ·direction; returns (ρ, mean name, m, the 'direction' definition)."""
    D = ctx.D
    rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
    mean = _mean_name(D)
    m = _scalar(D.recipe.family.params[mean].symbol)
    _, expr = _update_of(D, mean)
    direction = sp.simplify(-(expr - m) / rho)
    if direction.has(rho):
        raise ctx.fail("the mean update is not of the form m - ρ·direction")
    return rho, mean, m, _new_def(D, "direction", direction)


def _scalar(x):
    """Vector symbols of elementwise updates are treated as scalars."""
    if is_mat(x):
        return sp.Symbol(x.name, real=True)
    return x


def _is_stat(D, sym):
    return D.sampling is not None and any(a == sym for a, _ in D.sampling.stats)


def _call_symbol(D, oracle):
    for k, o in D.sampling.calls:
        if o == oracle:
            return k
    k = sp.Symbol(f"{oracle}_k", real=True)
    D.sampling.calls.append((k, oracle))
    return k


def _new_stat(D, name, per_sample):
    sym = sp.Symbol(f"avg_{name}", real=True)
    D.sampling.stats.append((sym, per_sample))
    return sym


@register("minibatch")
def minibatch(ctx):
    """Mini-batch estimates of the full loss ℓ̄ = Σ_i ℓ_i: N times the mini-batch mean (Eq. 34)."""
    D = ctx.D
    n = ctx.expr("size")
    ctx.done()
    eqs = []
    for key in ("grad", "hess"):
        v = D.views.get(key)
        if v is None:
            continue
        new = _substitute_def(D, f"{key}_N", v, n * v)
        D.views[key] = new
        eqs.append((new, n * v))
    _record(ctx, "Mini-batch estimates", "The oracles return mini-batch means; the BLR needs sums over the N "
            "examples (Eq. 34).", eqs)


@register("price_estimator")
def price_estimator(ctx):
    """E_q[∇²ℓ] ≈ mean_k ∇ℓ(θ_k)(θ_k − m)/σ² (Price's theorem via Stein's lemma, from gradients at samples)."""
    D = ctx.D
    when = ctx.when()
    ctx.done()
    if D.sampling is None:
        raise ctx.fail("needs gradients at samples: add 'monte_carlo'")
    h = D.views.get("hess")
    if h is None:
        raise ctx.fail("the update has no Hessian to estimate")
    fam = D.recipe.family
    g_k = _call_symbol(D, "grad")
    m = fam.gaussian_mean
    noise = D.sampling.theta_expr - m          # σε_k, exactly the perturbation that was drawn
    nxg = _new_stat(D, "nxg", g_k * noise)
    est = nxg / fam.gaussian_cov
    new = _cond(when, est, h)
    d = _substitute_def(D, "h_price", h, new)
    D.views["hess"] = d
    _record(ctx, "Price's reparameterization estimator",
            "E_q[∇²ℓ] = E_q[∇ℓ(θ)(θ − m)]/σ² (Stein's lemma), estimated from the gradients at the samples.",
            [(d, new)])


@register("riemannian_correction")
def riemannian_correction(ctx):
    """Improved BLR (Lin et al. 2020, used by IVON): s ← (1−ρ)s + ρT + ρ²(s − T)²/(2s) keeps s > 0."""
    D = ctx.D
    p = ctx.name("param")
    ctx.done()
    rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
    fam = D.recipe.family
    if p not in fam.params:
        raise ctx.fail(f"'{p}' is not a parameter of family '{fam.name}'")
    sym, expr = _update_of(D, p)
    s_old = fam.params[p].symbol
    target = sp.simplify((expr - (1 - rho) * s_old) / rho)
    if target.has(rho):
        raise ctx.fail(f"the update of {p} is not of the form (1-ρ){p} + ρT")
    new = expr + rho**2 * (s_old - target) ** 2 / (2 * s_old)
    _set_update(D, p, new)
    _record(ctx, "Riemannian correction", "The second-order term of the improved BLR keeps the precision positive.",
            [(sym, new, r"\leftarrow")])


@register("change_variable")
def change_variable(ctx):
    """Store parameter p through a new state variable: p = value(new)."""
    D = ctx.D
    p = ctx.name("param")
    new_name = ctx.name("to")
    fam = D.recipe.family
    if p not in fam.params:
        raise ctx.fail(f"'{p}' is not a parameter of family '{fam.name}'")
    new_sym = sp.Symbol(new_name, real=True)
    syms = ctx.symbols()
    syms[new_name] = new_sym
    try:
        value = parse_expression(ctx.args.pop("value"), syms, what="change_variable.value")
    except KeyError:
        raise ctx.fail("missing argument 'value'") from None
    ctx.done()
    old = fam.params[p].symbol
    old_sym, old_expr = _update_of(D, p)
    x = sp.Dummy(new_name)
    sol = sp.solve(sp.Eq(value.xreplace({new_sym: x}), old_sym), x)
    if len(sol) != 1:
        raise ctx.fail(f"cannot invert {p} = {value} for {new_name}")
    new_new = sp.Symbol(f"{new_name}_new", real=True)
    # p_{t+1} stays a definition (written with the new variable); the state stores new_{t+1} = map⁻¹(p_{t+1})
    new_update = sol[0]
    reps = {old: value}
    D.updates = [(n, s, e.xreplace(reps)) if n != p else (new_name, new_new, new_update) for n, s, e in D.updates]
    D.defs = [(s, e.xreplace(reps)) for s, e in D.defs] + [(old_sym, old_expr.xreplace(reps))]
    if D.sampling is not None:
        D.sampling.theta_expr = D.sampling.theta_expr.xreplace(reps)
        D.sampling.stats = [(a, e.xreplace(reps)) for a, e in D.sampling.stats]
    D.renamed[p] = (new_name, new_sym, value)
    D.views[new_name] = new_new
    D.symbol_names[new_new] = f"{new_name}_{{t+1}}"
    _record(ctx, f"Change of variable {p} = {value}", "The state stores the new variable; every use of "
            f"{p} is rewritten through the map.", [(new_new, new_update, r"\leftarrow")])


@register("scale_learning_rate")
def scale_learning_rate(ctx):
    """Multiply the learning rate of the mean by a factor (IVON's rescale_lr)."""
    D = ctx.D
    factor = ctx.expr("factor")
    when = ctx.when()
    ctx.done()
    rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
    mean = _mean_name(D)
    sym, expr = _update_of(D, mean)
    lr_eff = _new_def(D, "lr_mean", _cond(when, rho * factor, rho))
    _set_update(D, mean, expr.xreplace({rho: lr_eff}))
    _record(ctx, "Scaled learning rate", "", [(lr_eff, _cond(when, rho * factor, rho))])


@register("clip_step")
def clip_step(ctx):
    """Clip the preconditioned mean step elementwise to [-radius, radius] (IVON's clip_radius)."""
    D = ctx.D
    radius = ctx.expr("radius")
    ctx.done()
    rho, mean, m, d = _mean_direction(ctx)
    sym, _ = _update_of(D, mean)
    clipped = sp.Min(sp.Max(d, -radius), radius)
    _set_update(D, mean, m - rho * clipped)
    _record(ctx, "Clipped step", "", [(sym, m - rho * clipped, r"\leftarrow")])


@register("gauss_newton_hessian")
def gauss_newton_hessian(ctx):
    """Gauss–Newton Hessian (Eq. 45): the mean over the mini-batch of squared per-example gradients,
    asked from an oracle ``ggn`` (at the mean under the delta method, at the samples under Monte Carlo)."""
    D = ctx.D
    oracle = ctx.name("oracle", "ggn")
    ctx.done()
    h = D.views.get("hess")
    if h is None:
        raise ctx.fail("the update has no Hessian to approximate")
    if D.sampling is not None and _is_stat(D, h):
        k = _call_symbol(D, oracle)
        est = _new_stat(D, oracle, k)
    else:
        fam = D.recipe.family
        est = sp.Symbol(oracle, real=True)
        D.oracle_calls.append((est, oracle, _scalar(fam.gaussian_mean),
                               "mean over the mini-batch of squared per-example gradients (Gauss-Newton, Eq. 45)"))
    _replace(D, h, est)
    D.views["hess"] = est
    _record(ctx, "Gauss-Newton Hessian", "diag ∇²ℓ ≈ mean_i (∇ℓ_i)² over the mini-batch (Eq. 45).",
            [(h, est, r"\approx")])
