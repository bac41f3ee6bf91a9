"""The Triton printer: an elementwise update program as the body of one ``@triton.jit`` kernel.

It uses the shared :class:`~blr_derive.codegen.fused.FusedCompiler` (also the torch target's fused path), which
splits the program into host scalars (hoisted out of the kernel) and elementwise statements.  Here the
hoisted host values become kernel arguments: numbers are fp32 scalars, host booleans
(``Piecewise`` conditions on flags, choices and the step counter) are ``tl.constexpr``, so each
setting compiles to its own straight-line kernel and values that a branch does not need are
never loaded.  All arithmetic is fp32.

Only Triton's core math is printed (no libdevice: the interpreter, ``TRITON_INTERPRET=1``,
cannot run it).  Division and square roots are the correctly rounded ``tl.div_rn``/``tl.sqrt_rn``
so that GPU results match torch's IEEE arithmetic.  Functions without a core primitive are
printed through documented identities: ``tanh(x) = sign(x)(1 - e)/(1 + e)`` with
``e = exp(-2|x|)`` (absolute error ~1e-7), ``log1p`` by Goldberg's ``log(u)·x/(u - 1)``,
``u = 1 + x``, ``expm1`` by Kahan's ``(u - 1)·x/log(u)``, ``u = e^x``, softplus, xlogy and logsumexp from exp/log.  Special functions that need
libdevice (lgamma, digamma, polygamma, gamma) raise :class:`~blr_derive.core.errors.CodegenError`.
"""
from __future__ import annotations

from pathlib import Path

import sympy as sp
from sympy.printing.precedence import precedence

from blr_derive.core.errors import CodegenError, UnsupportedTarget
from blr_derive.codegen.fused import FusedCompiler
from blr_derive.codegen.printing import KernelPrinter
from blr_derive.codegen.source import definition

#: the target's runtime source (codegen/source.py): the kernels' helpers and every generated module's machinery
RUNTIME = Path(__file__).parent / "runtime.py"
#: helper name -> its source, for the kernels that call it (Triton core math has no such function)
HELPERS = {name: definition(RUNTIME, name) + "\n" for name in ("_log1p", "_expm1", "_tanh", "_sech")}


class TritonPrinter(KernelPrinter):
    """fp32 elementwise expressions over Triton blocks.  Symbols named in ``flags`` are constexpr
    booleans: a ``Piecewise`` on them is a Python conditional resolved when the kernel is compiled;
    a ``Piecewise`` on block values is ``tl.where``."""

    MAXIMUM = "tl.maximum"
    MINIMUM = "tl.minimum"
    LOG = "tl.log"
    LOG1P = "_log1p"

    def __init__(self, flags=()):
        super().__init__()
        self.flags = flags if isinstance(flags, set) else set(flags)     # shared with the compiler
        self.helpers: set[str] = set()
        self.first = None          # the state an update is written into: its term is printed first (_print_Add)

    def _print_log(self, expr):
        arg = expr.args[0]
        if isinstance(arg, sp.Add) and 1 in arg.args:
            self.helpers.add("_log1p")
        return super()._print_log(expr)

    def _print_Piecewise(self, expr):
        out = self._print(expr.args[-1].expr)
        if expr.args[-1].cond != sp.true:
            raise CodegenError(f"the triton target needs a default branch in {expr}")
        for e, c in reversed(expr.args[:-1]):
            if isinstance(c, sp.Symbol) and c.name in self.flags:
                out = f"({self._print(e)} if {c.name} else {out})"
            elif c in (sp.true, sp.false):
                out = self._print(e) if c == sp.true else out
            else:
                out = f"tl.where({self._print(c)}, {self._print(e)}, {out})"
        return out

    def _print_Not(self, expr):
        return f"(not {self._print(expr.args[0])})"

    def _is_scalar(self, f):
        """A number or a hoisted host scalar (not a block)."""
        return f.is_Number or (isinstance(f, sp.Symbol) and f.name.startswith("_h"))

    def _print_Mul(self, expr):
        """``coefficient*(blocks)`` or ``coefficient*tl.div_rn(blocks, blocks)``: the block product first,
        then the host coefficient, the order of the torch target's multi-tensor program."""
        coef, num, den = [], [], []
        for f in sp.Mul.make_args(expr):
            if isinstance(f, sp.Pow) and f.exp.is_number and f.exp.is_negative and not self._is_scalar(f.base):
                den.append(f.base ** (-f.exp))
            elif self._is_scalar(f) or (f.is_number and not isinstance(f, sp.Pow)):
                coef.append(f)
            else:
                num.append(f)
        if not num and not den:
            return super()._print_Mul(expr)
        prec = precedence(expr)

        def product(fs):
            return "*".join(self.parenthesize(f, prec) for f in fs)

        body = product(num) if num else "1.0"
        for d in den:          # one division per factor, in order (as the multi-tensor program divides)
            body = f"tl.div_rn({body}, {self._print(d)})"
        c = sp.Mul(*coef)
        if c == 1:
            return body
        if not den and (len(num) > 1 or isinstance(num[0], sp.Pow)):
            body = f"({body})"
        if c == -1:
            return f"-{body}"
        if c.could_extract_minus_sign():
            return f"-{self.parenthesize(-c, prec)}*{body}"
        return f"{self.parenthesize(c, prec)}*{body}"

    def _print_Add(self, expr, order=None):
        """Left to right as the torch target's multi-tensor program adds: the first block term, then each
        further term ``c*x`` fused as ``tl.fma(x, c, acc)`` (torch's ``add(acc, x, alpha=c)`` is one fused
        multiply-add), then the host scalar."""
        scal = [a for a in expr.args if self._is_scalar(a)]
        terms = [a for a in expr.args if not self._is_scalar(a)]
        if self.first is not None:      # a state update c·old + Σ terms starts from c·old, as the torch target's mul_ + add_
            terms.sort(key=lambda a: self.first not in sp.Mul.make_args(a))
        if not terms:
            return super()._print_Add(expr)
        acc = None
        for term in terms:
            coef = [f for f in sp.Mul.make_args(term) if self._is_scalar(f)]
            rest = [f for f in sp.Mul.make_args(term) if not self._is_scalar(f)]
            c = sp.Mul(*coef)
            if acc is None:
                acc = self._print(term)
                continue
            x = self._print(sp.Mul(*rest, evaluate=False)) if len(rest) > 1 else self._print(rest[0])
            if len(rest) == 1 and precedence(rest[0]) <= precedence(expr):
                x = f"({x})"
            if c == 1:
                acc = f"{acc} + {x}"
            elif c == -1:
                acc = f"{acc} - {x}"
            else:
                acc = f"tl.fma({x}, {self._print(c)}, {acc})"
        if scal:
            h = sp.Add(*scal)
            acc = f"{acc} - {self._print(-h)}" if h.could_extract_minus_sign() else f"{acc} + {self._print(h)}"
        return acc

    def _print_Pow(self, expr, rational=False):
        b, e = expr.args
        if e == sp.Rational(1, 2):
            return f"tl.sqrt_rn({self._print(b)})"
        if e == sp.Rational(-1, 2):
            return f"tl.div_rn(1.0, tl.sqrt_rn({self._print(b)}))"
        if e.is_Integer and e < 0:
            return f"tl.div_rn(1.0, {self._print(b ** (-e))})"
        if e.is_Integer and 1 < e <= 4:
            x = self.parenthesize(b, precedence(expr))
            return "*".join([x] * int(e))
        if b.is_number and e.is_number:
            return repr(float(expr))
        if e.is_Integer:            # |b|^e = exp(e*log|b|), with the sign of b for odd e (b < 0 is allowed)
            x = self._print(b)
            mag = f"tl.exp({self._print(e)}*tl.log(tl.abs({x})))"
            return mag if e % 2 == 0 else f"tl.where({x} < 0, -{mag}, {mag})"
        # no pow without libdevice: exp(e*log(b)), valid for b > 0
        return f"tl.exp({self._print(e)}*tl.log({self._print(b)}))"

    #: Triton core math only (no libdevice, which the Triton interpreter cannot run)
    KNOWN_FUNCTIONS = {"exp": "tl.exp", "sin": "tl.sin", "cos": "tl.cos", "Abs": "tl.abs"}
    TARGET_NAME = "triton"

    def _print_Function(self, expr):
        raise UnsupportedTarget(f"the triton target cannot print {type(expr).__name__}: it prints Triton core math "
                                "only (no libdevice, which the Triton interpreter cannot run); use the torch target "
                                "for this recipe")

    def _print_tanh(self, expr):
        self.helpers.add("_tanh")
        return f"_tanh({self._print(expr.args[0])})"

    def _print_expm1(self, expr):
        """e^x − 1 of the difference lowering (codegen/cancel.py) by the runtime's libdevice-free ``_expm1``."""
        self.helpers.add("_expm1")
        return f"_expm1({self._print(expr.args[0])})"

    def _print_cosh(self, expr):
        x = self._print(expr.args[0])
        return f"(0.5*(tl.exp({x}) + tl.exp(-({x}))))"

    def _print_loggamma(self, expr):
        return self._print_Function(expr)

    def _print_digamma(self, expr):
        return self._print_Function(expr)

    def _print_gamma(self, expr):
        return self._print_Function(expr)

    def _print_polygamma(self, expr):
        return self._print_Function(expr)

    def _print_sign(self, expr):
        x = self._print(expr.args[0])
        return f"tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, 0.0*({x})))"       # the argument may be a sum

    def _print_binary(self, expr):
        x = self._print(expr.args[0])
        return f"tl.where({x} < 0, -1.0, tl.zeros_like({x}) + 1.0)"

    NAN_WHERE = "tl.where({test}, {x}, float('nan'))"
    WHERE = "tl.where({test}, {a}, {b})"

    def _print_sech(self, expr):
        self.helpers.add("_sech")
        return f"_sech({self._print(expr.args[0])})"

    def _print_softplus(self, expr):
        x = self._print(expr.args[0])
        self.helpers.add("_log1p")
        return f"(tl.maximum({x}, 0.0) + _log1p(tl.exp(-tl.abs({x}))))"

    def _print_logaddexp(self, expr):
        """log(e^x + e^y) = max(x, y) + log1p(e^{-|x - y|}) of the exponential-sum lowering (codegen/expsums.py)."""
        x, y = (self._print(a) for a in expr.args)
        self.helpers.add("_log1p")
        return f"(tl.maximum({x}, {y}) + _log1p(tl.exp(-tl.abs({x} - ({y})))))"

    def _print_xlogy(self, expr):
        x, y = (self._print(a) for a in expr.args)
        return f"tl.where({x} == 0, 0.0, {x}*tl.log({y}))"

    def _print_logsumexp(self, expr):
        args = [self._print(a) for a in expr.args]
        top = args[0]
        for a in args[1:]:
            top = f"tl.maximum({top}, {a})"
        return f"(_lse_max + tl.log({' + '.join(f'tl.exp({a} - _lse_max)' for a in args)}))".replace(
            "_lse_max", f"({top})")

    def _print_Float(self, expr):
        return repr(float(expr))


class TritonFusedCompiler(FusedCompiler):
    """:class:`FusedCompiler` for a Triton kernel body.  Host factors of a product (terms of a sum) are
    hoisted as one scalar computed in double precision on the host, as the multi-tensor path of the torch
    target does; hoisted booleans (conditions) are recorded in :attr:`flags` (constexpr arguments)."""

    ELEMENTWISE = TritonPrinter

    def __init__(self, tensors, dests=None):
        super().__init__(tensors)
        self.flag_names: set[str] = set()
        self.el = TritonPrinter(self.flag_names)
        self.dests = dests or {}

    @property
    def helpers(self):
        return self.el.helpers

    def hoist_flag(self, cond):
        """The name of the constexpr flag standing for the host condition ``cond``."""
        h = self._hoist(cond)
        if h in (sp.true, sp.false):
            return "True" if h == sp.true else "False"
        self.flag_names.add(h.name)
        return h.name

    def _hoist(self, e):
        if isinstance(e, sp.Piecewise):
            args = []
            for x, c in e.args:
                if c == sp.true:
                    args.append((self._hoist(x), True))
                elif self.is_tensor(c):
                    args.append((self._hoist(x), self._hoist(c)))
                else:
                    args.append((self._hoist(x), sp.Symbol(self.hoist_flag(c))))
            return sp.Piecewise(*args, evaluate=False)
        if isinstance(e, (sp.Mul, sp.Add)) and self.is_tensor(e):
            scal = [a for a in e.args if not self.is_tensor(a)]
            if len(scal) > 1 and not all(a.is_Number for a in scal):
                rest = [self._hoist(a) for a in e.args if self.is_tensor(a)]
                return e.func(*rest, self._hoist(e.func(*scal)), evaluate=False)
        return super()._hoist(e)

    def assign(self, sym, expr, when=sp.true):
        if when not in (sp.true, sp.false) and self.is_tensor(expr):
            self.hoist_flag(when)
        self.el.first = self.dests.get(sym)
        try:
            super().assign(sym, expr, when)
        finally:
            self.el.first = None

    @property
    def float_args(self):
        return [(n, v) for n, v in self.args if n not in self.flag_names]

    @property
    def flag_args(self):
        return [(n, v) for n, v in self.args if n in self.flag_names]

