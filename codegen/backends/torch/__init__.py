"""torch target: a ``torch.optim.Optimizer`` subclass per recipe, multi-tensor (``_foreach``) updates.

The family's mean parameter is the torch parameter itself; the other state lives in
``optimizer.state[p]``.  A recipe whose family has no such mean names what the torch parameter
holds with its ``parameter`` key (an expression of the state, e.g. ``sign(lam)``: binary weights);
then all the family's state lives in ``optimizer.state[p]`` (a state the parameter reads starts as a
copy of the tensor given to the optimizer) and the parameter is rewritten from it at construction and
after every step.  The target accepts elementwise updates whose oracles are the gradient at what the
parameter holds (``p.grad``), or at samples of q (normal or uniform draws); anything else is rejected
with a CodegenError.
"""
from __future__ import annotations

from pathlib import Path

import sympy as sp


from blr_derive.codegen.backends.torch.config import CONFIG
from blr_derive.codegen.inert import template_env
from blr_derive.codegen.lower import DRAWS, check_optimizer, plan_optimizer
from blr_derive.codegen.backends.torch.printer import ForeachCompiler, FusedCompiler, HostPrinter


class TorchTarget:
    config = CONFIG
    name = CONFIG.name
    suffix = CONFIG.suffix
    modules = CONFIG.modules
    template = CONFIG.template

    def __init__(self):
        self.env = template_env(Path(__file__).parent / "templates")

    def check(self, ir):
        """Whether the target can express the recipe (UnsupportedTarget, naming the recipe entry, if not)."""
        check_optimizer(ir, self.name)

    def render(self, ir) -> str:
        plan = plan_optimizer(ir, self.name)
        host = HostPrinter()
        tensors = plan.state_syms | {c.symbol for c in ir.oracle_calls} | set(plan.stats_in)
        comp = ForeachCompiler(tensors)
        fused = FusedCompiler(tensors)
        for sym, expr in ir.assignments:
            comp.assign(sym, expr, plan.need[sym])
            fused.assign(sym, expr, plan.need[sym])
        point = self.point_view(plan)
        if point is None:
            mean_out = [str(sym) for name, sym in ir.outputs if name == ir.mean][0]
        else:
            comp.assign(*plan.param_new)
            fused.assign(*plan.param_new)
            mean_out = str(plan.param_new[0])
        sampling = self.sampling_view(plan, host)
        stat_syms = plan.stat_symbols() if ir.sampling is not None else set()
        return self.env.get_template(self.template).render(
            ir=ir, program=comp.lines, outputs=plan.outputs, mean_out=mean_out, others=plan.others,
            host=host.doprint, init_hyper=plan.init_hyper, grads=plan.grads, sampling=sampling, fused=fused,
            host_unpack=", ".join(a[0] for a in fused.args) + ("," if len(fused.args) == 1 else ""),
            optional_lists=[str(a) for a in plan.stats_in if plan.need[a] != sp.true],
            point=point, param_list=ir.mean if point is None else point["list"],
            saved=ir.mean if point is None else point["saved"],
            kernel_lists=([] if point is None else [point["list"]])
            + [v.name for v in ir.state] + [str(c.symbol) for c in ir.oracle_calls] + [str(a) for a in plan.stats_in],
            other_oracles=plan.other_oracles, theta_hyper=plan.theta_hyper,
            stat_hyper=plan.hyper_using(stat_syms),
        )

    @staticmethod
    def point_view(plan):
        """A parameter that holds an expression of the state (``parameter: binary(lam)``): its initial program."""
        if plan.mean is not None:
            return None
        init_c = ForeachCompiler(set(plan.state_syms), indent="                ")
        init_c.assign(sp.Symbol("param_init"), plan.parameter)
        return {"list": "params", "saved": "_saved", "text": sp.sstr(plan.parameter), "init_program": init_c.lines,
                "init_hyper": [h for h in plan.ir.hyperparameters
                               if any(s in plan.parameter.free_symbols for s in h.symbols)]}

    @staticmethod
    def sampling_view(plan, host):
        """Monte Carlo recipes: the sample θ(ε) and the per-sample statistics as multi-tensor programs."""
        sm = plan.ir.sampling
        if sm is None:
            return None
        theta_c = ForeachCompiler(plan.state_syms | {sm.eps}, indent="            ")
        theta_c.assign(sm.theta, sm.theta_expr)
        stat_c = ForeachCompiler(plan.state_syms | {sm.eps, sm.theta} | {k for k, _ in sm.calls},
                                 indent="            ")
        stat_names = []
        for avg, e in sm.stats:
            val = sp.Symbol(f"_sample_{avg}")
            cond = plan.stat_need[avg]
            stat_c.assign(val, e, cond)
            stat_names.append((str(avg), str(val), None if cond == sp.true else host.doprint(cond)))
        return {"samples": host.doprint(sm.samples), "eps": str(sm.eps), "theta": str(sm.theta),
                "theta_program": theta_c.lines, "stat_program": stat_c.lines, "stats": stat_names,
                "grads": [(str(k), o) for k, o in sm.calls], "draw": DRAWS[sm.draw]}


TARGET = TorchTarget()
