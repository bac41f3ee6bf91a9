"""What a generated optimizer's constructor refuses, described once for every target.

The torch and triton optimizers and the jax target's optax factory all check their hyperparameters with the
same function, ``_validate``, rendered from this description by the shared template
``codegen/templates/_validate.py.j2`` (no target writes a check of its own).  In order, for each hyperparameter
in the recipe's order:

* a tuple has one element per name (``Invalid betas: (0.9,) (expected 2 values)``);
* an ``int`` hyperparameter is an integer (``1.5``, NaN and infinities are not);
* a choice is one of its choices;

then the recipe's ``peer: validate`` checks in the recipe's order (``ValueError(message)``), or, for a recipe
without that list, the default: every number and every tuple element is not negative, unless its declared default
is negative.  A check holds only when
its condition is true, so a NaN fails every comparison.  The targets differ only in what a number may be: a
torch optimizer also takes a one-element tensor (``_number`` reads it; a tuple mixes no numbers and tensors, as
torch.optim's Adam requires), and the jax factory skips a check whose numbers are traced (``jax.jit``,
``optax.inject_hyperparams`` inside a compiled update), which has no value to test in Python.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp
from sympy.printing.codeprinter import PrintMethodNotImplementedError
from sympy.printing.pycode import PythonCodePrinter

from blr_derive.codegen.inert import identifier
from blr_derive.codegen.printing import HostConditionalMixin
from blr_derive.core.errors import CodegenError
from blr_derive.ir.model import HyperVar

#: the hyperparameter kinds whose values are numbers (a tuple's elements too)
NUMERIC = ("float", "int")


@dataclass(frozen=True)
class ValueCheck:
    test: str                            # a Python condition over the bound names that must hold
    numbers: tuple[str, ...]             # the numeric names it reads
    message: tuple[tuple[str, str], ...]  # ((kind, text), ...): kind "text" (literal), "str" or "repr" (of a bound name)


@dataclass(frozen=True)
class Validation:
    args: tuple[str, ...]            # the hyperparameters ``_validate`` takes, in the recipe's order
    hypers: tuple[HyperVar, ...]     # their records (kind, symbols, choices)
    bound: frozenset[str]            # the bound names some value check reads (booleans and choices are bound only then)
    checks: tuple[ValueCheck, ...]   # in order
    uses_math: bool                  # a condition calls a function of Python's math module

    @property
    def call(self) -> str:
        """The call in a constructor, whose arguments have the hyperparameters' names."""
        return f"_validate({', '.join(self.args)})"


class CheckPrinter(HostConditionalMixin, PythonCodePrinter):
    """A condition over Python numbers (the hyperparameters as given, before any target converts them): plain
    Python with the math module, the same text in every target."""

    def __init__(self):
        super().__init__({"fully_qualified_modules": True, "standard": "python3"})

    def _print_Symbol(self, expr):
        return identifier(expr.name)

    def doprint(self, expr, assign_to=None):
        try:
            return super().doprint(expr, assign_to)
        except PrintMethodNotImplementedError as exc:
            what = str(exc).splitlines()[0].rsplit(":", 1)[-1].strip() if str(exc) else "a function"
            raise CodegenError(f"a peer check (peer: validate) is computed with Python's math module, which has no "
                               f"'{what}'; write the condition without it") from None


def _negative(value) -> bool:
    """Whether a declared default is a negative number."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0


def _default_checks(hypers):
    """Without ``peer: validate``: every number and every tuple element is not negative (the messages the torch
    target has always given), except one whose declared default is negative: the recipe says a negative value
    means something there (a prior's natural parameter), and its optimizer must accept its own defaults."""
    out = []
    for h in hypers:
        if h.kind in NUMERIC and not _negative(h.default):
            out.append((sp.Ge(sp.Symbol(h.name, real=True), 0, evaluate=False),
                        (("text", f"Invalid {h.name}: "), ("str", h.name))))
        elif h.kind == "tuple":
            defaults = h.default if isinstance(h.default, (list, tuple)) else ()
            for i, s in enumerate(h.symbols):
                if i < len(defaults) and _negative(defaults[i]):
                    continue
                out.append((sp.Ge(sp.Symbol(str(s), real=True), 0, evaluate=False),
                            (("text", f"Invalid {h.name} value at index {i}: "), ("str", str(s)))))
    return out


def validation(ir, target=None) -> Validation:
    """The description of the constructor checks of a recipe's optimizer (see the module docstring) in ``target``:
    a check restricted to some targets (``targets: [jax]``) is made only by those (``target=None``: by none)."""
    hypers = list(ir.hyperparameters)
    numbers = {str(s) for h in hypers if h.kind in NUMERIC + ("tuple",) for s in h.symbols}
    peer = ir.peer.checks if ir.peer is not None else None
    if peer is None:
        raw = _default_checks(hypers)
    else:
        raw = [(c.condition, tuple(("text", v) if k == "text" else ("str", identifier(v)) for k, v in c.message))
               for c in peer if c.targets is None or target in c.targets]
    printer = CheckPrinter()
    checks, read = [], set()
    for cond, message in raw:
        names = sorted({str(s) for s in cond.free_symbols})
        read.update(names)
        checks.append(ValueCheck(printer.doprint(cond), tuple(identifier(n) for n in names if n in numbers),
                                 message))
    args = tuple(identifier(h.name) for h in hypers if h.kind != "bool" or any(str(s) in read for s in h.symbols))
    kept = [h for h in hypers if h.name in args]
    return Validation(args, tuple(kept), frozenset(read), tuple(checks),
                      any("math." in c.test for c in checks))
