"""The lowering that the optimizer targets (torch, triton) share: what the torch parameter holds, the rest of the
state and its initial values, the outputs of a step, the host conditions under which the program reads each
value, and which hyperparameters each part of the generated module needs.  The targets then print the program
with their own compilers (multi-tensor ``_foreach`` calls, fused kernels)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import sympy as sp

from blr_derive.core.errors import UnsupportedTarget
from blr_derive.ir.common import need_conditions

#: sampling draws the optimizer targets support -> the torch function that makes them
DRAWS = {"normal": "randn", "uniform": "rand"}


def check_optimizer(ir, target: str):
    """Whether an optimizer target can express the recipe (UnsupportedTarget, naming the recipe entry, if not):
    an elementwise update whose oracles are the gradient at what the parameter holds, or at samples of q."""
    def no(msg, key):
        raise UnsupportedTarget(f"recipe '{ir.recipe}': the {target} target {msg}", key)
    if not ir.elementwise:
        no(f"needs an elementwise (mean-field) update; family '{ir.family.text}' mixes coordinates (matrix "
           "products, solves)", "family")
    if ir.mean is None and ir.parameter is None:
        no("needs a family with a mean parameter, or a recipe 'parameter' saying what the torch parameter holds",
           "family")
    if ir.data:
        no("takes no data inputs (the loss is the model's)", "loss")
    for c in ir.oracle_calls:
        if (str(c.argument) != ir.mean) if ir.mean is not None else (c.argument != ir.parameter):
            no(f"evaluates oracles at the parameters (the mean) or at samples of q; '{c.oracle}' is asked at "
               f"{c.argument}", "approximations")
        if c.oracle == "hess":
            no("has no Hessian oracle; add an approximation (squared_gradient_hessian, gauss_newton_hessian, "
               "price_estimator)", "approximations")
    if ir.sampling is not None:
        if ir.sampling.draw not in DRAWS:
            no(f"samples q with normal or uniform draws only (got '{ir.sampling.draw}')", "approximations")
        for _, o in ir.sampling.calls:
            if o == "hess":
                no("has no Hessian oracle at samples; add an approximation (price_estimator, "
                   "squared_gradient_hessian, gauss_newton_hessian)", "approximations")


@dataclass
class OptimizerPlan:
    ir: object
    mean: str | None                   # the state that is the parameter itself, or None
    parameter: object                  # else what the parameter holds, an expression of the state
    state_syms: set
    state_names: list
    others: list                       # [Var] the state besides the parameter (kept in optimizer.state)
    outputs: list                      # [(state name, printed symbol)] new values of the other state
    param_new: object = None           # (symbol, expression) of what the parameter holds after the step
    stats_in: list = field(default_factory=list)   # Monte Carlo averages the update reads
    stat_need: dict = field(default_factory=dict)  # average -> host condition under which it is drawn
    need: dict = field(default_factory=dict)       # every program value -> host condition under which it is read
    init_hyper: list = field(default_factory=list)
    theta_hyper: list = field(default_factory=list)
    grads: list = field(default_factory=list)      # [(printed symbol, oracle)] at the parameter
    other_oracles: list = field(default_factory=list)

    def hyper_using(self, names):
        """The hyperparameters with a symbol among ``names`` (printed symbol names)."""
        return [h for h in self.ir.hyperparameters if any(str(s) in names for s in h.symbols)]

    def stat_symbols(self):
        """Names the per-sample statistics (and their conditions) read."""
        out = set()
        for a, e in self.ir.sampling.stats:
            out |= {str(s) for s in e.free_symbols} | {str(s) for s in self.stat_need[a].free_symbols}
        return out


def _others(ir, target, mean, parameter):
    """The state besides the parameter; a family state the parameter reads starts as a copy of the tensor given
    to the optimizer ('param'); any other needs an initial value."""
    if mean is None:
        reads = {str(s) for s in parameter.free_symbols}
        others = [dataclasses.replace(v, init_state="param") if v.init is None and v.family and v.name in reads
                  else v for v in ir.state]
    else:
        others = [v for v in ir.state if v.name != mean]
    for v in others:
        if v.init_state == "param" and mean is None:
            continue
        if v.init is None:
            raise UnsupportedTarget(f"recipe '{ir.recipe}': state '{v.name}' needs an initial value (state_init)",
                                    "state_init")
        if v.init_state is not None and v.init_state != mean:
            raise UnsupportedTarget(f"recipe '{ir.recipe}': state '{v.name}' starts as a copy of '{v.init_state}'; "
                                    f"the {target} target can only copy the parameters themselves", "state_init")
    return others


def plan_optimizer(ir, target: str) -> OptimizerPlan:
    check_optimizer(ir, target)
    mean, parameter = ir.mean, ir.parameter
    state_syms = {v.symbol for v in ir.state}
    state_syms |= {sp.Symbol(str(s), real=True) for s in state_syms}
    others = _others(ir, target, mean, parameter)
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
