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

import dataclasses
from pathlib import Path

import sympy as sp

from blr_derive.core.errors import UnsupportedTarget
from blr_derive.ir.common import need_conditions

from blr_derive.codegen.inert import template_env
from blr_derive.codegen.backends.torch.printer import ForeachCompiler, FusedCompiler, HostPrinter


class TorchTarget:
    name = "torch"
    suffix = ".py"
    modules = frozenset({"contextlib", "math", "torch"})          # what a generated module may import (codegen.inert.audit)
    template = "optimizer.py.j2"

    def __init__(self):
        self.env = template_env(Path(__file__).parent / "templates")

    def check(self, ir):
        """Whether the target can express the recipe (UnsupportedTarget, naming the recipe entry, if not)."""
        def no(msg, key):
            raise UnsupportedTarget(f"recipe '{ir.recipe}': the {self.name} target {msg}", key)
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

    def render(self, ir) -> str:
        self.check(ir)
        host = HostPrinter()
        state_syms = {v.symbol for v in ir.state}
        state_syms = {sp.Symbol(str(s), real=True) for s in state_syms} | state_syms
        tensors = state_syms | {c.symbol for c in ir.oracle_calls}
        # what the torch parameter holds: the mean state itself, or an expression of the state
        point = None
        if ir.mean is None:
            point = {"list": "params", "saved": "_saved", "text": sp.sstr(ir.parameter)}
            new_of = {sp.Symbol(name, real=True): sym for name, sym in ir.outputs}
            new_of.update({v.symbol: sym for v in ir.state for name, sym in ir.outputs if name == v.name})
            point_sym = sp.Symbol("param_new")
            point_expr = ir.parameter.xreplace(new_of)
            init_c = ForeachCompiler(set(state_syms), indent="                ")
            init_c.assign(sp.Symbol("param_init"), ir.parameter)
            point["init_program"] = init_c.lines
            point["init_hyper"] = [h for h in ir.hyperparameters
                                   if any(s in ir.parameter.free_symbols for s in h.symbols)]
        draw = DRAWS[ir.sampling.draw] if ir.sampling is not None else None
        sampling = None
        if ir.sampling is not None:
            sm = ir.sampling
            stats = {a for a, _ in sm.stats}
            tensors |= stats
            theta_c = ForeachCompiler(state_syms | {sm.eps}, indent="            ")
            theta_c.assign(sm.theta, sm.theta_expr)
            stat_c = ForeachCompiler(state_syms | {sm.eps, sm.theta} | {k for k, _ in sm.calls}, indent="            ")
            stat_names = []
            stat_need = need_conditions(ir.assignments, ir.outputs, [a for a, _ in sm.stats])
            for i, (avg, e) in enumerate(sm.stats):
                val = sp.Symbol(f"_sample_{avg}")
                stat_c.assign(val, e, stat_need[avg])
                cond = stat_need[avg]
                stat_names.append((str(avg), str(val), None if cond == sp.true else host.doprint(cond)))
            sampling = {
                "samples": host.doprint(sm.samples), "eps": str(sm.eps), "theta": str(sm.theta),
                "theta_program": theta_c.lines, "stat_program": stat_c.lines, "stats": stat_names,
                "grads": [(str(k), o) for k, o in sm.calls], "draw": draw,
            }
        stats_in = [a for a, _ in ir.sampling.stats] if ir.sampling is not None else []
        need = need_conditions(ir.assignments, ir.outputs, [s_ for s_, _ in ir.assignments] + stats_in)
        comp = ForeachCompiler(tensors)
        fused = FusedCompiler(tensors)
        for sym, expr in ir.assignments:
            comp.assign(sym, expr, need[sym])
            fused.assign(sym, expr, need[sym])
        outputs = [(name, str(sym)) for name, sym in ir.outputs if name != ir.mean and str(sym) != name]
        if point is None:
            mean_out = [str(sym) for name, sym in ir.outputs if name == ir.mean][0]
            others = [v for v in ir.state if v.name != ir.mean]
        else:
            comp.assign(point_sym, point_expr)
            fused.assign(point_sym, point_expr)
            mean_out = str(point_sym)
            reads = {str(s) for s in ir.parameter.free_symbols}
            others = [dataclasses.replace(v, init_state="param") if v.init is None and v.family and v.name in reads
                      else v for v in ir.state]
        for v in others:
            if v.init_state == "param" and point is not None:
                continue
            if v.init is None:
                raise UnsupportedTarget(f"recipe '{ir.recipe}': state '{v.name}' needs an initial value (state_init)",
                                        "state_init")
            if v.init_state is not None and v.init_state != ir.mean:
                raise UnsupportedTarget(f"recipe '{ir.recipe}': state '{v.name}' starts as a copy of '{v.init_state}'; the "
                                        "torch target can only copy the parameters themselves", "state_init")
        init_syms = set()
        for v in others:
            if v.init_state is None:
                init_syms |= {str(s) for s in v.init.free_symbols}
        theta_syms = {str(s) for s in ir.sampling.theta_expr.free_symbols} if ir.sampling is not None else set()
        stat_syms = set()
        if ir.sampling is not None:
            cond_need = need_conditions(ir.assignments, ir.outputs, [a for a, _ in ir.sampling.stats])
            for a, e in ir.sampling.stats:
                stat_syms |= {str(s) for s in e.free_symbols} | {str(s) for s in cond_need[a].free_symbols}
        return self.env.get_template(self.template).render(
            ir=ir, program=comp.lines, outputs=outputs, mean_out=mean_out, others=others,
            host=host.doprint, init_hyper=[h for h in ir.hyperparameters
                                           if any(str(s) in init_syms for s in h.symbols)],
            grads=[(str(c.symbol), c.oracle) for c in ir.oracle_calls], sampling=sampling, fused=fused,
            host_unpack=", ".join(a[0] for a in fused.args) + ("," if len(fused.args) == 1 else ""),
            optional_lists=[str(a) for a in stats_in if need[a] != sp.true],
            point=point, param_list=ir.mean if point is None else point["list"],
            saved=ir.mean if point is None else point["saved"],
            kernel_lists=([] if point is None else [point["list"]])
            + [v.name for v in ir.state] + [str(c.symbol) for c in ir.oracle_calls]
            + ([str(a) for a, _ in ir.sampling.stats] if ir.sampling is not None else []),
            other_oracles=[o for o, _ in ir.oracles if o != "grad"],
            theta_hyper=[h for h in ir.hyperparameters if any(str(s) in theta_syms for s in h.symbols)],
            stat_hyper=[h for h in ir.hyperparameters if any(str(s) in stat_syms for s in h.symbols)],
        )


#: sampling draws the torch target supports -> the torch function that makes them
DRAWS = {"normal": "randn", "uniform": "rand"}

TARGET = TorchTarget()
