"""The views of an update IR that the array targets' templates read (numpy, and jax's plain-function modules):
printed by the target's printer, so the same view serves both.  Shared by ``codegen/backends/numpy`` and
``codegen/backends/jax``."""
from __future__ import annotations

import inspect
import re
import textwrap
from types import SimpleNamespace

from dataclasses import dataclass
from typing import NotRequired, TypedDict

import sympy as sp

from blr_derive.codegen.arrays import components
from blr_derive.codegen.arrays.printer import ArrayPrinter
from blr_derive.codegen.inert import identifier
from blr_derive.core.matexpr import is_mat
from blr_derive.core import newton
from blr_derive.core.errors import CodegenError
from blr_derive.core.specialfns import softplus_form
from blr_derive.core.text import Prose
from blr_derive.ir.model import FactorizedIR
from blr_derive.ir.objective import ESTIMATE_KEYS

#: the engine's solver of ∇A(λ) = μ (blr_derive/core/newton.py), embedded in the modules that need it
NEWTON_SOURCE = (inspect.getsource(newton._newton_polish) + "\n\n"
                 + inspect.getsource(newton.newton_dual).replace("def newton_dual(", "def _newton_dual(", 1))


class MapsView(TypedDict):
    """The family's parameter maps (``ir.family_maps``), printed."""
    lam: list[str]
    eta: list[str]
    mu: list[str]
    mu_temps: list[tuple[str, str]]  # locals expectation_parameters assigns first, [(name, text)] (_with_max_temps)
    A: str
    solver: str                      # the engine's Newton solver's source
    fisher: list[list[str]]
    fisher_temps: list[tuple[str, str]]
    ordinary: list[tuple[str, str]]
    lam0: list[str]
    conditions: list[str]
    params: list[str]
    kw: str                          # the fixed parameters as keyword-only arguments of every map of λ: ", *, beta"
    pass_kw: str                     # the maps' calls passing them on: ", beta=beta"
    ordinary_mu: list[tuple[str, str]] | None   # the closed-form μ → ordinary map, where the family has one
    mu_names: list[str]              # the μ symbols it reads


class CheckView(TypedDict):
    """A run-time domain check (``ir.model.DomainCheck``), printed: run right after the assignment of ``after``
    (``value`` itself, or the last new value an expression ``value`` reads)."""
    name: str
    value: str
    after: str
    domain: str                      # "positive" or "positive_definite"
    component: str                   # the helper's argument as Python text: None, "axis" or a component's number
    hint: str


class RowsView(TypedDict):
    """An entry point's loop over examples."""
    count: str
    slices: list[tuple[str, str]]
    assignments: list[tuple[str, str]]
    outputs: list[tuple[str, str]]


class EntryView(TypedDict):
    name: str
    doc: Prose
    params: list[str]
    hyper: list[str] | None          # the hyperparameters it reads (None: it takes none)
    reads: list[tuple[str, str, str]]
    counts: list[tuple[str, str]]
    numbers: list[tuple[str, str]]   # (variable, argument): the argument's sum as a float
    dims: list[tuple[str, str]]
    assignments: list[tuple[str, str]]
    returns: list[tuple[str, str]]
    keywords: list[str]
    rows: RowsView | None
    checks: list[CheckView]


class EntriesView(TypedDict):
    """The entry points of a module besides init/step."""
    title: str
    notes: list[str]                 # comment lines
    constants: list[tuple[str, str | tuple[str, ...] | dict[str, str]]]
    functions: list[EntryView]


class ShapingView(TypedDict):
    """A rank-based shaping of an oracle's values (rule fitness_shaping), printed."""
    call: str
    name: str
    weight: str
    value: str
    kept: NotRequired[list[str]]     # what each sample keeps until the values are ranked (set by the target)
    index: NotRequired[int]


class PointView(TypedDict):
    """What a model's weights hold (the recipe's ``parameter``), from a state."""
    code: str
    reads: list[str]


@dataclass(frozen=True)
class FactorizedView:
    """What a factorized (several-block) module's template reads of the recipe, printed; each target's render
    context extends it (codegen/backends/numpy/context.py, codegen/backends/jax/context.py)."""
    ir: FactorizedIR
    local_assign: list[tuple[str, str]]        # the plate's per-row program
    pre_loop: list[tuple[str, str]]            # what the global blocks compute before the plate
    stats: list[tuple[str, str]]               # the plate statistics (sums over the rows)
    scale: tuple[str, str] | None
    assigns: list[tuple[str, str]]             # the global blocks' update
    dims: list[tuple[str, str, int]]           # (dimension, the variable it is read from, its axis)
    rows: dict[str, list[tuple[str, str]]] | None   # the per-row program on all rows at once, or None (a loop)
    program: list[str] | None                  # a component axis: the whole program's lines
    returns: list[tuple[str, str]] | None
    plate_names: set[str]
    printer: ArrayPrinter
    shapes: dict[str, object]
    symmetric: list[str]
    checks: list[CheckView]                    # the global blocks' run-time domain checks


def factorized_view(ir, printer, row_printer, xp="numpy") -> FactorizedView:
    """The template's view of a factorized (product) recipe, printed by ``printer`` (global expressions) and
    instances of ``row_printer`` (a RowBatchPrinter class: the per-row program on all rows at once); ``xp`` is
    the array module's name in the lines of a component axis (codegen/arrays/components.py).  The
    helpers and imports the printed code needs are added to ``printer.helpers`` / ``printer.imports``.  Shared
    by the numpy target and the jax target (codegen/backends/jax/factorized.py)."""
    pr = printer.doprint
    local_assign = [(pr(s), pr(e)) for s, e in ir.local_assign]
    pre_loop = [(pr(s), pr(e)) for s, e in ir.prelude + ir.pre_loop]
    stats = [(pr(s), pr(e)) for s, e in ir.stats]
    scale = (pr(ir.scale[0]), pr(ir.scale[1])) if ir.scale is not None else None
    assigns = [(pr(s), pr(e)) for s, e in ir.assignments]
    dims = [(str(d), var, axis) for d, var, axis in ir.dims]
    rows = None                  # the per-row program on all rows at once (else: a loop over the rows)
    program = returns = None     # a recipe with a component axis: the whole program (arrays/components.py)
    if ir.plate is not None:     # the plate's per-row arrays, and its per-row scalars (data and local values)
        arrays = {s for _, s, k, _ in ir.plate["data"] if k != "scalar"}
        scalars = {s for _, s, k, _ in ir.plate["data"] if k == "scalar"} | {s for s, _ in ir.local_assign}
    if ir.components is not None:
        rp = row_printer(arrays, scalars, optimize=True) if ir.plate is not None else None
        program, returns = components.lower(ir, pr, rp, xp)
        if rp is not None:
            printer.helpers |= rp.helpers
            printer.imports |= rp.imports
    elif ir.plate is not None:
        rp = row_printer(arrays, scalars)
        try:
            rows = {"local": [(pr(s), rp.doprint(e)) for s, e in ir.local_assign],
                    "stats": [(pr(s), rp.plate_sum(e)) for s, e in ir.stats]}
            printer.helpers |= rp.helpers
            printer.imports |= rp.imports
        except CodegenError:
            rows = None
    shapes = {v.name: _shape(v.symbol, False) for v in ir.state + ir.data}
    if ir.components is not None:       # one value per component: a leading component axis
        shapes.update({name: (identifier(ir.components["size"]),) + shapes[name]
                       for name in ir.components["state"]})
    if ir.plate is not None:
        shapes.update({name: ("n_rows",) + _shape(sym, False) for name, sym, _, _ in ir.plate["data"]})
    return FactorizedView(
        ir=ir, local_assign=local_assign, pre_loop=pre_loop, stats=stats, scale=scale, assigns=assigns,
        dims=dims, rows=rows, program=program, returns=returns,
        plate_names={name for name, _, _, _ in ir.plate["data"]} if ir.plate else set(),
        printer=printer, shapes=shapes, symmetric=sorted(ir.symmetric), checks=_axis_checks(ir, returns, printer))


def _axis_checks(ir, returns, printer) -> list[CheckView]:
    """The factorized recipe's domain checks (:func:`checks_view`); on a component axis each checks the whole
    array of its new value, the name the step returns (``mu_s_new_all``, arrays/components.py), not the loop's
    last per-component value (``mu_s_new``, the last component only: the others went unchecked, and a failing
    scalar had no component index to name)."""
    checks = checks_view(ir.checks, printer)
    if ir.components is None or returns is None:
        return checks
    whole = {printer.doprint(sym): value for (_, sym), (_, value) in zip(ir.outputs, returns)}
    for c in checks:
        c["value"] = c["after"] = whole.get(c["value"], c["value"])
    return checks


def module_shapes(ir) -> dict:
    """SHAPES of a single-family module: name -> the shape its ``_array`` checks (see :func:`_shape`) for the
    state, the data, the oracle values and the values of the oracles at samples of q.  Shared by the numpy
    target and the jax target's functions (codegen/backends/jax/functions.py)."""
    elementwise = any(v.kind == "elementwise" for v in ir.state)
    # fixed parameters and scalar data of an elementwise update may be one number or one per coordinate ("?")
    shapes = {v.name: "?" if v.fixed and v.kind == "elementwise" else _shape(v.symbol, v.kind == "elementwise")
              for v in ir.state}
    # vector data of an update written with scalars go coordinate-wise with the state ("*", ir/build.py)
    shapes.update({v.name: "?" if elementwise and v.kind == "scalar" else _shape(v.symbol, v.kind == "elementwise")
                   for v in ir.data})
    # an oracle that returns a matrix keeps its own shape next to elementwise state (the eigenbasis candidate's G)
    shapes.update({str(c.symbol): _shape(c.symbol, elementwise and not isinstance(c.symbol, sp.MatrixSymbol))
                   for c in ir.oracle_calls})
    if ir.sampling is not None:
        # the loss at a sample is the model's total loss (one number), or one per coordinate for a separable loss
        shapes.update({str(k): "?" if elementwise and o == "loss" else _shape(k, elementwise)
                       for k, o in ir.sampling.calls})
        shapes.update({str(c[0]): _shape(c[0], elementwise) for c in ir.sampling.chained})
    return shapes


def own_shape_zeros(ir, printer) -> dict:
    """The statistics of a Monte Carlo loop that start from zeros of their own shape, printed: matrices whose shape
    differs from a matrix first state (the Kronecker candidate's d_in × d_in and d_out × d_out factors next to the
    d_out × d_in mean).  Every other statistic starts from ``zeros_like`` of the first state, which is its shape or
    broadcasts to it (a vector first state and a P × P statistic: the full Gaussian's score)."""
    first = ir.state[0].symbol
    if not (isinstance(first, sp.MatrixSymbol) and first.shape[1] != 1):
        return {}
    return {printer.doprint(a): printer.doprint(sp.ZeroMatrix(*a.shape)) for a, _ in ir.sampling.stats
            if isinstance(a, sp.MatrixSymbol) and a.shape != first.shape}


def family_maps_view(ir, printer) -> MapsView | None:
    """The family's parameter maps (``ir.family_maps``) printed by ``printer``, or None without them.  Shared by
    the numpy target and the jax target's functions (codegen/backends/jax/functions.py)."""
    fm = ir.family_maps
    if not fm:
        return None
    conds = []
    for name, expr, domain in fm["conditions"]:
        e = printer.doprint(expr)
        conds.append(f"0 < ({e}) < 1" if domain in ("unit_interval", "simplex") else f"({e}) > 0")
    entries = [[fm["fisher"][i, j] for j in range(fm["fisher"].shape[1])] for i in range(fm["fisher"].shape[0])]
    mu, mu_temps = _with_max_temps(printer, lambda: [printer.doprint(e) for e in fm["mu"]])
    fisher, fisher_temps = _with_max_temps(printer, lambda: [[printer.doprint(e) for e in row] for row in entries])
    return {
        "lam": [str(l) for l in fm["lam"]],
        "eta": [printer.doprint(e) for e in fm["eta"]],
        "mu": mu, "mu_temps": mu_temps,
        "A": printer.doprint(fm["A"]),
        "solver": NEWTON_SOURCE,
        "fisher": fisher, "fisher_temps": fisher_temps,
        "ordinary": [(n, printer.doprint(e)) for n, e in fm["ordinary"]],
        "ordinary_mu": None if fm.get("ordinary_mu") is None else
        [(n, printer.doprint(e)) for n, e in fm["ordinary_mu"]],
        "mu_names": [str(u) for u in fm.get("mu_symbols", ())],
        "lam0": [printer.doprint(v) for v in fm["lam0"]],
        "conditions": conds,
        "params": [p.name for p in fm["params"]],
        # the fixed parameters (A, μ and F may read them): keyword-only arguments of every map of λ
        "kw": "".join(f", {identifier(p.name)}" if i else f", *, {identifier(p.name)}"
                      for i, p in enumerate(p for p in fm["params"] if p.fixed)),
        "pass_kw": "".join(f", {identifier(p.name)}={identifier(p.name)}" for p in fm["params"] if p.fixed),
    }


#: printed μ or F longer than this (characters) print each normalizing max once, as a local (HostConditionalMixin
#: .max_temps); the catalog's largest family maps are ~20 000 characters, a 21-point support's were 570 000
MAPS_TEMPS_CHARS = 50_000


def _with_max_temps(printer, print_all):
    """``print_all()``'s texts (a list, or a list of lists) and the locals they read: none where their text is at most
    MAPS_TEMPS_CHARS (each ``_maxN`` or ``_sumN`` written back as its text: the same text as printed without locals),
    otherwise each Max and each sum normalized by one (HostConditionalMixin._print_Add) once as a local,
    [(name, text)].  One printing either way (printing a Max at each of its uses was 70 s of a 64-point support's μ
    and F)."""
    printer.max_temps = {}
    try:
        texts = print_all()
        temps = [(name, printer.postprocess(text)) for name, text in printer.max_temps.values()]
    finally:
        printer.max_temps = None
    flat = [t for x in texts for t in (x if isinstance(x, list) else [x])]
    if not temps:
        return texts, []
    full = dict(temps)
    pattern = re.compile(r"\b_(?:max|sum)\d+\b")

    def inline(text):
        return pattern.sub(lambda m: inline(full[m.group(0)]), text)
    expanded = [inline(t) for t in flat]
    if sum(map(len, expanded)) > MAPS_TEMPS_CHARS:
        return texts, temps
    it = iter(expanded)
    return [[next(it) for _ in x] if isinstance(x, list) else next(it) for x in texts], []


def _shape(sym, elementwise):
    """The shape a generated module checks for a value: ``"*"`` (elementwise: that of the other elementwise
    arrays; ``"?"``: that or a single number), ``()`` for a scalar, or a tuple of dimension names and integers
    (a vector is 1-D)."""
    if elementwise:
        return "*"
    if not isinstance(sym, sp.MatrixSymbol):
        return ()
    r, c = sym.shape
    dims = (r,) if c == 1 else (r, c)
    return tuple(int(d) if d.is_Integer else identifier(str(d)) for d in dims)


def shaping_view(sm, printer) -> ShapingView | None:
    """A rank-based shaping of an oracle's values (rule fitness_shaping): its weight over the ranks ``_r`` =
    1..n_samples and the value that replaces the oracle's, printed from the rule's expressions."""
    sh = getattr(sm, "shaping", None)
    if sh is None:
        return None
    n, ranks, weights, total = (sp.Symbol(x) for x in ("n_samples", "_r", "_w", "_W"))
    return {"call": printer.doprint(sh.call), "name": sh.name,
            "weight": printer.doprint(sh.weight.xreplace({sh.rank: ranks, sh.count: n})),
            "value": printer.doprint(sh.value.xreplace({sh.weight_of_rank: weights, sh.total: total,
                                                         sh.count: n}))}


def entry_view(ir, printer) -> EntriesView | None:
    """The entry points of the module besides init/step (e.g. Bayesian ADMM's dual and server steps), printed."""
    eps = ir.entry_points
    if eps is None:
        return None
    pr = printer.doprint
    functions: list[EntryView] = [{
        "name": identifier(f.name), "doc": Prose(textwrap.fill(f.doc.text, 112, subsequent_indent="    ", break_on_hyphens=False)), "params": [identifier(p) for p in f.params], "hyper": f.hyper,
        "reads": [(pr(s), identifier(a), k) for s, a, k in f.reads],
        "counts": [(pr(s), identifier(a)) for s, a in f.counts or ()],
        "numbers": [(pr(s), identifier(a)) for s, a in f.numbers or ()],
        "dims": [(pr(d), pr(s)) for d, s in f.dims or ()],
        "assignments": [(pr(s), pr(e)) for s, e in f.assignments or ()],
        "returns": [(k, pr(e)) for k, e in f.returns or ()],
        "keywords": [identifier(k) for k in f.keywords or ()], "rows": rows_view(f.rows, pr),
        "checks": checks_view(f.checks, printer),
    } for f in eps.functions]
    return {"title": eps.title, "notes": eps.notes, "constants": eps.constants, "functions": functions}


def objective_view(ir, printer, xp: str) -> EntriesView | None:
    """The ``objective`` entry point (``UpdateIR.objective``, blr_derive/ir/objective.py) printed like the other
    entry points; its two terms are summed over the coordinates of a mean-field (elementwise) state (``xp.sum``,
    ``xp`` the array module's name; a scalar is its own sum)."""
    eps = getattr(ir, "objective", None)
    if eps is None:
        return None
    view = entry_view(SimpleNamespace(entry_points=eps), printer)
    if view is not None:
        for f in view["functions"]:
            f["assignments"] = [(s, f"{xp}.sum({e})") for s, e in f["assignments"]]
    return view


def checks_view(checks, printer, helpers=None, assigns=None) -> list[CheckView]:
    """The run-time domain checks (``ir.model.DomainCheck``) printed by ``printer``, each run right after the
    assignment of its value (one of ``assigns``, [(lhs, rhs)] printed: a check no assignment makes is a bug); the
    helper that runs them (``_check_domain``, codegen/backends/numpy/runtime.py and codegen/backends/jax/runtime.py)
    is added to ``helpers.helpers`` (``printer.helpers`` unless given)."""
    if not checks:
        return []
    (helpers if helpers is not None else printer).helpers.add("_check_domain")
    out: list[CheckView] = [
        {"name": c.name, "value": printer.doprint(c.symbol),
         "after": printer.doprint(c.symbol if getattr(c, "after", None) is None else c.after), "domain": c.domain,
         "component": "None" if c.component is None else '"axis"' if c.component == "axis" else str(int(c.component)),
         "hint": c.hint}
        for c in checks]
    lhs = {a for a, _ in assigns or ()}
    lost = [c["after"] for c in out if assigns is not None and c["after"] not in lhs]
    if lost:
        raise CodegenError(f"domain checks of {', '.join(lost)}: no assignment of that name to follow")
    return out


def rows_view(rows, pr) -> RowsView | None:
    """An entry point's loop over examples (``EntryPoint.rows``, e.g. the leave-one-out sensitivities), printed by
    ``pr``; None without one."""
    if rows is None:
        return None
    return {"count": pr(rows["count"]), "slices": [(pr(s), pr(full)) for s, full in rows["slices"]],
            "assignments": [(pr(s), pr(e)) for s, e in rows["assignments"]],
            "outputs": [(k, pr(s)) for k, s in rows["outputs"]]}


class EstimateView(TypedDict):
    """The BLR objective of a recipe that samples q or reads its loss through oracles at one point (``kind``
    monte_carlo or delta, ``UpdateIR.objective_parts``), printed for the array targets: the state, data and
    hyperparameters it reads, the first state (the coordinates it sums over), the entropy, the terms rules added to
    the loss, the loss's scale, the delta method's point or the draws of a sample of q and θ from them."""
    kind: str
    doc: Prose
    state: list[str]
    data: list[str]
    hyper: list                      # HyperVar
    first: str
    entropy: str
    extra: str | None
    scale: str
    point: str | None
    eps: str
    draws: list[tuple[str, str]]     # (draw, law) of a sample: "normal" or "uniform"
    theta: str
    theta_expr: str
    accept: str | None
    keys: tuple[str, ...]
    dims: list[str]                  # the dimensions the terms read (a vector or matrix family), from _dims
    elementwise: bool                # a mean-field state: the terms are summed over its coordinates
    nodes: str | None                # quadrature: the number of nodes (step's count)
    node_loss: str | None            # quadrature: the explicit loss at the node θ_k (None: oracles['loss'] there)


#: the keywords of an estimated objective besides step's (a hyperparameter of either name leaves it out)
ESTIMATE_KEYWORDS = ("loss", "samples")

_ESTIMATE_DOC = {
    "monte_carlo": "the recipe samples q, so E_q[ℓ] is a Monte Carlo estimate from values of the loss ℓ_o the "
                   "oracles evaluate at samples of q: either ``loss``, the values at samples the caller drew (a "
                   "sequence, one number per sample), or ``oracles['loss']``, a function of θ returning ℓ_o(θ) (an "
                   "array is summed over its elements: a loss per coordinate is its sum), evaluated at ``samples`` "
                   "fresh samples {theta} = {theta_expr} (default 2) drawn {how} as step() draws its samples.  With "
                   "ℓ = {loss}, 'expected_loss' is {scale} × the mean of the values + the expectation of the other "
                   "terms (closed form), 'standard_error' its standard error ({scale} × the sample standard "
                   "deviation / √n; NaN for one value), 'samples' n and 'estimate' 'monte_carlo'.",
    "quadrature": "the update integrates over q by the tanh-sinh rule in u = F(θ) (rule quadrature), so E_q[ℓ] is "
                  "the same deterministic quadrature: the weighted sum of {what} at the nodes of the rule with {nodes} "
                  "points, {theta} = {theta_expr} (the nodes step() reads, no random numbers; a tail node of weight below 1e-6 "
                  "whose value is not finite contributes 0, as in step()).  With ℓ = {loss}, 'expected_loss' is "
                  "{scale} × that sum + the expectation of the other terms (closed form); 'standard_error' is 0.0 "
                  "(the rule's own error is not estimated: it falls fast with the nodes), 'samples' the number of "
                  "nodes and 'estimate' 'quadrature'.",
    "delta_explicit": "the update differentiates the recipe's explicit loss at {point} (the delta method: Laplace's, "
                      "Eq. 13; no samples), so E_q[ℓ] is the delta method's ℓ({point}) (Sec. 4.2), labelled 'estimate': "
                      "'delta', the recipe's own loss there, ℓ_o({point}) = {node} (no oracle is called; ``loss`` and "
                      "``samples`` are refused).  With ℓ = {loss}, 'expected_loss' is ℓ({point}) and 'objective' the "
                      "delta-method value ℓ({point}) − H(q) ('standard_error' NaN, 'samples' 1).",
    "delta": "the update reads the loss only through oracles at {point} (no samples), so E_q[ℓ] is the delta "
             "method's ℓ({point}) (Sec. 4.2), labelled 'estimate': 'delta': ``loss`` is ℓ_o({point}), the value "
             "of the loss the oracles evaluate at {point} (one number), or ``oracles['loss']``, a function of θ "
             "returning ℓ_o(θ) (an array is summed over its elements), is evaluated at {point}.  With ℓ = {loss}, "
             "'expected_loss' is ℓ({point}) and 'objective' the delta-method value ℓ({point}) − H(q) "
             "('standard_error' NaN, 'samples' 1).",
}


def objective_estimate_view(ir, printer, uniform: str, normal: str, how: str) -> EstimateView | None:
    """The estimated objective of a recipe whose E_q[ℓ] is not closed (blr_derive/ir/objective.py
    ``objective_parts`` of kind monte_carlo or delta), printed by ``printer``; ``uniform``/``normal``: the target's
    names of the draws, ``how``: how step draws (for the docstring).  None where the module has the exact objective,
    the parts are not there or exact, the samples are not draws from q (sub-batches at a point), the point does not
    read the state alone, or a hyperparameter, state, data or draw is named like one of :data:`ESTIMATE_KEYWORDS`."""
    parts = getattr(ir, "objective_parts", None)
    if getattr(ir, "objective", None) is not None or parts is None or \
            parts.kind not in ("monte_carlo", "quadrature", "delta"):
        return None
    bound = hyperparameter_names(ir) + [v.name for v in ir.state] + [v.name for v in ir.data]
    if ir.sampling is not None:
        bound += [str(ir.sampling.eps), str(ir.sampling.theta)] + [str(d) for d, _ in ir.sampling.more_draws]
    if any(n in ESTIMATE_KEYWORDS for n in bound):
        return None                     # a name the module binds would shadow a keyword of objective()
    pr = printer.doprint
    used = set(parts.entropy.free_symbols) | set(sp.sympify(parts.extra).free_symbols) \
        | set(sp.sympify(parts.scale).free_symbols)
    sm = ir.sampling
    law = {"normal": normal, "uniform": uniform, "tanh_sinh": uniform}    # quadrature: u = F(θ) ~ U(0, 1)
    if parts.kind == "monte_carlo":
        if sm is None or sm.draw not in law or any(d not in ("normal", "uniform") for _, d in sm.more_draws):
            return None
        used |= sm.theta_expr.free_symbols | (sm.accept.free_symbols if sm.accept is not None else set())
        draws = [(pr(sm.eps), law[sm.draw])] + [(pr(d), law[x]) for d, x in sm.more_draws]
        point = None
    elif parts.kind == "quadrature":
        if sm is None or sm.draw != "tanh_sinh" or sm.more_draws or sm.accept is not None:
            return None
        used |= sm.theta_expr.free_symbols | sp.sympify(sm.samples).free_symbols \
            | (parts.node_loss.free_symbols if parts.node_loss is not None else set())
        printer.helpers.add("_tanh_sinh")
        draws, point = [(pr(sm.eps), law[sm.draw])], None
    else:
        if parts.point_value is None:
            return None
        used |= parts.point_value.free_symbols \
            | (parts.node_loss.free_symbols if parts.node_loss is not None else set())
        draws, point = [], pr(parts.point_value)
    first = ir.state[0]
    state = [v.name for v in ir.state if v.symbol in used or v is first]
    data = [v.name for v in ir.data if v.symbol in used]
    hyper = [h for h in ir.hyperparameters if any(s in used for s in h.symbols)]
    known = {v.symbol for v in ir.state} | {v.symbol for v in ir.data} | {s for h in ir.hyperparameters
                                                                           for s in h.symbols}
    # a scalarized program (one coordinate at a time) names a coordinate of a vector state by the state's name
    known |= {sp.Symbol(v.name, real=True) for v in ir.state if v.kind == "elementwise" and is_mat(v.symbol)}
    # a term that reads a dimension is one number for the whole vector or matrix family (its entropy P/2·log 2πe
    # − ½ log det S; blr_derive/ir/objective.py admits dimensions for those families only), not per coordinate
    dims = list(dict.fromkeys(str(d.symbol) for d in ir.dims or () if d.symbol in used))
    whole = bool(dims) or not ir.elementwise
    known |= {d.symbol for d in ir.dims or () if str(d.symbol) in dims}
    if sm is not None and parts.kind in ("monte_carlo", "quadrature"):
        known |= {sm.eps, sm.theta} | {d for d, _ in sm.more_draws}
    if not used <= known:
        return None                     # a symbol the module does not bind (e.g. a definition of the update)
    if parts.no_entropy:
        head = ("The objective the update minimizes at the state: the recipe drops the entropy of the BLR's "
                "L(q) = E_q[ℓ(θ)] − H(q) (Khan & Rue 2023, Eq. 2; no_entropy, Sec. 4.5), so it is E_q[ℓ] alone and "
                "'entropy' is 0; ")
    else:
        head = ("The BLR's objective L(q) = E_q[ℓ(θ)] − H(q) at the state (Khan & Rue 2023, Eq. 2), which the update "
                "minimizes over the family: H(q) = A(λ) − ⟨λ, μ⟩ − E_q[log h] is the family's entropy (App. B) in "
                "the state, " + ("summed over the coordinates, with its constants (e.g. ½ log(2πe) per coordinate "
                                 "of a Gaussian); " if not whole else
                                 "one number for the vector or matrix family, its dimensions read from the "
                                 "arrays' shapes; "))
    what = (f"the recipe's explicit loss ℓ_o({sm.theta}) = {sp.sstr(parts.node_loss)} (no oracle is called)" if parts.node_loss is not None and sm is not None else
            "``oracles['loss']``, a function of θ returning ℓ_o(θ) (an array is summed over its elements), called "
            "there")
    doc_kind = "delta_explicit" if parts.kind == "delta" and parts.node_loss is not None else parts.kind
    text = head + _ESTIMATE_DOC[doc_kind].format(node=sp.sstr(parts.node_loss) if parts.node_loss is not None else "",
        point=parts.point, loss=parts.loss, scale=sp.sstr(parts.scale), how=how, what=what,
        nodes=pr(sm.samples) if sm is not None else "",
        theta=pr(sm.theta) if sm is not None else "", theta_expr=pr(sm.theta_expr) if sm is not None else "") \
        + (" ℓ is the loss of Eq. 1 as the recipe's rules make it of ℓ_o (a mini-batch mean scaled by N, priors); "
           "ℓ_o's own constants are kept, none is added.  Takes what step() takes, and ``loss`` and ``samples``"
           + (" (refused here: the recipe's own loss needs neither)" if parts.node_loss is not None else
              " (refused here: the quadrature needs neither)" if parts.kind == "quadrature" else "") + "; "
           "returns {'objective': L, 'expected_loss': E_q[ℓ], 'entropy': H, 'standard_error', 'estimate', "
           "'samples'} (OBJECTIVE_KEYS; the kind of estimate also in OBJECTIVE_ESTIMATE) as Python floats; "
           "computed eagerly, not for tracing.") + _relaxed(parts)
    return {"kind": parts.kind, "doc": Prose(textwrap.fill(text, 112, subsequent_indent="    ", break_on_hyphens=False)),
            "state": state, "data": data, "hyper": hyper, "first": first.name, "dims": dims,
            "elementwise": not whole,
            "entropy": pr(softplus_form(parts.entropy)), "extra": pr(parts.extra) if parts.extra != 0 else None,
            "scale": pr(sp.sympify(parts.scale)), "point": point, "eps": draws[0][0] if draws else "",
            "draws": draws, "theta": pr(sm.theta) if point is None else "",
            "theta_expr": pr(sm.theta_expr) if point is None else "",
            "accept": pr(sm.accept) if point is None and sm.accept is not None else None,
            "keys": ESTIMATE_KEYS,
            "nodes": pr(sm.samples) if parts.kind == "quadrature" else None,
            "node_loss": pr(parts.node_loss) if parts.node_loss is not None else None}


def _relaxed(parts) -> str:
    """The docstring's sentence where the steps descend a relaxation of L(q) (``ObjectiveParts.note``)."""
    return f"  Here {parts.note}." if getattr(parts, "note", "") else ""


def hyperparameter_names(ir) -> list:
    """Every name the hyperparameters bind in a module: each one's own and its symbols' (tuple elements, choices)."""
    return [h.name for h in ir.hyperparameters] + [str(s) for h in ir.hyperparameters for s in h.symbols]

