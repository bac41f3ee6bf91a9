"""The torch target's render context: what its renderer hands to ``templates/optimizer.py.j2`` (codegen/context.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypedDict

from blr_derive.codegen.backends.torch.kernel import KernelCompiler
from blr_derive.codegen.validation import Validation
from blr_derive.ir.model import HyperVar, UpdateIR, Var


class PointView(TypedDict):
    """A parameter that holds an expression of the state (``parameter: binary(lam)``)."""
    list: str                        # the name of the parameters' real views
    saved: str                       # the name of the kept parameters while a sample is drawn
    text: str                        # the expression, as text for the docstring
    init_program: list[str]          # the multi-tensor program that writes it at construction
    init_hyper: list[HyperVar]       # the hyperparameters that program reads


class ShapingView(TypedDict):
    """Loss values ranked over the samples of a step (rule fitness_shaping)."""
    name: str
    call: str
    weight: str                      # w(r) over the ranks, printed
    value: str                       # the value that replaces a sample's loss, printed
    theta_program: list[str]
    stat_program: list[str]


class PhaseView(TypedDict):
    """One more point of a sample, computed from the oracle values before it (Sampling.chained)."""
    symbol: str
    oracle: str
    point: str
    program: list[str]


class ChainedView(TypedDict):
    reductions: list[tuple[str, str]]          # (sum over every coordinate, its per-tensor terms)
    reduction_program: list[str]
    phases: list[PhaseView]
    hyper: list[HyperVar]
    kept: list[str]                            # what a sample keeps from one point to the next


class SamplingView(TypedDict):
    """A Monte Carlo recipe: the sample θ(ε) and the per-sample statistics as multi-tensor programs."""
    samples: str
    samples_code: str
    eps: str
    theta: str
    theta_program: list[str]
    stat_program: list[str]
    theta_fresh: bool                          # the sample is a list the draw allocated: parameters may point at it
    stats: list[tuple[str, str, str | None, bool]]   # (average, per-sample value, host condition or None, fresh:
    #                                           the value is a list of its own, kept as the running mean)
    flat_fresh: list[str]                      # the averages whose value is a sample's gradients: fresh when flat
    kept: list[tuple[str, str]]                # (the draw's list, its name in _collect): computed once per sample
    grads: list[tuple[str, str]]               # (symbol, oracle) at a sample
    draw: str | None                           # the torch function that draws ε (randn, rand)
    chained: ChainedView | None
    loss_values: list[str]
    shaping: ShapingView | None


@dataclass(frozen=True)
class TorchContext:
    ir: UpdateIR
    program: list[str]                         # the multi-tensor update (planned buffers)
    outputs: list[tuple[str, str]]             # (state, its new value's name), but the per-tensor numbers
    scalar_states: list[tuple[str, str, str]]  # (state, new value's name, host expression): one number per tensor
    scalar_names: set[str]
    mean_out: str                              # the name of what the parameter holds after the step
    others: list[Var]                          # the state besides the parameter
    host: Callable[[object], str]              # prints a host expression
    init_hyper: list[HyperVar]                 # hyperparameters a state's initial value or condition reads
    state_cond: dict[str, str | None]          # state -> the host condition it is kept under (None: always)
    cond_hyper: list[HyperVar]                 # the hyperparameters the states' and the step count's conditions read
    grads: list[tuple[str, str]]               # (symbol, oracle) at the parameter
    sampling: SamplingView | None
    fused: KernelCompiler                      # the fused path's kernel
    host_unpack: str                           # the kernel's host values, unpacked
    point: PointView | None
    param_list: str
    saved: str
    kernel_lists: list[str]                    # the fused kernel's tensor arguments
    other_oracles: list[str]
    theta_hyper: list[HyperVar]
    stat_hyper: list[HyperVar]
    stored: dict[str, str]                     # state -> the key it is stored under
    renamed: list[tuple[str, str]]
    validation: Validation
    sparse_checks: list[tuple[str, tuple]] | None
    sparse_hyper: list[HyperVar]
    keeps_step: bool
    first_step: bool
    switches: tuple[tuple[str, ...], tuple[str, ...]]   # torch.optim's switches: positional, keyword-only
    switch_defaults: dict[str, str]
    switch_doc: str
    group_entries: list[tuple[str, object]]
    step_cond: str | None
    step_hyper: list[HyperVar]                 # the hyperparameters step_cond reads
    data: list[tuple[str, str, object]]        # (name, default, description)
    objective: dict | None = None              # the BLR objective method (codegen/objective.py)
    objective_note: str | None = None          # why there is none (codegen/objective.py target_note)
    flat_groups: tuple[str, ...] | None = None  # the stored states of a group laid out flat (elementwise sampling)
