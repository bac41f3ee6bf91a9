"""Factorized (mean-field) candidates: coordinate-wise BLR steps over blocks of variables.

A *factorized recipe* declares several variables ("blocks"), each with its own candidate and learning
rate, and a loss that is a negative log-joint Σ_f ℓ_f of named *factors* (Sec. 5.2-5.4):

    q(x) = Π_b q_b(x_b)                                         (mean field, Eq. 55; Secs. 5.2-5.3)

Each step updates the blocks one after the other (coordinate-wise), every block's step using the other
blocks' *current* candidates:

* a block with an exponential family and the ``exact`` rule takes the BLR step (Eq. 6) on q_b with the
  other blocks fixed.  Each factor that is linear in T_b contributes a natural-gradient *message*
  λ̃_f = -∇_{μ_b} E_q[ℓ_f] = -E_{q_{-b}}[c_f] (its coefficients, Sec. 5.1), and

      λ_b ← (1 - ρ_b) λ_b + ρ_b Σ_f λ̃_f                       (Eq. 58; Eq. 60 in message form)

  The expectations over the other blocks are exact (each coefficient is linear in the other blocks'
  statistics: E = c0 + Σ c_k μ_k) or plug-in values for ``delta`` blocks.  A *local* block (one copy per
  row of the plate, ρ = 1) is the E-step of Eq. 56; a global block with ρ = 1 is a VMP step and with
  a Robbins-Monro ρ_t < 1 an SVI step (Sec. 5.3).
* a parameter block with the ``delta`` rule (q_b = N(θ_b, I), Eq. 55) and ρ = 1 jumps to the fixed point of
  its BLR step under the delta method: the stationarity condition ∇_θ E_{q_{-θ}}[ℓ](θ) = 0 (the M-step
  of Sec. 5.2), solved symbolically.

Factors marked ``plate: true`` are sums over the rows of the plate data; sums of per-row expressions
become *plate statistics* Σ_n d(y_n, μ_{z_n}) that the generated code accumulates (Eq. 54), optionally
scaled by N/B for a minibatch of B rows (Eq. 34, ``minibatch`` rule).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from blr_derive.core import matcalc
from blr_derive.derive.derivation import Derivation, Step, _plain
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.families.family import load_family, linear_in_statistics
from blr_derive.core.matcalc import is_mat, simplify_mat
from blr_derive.rules.registry import RULES
from blr_derive.core.names import check_name_at
from blr_derive.core.yamlio import LDict, check_keys, finite_number, where

FACTORIZED_KEYS = {"name", "title", "class_name", "description", "paper", "checked_against", "dimension",
                   "hyperparameters", "data", "plate", "blocks", "factors", "sizes"}
BLOCK_KEYS = {"family", "variable", "local", "approximations", "learning_rate", "description", "domain", "messages"}
FACTOR_KEYS = {"expression", "plate", "description"}
PLATE_KEYS = {"index", "data", "minibatch", "description"}
HP_KEYS = {"default", "description", "type"}
DATA_KEYS = {"shape", "description"}


def _err(msg, container, key=None):
    f, l = where(container, key)
    return SpecError(msg, f, l)


@dataclass
class Block:
    name: str
    family: object                 # Family or None (a delta parameter block)
    local: bool
    approximation: str             # exact | delta
    rho: object                    # sympy expression (1, a hyperparameter or a schedule in t)
    rho_text: str
    variables: list                # the block's variable symbols as they appear in the factors
    to_family: dict                # block variable symbol -> family variable symbol
    constraint: dict               # one-hot constraint: last component -> 1 - Σ others
    state: list                    # [(name, symbol, family parameter symbol or None)]
    description: str = ""
    symmetric: bool = False
    line: int | None = None
    schedule: object = None        # (rule name, {arg: expr}) of a learning-rate schedule
    messages: bool = False         # keep one natural parameter per factor as state (Eq. 60)


@dataclass
class Factor:
    name: str
    expr: object
    plate: bool
    text: str
    description: str = ""


@dataclass
class FactorizedRecipe:
    name: str
    title: str
    description: str
    paper: str
    class_name: str
    checked_against: str
    blocks: list
    factors: list
    hyper: list                    # [recipe.Hyper]
    data: list                     # [recipe.DataVar] (global data)
    plate: dict | None             # {index, data: [DataVar per row], minibatch: symbol or None}
    dims: dict
    file: str | None = None
    spec: object = None
    step_symbol: object = None

    @property
    def family(self):
        return _FamilyShim(self)

    @property
    def approximations(self):
        from blr_derive.spec.recipe import Approx
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

    # what reports and `blr-derive compare` read of a recipe's loss: the sum of the factors
    loss_kind = "explicit"

    @property
    def loss(self):
        return sp.Add(*[f.expr for f in self.factors])

    @property
    def loss_text(self):
        return " + ".join(f"[{f.name}{', summed over the plate' if f.plate else ''}: {f.text}]" for f in self.factors)


class _FamilyShim:
    """What reports read of ``recipe.family`` for a factorized recipe."""

    def __init__(self, r):
        self.name = " × ".join(f"{b.name}: {b.family.name if b.family is not None else 'delta'}" for b in r.blocks)
        self.description = "mean-field candidate q = " + " ".join(f"q({b.name})" for b in r.blocks)


# ----------------------------------------------------------------------------------------- parsing

def is_factorized_spec(spec) -> bool:
    return isinstance(spec, dict) and "blocks" in spec


def factorized_from_spec(spec, file=None, base_dir=None) -> FactorizedRecipe:
    from blr_derive.spec.recipe import DataVar, Hyper
    from blr_derive.core.sizes import instantiate_recipe
    check_keys(spec, FACTORIZED_KEYS, ("name", "blocks", "factors"), "factorized recipe")
    spec = instantiate_recipe(spec, file)      # a sized recipe (K copies of a block) at its default sizes
    name = check_name_at(spec["name"], "recipe name", spec, "name", scope="label")
    if "class_name" in spec:
        check_name_at(spec["class_name"], "class_name", spec, "class_name")
    dims = {}
    if "dimension" in spec:
        d = check_name_at(spec["dimension"], "dimension", spec, "dimension")
        dims[d] = sp.Symbol(d, integer=True, positive=True)
    taken = set(dims)

    hyper = []
    hspec = spec.get("hyperparameters", LDict())
    if not isinstance(hspec, dict):
        raise _err("hyperparameters must be a mapping", spec, "hyperparameters")
    for hname, hdecl in hspec.items():
        check_name_at(hname, "hyperparameter", hspec, hname)
        if hname in taken:
            raise _err(f"hyperparameter '{hname}' clashes with another name", hspec, hname)
        if not isinstance(hdecl, dict):
            hdecl = LDict(default=hdecl)
            hdecl.file, hdecl.line = where(hspec, hname)
        check_keys(hdecl, HP_KEYS, ("default",), f"hyperparameter '{hname}'")
        d = finite_number(hdecl["default"], hdecl, "default", f"hyperparameter '{hname}': default")
        if hdecl.get("type") == "int":
            hyper.append(Hyper(hname, sp.Symbol(hname, integer=True, positive=True), int(d),
                               str(hdecl.get("description", "")), "int"))
        else:
            hyper.append(Hyper(hname, sp.Symbol(hname, real=True), float(d), str(hdecl.get("description", ""))))
        taken.add(hname)

    def parse_data(dspec, what, parent, key):
        out = []
        if not isinstance(dspec, dict):
            raise _err(f"{what} must be a mapping", parent, key)
        for dname, ddecl in dspec.items():
            check_name_at(dname, "data", dspec, dname)
            if dname in taken:
                raise _err(f"data '{dname}' clashes with another name", dspec, dname)
            if ddecl is None:
                ddecl = LDict()
                ddecl.file, ddecl.line = where(dspec, dname)
            if not isinstance(ddecl, dict):
                raise _err(f"data '{dname}' must be a mapping (shape, description, ...)", dspec, dname)
            check_keys(ddecl, DATA_KEYS, (), f"data '{dname}'")
            shape = ddecl.get("shape", [])
            if not isinstance(shape, list) or len(shape) > 2 or any(not isinstance(s, str) or s not in dims
                                                                       for s in shape):
                raise _err(f"data '{dname}': shape must list at most two declared dimensions", ddecl, "shape")
            ds = [dims[s] for s in shape]
            sym = (sp.Symbol(dname, real=True) if not ds else sp.MatrixSymbol(dname, ds[0], 1) if len(ds) == 1
                   else sp.MatrixSymbol(dname, ds[0], ds[1]))
            out.append(DataVar(dname, sym, tuple(ds), str(ddecl.get("description", ""))))
            taken.add(dname)
        return out

    data = parse_data(spec.get("data", LDict()), "data", spec, "data")
    plate = None
    if "plate" in spec:
        pspec = spec["plate"]
        if not isinstance(pspec, dict):
            raise _err("plate must be a mapping", spec, "plate")
        check_keys(pspec, PLATE_KEYS, ("data",), "plate")
        mb = pspec.get("minibatch")
        mb_sym = None
        if mb is not None:
            mb_sym = next((h.symbol for h in hyper if h.name == mb), None)
            if mb_sym is None:
                raise _err("plate minibatch must name a hyperparameter (the data-set size N)", pspec, "minibatch")
        index = check_name_at(pspec.get("index", "n"), "plate index", pspec, "index")
        plate = {"index": index, "data": parse_data(pspec["data"], "plate data", pspec, "data"),
                 "minibatch": mb_sym, "description": str(pspec.get("description", ""))}

    t = sp.Symbol("t", integer=True, positive=True)
    step_symbol = None
    bspec = spec["blocks"]
    if not isinstance(bspec, dict) or not bspec:
        raise _err("blocks must be a non-empty mapping from block names to declarations", spec, "blocks")
    blocks = []
    hsyms = {h.name: h.symbol for h in hyper}
    for bname, bdecl in bspec.items():
        check_name_at(bname, "block", bspec, bname, scope="prefix")
        if bname in taken:
            raise _err(f"block '{bname}' clashes with another name", bspec, bname)
        if not isinstance(bdecl, dict):
            raise _err(f"block '{bname}' must be a mapping", bspec, bname)
        check_keys(bdecl, BLOCK_KEYS, ("approximations",), f"block '{bname}'")
        approx = bdecl["approximations"]
        if not isinstance(approx, list) or len(approx) != 1 or approx[0] not in ("exact", "delta"):
            raise _err(f"block '{bname}': approximations must be [exact] (an exponential-family block) or [delta] "
                       "(a parameter block)", bdecl, "approximations")
        approx = approx[0]
        local = bdecl.get("local", False)
        if not isinstance(local, bool):
            raise _err(f"block '{bname}': local must be true or false", bdecl, "local")
        if local and plate is None:
            raise _err(f"block '{bname}': a local block needs a plate", bdecl, "local")
        # learning rate
        lr = bdecl.get("learning_rate", 1)
        schedule = None
        if isinstance(lr, bool):
            raise _err(f"block '{bname}': bad learning_rate", bdecl, "learning_rate")
        if isinstance(lr, (int, float)):
            finite_number(lr, bdecl, "learning_rate", f"block '{bname}': learning_rate")
            rho, rho_text = sp.nsimplify(lr), str(lr)
        elif isinstance(lr, str) and lr in hsyms:
            rho, rho_text = hsyms[lr], lr
        elif isinstance(lr, dict) and len(lr) == 1 and "robbins_monro" in lr:
            args = lr["robbins_monro"] or LDict()
            if not isinstance(args, dict) or set(args) - {"delay", "forgetting"}:
                raise _err(f"block '{bname}': robbins_monro takes 'delay' and 'forgetting'", bdecl, "learning_rate")
            try:
                delay = parse_expression(str(args.get("delay", 1)), hsyms, what="delay")
                forget = parse_expression(str(args.get("forgetting", 0.7)), hsyms, what="forgetting")
            except SpecError as exc:
                raise exc.located(*where(bdecl, "learning_rate")) from None
            step_symbol = t
            rho = (t + delay) ** (-forget)
            rho_text = f"robbins_monro(delay={sp.sstr(delay)}, forgetting={sp.sstr(forget)})"
            schedule = ("robbins_monro", {"delay": delay, "forgetting": forget})
        else:
            raise _err(f"block '{bname}': learning_rate must be a number, a hyperparameter or "
                       "{robbins_monro: {delay: ..., forgetting: ...}}", bdecl, "learning_rate")
        if local and rho != 1:
            raise _err(f"block '{bname}': a local block is recomputed at every step and needs learning_rate 1",
                       bdecl, "learning_rate")
        line = bspec.line_of(bname) if hasattr(bspec, "line_of") else None
        if approx == "exact":
            if "family" not in bdecl:
                raise _err(f"block '{bname}': the exact rule needs a family", bdecl, "approximations")
            try:
                fam = load_family(bdecl["family"], base_dir)
            except SpecError as exc:
                raise exc.located(*where(bdecl, "family")) from None
            if fam.dim is not None or any(is_mat(x) for x in fam.T):
                raise _err(f"block '{bname}': family '{fam.name}' has vector or matrix statistics; factorized "
                           "blocks support scalar and fixed-size families", bdecl, "family")
            if fam.components and fam.variable_kind != "scalar":
                comps = list(fam.components)
                variables = [sp.Symbol(f"{bname}{i + 1}", real=True) for i in range(len(comps))]
            else:
                comps = [fam.theta]
                variables = [sp.Symbol(bname, real=True)]
            to_family = dict(zip(variables, comps))
            constraint = {}
            if fam.joint_support == "categorical" and not any(t_.has(comps[-1]) for t_ in fam.T):
                constraint = {variables[-1]: 1 - sum(variables[:-1])}
            state = [(f"{bname}_{p.name}", sp.Symbol(f"{bname}_{p.name}", **p.symbol.assumptions0), p.symbol)
                     for p in fam.params.values()]
            if any(p.fixed for p in fam.params.values()):
                raise _err(f"block '{bname}': families with fixed parameters are not supported", bdecl, "family")
            messages = bdecl.get("messages", False)
            if not isinstance(messages, bool) or (messages and local):
                raise _err(f"block '{bname}': messages must be true or false, and true only for global blocks",
                           bdecl, "messages")
            if messages and fam.depends_on_variable(fam.log_h):
                raise _err(f"block '{bname}': the message form needs a constant base measure", bdecl, "messages")
            blocks.append(Block(bname, fam, local, "exact", rho, rho_text, variables, to_family, constraint, state,
                                str(bdecl.get("description", "")), line=line, schedule=schedule, messages=messages))
        else:
            if "family" in bdecl:
                raise _err(f"block '{bname}': a delta block is a point estimate (q = N(θ_t, I), Eq. 55) and declares "
                           "'variable', not 'family'", bdecl, "family")
            if local:
                raise _err(f"block '{bname}': delta blocks are global parameters", bdecl, "local")
            if rho != 1:
                raise _err(f"block '{bname}': a delta block jumps to its fixed point and needs learning_rate 1",
                           bdecl, "learning_rate")
            var = bdecl.get("variable", LDict())
            if not isinstance(var, dict):
                raise _err(f"block '{bname}': variable must be a mapping", bdecl, "variable")
            sym = False
            if "components" in var:
                comps = var["components"]
                if not isinstance(comps, list) or not comps or any(
                        not isinstance(c, str) or not c.isidentifier() or c in taken for c in comps) \
                        or len(set(comps)) != len(comps):
                    raise _err(f"block '{bname}': components must be new, distinct identifiers", var, "components")
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
                        raise _err(f"block '{bname}': vector and matrix blocks need the recipe's 'dimension'",
                                   var, "shape")
                    P = next(iter(dims.values()))
                    variables = [sp.MatrixSymbol(bname, P, 1 if shape == "vector" else P)]
                    sym = bool(var.get("symmetric", False)) and shape == "matrix"
                else:
                    raise _err(f"block '{bname}': shape must be scalar, vector or matrix", var, "shape")
            state = [(str(v), v, None) for v in variables]
            blocks.append(Block(bname, None, False, "delta", rho, rho_text, variables, {}, {}, state,
                                str(bdecl.get("description", "")), symmetric=sym, line=line))
        taken.add(bname)
        taken.update(n for n, _, _ in blocks[-1].state)
    seen_global = False
    for b in blocks:
        if b.local and seen_global:
            raise SpecError(f"block '{b.name}': local blocks come first in the coordinate order", file, b.line)
        seen_global = seen_global or not b.local

    # factors
    fspec = spec["factors"]
    if not isinstance(fspec, dict) or not fspec:
        raise _err("factors must be a non-empty mapping from factor names to {expression: ...}", spec, "factors")
    symbols = dict(dims)
    symbols.update(hsyms)
    symbols.update({d.name: d.symbol for d in data})
    for b in blocks:
        symbols.update({str(v): v for v in b.variables})
    constraint = {}
    for b in blocks:
        constraint.update(b.constraint)
    factors = []
    for fname, fdecl in fspec.items():
        if not isinstance(fdecl, dict):
            fdecl = LDict(expression=fdecl)
            fdecl.file, fdecl.line = where(fspec, fname)     # errors about the shorthand name its line
        check_keys(fdecl, FACTOR_KEYS, ("expression",), f"factor '{fname}'")
        plated = fdecl.get("plate", False)
        if not isinstance(plated, bool) or (plated and plate is None):
            raise _err(f"factor '{fname}': plate must be true or false (true needs a plate)", fdecl, "plate")
        syms = dict(symbols)
        if plated:
            syms.update({d.name: d.symbol for d in plate["data"]})
        try:
            expr = parse_expression(str(fdecl["expression"]), syms, what=f"factor '{fname}'")
        except SpecError as exc:
            raise exc.located(*where(fdecl, "expression")) from None
        expr = matcalc.scalarize(expr)
        if is_mat(expr):
            raise _err(f"factor '{fname}' must be a scalar", fdecl, "expression")
        expr = expr.xreplace(constraint)
        if not plated:
            for b in blocks:
                if b.local and any(expr.has(v) for v in b.variables):
                    raise _err(f"factor '{fname}' uses the local block '{b.name}': mark it plate: true", fdecl,
                               "plate")
        factors.append(Factor(fname, expr, plated, str(fdecl["expression"]).strip(),
                              str(fdecl.get("description", ""))))
    return FactorizedRecipe(
        name=name, title=str(spec.get("title", name)), description=str(spec.get("description", "")),
        paper=str(spec.get("paper", "")), class_name=str(spec.get("class_name", "")),
        checked_against=str(spec.get("checked_against", "")), blocks=blocks, factors=factors, hyper=hyper,
        data=data, plate=plate, dims=dims, file=file, spec=spec, step_symbol=step_symbol)


# -------------------------------------------------------------------------------------- derivation

@dataclass
class FactorizedDerivation(Derivation):
    factorized: bool = True
    local_assign: list = field(default_factory=list)     # [(symbol, expr)] per plate row, in order
    local_outputs: list = field(default_factory=list)    # [(name, symbol)] per-row values returned as arrays
    stats: list = field(default_factory=list)            # [(symbol, per-row expr)] plate statistics
    scale: object = None                                 # (symbol, expr): minibatch scale N/B, or None
    count: object = None                                 # the statistic Σ_n 1 (rows of the plate)
    assignments: list = field(default_factory=list)      # [(symbol, expr)] global program, in order
    outputs: list = field(default_factory=list)          # [(state name, symbol)]
    row_symbols: set = field(default_factory=set)        # per-row symbols (plate data, local values)
    prelude: list = field(default_factory=list)          # [(symbol, expr)] first: parameters of message-form blocks
    message_state: dict = field(default_factory=dict)    # block name -> [(state name, symbol, factor, index)]

    def update_lines(self):
        out = [f"{s} = {_plain(e)}" for s, e in self.prelude]
        if self.local_assign:
            idx = self.recipe.plate["index"]
            out.append(f"for each row {idx} of the plate:")
            out += [f"  {s} = {_plain(e)}" for s, e in self.local_assign]
        for s, e in self.stats:
            out.append(f"{s} = sum_{self.recipe.plate['index']} {_plain(e)}")
        if self.scale is not None:
            out.append(f"{self.scale[0]} = {_plain(self.scale[1])}")
        for s, e in self.assignments:
            out.append(f"{s} = {_plain(e)}")
        return out

    def final_latex(self):
        return ([self.eq_latex(s, e, "=") for s, e in self.local_assign]
                + [self.eq_latex(s, r"\sum_{%s} %s" % (self.recipe.plate["index"], self.latex(e)), "=")
                   for s, e in self.stats]
                + ([self.eq_latex(self.scale[0], self.scale[1], "=")] if self.scale is not None else [])
                + [self.eq_latex(s, e, r"\leftarrow") for s, e in self.assignments])

    def to_markdown(self) -> str:
        r = self.recipe
        lines = [f"# Derivation of `{r.name}`: {r.title}", ""]
        if r.description:
            lines += [r.description.strip(), ""]
        lines += ["| block | candidate | scope | learning rate ρ | approximation | step |",
                  "|---|---|---|---|---|---|"]
        for b in r.blocks:
            cand = f"`{b.family.name}`" if b.family is not None else "N(θ_t, I), point estimate"
            kind = ("exact natural-gradient step (Eq. 6)" if b.approximation == "exact"
                    else "fixed point under the delta method (stationarity)")
            lines.append(f"| `{b.name}` | {cand} | {'local (one per plate row)' if b.local else 'global'} | "
                         f"{b.rho_text} | `{b.approximation}` | coordinate-wise: {kind} |")
        lines.append("")
        lines.append("**Factors** (loss = Σ of their negative logs): "
                     + "; ".join(f"`{f.name}`{' (summed over the plate)' if f.plate else ''}: ${self.latex(f.expr)}$"
                                 for f in r.factors))
        if r.paper:
            lines += ["", f"- **Paper**: {r.paper}"]
        lines.append("")
        lines += self.steps_markdown()
        lines += ["## Update", ""]
        for l in self.final_latex():
            lines.append(f"$$ {l} $$")
        lines.append("")
        return "\n".join(lines)


class _Ctx:
    """Bookkeeping of one derivation: plate statistics and the symbols that vary per row."""

    def __init__(self, R, D):
        self.R, self.D = R, D
        self.row = set()
        if R.plate:
            self.row |= {d.symbol for d in R.plate["data"]}
        self.dims = set(R.dims.values())
        self.stats = {}          # per-row expr -> statistic symbol
        self.rates = {}          # learning-rate schedule expression -> its symbol
        self.sym = {b.variables[0] for b in R.blocks if b.symmetric}
        self.scale = None
        if R.plate is not None and R.plate.get("minibatch") is not None:
            self.scale = sp.Symbol("batch_scale", positive=True)
            D.symbol_names[self.scale] = r"\frac{N}{B}"

    def is_row(self, e):
        syms = e.free_symbols if isinstance(e, sp.Basic) else set()
        return bool(syms & self.row)

    def stat(self, d):
        if isinstance(d, sp.Transpose):
            return sp.Transpose(self.stat(d.arg))
        if d in self.stats:
            return self.stats[d]
        k = len(self.stats) + 1
        s = (sp.MatrixSymbol(f"sum{k}", *d.shape) if is_mat(d) else sp.Symbol(f"sum{k}", real=True))
        self.stats[d] = s
        self.D.stats.append((s, d))
        if d == 1:
            self.D.count = s
        return s

    def _split_scalar(self, c):
        row, glob = [], []
        for f in sp.Mul.make_args(c):
            if self.is_row(f):
                if (f.free_symbols - self.row - self.dims):
                    raise DerivationError(f"cannot separate the plate sum: {f} mixes per-row and global quantities")
                row.append(f)
            else:
                glob.append(f)
        row, glob = sp.Mul(*row), sp.Mul(*glob)
        if row.could_extract_minus_sign():       # one statistic for d and -d
            row, glob = -row, -glob
        return row, glob

    def plate_sum(self, e):
        """Σ_n e(row n) with per-row parts collected into plate statistics (sums the generated code forms)."""
        sc = self.scale if self.scale is not None else sp.Integer(1)
        if not is_mat(e):
            total = sp.Integer(0)
            for term in sp.Add.make_args(sp.expand(e)):
                row, glob = self._split_scalar(term)
                total += sc * glob * self.stat(row)
            return total
        e = simplify_mat(sp.expand(e), self.sym)
        terms = e.args if isinstance(e, sp.MatAdd) else (e,)
        out = []
        for term in terms:
            c, mats = matcalc._split_coeff(term.args) if isinstance(term, sp.MatMul) else (sp.Integer(1), [term])
            crow, cglob = self._split_scalar(c)
            idx = [i for i, m in enumerate(mats) if self.is_row(m)]
            if idx and idx != list(range(idx[0], idx[-1] + 1)):
                raise DerivationError(f"cannot separate the plate sum of {term}: per-row factors are not adjacent")
            if idx:
                rowpart = mats[idx[0]:idx[-1] + 1]
                rm = rowpart[0] if len(rowpart) == 1 else sp.MatMul(*rowpart)
                if rm.free_symbols - self.row - self.dims:
                    raise DerivationError(f"cannot separate the plate sum of {term}")
                d = rm if crow == 1 else sp.MatMul(crow, rm)
                if crow != 1 and isinstance(rm, sp.Transpose):
                    d = sp.Transpose(sp.MatMul(crow, rm.arg))
                new = mats[:idx[0]] + [self.stat(d)] + mats[idx[-1] + 1:]
            else:
                new = [self.stat(crow) * mats[0]] + mats[1:] if mats else []
            cglob = cglob * sc
            out.append(sp.MatMul(cglob, *new) if cglob != 1 else (sp.MatMul(*new) if len(new) > 1 else new[0]))
        return simplify_mat(sp.MatAdd(*out) if len(out) > 1 else out[0], self.sym)


def _tex(name):
    return r"\mathrm{%s}" % name.replace("_", r"\_")


def _names(D, R):
    for b in R.blocks:
        for name, s, p in b.state:
            if p is not None:
                D.symbol_names[s] = r"{%s^{(%s)}}" % (sp.latex(p), _tex(b.name))
            elif is_mat(s):
                D.symbol_names[s] = r"\mathbf{%s}" % b.name


def _linear(b, e):
    """linear_in_statistics of block b's family, with the block's variables renamed to the family's (other
    symbols that happen to share a name with the family's variable are kept apart)."""
    fam = b.family
    fvars = set(b.to_family.values())
    protect = {s: sp.Dummy(s.name) for s in e.free_symbols if s in fvars and s not in b.to_family}
    lin = linear_in_statistics(fam, e.xreplace(protect).xreplace(b.to_family))
    if lin is None:
        return None
    back = {d: s for s, d in protect.items()}
    return lin[0].xreplace(back), [c.xreplace(back) for c in lin[1]]


def _expect(R, ctx, e, skip, current):
    """E over every exact block except ``skip`` (mean field: one block at a time, each linear in its T)."""
    for b in R.blocks:
        if b is skip or b.family is None or not any(e.has(v) for v in b.variables):
            continue
        lin = _linear(b, e)
        if lin is None:
            raise DerivationError(f"E over block '{b.name}' of {e} has no closed form: it is not linear in the "
                                  f"sufficient statistics of '{b.family.name}'")
        c0, cs = lin
        mus = [m.xreplace({p: s for _, s, p in b.state}) for m in b.family.mu_ord]
        e = c0 + sum((c * m for c, m in zip(cs, mus)), sp.Integer(0))
    return e.xreplace(current)


def derive_factorized(R: FactorizedRecipe) -> FactorizedDerivation:
    D = FactorizedDerivation(R)
    D.step_symbol = R.step_symbol
    _names(D, R)
    ctx = _Ctx(R, D)
    current = {}        # state symbol -> symbol holding its latest value (coordinate-wise)
    order = ", ".join(f"{b.name} ({'local' if b.local else 'global'}, ρ = {b.rho_text}, {b.approximation})"
                      for b in R.blocks)
    D.add("mean_field", RULES["mean_field"].equation, "Factorized candidate and coordinate-wise BLR steps",
          "The candidate factorizes over the blocks, q = Π_b q_b; each step updates the blocks one after the other "
          f"in the order {order}, each with the other blocks' current candidates (Sec. 5.2-5.3). "
          "The loss is the sum of the factors' negative logs: "
          + ", ".join(f.name + (" (summed over the plate)" if f.plate else "") for f in R.factors) + ".",
          [(sp.Symbol(r"\bar\ell_{%s}" % _tex(f.name)), f.expr) for f in R.factors])
    constraints = [(v, e) for b in R.blocks for v, e in b.constraint.items()]
    if constraints:
        D.add("family", "Sec. 1.2 (minimal family)", "One-hot constraint of the categorical blocks",
              "The last component is one minus the others; the factors are written in the minimal statistics.",
              constraints)
    at = None
    for b in R.blocks:
        if not b.local and at is None:
            at = len(D.steps)
        if b.family is not None:
            _exact_block(R, D, ctx, b, current)
        else:
            _delta_block(R, D, ctx, b, current)
    D.row_symbols = set(ctx.row)
    exprs = dict(D.local_assign + D.assignments)
    D.updates = [(n, s, exprs[s]) for n, s in D.local_outputs + D.outputs]
    if D.stats:
        eqs = [(s, r"\sum_{%s} %s" % (R.plate["index"], D.latex(e))) for s, e in D.stats]
        text = ("The global blocks need the per-row quantities only through these sums over the plate rows "
                "(the messages of the data factors add up, Eq. 54).")
        if ctx.scale is not None:
            count = D.count if D.count is not None else ctx.stat(sp.Integer(1))
            N = R.plate["minibatch"]
            D.scale = (ctx.scale, N / count)
            eqs = [(s, r"\sum_{%s} %s" % (R.plate["index"], D.latex(e))) for s, e in D.stats]
            eqs.append((ctx.scale, N / count))
            text += (" The plate rows are a minibatch of B rows from N: every sum is scaled by N/B (an unbiased "
                     "estimate of the full-data sum, Eq. 34).")
        step = Step("plate_sum" if ctx.scale is None else "minibatch",
                    RULES["plate_sum" if ctx.scale is None else "minibatch"].equation,
                    "Plate statistics", text, eqs)
        D.steps.insert(at if at is not None else len(D.steps), step)
    return D


def _exact_block(R, D, ctx, b, current):
    fam = b.family
    pmap = {p: s for _, s, p in b.state}
    msgs = [sp.Integer(0)] * len(fam.T)
    eqs, per = [], []
    for f in R.factors:
        if not any(f.expr.has(v) for v in b.variables):
            continue
        lin = _linear(b, f.expr)
        if lin is None:
            raise SpecError(f"factor '{f.name}' is not linear in the sufficient statistics of block '{b.name}' "
                            f"(family '{fam.name}'): the exact rule does not apply", R.file, b.line)
        _, cs = lin
        try:
            m = [-_expect(R, ctx, c, b, current) for c in cs]
        except DerivationError as exc:
            raise SpecError(str(exc), R.file, b.line) from None
        if f.plate and not b.local:
            try:
                m = [ctx.plate_sum(x) for x in m]
            except DerivationError as exc:
                raise SpecError(str(exc), R.file, b.line) from None
        msgs = [a + x for a, x in zip(msgs, m)]
        per.append((f, m))
        for i, x in enumerate(m):
            eqs.append((sp.Symbol(r"\tilde\lambda^{(%d)}_{%s \to %s}" % (i + 1, _tex(f.name), _tex(b.name))), x))
    logh = fam.log_h
    if fam.depends_on_variable(logh):
        lin = fam.log_h_linear()
        if not lin:
            raise SpecError(f"block '{b.name}': E_q[log h] of family '{fam.name}' is not linear in T", R.file, b.line)
        msgs = [a - c for a, c in zip(msgs, lin[1])]
    if b.local:
        for _, s, _ in b.state:
            ctx.row.add(s)
    D.add("exact", RULES["exact"].equation, f"Block `{b.name}`: natural-gradient messages of the factors",
          f"Each factor is linear in T(x_{b.name}) of `{fam.name}`, so its natural gradient is minus its coefficients "
          "(Sec. 5.1); the coefficients are averaged over the other blocks' current candidates (exactly, since "
          "they are linear in those blocks' statistics, or at the point value of a delta block)"
          + (", and summed over the plate rows into plate statistics (Eq. 54)" if any(
              f.plate for f in R.factors) and not b.local else "") + ".", eqs)
    lam_new = [sp.Symbol(f"{b.name}_lambda{i + 1}", real=True) for i in range(len(fam.lam))]
    for i, l in enumerate(lam_new):
        D.symbol_names[l] = r"\lambda^{(%d)}_{%s}" % (i + 1, _tex(b.name))
    rho = b.rho
    if b.schedule is not None:
        if rho not in ctx.rates:
            rs = sp.Symbol("rho_t" if not ctx.rates else f"rho_t{len(ctx.rates) + 1}", positive=True)
            D.symbol_names[rs] = r"\rho_t" if not ctx.rates else r"\rho_t^{(%d)}" % (len(ctx.rates) + 1)
            ctx.rates[rho] = rs
            D.assignments.append((rs, rho))
            D.add("robbins_monro", RULES["robbins_monro"].equation, "Robbins-Monro learning rate",
                  "ρ_t = (t + delay)^(-forgetting) with forgetting in (1/2, 1]: Σρ_t = ∞ and Σρ_t² < ∞, so the "
                  "stochastic steps converge to a fixed point of the full-batch update (Sec. 5.3).",
                  [(rs, rho)])
        rho = ctx.rates[rho]
    eta_now = [e.xreplace(pmap) for e in fam.eta]
    upd = [sp.expand(msg) if rho == 1 else (1 - rho) * e + rho * msg for e, msg in zip(eta_now, msgs)]
    if b.messages:
        upd = _message_form(R, D, b, per, rho)
    rule_text = ("With ρ = 1 the old natural parameters drop out: λ is the sum of the messages (Eq. 58; the same as "
                 "Eq. 60 with every message replaced)." if rho == 1 else
                 "λ ← (1 - ρ)λ + ρ Σ_f λ̃_f (Eq. 58), equivalently every message smoothed with the same ρ (Eq. 60).")
    D.add("factor_messages", RULES["factor_messages"].equation,
          f"Block `{b.name}`: {'local ' if b.local else ''}BLR step", rule_text,
          [(l, u, r"\leftarrow") for l, u in zip(lam_new, upd)])
    target = D.local_assign if b.local else D.assignments
    target.extend(zip(lam_new, upd))
    outs = []
    for name, s, p in b.state:
        e = _stable_softmax(fam.ord_from_nat[p].xreplace(dict(zip(fam.lam, lam_new))))
        if b.local:
            outs.append((s, e))
            D.local_outputs.append((name, s))
        else:
            ns = sp.Symbol(f"{name}_new", **s.assumptions0)
            D.symbol_names[ns] = "{%s}'" % D.symbol_names.get(s, str(s))
            outs.append((ns, e))
            D.outputs.append((name, ns))
            current[s] = ns
    target.extend(outs)
    D.add("natural_to_ordinary", RULES["natural_to_ordinary"].equation, f"Block `{b.name}`: ordinary parameters",
          f"The inverse map of `{fam.name}` from natural to ordinary parameters.",
          [(s, e, r"\leftarrow") for s, e in outs])


def _message_form(R, D, b, per, rho):
    """Eq. 60: one natural parameter λ̃_f per factor is the state; each is smoothed with ρ and λ = Σ_f λ̃_f.
    The block's ordinary parameters are computed from the stored messages before the step (prelude)."""
    fam = b.family
    syms, news, eqs = [], [], []
    for f, m in per:
        row, new_row = [], []
        for i, x in enumerate(m):
            name = f"{b.name}_{f.name}_msg{i + 1}"
            ms, ns = sp.Symbol(name, real=True), sp.Symbol(f"{name}_new", real=True)
            D.symbol_names[ms] = r"\tilde\lambda^{(%d)}_{%s \to %s}" % (i + 1, _tex(f.name), _tex(b.name))
            D.symbol_names[ns] = "{%s}'" % D.symbol_names[ms]
            D.message_state.setdefault(b.name, []).append((name, ms, f.name, i))
            D.assignments.append((ns, sp.expand(x) if rho == 1 else (1 - rho) * ms + rho * x))
            D.outputs.append((name, ns))
            eqs.append((ns, D.assignments[-1][1], r"\leftarrow"))
            row.append(ms)
            new_row.append(ns)
        syms.append(row)
        news.append(new_row)
    lam_old = [sp.Add(*[r[i] for r in syms]) for i in range(len(fam.T))]
    for name, s, p in b.state:
        D.prelude.append((s, _stable_softmax(fam.ord_from_nat[p].xreplace(dict(zip(fam.lam, lam_old))))))
    D.add("factor_messages", "Eq. 60", f"Block `{b.name}`: messages as state (Eq. 60)",
          "Each factor's message is stored and smoothed with the same ρ; the block's natural parameter is their "
          "sum, and its current parameters are computed from the stored messages at the start of the step.",
          [(s, e, "=") for s, e in D.prelude[-len(b.state):]] + eqs)
    return [sp.Add(*[r[i] for r in news]) for i in range(len(fam.T))]


def _delta_block(R, D, ctx, b, current):
    grads = None
    eqs = []
    for f in R.factors:
        if not any(f.expr.has(v) for v in b.variables):
            continue
        try:
            e = _expect(R, ctx, f.expr, b, {})
            if is_mat(b.variables[0]):
                g = [matcalc.gradient(e, b.variables, ctx.sym)[0]]
            else:
                g = [sp.diff(sp.expand(e), v) for v in b.variables]
            if f.plate:
                g = [ctx.plate_sum(x) for x in g]
        except DerivationError as exc:
            raise SpecError(f"block '{b.name}', factor '{f.name}': {exc}", R.file, b.line) from None
        eqs += [(sp.Symbol(r"\nabla_{%s}\mathbb{E}[\bar\ell_{%s}]" % (sp.latex(v), _tex(f.name))), x)
                for v, x in zip(b.variables, g)]
        grads = g if grads is None else [a + x for a, x in zip(grads, g)]
    if grads is None:
        raise SpecError(f"block '{b.name}' appears in no factor", R.file, b.line)
    D.add("delta", RULES["delta"].equation, f"Block `{b.name}`: delta method",
          f"q({b.name}) = N({b.name}_t, I) (Eq. 55): with the delta method the expected loss is its value at the mean, "
          "averaged over the other blocks; its gradient, summed over the plate rows into plate statistics "
          "(Eq. 54):", eqs)
    v0 = b.variables[0]
    try:
        if is_mat(v0):
            from blr_derive.families.family import _isolate
            sol = [_isolate(simplify_mat(grads[0], ctx.sym), sp.ZeroMatrix(*v0.shape), v0, ctx.sym)]
        else:
            s = sp.solve([sp.together(g) for g in grads], b.variables, dict=True)
            if len(s) != 1:
                raise DerivationError(f"{len(s)} stationary points")
            sol = [sp.factor_terms(s[0][v]) for v in b.variables]
    except DerivationError as exc:
        raise SpecError(f"block '{b.name}': cannot solve the stationarity condition: {exc}", R.file, b.line) from None
    sol = [_positive_inverses(e, ctx.sym) for e in sol]
    out = []
    for v, e in zip(b.variables, sol):
        ns = (sp.MatrixSymbol(f"{v.name}_new", *v.shape) if is_mat(v) else sp.Symbol(f"{v.name}_new", real=True))
        D.symbol_names[ns] = (r"\mathbf{%s}'" if is_mat(v) else "%s'") % sp.latex(v)
        out.append((ns, e.xreplace(current)))
        D.outputs.append((str(v), ns))
        current[v] = ns
    D.assignments.extend(out)
    D.add("stationarity", RULES["stationarity"].equation, f"Block `{b.name}`: fixed point with ρ = 1",
          "With ρ = 1 the BLR step under the delta method lands where the expected gradient vanishes (the M-step of "
          "Sec. 5.2); solved for the block, with the blocks updated before it at their new values.",
          [(ns, e, r"\leftarrow") for ns, e in out])


def _stable_softmax(e):
    """exp(a) / (Σ_j exp(b_j) + c) as exp(a - logsumexp(b_j, log c)): the same value without overflow."""
    from blr_derive.core.specialfns import logsumexp
    num, den = sp.fraction(sp.together(e))
    if not (isinstance(num, sp.exp) and isinstance(den, sp.Add)):
        return e
    parts = []
    for t in den.args:
        if isinstance(t, sp.exp):
            parts.append(t.args[0])
        elif t.is_number and t.is_positive:
            parts.append(sp.log(t))
        else:
            return e
    return sp.exp(num.args[0] - logsumexp(*parts))


def _positive_inverses(e, sym):
    """c·(X)⁻¹ becomes (X/c)⁻¹ with the scalar absorbed term by term, so that the generated Cholesky solve sees the
    positive-definite matrix (e.g. a covariance rather than minus half a scatter matrix times a count)."""
    if not is_mat(e):
        return e

    def flip_inv(c, inv):
        terms = []
        for t in inv.arg.args:
            tc, tm = matcalc._split_coeff(t.args) if isinstance(t, sp.MatMul) else (sp.Integer(1), [t])
            k = sp.factor_terms(sp.cancel(tc / c))
            terms.append(sp.MatMul(k, *tm) if k != 1 else (sp.MatMul(*tm) if len(tm) > 1 else tm[0]))
        return sp.Integer(1), sp.Inverse(sp.MatAdd(*terms))

    def flip(node):
        if isinstance(node, sp.MatAdd):
            return sp.MatAdd(*[flip(a) for a in node.args])
        c, mats = (matcalc._split_coeff(node.args) if isinstance(node, sp.MatMul) else (sp.Integer(1), [node]))
        if len(mats) == 1 and isinstance(mats[0], sp.Inverse) and isinstance(mats[0].arg, sp.MatAdd):
            c, inv = flip_inv(c, mats[0])
            return sp.MatMul(c, inv) if c != 1 else inv
        return node
    return flip(e)


# ------------------------------------------------------------------------------------------- numeric check

def compare_factorized(R, D, mod, seed=0, P=3, rows=6):
    """[(output name, generated value, symbolic value)]: the generated ``step`` against the derivation's program
    evaluated with sympy on random valid inputs (per-row program on each of ``rows`` plate rows)."""
    import numpy as np
    from blr_derive.families.family import evaluate
    rng = np.random.default_rng(11 + seed)
    env, state, data = {}, {}, {}
    dims = {d: P for d in R.dims.values()}
    for b in R.blocks:
        if b.local:
            continue
        if b.family is not None:
            vals = b.family.sample_params(rng, P)
            if b.name in D.message_state:          # Eq. 60: split λ(sampled parameters) among the messages
                lam = [float(evaluate(e, vals)) for e in b.family.eta]
                nf = len({f for _, _, f, _ in D.message_state[b.name]})
                for name, ms, _, i in D.message_state[b.name]:
                    state[name] = lam[i] / nf
                    env[ms] = state[name]
                continue
            for name, s, p in b.state:
                state[name] = float(vals[p])
                env[s] = state[name]
        else:
            for v in b.variables:
                if is_mat(v) and v.shape[1] != 1:
                    A = rng.normal(size=(P, P))
                    val = 0.2 * A @ A.T / P + 0.5 * np.eye(P)
                elif is_mat(v):
                    val = rng.normal(size=P)
                else:
                    val = float(rng.uniform(0.1, 0.3))
                state[str(v)] = val
                env[v] = val
    hp = {}
    for h in R.hyper:
        hp[h.name] = int(rng.integers(5, 9)) if h.kind == "int" else float(rng.uniform(0.5, 1.5))
        env[h.symbol] = hp[h.name]
    for d in R.data:
        v = rng.uniform(0.5, 2.0, size=tuple(P for _ in d.shape)) if d.shape else float(rng.uniform(0.5, 2.0))
        data[d.name] = v
        env[d.symbol] = v
    if R.plate:
        for d in R.plate["data"]:
            data[d.name] = rng.normal(size=(rows,) + tuple(P for _ in d.shape))
    if D.step_symbol is not None:
        state["step"] = 3
        env[D.step_symbol] = 4
    out = mod.step(mod.init(**state), data=data or None, **hp)
    for s, e in D.prelude:
        env[s] = evaluate(e, env, dims)
    result = []
    if R.plate:
        sums = {s: None for s, _ in D.stats}
        local_vals = {name: [] for name, _ in D.local_outputs}
        for n in range(rows):
            renv = dict(env)
            for d in R.plate["data"]:
                renv[d.symbol] = data[d.name][n]
            for s, e in D.local_assign:
                renv[s] = evaluate(e, renv, dims)
            for name, s in D.local_outputs:
                local_vals[name].append(renv[s])
            for s, e in D.stats:
                val = evaluate(e, renv, dims)
                sums[s] = val if sums[s] is None else sums[s] + val
        for s, _ in D.stats:
            env[s] = sums[s] if np.ndim(sums[s]) == 0 or sums[s].shape[1] != 1 else sums[s].ravel()
        if D.scale is not None:
            env[D.scale[0]] = evaluate(D.scale[1], env, dims)
        for name, vals in local_vals.items():
            result.append((name, np.asarray(out[name]), np.asarray(vals)))
    for s, e in D.assignments:
        val = evaluate(e, env, dims)
        env[s] = val if np.ndim(val) == 0 or val.shape[1] != 1 else val.ravel()
    for name, s in D.outputs:
        result.append((name, np.reshape(out[name], np.shape(env[s])), env[s]))
    return result


# ---------------------------------------------------------------------------------------------- the IR

@dataclass
class FactorizedIR:
    """What a generated module of a factorized recipe needs (rendered by codegen/<target>/factorized.*)."""
    recipe: str
    title: str
    class_name: str
    engine_version: str
    source: str
    paper: str
    description: str
    blocks: list                   # [(name, candidate, scope, rho text, approximation)]
    state: list                    # [ir.Var] global blocks' parameters
    hyperparameters: list          # [ir.HyperVar]
    data: list                     # [ir.Var] global data
    plate: dict | None             # {index, data: [(name, symbol, kind)], local_outputs: [(name, symbol)]}
    dims: list                     # [(dim, data name, axis)] (plate data: axis counted after the row axis)
    step_symbol: object
    local_assign: list             # [(symbol, expr)] per row
    pre_loop: list                 # [(symbol, expr)] row-invariant parts of the per-row program, computed once
    prelude: list                  # [(symbol, expr)] parameters of message-form blocks from their messages
    stats: list                    # [(symbol, per-row expr)]
    scale: object                  # (symbol, expr) or None
    assignments: list              # [(symbol, expr)]
    outputs: list                  # [(state name, symbol)]
    equations: list                # plain-text update
    family: str = ""
    factorized: bool = True
    elementwise: bool = False
    symmetric: frozenset = frozenset()   # names of the symmetric matrices among state and data


def build_factorized_ir(D: FactorizedDerivation, source: str = "") -> FactorizedIR:
    from blr_derive import __version__
    from blr_derive.ir.build import HyperVar, Var, _camel
    R = D.recipe
    state = []
    for b in R.blocks:
        if b.local:
            continue
        if b.name in D.message_state:
            state += [Var(name, ms, "scalar", f"message of factor '{f}' to q({b.name}), λ̃^({i + 1}) (Eq. 60)")
                      for name, ms, f, i in D.message_state[b.name]]
            continue
        for name, s, p in b.state:
            desc = (f"{b.family.params[str(p)].description} of q({b.name}) ({b.family.name})" if p is not None
                    else b.description or f"point estimate of {b.name}")
            kind = "scalar" if not is_mat(s) else ("vector" if s.shape[1] == 1 else "matrix")
            state.append(Var(name, s, kind, desc))
    used = set()
    for _, e in D.prelude + D.local_assign + D.stats + D.assignments + ([D.scale] if D.scale else []):
        used |= e.free_symbols
    hyper = [HyperVar(h.name, h.kind, h.default, h.description, (h.symbol,)) for h in R.hyper if h.symbol in used]
    data = [Var(d.name, d.symbol, "scalar" if not d.shape else ("vector" if len(d.shape) == 1 else "matrix"),
                d.description) for d in R.data if d.symbol in used]
    dims, seen = [], set()
    plate = None
    if R.plate is not None:
        pdata = []
        for d in R.plate["data"]:
            pdata.append((d.name, d.symbol, "scalar" if not d.shape else "vector" if len(d.shape) == 1 else "matrix",
                          d.description))
            for axis, s in enumerate(d.shape):
                if s not in seen:
                    seen.add(s)
                    dims.append((s, d.name, axis + 1))
        plate = {"index": R.plate["index"], "data": pdata, "local_outputs": list(D.local_outputs),
                 # scalar rows: the per-row program is elementwise, so numpy evaluates it on all rows at once
                 "vectorized": all(not d.shape for d in R.plate["data"])}
    for d in R.data:
        for axis, s in enumerate(d.shape):
            if s not in seen:
                seen.add(s)
                dims.append((s, d.name, axis))
    pre_loop, local_assign = _hoist_invariants(D)
    blocks = [(b.name, b.family.name if b.family is not None else "delta (point estimate)",
               "local" if b.local else "global", b.rho_text, b.approximation) for b in R.blocks]
    from blr_derive.ir.build import check_printed_names, seal_text
    ir = FactorizedIR(
        recipe=R.name, title=R.title, class_name=R.class_name or _camel(R.name), engine_version=__version__,
        source=source, paper=R.paper, description=R.description, blocks=blocks, state=state,
        hyperparameters=hyper, data=data, plate=plate, dims=dims, step_symbol=D.step_symbol,
        local_assign=local_assign, pre_loop=pre_loop, prelude=list(D.prelude), stats=list(D.stats), scale=D.scale,
        assignments=list(D.assignments),
        outputs=list(D.outputs), equations=D.update_lines(), family=R.family.name)
    ir.symmetric = frozenset(str(b.variables[0]) for b in R.blocks if b.symmetric)
    check_printed_names(ir, R)
    return seal_text(ir)


def _hoist_invariants(D):
    """Split the per-row program into row-invariant temporaries (computed once before the plate loop) and
    the per-row assignments that use them (loop-invariant code motion; the values are unchanged)."""
    row = set(D.row_symbols) | {s for s, _ in D.local_assign}
    temps, pre = {}, []

    def temp(e):
        if e not in temps:
            t = sp.Symbol(f"row_const{len(temps) + 1}", real=True)
            temps[e] = t
            pre.append((t, e))
        return temps[e]

    def varies(e):
        return bool(e.free_symbols & row)

    def walk(e):
        if is_mat(e):
            return e
        if not varies(e):
            return e if (e.is_Atom or e.is_number) else temp(e)
        if isinstance(e, sp.Trace) and isinstance(e.arg, sp.MatAdd):
            return walk(sp.Add(*[sp.Trace(a) for a in e.arg.args]))
        if isinstance(e, sp.Trace) and isinstance(e.arg, sp.MatMul):
            c, mats = matcalc._split_coeff(e.arg.args)
            if c != 1:
                return walk(c * sp.Trace(sp.MatMul(*mats) if len(mats) > 1 else mats[0]))
        if isinstance(e, (sp.Add, sp.Mul)):
            inv = [a for a in e.args if not varies(a)]
            parts = [walk(a) for a in e.args if varies(a)]
            if inv:
                c = e.func(*inv)
                parts.insert(0, c if (c.is_Atom or c.is_number) else temp(c))
            return e.func(*parts)
        if isinstance(e, (sp.Function, sp.Pow)):
            return e.func(*[walk(a) for a in e.args])
        return e
    return pre, [(s, walk(e)) for s, e in D.local_assign]
