"""What the targets' sympy printers share (sympy's printing model: one printer class per language, a
``_print_<Node>`` method per node, ``KNOWN_FUNCTIONS`` tables for functions).

A target prints with classes of its own ``printer.py`` built on these, and never imports another target's
printer (``tests/unit/codegen/test_target_independence.py``): :class:`HostConditionalMixin` (conditionals,
``Max``/``Min``, logs and NaN guards of every target), :class:`HostPrinter` (hyperparameter expressions in plain
Python with the math module: the optimizer targets' host values) and :class:`KernelPrinter` (one element of an
elementwise kernel, whose functions come from the target's ``KNOWN_FUNCTIONS`` table or are refused).
"""
from __future__ import annotations

from typing import Callable

import sympy as sp
from sympy.printing.codeprinter import PrintMethodNotImplementedError
from sympy.printing.pycode import PythonCodePrinter

from blr_derive.codegen.cancel import LOG1MEXP_SWITCH, expm1, stable_differences
from blr_derive.codegen.expsums import _normalized, print_order, stable_exp_sums
from blr_derive.codegen.inert import identifier
from blr_derive.codegen.scaled import ORIGINAL_NAMES, scaled_bessel
from blr_derive.core.errors import CodegenError, UnsupportedTarget


def stable_sech(arg: str, abs_: str, exp: str) -> str:
    """sech of the printed ``arg`` as 2e/(1 + e²) with e = exp(-|x|) (``abs_``/``exp`` the target's functions), as
    the triton target's _sech: 1/cosh(x) overflows cosh for |x| > 710 (float64; 89 in float32) on the way to a sech
    that is merely small, and its derivative there is NaN."""
    a = f"{abs_}({arg})"
    return f"(2*{exp}(-{a})/(1 + {exp}(-2*{a})))"


def cosh_power_as_sech(expr):
    """cosh(x)**-k (a negative number k: a Fisher information's cosh(x)**-2) as sech(x)**k, which a target prints
    without the overflow of cosh; None for any other power."""
    b, e = expr.args
    if isinstance(b, sp.cosh) and e.is_number and e.is_negative:
        sech = sp.sech(b.args[0])
        return sech if e == -1 else sp.Pow(sech, -e, evaluate=False)
    return None


def cosh_powers_as_sech(expr):
    """``expr`` with every cosh(x)**-k written sech(x)**k (:func:`cosh_power_as_sech`), wherever it stands: a printer
    prints a negative power inside a product as a divisor (``(5/2)/cosh(λ/2)**2``, a binomial's F), where its own
    ``_print_Pow`` never sees it, and cosh overflows there for |λ| > 1420."""
    if not isinstance(expr, sp.Basic) or not expr.has(sp.cosh):
        return expr
    return expr.replace(lambda e: isinstance(e, sp.Pow) and cosh_power_as_sech(e) is not None, cosh_power_as_sech)


def numeric_lowering(expr):
    """``expr`` with the lowerings every target's printer applies (:meth:`HostConditionalMixin.doprint`): Bessel
    functions as their exponentially scaled functions, logarithms and quotients of sums of exponentials normalized by
    the largest exponent, negative powers of cosh as powers of sech, differences of exponentials as expm1 and
    log1mexp; the same function of its symbols.  The IR applies it to a program's expressions before
    common-subexpression elimination (``blr_derive.ir.build.build_ir``'s ``lower``), which would otherwise name the
    pieces of a pattern apart, where no printer sees it whole."""
    return stable_differences(cosh_powers_as_sech(stable_exp_sums(scaled_bessel(expr))))


class HostConditionalMixin:
    """Printing shared by the targets: ``Piecewise`` whose conditions are host scalars (hyperparameters,
    the step counter) becomes a Python conditional expression, and ``Max``/``Min`` fold into the
    target's two-argument ``maximum``/``minimum`` (``MAXIMUM``/``MINIMUM`` name them).  Every symbol is
    printed as a checked identifier (:func:`codegen.inert.identifier`)."""

    # provided by the sympy printer the mixin is combined with
    _print: Callable[..., str]
    parenthesize: Callable[..., str]

    def doprint(self, expr, assign_to=None):
        """The printer's text of ``expr`` after the lowerings every target applies first: Bessel functions as their
        exponentially scaled functions (:func:`codegen.scaled.scaled_bessel`), then logarithms of sums of
        exponentials as log-sum-exps and quotients of such sums normalized by their largest exponent
        (:func:`codegen.expsums.stable_exp_sums`), and negative powers of cosh as powers of sech
        (:func:`cosh_powers_as_sech`), so that no target overflows where the value is finite, then differences of
        exponentials as expm1 and log1mexp (:func:`codegen.cancel.stable_differences`), so that none cancels where a
        library function computes the difference."""
        return super().doprint(numeric_lowering(expr), assign_to)      # type: ignore[misc]

    def _as_ordered_terms(self, expr, order=None):
        """A sum's terms in the printer's order, or, for a sum the exponential-sum lowering normalized, in the order of
        the sum it came from (:func:`codegen.expsums.print_order`)."""
        return print_order(expr, super()._as_ordered_terms(expr, order=order))      # type: ignore[misc]

    def _print_Symbol(self, expr):
        return identifier(expr.name)

    def _print_MatrixSymbol(self, expr):
        return identifier(expr.name)

    #: integers at or beyond this magnitude are printed as float literals: a Python int beyond int64 is an object
    #: to numpy (numpy.log(30!) raised TypeError), and jax refuses one beyond its integer type (OverflowError at
    #: 20! = 2.4e18 with x64, at 2^31 without), while the value is only ever used in floating point
    BIG_INTEGER = 2 ** 31

    def _print_Integer(self, expr):
        if abs(int(expr)) >= self.BIG_INTEGER:
            return repr(float(expr))
        return super()._print_Integer(expr)                                  # type: ignore[misc]

    def _print_Rational(self, expr):
        if max(abs(int(expr.p)), int(expr.q)) >= self.BIG_INTEGER:
            return repr(float(expr))
        return super()._print_Rational(expr)                                 # type: ignore[misc]

    MAXIMUM = "max"
    MINIMUM = "min"
    LOG = "math.log"
    LOG1P = "math.log1p"

    def _print_log1mexp(self, expr):
        """log(1 − e^{a}) of the difference lowering (``codegen.cancel.log1mexp``): Mächler's select, log(−expm1(a))
        for a > −log 2 and log1p(−e^{a}) below, each branch printed by the target's own log, expm1, log1p and exp,
        elementwise where the target selects elementwise (both branches are finite for a < 0)."""
        a = expr.args[0]
        test = f"{self.parenthesize(a, 0)} > {LOG1MEXP_SWITCH!r}"
        near = self._print(sp.log(-expm1(a)))
        if self.WHERE is None:
            return f"({near} if {test} else {self._print(sp.log(1 - sp.exp(a)))})"
        # both branches are computed: the other one's argument kept on its side (log1p(−1) = −inf at a = 0 warns)
        far = self._print(sp.log(1 - sp.exp(sp.Min(a, sp.Float(LOG1MEXP_SWITCH)))))
        return self.WHERE.format(test=test, a=near, b=far)

    def _print_log(self, expr):
        arg = expr.args[0]
        if arg.is_Rational and arg > 0 and max(abs(int(arg.p)), int(arg.q)) >= self.BIG_INTEGER:
            # log(30!) as its value: the integer is no number to the targets (above), and beyond 1.8e308 (log(171!))
            # not even a float
            return repr(float(sp.log(arg).evalf(30)))
        if isinstance(arg, sp.Add) and 1 in arg.args:       # log(1 + x) → an accurate log1p(x)
            return f"{self.LOG1P}({self._print(arg - 1)})"
        return f"{self.LOG}({self._print(arg)})"

    def _print_binary(self, expr):
        return f"(-1.0 if {self.parenthesize(expr.args[0], 0)} < 0 else 1.0)"

    #: how a target selects elementwise: "where({test}, {x})" completed with its NaN; None on the host (Python's
    #: conditional expression on numbers)
    NAN_WHERE: str | None = None

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
    WHERE: str | None = None

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

    #: where a caller sets it to a dict (:func:`codegen.arrays.views.family_maps_view`, for maps whose text is very
    #: large), each distinct Max is printed once, as a local ``_maxN`` the caller assigns before its use:
    #: {Max node: (name, text)}, in the order first printed (an inner Max before the one that holds it).  The
    #: arithmetic is the same, printed once instead of at each use (a 21-point support's μ and F repeated a
    #: normalizing max of 20 exponents in every one of their terms: 570 kB of module)
    max_temps: dict | None = None

    def postprocess(self, text):
        """What ``doprint`` does to a printed text after printing it (a target that renames functions in the text
        overrides it, codegen/backends/jax/functions.py): applied to the texts the printer set aside (max_temps)."""
        return text

    def _print_Max(self, expr):
        temps = self.max_temps
        if temps is None:
            return self._fold_binary(self.MAXIMUM, expr.args)
        if expr not in temps:
            text = self._fold_binary(self.MAXIMUM, expr.args)
            temps[expr] = (f"_max{len(temps)}", text)
        return temps[expr][0]

    def _print_Min(self, expr):
        return self._fold_binary(self.MINIMUM, expr.args)

    #: the fewest terms of a normalized sum (codegen/expsums.py) that ``max_temps`` sets aside as a local ``_sumN``
    SUM_TEMP_TERMS = 3

    def _print_Add(self, expr, order=None):
        """Where ``max_temps`` is set (very large maps), each distinct sum the exponential-sum lowering normalized (of
        at least SUM_TEMP_TERMS terms) is printed once, as a local ``_sumN`` like the maxima: a Fisher information over
        a finite support (blr_derive/families/partition.py centred_fisher) divides each of its terms by the same
        normalized Z̃ and subtracts the same μ, and printed at each use they were most of its operations (a jax module
        evaluated eagerly does each as one dispatch)."""
        temps = self.max_temps
        if temps is None or len(expr.args) < self.SUM_TEMP_TERMS or not _normalized(expr):
            return super()._print_Add(expr, order=order)                   # type: ignore[misc]
        if expr not in temps:
            text = super()._print_Add(expr, order=order)                   # type: ignore[misc]
            temps[expr] = (f"_sum{len(temps)}", text)
        return temps[expr][0]


class HostPrinter(HostConditionalMixin, PythonCodePrinter):
    """Host-side scalars: plain Python with the math module."""

    def __init__(self):
        super().__init__({"fully_qualified_modules": True, "standard": "python3"})

    def _print_Symbol(self, expr):
        return identifier(expr.name)

    def _print_softplus(self, expr):
        x = self._print(expr.args[0])
        return f"(max({x}, 0) + math.log1p(math.exp(-abs({x}))))"

    def _print_logaddexp(self, expr):
        """log(e^x + e^y) = max(x, y) + log1p(e^{-|x - y|}) of the exponential-sum lowering (codegen/expsums.py)."""
        x, y = (self._print(a) for a in expr.args)
        return f"(max({x}, {y}) + math.log1p(math.exp(-abs({x} - ({y})))))"

    def _print_ndtr(self, expr):
        # Φ(x) = erfc(-x/√2)/2, accurate in the lower tail (a probit link's value at a hyperparameter)
        return f"(0.5*math.erfc(-({self._print(expr.args[0])})/math.sqrt(2)))"

    def _print_factorial(self, expr):
        # x! of a real hyperparameter is Γ(x + 1), as numpy's scipy.special.factorial computes it (math.factorial
        # refuses floats)
        return f"math.gamma({self._print(expr.args[0])} + 1)"

    def doprint(self, expr, assign_to=None):
        try:
            return super().doprint(expr, assign_to)
        except PrintMethodNotImplementedError as exc:
            # a special function of hyperparameters that plain Python's math module lacks (digamma, besseli, ...)
            what = str(exc).splitlines()[0].rsplit(":", 1)[-1].strip() if str(exc) else "a function"
            what = ORIGINAL_NAMES.get(what, what)
            raise CodegenError(f"the torch and triton targets compute hyperparameter expressions in Python's math "
                               f"module, which has no '{what}'; use the numpy or jax target") from None


class KernelPrinter(HostConditionalMixin, PythonCodePrinter):
    """One element of an elementwise kernel (torch's compiled path, a Triton kernel body).  A subclass names
    its functions in ``KNOWN_FUNCTIONS`` (sympy's ``known_functions`` model) and its target in ``TARGET_NAME``;
    every function sympy's Python printer would print from the math module, which cannot take a tensor or a
    block, is printed from that table (or by a ``_print_`` method of the subclass) or refused
    (UnsupportedTarget), never computed on the host by mistake."""

    #: sympy function name -> the target's elementwise function
    KNOWN_FUNCTIONS: dict[str, str] = {}
    TARGET_NAME = "elementwise"

    def __init__(self):
        super().__init__({"fully_qualified_modules": True, "standard": "python3"})

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # sympy's Python printer prints its known functions from the math module: each one this class and its
        # bases do not print themselves is printed from the table or refused
        for name in PythonCodePrinter._kf:
            fn = name.split(".")[-1]
            attr = f"_print_{fn}"
            if getattr(cls, attr, None) is getattr(PythonCodePrinter, attr, None):
                setattr(cls, attr, KernelPrinter._print_known_function if fn in cls.KNOWN_FUNCTIONS
                        else KernelPrinter._not_elementwise)
        for fn in cls.KNOWN_FUNCTIONS:
            if getattr(cls, f"_print_{fn}", None) is getattr(PythonCodePrinter, f"_print_{fn}", None):
                setattr(cls, f"_print_{fn}", KernelPrinter._print_known_function)

    def _print_Symbol(self, expr):
        return identifier(expr.name)

    def _print_known_function(self, expr):
        fn = self.KNOWN_FUNCTIONS.get(type(expr).__name__)
        if fn is None:                  # a subclass's table (another target) has no entry for it
            return self._print_Function(expr)
        return f"{fn}({', '.join(self._print(a) for a in expr.args)})"

    def _not_elementwise(self, expr):
        return self._print_Function(expr)

    def _print_Function(self, expr):
        raise UnsupportedTarget(f"the {self.TARGET_NAME} target cannot print {type(expr).__name__}")
