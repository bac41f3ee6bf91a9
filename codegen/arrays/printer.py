"""The array printer of the numpy-like targets: sympy's NumPyPrinter extended for the update IR.

The numpy target prints with it as it is (``codegen/backends/numpy/printer.py``); the jax target renames its
``numpy.``/``scipy.`` names to their jax counterparts (``codegen/backends/jax/functions.py``).

Vectors (P×1 matrix symbols) are 1-D arrays, so matrix products print with ``@``
and column-times-row products as ``numpy.outer``.  ``Inverse(A) * B`` prints as a
Cholesky solve (``_spd_solve``), never as an explicit inverse.  Unsupported nodes
raise :class:`~blr_derive.core.errors.CodegenError` (sympy printers' ``_print_<Node>``
extension points; loud failure).
"""
from __future__ import annotations

import ast

import sympy as sp
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.precedence import PRECEDENCE, precedence

from blr_derive.core.errors import UnsupportedTarget
from blr_derive.codegen.inert import identifier
from blr_derive.codegen.printing import HostConditionalMixin, cosh_power_as_sech, stable_sech

#: sympy's NumPyPrinter prints the functions numpy lacks from Python's math module (its known-function table
#: ``_kf`` falls back to ``math.erf``, ``math.lgamma`` ...), which cannot take an array and which the numpy target
#: does not import: each is printed as the scipy.special function of the same value instead
MATH_FALLBACKS = {"erf": "scipy.special.erf", "erfc": "scipy.special.erfc", "gamma": "scipy.special.gamma",
                  "loggamma": "scipy.special.gammaln", "factorial": "scipy.special.factorial"}


class ArrayPrinter(HostConditionalMixin, NumPyPrinter):
    """Every module-qualified name the printer writes (``scipy.special.erf``) goes through
    :meth:`_module_format`, which records its module in :attr:`imports`; the templates import every module there
    (``numpy`` always), so what the known-function table prints and what the module imports agree by
    construction (and :func:`codegen.inert.audit` refuses a module that reads a name it does not bind)."""
    printmethod = "_blrnumpycode"
    MAXIMUM = "numpy.maximum"
    MINIMUM = "numpy.minimum"
    LOG = "numpy.log"
    LOG1P = "numpy.log1p"
    #: the modules every template of the target imports itself (not recorded in :attr:`imports`)
    ALWAYS_IMPORTED = frozenset({"numpy"})
    #: function name -> the dotted name printed (sympy's table, without math.*: :func:`known_function_table`)
    known_functions: dict[str, str]

    def __init__(self, settings=None):
        super().__init__({"fully_qualified_modules": True, **(settings or {})})
        self.helpers: set = set()
        self.imports: set = set()
        self.known_functions = known_function_table(self.known_functions)

    def _print_Sum(self, expr):
        """A finite sum as Python's own sum over its range.  A series (an infinite limit) has no value a module can
        compute this way (sympy's form loops over range(0, inf + 1)): it prints as NaN, which check's hunt reports
        where a function of the module reads it (the family maps of a prior whose log-partition is a series)."""
        if any(not (a.is_finite and b.is_finite) for _, a, b in expr.limits):
            return self._module_format("numpy.nan")
        # the summation indices are often sympy Dummies, whose printed names carry a process-wide counter (j_8869297):
        # renamed _k<depth>_<position> (a generator's own scope; nested sums get their depth) for reproducible output
        depth = getattr(self, "_sum_depth", 0)
        names = {i: sp.Symbol(f"_k{depth}_{n}", integer=True) for n, (i, _, _) in enumerate(expr.limits)}
        self._sum_depth = depth + 1
        try:
            body = self._print(expr.function.xreplace(names))
            loops = " ".join(f"for {names[i].name} in range({self._print(a)}, {self._print(b)} + 1)"
                             for i, a, b in expr.limits[::-1])
        finally:
            self._sum_depth = depth
        return f"(sum({body} {loops}))"

    # -- operands whose printed form binds more loosely than sympy's precedence of the node says
    def parenthesize(self, item, level, strict=False):
        """sympy's grouping, plus parentheses where ``item`` prints as a Python operator sympy takes for an atom: a
        1×1 trace of a product chain, the quadratic form ``Trace(m.T*S*m)``, prints as ``m @ S @ m``, so as the base
        or exponent of a power (level ``PRECEDENCE['Pow']``) it must be grouped: ``(m @ m)**2``, never ``m @ m**2``
        (which is m @ (m**2), the sum of the cubes).  Products of sympy's own nodes are grouped by sympy as before."""
        text = super().parenthesize(item, level, strict)
        if level >= PRECEDENCE["Pow"] and _binds_looser(text):
            return f"({text})"
        return text

    def _print_Mul(self, expr):
        """sympy's product, with each divisor that prints as a Python product chain grouped: x/Trace(m.T*S*m) is
        ``x/(m @ S @ m)``, never ``x/m @ S @ m`` (which is (x/m) @ S @ m).  sympy groups a divisor by its own
        precedence, under which a trace is an atom; a factor in the numerator needs no group (a scalar chain
        multiplied from the left regroups to the same value)."""
        swap = {}
        for f in sp.Mul.make_args(expr):
            if f.is_Pow and f.exp.is_Rational and f.exp.is_negative and \
                    precedence(f.base) > PRECEDENCE["Mul"] and _binds_looser(self._print(f.base)):
                swap[f] = sp.Pow(_Grouped(f.base), f.exp, evaluate=False)
        if swap:
            expr = sp.Mul(*[swap.get(f, f) for f in sp.Mul.make_args(expr)], evaluate=False)
        return super()._print_Mul(expr)

    def _print__Grouped(self, expr):
        return f"({self._print(expr.args[0])})"

    def _module_format(self, fqn, register=True):
        module, _, name = fqn.rpartition(".")
        if module == "builtins":        # sympy prints a series as builtins.sum(...): Python's own, no import
            return name
        # numpy's own subpackages (numpy.linalg) are loaded by `import numpy`
        if module and module.split(".")[0] not in self.ALWAYS_IMPORTED:
            self.imports.add(module)
        return super()._module_format(fqn, register)

    # -- leaves
    def _print_MatrixSymbol(self, expr):
        return identifier(expr.name)

    def _print_Identity(self, expr):
        return f"numpy.eye({self._print(expr.shape[0])})"

    def _print_ZeroMatrix(self, expr):
        r, c = expr.shape
        if c == 1:
            return f"numpy.zeros({self._print(r)})"
        return f"numpy.zeros(({self._print(r)}, {self._print(c)}))"

    def _print_Transpose(self, expr):
        arg = expr.arg
        if arg.shape[1] == 1 or arg.shape[0] == 1:
            return self._print(arg)          # 1-D arrays: transpose is a no-op
        if isinstance(arg, sp.MatrixSymbol):
            return f"{self._print(arg)}.T"
        return f"({self._print(arg)}).T"

    def _print_Trace(self, expr):
        if expr.arg.shape == (1, 1):
            s = self._print(expr.arg)        # a 1×1 product of 1-D arrays is already a scalar
            return f"({s})" if isinstance(expr.arg, sp.MatAdd) else s
        return f"numpy.trace({self._print(expr.arg)})"

    def _print_Determinant(self, expr):
        return f"numpy.linalg.det({self._print(expr.arg)})"

    def _print_log(self, expr):
        """log det X as ``_logdet(X)`` (numpy.linalg.slogdet), not log(numpy.linalg.det(X)): det overflows to inf
        from about 1e308 (an entropy −½ log det S of P = 400 coordinates at precision 1e3 was −inf, an E-step's
        ½ log det L of 50 features of scale 1e-4 inf); the rest as the base printer prints it."""
        if isinstance(expr.args[0], sp.Determinant):
            self.helpers.add("_logdet")
            return f"_logdet({self._print(expr.args[0].arg)})"
        return super()._print_log(expr)

    def _print_Inverse(self, expr):
        self.helpers.add("_spd_solve")
        self.imports.add("scipy.linalg")
        n = self._print(expr.arg.shape[0])
        return f"_spd_solve({self._print(expr.arg)}, numpy.eye({n}))"

    def _print_MatAdd(self, expr):
        return " + ".join(self.parenthesize(a, 11) for a in expr.args).replace("+ -", "- ")

    def _print_MatMul(self, expr):
        coeff, mats = expr.as_coeff_mmul()
        mats = list(mats.args) if isinstance(mats, sp.MatMul) else [mats]
        body = self._chain(mats)
        if coeff == 1:
            return body
        if coeff == -1:
            return f"-{body}"
        return f"{self.parenthesize(coeff, 50)}*{body}"

    def _chain(self, mats):
        # Inverse(A) * rest  ->  _spd_solve(A, rest); a triangular factor: _tri_solve (see _triangular)
        for i, f in enumerate(mats):
            tri = _triangular(f)
            if tri is not None and i < len(mats) - 1:
                rest = self._chain(mats[i + 1:])
                solved = self._tri_solve(tri, rest)
                if i == 0:
                    return solved
                return self._fold(mats[:i] + [_Printed(solved, _shape(sp.MatMul(*mats[i:])))])
            if isinstance(f, sp.Inverse) and i < len(mats) - 1:
                self.helpers.add("_spd_solve")
                self.imports.add("scipy.linalg")
                left = mats[:i]
                rest = self._chain(mats[i + 1:])
                solved = f"_spd_solve({self._print(f.arg)}, {rest})"
                if not left:
                    return solved
                return self._fold(left + [_Printed(solved, _shape(sp.MatMul(*mats[i:])))])
        tri = _triangular(mats[-1]) if len(mats) > 1 else None
        if tri is not None:              # X L⁻¹ = (L⁻ᵀ Xᵀ)ᵀ, X L⁻ᵀ = (L⁻¹ Xᵀ)ᵀ
            left = self._chain(mats[:-1])
            return self._tri_solve((tri[0], 1 - tri[1]), f"{left}.T" if left.isidentifier() else f"({left}).T") + ".T"
        return self._fold(mats)

    def _tri_solve(self, tri, rhs):
        self.helpers.add("_tri_solve")
        self.imports.add("scipy.linalg")
        return f"_tri_solve({self._print(tri[0])}, {rhs}, {tri[1]})"

    # the eigenbasis structure's nodes (blr_derive/rules/eigenbasis.py)
    def _print_Entrywise(self, expr):
        return f"({self._print(expr.arg)})"

    def _print_EntryOf(self, expr):
        return f"({self._print(expr.arg)})"

    def _print_Eigenbasis(self, expr):
        self.helpers.add("_eigenbasis")
        return f"_eigenbasis({self._print(expr.arg)})"

    def _print_PowerBasis(self, expr):
        self.helpers |= {"_power_basis", "_rayleigh_order"}
        return f"_power_basis({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    def _print_Reordered(self, expr):
        self.helpers |= {"_reordered", "_rayleigh_order"}
        return f"_reordered({', '.join(self._print(a) for a in expr.args)})"

    def _print_MatSelect(self, expr):
        cond, a, b = expr.args
        return f"({self._print(a)} if {self._print(cond)} else {self._print(b)})"

    def _print_CholeskyFactor(self, expr):
        return f"numpy.linalg.cholesky({self._print(expr.arg)})"

    def _fold(self, mats):
        acc: str | None = None
        shape: tuple = ()
        for f in mats:
            s = f.text if isinstance(f, _Printed) else self._wrap(f)
            fs = f.shape if isinstance(f, _Printed) else f.shape
            if acc is None:
                acc, shape = (_operand(s, "first") if len(mats) > 1 else s), fs
                continue
            if type(f).__name__ == "DiagOf":         # A @ diag(w) = A * w (columns scaled)
                acc = f"({acc} * {_operand(self._print(f.args[0]), '*')})"
                continue
            if shape[1] == 1 and fs[0] == 1 and shape[0] != 1 and fs[1] != 1:
                acc = f"numpy.outer({acc}, {s})"
            elif shape[1] == 1 and fs == (1, 1) and shape[0] != 1:     # a column times a 1×1 (a number here)
                acc = f"{acc} * {_operand(s, '*')}"
            else:
                acc = f"{acc} @ {_operand(s, '@')}"
            shape = (shape[0], fs[1])
        return acc

    def _wrap(self, f):
        s = self._print(f)
        if isinstance(f, (sp.MatAdd,)) or (isinstance(f, sp.MatMul) and f.args and not f.args[0] == 1):
            return f"({s})"
        return s

    # special functions (scipy.special; tested against it in tests/unit/core/test_special_functions.py)
    def _print_exp1(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.exp1({self._print(expr.args[0])})"

    def _print_exp1e(self, expr):
        # e^x E1(x) (codegen/scaled.py): the module's helper, scipy has no scaled exp1
        self.imports.add("scipy.special")
        self.helpers.add("_exp1e")
        return f"_exp1e({self._print(expr.args[0])})"

    def _print_gammaincinv(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.gammaincinv({', '.join(self._print(a) for a in expr.args)})"

    def _print_betaincinv(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.betaincinv({', '.join(self._print(a) for a in expr.args)})"

    def _print_ndtri(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.ndtri({self._print(expr.args[0])})"

    def _print_ndtr(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.ndtr({self._print(expr.args[0])})"

    def _print_log_ndtr(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.log_ndtr({self._print(expr.args[0])})"

    def _print_dbesselk(self, expr):
        n, nu, x = expr.args
        if n == 0:
            self.imports.add("scipy.special")
            return f"scipy.special.kv({self._print(nu)}, {self._print(x)})"
        self.helpers.add("_dbesselk")
        return f"_dbesselk({self._print(n)}, {self._print(nu)}, {self._print(x)})"

    def _print_besseli(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.iv({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    def _print_besselie(self, expr):
        # scipy.special.ive (AMOS) is NaN above x = 2^30 (von_mises' A at κ = 2e9, a Bessel-normalized count's at
        # λ > 40.2); i0e/i1e (Cephes) are not, and another order is the module's _ive (asymptotic series up there)
        self.imports.add("scipy.special")
        nu, x = expr.args
        if nu in (0, 1):
            return f"scipy.special.i{int(nu)}e({self._print(x)})"
        self.helpers.add("_ive")
        return f"_ive({self._print(nu)}, {self._print(x)})"

    def _print_dbesselke(self, expr):
        n, nu, x = expr.args
        if n == 0:
            self.imports.add("scipy.special")
            return f"scipy.special.kve({self._print(nu)}, {self._print(x)})"
        self.helpers.add("_dbesselk")
        return f"_dbesselk({self._print(n)}, {self._print(nu)}, {self._print(x)}, True)"

    def _print_loggamma(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.gammaln({self._print(expr.args[0])})"

    def _print_digamma(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.digamma({self._print(expr.args[0])})"

    def _print_polygamma(self, expr):
        self.imports.add("scipy.special")
        n, x = expr.args
        if n == 0:
            return f"scipy.special.digamma({self._print(x)})"
        return f"scipy.special.polygamma({self._print(n)}, {self._print(x)})"

    def _print_gamma(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.gamma({self._print(expr.args[0])})"

    def _print_factorial(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.factorial({self._print(expr.args[0])})"

    def _print_softplus(self, expr):
        return f"numpy.logaddexp(0, {self._print(expr.args[0])})"

    def _print_logaddexp(self, expr):
        """log(e^x + e^y) of the exponential-sum lowering (codegen/expsums.py)."""
        return f"numpy.logaddexp({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    NAN_WHERE = "numpy.where({test}, {x}, numpy.nan)"
    WHERE = "numpy.where({test}, {a}, {b})"

    def _print_binary(self, expr):
        return f"numpy.where({self.parenthesize(expr.args[0], 0)} < 0, -1.0, 1.0)"

    def _print_xlogy(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.xlogy({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    def _print_logsumexp(self, expr):
        self.imports.add("scipy.special")
        args = ", ".join(self._print(a) for a in expr.args)
        return f"scipy.special.logsumexp(numpy.stack(numpy.broadcast_arrays({args})), axis=0)"

    def _print_ArraySum(self, expr):
        return f"numpy.sum({self._print(expr.args[0])})"

    # sums over a recipe's component axis (the leading axis of the array that holds one value per component)
    def _print_ComponentSum(self, expr):
        return f"numpy.sum({self._print(expr.args[0])}, axis=0)"

    def _print_ComponentLogSumExp(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.logsumexp({self._print(expr.args[0])}, axis=0)"

    # sums over data and their Gaussian expectations (blr_derive/rules/datasum.py): vectors are 1-D arrays
    def _apply(self, f, arg_text):
        """The one-argument function ``f`` (a Lambda) printed at an already printed argument."""
        if arg_text.isidentifier():
            return self._print(f.expr.xreplace({f.variables[0]: sp.Symbol(arg_text)}))
        # an expression (an entry point's expanded definitions, e.g. X @ m): printed through a placeholder name,
        # since the printers print every symbol as a checked identifier
        hole = "_blr_argument_"
        return self._print(f.expr.xreplace({f.variables[0]: sp.Symbol(hole)})).replace(hole, f"({arg_text})")

    def _print_DataSum(self, expr):
        if not expr.fn.expr.has(expr.fn.variables[0]):      # Σ_n c: c times the number of rows
            size = f"numpy.size({self._print(expr.vec)})"
            return size if expr.fn.expr == 1 else f"({self._print(expr.fn.expr)})*{size}"
        return f"numpy.sum({self._apply(expr.fn, self._print(expr.vec))})"

    def _print_Elementwise(self, expr):
        f, v = expr.args
        if not f.expr.has(f.variables[0]):          # a constant derivative (a linear data sum): one per row
            return f"numpy.full(numpy.shape({self._print(v)}), {self._print(f.expr)}, dtype=float)"
        return self._apply(f, self._print(v))

    def _print_DiagOf(self, expr):
        return f"numpy.diag({self._print(expr.args[0])})"

    def _print_RowQuadForm(self, expr):
        A, C = expr.args
        a = self._wrap(A)
        axis = -1 if A.shape[0] == 1 else 1           # one row (a vector here): the whole product is the form
        if isinstance(C, sp.Inverse):
            self.helpers.add("_spd_solve")
            self.imports.add("scipy.linalg")
            return f"numpy.sum({a} * _spd_solve({self._print(C.arg)}, {self._print(A.T)}).T, axis={axis})"
        return f"numpy.sum(({a} @ {self._wrap(C)}) * {a}, axis={axis})"

    def _print_GaussHermite(self, expr, helper="_gauss_hermite"):
        f, mean, var, nodes = expr.args
        self.helpers.update((helper, "_hermite_nodes"))      # the rule's nodes (codegen/runtime/arrays.py)
        return (f"{helper}(lambda u: {self._apply(f, 'u')}, {self._print(mean)}, {self._print(var)}, "
                f"{self._print(nodes)})")

    def _print_GaussHermiteStein(self, expr):
        return self._print_GaussHermite(expr, "_gauss_hermite_stein")

    def _print_Expm(self, expr):
        self.helpers.add("_expm_sym")
        return f"_expm_sym({self._print(expr.args[0])})"

    def _print_HadamardExp(self, expr):
        return f"{self._wrap(expr.args[0])} * numpy.exp({self._print(expr.args[1])})"

    def _print_ZerosLike(self, expr):
        return f"numpy.zeros_like({self._print(expr.args[0])})"

    def _print_expit(self, expr):
        self.imports.add("scipy.special")
        return f"scipy.special.expit({self._print(expr.args[0])})"

    def _print_Pow(self, expr, rational=False):
        sech = cosh_power_as_sech(expr)
        if sech is not None:
            return self._print(sech)
        return super()._print_Pow(expr, rational=rational)

    def _print_sech(self, expr):
        return stable_sech(self._print(expr.args[0]), "numpy.abs", "numpy.exp")

    def _print_Heaviside(self, expr):
        h0 = expr.args[1] if len(expr.args) > 1 else sp.Rational(1, 2)     # the value at 0 (masks use 0)
        return f"numpy.heaviside({self._print(expr.args[0])}, {self._print(h0)})"

    def emptyPrinter(self, expr):
        raise UnsupportedTarget(f"the numpy target cannot print {type(expr).__name__}: {expr}")

    def _print_Integral(self, expr):
        raise UnsupportedTarget(f"the numpy target cannot print an unevaluated integral: {expr}")


def known_function_table(table: dict) -> dict:
    """sympy's known-function table for the array targets: every ``math.*`` entry replaced by its
    :data:`MATH_FALLBACKS` counterpart (the test of the printers' tables checks that none is left and that every
    entry names a function of a module the target may import)."""
    out = {}
    for name, fn in table.items():
        if fn.startswith("math."):
            if name not in MATH_FALLBACKS:
                continue                     # printed through emptyPrinter: UnsupportedTarget, never math.*
            fn = MATH_FALLBACKS[name]
        out[name] = fn
    return out


def _refuse_math(self, expr):
    return self.emptyPrinter(expr)


# a sympy math-module function without a scipy.special counterpart (none today) is refused, never printed as math.*
for _name, _fn in NumPyPrinter._kf.items():
    if _fn.startswith("math.") and _name not in MATH_FALLBACKS and \
            getattr(ArrayPrinter, f"_print_{_name}", None) is getattr(NumPyPrinter, f"_print_{_name}", None):
        setattr(ArrayPrinter, f"_print_{_name}", _refuse_math)


#: Python's operators of the precedence of ``*`` and ``@`` (left-associative), and those that bind less tightly
_PRODUCTS = (ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.MatMult)
_LOOSER = (ast.Add, ast.Sub, ast.LShift, ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor)


def _operand(text, op):
    """``text``, the printed right operand of ``acc <op> text`` (``op`` is ``'*'`` or ``'@'``; ``'first'``: the left
    operand of a chain, where only a looser operator needs the group), parenthesized where
    Python would otherwise read a different product: an elementwise vector such as the data-sum derivative
    ``2*eta/(nu*(eta**2/nu + 1))`` printed after ``X.T @`` is ``((X.T @ 2)*eta)/...`` unparenthesized (a matmul
    with a number), and ``a + b`` after ``A *`` adds b to A's product with a.  A sum, a conditional or a comparison
    at the top is always wrapped; a chain of ``*``, ``/`` (elementwise, so regrouping leaves the value as printed
    before) is wrapped after ``@``, and a chain holding ``@`` after ``*``; a name, a call, a power or a negation
    binds tighter and is left as it is (so the printed forms that were right stay byte for byte)."""
    if _enclosed(text):
        return text
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:                 # not a Python expression on its own (never expected): keep it grouped
        return f"({text})"
    if isinstance(node, (ast.IfExp, ast.Compare, ast.BoolOp, ast.Lambda, ast.NamedExpr)) or \
            (isinstance(node, ast.BinOp) and isinstance(node.op, _LOOSER)):
        return f"({text})"
    if op == "first":                   # the chain's left operand: a product there groups as printed
        return text
    if isinstance(node, ast.BinOp) and isinstance(node.op, _PRODUCTS):
        ops = []
        while isinstance(node, ast.BinOp) and isinstance(node.op, _PRODUCTS):   # the chain's left spine
            ops.append(node.op)
            node = node.left
        matmul = any(isinstance(o, ast.MatMult) for o in ops)
        elementwise = any(not isinstance(o, ast.MatMult) for o in ops)
        if (op == "@" and elementwise) or (op == "*" and matmul):
            return f"({text})"
    return text


class _Grouped(sp.Function):
    """Printing only: an operand that must print in parentheses (:meth:`ArrayPrinter._print_Mul`)."""
    nargs = 1


def _binds_looser(text):
    """Whether the printed ``text`` is, at its top, a Python operation that binds less tightly than a power (a
    product chain ``m @ S @ m``, a quotient, a sum, a negation), so that as an operand of ``**`` or ``/`` it needs
    parentheses; a name, a call, a subscript, a power or one parenthesized group does not."""
    if _enclosed(text):
        return False
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return True
    if isinstance(node, ast.BinOp):
        return not isinstance(node.op, ast.Pow)
    return isinstance(node, (ast.UnaryOp, ast.IfExp, ast.Compare, ast.BoolOp, ast.Lambda, ast.NamedExpr))


def _enclosed(text):
    """Whether ``text`` is one parenthesized group, ``(a + b)`` (not ``(a) + (b)``)."""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return i == len(text) - 1
    return False


class _Printed:
    def __init__(self, text, shape):
        self.text, self.shape = text, shape


def _shape(e):
    return e.shape


def _triangular(f):
    """(L, trans) for the inverse of a Cholesky factor L (trans 0) or of its transpose (trans 1), else None."""
    if not isinstance(f, sp.Inverse):
        return None
    arg = f.arg
    if type(arg).__name__ == "CholeskyFactor":
        return arg, 0
    if isinstance(arg, sp.Transpose) and type(arg.arg).__name__ == "CholeskyFactor":
        return arg.arg, 1
    return None
