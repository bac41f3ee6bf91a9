"""Readable plain text of sympy expressions: the one plain-text printer of the reports and listings.

:func:`pretty` writes an expression the way a person would type it, not as sympy's constructors::

    Piecewise((a, c), (b, True))   ->  a if c else b
    Eq(t, 1), Ne(x, 0)             ->  t == 1, x != 0
    Mod(t, T)                      ->  t % T
    And(a, Not(b))                 ->  a and not b
    hess_approx__price             ->  hess_approx == 'price'     (a choice hyperparameter, ``spec/hyper.py``)
    Determinant(X), Trace(X)       ->  det(X), tr(X)
    Sum(f, (j, 1, P))              ->  sum(f for j in 1..P)
    polygamma(0, a), polygamma(1, a) -> digamma(a), trigamma(a)
    x**2, (2*pi)**(-P/2)           ->  x^2, (2*pi)^(-P/2)

It is plain ASCII (apart from names the user chose), one line, and deterministic, so it can go into terminal
output, HTML prose and comments of generated code alike.
"""
from __future__ import annotations

#: separates a choice hyperparameter's name from the choice in the name of its indicator symbol
CHOICE_SEP = "__"


def choice_parts(name: str):
    """(hyperparameter, choice) of a choice indicator symbol's name (``hess_approx__price``), else None."""
    head, sep, tail = name.partition(CHOICE_SEP)
    if sep and head and tail and CHOICE_SEP not in tail:
        return head, tail
    return None


def _make_printer():
    """The printer; sympy is imported on first use, so that modules reading no expression (the families
    index, ``--help``) import this one without it."""
    import sympy as sp
    from sympy.printing.precedence import PRECEDENCE
    from sympy.printing.str import StrPrinter

    class PlainPrinter(StrPrinter):
        """sympy's str printer with readable conditions, powers and special functions (see the module docstring)."""

        _default_settings = dict(StrPrinter._default_settings)

        # ---- names
        def _print_Symbol(self, expr):
            parts = choice_parts(expr.name)
            if parts is not None:
                return f"{parts[0]} == '{parts[1]}'"
            return super()._print_Symbol(expr)

        _print_Dummy = _print_Symbol

        # ---- conditions
        def _print_Piecewise(self, expr):
            pieces = list(expr.args)
            last = pieces[-1]
            if last.cond == sp.true:
                out = self._branch(last.expr)
                pieces = pieces[:-1]
            else:
                out = "undefined"
            for e, c in reversed(pieces):
                out = f"{self._branch(e)} if {self._cond(c)} else {out}"
            return f"({out})" if self._nested else out

        @property
        def _nested(self):
            return getattr(self, "_depth", 0) > 1

        def _print(self, expr, **kwargs):
            self._depth = getattr(self, "_depth", 0) + 1
            try:
                if kwargs or not isinstance(expr, sp.Basic):
                    return super()._print(expr, **kwargs)
                # the text of an expression depends only on the expression and on whether it is nested (a
                # Piecewise is parenthesized below the top level): remembered, so that a subexpression shared by
                # several terms or equations is printed (and its terms sorted) once
                key = (expr, self._depth > 1)
                out = _MEMO.get(key)
                if out is None:
                    out = super()._print(expr)
                    if len(_MEMO) >= MEMO_SIZE:
                        _MEMO.clear()
                    _MEMO[key] = out
                return out
            finally:
                self._depth -= 1

        def _branch(self, e):
            s = self._print(e)
            return f"({s})" if isinstance(e, sp.Piecewise) and not s.startswith("(") else s

        def _cond(self, c):
            s = self._print(c)
            return f"({s})" if isinstance(c, sp.Piecewise) and not s.startswith("(") else s

        def _print_Relational(self, expr):
            op = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}.get(expr.rel_op, expr.rel_op)
            prec = PRECEDENCE["Relational"]
            return f"{self.parenthesize(expr.lhs, prec)} {op} {self.parenthesize(expr.rhs, prec)}"

        def _print_Mod(self, expr):
            prec = PRECEDENCE["Mul"]
            return f"{self.parenthesize(expr.args[0], prec)} % {self.parenthesize(expr.args[1], prec + 1)}"

        def _logic(self, args, word):
            parts = []
            for a in args:
                s = self._print(a)
                if isinstance(a, (sp.And, sp.Or)) or choice_parts(getattr(a, "name", "")):
                    s = f"({s})"
                parts.append(s)
            return f" {word} ".join(parts)

        def _print_And(self, expr):
            return self._logic(expr.args, "and")

        def _print_Or(self, expr):
            return self._logic(expr.args, "or")

        def _print_Not(self, expr):
            a = expr.args[0]
            parts = choice_parts(getattr(a, "name", ""))
            if parts is not None:
                return f"{parts[0]} != '{parts[1]}'"
            s = self._print(a)
            return f"not ({s})" if isinstance(a, (sp.And, sp.Or)) else f"not {s}"

        def _print_BooleanTrue(self, expr):
            return "True"

        def _print_BooleanFalse(self, expr):
            return "False"

        # ---- powers
        def _print_Pow(self, expr, rational=False):
            b, e = expr.base, expr.exp
            if e is sp.S.Half and not rational:
                return f"sqrt({self._print(b)})"
            if expr.is_commutative and e == -sp.S.Half and not rational:
                return f"1/sqrt({self._print(b)})"
            if expr.is_commutative and e is sp.S.NegativeOne:
                return f"1/{self.parenthesize(b, PRECEDENCE['Mul'], strict=False)}"
            return f"{self.parenthesize(b, PRECEDENCE['Pow'], strict=False)}^{self._exponent(e)}"

        def _exponent(self, e):
            s = self._print(e)
            if (e.is_Atom and not s.startswith("-") and "/" not in s and "." not in s) or s.startswith("("):
                return s
            return f"({s})"

        def _print_MatPow(self, expr):
            return f"{self.parenthesize(expr.base, PRECEDENCE['Pow'], strict=False)}^{self._exponent(expr.exp)}"

        def _print_Inverse(self, expr):
            return f"{self.parenthesize(expr.arg, PRECEDENCE['Pow'], strict=False)}^-1"

        # ---- matrices and special functions
        def _print_Determinant(self, expr):
            return f"det({self._print(expr.arg)})"

        def _print_Trace(self, expr):
            return f"tr({self._print(expr.arg)})"

        def _print_polygamma(self, expr):
            n, x = expr.args
            if n == 0:
                return f"digamma({self._print(x)})"
            if n == 1:
                return f"trigamma({self._print(x)})"
            return f"polygamma({self._print(n)}, {self._print(x)})"

        def _print_Sum(self, expr):
            ranges = ", ".join(f"{self._print(i)} in {self._print(a)}..{self._print(b)}" for i, a, b in expr.limits)
            return f"sum({self._print(expr.function)} for {ranges})"

        def _print_Max(self, expr):
            return f"max({', '.join(self._print(a) for a in expr.args)})"

        def _print_Min(self, expr):
            return f"min({', '.join(self._print(a) for a in expr.args)})"

        def _print_Abs(self, expr):
            return f"|{self._print(expr.args[0])}|"

    return PlainPrinter()


_PRINTER = []
#: printed text by (expression, nested): see ``PlainPrinter._print``; emptied when it holds MEMO_SIZE entries
_MEMO: dict = {}
MEMO_SIZE = 20000


def pretty(expr) -> str:
    """Readable one-line plain text of a sympy expression (strings pass through)."""
    if isinstance(expr, str):
        return expr
    if not _PRINTER:
        _PRINTER.append(_make_printer())
    printer = _PRINTER[0]
    printer._depth = 0
    return printer.doprint(expr)
