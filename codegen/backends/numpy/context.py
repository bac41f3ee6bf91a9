"""The numpy target's render contexts: what its renderer hands to ``templates/module.py.j2`` (a single family, also
with a component axis) and ``templates/factorized.py.j2`` (codegen/context.py)."""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence
from typing import TypedDict

from blr_derive.codegen.arrays.mixture_axis import AxisPrinter as MixtureAxisPrinter
from blr_derive.codegen.arrays.printer import ArrayPrinter
from blr_derive.codegen.arrays.views import CheckView, EntriesView, EstimateView, FactorizedView, MapsView, PointView, ShapingView
from blr_derive.ir.model import HyperVar, UpdateIR


class SamplingView(TypedDict):
    """Samples of q or quadrature nodes, printed: the draws, θ, a rejection sampler's condition, the oracle calls
    at θ, the statistics, a fitness shaping, chained points and the statistics' own-shape zeros."""
    samples: str
    eps: str
    draw: str                                  # numpy's Generator method: standard_normal or random
    quadrature: bool
    more: list[tuple[str, str]]                # further draws of a sample and their methods
    theta: str
    theta_expr: str
    accept: str | None
    calls: list[tuple[str, str]]
    stats: list[tuple[str, str]]
    shaping: ShapingView | None
    point: bool
    reductions: list[tuple[str, str]]
    chained: list[tuple[str, str, str, str]]
    zeros: dict[str, str]


@dataclass(frozen=True)
class ModuleContext:
    ir: UpdateIR
    calls: Sequence[tuple[object, ...]]       # (symbol, oracle, argument, description) printed; none with a component axis
    assigns: list[tuple[str, str]]
    dims: list[tuple[str, str, int]]
    helpers: list[str]
    helper_sources: list[str]
    sampling: SamplingView | None
    imports: list[str]
    maps: MapsView | None
    state_names: list[str]
    printer: ArrayPrinter | MixtureAxisPrinter  # the printer the template prints the rest with
    init_hyper: list[HyperVar]
    entries: EntriesView | None
    point: PointView | None
    shapes: dict[str, object]
    symmetric: list[str]
    checks: list[CheckView]                   # the run-time domain checks, each after the assignment of its value
    objective: EntriesView | None = None      # the BLR objective's entry point (blr_derive/ir/objective.py)
    estimate: EstimateView | None = None      # the BLR objective where E_q[ℓ] is estimated (Monte Carlo, delta method)


@dataclass(frozen=True)
class FactorizedContext(FactorizedView):
    helper_sources: list[str]
    imports: list[str]


__all__ = ["ArrayPrinter", "FactorizedContext", "ModuleContext", "SamplingView"]
