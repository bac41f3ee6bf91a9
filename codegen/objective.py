"""The BLR's objective in the optimizer targets (torch, Triton): ``objective(loss=None, samples=None)``, a method of
the generated ``torch.optim.Optimizer`` (issue 42).  The view prints the parts the IR holds
(``UpdateIR.objective_parts``, blr_derive/ir/objective.py): the family's entropy in the state and, for an exact
recipe, E_q[ℓ]; for a recipe that samples q or calls oracles at one point, E_q[ℓ] comes from the loss values the
caller gives (a Monte Carlo mean with its standard error, or the delta method's ℓ(point)).  Nothing here names an
algorithm: the kind, the terms and the point are the derivation's."""
from __future__ import annotations

import textwrap
from typing import Any

import sympy as sp

from blr_derive.codegen.printing import HostPrinter
from blr_derive.codegen.torch_elementwise import ElementwisePrinter
from blr_derive.core.matexpr import is_mat
from blr_derive.core.specialfns import softplus_form
from blr_derive.ir.objective import ESTIMATE_KEYS

#: the keys of the mapping ``objective`` returns in the optimizer targets (the array targets' estimated objective's)
KEYS = ESTIMATE_KEYS

_WHAT = {
    "exact": "E_q[ℓ] is closed (the derivation's exact expectation, in the state), so ``loss`` and ``samples`` are "
             "refused (TypeError); 'standard_error' is 0.0 and 'samples' 0.",
    "monte_carlo": "the recipe samples q, so E_q[ℓ] is a Monte Carlo estimate: ``loss`` is either the values of the "
                   "loss the oracles evaluate (ℓ_o, what the closure returns) at samples of q (a sequence or a "
                   "tensor; e.g. the closure's values inside ``sampled_params()``), or a callable returning ℓ_o, "
                   "which is evaluated at ``samples`` fresh samples of q (default 2; torch's global generator; the "
                   "parameters are restored after each and no gradient is collected).  With ℓ = {loss}, "
                   "'expected_loss' is {scale} × their mean + the expectation of the other terms (closed form), "
                   "'standard_error' its standard error ({scale} × the sample standard deviation / √n; NaN for one "
                   "value) and 'samples' n.",
    "delta": "the update reads the loss only through oracles at {point} (no samples), so E_q[ℓ] is the delta "
             "method's ℓ({point}) (Sec. 4.2): ``loss`` is ℓ_o({point}), the value of the loss the oracles evaluate "
             "at what the parameters hold (a number or a one-element tensor), or a callable returning it (called "
             "once).  With ℓ = {loss}, 'expected_loss' is ℓ({point}) and 'objective' the delta-method value "
             "ℓ({point}) − H(q), labelled 'estimate': 'delta' ('standard_error' NaN, 'samples' 1).",
}


#: what step(closure) returns, and why not the objective (issue 42 item 2), by how E_q[ℓ] is had
_STEP_RETURNS = {
    "exact": "Returns the closure's loss (None without a closure), as torch.optim's optimizers do (training loops "
             "and schedulers such as ReduceLROnPlateau read it); the BLR objective L(q) is objective(), exact here "
             "and without loss values.",
    "monte_carlo": "Returns the closure's loss, the mean of its values at the step's samples of q (None without a "
                   "closure), as torch.optim's optimizers do (training loops and schedulers such as "
                   "ReduceLROnPlateau read it), not the objective L(q): those values are ℓ_o at samples of the "
                   "state before the update, and L needs H(q) and the priors' expectation at that state, one more "
                   "float64 pass over every parameter's state on every step.  For L call objective(closure, "
                   "samples=n) (fresh samples at the current state) or objective(values) with the closure's values "
                   "at samples of q (e.g. inside sampled_params()).",
    "delta": "Returns the closure's loss, ℓ_o at what the parameters hold before the update (None without a "
             "closure), as torch.optim's optimizers do (training loops and schedulers such as ReduceLROnPlateau "
             "read it), not the objective L(q): the delta-method value needs H(q) and the priors at that state, one "
             "more float64 pass over every parameter's state on every step.  For L call objective(closure) or "
             "objective(value).",
}


def coordinates(ir) -> dict:
    """{state name: the scalar that stands for one coordinate of it} for the vector states of a scalarized program
    (``scalarize_elementwise``: one coordinate at a time, each named by its state's name)."""
    return {v.name: sp.Symbol(v.name, real=True) for v in ir.state if v.kind == "elementwise" and is_mat(v.symbol)}


def objective_view(ir, stored: dict[str, str], printer=None, layout: bool = False,
                   absent: frozenset[str] = frozenset(), matrix: bool = False) -> dict[str, Any] | None:
    """What the ``objective`` method prints: {kind, doc, entropy, expected, scale, extra, reads: [(symbol, key or
    None for the parameter)], hyper, layout}; ``layout``: the Triton target's optimizer, whose state
    ``self._layout(group)`` binds (real parameters only) instead of ``self._state(p, group)``; ``matrix``: the
    torch target's optimizer for a parameter with matrix state (codegen/backends/torch/matrix.py), whose state is
    ``self._state(p)`` and whose parameter is read as the recipe's matrix mean (``_as_matrix``).  None where the IR
    has no objective parts or they read a state in ``absent`` (one number per tensor, or kept only under a
    setting)."""
    parts = getattr(ir, "objective_parts", None)
    if parts is None or parts.kind not in _WHAT or parts.node_loss is not None:
        return None                     # no parts, or the module's own loss (the array targets' objective prints it)
    pr = printer or ElementwisePrinter()     # torch's, for the torch and Triton optimizers' host code; jax its own
    used = parts.entropy.free_symbols | (parts.expected_loss.free_symbols if parts.expected_loss is not None else set())
    reads = []
    state = {v.symbol for v in ir.state} | {d.symbol for d in ir.data} | set(coordinates(ir).values())
    for v in ir.state:
        if {v.symbol, coordinates(ir).get(v.name)} & (used | (parts.extra.free_symbols if parts.kind != "exact"
                                                             else set())):
            if v.name in absent:
                return None
            reads.append((pr.doprint(v.symbol), None if v.name == ir.mean else stored.get(v.name, v.name)))
    if parts.kind != "exact":
        used |= parts.extra.free_symbols | sp.sympify(parts.scale).free_symbols
        for d in ir.data:
            if d.symbol in used:
                reads.append((pr.doprint(d.symbol), d.name))
    hyper = [h for h in ir.hyperparameters if any(s in used for s in h.symbols)]
    if parts.no_entropy:
        head = ("The objective the update minimizes at the optimizer's state: the recipe drops the entropy of the "
                "BLR's L(q) = E_q[ℓ(θ)] − H(q) (Khan & Rue 2023, Eq. 2; no_entropy, Sec. 4.5), so it is E_q[ℓ] "
                "alone and 'entropy' is 0; ")
    else:
        head = ("The BLR's objective L(q) = E_q[ℓ(θ)] − H(q) at the optimizer's state (Khan & Rue 2023, Eq. 2), "
                "which the update minimizes over the family: H(q) = A(λ) − ⟨λ, μ⟩ − E_q[log h] is the family's "
                "entropy (App. B) at every parameter's state, summed over all coordinates of all parameters, with "
                "its constants (e.g. ½ log(2πe) per coordinate of a Gaussian); ")
    doc = (head
           + _WHAT[parts.kind].format(point=parts.point, loss=parts.loss, scale=sp.sstr(parts.scale))
           + (" ℓ is the loss of Eq. 1 as the recipe's rules make it of ℓ_o (a mini-batch mean scaled by N, priors), "
              "summed over all parameters; ℓ_o's own constants are kept, none is added; every parameter group must "
              "give the same scale." if parts.kind != "exact" else
              " Every constant of the loss as written is kept; none is added.")
           + " Computed in float64 on the host; returns {'objective': L, 'expected_loss': E_q[ℓ], 'entropy': H, "
             "'standard_error', 'estimate': 'exact' | 'monte_carlo' | 'delta', 'samples'} (OBJECTIVE_KEYS)."
           + (f"  Here {parts.note}." if parts.note else ""))
    step_doc = "\n\n" + textwrap.fill(_STEP_RETURNS[parts.kind], 108, initial_indent="        ",
                                      subsequent_indent="        ", break_on_hyphens=False) + "\n        "
    return {"kind": parts.kind, "doc": textwrap.fill(doc, 108, subsequent_indent="        ", break_on_hyphens=False),
            "step_doc": step_doc,
            "entropy": _split(parts.entropy, state, pr),
            "expected": None if parts.expected_loss is None else _split(parts.expected_loss, state, pr),
            "scale": None if parts.kind == "exact" else HostPrinter().doprint(parts.scale),
            "extra": None if parts.kind == "exact" or parts.extra == 0 else _split(parts.extra, state, pr),
            "reads": reads, "hyper": hyper, "key_names": KEYS, "layout": layout, "matrix": matrix}


def target_note(ir, view) -> str | None:
    """Why an optimizer module (torch, Triton, jax's optax transformation) has no objective, for its docstring: None
    where it has one (``view``, what :func:`objective_view` gave); the derivation's reason where it gives none
    (``UpdateIR.objective_note``, blr_derive/ir/objective_notes.py); otherwise why this target does not print the
    objective the numpy module has, from the structure: E_q[ℓ] closed only with the recipe's data; the recipe's
    explicit loss at a point or nodes; a state the optimizer keeps as one number per tensor or only under a
    setting."""
    if view is not None:
        return None
    if getattr(ir, "objective_note", None):
        return ir.objective_note
    parts = getattr(ir, "objective_parts", None)
    if parts is None and getattr(ir, "objective", None) is not None:
        why = ("E_q[ℓ] is closed with the recipe's data (e.g. a design matrix), which an optimizer keeps nowhere "
               "(its state is per parameter)")
    elif parts is not None and parts.node_loss is not None:
        why = ("E_q[ℓ] is the recipe's explicit loss at a point or at quadrature nodes, which this target's "
               "objective method does not evaluate (it takes the loss's values from the caller)")
    elif parts is not None:
        why = ("the objective reads a state this target keeps as one number per tensor or only under a setting, or "
               "a parameter that holds another function of q than the state it is read from")
    else:
        why = "the derivation gives no objective parts for this recipe"
    return ("the BLR's objective L(q) = E_q[ℓ] − H(q) (Eq. 2) is derived for this recipe (the numpy module's "
            f"objective()), but {why}.")


def _split(e, state, pr) -> tuple[str, str]:
    """``e`` summed over a tensor's coordinates as (the elementwise part, printed for tensors; the part that reads
    no state, printed on the host and counted once per coordinate)."""
    e = softplus_form(e)
    terms = sp.Add.make_args(sp.expand(e, deep=False, mul=True, power_base=False, power_exp=False, log=False))
    tensor = sp.Add(*[t for t in terms if t.free_symbols & state])
    host = sp.Add(*[t for t in terms if not t.free_symbols & state])
    return (pr.doprint(tensor) if tensor != 0 else "", HostPrinter().doprint(host) if host != 0 else "")

