"""Names for what the engine's records hold (the derivation record, the IR, the optimizer plan).

sympy ships no type information, so for mypy every sympy class is ``Any``; these aliases are for readers: a field
typed ``list[Assignment]`` holds ``(symbol, expression)`` pairs, one typed ``Sym`` a scalar or a matrix symbol.
"""
from __future__ import annotations

from typing import TypeAlias

import sympy as sp

from blr_derive.core.text import Prose

#: any sympy expression: a scalar (``sp.Expr``), a matrix expression (``sp.MatrixExpr``) or a condition
#: (``sp.logic.boolalg.Boolean``)
Expr: TypeAlias = sp.Basic
#: a symbol that names a quantity of the update: a scalar ``sp.Symbol`` or a matrix ``sp.MatrixSymbol``
Sym: TypeAlias = "sp.Symbol | sp.MatrixSymbol"
#: one assignment of a program, ``symbol = expression``
Assignment: TypeAlias = "tuple[Sym, Expr]"
#: recipe or family text in a record: a ``str`` while the IR is built, a :class:`~blr_derive.core.text.Prose` once
#: ``ir/common.seal_text`` has marked it (the code generators must render it through an escaping filter)
Text: TypeAlias = "str | Prose"
#: a hyperparameter's default: a number, a flag, a choice's name or a tuple of numbers; None when it must be given
HyperDefault: TypeAlias = "float | int | bool | str | tuple[float, ...] | None"
