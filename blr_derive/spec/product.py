"""Product (factorized, mean-field) recipes: several blocks of variables, each with its own candidate and
learning rate, and a loss written as named factors (Secs. 5.2-5.4; derived in
``blr_derive/candidates/product.py``).

.. code-block:: yaml

    blocks:
      z:  {family: categorical_3, local: true, approximations: [exact]}     # one copy per plate row (E-step)
      mu: {variable: {components: [m1, m2, m3]}, approximations: [delta]}   # a point estimate (M-step)
    factors:
      lik: {expression: ..., plate: true}
    plate: {data: {y: {}}, minibatch: N}

The family of an ``exact`` block is loaded by the caller's loader (``load_family``); everything else is read
here into a :class:`FactorizedRecipe`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import sympy as sp

from blr_derive.core import matexpr
from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.matexpr import is_mat
from blr_derive.core.names import check_name_at
from blr_derive.core.text import Prose
from blr_derive.core.types import Expr
from blr_derive.core.yamlio import LDict, check_keys, finite_number, text_field, where
from blr_derive.spec.blocks import Block, Factor, block_candidate
from blr_derive.spec.components import ComponentsSpec, component_block, parse_components
from blr_derive.spec.hyper import Approx, DataVar, Hyper, err, parse_data, parse_hyperparameters

FACTORIZED_KEYS = {"name", "title", "class_name", "description", "paper", "checked_against", "dimension",
                   "hyperparameters", "data", "plate", "blocks", "factors", "sizes", "components"}
BLOCK_KEYS = {"family", "variable", "local", "approximations", "learning_rate", "description", "domain", "messages",
              "components"}
FACTOR_KEYS = {"expression", "plate", "description", "components"}
PLATE_KEYS = {"index", "data", "minibatch", "description"}
HP_KEYS = {"default", "description", "type"}
DATA_KEYS = {"shape", "description"}


class ProductFamilyView:
    """What reports read of ``recipe.family`` for a product recipe: its name and description."""

    def __init__(self, r):
        self.name = " × ".join(f"{b.name}: {block_candidate(b, 'delta')}" for b in r.blocks)
        self.description = "mean-field candidate q = " + " ".join(f"q({b.name})" for b in r.blocks)


class PlateSpec(TypedDict):
    """A product recipe's ``plate``: rows indexed by ``index``, per-row data."""
    index: str
    data: list[DataVar]            # per row
    minibatch: Expr | None         # the hyperparameter N of a minibatch plate (statistics scaled by N/B), or None
    description: str


@dataclass
class FactorizedRecipe:
    name: str
    title: Prose                   # recipe text is Prose (blr_derive/core/text.py): outputs escape it
    description: Prose
    paper: Prose
    class_name: str
    checked_against: Prose
    blocks: list[Block]
    factors: list[Factor]
    hyper: list[Hyper]             # numbers
    data: list[DataVar]            # global data
    plate: PlateSpec | None
    dims: dict[str, Expr]          # dimension name -> symbol
    file: str | None = None
    spec: LDict | None = None
    step_symbol: Expr | None = None
    components: ComponentsSpec | None = None   # the component axis, or None

    @property
    def family(self):
        return ProductFamilyView(self)

    @property
    def approximations(self):
        names = []
        for b in self.blocks:
            if b.approximation not in names:
                names.append(b.approximation)
            if b.schedule and b.schedule[0] not in names:
                names.append(b.schedule[0])
        if self.plate and self.plate.get("minibatch") is not None:
            names.append("minibatch")
        return [Approx(n, {}) for n in names]

    def hyper_symbols(self):
        return {h.name: h.symbol for h in self.hyper}

    def choices(self) -> dict:
        """No choice hyperparameters: a product recipe's hyperparameters are numbers."""
        return {}

    # what reports and `blr-derive compare` read of a recipe's loss: the sum of the factors
    loss_kind = "explicit"

    @property
    def loss(self):
        return sp.Add(*[f.expr for f in self.factors])

    @property
    def loss_text(self):
        return Prose(" + ".join(f"[{f.name}{', summed over the plate' if f.plate else ''}: {f.text.text}]"
                                for f in self.factors))


def is_product_spec(spec) -> bool:
    return isinstance(spec, dict) and "blocks" in spec


def _plate(spec, hyper, taken, dims) -> PlateSpec:
    pspec = spec["plate"]
    if not isinstance(pspec, dict):
        raise err("plate must be a mapping", spec, "plate")
    check_keys(pspec, PLATE_KEYS, ("data",), "plate")
    mb = pspec.get("minibatch")
    mb_sym = None
    if mb is not None:
        mb_sym = next((h.symbol for h in hyper if h.name == mb), None)
        if mb_sym is None:
            raise err("plate minibatch must name a hyperparameter (the data-set size N)", pspec, "minibatch")
    index = check_name_at(pspec.get("index", "n"), "plate index", pspec, "index")
    return {"index": index, "data": _data(pspec["data"], "plate data", pspec, "data", taken, dims),
            "minibatch": mb_sym, "description": text_field(pspec, "description")}


def _data(dspec, what, parent, key, taken, dims):
    if not isinstance(dspec, dict):
        raise err(f"{what} must be a mapping", parent, key)
    return parse_data(dspec, {}, taken, dims, keys=DATA_KEYS, new_dims=False)


def _learning_rate(bname, bdecl, hsyms):
    """(ρ, its text, a schedule or None) of a block: a number, a hyperparameter or Robbins-Monro in t."""
    lr = bdecl.get("learning_rate", 1)
    if isinstance(lr, bool):
        raise err(f"block '{bname}': bad learning_rate", bdecl, "learning_rate")
    if isinstance(lr, (int, float)):
        finite_number(lr, bdecl, "learning_rate", f"block '{bname}': learning_rate")
        return sp.nsimplify(lr), str(lr), None
    if isinstance(lr, str) and lr in hsyms:
        return hsyms[lr], lr, None
    if isinstance(lr, dict) and len(lr) == 1 and "robbins_monro" in lr:
        args = lr["robbins_monro"] or LDict()
        if not isinstance(args, dict) or set(args) - {"delay", "forgetting"}:
            raise err(f"block '{bname}': robbins_monro takes 'delay' and 'forgetting'", bdecl, "learning_rate")
        try:
            delay = parse_expression(str(args.get("delay", 1)), hsyms, what="delay")
            forget = parse_expression(str(args.get("forgetting", 0.7)), hsyms, what="forgetting")
        except SpecError as exc:
            raise exc.located(*where(bdecl, "learning_rate")) from None
        t = sp.Symbol("t", integer=True, positive=True)
        return ((t + delay) ** (-forget), f"robbins_monro(delay={sp.sstr(delay)}, forgetting={sp.sstr(forget)})",
                ("robbins_monro", {"delay": delay, "forgetting": forget}))
    raise err(f"block '{bname}': learning_rate must be a number, a hyperparameter or "
              "{robbins_monro: {delay: ..., forgetting: ...}}", bdecl, "learning_rate")


def _family_block(bname, bdecl, local, rho, rho_text, schedule, line, load_family):
    """A block with an exponential family and the ``exact`` rule."""
    if "family" not in bdecl:
        raise err(f"block '{bname}': the exact rule needs a family", bdecl, "approximations")
    try:
        fam = load_family(bdecl["family"])
    except SpecError as exc:
        raise exc.located(*where(bdecl, "family")) from None
    if fam.dim is not None or any(is_mat(x) for x in fam.T):
        raise err(f"block '{bname}': family '{fam.name}' has vector or matrix statistics; factorized "
                  "blocks support scalar and fixed-size families", bdecl, "family")
    if fam.components and fam.variable_kind != "scalar":
        comps = list(fam.components)
        variables = [sp.Symbol(f"{bname}{i + 1}", real=True) for i in range(len(comps))]
    else:
        comps = [fam.theta]
        variables = [sp.Symbol(bname, real=True)]
    constraint = {}
    if fam.joint_support == "categorical" and not any(t_.has(comps[-1]) for t_ in fam.T):
        constraint = {variables[-1]: 1 - sum(variables[:-1])}
    state = [(f"{bname}_{p.name}", sp.Symbol(f"{bname}_{p.name}", **p.symbol.assumptions0), p.symbol)
             for p in fam.params.values()]
    if any(p.fixed for p in fam.params.values()):
        raise err(f"block '{bname}': families with fixed parameters are not supported", bdecl, "family")
    messages = bdecl.get("messages", False)
    if not isinstance(messages, bool) or (messages and local):
        raise err(f"block '{bname}': messages must be true or false, and true only for global blocks",
                  bdecl, "messages")
    if messages and fam.depends_on_variable(fam.log_h):
        raise err(f"block '{bname}': the message form needs a constant base measure", bdecl, "messages")
    return Block(bname, fam, local, "exact", rho, rho_text, variables, dict(zip(variables, comps)), constraint,
                 state, text_field(bdecl, "description"), line=line, schedule=schedule, messages=messages)


def _delta_block(bname, bdecl, local, rho, rho_text, line, taken, dims):
    """A point-estimate parameter block (q = N(θ_t, I), Eq. 55) with the ``delta`` rule."""
    if "family" in bdecl:
        raise err(f"block '{bname}': a delta block is a point estimate (q = N(θ_t, I), Eq. 55) and declares "
                  "'variable', not 'family'", bdecl, "family")
    if local:
        raise err(f"block '{bname}': delta blocks are global parameters", bdecl, "local")
    if rho != 1:
        raise err(f"block '{bname}': a delta block jumps to its fixed point and needs learning_rate 1",
                  bdecl, "learning_rate")
    var = bdecl.get("variable", LDict())
    if not isinstance(var, dict):
        raise err(f"block '{bname}': variable must be a mapping", bdecl, "variable")
    sym = False
    if "components" in var:
        comps = var["components"]
        if not isinstance(comps, list) or not comps or any(
                not isinstance(c, str) or not c.isidentifier() or c in taken for c in comps) \
                or len(set(comps)) != len(comps):
            raise err(f"block '{bname}': components must be new, distinct identifiers", var, "components")
        for c in comps:
            check_name_at(c, f"block '{bname}': component", var, "components")
        variables = [sp.Symbol(c, real=True) for c in comps]
        taken.update(comps)
    else:
        shape = var.get("shape", "scalar")
        if shape == "scalar":
            variables = [sp.Symbol(bname, real=True)]
        elif shape in ("vector", "matrix"):
            if len(dims) != 1:
                raise err(f"block '{bname}': vector and matrix blocks need the recipe's 'dimension'", var, "shape")
            P = next(iter(dims.values()))
            variables = [sp.MatrixSymbol(bname, P, 1 if shape == "vector" else P)]
            sym = bool(var.get("symmetric", False)) and shape == "matrix"
        else:
            raise err(f"block '{bname}': shape must be scalar, vector or matrix", var, "shape")
    state = [(str(v), v, None) for v in variables]
    return Block(bname, None, False, "delta", rho, rho_text, variables, {}, {}, state,
                 text_field(bdecl, "description"), symmetric=sym, line=line)


def _block(bname, bdecl, bspec, plate, hsyms, taken, dims, load_family, components=None):
    check_name_at(bname, "block", bspec, bname, scope="prefix")
    if bname in taken:
        raise err(f"block '{bname}' clashes with another name", bspec, bname)
    if not isinstance(bdecl, dict):
        raise err(f"block '{bname}' must be a mapping", bspec, bname)
    check_keys(bdecl, BLOCK_KEYS, ("approximations",), f"block '{bname}'")
    approx = bdecl["approximations"]
    if not isinstance(approx, list) or len(approx) != 1 or approx[0] not in ("exact", "delta"):
        raise err(f"block '{bname}': approximations must be [exact] (an exponential-family block) or [delta] "
                  "(a parameter block)", bdecl, "approximations")
    local = bdecl.get("local", False)
    if not isinstance(local, bool):
        raise err(f"block '{bname}': local must be true or false", bdecl, "local")
    if local and plate is None:
        raise err(f"block '{bname}': a local block needs a plate", bdecl, "local")
    rho, rho_text, schedule = _learning_rate(bname, bdecl, hsyms)
    if local and rho != 1:
        raise err(f"block '{bname}': a local block is recomputed at every step and needs learning_rate 1",
                  bdecl, "learning_rate")
    line = bspec.line_of(bname) if hasattr(bspec, "line_of") else None
    per = bdecl.get("components", False)
    if not isinstance(per, bool) or (per and components is None):
        raise err(f"block '{bname}': components must be true or false, and true needs the recipe's "
                  "'components: {index: k, size: K}'", bdecl, "components")
    if per:
        b = component_block(bname, bdecl, approx[0], local, rho, rho_text, schedule, line, dims,
                            lambda: _family_block(bname, bdecl, local, rho, rho_text, schedule, line, load_family))
    elif approx[0] == "exact":
        b = _family_block(bname, bdecl, local, rho, rho_text, schedule, line, load_family)
    else:
        b = _delta_block(bname, bdecl, local, rho, rho_text, line, taken, dims)
    taken.add(bname)
    taken.update(n for n, _, _ in b.state)
    return b


def _factors(spec, blocks, plate, symbols, components=None):
    fspec = spec["factors"]
    if not isinstance(fspec, dict) or not fspec:
        raise err("factors must be a non-empty mapping from factor names to {expression: ...}", spec, "factors")
    factors = []
    for fname, fdecl in fspec.items():
        if not isinstance(fdecl, dict):
            fdecl = LDict(expression=fdecl)
            fdecl.file, fdecl.line = where(fspec, fname)     # errors about the shorthand name its line
        check_keys(fdecl, FACTOR_KEYS, ("expression",), f"factor '{fname}'")
        plated = fdecl.get("plate", False)
        if not isinstance(plated, bool) or (plated and plate is None):
            raise err(f"factor '{fname}': plate must be true or false (true needs a plate)", fdecl, "plate")
        syms = dict(symbols)
        if plated:
            syms.update({d.name: d.symbol for d in plate["data"]})
        try:
            expr = parse_expression(str(fdecl["expression"]), syms, what=f"factor '{fname}'")
        except SpecError as exc:
            raise exc.located(*where(fdecl, "expression")) from None
        expr = matexpr.scalarize(expr)
        if is_mat(expr):
            raise err(f"factor '{fname}' must be a scalar", fdecl, "expression")
        # the one-hot constraint (last component = 1 - the others) is applied where a block's own statistics are
        # matched (rules.product.linear_in_block), not here: the other blocks average the last component as its
        # own probability, computed directly, never as 1 - Σ others (cancellation when it is small)
        per = fdecl.get("components", False)
        if not isinstance(per, bool) or (per and components is None):
            raise err(f"factor '{fname}': components must be true or false, and true needs the recipe's "
                      "'components: {index: k, size: K}'", fdecl, "components")
        uses = [b for b in blocks if b.per_component and any(expr.has(v) for v in b.variables)]
        if uses and not per:
            raise err(f"factor '{fname}' uses the per-component block '{uses[0].name}': write the term of one "
                      "component k and mark the factor components: true (it is summed over the components)",
                      fdecl, "expression")
        if per and not uses:
            raise err(f"factor '{fname}': a factor summed over the components must use a per-component block",
                      fdecl, "components")
        shared = [b for b in blocks if per and not b.per_component and any(expr.has(v) for v in b.variables)]
        if shared:
            # its messages would be sums over the components (Σ_k of each component's term), which the engine
            # does not derive yet: refused rather than derived per component
            raise err(f"factor '{fname}' is summed over the components and uses the block '{shared[0].name}', "
                      "which has no component axis (a block shared by all components, e.g. a tied covariance, is "
                      "not supported yet): declare it with components: true, or write the factor per component "
                      "in the unrolled form", fdecl, "expression")
        if not plated:
            for b in blocks:
                if b.local and any(expr.has(v) for v in b.variables):
                    raise err(f"factor '{fname}' uses the local block '{b.name}': mark it plate: true", fdecl,
                              "plate")
        factors.append(Factor(fname, expr, plated, Prose(str(fdecl["expression"]).strip()),
                              text_field(fdecl, "description"), per, line=where(fdecl, "expression")[1]))
    return factors


def parse_product(spec, load_family, file=None) -> FactorizedRecipe:
    """A product recipe; ``load_family(ref)`` loads the family of an ``exact`` block."""
    check_keys(spec, FACTORIZED_KEYS, ("name", "blocks", "factors"), "factorized recipe")
    name = check_name_at(spec["name"], "recipe name", spec, "name", scope="label")
    if "class_name" in spec:
        check_name_at(spec["class_name"], "class_name", spec, "class_name")
    dims = {}
    if "dimension" in spec:
        d = check_name_at(spec["dimension"], "dimension", spec, "dimension")
        dims[d] = sp.Symbol(d, integer=True, positive=True)
    taken = set(dims)
    hyper = parse_hyperparameters(spec, taken, kinds=("float", "int"), keys=HP_KEYS, clash="another name")
    data = _data(spec.get("data", LDict()), "data", spec, "data", taken, dims)
    plate = _plate(spec, hyper, taken, dims) if "plate" in spec else None
    bspec = spec["blocks"]
    if not isinstance(bspec, dict) or not bspec:
        raise err("blocks must be a non-empty mapping from block names to declarations", spec, "blocks")
    hsyms = {h.name: h.symbol for h in hyper}
    components = parse_components(spec, taken) if "components" in spec else None
    blocks = [_block(n, d, bspec, plate, hsyms, taken, dims, load_family, components) for n, d in bspec.items()]
    if components is not None and not any(b.per_component for b in blocks):
        raise err("components: no block has 'components: true'", spec, "components")
    seen_global = False
    for b in blocks:
        if b.local and seen_global:
            raise SpecError(f"block '{b.name}': local blocks come first in the coordinate order", file, b.line)
        seen_global = seen_global or not b.local
    symbols = {**dims, **hsyms, **{d.name: d.symbol for d in data}}
    for b in blocks:
        symbols.update({str(v): v for v in b.variables})
    factors = _factors(spec, blocks, plate, symbols, components)
    # a learning-rate schedule is a function of the step counter t
    step_symbol = sp.Symbol("t", integer=True, positive=True) if any(b.schedule for b in blocks) else None
    return FactorizedRecipe(
        name=name, title=text_field(spec, "title", name), description=text_field(spec, "description", ""),
        paper=text_field(spec, "paper", ""), class_name=str(spec.get("class_name", "")),
        checked_against=text_field(spec, "checked_against", ""), blocks=blocks, factors=factors, hyper=hyper,
        data=data, plate=plate, dims=dims, file=file, spec=spec,
        step_symbol=step_symbol, components=components)
