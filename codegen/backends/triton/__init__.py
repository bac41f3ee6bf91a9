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
recipes whose oracles are taken at the parameter or at samples of q (normal or uniform draws; loss values
are host arguments of the collect kernel, ranked on the host first with ``fitness_shaping``; oracles at
points computed from earlier ones, ``sharpness_aware``, get a kernel per point, see ``chained_view``); a recipe
whose parameter holds an expression of the state (``parameter: sign(lam)``) keeps all of the state in
the buffers and writes the parameter from it (``_point_kernel`` at construction, the update kernel after
every step).  An abstract loss's per-coordinate data (``data_states``) are buffers of the group like the state,
read by the kernels and never written, set with the generated ``set_data`` as in the torch target.  Others raise
CodegenError.
"""
from __future__ import annotations

import re
from pathlib import Path

import sympy as sp

from blr_derive.core.errors import UnsupportedTarget

from blr_derive.codegen.backends.triton.config import CONFIG
from blr_derive.codegen.backends.triton.context import (ChainedView, KernelView, PhaseView, PointView, SamplingView,
                                                        ShapingView, StatView, TritonContext)
from blr_derive.codegen.context import render
from blr_derive.codegen.inert import template_env
from blr_derive.codegen.printing import HostPrinter
from blr_derive.codegen.lower import (DRAWS, check_optimizer, host_states, plan_optimizer, samples_code, state_symbols, step_condition,
                                      stored_names)
from blr_derive.codegen.backends.triton.kernels import (Kernel, KernelArg, ModuleKernels, arg, block_kernel,
                                                        buffers, constexpr)
from blr_derive.codegen.backends.triton.printer import HELPERS, RUNTIME, TritonFusedCompiler
from blr_derive.codegen.objective import objective_view, target_note
from blr_derive.codegen.validation import validation


class TritonTarget:
    config = CONFIG
    name = CONFIG.name
    suffix = CONFIG.suffix
    modules = CONFIG.modules
    template = CONFIG.template

    def __init__(self):
        self.env = template_env(Path(__file__).parent / "templates", RUNTIME)

    def check(self, ir):
        check_optimizer(ir, self.name, chained=True, shaped=True, data_state=True)

    def render(self, ir) -> str:
        plan = plan_optimizer(ir, self.name, chained=True, shaped=True, data_state=True)
        plan.state_names = plan.state_names + [d.name for d in ir.data]    # data: loaded like state, never stored
        host = HostPrinter()
        point = self.point_view(plan)
        sampling = self.sampling_view(plan, host)
        tensors = plan.state_syms | {c.symbol for c in ir.oracle_calls} | set(plan.stats_in)
        by_name = state_symbols(ir)
        fused = TritonFusedCompiler(tensors, {sym: by_name[name] for name, sym in ir.outputs if name in by_name})
        stat_loads = []
        for a in plan.stats_in:
            flag = None if plan.need[a] == sp.true else fused.hoist_flag(plan.need[a])
            stat_loads.append((str(a), flag))
        for sym, expr in ir.assignments:
            fused.assign(sym, expr, plan.need[sym])
        if plan.param_new is not None:
            fused.assign(*plan.param_new)
            mean_out = "param_new"
        else:
            mean_out = [str(sym) for name, sym in ir.outputs if name == plan.mean][0]
        helpers = set(fused.helpers) | (point["init_c"].helpers if point else set()) | (
            sampling["theta_c"].helpers | sampling["stat_c"].helpers if sampling else set())
        chained = sampling["chained"] if sampling else None
        for k in (chained["phases"] + ([chained["reduce"]] if chained["reduce"] else [])) if chained else []:
            helpers |= set(k["comp"].helpers)
        stat_syms: set[str] = set()
        if ir.sampling is not None and sampling is not None:
            stat_syms = plan.stat_symbols()
            if sampling["needs_theta"]:
                stat_syms |= {str(s) for s in ir.sampling.theta_expr.free_symbols}
        cols = []
        for _, o in list(plan.grads) + (sampling["grads"] if sampling else []):
            if o not in cols:
                cols.append(o)
        update_state = [n for n in _loads(fused, plan.state_names, [n for n, _ in plan.outputs]) if n != plan.mean]
        objective = objective_view(ir, stored_names(plan), layout=True,
                                   absent=frozenset(host_states(plan)))     # every other state is kept
        return render(self.env, self.template, TritonContext(
            ir=ir, mean=plan.mean, pvar=plan.mean or "_p", point=point, outputs=plan.outputs, mean_out=mean_out,
            others=plan.others, host=host.doprint, init_hyper=plan.init_hyper, grads=plan.grads, sampling=sampling,
            fused=fused, stat_loads=stat_loads,
            update_state=update_state,
            kernels=kernel_specs(update_state, stat_loads, fused, len(cols), sampling, point),
            helper_sources=[HELPERS[h] for h in sorted(helpers)],
            cols=cols, col_of={o: i + 1 for i, o in enumerate(cols)},
            other_oracles=[o for o in plan.other_oracles if not (sampling and o == "loss" and sampling["loss_values"])],
            theta_hyper=plan.theta_hyper, stat_hyper=plan.hyper_using(stat_syms), stored=stored_names(plan),
            keeps_step=step_condition(plan) is not None or ir.step_symbol is not None,
            scalar_stored=sorted(stored_names(plan)[n] for n in host_states(plan)),
            data=[(d.name, host.doprint(d.init), d.description) for d in ir.data], validation=validation(ir),
            objective=objective, objective_note=target_note(ir, objective),
        ))

    @staticmethod
    def point_view(plan) -> PointView | None:
        """A parameter that holds an expression of the state: the kernel body that writes it at construction."""
        if plan.mean is not None:
            return None
        init_c = TritonFusedCompiler(plan.state_syms)
        init_c.assign(sp.Symbol("param_init"), plan.parameter)
        return {"init_c": init_c, "text": sp.sstr(plan.parameter),
                "init_state": [n for n in plan.state_names if n in set(_body_words(init_c))],
                "init_hyper": [h for h in plan.ir.hyperparameters
                               if any(s in plan.parameter.free_symbols for s in h.symbols)]}

    @staticmethod
    def sampling_view(plan, host) -> SamplingView | None:
        """Monte Carlo recipes: the draw kernel's θ(ε) and the collect kernel's per-sample statistics."""
        sm = plan.ir.sampling
        if sm is None:
            return None
        theta_c = TritonFusedCompiler(plan.state_syms | {sm.eps})
        theta_c.assign(sm.theta, sm.theta_expr)
        values = [k for k, o in sm.calls if o == "loss"]      # the loss at a sample: one number (a host value)
        stat_c = TritonFusedCompiler(plan.state_syms | {sm.eps, sm.theta} | {k for k, _ in sm.calls if k not in values}
                                     | {c[0] for c in sm.chained})
        needs_theta = any(sm.theta in e.free_symbols for _, e in sm.stats)
        if needs_theta:          # the collect kernel recomputes θ (the parameters hold the mean again)
            stat_c.assign(sm.theta, sm.theta_expr)
        stats: list[StatView] = []
        for avg, e in sm.stats:
            val = sp.Symbol(f"_sample_{avg}")
            cond = plan.stat_need[avg]
            flag = None if cond == sp.true else stat_c.hoist_flag(cond)
            stat_c.assign(val, e, cond)
            stats.append({"name": str(avg), "val": str(val), "flag": flag,
                          "cond": None if cond == sp.true else host.doprint(cond)})
        grads = [(str(k), o) for k, o in sm.calls if k not in values]
        chained = chained_view(plan, sm, stat_c)
        if chained is not None:          # the collect kernel reads the last point's oracle; the others were kept
            grads = [(chained["phases"][-1]["symbol"], chained["phases"][-1]["oracle"])]
        return {"samples": host.doprint(sm.samples), "samples_code": samples_code(sm.samples),
                "eps": str(sm.eps), "theta": str(sm.theta),
                "theta_text": sp.sstr(sm.theta_expr), "draw": DRAWS.get(sm.draw),
                "theta_c": theta_c, "stat_c": stat_c, "stats": stats, "chained": chained,
                "collect_bufs": chained["collect_bufs"] if chained else [],
                "needs_theta": needs_theta, "grads": grads,
                "loss_values": [str(k) for k in values], "shaping": shaping_view(plan, sm, host, values),
                "theta_state": [n for n in _loads(theta_c, plan.state_names) if n != plan.mean],
                "stat_state": [n for n in _loads(stat_c, plan.state_names) if n != plan.mean]}


def shaping_view(plan, sm, host, values) -> ShapingView | None:
    """Loss values ranked over the samples of a step (``Sampling.shaping``, rule fitness_shaping): each sample's
    Philox seed and loss value are kept until step(), which ranks the values on the host, replaces each by the
    rule's value of its rank (weights w(r) over the ranks ``_r`` = 1..n_samples, their sum ``_W``) and then
    launches the collect kernel once per sample, in draw order, with the sample's seed (the same ε) and its
    shaped value as a host argument."""
    sh = getattr(sm, "shaping", None)
    if sh is None:
        return None
    if sm.chained or sm.reductions or len(values) != len(sm.calls):
        raise UnsupportedTarget(f"recipe '{plan.ir.recipe}': the triton target ranks the loss values of samples "
                                "that evaluate the loss alone (no gradient at the samples)", "approximations")
    n, ranks, w_r, total = (sp.Symbol(x) for x in ("n_samples", "_r", "_w_r", "_W"))
    return {"name": sh.name, "call": str(sh.call),
            "weight": host.doprint(sh.weight.xreplace({sh.rank: ranks, sh.count: n})),
            "value": host.doprint(sh.value.xreplace({sh.weight_of_rank: w_r, sh.total: total, sh.count: n}))}


def chained_view(plan, sm, stat_c) -> ChainedView | None:
    """Oracles at points computed from earlier oracle values (``Sampling.chained``, e.g. sharpness_aware): a sample
    is evaluated at its draw and then at each such point in turn.  The oracle values at every point but the last
    are kept in fp32 buffers of the group (``kept``); the per-sample sums over every coordinate of all groups
    (``Sampling.reductions``, e.g. SAM's squared global norm) are partial sums per block from ``_reduce_kernel``,
    added on the host; ``_chain<j>_kernel`` writes the j-th point into the parameters (the mean stays in its
    buffer), and the collect kernel reads the last point's oracle and the kept values."""
    if not sm.chained:
        return None
    known = plan.state_syms | {sm.eps, sm.theta} | {k for k, _ in sm.calls}
    # (name, oracle, the point of the sample it is taken at): every value but the last point's is kept
    kept = [(str(k), o, 0) for k, o in sm.calls] + [(str(c[0]), c[1], j + 1) for j, c in enumerate(sm.chained[:-1])]
    kept_names = [k for k, _, _ in kept]
    used: set[str] = set()

    def kernel_view(comp) -> KernelView:
        words = set(_body_words(comp))
        return {"comp": comp, "state": [n for n in _loads(comp, plan.state_names) if n != plan.mean],
                "kept": [k for k in kept_names if k in words], "eps": str(sm.eps) in words,
                "mean": (plan.mean or "_p") in words}
    red_c = TritonFusedCompiler(known)
    if any(sm.theta in e.free_symbols for _, e in sm.reductions):
        red_c.assign(sm.theta, sm.theta_expr)
    reductions = []
    for r, e in sm.reductions:
        val = sp.Symbol(f"_terms_{r}")
        red_c.assign(val, e)
        reductions.append((str(r), str(val)))
        used |= {str(x) for x in e.free_symbols}
    phases: list[PhaseView] = []
    for sym, oracle, point, expr in sm.chained:
        comp = TritonFusedCompiler(known)
        if sm.theta in expr.free_symbols:
            comp.assign(sm.theta, sm.theta_expr)
        comp.assign(point, expr)
        phases.append(PhaseView(**kernel_view(comp), symbol=str(sym), oracle=oracle, point=str(point)))
        known = known | {sym}
        used |= {str(x) for x in expr.free_symbols}
    words = set(_body_words(stat_c))
    return {"kept": kept, "reductions": reductions, "reduce": kernel_view(red_c) if reductions else None,
            "phases": phases, "hyper": plan.hyper_using(used),
            "collect_bufs": [k for k in kept_names if k in words]}


def kernel_specs(update_state, stat_loads, fused, ncols, sampling, point) -> ModuleKernels:
    """Every kernel of the module described once (codegen/backends/triton/kernels.py): its signature and its
    launches are printed from it.  The Monte Carlo statistics a kernel reads or averages arrive as one starred
    group (``*_stats``: the group's buffers, or the mean buffer standing in for one not needed)."""
    update = block_kernel("_update_kernel", [*buffers(update_state),
                                             KernelArg(tuple(f"_buf_{a}" for a, _ in stat_loads), "*_stats", "stats")],
                          fused, ncols)
    point_k = None if point is None else block_kernel("_point_kernel", buffers(point["init_state"]), point["init_c"],
                                                      ncols)
    if sampling is None:
        return ModuleKernels(update, point_k)
    mean = KernelArg(("_buf_mean",), '_lay.buffers["_mean"]', "_buf_mean")
    draw = block_kernel("_draw_kernel", [KernelArg(("_buf_mean",), '_lay.buffer("_mean")', "_buf_mean"),
                                                *buffers(sampling["theta_state"]), arg("_seed", "_sd")],
                               sampling["theta_c"], ncols)
    collect = block_kernel(
        "_collect_kernel", [mean, *buffers(sampling["stat_state"]), *buffers(sampling["collect_bufs"], made=True),
                            KernelArg(tuple(f"_buf_{s['name']}" for s in sampling["stats"]), "*_stats", "stats"),
                            arg("_seed", "_sd"), arg("_inv_n", "1.0 / _n")],
        sampling["stat_c"], ncols, after_host=[constexpr("COLLECT", "bool(_collecting)"), constexpr("FIRST", "_n == 1")])
    noise = None
    if sampling["draw"]:
        noise = Kernel("_noise_kernel", (arg("_out", "out"), arg("_seed", "self._seeds[id(g)]"),
                                                arg("_n", "_lay.total"), constexpr("BLOCK", "BLOCK")),
                              grid="(triton.cdiv(_lay.total, BLOCK),)")
    ch = sampling["chained"]
    if ch is not None:
        if ch["reduce"] is not None:
            k = ch["reduce"]
            k["kernel"] = block_kernel("_reduce_kernel", [mean, *buffers(k["state"]), *buffers(k["kept"], made=True),
                                                          arg("_seed", "_sd"), arg("_partials", "_part")],
                                       k["comp"], ncols, after_host=[constexpr("NRED", str(len(ch["reductions"])))])
        for j, ph in enumerate(ch["phases"], 1):
            ph["kernel"] = block_kernel(f"_chain{j}_kernel", [mean, *buffers(ph["state"]), *buffers(ph["kept"], made=True),
                                                              arg("_seed", "_sd")], ph["comp"], ncols)
    return ModuleKernels(update, point_k, draw, collect, noise)


def _loads(comp, names, extra=()):
    """The state arrays a compiled program reads (in state order), by name."""
    used = set(extra)
    for line in comp.body:
        used |= set(_words(line))
    return [n for n in names if n in used]


def _body_words(comp):
    out = []
    for line in comp.body:
        out += _words(line)
    return out


def _words(line):
    return re.findall(r"[A-Za-z_][A-Za-z_0-9]*", line)


TARGET = TritonTarget()
