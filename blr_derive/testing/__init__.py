"""Regression-test your own optimizer against its derivation (issue 20): ``blr_derive.testing.equivalent``.

    from blr_derive.testing import equivalent
    report = equivalent("adam", MyAdam)                 # a recipe (catalog name, path, Recipe) and a torch optimizer
    assert report.equal, report                          # else: where it departs, and the derived assignment

The user's optimizer (a ``torch.optim.Optimizer`` class or a factory ``f(params, **hyperparameters)``) and the
optimizer generated from the recipe's derivation run side by side on a standard problem set
(:mod:`blr_derive.testing.problems`: convex and non-convex functions, a small MLP on mini-batches, intermittent
and all-zero gradients, two parameter groups, a learning-rate scheduler, a ``state_dict`` reload half-way), in
float64 and float32, each hyperparameter setting at the generated optimizer's defaults and with every hyperparameter
whose default switches a term off (a zero weight decay, momentum, ...) switched on.  Both evaluate the same
loss at their own parameters; while they agree the gradients are identical.

The report is either *equal* (within the dtype's tolerance) or the first problem, step, parameter and state
variable where they diverge, with both values and the derived equation that produced the generated value and
the rules it comes from.  Where the user's optimizer exposes its state (``optimizer.state[p]``, under the
peer's names: ``exp_avg``, ``exp_avg_sq``, ...; ``names`` maps others), the derived step is evaluated on the
user's own state at the diverging step, so the first *assignment* whose value differs is named (a wrong β on the
second moment is ``s ← β₂ s + (1 − β₂) g²``, not "step 3 differs").
"""
from __future__ import annotations

from blr_derive.testing.compare import equivalent
from blr_derive.testing.results import Divergence, Report

__all__ = ["equivalent", "Report", "Divergence"]
