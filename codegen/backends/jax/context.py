"""The jax target's render contexts (codegen/context.py): an optax transformation (``templates/transformation.py.j2``),
plain jax.numpy functions of a single family, also with a component axis (``templates/functions.py.j2``), and a
factorized recipe (``templates/factorized.py.j2``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from blr_derive.codegen.arrays.views import CheckView, EntriesView, EstimateView, FactorizedView, MapsView, PointView, ShapingView
from blr_derive.codegen.validation import Validation
from blr_derive.ir.model import HyperVar, UpdateIR


class StateView(TypedDict):
    """A state of the transformation besides the parameter."""
    name: str
    new: str                                   # its new value's name
    init: str                                  # its initial value ("param": a copy of the parameter)
    scalar: bool                               # one number for the whole pytree
    keep: str | None                           # the static condition it is kept under (None: always)
    desc: str


class StatView(TypedDict):
    """A Monte Carlo average the transformation keeps (acc_<name>)."""
    name: str
    field: str
    value: str
    keep: str | None
    never: bool


class TxSamplingView(TypedDict):
    eps: str
    theta: str
    theta_line: str
    theta_text: str
    draw: str                                  # the jax.random function
    stats: list[StatView]
    needs_theta: bool
    calls: list[tuple[str, str]]
    samples: str


class Signature(TypedDict):
    positional: list[HyperVar]
    keyword: list[HyperVar]
    all: list[HyperVar]


@dataclass(frozen=True)
class TransformationContext:
    special: bool                              # the update calls jax.scipy.special
    used: set[str]                             # every name the printed code uses
    uses_optax: bool
    ir: UpdateIR
    factory: str
    state_class: str
    tx_class: str
    hyper: Signature
    validation: Validation
    step: str | None
    states: list[StateView]
    host_lines: list[str]
    leaf_lines: list[str]
    leaf_args: list[str]
    leaf_states: list[StateView]
    scalar_states: list[StateView]
    grads: list[tuple[str, str]]
    other_oracles: list[tuple[str, object]]
    stat_inputs: list[tuple[str, str]]
    sampling: TxSamplingView | None
    stats: list[StatView]
    mean: str | None
    point: str | None                          # what the parameter holds, as text
    numbers: list[str]                         # the names bound to numbers, each a number or a schedule
    reads: dict[str, list[str]]                # init, update, sample -> the numbers that function reads
    objective: dict | None = None              # the module-level objective(params, state, loss) (issue 42)
    objective_note: str | None = None          # why there is none (codegen/objective.py target_note)


class FunctionsSamplingView(TypedDict):
    samples: str
    eps: str
    quadrature: bool
    draws: list[tuple[str, str]]               # (noise, jax.random law) of a sample
    theta: str
    theta_expr: str
    accept: str | None
    calls: list[tuple[str, str]]
    stats: list[tuple[str, str]]
    point: bool
    reductions: list[tuple[str, str]]
    chained: list[tuple[str, str, str, str]]
    shaping: ShapingView | None
    avgs: list[str]
    shapes: list[str | None]


@dataclass(frozen=True)
class FunctionsContext:
    ir: UpdateIR
    calls: list[tuple[str, str, str]]
    assigns: list[tuple[str, str]]
    outputs: list[tuple[str, str]]
    inits: list[tuple[str, str | None, str | None]]
    init_doc: dict[str, str]
    special: bool
    solve: bool
    host: bool                                 # the module computes something on the host with numpy
    helper_sources: list[str]
    sampling: FunctionsSamplingView | None
    maps: MapsView | None
    newton: str | None
    entries: EntriesView | None
    point: PointView | None
    dims: list[tuple[str, str, int]]
    init_hyper: list[HyperVar]
    static: list[str]
    step: str | None
    shapes: dict[str, Any]
    symmetric: list[str]
    first: str
    checks: list[CheckView]                    # the run-time domain checks, each after the assignment of its value
    check_domains: bool                        # the module defines _check_domain and its CHECK_DOMAINS switch
    objective: EntriesView | None = None       # the BLR objective's entry point (blr_derive/ir/objective.py)
    estimate: EstimateView | None = None       # the BLR objective where E_q[ℓ] is estimated (Monte Carlo, delta method)


@dataclass(frozen=True)
class FactorizedContext(FactorizedView):
    imports: list[str]
    solve: bool
    helper_sources: list[str]
    plate: list[str]
    index: str | None
    step: str | None
