"""What the targets' sympy printers share (sympy's printing model: one printer class per language, a
``_print_<Node>`` method per node, ``KNOWN_FUNCTIONS`` tables for functions)."""
from __future__ import annotations

import sympy as sp

from blr_derive.codegen.inert import identifier


class HostConditionalMixin:
    """Printing shared by the targets: ``Piecewise`` whose conditions are host scalars (hyperparameters,
    the step counter) becomes a Python conditional expression, and ``Max``/``Min`` fold into the
    target's two-argument ``maximum``/``minimum`` (``MAXIMUM``/``MINIMUM`` name them).  Every symbol is
    printed as a checked identifier (:func:`codegen.inert.identifier`)."""

    def _print_Symbol(self, expr):
        return identifier(expr.name)

    def _print_MatrixSymbol(self, expr):
        return identifier(expr.name)

    MAXIMUM = "max"
    MINIMUM = "min"
    LOG = "math.log"
    LOG1P = "math.log1p"

    def _print_log(self, expr):
        arg = expr.args[0]
        if isinstance(arg, sp.Add) and 1 in arg.args:       # log(1 + x) → an accurate log1p(x)
            return f"{self.LOG1P}({self._print(arg - 1)})"
        return f"{self.LOG}({self._print(arg)})"

    def _print_binary(self, expr):
        return f"(-1.0 if {self.parenthesize(expr.args[0], 0)} < 0 else 1.0)"

    #: how a target selects elementwise: "where({test}, {x})" completed with its NaN; None on the host (Python's
    #: conditional expression on numbers)
    NAN_WHERE = None

    def _print_nan_outside(self, expr):
        """x where every condition c_i > 0, else NaN (``core.specialfns.nan_outside``)."""
        x, *conds = expr.args
        if self.NAN_WHERE is None:
            test = " and ".join(f"{self._print(c)} > 0" for c in conds)
            return f"({self._print(x)} if {test} else math.nan)"
        test = " & ".join(f"({self._print(c)} > 0)" for c in conds)
        return self.NAN_WHERE.format(test=test, x=self._print(x))

    #: how a target selects elementwise between two values: "where({test}, {a}, {b})"; None on the host (Python's
    #: conditional expression on numbers)
    WHERE = None

    def _print_near_point(self, expr):
        """A removable singularity's select (``core.specialfns.near_point``): the Taylor polynomial where
        |x − c| < r, else the closed form, evaluated away from the 0/0 when the select is elementwise."""
        general, _, x, c, r = expr.args
        test = f"{self._print(sp.Abs(x - c))} < {self._print(r)}"
        series = self._print(expr.series)
        if self.WHERE is None:
            return f"({series} if {test} else {self._print(general)})"
        return self.WHERE.format(test=test, a=series, b=self._print(expr.safe_general()))

    def _print_Piecewise(self, expr):
        out = self._print(expr.args[-1].expr)
        for e, c in reversed(expr.args[:-1]):
            out = f"({self._print(e)} if {self._print(c)} else {out})"
        return out

    def _fold_binary(self, fn, args):
        out = self._print(args[0])
        for a in args[1:]:
            out = f"{fn}({out}, {self._print(a)})"
        return out

    def _print_Max(self, expr):
        return self._fold_binary(self.MAXIMUM, expr.args)

    def _print_Min(self, expr):
        return self._fold_binary(self.MINIMUM, expr.args)
