"""The lowering that the optimizer targets (torch, triton) share: what the torch parameter holds, the rest of the
state and its initial values, the outputs of a step, the host conditions under which the program reads each
value, and which hyperparameters each part of the generated module needs.  The targets then print the program
with their own compilers (multi-tensor ``_foreach`` calls, fused kernels)."""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

import sympy as sp

from blr_derive.core.errors import CodegenError, UnsupportedTarget
from blr_derive.ir.common import need_conditions
from blr_derive.ir.model import HyperVar, UpdateIR, Var
from blr_derive.codegen.inert import pystr

#: sampling draws the optimizer targets support -> the torch function that makes them
DRAWS = {"normal": "randn", "uniform": "rand"}


def check_optimizer(ir, target: str, chained: bool = False, shaped: bool = False, data_state: bool = False,
                    matrices: bool = False):
    """Whether an optimizer target can express the recipe (UnsupportedTarget, naming the recipe entry, if not):
    an elementwise update whose oracles are the gradient at what the parameter holds, or at samples of q (and,
    for a target that evaluates them (``chained``), at points computed from those gradients, Sampling.chained;
    for a target that keeps every sample of a step until step() (``shaped``), loss values ranked over the samples,
    Sampling.shaping).  A target that keeps data as per-parameter state (``data_state``) takes an abstract loss's
    per-coordinate data that declare a default.  A target that prints an array program per parameter
    (``matrices``: the torch target's codegen/backends/torch/matrix.py) takes state that is a matrix."""
    def no(msg, key):
        raise UnsupportedTarget(f"recipe '{ir.recipe}': the {target} target {msg}", key)
    if not ir.elementwise:
        no(f"needs an elementwise (mean-field) update; family '{ir.family.text}' mixes coordinates (matrix "
           "products, solves)", "family")
    matrix = next((v.name for v in ir.state if v.kind == "matrix"), None)
    if matrix is not None and not matrices:
        no(f"needs an elementwise (mean-field) update; state '{matrix}' is a matrix (matrix products, "
           "eigendecompositions: the numpy and jax targets print them)", "family")
    if not matrices:
        for sym, expr in ir.assignments:
            if isinstance(expr, sp.MatrixExpr) or expr.has(sp.MatrixSymbol):
                no(f"needs an elementwise update, one coordinate at a time; '{sym}' is written with vectors or "
                   f"matrices (family '{ir.family.text}' is over a vector θ): use a family whose coordinates are "
                   f"separate (e.g. gaussian_diag, gaussian_fixed_precision), or the numpy or jax target", "family")
    if ir.mean is None and ir.parameter is None:
        ex = next((v.name for v in ir.state if v.family), "...")
        no(f"needs a family with a mean parameter, or a recipe 'parameter' saying what the {target} parameter "
           f"holds, an expression of the family's parameters (e.g. its mean): in the recipe parameter: {ex}, on "
           f"the command line --set 'parameter={ex}'", "family")
    if ir.data and not data_state:
        no("takes no data inputs (the loss is the model's)", "loss")
    for d in ir.data:
        if d.kind not in ("scalar", "elementwise"):     # elementwise: one value per coordinate (ir/build.py)
            no(f"keeps data as per-parameter state of the parameter's shape; data '{d.name}' has its own shape "
               "(declare it with shape [])", "loss")
        if d.init is None:
            # only an abstract loss's data may declare a default (spec/hyper.py): say what works for either kind
            no(f"keeps data as per-parameter state from a default, which only an abstract loss's data declare "
               f"({{{d.name}: {{shape: [], default: 1.0}}}} under loss: data); data '{d.name}' has none: the data of an "
               f"explicit loss can be a hyperparameter instead ({{{d.name}: {{default: 1.0}}}} under hyperparameters)",
               "loss")
    for c in ir.oracle_calls:
        if (str(c.argument) != ir.mean) if ir.mean is not None else (c.argument != ir.parameter):
            no(f"evaluates oracles at the parameters (the mean) or at samples of q; '{c.oracle}' is asked at "
               f"{c.argument}", "approximations")
        if c.oracle == "hess":
            no("has no Hessian oracle; add an approximation (squared_gradient_hessian, gauss_newton_hessian, "
               "price_estimator)", "approximations")
    for c in getattr(ir, "checks", None) or ():
        if c.source in ("estimate", "finite"):     # unchecked here (no host synchronization): a sampled natural
            continue                                # gradient, or a value that only float64 can make NaN or inf
        no(f"does not check at run time that '{c.name}' stays {c.domain.replace('_', ' ')}, and the derivation cannot "
           f"guarantee it: {c.hint} (the numpy and jax targets check it)", "approximations")
    if ir.sampling is not None:
        if ir.sampling.draw == "tanh_sinh":
            no("evaluates the loss at random samples of q; the recipe's 'quadrature' evaluates it at deterministic "
               "nodes (the numpy target)", "approximations")
        sm = ir.sampling
        if (sm.chained or sm.reductions or sm.draw == "point") and not chained:
            no("evaluates each sample's oracles at its draw only; the recipe evaluates an oracle at a point "
               "computed from an earlier oracle's value (sharpness_aware; the numpy, torch and triton targets)",
               "approximations")
        if ir.sampling.draw not in DRAWS and not (chained and ir.sampling.draw == "point"):
            no(f"samples q with normal or uniform draws only (got '{ir.sampling.draw}')", "approximations")
        if getattr(ir.sampling, "accept", None) is not None:
            no("draws once per sample; the family's sampler rejects draws until a condition holds (the numpy "
               "target draws again)", "family")
        if getattr(ir.sampling, "more_draws", None):
            no("draws one random number per sample; the family's sampler uses "
               f"{1 + len(ir.sampling.more_draws)} (the numpy target draws any number)", "family")
        if getattr(ir.sampling, "shaping", None) is not None and not shaped:
            no("accumulates each sample's statistics as it is drawn; 'fitness_shaping' ranks the loss values over "
               "all samples of a step first (the numpy, torch and triton targets)", "approximations")
        for _, o in list(ir.sampling.calls) + [(c[0], c[1]) for c in ir.sampling.chained]:
            if o == "hess":
                no("has no Hessian oracle at samples; add an approximation (price_estimator, "
                   "squared_gradient_hessian, gauss_newton_hessian)", "approximations")


@dataclass
class OptimizerPlan:
    ir: UpdateIR
    mean: str | None                   # the state that is the parameter itself, or None
    parameter: sp.Expr | None          # else what the parameter holds, an expression of the state
    state_syms: set[sp.Symbol]
    state_names: list[str]
    others: list[Var]                  # the state besides the parameter (kept in optimizer.state)
    outputs: list[tuple[str, str]]     # (state name, printed symbol): new values of the other state
    param_new: tuple[sp.Symbol, sp.Expr] | None = None   # what the parameter holds after the step
    stats_in: list[sp.Symbol] = field(default_factory=list)                 # Monte Carlo averages the update reads
    stat_need: dict[sp.Symbol, sp.Basic] = field(default_factory=dict)     # average -> host condition it is drawn under
    need: dict[sp.Symbol, sp.Basic] = field(default_factory=dict)          # program value -> host condition it is read under
    init_hyper: list[HyperVar] = field(default_factory=list)
    theta_hyper: list[HyperVar] = field(default_factory=list)
    grads: list[tuple[str, str]] = field(default_factory=list)            # (printed symbol, oracle) at the parameter
    other_oracles: list[str] = field(default_factory=list)

    def hyper_using(self, names):
        """The hyperparameters with a symbol among ``names`` (printed symbol names)."""
        return [h for h in self.ir.hyperparameters if any(str(s) in names for s in h.symbols)]

    def stat_symbols(self) -> set[str]:
        """Names the per-sample statistics (and their conditions) read."""
        out: set[str] = set()
        sampling: Any = self.ir.sampling          # a recipe with samples of q
        for a, e in sampling.stats:
            out |= {str(s) for s in e.free_symbols} | {str(s) for s in self.stat_need[a].free_symbols}
        return out


def _others(ir, target, mean, parameter):
    """The state besides the parameter; a family state the parameter reads starts as a copy of the tensor given
    to the optimizer ('param'); any other needs an initial value."""
    if mean is None:
        reads = {str(s) for s in parameter.free_symbols}
        others = [dataclasses.replace(v, init_state="param") if v.init is None and v.family and v.name in reads
                  else v for v in ir.state]
        # a state that starts as a copy of one that starts as the tensor given (natural_momentum's previous
        # parameters, mu_prev = mu under `parameter: mu`) starts as that tensor too
        copies = {v.name for v in others if v.init_state == "param"}
        others = [dataclasses.replace(v, init_state="param") if v.init_state in copies else v for v in others]
    else:
        others = [v for v in ir.state if v.name != mean]
    for v in others:
        if v.init_state == "param" and mean is None and v.family and parameter != v.symbol and v.symbol.is_positive:
            # the tensor given holds what `parameter` writes (e.g. 2p − 1), not the state itself: as the start of a
            # state confined to positive values (a probability, a precision) its copy leaves the family (p = −0.5
            # gave NaN at the first step, and the parameter −2 at construction, without a message)
            raise UnsupportedTarget(f"recipe '{ir.recipe}': state '{v.name}' would start as a copy of the tensor "
                                    f"given, but the parameters hold {parameter}, not {v.name}, and {v.name} is "
                                    f"confined to positive values: give it a start of its own, in the recipe "
                                    f"state_init: {{{v.name}: 0.5}}, on the command line --set "
                                    f"'state_init={{{v.name}: 0.5}}'", "parameter")
        if v.init_state == "param" and mean is None:
            continue
        if v.init is None:
            raise UnsupportedTarget(f"recipe '{ir.recipe}': state '{v.name}' needs an initial value: in the recipe "
                                    f"state_init: {{{v.name}: 1.0}}, on the command line --set "
                                    f"'state_init={{{v.name}: 1.0}}'", "state_init")
        if v.init_state is not None and v.init_state != mean:
            raise UnsupportedTarget(f"recipe '{ir.recipe}': state '{v.name}' starts as a copy of '{v.init_state}'; "
                                    f"the {target} target can only copy the parameters themselves: give it a value "
                                    f"of its own in state_init (e.g. state_init: {{{v.name}: 1.0}})", "state_init")
    return others


def data_states(ir) -> list:
    """An abstract loss's per-coordinate data as state of the parameter's shape that no step writes (a target with
    ``data_state``): each starts at its declared default and is set by the caller (e.g. the previous posterior)."""
    return [dataclasses.replace(d, kind="elementwise", family=False) for d in ir.data]


def _drop_identity(expr, sym):
    """``expr`` with the Piecewise branches that keep ``sym`` unchanged replaced by 0 (not a use of its value)."""
    if isinstance(expr, sp.Piecewise):
        return sp.Piecewise(*[(sp.Integer(0) if e == sym else e, c) for e, c in expr.args])
    return expr


def stored_names(plan) -> dict:
    """The key under which each state variable is kept in ``optimizer.state[p]``: the recipe's peer name
    (``peer: state_names``, e.g. Adam's ``exp_avg``) where it gives one, else the variable's own name."""
    names = plan.ir.peer.state_names if plan.ir.peer is not None else {}
    return {v.name: names.get(v.name, v.name) for v in plan.others}


def state_conditions(plan) -> dict:
    """For each state besides the parameter, the host condition under which a step reads it or changes it
    (e.g. AMSGrad's running maximum: ``amsgrad``); a state is kept only while its condition holds, as torch
    keeps ``max_exp_avg_sq`` only with ``amsgrad=True``."""
    ir = plan.ir
    always = set()
    if ir.sampling is not None:
        always |= ir.sampling.theta_expr.free_symbols
        for _, e in ir.sampling.stats + ir.sampling.reductions:
            always |= e.free_symbols
        for c in ir.sampling.chained:
            always |= c[3].free_symbols
    if plan.mean is None:
        always |= plan.parameter.free_symbols
    out_of = dict(ir.outputs)
    out = {}
    for v in plan.others:
        if v.symbol in always or v.name not in out_of:
            out[v.name] = sp.true
            continue
        new = out_of[v.name]
        program = [(s, _drop_identity(e, v.symbol) if s == new else e) for s, e in ir.assignments]
        read = need_conditions(program, ir.outputs, [v.symbol])[v.symbol]
        out[v.name] = _by_definition(ir, sp.Or(read, _write_condition(ir.assignments, new, v.symbol)))
    return out


def step_condition(plan):
    """When a state keeps its step count: always for a peer that counts steps, else while the update reads
    the count (SGD reads it only for its momentum buffer's first step); None: never."""
    ir = plan.ir
    if ir.peer is not None and ir.peer.counts_steps:
        return sp.true
    if ir.step_symbol is None or first_step_only(plan):
        return None
    cond = sp.Or(*[need_conditions(ir.assignments, ir.outputs, [ir.step_symbol])[ir.step_symbol]] +
                 ([sp.true] if plan.mean is None and plan.parameter.has(ir.step_symbol) else []))
    cond = _by_definition(ir, cond)
    return None if cond == sp.false else cond


def host_states(plan, peer_only: bool = True) -> dict:
    """The states that are one number per tensor: a numeric start and an update that reads only
    hyperparameters, the step count and such states (NAdam's running product of the momentum schedule,
    kept by torch.optim.NAdam as a 0-d tensor ``mu_product``).  Returns {name: (symbol, new symbol, the new
    value as an expression of hyperparameters, t and the old host states)}.  Only for recipes with a
    ``peer`` section (the peer's checkpoint layout is what asks for a 0-d tensor), unless ``peer_only`` is false
    (the jax target keeps every such state as one number for the whole pytree)."""
    ir = plan.ir
    if ir.peer is None and peer_only:
        return {}
    new_of = {name: sym for name, sym in ir.outputs}
    hyper = {x for h in ir.hyperparameters for x in h.symbols} | ({ir.step_symbol} if ir.step_symbol else set())
    defs = dict(ir.assignments)
    cands = {v.name: v for v in plan.others if v.init_state is None and v.init is not None
             and not sp.sympify(v.init).free_symbols and new_of.get(v.name) in defs}
    expanded = {n: _defined(ir, defs[new_of[n]]) for n in cands}
    while True:                     # drop those whose update reads a state that is not (or no longer) a candidate
        allowed = hyper | {v.symbol for v in cands.values()} | {sp.Symbol(n, real=True) for n in cands}
        drop = [n for n in cands if not expanded[n].free_symbols <= allowed]
        if not drop:
            break
        for n in drop:
            del cands[n]
    return {n: (v.symbol, new_of[n], expanded[n]) for n, v in cands.items()}


def state_symbols(ir) -> dict:
    """Each state's symbol as the update reads it (the IR's state list may carry a symbol with other
    assumptions than the one in the expressions, e.g. SGD's mean ``m``)."""
    by_name = {v.name: v.symbol for v in ir.state}
    by_name.update({str(x): x for _, e in ir.assignments for x in e.free_symbols if str(x) in by_name})
    return by_name


def first_step_only(plan) -> bool:
    """Whether a peer that keeps no step count (``peer: counts_steps: false``, e.g. SGD) can run the update
    without one: the update reads t only as ``t == 1`` (a state's first step, SGD's momentum buffer starting as
    the direction) and the parameter does not read it; then t is 1 on the step that creates a parameter's state
    and 2 after it, as torch.optim.SGD tests ``momentum_buffer is None``."""
    ir = plan.ir
    t = ir.step_symbol
    if t is None or ir.peer is None or ir.peer.counts_steps or (plan.mean is None and plan.parameter.has(t)):
        return False
    first = sp.Symbol("_first_step")
    marks = {sp.Eq(t, 1): first, sp.Eq(1, t): first, sp.Ne(t, 1): sp.Not(first), sp.Ne(1, t): sp.Not(first)}
    return not any(e.xreplace(marks).has(t) for _, e in ir.assignments)


def _by_definition(ir, cond):
    """A condition on hyperparameters only (host values it names replaced by their definitions), or true."""
    cond = sp.simplify_logic(cond) if cond not in (sp.true, sp.false) else cond
    cond = _defined(ir, cond)
    hyper = {x for h in ir.hyperparameters for x in h.symbols}
    return cond if cond.free_symbols <= hyper else sp.true


def _defined(ir, e):
    """``e`` with every value the update assigns replaced by its definition (last to first)."""
    return _defined_in(tuple(ir.assignments), e)


@functools.lru_cache(maxsize=1024)
def _defined_in(assignments: tuple, e):
    """:func:`_defined` of immutable sympy expressions, remembered: every target plans the same IR (``blr-derive
    catalog`` and a module per target render it four times), and writing a host state's update out through Max
    and Piecewise definitions is the costly part of planning (0.3 s of the 1.3 s a catalog recipe's four targets
    took)."""
    for s_, e_ in reversed(assignments):
        e = e.xreplace({s_: e_}) if e.has(s_) else e
    return e


def _write_condition(assignments, new, old):
    """When the step gives the state a value other than its own (a Piecewise branch that is not ``old``)."""
    expr = dict(assignments).get(new)
    if not isinstance(expr, sp.Piecewise):
        return sp.true
    out: list = []
    earlier: list = []
    for e, c in expr.args:
        if e != old:
            out.append(sp.And(c, *[sp.Not(x) for x in earlier]))
        earlier.append(c)
    return sp.Or(*out)


def plan_optimizer(ir, target: str, chained: bool = False, shaped: bool = False,
                   data_state: bool = False) -> OptimizerPlan:
    check_optimizer(ir, target, chained, shaped, data_state)
    mean, parameter = ir.mean, ir.parameter
    state_syms = {v.symbol for v in ir.state} | {d.symbol for d in ir.data}
    state_syms |= {sp.Symbol(str(s), real=True) for s in state_syms}
    others = _others(ir, target, mean, parameter) + data_states(ir)
    plan = OptimizerPlan(ir, mean, parameter, state_syms, [v.name for v in ir.state], others,
                         [(name, str(sym)) for name, sym in ir.outputs if name != mean and str(sym) != name])
    if mean is None:
        new_of = {sp.Symbol(name, real=True): sym for name, sym in ir.outputs}
        new_of.update({v.symbol: sym for v in ir.state for name, sym in ir.outputs if name == v.name})
        plan.param_new = (sp.Symbol("param_new"), parameter.xreplace(new_of))
    if ir.sampling is not None:
        plan.stats_in = [a for a, _ in ir.sampling.stats]
        plan.stat_need = need_conditions(ir.assignments, ir.outputs, plan.stats_in)
    plan.need = need_conditions(ir.assignments, ir.outputs, [s for s, _ in ir.assignments] + plan.stats_in)
    init_syms = set()
    for v in others:
        if v.init_state is None:
            init_syms |= {str(s) for s in v.init.free_symbols}
    plan.init_hyper = plan.hyper_using(init_syms)
    theta = {str(s) for s in ir.sampling.theta_expr.free_symbols} if ir.sampling is not None else set()
    plan.theta_hyper = plan.hyper_using(theta)
    plan.grads = [(str(c.symbol), c.oracle) for c in ir.oracle_calls]
    plan.other_oracles = [o for o, _ in ir.oracles if o != "grad"]
    return plan


def samples_code(samples) -> str:
    """How many samples the closure path of an optimizer draws, as host code: a number as it is, a hyperparameter
    read from the first parameter group (rule argument ``samples``: a positive integer or an int hyperparameter)."""
    if isinstance(samples, sp.Symbol):
        return f"int(self.param_groups[0][{pystr(samples.name)}])"
    if isinstance(samples, sp.Integer) and samples > 0:
        return str(int(samples))
    raise CodegenError(f"samples must be a positive integer or an int hyperparameter, got {samples}")
