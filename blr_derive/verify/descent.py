"""The BLR is a natural-gradient descent on L(q) = E_q[ℓ] − H(q) (Eq. 2 of Khan & Rue 2023): one step with a
small learning rate must not raise the generated ``objective``.  The check every objective reference of
``blr-derive check`` adds (verify/recipe.py, verify/objective_vector.py), in one place."""
from __future__ import annotations

import numpy as np

from blr_derive.verify.results import Check

NAME = "objective does not increase along a small step"
#: the learning rate of the step, where the recipe has a ``rho``
SMALL_RHO = 0.01
#: what a generated module raises where it has no value: an input outside the region the update is finite in, or
#: the step's run-time domain check (FloatingPointError: the step would leave the family's domain)
NO_VALUE = (TypeError, ValueError, ArithmeticError, np.linalg.LinAlgError)


def rise(mod, state, before: float, *, oracles=None, data=None, hyper=None) -> float:
    """(L(step(state)) − L(state)) / max(1, |L(state)|) with ρ = SMALL_RHO where the module takes a ``rho``;
    0 where the step has no value there."""
    hyper = hyper or {}
    small = {"rho": SMALL_RHO} if "rho" in getattr(mod, "HYPERPARAMETERS", {}) else {}
    try:
        after = float(mod.objective(mod.step(state, oracles=oracles, data=data, **{**hyper, **small}),
                                    oracles=oracles, data=data, **hyper)["objective"])
    except NO_VALUE:
        return 0.0
    return (after - before) / max(1.0, abs(before))


def descent_check(worst_rise: float) -> Check:
    return Check(NAME, max(worst_rise, 0.0), 1e-12, group="codegen",
                 note=f"L(step(state)) - L(state), relative, with rho = {SMALL_RHO} where the recipe has a rho")
