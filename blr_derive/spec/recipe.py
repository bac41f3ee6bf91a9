"""Recipes: a candidate family + a loss + named approximations + hyperparameters (untrusted YAML data).

This module reads the recipe keys every candidate structure shares into a :class:`Recipe`.  The family is
loaded by the caller (``blr_derive/candidates``: a built-in or user family, or a mixture of one) and the rule
kinds come from the rule registry, so the spec layer depends on nothing above ``core``."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from blr_derive.core.errors import SpecError
from blr_derive.core.exprfuncs import LOSS_FUNCTIONS
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.matexpr import is_mat
from blr_derive.core.names import check_name_at
from blr_derive.core.text import Prose
from blr_derive.core.types import Expr, Text
from blr_derive.core.yamlio import LDict, check_keys, text_field, where
from blr_derive.spec.correction import Correction, parse_correction
from blr_derive.spec.federated import Federated, parse_federated
from blr_derive.spec.peer import Peer, check_defaults, parse_peer
from blr_derive.spec.hyper import (Approx, DataVar, Hyper, add_learning_rate, err, learning_rate_name, parse_approximations,  # noqa: F401
                                   parse_data, parse_hyperparameters, scalar_symbols)

RECIPE_KEYS = {
    "name", "title", "class_name", "description", "paper", "family", "loss", "approximations",
    "hyperparameters", "learning_rate", "checked_against", "state_init", "parameter", "federated", "sizes",
    "peer", "posterior_correction",
}
LOSS_KEYS = {"kind", "expression", "data", "description"}


@dataclass
class Recipe:
    name: str
    title: Prose                       # recipe text is Prose (blr_derive/core/text.py): outputs escape it
    description: Prose
    paper: Prose
    #: a Family (blr_derive/families/model.py) or a MixtureFamily: typed Any because the families layer is above
    #: this one (spec only holds what candidates/load.py put there)
    family: Any
    loss_kind: str                     # "abstract" | "explicit"
    loss: Expr | None = None           # sympy expr in θ, data and hyperparameters
    loss_text: Text = ""               # the loss expression as written (Prose: it may carry a comment)
    data: list[DataVar] = field(default_factory=list)
    hyper: list[Hyper] = field(default_factory=list)
    approximations: list[Approx] = field(default_factory=list)
    learning_rate: str = "rho"
    class_name: str = ""
    checked_against: object = ""       # Prose
    file: str | None = None
    spec: LDict | None = None          # the located mapping (for errors found while deriving)

    state_init: LDict = field(default_factory=LDict)   # state name -> raw YAML value (parsed by passes)
    parameter: Expr | None = None      # what a model's weights hold (targets that own them, e.g. torch), or None
    federated: Federated | None = None  # a 'federated' section (Bayesian ADMM), or None
    peer: Peer | None = None           # state names and argument checks of a hand-written peer
    correction: Correction | None = None  # the old posterior q_old and its sites, or None

    def hyper_symbol(self, name):
        for h in self.hyper:
            if h.name == name and h.symbol is not None:
                return h.symbol
            for en, es in h.elements:
                if en == name:
                    return es
        return None

    def own_parameters(self) -> set:
        """The symbols of the candidate family's parameters that the loss itself reads (a prior at the state the
        step starts from, kalman_update's (θ − m)ᵀS(θ − m)): constants of ℓ that move with q."""
        return {p.symbol for p in self.family.params.values()} & getattr(self.loss, "free_symbols", set())

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


def check_recipe_keys(spec, file=None):
    """The common shape of a recipe: a mapping with known keys and a valid name and class name."""
    if not isinstance(spec, dict):
        raise SpecError("a recipe must be a mapping", file, getattr(spec, "line", None) or 1)
    check_keys(spec, RECIPE_KEYS, ("name", "family", "loss"), "recipe")
    name = check_name_at(spec["name"], "recipe name", spec, "name", scope="label")
    if "class_name" in spec:
        check_name_at(spec["class_name"], "class_name", spec, "class_name")
    return name


def parse_loss(spec, fam, hyper, taken):
    """``loss``: 'abstract' (oracles) or an explicit expression in θ, the data, hyperparameters and the
    candidate's current parameters.  Returns (kind, expression, text, data)."""
    loss = spec["loss"]
    if loss == "abstract" or (isinstance(loss, dict) and loss.get("kind") == "abstract"):
        data = []
        if isinstance(loss, dict):
            check_keys(loss, LOSS_KEYS, (), "loss")
            data = _abstract_data(loss, fam, hyper, taken)
        return "abstract", None, "ℓ(θ) (abstract: provided through oracles)", data
    if isinstance(loss, str):                        # the short form: the expression itself (docs/recipes.md)
        loss = _short_loss(loss, spec)
    if not isinstance(loss, dict):
        raise err("loss must be 'abstract', an expression, or a mapping with an 'expression'", spec, "loss")
    check_keys(loss, LOSS_KEYS, ("expression",), "loss")
    if loss.get("kind", "explicit") != "explicit":
        raise err("loss kind must be 'abstract' or 'explicit'", loss, "kind")
    symbols = dict(fam.variable_symbols)
    if fam.dim is not None:
        symbols[str(fam.dim)] = fam.dim
    symbols.update(scalar_symbols(hyper))
    # the current candidate's parameters may appear as constants (e.g. q_t as the prior of a
    # filtering step: the posterior is proportional to q_t times the likelihood)
    symbols.update({p.name: p.symbol for p in fam.params.values()})
    dims = {str(fam.dim): fam.dim} if fam.dim is not None else {}
    dspec = loss.get("data", LDict())
    if not isinstance(dspec, dict):
        raise err("loss data must be a mapping", loss, "data")
    data = parse_data(dspec, symbols, taken, dims)
    text = loss["expression"]
    try:
        expr = parse_expression(text, symbols, what="loss", functions=LOSS_FUNCTIONS)
    except SpecError as exc:
        exc.message += _scalar_variable_hint(fam, data, text)
        exc.args = (exc.message,)
        raise exc.located(*where(loss, "expression")) from None
    if is_mat(expr) and expr.shape != (1, 1):
        raise err("the loss must be a scalar" + _scalar_variable_hint(fam, data, text), loss, "expression")
    if not fam.depends_on_variable(expr):
        raise err(f"the loss does not depend on {fam.theta}", loss, "expression")
    return "explicit", expr, str(text), data


def _scalar_variable_hint(fam, data, text) -> str:
    """Where a loss over a family with one scalar variable reads a data matrix and does not parse as a scalar: the
    cause, said once.  `sum(exp(X*theta))` under `gaussian_diag` (elementwise, θ one coordinate) was refused as "exp()
    takes a scalar ... it is written in a data sum, e.g. sum(exp(X*theta))", the expression as written, and
    `y.T*X*theta` as "the loss must be a scalar": X*θ is the N × P matrix θ·X there, not a vector."""
    if is_mat(fam.theta) or not isinstance(text, str):
        return ""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    matrices = [d.name for d in data if len(d.shape) == 2 and d.name in words]
    if not matrices:
        return ""
    how = " (an elementwise family: each coordinate on its own)" if getattr(fam, "elementwise", False) else ""
    return (f"; family '{fam.name}' has one scalar variable {fam.theta}{how}, so a product of the data matrix "
            f"{', '.join(matrices)} with it is a matrix, not a vector of margins: a loss over a weight vector needs "
            f"a family over a vector (e.g. gaussian_full)")


def _short_loss(text, spec):
    """``loss: EXPR`` as ``loss: {expression: EXPR}``, located at the recipe's ``loss`` line."""
    short = LDict(expression=text)
    short.file, short.line = where(spec, "loss")
    return short


def _abstract_data(loss, fam, hyper, taken):
    """The data an abstract loss's rules name (``prior_site: {mean: m_past, ...}``): declared like an explicit
    loss's, each with an optional ``default``, an expression of hyperparameters."""
    dspec = loss.get("data", LDict())
    if not isinstance(dspec, dict):
        raise err("loss data must be a mapping", loss, "data")
    symbols = dict(fam.variable_symbols)
    symbols.update(scalar_symbols(hyper))
    symbols.update({p.name: p.symbol for p in fam.params.values()})
    dims = {str(fam.dim): fam.dim} if fam.dim is not None else {}
    return parse_data(dspec, symbols, taken, dims, defaults=scalar_symbols(hyper))


def parse_recipe(spec, fam, rule_kinds: dict, file=None) -> Recipe:
    """A recipe over the loaded candidate family ``fam``; ``rule_kinds`` maps the rules a recipe may name to
    their kinds (the registry of ``blr_derive/rules``)."""
    name = check_recipe_keys(spec, file)
    taken = {str(fam.theta)} | set(fam.params) | ({str(fam.dim)} if fam.dim is not None else set())
    lr = learning_rate_name(spec)
    hyper = parse_hyperparameters(spec, taken)
    add_learning_rate(lr, spec, hyper, taken)
    kind, expr, text, data = parse_loss(spec, fam, hyper, taken)
    approxs = parse_approximations(spec, rule_kinds)
    correction = parse_correction(spec, fam, hyper, data, taken, approxs, file)
    federated = parse_federated(spec, fam, hyper, data, taken) if "federated" in spec else None
    shown = {h.name for h in hyper} | {n for h in hyper if h.kind == "tuple" for n, _ in h.elements}
    hsyms = {h.name: h.symbol for h in hyper if h.symbol is not None}
    hsyms.update(scalar_symbols(hyper))
    peer = parse_peer(spec, hsyms, {h.name: dict(h.elements) for h in hyper if h.kind == "choice"}, shown)
    check_defaults(peer, hyper, file)
    return Recipe(
        name=name, title=text_field(spec, "title", name), description=text_field(spec, "description", ""),
        paper=text_field(spec, "paper", ""), family=fam, loss_kind=kind, loss=expr, loss_text=Prose(text),
        data=data, hyper=hyper, approximations=approxs, learning_rate=lr,
        class_name=str(spec.get("class_name", "")), checked_against=text_field(spec, "checked_against", ""),
        file=file, spec=spec, state_init=_state_init(spec), parameter=_parameter(spec, fam), federated=federated,
        peer=peer, correction=correction,
    )


def _parameter(spec, fam):
    """``parameter``: the quantity the model's weights hold, as an expression of the family's parameters
    (``binary(lam)``: binary weights of a Bernoulli candidate); default (None) the Gaussian mean."""
    if "parameter" not in spec:
        return None
    symbols = {p.name: p.symbol for p in fam.params.values()}
    try:
        expr = parse_expression(spec["parameter"], symbols, what="parameter")
    except SpecError as exc:
        raise exc.located(*where(spec, "parameter")) from None
    if not expr.free_symbols:
        raise err("parameter must depend on the family's parameters", spec, "parameter")
    return expr


def _state_init(spec):
    si = spec.get("state_init", LDict())
    if not isinstance(si, dict):
        raise err("state_init must be a mapping from state names to initial values", spec, "state_init")
    return si


def family_ref(spec):
    """Where the family is declared (for locating a family's errors at the recipe's ``family`` key)."""
    return where(spec, "family")

