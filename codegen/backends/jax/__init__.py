"""jax target: an ``optax.GradientTransformation`` factory per elementwise recipe.

The generated module defines ``<recipe>(**hyperparameters)`` (hyperparameters as keyword arguments, with the
recipe's defaults) returning ``optax.GradientTransformation(init, update)``: ``init(params)`` builds the state (a
``NamedTuple`` of pytrees shaped like ``params``, with the step ``count`` where the update reads the step) and
``update(grads, state, params)`` returns the *updates* (new parameter − parameter, applied with
``optax.apply_updates``) and the new state.  Any pytree of floating-point arrays is accepted; the update of every
leaf is the recipe's update IR printed as ``jax.numpy`` code (codegen/backends/jax/printer.py), and nothing is
decided in Python on a traced value, so ``jax.jit`` and ``optax.inject_hyperparams`` work (booleans and choices are
static, numbers may be traced).

Same scope and lowering as the torch target (codegen/lower.py): elementwise recipes whose oracles are taken at the
parameter or at samples of q.  Monte Carlo recipes return the transformation with three more functions, in the
style of ivon-optax: ``sample_parameters(key, params, state)`` (an explicit ``jax.random`` key; returns the sample
and its noise), ``perturb(noise, params, state)`` (the sample for given noise) and ``accumulate(grads, state,
noise, params)`` (adds one sample's statistics to the state); ``update`` then steps with the averages and ignores
its gradient argument.  Oracles other than the gradient are keyword arguments of ``update`` (or ``accumulate``).

Every other single-family recipe (one that :func:`optimizer_plan` refuses: a matrix update, data inputs, a
Hessian oracle, samples of q from a rejection sampler or with fitness shaping, quadrature, the family's parameter
maps, entry points besides ``init``/``step``, a state without an initial value ...) is written as a module of plain
``jax.numpy`` functions that mirrors the numpy target's module: ``init``, a pure ``jax.jit``-compatible
``step(state, *, oracles=None, data=None, key=None, **hyperparameters)`` (an explicit ``jax.random`` key for
samples of q), the parameter maps, the entry points and ``parameter`` (codegen/backends/jax/functions.py,
templates/functions.py.j2).  Factorized (several-block) recipes are plain functions too
(codegen/backends/jax/factorized.py).  What neither can express raises UnsupportedTarget naming the recipe entry.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import sympy as sp

from blr_derive.codegen.backends.jax.config import CONFIG
from blr_derive.codegen.backends.jax.context import (Signature, StatView, StateView, TransformationContext,
                                                     TxSamplingView)
from blr_derive.codegen.context import render
from blr_derive.codegen.objective import objective_view, target_note
from blr_derive.codegen.backends.jax.factorized import render_factorized
from blr_derive.codegen.backends.jax.functions import (RESERVED as FUNCTION_RESERVED, functions_view,
                                                      hyperparameter_names, refuse_reserved)
from blr_derive.codegen.backends.jax.mixture_axis import render_component_axis
from blr_derive.codegen.backends.jax.printer import JaxPrinter, is_static, static_part
from blr_derive.codegen.inert import identifier, template_env
from blr_derive.codegen.model import structure_of
from blr_derive.codegen.validation import validation
from blr_derive.codegen.lower import check_optimizer, host_states, plan_optimizer, state_conditions, state_symbols
from blr_derive.core.errors import CodegenError, UnsupportedTarget
from blr_derive.core.names import name_problem
from blr_derive.ir.common import need_conditions

#: the draws of a sample of q -> the jax.random function that makes them
DRAWS = {"normal": "normal", "uniform": "uniform"}
#: the template of a single-family recipe that is not an optax transformation: plain jax.numpy functions
FUNCTIONS_TEMPLATE = "functions.py.j2"
#: names the template gives state fields besides the recipe's state
RESERVED = ("count", "samples")


class JaxTarget:
    config = CONFIG
    name = CONFIG.name
    suffix = CONFIG.suffix
    modules = CONFIG.modules
    template = CONFIG.template

    def __init__(self):
        self.env = template_env(Path(__file__).parent / "templates", Path(__file__).parent / "runtime.py")

    def check(self, ir):
        check_optimizer(ir, self.name)

    def render(self, ir) -> str:
        if structure_of(ir) == "product":   # several blocks: plain jax.numpy functions (codegen/backends/jax/factorized.py)
            return render_factorized(self.env, ir)
        if getattr(ir, "components", None) is not None:   # a mixture with the components as an array axis
            return render_component_axis(self.env, ir)
        # the optax transformation binds jax, jnp and optax like the function modules (a hyperparameter named jnp
        # shadowed the module): the same located refusal
        refuse_reserved(ir, (("hyperparameters", hyperparameter_names(ir)), ("approximations", [v.name for v in ir.state])))
        try:
            plan = optimizer_plan(ir, self.name)
        except UnsupportedTarget:
            # not an optimizer over a parameter pytree (a matrix update, data inputs, a Hessian oracle, samples of q
            # the lowering cannot split per leaf, quadrature, maps, entry points, a state without an initial value
            # ...): plain jax.numpy functions mirroring the numpy target's module (codegen/backends/jax/functions.py)
            return render(self.env, FUNCTIONS_TEMPLATE, functions_view(ir))
        static = {str(s) for h in ir.hyperparameters if h.kind in ("bool", "choice") for s in h.symbols}
        pr = JaxPrinter(static)
        by_name = state_symbols(ir)
        scalars = set(host_states(plan, peer_only=False))          # one number for the whole pytree
        tensors = _tensors(plan, by_name, scalars)
        host_lines, leaf_lines = self.program(plan, pr, static, tensors, by_name)
        states = self.states_view(plan, pr, static, scalars)
        names = [s["name"] for s in states]
        stats, sampling = [], None
        if ir.sampling is not None:
            sampling = self.sampling_view(plan, pr, static)
            stats = sampling["stats"]
            names += [s["field"] for s in stats]
        clash = sorted(set(names) & set(RESERVED))
        twice = sorted({n for n in names if names.count(n) > 1})
        if clash:
            raise UnsupportedTarget(f"recipe '{ir.recipe}': the jax target keeps {', '.join(RESERVED)} in its state "
                                    f"itself; rename the recipe's state {', '.join(clash)}", "approximations")
        if twice:
            raise UnsupportedTarget(f"recipe '{ir.recipe}': the jax target would keep two states named "
                                    f"{', '.join(twice)} (a state of the recipe, and the running sum over samples it "
                                    "keeps as acc_<statistic>); give the recipe's state another name", "approximations")
        factory, state_class, tx_class = (_factory_name(ir.recipe), identifier(f"{ir.class_name}State"),
                                          identifier(f"{ir.class_name}Transformation"))
        _refuse_class_clash(ir, factory, (state_class, tx_class))
        leaf_args = ([plan.mean] if plan.mean is not None else ["_param"]) + \
            [s["name"] for s in states if not s["scalar"]] + [str(c.symbol) for c in ir.oracle_calls] + \
            [str(a) for a in plan.stats_in]
        printed = host_lines + leaf_lines + [s["init"] for s in states] + [s["keep"] or "" for s in states] + (
            [sampling["theta_line"]] + [s["value"] for s in stats] + [s["keep"] or "" for s in stats] if sampling else [])
        used = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", "\n".join(printed)))
        step = None if ir.step_symbol is None else identifier(str(ir.step_symbol))
        scalar_states = [s for s in states if s["scalar"]]
        numbers = _numbers(ir.hyperparameters)
        reads = {
            "init": _reading(numbers, [s["init"] for s in states]),
            "update": _reading(numbers, host_lines + leaf_lines),
            "sample": _reading(numbers, [sampling["theta_line"]] + [s["value"] for s in stats] if sampling else []),
        }
        objective = _objective(ir, pr, plan.mean, tx_class, plan.parameter)
        return render(self.env, self.template, TransformationContext(
            special=any("jax.scipy.special." in line for line in printed), used=used,
            uses_optax=step is not None or bool(scalar_states) or sampling is None or bool(numbers),
            ir=ir, factory=factory, state_class=state_class, tx_class=tx_class, hyper=_signature(ir.hyperparameters),
            validation=validation(ir, self.name), step=step,
            states=states, host_lines=host_lines, leaf_lines=leaf_lines, leaf_args=leaf_args,
            leaf_states=[s for s in states if not s["scalar"]], scalar_states=scalar_states,
            grads=[(str(c.symbol), c.oracle) for c in ir.oracle_calls],
            other_oracles=[(o, d) for o, d in ir.oracles if o != "grad"],
            stat_inputs=[(str(a), f"acc_{a}") for a in plan.stats_in], sampling=sampling, stats=stats,
            mean=plan.mean, point=None if plan.mean is not None else sp.sstr(plan.parameter),
            numbers=numbers, reads=reads, objective=objective, objective_note=target_note(ir, objective),
        ))

    @staticmethod
    def program(plan, pr, static, tensors, by_name):
        """The step as (host lines, per-leaf lines): the assignments the new state and the parameter's increment
        read, each under the static part of the condition under which it is read; ``tensors`` grows by the values
        computed per leaf."""
        ir = plan.ir
        outputs, defs = dict(ir.outputs), dict(ir.assignments)
        delta_sym = sp.Symbol("_delta")
        if plan.mean is not None:
            delta = _increment(outputs[plan.mean], defs, by_name[plan.mean])
        else:
            delta = plan.param_new[1] - sp.Symbol("_param")
            tensors.add(sp.Symbol("_param"))
        kept = [(v.name, outputs.get(v.name, v.symbol)) for v in plan.others]
        program = _needed(ir.assignments, [delta] + [s for _, s in kept]) + [(delta_sym, delta)]
        outs = [(n, s) for n, s in kept if s in defs] + [("_delta", delta_sym)]
        need = need_conditions(program, outs, [s for s, _ in program])
        for sym, expr in program:
            if expr.free_symbols & tensors:
                tensors.add(sym)
        host_lines: list[str] = []
        leaf_lines: list[str] = []
        for sym, expr in program:
            guard = static_part(need[sym], static)
            if guard == sp.false:
                continue
            line = f"{identifier(str(sym))} = {pr.doprint(expr)}"
            lines = leaf_lines if sym in tensors else host_lines
            lines += [f"if {pr.doprint(guard)}:", "    " + line] if guard != sp.true else [line]
        return host_lines, leaf_lines

    @staticmethod
    def states_view(plan, pr, static, scalars) -> list[StateView]:
        """The state besides the parameter: its initial value, its new value's name and, for a state that only a
        static setting reads, the Python condition under which it is kept (None: always)."""
        conds = state_conditions(plan)
        outputs = dict(plan.ir.outputs)
        out: list[StateView] = []
        for v in plan.others:
            c = conds[v.name]
            keep = None if c == sp.true or not is_static(c, static) else pr.doprint(c)
            init = "param" if v.init_state == "param" else pr.doprint(sp.sympify(v.init))
            out.append({"name": identifier(v.name), "new": identifier(str(outputs.get(v.name, v.symbol))),
                        "init": init, "scalar": v.name in scalars, "keep": keep, "desc": v.description})
        return out

    @staticmethod
    def sampling_view(plan, pr, static) -> TxSamplingView:
        """Monte Carlo recipes: the sample θ(ε) and the per-sample statistics, per leaf."""
        sm = plan.ir.sampling
        if sm.draw not in DRAWS:
            raise UnsupportedTarget(f"recipe '{plan.ir.recipe}': the jax target samples q with normal or uniform "
                                    f"draws only (got '{sm.draw}')", "approximations")
        theta_line = f"{identifier(str(sm.theta))} = {pr.doprint(sm.theta_expr)}"
        stats: list[StatView] = []
        for avg, e in sm.stats:
            guard = static_part(plan.stat_need[avg], static)
            stats.append({"name": identifier(str(avg)), "field": identifier(f"acc_{avg}"),
                          "value": pr.doprint(e), "keep": None if guard == sp.true else pr.doprint(guard),
                          "never": guard == sp.false})
        return {"eps": identifier(str(sm.eps)), "theta": identifier(str(sm.theta)), "theta_line": theta_line,
                "theta_text": sp.sstr(sm.theta_expr), "draw": DRAWS[sm.draw], "stats": stats,
                "needs_theta": any(sm.theta in e.free_symbols for _, e in sm.stats),
                "calls": [(identifier(str(k)), o) for k, o in sm.calls], "samples": pr.doprint(sm.samples)}


def optimizer_plan(ir, target):
    """The optimizer lowering's plan (codegen/lower.py) of a recipe that is an optax transformation: an elementwise
    update of a parameter pytree whose oracles are the gradient at the parameter or at samples of q; otherwise the
    UnsupportedTarget that says why not."""
    check_optimizer(ir, target)
    for sym, expr in ir.assignments:
        if isinstance(expr, sp.MatrixExpr) or expr.has(sp.MatrixSymbol):
            raise UnsupportedTarget(f"recipe '{ir.recipe}': the {target} target needs an elementwise update; "
                                    f"'{sym}' is a matrix expression", "family")
    return plan_optimizer(ir, target)       # refuses e.g. a state with neither an initial value nor the parameter's


def _tensors(plan, by_name, scalars):
    """The symbols bound to one leaf's arrays: the state (but the scalar states), the parameter, the oracle values
    and the Monte Carlo averages."""
    ir = plan.ir
    states = [v for v in (plan.others if plan.mean is not None else ir.state) if v.name not in scalars]
    out = {v.symbol for v in states} | {by_name[v.name] for v in states}
    out |= {c.symbol for c in ir.oracle_calls} | set(plan.stats_in)
    if plan.mean is not None:
        out |= {by_name[plan.mean], sp.Symbol(plan.mean, real=True)}
    return out


def _increment(new, defs, mean):
    """The parameter's increment (new − old) as an expression, with the intermediate sums that carry the mean as a
    term (``t_1 = lr*u_hat/s_root - m``) inlined, so that the mean cancels symbolically instead of being added
    and subtracted in floating point; Piecewise branches each lose the mean."""
    expr = defs[new]
    for _ in range(len(defs)):
        subs = {s: defs[s] for s in expr.free_symbols
                if isinstance(defs.get(s), sp.Add) and any(a in (mean, -mean) for a in defs[s].args)}
        if not subs:
            break
        expr = expr.xreplace(subs)
    return _minus(expr, mean)


def _minus(expr, mean):
    if isinstance(expr, sp.Piecewise):
        return sp.Piecewise(*[(_minus(e, mean), c) for e, c in expr.args])
    return expr - mean


def _needed(assignments, finals):
    """The assignments that the final expressions read (directly or through others), in program order."""
    need = set()
    for f in finals:
        need |= f.free_symbols
    out = []
    for sym, expr in reversed(assignments):
        if sym in need:
            need |= expr.free_symbols
            out.append((sym, expr))
    return out[::-1]


def _factory_name(recipe: str) -> str:
    """The factory function is named after the recipe: a name the module binds itself (jax, jnp, optax) or a
    builtin would shadow it (``name: jax`` gave a module whose 'jax.tree_util' was the factory)."""
    problem = name_problem(recipe, "prefix") or (f"'{recipe}' is a module the jax target imports"
                                                 if recipe in FUNCTION_RESERVED else None)
    if problem is not None:
        raise CodegenError(f"the jax target names its optax factory after the recipe: {problem}; rename the recipe",
                           "name")         # located at the recipe's name (it was the approximations' line)
    return identifier(recipe)


def _refuse_class_clash(ir, factory, classes):
    """The optax module defines the classes ``<class_name>State`` and ``<class_name>Transformation`` next to the
    factory named after the recipe, whose arguments are the hyperparameters: none of these may share a name (a
    hyperparameter named like the state class shadowed it inside the factory; a recipe named so replaced it)."""
    for key, names in (("hyperparameters", hyperparameter_names(ir)), ("name", [factory])):
        clash = sorted(set(names) & set(classes))
        if clash:
            raise UnsupportedTarget(f"recipe '{ir.recipe}': the jax target defines the classes {' and '.join(classes)} "
                                    f"(from class_name '{ir.class_name}'); rename {', '.join(clash)} or set another "
                                    "class_name", key)


def _numbers(hyperparameters) -> list[str]:
    """The names the factory binds to numbers it may be given as schedules (optax's ScalarOrSchedule: a callable of
    the step count): each float hyperparameter and each element of a tuple of numbers.  Booleans, choices and
    integers (sample counts) are static settings, never schedules."""
    out: list[str] = []
    for h in hyperparameters:
        if h.kind == "float":
            out.append(identifier(h.name))
        elif h.kind == "tuple":
            out += [identifier(str(s)) for s in h.symbols]
    return out


def _reading(numbers, lines) -> list[str]:
    """The numbers of ``numbers`` that the printed ``lines`` read (a function evaluates their schedules)."""
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", "\n".join(lines)))
    return [n for n in numbers if n in names]


def _signature(hyperparameters) -> Signature:
    """The factory's arguments: required ones first, then those with defaults, then the keyword-only ones."""
    required = [h for h in hyperparameters if h.default is None and not h.keyword_only]
    optional = [h for h in hyperparameters if h.default is not None and not h.keyword_only]
    keyword = [h for h in hyperparameters if h.keyword_only]
    return {"positional": required + optional, "keyword": keyword, "all": hyperparameters}


TARGET = JaxTarget()


#: how E_q[ℓ] is had, in the optax module's objective() docstring (the kind is the derivation's)
_OBJECTIVE_WHAT = {
    "exact": "E_q[ℓ] is closed (the derivation's exact expectation, in the state), so ``loss`` must be None; "
             "'standard_error' is 0.0 and 'samples' 0.",
    "monte_carlo": "the recipe samples q, so E_q[ℓ] is a Monte Carlo estimate from ``loss``, the values of the loss "
                   "the oracles evaluate (ℓ_o) at samples of q at this state (e.g. at the samples of "
                   "``sample_parameters``), one number per sample: with ℓ = {loss}, 'expected_loss' is {scale} × their "
                   "mean + the expectation of the other terms (closed form, summed over the leaves), "
                   "'standard_error' its standard error ({scale} × the sample standard deviation / √n; NaN for one "
                   "value) and 'samples' n.",
    "delta": "the update reads the loss only through oracles at {point} (no samples), so E_q[ℓ] is the delta method's "
             "ℓ({point}) (Sec. 4.2): ``loss`` is ℓ_o({point}), the loss the oracles evaluate at the parameters (one "
             "number); with ℓ = {loss}, 'expected_loss' is ℓ({point}) and 'objective' the delta-method value "
             "ℓ({point}) − H(q) ('standard_error' NaN, 'samples' 1).",
}


def _objective(ir, pr, mean, tx_class, parameter=None):
    """The module-level ``objective(params, state, loss=None, **hyperparameters)`` of an optax module: the parts the
    optimizer targets print (codegen/objective.py), here per leaf of the parameter pytree and summed over the
    leaves (q is a product over the coordinates of every leaf: its entropy and E_q[ℓ]'s closed terms add up);
    None where the IR has no objective parts.  Where the parameters hold the mean, the mean is read from them;
    where they hold another function of q (``parameter``, e.g. a sign of a natural parameter), every parameter of
    q is in the optimizer state and is read there (``params`` give the pytree's structure)."""
    view = objective_view(ir, {}, pr)
    if view is None:
        return None
    parts = ir.objective_parts
    where = ("at ``params`` (the mean of q) and ``state`` (this transformation's optimizer state)" if mean is not None
             else f"at ``state`` (this transformation's optimizer state, which holds q; ``params`` hold "
                  f"{sp.sstr(parameter)} and give the pytree's structure)")
    head = (f"The objective the update minimizes {where}: the recipe drops the entropy of L(q) = E_q[ℓ(θ)] − H(q) "
            "(Khan & Rue 2023, Eq. 2; no_entropy, Sec. 4.5), so it is E_q[ℓ] alone and 'entropy' is 0; "
            if parts.no_entropy else
            f"The BLR's objective L(q) = E_q[ℓ(θ)] − H(q) (Khan & Rue 2023, Eq. 2) {where}, which the update "
            "minimizes over the family: q is a product over every coordinate of every leaf of the pytree, so H(q), "
            "the family's entropy (App. B) with its constants, is summed over all of them, and so are the closed "
            "terms of E_q[ℓ]; ")
    what = _OBJECTIVE_WHAT[parts.kind].format(point=parts.point, loss=parts.loss, scale=sp.sstr(parts.scale))
    doc = (head + what + " Hyperparameters are keywords with the factory's defaults (a schedule is read at "
           "state.count).  Computed eagerly in the parameters' precision (call it outside jax.jit), the numbers of "
           "the numpy target's objective() on the same state; returns {'objective': L, 'expected_loss': E_q[ℓ], "
           "'entropy': H, 'standard_error', 'estimate', 'samples'} (OBJECTIVE_KEYS) as Python floats."
           + (f"  Here {parts.note}." if parts.note else ""))
    return {**view, "point": parts.point,
            "doc": textwrap.fill(doc, 112, initial_indent="   ", subsequent_indent="    ", break_on_hyphens=False)[3:]}
