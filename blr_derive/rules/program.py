"""Rewriting a derived update program: what pass and convention rules share.

The program is: oracle calls, intermediate definitions ``D.defs`` and the state updates ``D.updates``.  Rules
never pattern-match the algebra produced by sympy; they work on *views* (:class:`~blr_derive.rules.base.Views`):
``D.views.grad`` is the symbol that currently stands for the gradient, ``D.views.hess`` for the Hessian, and
``D.views.state[p]`` for the way parameter ``p`` enters the other updates.  A rule defines a new symbol, substitutes it for the view in the consuming updates
and moves the view, so rules compose in recipe order.
"""
from __future__ import annotations

import sympy as sp
from sympy.utilities.iterables import iterable

from blr_derive.core.errors import SpecError
from blr_derive.core.matexpr import is_mat
from blr_derive.rules.args import Ctx
from blr_derive.rules.base import PROGRAM_KINDS, RULES, AuxState, OracleCall, Views


def step(D):
    if D.step_symbol is None:
        D.step_symbol = sp.Symbol("t", positive=True, integer=True)
        D.symbol_names[D.step_symbol] = "t"
    return D.step_symbol


def new_def(D, name, expr):
    """A new definition ``name = expr`` (``name2``, ``name3`` ... where the name is taken, by another definition,
    an update, or a name of the recipe: a hyperparameter called ``g_wd`` would merge with the weight decay's
    gradient into a cyclic program)."""
    taken = {str(s) for s, _ in D.defs} | {str(u[1]) for u in D.updates} | {a.name for a in D.aux_state} \
        | _recipe_names(D)
    base, i = name, 1
    while name in taken:
        i += 1
        name = f"{base}{i}"
    sym = sp.Symbol(name, real=True)
    D.defs.append((sym, expr))
    return sym


def _recipe_names(D):
    """The names a recipe declares (hyperparameters, their elements and choices, data and its dimensions, the
    family's parameters) and the oracle values: what a derived quantity must not be called."""
    r = D.recipe
    names = set(r.hyper_symbols()) | set(r.choices()) | set(r.family.params)
    for d in r.data:
        names.add(d.name)
        names |= {str(x) for x in d.shape if isinstance(x, sp.Basic)}
    names |= {str(c.symbol) for c in D.oracle_calls}
    return names


def replace(D, old, new, only=None, skip=()):
    """Substitute ``new`` for ``old`` in the updates (``only`` = names) and definitions."""
    out = []
    for name, sym, expr in D.updates:
        if name in skip or (only is not None and name not in only):
            out.append((name, sym, expr))
        else:
            out.append((name, sym, expr.xreplace({old: new})))
    D.updates = out
    if only is None:
        D.defs = [(s, e if s in D.frozen else e.xreplace({old: new})) for s, e in D.defs]


def substitute_def(D, name, old, expr, skip=()):
    """Define ``name = expr`` and use it in place of ``old`` in the program (but not in the updates named
    in ``skip``, nor in the new definition itself).  Returns the new symbol."""
    sym = new_def(D, name, expr)
    replace(D, old, sym, skip=skip)
    D.defs[-1] = (sym, expr)
    return sym


def rebind(D, old, new):
    """Every view that pointed at ``old`` now points at ``new``."""
    D.views.rebind(old, new)


def update_of(D, name):
    for n, sym, expr in D.updates:
        if n == name:
            return sym, expr
    raise SpecError(f"'{name}' is not a parameter updated by this recipe "
                    f"(updated: {', '.join(n for n, _, _ in D.updates)})")


def set_update(D, name, expr):
    D.updates = [(n, s, expr if n == name else e) for n, s, e in D.updates]


def invert(forward, p, value, fail, positive=None):
    """(p = forward⁻¹(value), the number of solutions of forward(p) = value): the one solution, or for a positive p
    (a precision, a scale, or ``positive``: a new variable standing for one) the one solution that can be positive
    (s = σ⁻² gives σ = 1/√s, not −1/√s; 2 solutions).  ``fail(msg)`` makes the error."""
    positive = bool(p.is_positive) if positive is None else positive
    x = sp.Dummy("x", real=True)                # every real branch, counted before the positive one is kept
    fx = forward.xreplace({p: x})
    c = sp.diff(fx, x)
    if c != 0 and not c.has(x) and not value.has(x):
        # forward linear in p: the one solution (value - forward(0))/c, without sympy's solve (whose simplification
        # imports sympy.physics.units on its first call, ~0.1 s of a recipe)
        return sp.expand((value - fx.xreplace({x: 0})) / c), 1
    sols = sp.solve(sp.Eq(fx, value), x)
    branches = len(sols)
    if len(sols) > 1 and positive:
        sols = [s for s in sols if s.is_positive is not False]
    if len(sols) != 1:
        raise fail(f"cannot invert {forward} for {p} ({len(sols)} solutions)")
    odd = sorted({type(f).__name__ for f in sols[0].atoms(sp.Function) if type(f).__name__ not in ELEMENTARY})
    if odd:
        raise fail(f"the inverse of {forward} needs {', '.join(odd)} (not an elementary function the targets print)")
    return sols[0], branches


#: functions an inverse map may use (those every target prints)
ELEMENTARY = {"exp", "log", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
              "acosh", "atanh", "Abs", "sign"}


def cond(when, a, b):
    return a if when is None else sp.Piecewise((a, when), (b, True))


def record_prior(D, R, when):
    """Add the prior R(θ) (written for one coordinate) to the loss the objective reads (``Derivation.loss_model``).
    A scalar variable: R(θ).  A vector variable θ (a column) whose R is a x² with a free of x (weight decay's δx²/2,
    Eq. 1): the same prior on every coordinate, Σ_i a θ_i² = a θᵀθ.  Other vector priors and matrix variables:
    not followed (no objective)."""
    theta = D.recipe.family.theta
    if is_mat(theta):
        x = sp.Dummy("x", real=True)
        a = sp.simplify(R(x) / x**2)
        if (theta.shape[1] != 1 or a.has(x) or any(is_mat(s) for s in a.free_symbols)
                or sp.simplify(R(x) - a * x**2) != 0):
            D.loss_model.unfollow("a rule adds a prior R(θ) on a vector or matrix variable that is not the same "
                                  "a·θ_i² on every coordinate of a vector (the one prior over a vector whose "
                                  "expectation the objective writes, a·θᵀθ), so E_q[R] is not written")
            return
        prior = a * sp.Trace(theta.T * theta)       # the 1×1 product θᵀθ as a scalar
    elif any(is_mat(x) for x in R(theta).free_symbols):
        D.loss_model.unfollow("a rule adds a prior R(θ) that reads a vector or matrix, so E_q[R] is not written")
        return
    else:
        prior = R(theta)
    D.loss_model.prior = D.loss_model.prior + cond(when, prior, sp.Integer(0))


def name_in_use(D, name):
    """What already goes by ``name`` in the derivation (a hyperparameter, data, a parameter, a state, an oracle
    value or a definition), or None: a new state must not take it, or two quantities would merge into one symbol."""
    r = D.recipe
    if name in r.hyper_symbols() or name in r.choices():
        return f"hyperparameter '{name}'"
    for d in r.data:
        if name == d.name or name in {str(x) for x in d.shape if isinstance(x, sp.Basic)}:
            return f"data '{d.name}'" if name == d.name else f"the dimension '{name}' of data '{d.name}'"
    if name in r.family.params or any(v.state == name for v in D.renamed.values()) \
            or any(a.name == name for a in D.aux_state):
        return f"state '{name}'"
    for c in D.oracle_calls:
        if str(c.symbol) == name:
            return f"the value of oracle '{c.oracle}'"
    if any(str(s_) == name for s_, _ in D.defs):
        return f"the derivation's quantity '{name}'"
    return None


def check_new_state(ctx, name):
    """A located error when the state name a recipe chose (``state:``, ``to:``) is already in use."""
    used = name_in_use(ctx.D, name)
    if used is not None:
        raise ctx.fail(f"state '{name}': the name is already {used}; pass another name")
    return name


def add_aux(ctx, name, init, description, when=None):
    D = ctx.D
    check_new_state(ctx, name)
    if D.sampling is not None and name in (str(D.sampling.eps), str(D.sampling.theta)):
        raise ctx.fail(f"state '{name}' would shadow the random draw '{name}' of the sampler: pass another 'state'")
    sym = sp.Symbol(name, real=True)
    new = sp.Symbol(f"{name}_new", real=True)
    D.aux_state.append(AuxState(name, sym, new, init, description))
    D.symbol_names[new] = f"{name}_{{t+1}}"
    return sym, new


def mean_name(D):
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


def record(ctx, title, text, eqs=()):
    rule = RULES[ctx.approx.name]
    ctx.D.add(ctx.approx.name, rule.equation, title, text, eqs)


def mean_direction(ctx):
    """Write the mean update as m − ρ·direction; returns (ρ, mean name, m, the 'direction' definition)."""
    D = ctx.D
    rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
    mean = mean_name(D)
    m = scalar(D.recipe.family.params[mean].symbol)
    _, expr = update_of(D, mean)
    direction = sp.simplify(-(expr - m) / rho)
    if direction.has(rho):
        raise ctx.fail("the mean update is not of the form m - ρ·direction")
    return rho, mean, m, new_def(D, "direction", direction)


def scalar(x):
    """Vector symbols of elementwise updates are treated as scalars."""
    if is_mat(x):
        return sp.Symbol(x.name, real=True)
    return x


def is_stat(D, sym):
    return D.sampling is not None and any(a == sym for a, _ in D.sampling.stats)


def call_symbol(D, oracle):
    for k, o in D.sampling.calls:
        if o == oracle:
            return k
    k = sp.Symbol(f"{oracle}_k", real=True)
    D.sampling.calls.append((k, oracle))
    return k


def new_stat(D, name, per_sample):
    sym = sp.Symbol(f"avg_{name}", real=True)
    D.sampling.stats.append((sym, per_sample))
    return sym


def apply_program_rules(recipe, D, fail):
    """The recipe's pass and convention rules, in recipe order, on the derived update program (each rewrites the
    views it names); the update is first written coordinate-wise where it acts elementwise.  ``fail(msg,
    approx)`` makes a located error."""
    passes = [a for a in recipe.approximations
              if RULES[a.name].kind in PROGRAM_KINDS or RULES[a.name].rewrites_in_program(D)]
    D.elementwise = recipe.family.elementwise or scalarize_elementwise(D, dry=True)
    if not passes:
        return
    # a rule that rewrites matrix programs too says so (``matrix_programs = True``)
    scalar_only = [a for a in passes if not RULES[a.name].matrix_programs]
    if not D.elementwise and scalar_only:
        raise fail(f"approximation '{scalar_only[0].name}' needs an elementwise update; this update mixes "
                    "coordinates (matrix products)", scalar_only[0])
    if not recipe.family.elementwise:
        scalarize_elementwise(D)
    views = D.views = Views()
    for c in D.oracle_calls:
        views.set_oracle(c.oracle, c.symbol)
    if D.sampling is not None:
        for avg, e in D.sampling.stats:
            for k_sym, oracle in D.sampling.calls:
                if e == k_sym:
                    views.set_oracle(oracle, avg)
        for oracle, avg in D.sampling.views.items():
            views.set_oracle(oracle, avg)
        views.covariance_factor = D.sampling.covariance_factor
        if D.sampling.grad_stat is not None:
            views.grad = D.sampling.grad_stat
    for name, sym, _ in D.updates:
        views.state[name] = sym
    for a in passes:
        try:
            RULES[a.name].rewrite(Ctx(D, a))
        except SpecError as exc:                   # e.g. a helper's unlocated error: name the approximation's line
            raise exc.located(recipe.file, a.line) from None
    # dead definitions and oracle calls are dropped
    used = set()
    for _, _, e in D.updates:
        used |= e.free_symbols
    changed = True
    while changed:
        changed = False
        for s, e in D.defs:
            if s in used and not e.free_symbols <= used:
                used |= e.free_symbols
                changed = True
    D.defs = [(s, e) for s, e in D.defs if s in used]
    D.oracle_calls = [c for c in D.oracle_calls if c.symbol in used]
    if D.sampling is not None:
        sm = D.sampling
        sm.stats = [(a, e) for a, e in sm.stats if a in used]
        needed = set()
        for _, e in sm.stats:
            needed |= e.free_symbols
        kept = []
        for c in reversed(sm.chained):         # a chained call's point reads the calls before it
            if c.symbol in needed:
                kept.insert(0, c)
                needed |= c.point_expr.free_symbols
        sm.chained = kept
        sm.reductions = [(r, e) for r, e in sm.reductions if r in needed]
        for _, e in sm.reductions:
            needed |= e.free_symbols
        sm.calls = [(k, o) for k, o in sm.calls if k in needed]


def scalarize_elementwise(D, dry=False):
    """Vector updates that only add and scale vectors act coordinate-wise: rewrite them with scalars."""
    def ok(e):
        # every distinct node once (a subexpression that recurs in an update, as in a large sum over a support,
        # is looked at once; the answer depends only on which nodes occur)
        seen, todo = set(), [e]
        while todo:
            node = todo.pop()
            if isinstance(node, sp.Basic):
                if node in seen:
                    continue
                seen.add(node)
            if isinstance(node, (sp.Inverse, sp.Transpose, sp.Trace, sp.Determinant, sp.Identity)):
                return False
            if isinstance(node, sp.MatrixSymbol) and node.shape[1] != 1:
                return False
            if isinstance(node, sp.MatMul) and sum(1 for a in node.args if is_mat(a)) > 1:
                return False
            if isinstance(node, sp.Basic):
                todo.extend(node.args)
            elif iterable(node):
                todo.extend(node)
        return True
    # the definitions the updates and the oracles' arguments read (a gradient derived from an explicit loss,
    # g = m - y) are written with scalars too, or the update would read a scalar g that nothing defines
    read = set()
    for _, _, e in D.updates:
        read |= e.free_symbols
    for c in D.oracle_calls:
        read |= c.argument.free_symbols
    needed = set()
    changed = True
    while changed:
        changed = False
        for s_, e in D.defs:
            if s_ in read and s_ not in needed:
                needed.add(s_)
                read |= e.free_symbols
                changed = True
    if not all(ok(e) for _, _, e in D.updates) or not all(ok(e) and (not is_mat(s_) or s_.shape[1] == 1)
                                                             for s_, e in D.defs if s_ in needed):
        return False
    if dry:
        return True

    def scal(e):
        return scalar_expr(e)
    D.defs = [(sp.Symbol(s_.name, real=True) if is_mat(s_) else s_, scal(e)) if s_ in needed else (s_, e)
              for s_, e in D.defs]
    D.frozen = {sp.Symbol(s_.name, real=True) if is_mat(s_) and s_ in needed else s_ for s_ in D.frozen}
    # the vector data go coordinate-wise with the state: those the updates read (a recipe's vector data, the
    # broadcast global parameters and the duals of a federated section) and any other of the state's dimension,
    # each read with the state's shape, one value per coordinate (a data vector of shape (P,) next to a state
    # written with scalars would be two programs in one: the update reads m_g as a coordinate)
    dim = D.recipe.family.dim
    D.scalar_data = {d.name for d in D.recipe.data if is_mat(d.symbol) and d.symbol.shape[1] == 1
                     and (d.symbol in read or (dim is not None and d.symbol.shape[0] == dim))}
    D.updates = [(n, sp.Symbol(s.name, real=True), scal(e)) for n, s, e in D.updates]
    # an oracle's argument is a state or an expression of one (straight_through: binary(lam))
    D.oracle_calls = [OracleCall(sp.Symbol(c.symbol.name, real=True), c.oracle, scal(c.argument), c.description)
                      for c in D.oracle_calls]
    return True


def scalar_expr(e):
    """The same expression with vector symbols read as scalars (coordinate-wise)."""
    if isinstance(e, sp.MatrixSymbol):
        return sp.Symbol(e.name, real=True)
    if isinstance(e, sp.MatAdd):
        return sp.Add(*[scalar_expr(a) for a in e.args])
    if isinstance(e, sp.MatMul):
        return sp.Mul(*[scalar_expr(a) for a in e.args])
    if not e.args:
        return e
    return e.func(*[scalar_expr(a) for a in e.args])


def hessian_to_replace(ctx, what="approximate"):
    """The Hessian view a rule is about to replace by an estimate (the squared gradient, Gauss–Newton, Price's
    estimator ...).  An estimate replaces the whole view, so a damping added before it would be dropped: that order
    is refused with what to write instead."""
    D = ctx.D
    h = D.views.hess
    if h is None:
        raise ctx.fail(f"the update has no Hessian to {what}")
    if h == D.views.damped_hess:
        raise ctx.fail(f"hessian_damping comes before this rule, which replaces the damped Hessian by its estimate, "
                       f"so γ would be lost: list hessian_damping after {ctx.approx.name}")
    return h
