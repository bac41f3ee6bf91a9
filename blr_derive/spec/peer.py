"""A recipe's ``peer`` section: how a generated optimizer presents itself to the hand-written optimizer it
mirrors — the names its state is stored under (so checkpoints move both ways) and the checks its constructor
makes on hyperparameters (the peer's ValueErrors).  Both are conventions of the peer, kept as data of the
recipe; no template names an algorithm.

.. code-block:: yaml

    peer:
      state_names: {u: exp_avg, s: exp_avg_sq}       # state -> key in optimizer.state[p]
      counts_steps: true                             # keep a per-parameter step count even where unused
      switches: {positional: [foreach], keyword: [maximize, differentiable, capturable]}
      group_entries: {decoupled_weight_decay: true}  # constant entries of every param group (AdamW's)
      eager_state: true                              # the state exists from construction on (Adagrad's)
      sparse_gradients:                              # accepted as dense gradients (zeros where absent)
        densify: true
        validate: [{require: "weight_decay == 0", message: "weight_decay option is not compatible with sparse gradients"}]
      validate:
        - {require: "lr >= 0", message: "Invalid learning rate: {lr}"}
        - {require: "not nesterov or (momentum > 0 and dampening == 0)",
           message: "Nesterov momentum requires a momentum and zero dampening"}

``require`` is a condition in the restricted grammar over the hyperparameters (numbers, tuple elements,
booleans, choices); ``message`` is text whose only placeholders are ``{name}`` of a hyperparameter or tuple
element (its value, formatted as Python's ``str``).  Messages reach generated code as escaped string data only.
Recipes without a ``validate`` list get the default check (numeric hyperparameters are not negative).
A check with ``targets: [jax]`` is made only by those optimizer targets: a name that means something else in a
target's ecosystem (Adam's ``amsgrad``, torch's AMSGrad, is not ``optax.amsgrad``) refused there with a message
that says which and what to write instead.

``switches`` lays out torch.optim's implementation switches (maximize, foreach, capturable, differentiable,
fused) in the constructor as the peer does: ``positional`` ones follow the hyperparameters in that order,
``keyword`` ones are keyword-only; a switch the peer does not take is not accepted (``fused``, the generated
compiled-kernel path, is always accepted, keyword-only when not placed).  Without ``switches``: all five,
keyword-only, in that order.  ``group_entries`` are constant entries (true, false or a number) every param
group holds besides the hyperparameters, as the peer's do (torch.optim.AdamW's ``decoupled_weight_decay``).
``eager_state: true`` creates every parameter's state in the constructor (torch.optim.Adagrad's convention)
instead of on its first step.  ``sparse_gradients: {densify: true}`` accepts sparse gradients as the dense
gradient they stand for (zeros where no entry is stored): the recipe's author asserts that the peer's sparse
update is the dense update at a zero gradient, as for SGD and Adagrad; its ``validate`` checks raise
RuntimeError at the step.  Without the section a sparse gradient is refused."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.names import name_problem
from blr_derive.core.text import Prose
from blr_derive.core.yamlio import check_keys, where
from blr_derive.spec.hyper import compared_flag

PEER_KEYS = {"state_names", "validate", "counts_steps", "switches", "group_entries", "eager_state",
             "sparse_gradients"}
SWITCHES = ("maximize", "foreach", "capturable", "differentiable", "fused")
SWITCH_KEYS = {"positional", "keyword"}
CHECK_KEYS = {"require", "message", "targets"}
#: the targets whose optimizers make the peer checks (spec does not import codegen: the names, not the targets)
OPTIMIZER_TARGETS = ("torch", "triton", "jax")
MAX_MESSAGE = 200
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass
class Check:
    condition: object            # sympy Boolean over hyperparameter symbols
    message: tuple               # (("text", str) | ("value", hyperparameter or element name), ...)
    line: int | None = None
    targets: tuple | None = None   # the optimizer targets that make the check (None: every one)


@dataclass
class Peer:
    state_names: dict = field(default_factory=dict)   # state name -> stored key
    checks: list | None = None                         # [Check], or None: the default checks
    state_lines: dict = field(default_factory=dict)   # state name -> line (for errors found later)
    counts_steps: bool = False                         # the peer keeps a per-parameter ``step`` in every state
    switches: tuple | None = None                      # (positional, keyword-only) switch names, or None: default
    group_entries: dict = field(default_factory=dict)  # constant param-group entries: name -> bool | int | float
    eager_state: bool = False                          # the state is created by the constructor
    sparse_checks: list | None = None                  # sparse gradients densified, under these checks; None: refused


def _err(msg, container, key=None):
    f, l = where(container, key)
    return SpecError(f"peer: {msg}", f, l)


def _state_names(spec):
    names = spec.get("state_names", {})
    if not isinstance(names, dict):
        raise _err("state_names must map state names to the keys a peer stores them under", spec, "state_names")
    out, lines, seen = {}, {}, set()
    for k, v in names.items():
        for x in (k, v):
            problem = name_problem(x, "label")
            if problem is not None:
                raise _err(f"state_names: {problem}", names, k)
        if v == "step" or v in seen:
            raise _err(f"state_names: '{v}' is used twice (or is 'step', the step counter's key)", names, k)
        seen.add(v)
        out[str(k)], lines[str(k)] = str(v), where(names, k)[1]
    return out, lines


def _message(text, names, container, key):
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_MESSAGE:
        raise _err(f"a message is a non-empty string of at most {MAX_MESSAGE} characters", container, key)
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise _err("a message may not contain control characters", container, key)
    pieces, pos = [], 0
    for m in _PLACEHOLDER.finditer(text):
        if m.group(1) not in names:
            raise _err(f"message placeholder '{{{m.group(1)}}}' is not a hyperparameter (known: "
                       f"{', '.join(sorted(names))})", container, key)
        if m.start() > pos:
            pieces.append(("text", text[pos:m.start()]))
        pieces.append(("value", m.group(1)))
        pos = m.end()
    if pos < len(text):
        pieces.append(("text", text[pos:]))
    if any(k == "text" and ("{" in t or "}" in t) for k, t in pieces):
        raise _err("braces in a message are only for {name} placeholders", container, key)
    return tuple((k, Prose(t)) if k == "text" else (k, t) for k, t in pieces)


def parse_peer(spec, symbols: dict, choices: dict, names) -> Peer | None:
    """The ``peer`` section of a recipe (None when absent); ``symbols`` are the hyperparameters a condition may
    name (name -> symbol, booleans included), ``choices`` the choice hyperparameters and ``names`` every
    hyperparameter and tuple element a message may show."""
    if "peer" not in spec:
        return None
    p = spec["peer"]
    if not isinstance(p, dict):
        raise _err("must be a mapping (state_names, validate)", spec, "peer")
    check_keys(p, PEER_KEYS, (), "peer")
    stored, lines = _state_names(p)
    checks = _checks(p, "validate", symbols, choices, names) if "validate" in p else None
    flags = {}
    for key in ("counts_steps", "eager_state"):
        flags[key] = p.get(key, False)
        if not isinstance(flags[key], bool):
            raise _err(f"{key} must be true or false", p, key)
    sparse = None
    if "sparse_gradients" in p:
        sg = p["sparse_gradients"]
        if not isinstance(sg, dict):
            raise _err("sparse_gradients must be a mapping {densify: true, validate: [...]}", p, "sparse_gradients")
        check_keys(sg, {"densify", "validate"}, ("densify",), "peer sparse_gradients")
        if sg["densify"] is not True:
            raise _err("sparse_gradients: densify must be true (leave the section out to refuse sparse "
                       "gradients)", sg, "densify")
        sparse = _checks(sg, "validate", symbols, choices, names) if "validate" in sg else []
    return Peer(stored, checks, lines, flags["counts_steps"], _switches(p), _group_entries(p, names),
                flags["eager_state"], sparse)


def _checks(p, key, symbols, choices, names):
    v = p[key]
    if not isinstance(v, list):
        raise _err(f"{key} must be a list of {{require, message}}", p, key)
    checks = []
    for i, c in enumerate(v):
        if not isinstance(c, dict):
            raise _err("each check is a mapping {require, message}", v, i)
        check_keys(c, CHECK_KEYS, ("require", "message"), "peer check")
        # the check is parsed over assumption-free symbols: an int hyperparameter's symbol is declared positive,
        # and `mc_samples >= 1` must stay a test of the value given, not be simplified to True by that assumption
        plain = {n: sp.Symbol(str(x), real=True) if getattr(x, "is_real", None) else x for n, x in symbols.items()}
        try:
            cond = parse_expression(c["require"], plain, what="peer.validate.require", logic=True,
                                    choices=choices)
        except SpecError as exc:
            raise exc.located(*where(c, "require")) from None
        with sp.evaluate(False):
            cond = cond.xreplace({plain[n]: x for n, x in symbols.items() if plain[n] is not x})
        if not isinstance(cond, sp.logic.boolalg.Boolean) or (cond.is_Symbol and cond.is_real):
            raise _err(f"require must be a condition (a comparison or a boolean), got {cond}", c, "require")
        checks.append(Check(cond, _message(c["message"], set(names), c, "message"), where(c, "require")[1],
                            _targets(c)))
    return checks


def check_defaults(peer, hyper, file) -> None:
    """Every ``validate`` check must hold at the hyperparameters' defaults: a recipe whose own defaults fail a check
    (``require: "lr < 0"`` with ``lr: 0.001``) was generated, and its optimizer refused to be constructed without
    arguments (``ValueError`` at ``Optimizer(params)``).  A check that reads a required hyperparameter (no default)
    or stays symbolic is left to run time."""
    if peer is None or not peer.checks:
        return
    subs = {}
    for h in hyper:
        if h.default is None:
            continue
        if h.kind == "tuple":
            subs.update({sym: sp.Float(v) for (_, sym), v in zip(h.elements, h.default)})
        elif h.kind == "choice":
            subs.update({sym: sp.true if c == h.default else sp.false for c, sym in h.elements})
        elif h.kind == "bool" and h.symbol is not None:
            subs[h.symbol] = sp.true if h.default else sp.false
        elif h.symbol is not None and not isinstance(h.default, bool):
            subs[h.symbol] = sp.Integer(h.default) if isinstance(h.default, int) else sp.Float(h.default)
    for check in peer.checks:
        flag = compared_flag(check.condition, hyper)
        if flag is not None:
            # Python would compare True/False as 1/0 at run time; the check's meaning is lost, so say so here
            raise SpecError(f"peer: validate: '{flag}' is a flag (true or false), compared in '{check.condition}': a "
                            f"flag is a condition by itself; write '{flag}' or 'not {flag}'", file, check.line)
        try:
            value = check.condition.xreplace(subs)
            value = value.simplify() if value not in (sp.true, sp.false) else value
        except (TypeError, ValueError, AttributeError):
            continue
        if value is sp.false:
            raise SpecError(f"peer: validate: the hyperparameters' defaults fail the check '{check.condition}': the "
                            "generated optimizer would refuse its own defaults; change the defaults or the check",
                            file, check.line)


def _targets(c):
    """A check's ``targets``: the optimizer targets that make it (a name an optimizer means differently in a
    target's ecosystem, refused there with a message that says what to write instead); absent: every target."""
    if "targets" not in c:
        return None
    t = c["targets"]
    if not isinstance(t, list) or not t or not all(isinstance(x, str) and x in OPTIMIZER_TARGETS for x in t):
        raise _err(f"targets must be a non-empty list of optimizer targets ({', '.join(OPTIMIZER_TARGETS)})", c,
                   "targets")
    return tuple(t)


def _group_entries(p, names):
    entries = p.get("group_entries", {})
    if not isinstance(entries, dict):
        raise _err("group_entries must map names to true, false or numbers", p, "group_entries")
    out = {}
    for k, v in entries.items():
        problem = name_problem(k, "label")
        if problem is not None:
            raise _err(f"group_entries: {problem}", entries, k)
        if k in names or k in SWITCHES or k in ("params", "step"):
            raise _err(f"group_entries: '{k}' is already a hyperparameter or a switch of the group", entries, k)
        if not isinstance(v, (bool, int, float)) or (isinstance(v, float) and v != v):
            raise _err(f"group_entries: the value of '{k}' must be true, false or a number", entries, k)
        out[str(k)] = v
    return out


def _switches(p):
    if "switches" not in p:
        return None
    sw = p["switches"]
    if not isinstance(sw, dict):
        raise _err("switches must be a mapping {positional: [...], keyword: [...]}", p, "switches")
    check_keys(sw, SWITCH_KEYS, (), "peer switches")
    out, seen = [], set()
    for kind in ("positional", "keyword"):
        names = sw.get(kind, [])
        if not isinstance(names, list):
            raise _err(f"switches: {kind} must be a list of switch names", sw, kind)
        for i, n in enumerate(names):
            if n not in SWITCHES:
                raise _err(f"switches: '{n}' is not a switch (known: {', '.join(SWITCHES)})", names, i)
            if n in seen:
                raise _err(f"switches: '{n}' is listed twice", names, i)
            seen.add(n)
        out.append(tuple(names))
    if "fused" not in seen:
        out[1] += ("fused",)
    return tuple(out)
