"""triton target: one ``@triton.jit`` kernel per recipe and a ``torch.optim.Optimizer`` subclass
with the torch target's API (constructor, ``step(closure)``, ``state_dict``, ``sampled_params``).

Every step launches the update kernel once per parameter group (once per parameter dtype in
the group): each program loads one block of one parameter through a pointer table (so the
parameters and gradients stay where autograd put them), the rest of the state from per-group
contiguous fp32 buffers (``optimizer.state[p][name]`` are views of them), and writes every
output once.  Host scalars (β^t, bias corrections, hyperparameter products) are computed on the
host in double precision and passed as fp32 arguments; host booleans are ``tl.constexpr``.

Monte Carlo recipes add a draw kernel (the recipe's sample θ(ε), e.g. m + σε, with ε from Triton's
Philox, ``tl.randn`` for normal draws or ``tl.rand`` for uniform ones, seeded per sample and offset by
the element's index in the group) and a collect kernel that restores the parameters and accumulates
the per-sample statistics, regenerating the same ε from the same seed and offsets: the noise is never
stored.  Same scope as the torch target: elementwise
recipes whose oracles are taken at the parameter or at samples of q (normal or uniform draws); a recipe
whose parameter holds an expression of the state (``parameter: sign(lam)``) keeps all of the state in
the buffers and writes the parameter from it (``_point_kernel`` at construction, the update kernel after
every step).  Others raise CodegenError.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import sympy as sp

from blr_derive.core.errors import UnsupportedTarget
from blr_derive.ir.common import need_conditions

from blr_derive.codegen.inert import template_env
from blr_derive.codegen.backends.torch import TorchTarget
from blr_derive.codegen.backends.torch.printer import HostPrinter
from blr_derive.codegen.backends.triton.printer import HELPERS, TritonFusedCompiler


class TritonTarget:
    name = "triton"
    suffix = ".py"
    modules = frozenset({"contextlib", "math", "torch", "triton", "triton.language"})          # what a generated module may import (codegen.inert.audit)
    template = "optimizer.py.j2"

    def __init__(self):
        self.env = template_env(Path(__file__).parent / "templates")

    def check(self, ir):
        TorchTarget.check(self, ir)

    def render(self, ir) -> str:
        self.check(ir)
        for sym, expr in ir.assignments:
            if isinstance(expr, sp.MatrixExpr) or expr.has(sp.MatrixSymbol):
                raise UnsupportedTarget(f"recipe '{ir.recipe}': the triton target needs an elementwise update; "
                                        f"'{sym}' is a matrix expression", "family")
        host = HostPrinter()
        mean = ir.mean
        parameter = getattr(ir, "parameter", None)
        point = None
        if mean is None:          # the parameter holds an expression of the state (e.g. sign(lam)), all state in buffers
            reads = {str(s) for s in parameter.free_symbols}
            others = [dataclasses.replace(v, init_state="param") if v.init is None and v.family and v.name in reads
                      else v for v in ir.state]
        else:
            others = [v for v in ir.state if v.name != mean]
        for v in others:
            if v.init_state == "param":
                continue
            if v.init is None:
                raise UnsupportedTarget(f"recipe '{ir.recipe}': state '{v.name}' needs an initial value (state_init)",
                                        "state_init")
            if v.init_state is not None and v.init_state != mean:
                raise UnsupportedTarget(f"recipe '{ir.recipe}': state '{v.name}' starts as a copy of '{v.init_state}'; the "
                                        "triton target can only copy the parameters themselves", "state_init")
        state_syms = {v.symbol for v in ir.state}
        state_syms |= {sp.Symbol(str(s), real=True) for s in state_syms}
        state_names = [v.name for v in ir.state]
        helpers = set()
        if mean is None:
            init_c = TritonFusedCompiler(state_syms)
            init_c.assign(sp.Symbol("param_init"), parameter)
            helpers |= init_c.helpers
            point = {"init_c": init_c, "text": sp.sstr(parameter), "init_state": [n for n in state_names if n in set(_body_words(init_c))],
                     "init_hyper": [h for h in ir.hyperparameters if any(s in parameter.free_symbols for s in h.symbols)]}

        def loads(comp, names, extra=()):
            """The state arrays a compiled program reads (in state order), by name."""
            used = set(extra)
            for line in comp.body:
                used |= set(_words(line))
            return [n for n in names if n in used]

        sampling = None
        stats_in = []
        if ir.sampling is not None:
            sm = ir.sampling
            stats_in = [a for a, _ in sm.stats]
            stat_need = need_conditions(ir.assignments, ir.outputs, stats_in)
            theta_c = TritonFusedCompiler(state_syms | {sm.eps})
            theta_c.assign(sm.theta, sm.theta_expr)
            stat_c = TritonFusedCompiler(state_syms | {sm.eps, sm.theta} | {k for k, _ in sm.calls})
            needs_theta = any(sm.theta in e.free_symbols for _, e in sm.stats)
            if needs_theta:          # the collect kernel recomputes θ (the parameters hold the mean again)
                stat_c.assign(sm.theta, sm.theta_expr)
            stats = []
            for avg, e in sm.stats:
                val = sp.Symbol(f"_sample_{avg}")
                cond = stat_need[avg]
                flag = None if cond == sp.true else stat_c.hoist_flag(cond)
                stat_c.assign(val, e, cond)
                stats.append({"name": str(avg), "val": str(val), "flag": flag,
                              "cond": None if cond == sp.true else host.doprint(cond)})
            theta_state = loads(theta_c, state_names)
            stat_state = loads(stat_c, state_names)
            helpers |= theta_c.helpers | stat_c.helpers
            sampling = {
                "samples": host.doprint(sm.samples), "eps": str(sm.eps), "theta": str(sm.theta),
                "theta_text": sp.sstr(sm.theta_expr), "draw": "randn" if sm.draw == "normal" else "rand",
                "theta_c": theta_c, "stat_c": stat_c, "stats": stats,
                "needs_theta": needs_theta, "grads": [(str(k), o) for k, o in sm.calls],
                "theta_state": [n for n in theta_state if n != mean],
                "stat_state": [n for n in stat_state if n != mean],
            }
        need = need_conditions(ir.assignments, ir.outputs, [s_ for s_, _ in ir.assignments] + stats_in)
        tensors = state_syms | {c.symbol for c in ir.oracle_calls} | set(stats_in)
        fused = TritonFusedCompiler(tensors)
        stat_loads = []
        for a in stats_in:
            flag = None if need[a] == sp.true else fused.hoist_flag(need[a])
            stat_loads.append((str(a), flag))
        for sym, expr in ir.assignments:
            fused.assign(sym, expr, need[sym])
        outputs = [(name, str(sym)) for name, sym in ir.outputs if name != mean and str(sym) != name]
        if mean is None:
            new_of = {sp.Symbol(name, real=True): sym for name, sym in ir.outputs}
            new_of.update({v.symbol: sym for v in ir.state for name, sym in ir.outputs if name == v.name})
            fused.assign(sp.Symbol("param_new"), parameter.xreplace(new_of))
            mean_out = "param_new"
        else:
            mean_out = [str(sym) for name, sym in ir.outputs if name == mean][0]
        helpers |= fused.helpers
        init_syms = set()
        for v in others:
            if v.init_state is None:
                init_syms |= {str(s) for s in v.init.free_symbols}
        update_state = [n for n in loads(fused, state_names, [n for n, _ in outputs]) if n != mean]
        grads = [(str(c.symbol), c.oracle) for c in ir.oracle_calls]
        theta_syms = {str(s) for s in ir.sampling.theta_expr.free_symbols} if ir.sampling is not None else set()
        stat_syms = set()
        if ir.sampling is not None:
            for a, e in ir.sampling.stats:
                stat_syms |= {str(s) for s in e.free_symbols} | {str(s) for s in stat_need[a].free_symbols}
            if sampling["needs_theta"]:
                stat_syms |= theta_syms
        cols = []
        for _, o in list(grads) + (sampling["grads"] if sampling else []):
            if o not in cols:
                cols.append(o)
        return self.env.get_template(self.template).render(
            ir=ir, mean=mean, pvar=mean or "_p", point=point, outputs=outputs, mean_out=mean_out, others=others, host=host.doprint,
            init_hyper=[h for h in ir.hyperparameters if any(str(s) in init_syms for s in h.symbols)],
            grads=grads, sampling=sampling, fused=fused, stat_loads=stat_loads, update_state=update_state,
            helper_sources=[HELPERS[h] for h in sorted(helpers)],
            cols=cols, col_of={o: i + 1 for i, o in enumerate(cols)},
            other_oracles=[o for o, _ in ir.oracles if o != "grad"],
            theta_hyper=[h for h in ir.hyperparameters if any(str(s) in theta_syms for s in h.symbols)],
            stat_hyper=[h for h in ir.hyperparameters if any(str(s) in stat_syms for s in h.symbols)],
        )


def _body_words(comp):
    out = []
    for line in comp.body:
        out += _words(line)
    return out


def _words(line):
    import re
    return re.findall(r"[A-Za-z_][A-Za-z_0-9]*", line)


TARGET = TritonTarget()
