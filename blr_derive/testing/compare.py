"""Run a user's torch optimizer and the one generated from a recipe side by side, and say where they part
(see :mod:`blr_derive.testing`)."""
from __future__ import annotations

import inspect
import re
import sympy as sp
import torch

from blr_derive import api
from blr_derive.codegen.printing import numeric_lowering
from blr_derive.core import budget
from blr_derive.core.errors import CodegenError
from blr_derive.core.pretty import pretty
from blr_derive.ir.build import build_ir
from blr_derive.testing.numpy_side import equivalent_numpy
from blr_derive.testing.runs import _NotExercised, _refuses, _Run, user_optimizer
from blr_derive.testing.problems import PROBLEMS, brief, completed, describe, settings_for
from blr_derive.testing.results import Divergence, Report

#: torch.optim's implementation switches: never varied, passed only at their defaults
SWITCHES = {"foreach", "maximize", "capturable", "differentiable", "fused"}


# ------------------------------------------------------------------------------------------------- the recipe
class _Derived:
    """The generated torch optimizer of a recipe and what explains its values: the derived assignments
    (``EQUATIONS``), the state's stored names, and the rules behind each assignment and definition."""

    def __init__(self, recipe):
        view = recipe if hasattr(recipe, "record") else api.derive(recipe)
        self.view = view
        self.name = view.record.recipe.name
        ir = build_ir(view.record, "", numeric_lowering)
        if not hasattr(ir, "mean"):
            raise ValueError(f"equivalent(): recipe '{self.name}' is factorized (one family per block); the check "
                             "compares single-family recipes, whose state is the optimizer's")
        self.mean = ir.mean                                                # the state that is the parameter
        self.assignments = []                                              # [(state, text)]
        for line in view.record.update_lines():                           # the generated modules' EQUATIONS
            lhs, arrow, rhs = line.partition(" <- ")
            if arrow:
                self.assignments.append((lhs.strip(), f"{lhs.strip()} ← {rhs.strip()}"))
        self.definitions = {str(k): v for k, v in view.definitions.items()}
        self.update = {str(k): v for k, v in view.update.items()}

    def compile(self, target: str):
        """The generated module for ``target``; a target that cannot express the recipe is a ValueError that says
        which kinds of optimizer the recipe can be checked against."""
        try:
            return self.view.compile(target)
        except CodegenError as exc:
            kind = {"torch": "a torch optimizer", "jax": "an optax transformation", "numpy": "a numpy step function"}
            raise ValueError(f"equivalent(): recipe '{self.name}' cannot be checked against {kind[target]}: "
                             f"{exc}") from None

    def torch(self):
        """Compile the torch target (what a torch optimizer is compared with)."""
        self.module = self.compile("torch")
        classes = [c for c in vars(self.module).values() if isinstance(c, type)
                   and issubclass(c, torch.optim.Optimizer) and c.__module__ == self.module.__name__]
        self.cls = classes[0]
        self.renamed = dict(getattr(self.module, "_RENAMED", {}))          # recipe state -> stored key
        self.stored = {v: k for k, v in self.renamed.items()}              # stored key -> recipe state
        self.sampled = hasattr(self.cls, "sampled_params")                 # gradients at samples of q
        return self

    def signature(self, values: dict) -> dict:
        """The constructor's hyperparameters and their defaults (torch's switches left out), ``values`` given
        for those without a default (IVON's ``lr`` and ``ess``)."""
        out = {p.name: None if p.default is inspect.Parameter.empty else p.default
               for p in list(inspect.signature(self.cls.__init__).parameters.values())[2:]
               if p.name not in SWITCHES and p.name != "sync"}
        unknown = sorted(set(values) - set(out))
        if unknown:
            raise ValueError(f"equivalent(): recipe '{self.name}' has no hyperparameter {', '.join(unknown)}")
        return completed(self.name, out, values)

    def rules_of(self, name: str) -> list:
        """[(rule, equation)] of the derivation steps that set ``name`` (its new value) or define it."""
        targets = {name, f"{name}_new", f"{name}_next"}
        out = []
        for st in self.view.steps:
            if st.rule == "family":
                continue
            for eq in st.equations:
                if not isinstance(eq, str) and str(eq[0]) in targets and (st.rule, st.equation) not in out:
                    out.append((st.rule, st.equation))
        return out

    def explain(self, state: str, setting: dict | None = None):
        """(assignment text, its rules, the definitions it reads with their rules) of a state's update, with the
        setting's flags (booleans such as ``amsgrad``) substituted, so that only the branch that ran is shown."""
        flags = {k: sp.true if v else sp.false for k, v in (setting or {}).items() if isinstance(v, bool)}

        def at(e):
            return e.xreplace({x: flags[str(x)] for x in e.free_symbols if str(x) in flags}) if flags else e
        expr = self.update.get(state)
        if expr is None:
            return dict(self.assignments).get(state, ""), self.rules_of(state)[-3:], []
        defs, seen = [], set()

        def walk(e):
            for x in sorted(e.free_symbols, key=str):
                n = str(x)
                if n.endswith("_new") and n[:-4] in self.update:
                    n = n[:-4]
                    if n not in seen and n != state:
                        seen.add(n)
                        walk(at(self.update[n]))
                    continue
                if n in self.definitions and n not in seen:
                    seen.add(n)
                    value = at(self.definitions[n])
                    walk(value)
                    rules = self.rules_of(n)
                    defs.append((f"{n} = {pretty(value)}",) + (rules[-1] if rules else ("", "")))
        value = at(expr)
        walk(value)
        rules = [r for r in self.rules_of(state) if r[0] not in ("chain_rule_gaussian", "natural_to_ordinary")]
        return f"{state} ← {pretty(value)}", rules[-3:], [d for d in defs if d[1]] + [d for d in defs if not d[1]]




def _is_optax(obj) -> bool:
    """An optax transformation (``init`` and ``update``), or one of optax's own factories (``optax.adam``)."""
    if isinstance(obj, type):
        return False
    return (hasattr(obj, "init") and hasattr(obj, "update")) or (
        callable(obj) and str(getattr(obj, "__module__", "")).split(".")[0] == "optax")


def _is_numpy_step(fn) -> bool:
    """A numpy ``step(state, *, oracles=..., ...)`` function (the generated numpy modules' API), not a torch
    optimizer class or factory."""
    if isinstance(fn, type) or not callable(fn):
        return False
    try:
        return "oracles" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _user_factory(optimizer):
    if isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer):
        return optimizer, getattr(optimizer, "__qualname__", str(optimizer))
    if callable(optimizer):
        return optimizer, getattr(optimizer, "__qualname__", getattr(optimizer, "__name__", repr(optimizer)))
    raise TypeError("equivalent(): the optimizer must be a torch.optim.Optimizer class or a factory "
                    "f(params, **hyperparameters)")


def _accepts(factory) -> tuple[set, bool]:
    """(keyword names the user's constructor takes, whether it takes **kwargs)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return set(), True
    return ({p.name for p in params}, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params))


# ------------------------------------------------------------------------------------------------- running
def equivalent(recipe, optimizer, *, names: dict | None = None, hyper: dict | None = None, settings=None,
               values: dict | None = None, dtypes=(torch.float64, torch.float32), problems=PROBLEMS,
               seed: int = 0, framework: str | None = None) -> Report:
    """Whether ``optimizer`` is the BLR derivation of ``recipe`` (see :mod:`blr_derive.testing`).

    ``recipe``: a catalog name, a recipe file, a Recipe or a derivation (``api.derive(...)``).  ``optimizer``:
    a ``torch.optim.Optimizer`` class or a factory ``f(params, **hyperparameters)``.  ``names`` (or its alias
    ``hyper``) maps the generated optimizer's names — its constructor's hyperparameters (the peer's: ``lr``,
    ``betas``, ``weight_decay``, ...) and its state keys (``exp_avg``, ...) — to the user's where they differ.
    ``settings``: hyperparameter settings to run (default: the generated defaults, every term switched on, each
    boolean flag on in turn); ``values``: hyperparameters that replace the defaults in every setting (and give
    those without one).  Monte Carlo recipes (IVON, VOGN: the generated optimizer has ``sampled_params``) draw
    their samples in both optimizers from torch's generator seeded the same way at every step.  ``optimizer``
    may also be an optax ``GradientTransformation`` (or a factory of one: ``framework="optax"``), compared with
    the recipe's jax target, or a numpy ``step(state, *, oracles, ...)`` function, compared with its numpy
    target."""
    names = {**(hyper or {}), **(names or {})}
    for k, v in names.items():
        if not (isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", v)):
            raise ValueError(f"equivalent(): names maps names to names, got {k!r}: {v!r}")
    derived = _Derived(recipe)
    if framework == "optax" or framework is None and _is_optax(optimizer):
        from blr_derive.testing.optax_side import equivalent_optax     # jax and optax are optional: see LAZY
        report = equivalent_optax(derived, optimizer, names=names, values=values or {}, settings=settings, seed=seed)
    elif _is_numpy_step(optimizer):
        report = equivalent_numpy(derived, optimizer, names=names, values=values or {}, settings=settings, seed=seed)
    else:
        generated = derived.torch()
        budget.where(None, None)        # from here the optimizers step: a time limit is not the recipe's
        report = _equivalent_torch(generated, optimizer, names, values or {}, settings, dtypes, problems, seed)
    if report.equal and report.runs == 0:        # nothing ran: no evidence of equality (every setting refused ...)
        report.equal, report.nothing_compared = False, True
    return report


def _equivalent_torch(derived, optimizer, names, values, settings, dtypes, problems, seed) -> Report:
    """The torch side: every setting, dtype and problem, both optimizers stepped together until they differ."""
    factory, label = _user_factory(optimizer)
    accepts, var_kw = _accepts(factory)
    defaults = derived.signature(values)
    report = Report(derived.name, label, equal=True)
    queue = [(s_, None) for s_ in (settings if settings is not None else settings_for(defaults))]
    tried = []
    while queue:
        setting, parent = queue.pop(0)        # parent: the note of the refused setting this one retries
        setting = {**defaults, **setting}
        if setting in tried:
            continue
        tried.append(setting)
        user_kwargs, missing = {}, []
        for k, v in setting.items():
            uk = names.get(k, k)
            if var_kw or uk in accepts:
                user_kwargs[uk] = v
            elif v != defaults.get(k):
                missing.append(uk)
        if missing:
            report.skipped.append(f"{', '.join(missing)} (your optimizer takes no such argument)")
            continue
        for dtype in dtypes:
            dname = str(dtype).replace("torch.", "")
            for problem in problems:
                try:
                    run = _Run(derived, factory, names, problem, dtype, setting, user_kwargs, seed)
                except _NotExercised as exc:
                    if str(exc) not in report.skipped:
                        report.skipped.append(str(exc))
                    continue
                except (ValueError, TypeError) as exc:          # refused by one of them, or by both
                    gen_refuses = _refuses(lambda: derived.cls(problem.make_params(dtype, seed), **setting))
                    user_refuses = _refuses(lambda: user_optimizer(factory, names, problem, setting, user_kwargs,
                                                                  problem.make_params(dtype, seed)))
                    if (gen_refuses is None) != (user_refuses is None):
                        report.equal = False
                        report.divergence = _constructor_divergence(problem, dname, setting, gen_refuses, user_refuses)
                        return report
                    if gen_refuses is None:                     # neither alone: the failure is the pair's setup
                        raise exc
                    if parent is None:
                        note = f"{brief(setting, defaults)} (both optimizers refuse it: {gen_refuses})"
                        if note not in report.skipped:
                            report.skipped.append(note)
                        # e.g. nesterov with the active setting's dampening: retried with one change undone at a time
                        queue[:0] = [({**setting, k: defaults[k]}, note) for k in setting
                                     if k in defaults and setting[k] != defaults[k]]
                    break                                       # both refuse this setting: agreement
                if parent in report.skipped:                    # a retry runs: the refused setting is exercised
                    report.skipped.remove(parent)
                report.runs += 1
                for k in range(problem.steps):
                    try:
                        found = run.step(k)
                    except Exception as exc:                  # noqa: BLE001 - the user's code: report it
                        report.equal = False
                        report.divergence = Divergence(problem.name, dname, setting, k + 1,
                                                       0, "raises", f"raises {type(exc).__name__}: {exc}",
                                                       "steps (torch's convention: a parameter without a gradient "
                                                       "is left as it is)" if problem.skip else "steps")
                        return report
                    report.steps_checked += 1
                    if found is None:
                        continue
                    report.equal = False
                    report.divergence = _step_divergence(derived, names, run, problem, dname, setting, k, found)
                    return report
    return report


def _constructor_divergence(problem, dname, setting, gen_refuses, user_refuses) -> Divergence:
    """A setting one optimizer accepts and the other refuses."""
    if user_refuses is not None:
        yours, derived_says = f"raises {type(user_refuses).__name__}: {user_refuses}", "accepts these hyperparameters"
    else:
        yours, derived_says = "accepts these hyperparameters", f"raises {type(gen_refuses).__name__}: {gen_refuses}"
    return Divergence(problem.name, dname, setting, 0, 0, "constructor", yours, derived_says)


def _step_divergence(derived, names, run, problem, dname, setting, k, found) -> Divergence:
    """Where two optimizers first differ after step k + 1, located at the first derived assignment whose value
    differs when the derived step is evaluated on the user's state."""
    i, var, yours, theirs, pre, grads = found
    div = Divergence(problem.name, dname, setting, k + 1, i, var, *describe(yours, theirs))
    if problem.reload_at is not None and k >= problem.reload_at:
        div.note = f"both optimizers were rebuilt from their state_dict before step {problem.reload_at + 1}"
    loc = run.localize(pre, grads)
    if loc is not None:
        state, div.parameter, y2, t2 = loc
        div.variable = "parameter" if state == derived.mean else names.get(
            derived.renamed.get(state, state), derived.renamed.get(state, state))
        (div.yours, div.derived), div.localized = describe(y2, t2), True
    else:
        state = derived.mean if var == "parameter" else derived.stored.get(
            {v: k2 for k2, v in names.items()}.get(var, var), var)
    div.assignment, div.rules, div.definitions = derived.explain(state, setting)
    return div
