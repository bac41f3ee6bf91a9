"""The triton target's render context: what its renderer hands to ``templates/optimizer.py.j2`` (codegen/context.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NotRequired, TypedDict

from blr_derive.codegen.backends.triton.kernels import Kernel, ModuleKernels
from blr_derive.codegen.backends.triton.printer import TritonFusedCompiler
from blr_derive.codegen.validation import Validation
from blr_derive.ir.model import HyperVar, UpdateIR, Var


class PointView(TypedDict):
    """A parameter that holds an expression of the state: the kernel body that writes it at construction."""
    init_c: TritonFusedCompiler
    text: str
    init_state: list[str]            # the state buffers that body reads
    init_hyper: list[HyperVar]


class StatView(TypedDict):
    """One Monte Carlo average the collect kernel keeps."""
    name: str
    val: str
    flag: str | None                 # the constexpr under which it is averaged
    cond: str | None                 # the same condition on the host


class ShapingView(TypedDict):
    name: str
    call: str
    weight: str
    value: str


class KernelView(TypedDict):
    """A kernel of a chained sample (Sampling.chained): its program and what it loads."""
    comp: TritonFusedCompiler
    state: list[str]
    kept: list[str]
    eps: bool
    mean: bool
    kernel: NotRequired[Kernel]      # its description (codegen/backends/triton/kernels.py), added with the others


class PhaseView(KernelView):
    symbol: str
    oracle: str
    point: str


class ChainedView(TypedDict):
    kept: list[tuple[str, str, int]]           # (name, oracle, the point of the sample it is taken at)
    reductions: list[tuple[str, str]]
    reduce: KernelView | None
    phases: list[PhaseView]
    hyper: list[HyperVar]
    collect_bufs: list[str]


class SamplingView(TypedDict):
    """A Monte Carlo recipe: the draw kernel's θ(ε) and the collect kernel's per-sample statistics."""
    samples: str
    samples_code: str
    eps: str
    theta: str
    theta_text: str
    draw: str | None                           # tl.randn or tl.rand's name; None for a point mass
    theta_c: TritonFusedCompiler
    stat_c: TritonFusedCompiler
    stats: list[StatView]
    chained: ChainedView | None
    collect_bufs: list[str]
    needs_theta: bool
    grads: list[tuple[str, str]]
    loss_values: list[str]
    shaping: ShapingView | None
    theta_state: list[str]
    stat_state: list[str]


@dataclass(frozen=True)
class TritonContext:
    ir: UpdateIR
    mean: str | None
    pvar: str                                  # the name a kernel gives the parameter's value
    point: PointView | None
    outputs: list[tuple[str, str]]
    mean_out: str
    others: list[Var]
    host: Callable[[object], str]
    init_hyper: list[HyperVar]
    grads: list[tuple[str, str]]
    sampling: SamplingView | None
    fused: TritonFusedCompiler                 # the update kernel's body and host values
    stat_loads: list[tuple[str, str | None]]   # (average, the constexpr it is loaded under)
    update_state: list[str]
    kernels: ModuleKernels
    helper_sources: list[str]
    cols: list[str]                            # the oracles of the pointer table, in column order
    col_of: dict[str, int]
    other_oracles: list[str]
    theta_hyper: list[HyperVar]
    stat_hyper: list[HyperVar]
    stored: dict[str, str]
    keeps_step: bool
    scalar_stored: list[str]
    data: list[tuple[str, str, object]]
    validation: Validation
    objective: dict | None = None              # the BLR objective method (codegen/objective.py)
    objective_note: str | None = None          # why there is none (codegen/objective.py target_note)
