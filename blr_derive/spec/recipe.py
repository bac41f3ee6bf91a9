"""Recipes: a family + a loss + named approximations + hyperparameters (untrusted YAML data)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import sympy as sp

from blr_derive.core import budget
from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.families.family import Family, load_family
from blr_derive.core.names import check_name_at
from blr_derive.core.yamlio import LDict, check_keys, finite_number, load_yaml_file, where

RECIPE_KEYS = {
    "name", "title", "class_name", "description", "paper", "family", "loss", "approximations",
    "hyperparameters", "learning_rate", "checked_against", "state_init", "parameter", "federated", "sizes",
}
LOSS_KEYS = {"kind", "expression", "data", "description"}
HP_KEYS = {"default", "description", "names", "type", "choices", "required", "allow_infinite"}
DATA_KEYS = {"shape", "description", "symmetric"}


@dataclass
class Hyper:
    name: str
    symbol: object           # None for tuples (see ``elements``)
    default: object          # float, bool or tuple of floats
    description: str = ""
    kind: str = "float"      # float | bool | tuple
    elements: tuple = ()     # for tuples: ((name, symbol), ...)


@dataclass
class DataVar:
    name: str
    symbol: object
    shape: tuple          # () scalar, (N,) vector, (N, P) matrix — dims are sympy Symbols
    description: str = ""
    symmetric: bool = False


@dataclass
class Approx:
    name: str
    args: dict
    line: int | None = None


@dataclass
class Recipe:
    name: str
    title: str
    description: str
    paper: str
    family: Family
    loss_kind: str                     # "abstract" | "explicit"
    loss: object = None                # sympy expr in θ, data and hyperparameters
    loss_text: str = ""
    data: list = field(default_factory=list)
    hyper: list = field(default_factory=list)
    approximations: list = field(default_factory=list)
    learning_rate: str = "rho"
    class_name: str = ""
    checked_against: str = ""
    file: str | None = None
    spec: object = None

    state_init: dict = field(default_factory=dict)   # state name -> raw YAML value (parsed by passes)
    parameter: object = None           # what a model's weights hold (targets that own them, e.g. torch), or None
    federated: object = None           # federated.Federated for a 'federated' section (Bayesian ADMM), or None

    def hyper_symbol(self, name):
        for h in self.hyper:
            if h.name == name and h.symbol is not None:
                return h.symbol
            for en, es in h.elements:
                if en == name:
                    return es
        return None

    def hyper_symbols(self) -> dict:
        """name -> symbol for every scalar hyperparameter (tuple elements included; not choices)."""
        out = {}
        for h in self.hyper:
            if h.symbol is not None:
                out[h.name] = h.symbol
            if h.kind == "tuple":
                for en, es in h.elements:
                    out[en] = es
        return out

    def choices(self) -> dict:
        """choice hyperparameter name -> {choice: boolean symbol}."""
        return {h.name: dict(h.elements) for h in self.hyper if h.kind == "choice"}


def load_recipe(path, sizes: dict | None = None) -> Recipe:
    """Load a recipe file; ``sizes`` (name -> int) instantiates a recipe that declares size parameters
    (blr_derive/sizes.py) at those sizes instead of its defaults."""
    from blr_derive.core.sizes import instantiate_recipe
    budget.where(str(path), 1)                  # a budget error names the recipe as a whole while it loads
    spec = instantiate_recipe(load_yaml_file(path), str(path), sizes)
    from blr_derive.candidates.product import factorized_from_spec, is_factorized_spec
    if is_factorized_spec(spec):              # several blocks: a factorized (mean-field) recipe
        return factorized_from_spec(spec, str(path), Path(path).resolve().parent)
    return recipe_from_spec(spec, str(path), Path(path).resolve().parent)


def _err(msg, container, key=None):
    f, l = where(container, key)
    return SpecError(msg, f, l)


def recipe_from_spec(spec, file=None, base_dir=None) -> Recipe:
    if not isinstance(spec, dict):
        raise SpecError("a recipe must be a mapping", file, getattr(spec, "line", None) or 1)
    from blr_derive.candidates.product import factorized_from_spec, is_factorized_spec
    if is_factorized_spec(spec):              # several blocks (also for recipes given as YAML text or a dict)
        return factorized_from_spec(spec, file, base_dir)
    check_keys(spec, RECIPE_KEYS, ("name", "family", "loss"), "recipe")
    from blr_derive.core.sizes import instantiate_recipe
    spec = instantiate_recipe(spec, file)      # a sized recipe at its default sizes
    name = check_name_at(spec["name"], "recipe name", spec, "name", scope="label")
    if "class_name" in spec:
        check_name_at(spec["class_name"], "class_name", spec, "class_name")
    try:
        if isinstance(spec["family"], dict) and "mixture" in spec["family"]:
            from blr_derive.candidates.mixture import load_mixture              # a finite mixture of a family (Sec. 3.2)
            fam = load_mixture(spec["family"], base_dir)
        else:
            fam = load_family(spec["family"], base_dir)
    except SpecError as exc:
        f, l = where(spec, "family")
        raise exc.located(f, l) from None

    lr = spec.get("learning_rate", "rho")
    if not isinstance(lr, str):
        raise _err("learning_rate must name a hyperparameter", spec, "learning_rate")
    check_name_at(lr, "learning_rate", spec, "learning_rate")

    taken = {str(fam.theta)} | set(fam.params) | ({str(fam.dim)} if fam.dim is not None else set())
    hyper = []
    hspec = spec.get("hyperparameters", LDict())
    if not isinstance(hspec, dict):
        raise _err("hyperparameters must be a mapping", spec, "hyperparameters")
    for hname, hdecl in hspec.items():
        check_name_at(hname, "hyperparameter", hspec, hname)
        if hname in taken:
            raise _err(f"hyperparameter '{hname}' clashes with a name of the family", hspec, hname)
        if not isinstance(hdecl, dict):
            hdecl = LDict(default=hdecl)
            hdecl.file, hdecl.line = where(hspec, hname)     # errors about the shorthand name its line
        required = hdecl.get("required", False)
        if not isinstance(required, bool):
            raise _err(f"hyperparameter '{hname}': 'required' must be true or false", hdecl, "required")
        check_keys(hdecl, HP_KEYS, () if required else ("default",), f"hyperparameter '{hname}'")
        d = hdecl.get("default")
        desc = str(hdecl.get("description", ""))
        htype = hdecl.get("type")
        if htype not in (None, "int", "float"):
            raise _err(f"hyperparameter '{hname}': type must be int or float", hdecl, "type")
        if required:
            if d is not None or "choices" in hdecl or "names" in hdecl:
                raise _err(f"hyperparameter '{hname}': a required hyperparameter has no default", hdecl, "required")
            hyper.append(Hyper(hname, sp.Symbol(hname, real=True), None, desc, htype or "float"))
        elif isinstance(d, str) or "choices" in hdecl:
            choices = hdecl.get("choices")
            if (not isinstance(choices, list) or not choices or d not in choices
                    or any(not isinstance(c, str) or not c.isidentifier() for c in choices)):
                raise _err(f"hyperparameter '{hname}': a string default needs 'choices' (identifiers) containing it",
                           hdecl, "choices" if "choices" in hdecl else "default")
            for c in choices:
                check_name_at(c, f"hyperparameter '{hname}': choice", hdecl, "choices")
            elems = tuple((c, sp.Symbol(f"{hname}__{c}")) for c in choices)
            hyper.append(Hyper(hname, None, d, desc, "choice", elems))
        elif isinstance(d, bool):
            if "names" in hdecl:
                raise _err(f"hyperparameter '{hname}': 'names' is only for tuples", hdecl, "names")
            hyper.append(Hyper(hname, sp.Symbol(hname), d, desc, "bool"))
        elif isinstance(d, list):
            names = hdecl.get("names")
            if (not isinstance(names, list) or len(names) != len(d) or not d
                    or any(not isinstance(n, str) or not n.isidentifier() or n in taken for n in names)):
                raise _err(f"hyperparameter '{hname}': a tuple default needs 'names', one new identifier per element",
                           hdecl, "names" if "names" in hdecl else "default")
            for n in names:
                check_name_at(n, f"hyperparameter '{hname}': element name", hdecl, "names")
            if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in d):
                raise _err(f"hyperparameter '{hname}': tuple elements must be numbers", hdecl, "default")
            for v in d:
                finite_number(v, hdecl, "default", f"hyperparameter '{hname}': a tuple element")
            elems = tuple((n, sp.Symbol(n, real=True)) for n in names)
            hyper.append(Hyper(hname, None, tuple(float(v) for v in d), desc, "tuple", elems))
            taken.update(names)
        else:
            if not isinstance(d, (int, float)) or "names" in hdecl:
                raise _err(f"hyperparameter '{hname}': default must be a number, a boolean or a list", hdecl, "default")
            allow_inf = hdecl.get("allow_infinite", False)
            if not isinstance(allow_inf, bool):
                raise _err(f"hyperparameter '{hname}': allow_infinite must be true or false", hdecl, "allow_infinite")
            finite_number(d, hdecl, "default", f"hyperparameter '{hname}': default", allow_infinite=allow_inf)
            if htype == "int":
                if d != int(d):
                    raise _err(f"hyperparameter '{hname}': default must be an integer", hdecl, "default")
                hyper.append(Hyper(hname, sp.Symbol(hname, integer=True, positive=True), int(d), desc, "int"))
            else:
                hyper.append(Hyper(hname, sp.Symbol(hname, real=True), float(d), desc))
        taken.add(hname)
    seen_default = None
    for h in hyper:
        if h.default is not None:
            seen_default = h.name
        elif seen_default is not None:
            raise _err(f"required hyperparameter '{h.name}' must come before those with defaults ('{seen_default}')",
                       hspec, h.name)
    if lr not in {h.name for h in hyper if h.kind in ("float", "int")}:
        if lr in taken:
            raise _err(f"learning_rate '{lr}' must be a numeric hyperparameter", spec, "learning_rate")
        hyper.insert(0, Hyper(lr, sp.Symbol(lr, real=True), 1.0, "learning rate ρ_t of the BLR (Eq. 6)"))
        taken.add(lr)
    if getattr(fam, "is_mixture", False):           # mixture weights and fixed components name hyperparameters
        fam.bind({**{h.name: h.symbol for h in hyper if h.kind in ("float", "int")},
                  **{en: es for h in hyper if h.kind == "tuple" for en, es in h.elements}})

    loss = spec["loss"]
    data = []
    if loss == "abstract" or (isinstance(loss, dict) and loss.get("kind") == "abstract"):
        if isinstance(loss, dict):
            check_keys(loss, LOSS_KEYS, (), "loss")
        kind, expr, text = "abstract", None, "ℓ(θ) (abstract: provided through oracles)"
    elif isinstance(loss, dict):
        check_keys(loss, LOSS_KEYS, ("expression",), "loss")
        if loss.get("kind", "explicit") != "explicit":
            raise _err("loss kind must be 'abstract' or 'explicit'", loss, "kind")
        symbols = dict(fam.variable_symbols)
        if fam.dim is not None:
            symbols[str(fam.dim)] = fam.dim
        symbols.update({h.name: h.symbol for h in hyper if h.kind == "float"})
        symbols.update({en: es for h in hyper if h.kind == "tuple" for en, es in h.elements})
        # the current candidate's parameters may appear as constants (e.g. q_t as the prior of a
        # filtering step: the posterior is proportional to q_t times the likelihood)
        symbols.update({p.name: p.symbol for p in fam.params.values()})
        dims = {str(fam.dim): fam.dim} if fam.dim is not None else {}
        dspec = loss.get("data", LDict())
        if not isinstance(dspec, dict):
            raise _err("loss data must be a mapping", loss, "data")
        for dname, ddecl in dspec.items():
            check_name_at(dname, "data", dspec, dname)
            if dname in taken or dname in symbols:
                raise _err(f"data '{dname}' clashes with another name", dspec, dname)
            if ddecl is None:
                ddecl = LDict()
                ddecl.file, ddecl.line = where(dspec, dname)
            if not isinstance(ddecl, dict):
                raise _err(f"data '{dname}' must be a mapping (shape, description, symmetric)", dspec, dname)
            check_keys(ddecl, DATA_KEYS, (), f"data '{dname}'")
            shape = ddecl.get("shape", [])
            if not isinstance(shape, list) or len(shape) > 2:
                raise _err(f"data '{dname}': shape must be a list of at most two dimension names", ddecl, "shape")
            dsyms = []
            for s in shape:
                if not isinstance(s, str) or not s.isidentifier():
                    raise _err(f"data '{dname}': dimension names must be identifiers", ddecl, "shape")
                if s not in dims:
                    check_name_at(s, f"data '{dname}': dimension", ddecl, "shape")
                if s not in dims:
                    dims[s] = sp.Symbol(s, integer=True, positive=True)
                dsyms.append(dims[s])
            if len(dsyms) == 0:
                sym = sp.Symbol(dname, real=True)
            elif len(dsyms) == 1:
                sym = sp.MatrixSymbol(dname, dsyms[0], 1)
            else:
                sym = sp.MatrixSymbol(dname, dsyms[0], dsyms[1])
            symmetric = ddecl.get("symmetric", False)
            if not isinstance(symmetric, bool) or (symmetric and (len(dsyms) != 2 or dsyms[0] != dsyms[1])):
                raise _err(f"data '{dname}': symmetric must be true or false, and true only for square matrices",
                           ddecl, "symmetric")
            data.append(DataVar(dname, sym, tuple(dsyms), str(ddecl.get("description", "")), symmetric))
            symbols[dname] = sym
        text = loss["expression"]
        try:
            expr = parse_expression(text, symbols, what="loss")
        except SpecError as exc:
            f, l = where(loss, "expression")
            raise exc.located(f, l) from None
        from blr_derive.core.matcalc import is_mat
        if is_mat(expr) and expr.shape != (1, 1):
            raise _err("the loss must be a scalar", loss, "expression")
        if not fam.depends_on_variable(expr):
            raise _err(f"the loss does not depend on {fam.theta}", loss, "expression")
        kind = "explicit"
    else:
        raise _err("loss must be 'abstract' or a mapping with an 'expression'", spec, "loss")

    approxs = []
    aspec = spec.get("approximations", [])
    if not isinstance(aspec, list):
        raise _err("approximations must be a list", spec, "approximations")
    from blr_derive.rules.registry import RULES
    for i, a in enumerate(aspec):
        if isinstance(a, str):
            aname, args = a, {}
        elif isinstance(a, dict) and len(a) == 1:
            aname, args = next(iter(a.items()))
            if args is not None and not isinstance(args, dict):
                raise _err(f"arguments of approximation '{aname}' must be a mapping", aspec, i)
            args = dict(args or {})
        else:
            raise _err("each approximation is a rule name or {name: {args}}", aspec, i)
        if aname not in RULES or RULES[aname].kind == "identity":
            known = ", ".join(sorted(k for k, r in RULES.items() if r.kind != "identity"))
            raise _err(f"unknown approximation '{aname}' (known: {known})", aspec, i)
        approxs.append(Approx(aname, args, aspec.line_of(i)))

    if any(a.name == "posterior_correction" for a in approxs):
        from blr_derive.rules.posterior_correction import correction_data
        pc = next(a for a in approxs if a.name == "posterior_correction")
        try:
            correction_data(fam, data, taken)
        except SpecError as e:                       # locate the clash at the approximation that caused it
            raise e.located(file, pc.line)
    federated = None
    if "federated" in spec:
        from blr_derive.rules.federated import parse_federated
        federated = parse_federated(spec, fam, hyper, data, taken)

    return Recipe(
        name=name, title=str(spec.get("title", name)), description=str(spec.get("description", "")),
        paper=str(spec.get("paper", "")), family=fam, loss_kind=kind, loss=expr, loss_text=str(text),
        data=data, hyper=hyper, approximations=approxs, learning_rate=lr,
        class_name=str(spec.get("class_name", "")), checked_against=str(spec.get("checked_against", "")),
        file=file, spec=spec, state_init=_state_init(spec), parameter=_parameter(spec, fam), federated=federated,
    )


def _parameter(spec, fam):
    """``parameter``: the quantity the model's weights hold, as an expression of the family's parameters
    (``sign(lam)``: binary weights of a Bernoulli candidate); default (None) the Gaussian mean."""
    if "parameter" not in spec:
        return None
    symbols = {p.name: p.symbol for p in fam.params.values()}
    try:
        expr = parse_expression(spec["parameter"], symbols, what="parameter")
    except SpecError as exc:
        f, l = where(spec, "parameter")
        raise exc.located(f, l) from None
    if not expr.free_symbols:
        raise _err("parameter must depend on the family's parameters", spec, "parameter")
    return expr


def _state_init(spec):
    si = spec.get("state_init", LDict())
    if not isinstance(si, dict):
        raise _err("state_init must be a mapping from state names to initial values", spec, "state_init")
    return si


def _recipe_markdown(self) -> str:
    """Notebook view: family, loss, approximations and hyperparameters."""
    loss = "abstract ℓ(θ) (oracles)" if self.loss_kind == "abstract" else f"${sp.latex(self.loss)}$"
    hyper = ", ".join(f"`{h.name}` = {h.default!r}" for h in self.hyper) or "none"
    approx = ", ".join(f"`{a.name}`" for a in self.approximations) or "none"
    return "\n".join([f"**Recipe `{self.name}`** — {self.title}", "", f"- family: `{self.family.name}`",
                       f"- loss: {loss}", f"- approximations: {approx}", f"- hyperparameters: {hyper}",
                       f"- paper: {self.paper}" if self.paper else ""]) + "\n"


Recipe._repr_markdown_ = _recipe_markdown


def _recipe_html(self) -> str:
    """Notebook HTML view (math typeset by the notebook; see blr_derive/report_html.py)."""
    from blr_derive.report.html import recipe_fragment
    return recipe_fragment(self)


def _recipe_latex(self) -> str:
    from blr_derive.report.html import recipe_latex
    return recipe_latex(self)


Recipe._repr_html_ = _recipe_html
Recipe._repr_latex_ = _recipe_latex
