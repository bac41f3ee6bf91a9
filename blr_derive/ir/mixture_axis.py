"""The IR of a mixture whose components are an array axis (``components: K``, K a size name;
``blr_derive/candidates/mixture_axis.py``): which component axes each quantity of the program has.

The derivation is written for a generic component k and a generic other component j.  Its leaves say which array
each generic symbol stands for (``m_k`` and ``m_j`` are both the state ``m``, of shape (K, P), read along the k and
the j axis); every other quantity's axes follow from its expression: the union of its symbols' axes, less j under a
sum over j (``SumOverComponents``, ``LogSumExpOverComponents``).  Arrays keep their axes first, in the order j, k,
then their own dimensions: ``a_j_k`` is a (K, K) array indexed [j, k], ``gq_k`` a (K, P) array.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.types import Expr
from blr_derive.ir.model import Dim, UpdateIR
from blr_derive.rules.base import ComponentAxis
from blr_derive.rules.mixture import OVER_COMPONENTS

#: the component axes, in array order
AXES = "jk"


def axes_of(e: Expr, axes: dict[Expr, str]) -> str:
    """The component axes of expression ``e`` (a subset of "jk", in that order), given those of its symbols."""
    if e in axes:
        return axes[e]
    if isinstance(e, (sp.Symbol, sp.MatrixSymbol)) or not isinstance(e, sp.Basic) or not e.args:
        return ""
    found = set()
    for a in e.args:
        found |= set(axes_of(a, axes))
    if isinstance(e, OVER_COMPONENTS):
        found.discard("j")
    return "".join(x for x in AXES if x in found)


def with_component_axis(ir: UpdateIR, info: ComponentAxis) -> UpdateIR:
    """Set ``ir.components`` of the UpdateIR of a mixture whose components are an array axis: the size, the
    axes and printed name of every symbol of the program, and the state's dimensions moved one axis right (the
    component axis is first, bound by the first state array)."""
    axes = dict(info.leaves)
    for s, e in ir.assignments:
        axes[s] = axes_of(e, axes)
    names = {s: info.names.get(s, str(s)) for s in axes}
    state = {v.name for v in ir.state}
    dims = [Dim(d, var, axis + 1 if var in state else axis) for d, var, axis in ir.dims]
    ir.dims = [Dim(info.size, ir.state[0].name, 0)] + dims
    if info.data is not None:   # a sized family over a run-time axis: its scalars per coordinate are arrays of length K
        for v in ir.state + ir.data:
            if v.kind == "scalar" and (v.family or v.name in info.data):
                v.kind = f"array ({info.size},)"
    # the arrays with a leading component axis: the state, and data with one value per component (a sized family
    # over a run-time axis, blr_derive/candidates/sized_axis.py)
    ir.components = {"size": str(info.size), "axes": axes, "names": names,
                     "state": [v.name for v in ir.state if not v.fixed] + list(info.data or ())}
    return ir
