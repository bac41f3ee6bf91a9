"""The parts every recipe shares: hyperparameters, data declarations and the approximations list.

Each is read from untrusted YAML into a typed record; names are validated (``blr_derive/core/names.py``) and
every error is located at its line.  Single-family, mixture and product recipes all use these readers."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.names import check_name_at
from blr_derive.core.text import did_you_mean, quote
from blr_derive.core.types import Expr, HyperDefault, Sym, Text
from blr_derive.core.yamlio import LDict, check_keys, finite_number, text_field, where

HP_KEYS = {"default", "description", "names", "type", "choices", "required", "allow_infinite", "keyword_only"}
DATA_KEYS = {"shape", "description", "symmetric", "default"}


@dataclass
class Hyper:
    name: str
    symbol: Sym | None       # None for tuples and choices (see ``elements``)
    default: HyperDefault    # float, int, bool, str (a choice) or tuple of floats; None when required
    description: Text = ""    # Prose (recipe text) read from the recipe
    kind: str = "float"      # float | int | bool | tuple | choice
    elements: tuple[tuple[str, Sym], ...] = ()   # tuples: (name, symbol) each; choices: (choice, boolean symbol) each
    keyword_only: bool = False   # a constructor argument that can only be passed by name (after ``*``)


@dataclass
class DataVar:
    name: str
    symbol: Sym
    shape: tuple[Expr, ...]   # () scalar, (N,) vector, (N, P) matrix — dims are sympy Symbols
    description: Text = ""    # Prose (recipe text) read from the recipe
    symmetric: bool = False
    default: Expr | None = None   # the data of an abstract loss: its value where a target keeps it as state (torch),
    #                               an expression of hyperparameters (None: the caller must give it)


@dataclass
class Approx:
    name: str
    args: dict[str, Any]     # the rule's arguments as the recipe gives them (YAML values, read by rules/args.py)
    line: int | None = None


def err(msg, container, key=None) -> SpecError:
    f, l = where(container, key)
    return SpecError(msg, f, l)


# ----------------------------------------------------------------------------------------- hyperparameters

def _numeric(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _choice(hname, hdecl, d, desc):
    choices = hdecl.get("choices")
    if "choices" not in hdecl and isinstance(d, str) and _numeric(d):
        raise err(f"hyperparameter '{hname}': the default '{quote(d)}' is a string; write a number without quotes "
                  f"(default: {quote(d.strip())})", hdecl, "default")
    if not isinstance(choices, list) or not choices:
        raise err(f"hyperparameter '{hname}': a string default needs 'choices', a list of names containing it "
                  f"(e.g. choices: [{quote(d) if isinstance(d, str) and d.isidentifier() else 'a'}, b])",
                  hdecl, "choices" if "choices" in hdecl else "default")
    for c in choices:            # each is a name first: 'b c', 1 or os are named as such, not as a missing default
        check_name_at(c, f"hyperparameter '{hname}': choice", hdecl, "choices")
    twice = sorted({c for c in choices if choices.count(c) > 1})
    if twice:
        raise err(f"hyperparameter '{hname}': choice '{twice[0]}' is listed twice", hdecl, "choices")
    if d not in choices:
        raise err(f"hyperparameter '{hname}': the default '{quote(d)}' is not one of its choices "
                  f"({', '.join(choices)})", hdecl, "default")
    return Hyper(hname, None, d, desc, "choice", tuple((c, sp.Symbol(f"{hname}__{c}")) for c in choices))


def _tuple(hname, hdecl, d, desc, taken):
    names = hdecl.get("names")
    if not isinstance(names, list) or len(names) != len(d) or not d:
        raise err(f"hyperparameter '{hname}': a tuple default needs 'names', one new identifier per element",
                  hdecl, "names" if "names" in hdecl else "default")
    for n in names:
        check_name_at(n, f"hyperparameter '{hname}': element name", hdecl, "names")
    for i, n in enumerate(names):
        # [beta1, beta1] bound both elements to one name: the generated code kept the last (beta1 = 0.999)
        if n in taken or n in names[:i]:
            raise err(f"hyperparameter '{hname}': element name '{n}' is "
                      f"{'listed twice' if n in names[:i] else 'already a name of the recipe or its family'}; "
                      "give each element a new name", hdecl, "names")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in d):
        raise err(f"hyperparameter '{hname}': tuple elements must be numbers", hdecl, "default")
    for v in d:
        finite_number(v, hdecl, "default", f"hyperparameter '{hname}': a tuple element")
    taken.update(names)
    return Hyper(hname, None, tuple(float(v) for v in d), desc, "tuple",
                 tuple((n, sp.Symbol(n, real=True)) for n in names))


def _number(hname, hdecl, d, desc, htype):
    if not isinstance(d, (int, float)) or isinstance(d, bool) or "names" in hdecl:
        raise err(f"hyperparameter '{hname}': default must be a number, a boolean or a list", hdecl, "default")
    allow_inf = hdecl.get("allow_infinite", False)
    if not isinstance(allow_inf, bool):
        raise err(f"hyperparameter '{hname}': allow_infinite must be true or false", hdecl, "allow_infinite")
    finite_number(d, hdecl, "default", f"hyperparameter '{hname}': default", allow_infinite=allow_inf)
    if htype == "int":
        if d != int(d):
            raise err(f"hyperparameter '{hname}': default must be an integer", hdecl, "default")
        return Hyper(hname, sp.Symbol(hname, integer=True, positive=True), int(d), desc, "int")
    return Hyper(hname, sp.Symbol(hname, real=True), float(d), desc)


ALL_KINDS = ("float", "int", "bool", "tuple", "choice")


def parse_hyperparameter(hname, hdecl, hspec, taken, kinds=ALL_KINDS, keys=HP_KEYS,
                         clash="a name of the family") -> Hyper:
    """One entry of ``hyperparameters`` (a number, or a mapping with default/type/choices/names/required);
    ``kinds`` and ``keys`` restrict what a recipe structure supports (products: numbers only)."""
    check_name_at(hname, "hyperparameter", hspec, hname)
    if hname in taken:
        raise err(f"hyperparameter '{hname}' clashes with {clash}", hspec, hname)
    if not isinstance(hdecl, dict):
        hdecl = LDict(default=hdecl)
        hdecl.file, hdecl.line = where(hspec, hname)     # errors about the shorthand name its line
    required = hdecl.get("required", False)
    if not isinstance(required, bool):
        raise err(f"hyperparameter '{hname}': 'required' must be true or false", hdecl, "required")
    check_keys(hdecl, keys, () if required else ("default",), f"hyperparameter '{hname}'")
    d = hdecl.get("default")
    desc = text_field(hdecl, "description")
    htype = hdecl.get("type")
    if htype not in (None, "int", "float"):
        raise err(f"hyperparameter '{hname}': type must be int or float", hdecl, "type")
    if required:
        if d is not None or "choices" in hdecl or "names" in hdecl:
            raise err(f"hyperparameter '{hname}': a required hyperparameter has no default", hdecl, "required")
        h = Hyper(hname, sp.Symbol(hname, real=True), None, desc, htype or "float")
    elif isinstance(d, str) or "choices" in hdecl:
        h = _choice(hname, hdecl, d, desc)
    elif isinstance(d, bool):
        if "names" in hdecl:
            raise err(f"hyperparameter '{hname}': 'names' is only for tuples", hdecl, "names")
        h = Hyper(hname, sp.Symbol(hname), d, desc, "bool")
    elif isinstance(d, list):
        h = _tuple(hname, hdecl, d, desc, taken)
    else:
        h = _number(hname, hdecl, d, desc, htype)
    kw_only = hdecl.get("keyword_only", False)
    if not isinstance(kw_only, bool) or (kw_only and required):
        raise err(f"hyperparameter '{hname}': keyword_only must be true or false (and needs a default)", hdecl,
                  "keyword_only")
    h.keyword_only = kw_only
    if h.kind not in kinds:
        raise err(f"hyperparameter '{hname}': a {h.kind} hyperparameter is not supported here "
                  f"(use {' or '.join(kinds)})", hdecl, "default")
    taken.add(hname)
    return h


def parse_hyperparameters(spec, taken: set, **how) -> list:
    """The ``hyperparameters`` section: required ones first, then those with defaults (``how``: the
    restrictions of :func:`parse_hyperparameter`)."""
    hspec = spec.get("hyperparameters", LDict())
    if not isinstance(hspec, dict):
        raise err("hyperparameters must be a mapping", spec, "hyperparameters")
    hyper = [parse_hyperparameter(n, d, hspec, taken, **how) for n, d in hspec.items()]
    hyper = [h for h in hyper if not h.keyword_only] + [h for h in hyper if h.keyword_only]
    seen_default = None
    for h in hyper:
        if h.default is not None:
            seen_default = h.name
        elif seen_default is not None:
            raise err(f"required hyperparameter '{h.name}' must come before those with defaults ('{seen_default}')",
                      hspec, h.name)
    return hyper


def learning_rate_name(spec) -> str:
    """``learning_rate`` names a numeric hyperparameter (default ``rho``)."""
    lr = spec.get("learning_rate", "rho")
    if not isinstance(lr, str):
        raise err("learning_rate must name a hyperparameter", spec, "learning_rate")
    check_name_at(lr, "learning_rate", spec, "learning_rate")
    return lr


def add_learning_rate(lr, spec, hyper, taken):
    """An undeclared learning rate is added as a hyperparameter ρ = 1.0 (first)."""
    if lr not in {h.name for h in hyper if h.kind in ("float", "int")}:
        if lr in {h.name for h in hyper}:
            raise err(f"learning_rate '{lr}' must be a numeric hyperparameter", spec, "learning_rate")
        if lr in taken:         # the default name ρ taken by a family parameter or a data name (a user's family)
            raise err(f"the learning rate's name '{lr}' is already a name of the family or the data; set "
                      "'learning_rate' to another name (e.g. learning_rate: lr, or --set learning_rate=lr)",
                      spec, "learning_rate")
        hyper.insert(0, Hyper(lr, sp.Symbol(lr, real=True), 1.0, "learning rate ρ_t of the BLR (Eq. 6)"))
        taken.add(lr)


def compared_flag(cond, hyper) -> str | None:
    """The name of a flag (a bool hyperparameter) that ``cond`` compares with something (``nest > 0.5``), or None:
    generated code would compare True/False as 1/0, so a recipe's condition must use a flag as a condition by
    itself (``nest``, ``not nest``); refused where conditions are parsed (peer.validate, a pass's ``when``)."""
    flags = {h.symbol: h.name for h in hyper if h.kind == "bool" and h.symbol is not None}
    if not flags or not isinstance(cond, sp.Basic):
        return None
    for rel in sorted(cond.atoms(sp.core.relational.Relational), key=sp.default_sort_key):
        for x in sorted(rel.free_symbols, key=sp.default_sort_key):
            if x in flags:
                return flags[x]
    return None


def scalar_symbols(hyper) -> dict:
    """name -> symbol of every float hyperparameter and tuple element (what expressions may name)."""
    out = {h.name: h.symbol for h in hyper if h.kind == "float"}
    out.update({en: es for h in hyper if h.kind == "tuple" for en, es in h.elements})
    return out


# ----------------------------------------------------------------------------------------------------- data

def parse_data(dspec, symbols: dict, taken: set, dims: dict, keys=DATA_KEYS, new_dims=True, defaults=None) -> list:
    """``data``: name -> {shape: [dims], symmetric, description, default}; new dimension names join ``dims`` (or,
    with ``new_dims=False``, must be declared) and every data symbol joins ``symbols`` and ``taken``.  ``default``
    is allowed where ``defaults`` (name -> symbol of the hyperparameters it may name) is given: the data of an
    abstract loss, which a target that keeps data as state (torch) starts from."""
    data = []
    for dname, ddecl in dspec.items():
        check_name_at(dname, "data", dspec, dname)
        if dname in taken or dname in symbols:
            raise err(f"data '{dname}' clashes with another name", dspec, dname)
        if ddecl is None:
            ddecl = LDict()
            ddecl.file, ddecl.line = where(dspec, dname)
        if not isinstance(ddecl, dict):
            raise err(f"data '{dname}' must be a mapping (shape, description, symmetric)", dspec, dname)
        check_keys(ddecl, keys, (), f"data '{dname}'")
        shape = ddecl.get("shape", [])
        if not new_dims and (not isinstance(shape, list) or len(shape) > 2
                             or any(not isinstance(s, str) or s not in dims for s in shape)):
            unknown = [s for s in shape if isinstance(s, str) and s.isidentifier() and s not in dims] \
                if isinstance(shape, list) and len(shape) <= 2 else []
            if unknown:       # the shape is right, a dimension is not declared (a product recipe's `dimension`)
                declared = f" (declared: {', '.join(sorted(dims))})" if dims else ""
                raise err(f"data '{dname}': dimension '{unknown[0]}' is not declared{declared}; declare it with "
                          f"'dimension: {unknown[0]}' at the top of the recipe", ddecl, "shape")
            raise err(f"data '{dname}': shape must list at most two declared dimensions", ddecl, "shape")
        if not isinstance(shape, list) or len(shape) > 2:
            raise err(f"data '{dname}': shape must be a list of at most two dimension names", ddecl, "shape")
        dsyms = []
        for s in shape:
            if not isinstance(s, str) or not s.isidentifier():
                raise err(f"data '{dname}': dimension names must be identifiers", ddecl, "shape")
            if s not in dims:
                check_name_at(s, f"data '{dname}': dimension", ddecl, "shape")
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
            raise err(f"data '{dname}': symmetric must be true or false, and true only for square matrices",
                      ddecl, "symmetric")
        data.append(DataVar(dname, sym, tuple(dsyms), text_field(ddecl, "description"), symmetric,
                            _data_default(dname, ddecl, defaults)))
        symbols[dname] = sym
        taken.add(dname)
    return data


def _data_default(dname, ddecl, defaults):
    """A data declaration's ``default``: an expression of hyperparameters (restricted grammar), abstract losses
    only (an explicit loss's data are always the caller's)."""
    if "default" not in ddecl:
        return None
    if defaults is None:
        raise err(f"data '{dname}': a default is for the data of an abstract loss (kept as optimizer state)",
                  ddecl, "default")
    value = ddecl["default"]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise err(f"data '{dname}': default must be a number or an expression of hyperparameters", ddecl, "default")
    try:
        return parse_expression(str(value), defaults, what=f"data '{dname}' default")
    except SpecError as exc:
        raise exc.located(*where(ddecl, "default")) from None


# ------------------------------------------------------------------------------------------- approximations

#: the longest ``approximations`` list (the catalog's longest has 13): 2000 weight decays derived in 65 s
MAX_APPROXIMATIONS = 64


def parse_approximations(spec, kinds: dict) -> list:
    """``approximations``: rule names or ``{name: {args}}``; ``kinds`` maps every rule a recipe may name to its
    kind (the rule registry, given by the caller)."""
    aspec = spec.get("approximations", [])
    if not isinstance(aspec, list):
        raise err("approximations must be a list", spec, "approximations")
    if len(aspec) > MAX_APPROXIMATIONS:
        raise err(f"at most {MAX_APPROXIMATIONS} approximations, got {len(aspec)} (the catalog's longest list "
                  "has 13)", spec, "approximations")
    out = []
    for i, a in enumerate(aspec):
        if isinstance(a, str):
            aname, args = a, {}
        elif isinstance(a, dict) and len(a) == 1:
            aname, args = next(iter(a.items()))
            if args is not None and not isinstance(args, dict):
                raise err(f"arguments of approximation '{aname}' must be a mapping", aspec, i)
            args = dict(args or {})
        else:
            raise err("each approximation is a rule name or {name: {args}}", aspec, i)
        if not isinstance(aname, str) or aname not in kinds:
            raise err(f"unknown approximation '{quote(aname)}'{did_you_mean(aname, kinds)} "
                      f"(known: {', '.join(sorted(kinds))})", aspec, i)
        out.append(Approx(aname, args, aspec.line_of(i)))
    return out
