"""The numpy side of :func:`blr_derive.testing.equivalent`: a user's ``step(state, *, oracles=..., rng=...,
**hyperparameters)`` function (the generated numpy modules' API, which the project's own hand-written references
follow) against the recipe's generated numpy module, on losses with gradient and Hessian oracles."""
from __future__ import annotations

import numpy as np

from blr_derive.testing.problems import agree, brief, completed, describe, draw_seed, settings_for
from blr_derive.testing.results import Divergence, Report

P = 4


def _losses(seed: int) -> list:
    """(name, grad, hess) of a convex quadratic with a dense SPD Hessian and of a non-convex function."""
    rng = np.random.default_rng(seed + 7)
    Q = rng.normal(size=(P, P))
    A, c = Q @ Q.T / P + np.eye(P), rng.normal(size=P)
    quadratic = ("quadratic", lambda x: A @ (x - c), lambda x: A)
    nonconvex = ("nonconvex", lambda x: 3 * np.cos(3 * x) + (x - c) + 0.4 * (x - c) ** 3,
                 lambda x: np.diag(-9 * np.sin(3 * x) + 1 + 1.2 * (x - c) ** 2))
    return [quadratic, nonconvex]


def _oracles(module, grad, hess, elementwise: bool) -> dict:
    out = {}
    for name in module.ORACLES:
        if name == "grad":
            out[name] = grad
        elif name == "hess":
            out[name] = (lambda x: np.diag(hess(x)).copy()) if elementwise else hess
        else:
            raise ValueError(f"equivalent(): the recipe asks for the oracle '{name}', which the numpy problem set "
                             "does not provide (it has grad and hess)")
    return out


def _initial(module, seed: int) -> dict:
    """A valid initial state: the required states only (a mean of random values, precisions positive, matrices
    symmetric positive definite), the others at the module's defaults."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in module.REQUIRED_STATE:
        shape = module.SHAPES.get(name, "*")
        if shape in ("*", ("P",)):
            out[name] = rng.normal(size=P) if len(out) == 0 else rng.uniform(0.5, 2.0, size=P)
        elif shape == ("P", "P"):
            Q = rng.normal(size=(P, P))
            out[name] = Q @ Q.T / P + np.eye(P)
        elif shape == ():
            out[name] = float(rng.uniform(0.5, 2.0))
        else:
            raise ValueError(f"equivalent(): state '{name}' of shape {shape} is not in the numpy problem set")
    return out


def equivalent_numpy(derived, fn, *, names: dict, values: dict, settings=None, seed: int = 0, steps: int = 6):
    mod = derived.compile("numpy")
    label = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    report = Report(derived.name, label, equal=True)
    if mod.DATA:
        raise ValueError(f"equivalent(): recipe '{derived.name}' reads data ({', '.join(mod.DATA)}); the numpy "
                         "problem set has losses with oracles only")
    defaults = completed(derived.name, mod.HYPERPARAMETERS, values)
    elementwise = mod.SHAPES.get(mod.REQUIRED_STATE[0]) == "*"
    order = [n for n, _ in derived.assignments]
    for setting in (settings if settings is not None else settings_for(defaults)):
        setting = {**defaults, **setting}
        user_hyper = {names.get(k, k): v for k, v in setting.items()}
        for lname, grad, hess in _losses(seed):
            oracles = _oracles(mod, grad, hess, elementwise)
            sg = mod.init(**_initial(mod, seed))
            su = {names.get(k, k): np.array(v, copy=True) for k, v in sg.items()}
            report.runs += 1
            for k in range(steps):
                pre_u = {key: np.array(v, copy=True) for key, v in su.items()}
                pre_g = sg
                try:
                    sg = mod.step(sg, oracles=oracles, rng=np.random.default_rng(draw_seed(seed, k)), **setting)
                except (ArithmeticError, ValueError, np.linalg.LinAlgError) as exc:
                    # the derived step itself cannot go on here (a Newton precision that stops being positive
                    # definite on the non-convex loss): what ran so far was compared; the rest is not exercised
                    note = f"{brief(setting, defaults)} on '{lname}' after step {k} (the derived step raises " \
                           f"{type(exc).__name__})"
                    if note not in report.skipped:
                        report.skipped.append(note)
                    break
                try:
                    su = fn(su, oracles=oracles, rng=np.random.default_rng(draw_seed(seed, k)), **user_hyper)
                except Exception as exc:                       # noqa: BLE001 - the user's code: report it
                    report.equal = False
                    report.divergence = Divergence(lname, "float64", setting, k + 1, 0, "raises",
                                                   f"raises {type(exc).__name__}: {exc}", "steps")
                    return report
                report.steps_checked += 1
                bad = [n for n in order if names.get(n, n) in su and n in sg
                       and not agree(su[names.get(n, n)], sg[n], "float64", pre_u.get(names.get(n, n)), pre_g.get(n))]
                if not bad:
                    continue
                report.equal = False
                # evaluate the derived step on the user's state before it: the first assignment that differs
                mine = {n: pre_u[names.get(n, n)] for n in pre_g if names.get(n, n) in pre_u}
                local = mod.step({**pre_g, **mine}, oracles=oracles, rng=np.random.default_rng(draw_seed(seed, k)),
                                 **setting)
                first = next((n for n in order if names.get(n, n) in su and n in local
                              and not agree(su[names.get(n, n)], local[n], "float64", mine.get(n), mine.get(n))), None)
                name = first or bad[0]
                yours, theirs = describe(np.asarray(su[names.get(name, name)]),
                                         np.asarray(local[name] if first else sg[name]))
                div = Divergence(lname, "float64", setting, k + 1, 0, names.get(name, name), yours, theirs,
                                 localized=first is not None)
                div.assignment, div.rules, div.definitions = derived.explain(name, setting)
                report.divergence = div
                return report
    return report
