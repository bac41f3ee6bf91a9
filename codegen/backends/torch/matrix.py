"""torch target, recipes whose state holds per-parameter matrices (an elementwise program over a matrix mean with
matrix state beside it: the eigenbasis candidate's Kronecker factors and bases): a ``torch.optim.Optimizer`` that
updates its parameters one at a time, each step the numpy target's array program printed on torch tensors.

What the multi-tensor path (``_foreach`` lists, fused kernels, codegen/backends/torch/inplace.py) cannot express,
matrix products, QR and eigendecompositions of a parameter's own factors, this path prints as the numpy target
does (the shared array printer, :mod:`blr_derive.codegen.arrays.printer`), its names mapped to torch:

* ``numpy.<f>(...)`` for an elementwise function f becomes ``_ufunc("f", ...)`` (the module's helper: torch's
  function on tensors, math's or operator's on host numbers, so that a condition on hyperparameters and the step
  count stays a Python bool); a function outside :data:`UFUNCS`, or any other numpy or scipy name, is refused
  (UnsupportedTarget, at the recipe's family);
* the eigenbasis helpers (``_power_basis``, ``_rayleigh_order``, ``_reordered``, ``_eigenbasis``) are the torch
  runtime's (``torch.linalg.qr``, ``torch.linalg.eigh``, a stable ``torch.argsort``); any other helper is refused.

A parameter is the matrix mean as it is (2-D), or as one column (1-D: the rule's Kronecker structure with a 1 × 1
right factor); other shapes are refused at step time.  State without an initial value in the recipe (the factors
and bases: "given by the caller") is set with ``init_state(p, **state)`` before the parameter's first step.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from blr_derive.codegen.arrays.printer import ArrayPrinter
from blr_derive.codegen.arrays.views import module_shapes
from blr_derive.codegen.validation import Validation, validation
from blr_derive.core.errors import UnsupportedTarget
from blr_derive.ir.model import UpdateIR

#: the template this path renders (codegen/backends/torch/templates/)
MATRIX_TEMPLATE = "matrix_optimizer.py.j2"

#: numpy's elementwise functions an array program may call (the torch runtime's _UFUNC_TORCH / _UFUNC_HOST)
UFUNCS = frozenset({"sqrt", "exp", "log", "log1p", "expm1", "abs", "sign", "tanh", "sin", "cos", "minimum",
                    "maximum", "where", "logaddexp", "equal", "not_equal", "greater", "greater_equal", "less",
                    "less_equal", "mod"})
#: the array printer's helpers this path has torch versions of, each with the helpers it calls
HELPERS = {"_power_basis": ("_rayleigh_order",), "_reordered": ("_rayleigh_order",), "_rayleigh_order": (),
           "_eigenbasis": ()}
_CALL = re.compile(r"(?<![\w.])numpy\.([A-Za-z_][A-Za-z0-9_]*)\(")
_CONST = {"numpy.nan": "math.nan", "numpy.inf": "math.inf", "numpy.pi": "math.pi"}
_LEFT = re.compile(r"(?<![\w.])(numpy|scipy)\.[A-Za-z_][A-Za-z0-9_.]*")


def has_matrix_state(ir) -> bool:
    return any(v.kind == "matrix" for v in ir.state)


def _refuse(ir, what):
    raise UnsupportedTarget(f"recipe '{ir.recipe}': the torch target updates a parameter with matrix state by "
                            f"the numpy target's array program on tensors; {what}", "family")


def torch_code(ir, code: str) -> str:
    """The numpy target's printed ``code`` with its names as this path's (see the module's docstring)."""
    def call(m):
        if m.group(1) not in UFUNCS:
            _refuse(ir, f"numpy.{m.group(1)} has no counterpart here (the numpy and jax targets print it)")
        return f'_ufunc("{m.group(1)}", '
    out = _CALL.sub(call, code)
    for k, v in _CONST.items():
        out = re.sub(rf"(?<![\w.]){re.escape(k)}(?![\w])", v, out)
    left = _LEFT.search(out)
    if left:
        _refuse(ir, f"{left.group(0)} has no counterpart here (the numpy and jax targets print it)")
    return out


def matrix_view(ir) -> dict:
    """What templates/matrix_optimizer.py.j2 prints: the program's parts as torch code."""
    pr = ArrayPrinter()

    def code(e):
        return torch_code(ir, pr.doprint(e))
    calls = [(code(c.symbol), c.oracle, code(c.argument)) for c in ir.oracle_calls]
    assigns = [(code(s), code(e)) for s, e in ir.assignments]
    sampling = None
    if ir.sampling is not None:
        sm = ir.sampling
        if sm.draw != "normal" or sm.more_draws or sm.accept is not None or sm.chained or sm.reductions \
                or sm.shaping is not None:
            _refuse(ir, "its samples of q are one standard-normal draw each, the gradient at the sample their only "
                        "oracle (the numpy target draws any sampler)")
        sampling = {"samples": code(sm.samples), "eps": code(sm.eps), "theta": code(sm.theta),
                    "theta_expr": code(sm.theta_expr), "calls": [(code(s), o) for s, o in sm.calls],
                    "stats": [(code(a), code(e)) for a, e in sm.stats]}
    helpers = set(pr.helpers)
    unknown = sorted(helpers - set(HELPERS))
    if unknown:
        _refuse(ir, f"the program calls {', '.join(unknown)}, which has no torch version here (the numpy target "
                    "prints it)")
    for h in list(helpers):
        helpers |= set(HELPERS[h])
    states = []
    for v in ir.state:
        if v.name == ir.mean:
            continue
        if v.init_state is not None:
            _refuse(ir, f"state '{v.name}' starts from another state's value (the numpy target's init() sets it)")
        states.append({"name": v.name, "init": None if v.init is None else code(v.init),
                       "matrix": v.kind == "matrix"})
    shapes = module_shapes(ir)
    return {
        "calls": calls, "assigns": assigns, "sampling": sampling, "helpers": sorted(helpers), "states": states,
        "required": [s["name"] for s in states if s["init"] is None],
        "dims": [(str(d), var, axis) for d, var, axis in ir.dims],
        "outputs": [(name, code(sym)) for name, sym in ir.outputs],
        "shapes": shapes, "symmetric": sorted(ir.symmetric), "validation": validation(ir),
    }


@dataclass(frozen=True)
class MatrixContext:
    """What templates/matrix_optimizer.py.j2 reads (:func:`matrix_view`'s fields and the IR)."""
    ir: UpdateIR
    calls: list[tuple[str, str, str]]              # (symbol, oracle, argument) at the mean, printed
    assigns: list[tuple[str, str]]
    sampling: dict[str, Any] | None                # samples, eps, theta, theta_expr, calls, stats (printed)
    helpers: list[str]                             # the torch runtime's helpers the program calls
    states: list[dict[str, Any]]                   # every state but the mean: name, init (printed or None), matrix
    required: list[str]                            # the states without an initial value (init_state sets them)
    dims: list[tuple[str, str, int]]
    outputs: list[tuple[str, str]]
    shapes: dict[str, Any]
    symmetric: list[str]
    validation: Validation
    objective: dict | None = None                  # the BLR objective method (codegen/objective.py)
    objective_note: str | None = None              # why there is no objective (codegen/objective.py target_note)
