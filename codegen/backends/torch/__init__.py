"""torch target: a ``torch.optim.Optimizer`` subclass per recipe, multi-tensor (``_foreach``) updates.

The family's mean parameter is the torch parameter itself; the other state lives in
``optimizer.state[p]``.  A recipe whose family has no such mean names what the torch parameter
holds with its ``parameter`` key (an expression of the state, e.g. ``sign(lam)``: binary weights);
then all the family's state lives in ``optimizer.state[p]`` (a state the parameter reads starts as a
copy of the tensor given to the optimizer) and the parameter is rewritten from it at construction and
after every step.  The target accepts elementwise updates whose oracles are the gradient at what the
parameter holds (``p.grad``), or at samples of q (normal or uniform draws): gradients, the loss value (one
number per sample, told by the caller; with ``fitness_shaping`` the samples are kept and ranked at step()),
and oracles at points computed from earlier ones (``sharpness_aware``); anything else is rejected with a
CodegenError.
"""
from __future__ import annotations

from pathlib import Path
import textwrap

import sympy as sp


from blr_derive.core.errors import UnsupportedTarget
from blr_derive.codegen.backends.torch.config import CONFIG
from blr_derive.codegen.backends.torch.context import (ChainedView, PhaseView, PointView, SamplingView, ShapingView,
                                                       TorchContext)
from blr_derive.codegen.context import render
from blr_derive.codegen.inert import pystr, template_env
from blr_derive.spec.peer import SWITCHES
from blr_derive.codegen.lower import (DRAWS, check_optimizer, first_step_only, host_states, plan_optimizer, samples_code,
                                     state_conditions, state_symbols, step_condition, stored_names)
from blr_derive.codegen.backends.torch.inline import inline_single_use
from blr_derive.codegen.backends.torch.matrix import MATRIX_TEMPLATE, MatrixContext, has_matrix_state, matrix_view
from blr_derive.codegen.backends.torch.inplace import PlannedCompiler
from blr_derive.codegen.backends.torch.kernel import KernelCompiler
from blr_derive.codegen.backends.torch.printer import ForeachCompiler, HostPrinter
from blr_derive.codegen.objective import objective_view, target_note
from blr_derive.codegen.validation import validation


#: torch.optim's implementation switches and their defaults (a recipe's ``peer: switches`` places them)
SWITCH_DEFAULTS = {"maximize": "False", "foreach": "None", "capturable": "False", "differentiable": "False",
                   "fused": "None"}


class TorchTarget:
    config = CONFIG
    name = CONFIG.name
    suffix = CONFIG.suffix
    modules = CONFIG.modules
    template = CONFIG.template

    def __init__(self):
        self.env = template_env(Path(__file__).parent / "templates", Path(__file__).parent / "runtime.py")

    def check(self, ir):
        """Whether the target can express the recipe (UnsupportedTarget, naming the recipe entry, if not)."""
        if has_matrix_state(ir):        # one parameter at a time, the array program (codegen/backends/torch/matrix.py)
            check_optimizer(ir, self.name, matrices=True)
            matrix_view(ir)
            return
        check_optimizer(ir, self.name, chained=True, shaped=True, data_state=True)

    def render(self, ir) -> str:
        if has_matrix_state(ir):
            check_optimizer(ir, self.name, matrices=True)
            objective = objective_view(ir, {}, matrix=True)
            return render(self.env, MATRIX_TEMPLATE, MatrixContext(ir=ir, **matrix_view(ir), objective=objective,
                                                                   objective_note=target_note(ir, objective)))
        plan = plan_optimizer(ir, self.name, chained=True, shaped=True, data_state=True)
        host = HostPrinter()
        scalar_states = host_states(plan)            # one number per tensor (0-d tensors in the state)
        scalar_new = {new for _, new, _ in scalar_states.values()}
        tensors = {s for s in plan.state_syms if str(s) not in scalar_states} | {c.symbol for c in ir.oracle_calls} \
            | set(plan.stats_in)
        point = self.point_view(plan)
        planned = self.planned(ir, plan, tensors, point, scalar_new)
        program = self.program(ir, plan, tensors, point, scalar_new)   # first: it refuses what no torch program can print
        fused = KernelCompiler(tensors, *planned[1:])       # the same program, printed on one tensor
        fused.compile_program(planned[0], plan.need)
        if point is None:
            mean_out = [str(sym) for name, sym in ir.outputs if name == ir.mean][0]
        else:
            assert plan.param_new is not None           # a parameter that holds an expression of the state
            mean_out = str(plan.param_new[0])
        sampling = self.sampling_view(plan, host)
        stat_syms = plan.stat_symbols() if ir.sampling is not None else set()
        stored = stored_names(plan)
        sparse_checks, sparse_hyper = self.checks_view(ir, host, "sparse_checks")
        conds = state_conditions(plan)
        step_cond = step_condition(plan)
        state_cond = {k: None if c == sp.true else host.doprint(c) for k, c in conds.items()}
        cond_syms = {str(x) for c in list(conds.values()) + [sp.true if step_cond is None else step_cond] for x in c.free_symbols}
        init_hyper = plan.init_hyper + [h for h in plan.hyper_using(cond_syms) if h not in plan.init_hyper]
        objective = objective_view(ir, stored, absent=frozenset(scalar_states) | {k for k, c in conds.items()
                                                                                 if c != sp.true})
        return render(self.env, self.template, TorchContext(
            ir=ir, program=program, outputs=[(n, o) for n, o in plan.outputs if n not in scalar_states],
            scalar_states=[(n, str(new), self.host_update(host, stored[n], old, e))
                           for n, (old, new, e) in scalar_states.items()],
            scalar_names=set(scalar_states),
            mean_out=mean_out,
            others=plan.others, host=host.doprint, init_hyper=init_hyper, state_cond=state_cond,
            cond_hyper=plan.hyper_using(cond_syms), grads=plan.grads, sampling=sampling,
            fused=fused, host_unpack=", ".join(a[0] for a in fused.args) + ("," if len(fused.args) == 1 else ""),
            point=point, param_list=ir.mean if point is None else point["list"],
            saved=ir.mean if point is None else point["saved"],
            kernel_lists=([] if point is None else [point["list"]])
            + [v.name for v in ir.state if v.name not in scalar_states] + [d.name for d in ir.data]
            + [str(c.symbol) for c in ir.oracle_calls]
            + [str(a) for a in plan.stats_in],
            other_oracles=[o for o in plan.other_oracles if not (sampling and o == "loss" and sampling["loss_values"])],
            theta_hyper=plan.theta_hyper,
            stat_hyper=plan.hyper_using(stat_syms), stored=stored,
            renamed=[(k, v) for k, v in stored.items() if k != v], validation=validation(ir),
            sparse_checks=sparse_checks, sparse_hyper=sparse_hyper,
            keeps_step=step_cond is not None, first_step=first_step_only(plan),
            switches=ir.peer.switches if ir.peer is not None and ir.peer.switches else ((), SWITCHES),
            switch_defaults=SWITCH_DEFAULTS,
            switch_doc=switch_doc(ir.peer.switches if ir.peer is not None and ir.peer.switches else ((), SWITCHES)),
            group_entries=sorted(ir.peer.group_entries.items()) if ir.peer is not None else [],
            step_cond=None if step_cond is None or step_cond == sp.true else host.doprint(step_cond),
            step_hyper=[] if step_cond is None else plan.hyper_using({str(x) for x in step_cond.free_symbols}),
            data=[(d.name, host.doprint(d.init), d.description) for d in ir.data],
            objective=objective, objective_note=target_note(ir, objective),
            flat_groups=self.flat_groups(ir, plan, sampling, scalar_states, stored),
        ))

    @staticmethod
    def flat_groups(ir, plan, sampling, scalar_states, stored) -> tuple[str, ...] | None:
        """The stored names of the state a sampling recipe's group keeps flat (one tensor per quantity, every
        parameter's state a view of it), or None where its programs cannot run flat: only where every program
        of a sample and of the step is elementwise over the parameters' coordinates (no per-tensor number in the
        state, no chained phase with its sums over coordinates, no ranked draws kept per sample, no data of the
        parameters' own shapes)."""
        if sampling is None or sampling["chained"] or sampling["shaping"] is not None or scalar_states or ir.data:
            return None
        return tuple(stored[v.name] for v in plan.others)

    @staticmethod
    def host_update(host, key, old, e):
        """The new value of a state kept as one number per tensor (a 0-d tensor).  An update ``c·old`` is
        computed as torch computes it in its 0-d tensor -- the stored number times c, in the state's dtype
        (float32: torch.optim's scalar dtype) -- so the readers of the new value read the number that is
        stored, as torch's do (the running product of a schedule rounded each step as torch.optim rounds it);
        any other update as a host expression."""
        if isinstance(e, sp.Mul) and e.args.count(old) == 1 and not (e / old).has(old):
            return f"_host_value(states[0][{pystr(key)}]*({host.doprint(e / old)}))"
        return host.doprint(e)

    @staticmethod
    def planned(ir, plan, tensors, point, scalar_new=frozenset()):
        """The update as the planned programs print it: (assignments with the single-use values substituted
        into their readers (inline.py), the states whose tensors may take their new values (output symbol ->
        (state list, state symbol)), the symbols read after the program).  The new values of states that are
        one number per tensor (``scalar_new``) are computed on the host before it."""
        assignments = [(s_, e) for s_, e in ir.assignments if s_ not in scalar_new] \
            + ([plan.param_new] if point is not None else [])
        final = {sym for _, sym in ir.outputs if sym not in scalar_new} | ({plan.param_new[0]} if point is not None else set())
        keep = final | {s for c in plan.need.values() for s in c.free_symbols}
        by_name = state_symbols(ir)
        dests = {sym: (name, by_name[name]) for name, sym in ir.outputs
                 if name in by_name and str(sym) != name and (point is None or name != ir.mean) and sym not in scalar_new}
        return inline_single_use(assignments, keep, tensors), dests, final

    @staticmethod
    def program(ir, plan, tensors, point, scalar_new=frozenset()):
        """The multi-tensor program with planned buffers (codegen/backends/torch/inplace.py): every state whose
        old value is dead is updated in its own tensors, the mean (the parameter) included.  The fused kernel
        (codegen/backends/torch/kernel.py) prints the same plan on one tensor."""
        program, dests, final = TorchTarget.planned(ir, plan, tensors, point, scalar_new)
        comp = PlannedCompiler(tensors, dests, final, indent="        ", step=ir.step_symbol)
        return comp.compile_program(program, plan.need)

    @staticmethod
    def checks_view(ir, host, which="sparse_checks"):
        """A recipe's checks on sparse gradients (peer: sparse_gradients: validate; the constructor's are
        codegen/validation.py's) as (Python condition, message pieces), and the hyperparameters they read."""
        checks = None if ir.peer is None else getattr(ir.peer, which)
        if checks is None:
            return None, []
        used = set()
        for c in checks:
            used |= {str(s) for s in c.condition.free_symbols}
        return ([(host.doprint(c.condition), c.message) for c in checks],
                [h for h in ir.hyperparameters if any(str(s) in used for s in h.symbols)])

    @staticmethod
    def point_view(plan) -> PointView | None:
        """A parameter that holds an expression of the state (``parameter: binary(lam)``): its initial program."""
        if plan.mean is not None:
            return None
        init_c = ForeachCompiler(set(plan.state_syms), indent="                ")
        init_c.assign(sp.Symbol("param_init"), plan.parameter)
        return {"list": "_pr", "saved": "_saved", "text": sp.sstr(plan.parameter), "init_program": init_c.lines,
                "init_hyper": [h for h in plan.ir.hyperparameters
                               if any(s in plan.parameter.free_symbols for s in h.symbols)]}

    @staticmethod
    def sampling_view(plan, host) -> SamplingView | None:
        """Monte Carlo recipes: the sample θ(ε) and the per-sample statistics as multi-tensor programs."""
        sm = plan.ir.sampling
        if sm is None:
            return None
        theta_c = ForeachCompiler(plan.state_syms | {sm.eps}, indent="            ")
        theta_c.assign(sm.theta, sm.theta_expr)
        values = [k for k, o in sm.calls if o == "loss"]      # the loss at a sample: one number, not a tensor
        # what the draw computed (e.g. the spread that scales ε) is kept with the sample and read again by the
        # statistics instead of being computed twice; the same operations on the same values: the same bits
        plain = not sm.chained and getattr(sm, "shaping", None) is None       # (those keep other things per sample)
        seed = {e: f"_kept{n}" for e, n in theta_c.memo.items()} if plain else {}
        stat_c = ForeachCompiler(plan.state_syms | {sm.eps, sm.theta} | {k for k, _ in sm.calls if k not in values}
                                 | {c[0] for c in sm.chained}, indent="            ", seed=seed)
        stat_names = []
        for avg, e in sm.stats:
            val = sp.Symbol(f"_sample_{avg}")
            cond = plan.stat_need[avg]
            stat_c.assign(val, e, cond)
            stat_names.append((str(avg), str(val), None if cond == sp.true else host.doprint(cond)))
        # a statistic whose value is a list its program allocated (and no other statistic holds) becomes the
        # running mean itself on the first sample, and takes the difference in place after: no copy
        names = [stat_c.bound.get(sp.Symbol(v)) for _, v, _ in stat_names]
        fresh = [n in stat_c.temps and names.count(n) == 1 for n in names]
        # laid out flat (flat_groups), the gradients of a sample are a list of their own (a copy of p.grad), so a
        # statistic that is one of them is fresh there too
        calls = {str(k) for k, _ in sm.calls if k not in values}
        flat_fresh = [a for (a, _, _), n, f in zip(stat_names, names, fresh)
                      if not f and n is not None and str(n) in calls and names.count(n) == 1]
        kept = sorted((n for n in set(theta_c.memo.values()) if f"_kept{n}" in stat_c.used_seed),
                      key=lambda n: int(n[2:]))
        return {"kept": [(n, f"_kept{n}") for n in kept],
                "samples": host.doprint(sm.samples), "samples_code": samples_code(sm.samples),
                "eps": str(sm.eps), "theta": str(sm.theta),
                "theta_program": theta_c.lines, "stat_program": stat_c.lines,
                # the sample is a list the draw's program allocated (nothing else holds it): the parameters may
                # point at it for the block instead of taking a copy of it
                "theta_fresh": theta_c.bound.get(sm.theta) in theta_c.temps,
                "stats": [(a, v, c, f) for (a, v, c), f in zip(stat_names, fresh)], "flat_fresh": flat_fresh,
                "grads": [(str(k), o) for k, o in sm.calls if k not in values], "draw": DRAWS.get(sm.draw),
                "chained": chained_view(plan, sm), "loss_values": [str(k) for k in values],
                "shaping": shaping_view(plan, sm, host, values)}


def shaping_view(plan, sm, host, values) -> ShapingView | None:
    """Loss values ranked over the samples of a step (``Sampling.shaping``, rule fitness_shaping): each sample's
    draw and loss value are kept until step(), which ranks the values, replaces each by the rule's value of its
    rank (weights w(r) over the ranks ``_r`` = 1..n_samples, their sum ``_W``; printed from the rule's
    expressions) and then accumulates the statistics sample by sample, as the numpy target does."""
    sh = getattr(sm, "shaping", None)
    if sh is None:
        return None
    if sm.chained or sm.reductions or len(values) != len(sm.calls):
        raise UnsupportedTarget(f"recipe '{plan.ir.recipe}': the torch target ranks the loss values of samples that "
                                "evaluate the loss alone (no gradient at the samples)", "approximations")
    n, ranks, w_r, total = (sp.Symbol(x) for x in ("n_samples", "_r", "_w_r", "_W"))
    known = plan.state_syms | {sm.eps}
    theta_c = ForeachCompiler(known, indent="                ")
    if any(sm.theta in e.free_symbols for _, e in sm.stats):     # θ_k again from the kept draw
        theta_c.assign(sm.theta, sm.theta_expr)
    stat_c = ForeachCompiler(known | {sm.theta}, indent="                ")
    for avg, e in sm.stats:
        stat_c.assign(sp.Symbol(f"_sample_{avg}"), e, plan.stat_need[avg])
    return {"name": sh.name, "call": str(sh.call),
            "weight": host.doprint(sh.weight.xreplace({sh.rank: ranks, sh.count: n})),
            "value": host.doprint(sh.value.xreplace({sh.weight_of_rank: w_r, sh.total: total, sh.count: n})),
            "theta_program": theta_c.lines, "stat_program": stat_c.lines}


def chained_view(plan, sm) -> ChainedView | None:
    """Oracles at points computed from earlier oracle values (``Sampling.chained``): each is one more phase of a
    sample (``sampled_params`` moves the parameters to the point of the next phase); the per-sample sums over
    every coordinate of all groups (``Sampling.reductions``) are computed before the first such point."""
    if not sm.chained:
        return None
    known = plan.state_syms | {sm.eps, sm.theta} | {k for k, _ in sm.calls}
    red_c = ForeachCompiler(known, indent="            ")
    reductions = []
    for r, e in sm.reductions:
        val = sp.Symbol(f"_terms_{r}")
        red_c.assign(val, e)
        reductions.append((str(r), str(val)))
    phases: list[PhaseView] = []
    used: set[str] = set()
    for sym, oracle, point, expr in sm.chained:
        point_c = ForeachCompiler(known, indent="            ")
        point_c.assign(point, expr)
        phases.append({"symbol": str(sym), "oracle": oracle, "point": str(point), "program": point_c.lines})
        known = known | {sym}
        used |= {str(x) for x in expr.free_symbols}
    for _, e in sm.reductions:
        used |= {str(x) for x in e.free_symbols}
    kept = [str(sm.eps), str(sm.theta)] + [str(k) for k, _ in sm.calls] + [p["symbol"] for p in phases]
    return {"reductions": reductions, "reduction_program": red_c.lines, "phases": phases,
            "hyper": plan.hyper_using(used), "kept": kept}


TARGET = TorchTarget()


#: what the class docstring says of each torch.optim switch the constructor takes
_SWITCH_DOC = {"maximize": "``maximize`` (ascend)", "foreach": "``foreach`` (False: one tensor at a time)",
               "fused": "``fused`` (one compiled kernel per tensor, falling back to the multi-tensor path if "
                        "compilation fails)"}


def switch_doc(switches) -> str:
    """The docstring's sentence on torch.optim's switches: only those the constructor takes (a recipe's
    ``peer: switches`` may leave some out), each with what it does; ``capturable`` and ``differentiable`` are
    accepted for signature compatibility and refuse True."""
    present = [sw for group in switches for sw in group]
    named = [_SWITCH_DOC[sw] for sw in ("maximize", "foreach", "fused") if sw in present]
    compat = [f"``{sw}``" for sw in ("capturable", "differentiable") if sw in present]
    parts = []
    if named:
        parts.append("Besides torch.optim's " + (", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1
                                                 else named[0]))
    if compat:
        both = " and ".join(compat)
        parts.append(("it accepts " if named else "It accepts ") + both + " for signature compatibility and "
                     f"refuses True for {'both' if len(compat) > 1 else 'it'}")
    if not parts:
        return ""
    return textwrap.fill(", ".join(parts) + ".", width=108, initial_indent="    ", subsequent_indent="    ")
