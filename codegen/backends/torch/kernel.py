"""The torch target's fused kernel (``fused=True``): the default path's planned program, printed on one tensor.

:class:`~codegen.backends.torch.inplace.PlannedCompiler` decides, from the IR alone, the operations of the
multi-tensor program and their order (torch.optim's conventions: ``lerp`` for ``c·old + (1 - c)·x``, an accumulation
as ``mul_`` then ``add_``/``addcmul_``/``addcdiv_``, host factors folded into one coefficient, the scaled square
root, the quotient first, ...).  :class:`KernelCompiler` takes the same decisions on the same program and prints each
operation on one tensor instead of a list -- ``torch._foreach_lerp_(u, g, w)`` becomes ``u.lerp_(g, w)``,
``torch._foreach_addcdiv_(m, u, r, value=c)`` becomes ``m.addcdiv_(c * u, r)`` (ATen's ``self + (value·t1)/t2``; a
0-d tensor cannot be ATen's ``value``) -- so that the kernel torch.compile makes of it computes every element by the
same operations in the same order as the default path (torch's foreach path) does. The host numbers the operations
read are passed to the kernel as 0-d tensors of the parameters' dtype (``_hN``: one compiled graph serves every
step; a number a ``_foreach`` operation reads is rounded to that dtype too), host conditions as Python bools (the
graph specializes on them), and host values the program assigns are computed before the call (``host_lines``).

Run eagerly, the kernel is bit for bit the default path.  Compiled, inductor's arithmetic differs from ATen's in two
places: its float32 square root is correctly rounded (ATen's CPU sqrt is not; torch's fused CPU optimizers' is), and
its C++ (-ffp-contract=off) rounds the product and the sum of lerp, add(alpha) and addcmul separately where ATen's
CPU kernels fuse them into one multiply-add (tests/peers/torch_optim/test_fused_plan_order.py).  Emulating that
multiply-add in float64 inside the kernel made it match torch's fused CPU kernels bit for bit per step, but 2.2-2.9x
slower at 1.6e6 parameters (commit eca12cc), so it is not done.
"""
from __future__ import annotations

import re

import sympy as sp

from blr_derive.codegen.inert import identifier
from blr_derive.codegen.backends.torch.inplace import PlannedCompiler
from blr_derive.codegen.backends.torch.printer import ElementwisePrinter

_NAME = re.compile(r"^[A-Za-z_]\w*$")


class KernelCompiler(PlannedCompiler):
    """The planned program (``compile_program``) printed as the body of a kernel over one tensor per list.
    ``body``: its statements; ``args``: (name, host expression text) of the host values it reads, in order;
    ``host_lines``: the host values the program assigns, computed before the kernel is called."""

    def __init__(self, tensors, dests, final):
        super().__init__(tensors, dests, final, indent="", step=None)   # no traced step count: conditions are bools
        self.args: list[tuple[str, str]] = []
        self.host_lines: list[str] = []
        self._hoisted: dict = {}

    @property
    def body(self):
        return self.lines

    # --------------------------------------------------------------------------------------- host values
    def _arg(self, key, text):
        if key not in self._hoisted:
            self._hoisted[key] = f"_h{len(self._hoisted)}"
            self.args.append((self._hoisted[key], text))
        return self._hoisted[key]

    def h(self, e):
        """A host value inside the kernel: a number as written, anything else an argument of the kernel."""
        if isinstance(e, (bool, int, float)) or (isinstance(e, sp.Basic) and (e.is_Number or e in (sp.true, sp.false))):
            return self.host.doprint(e)
        return self._arg(e, self.host.doprint(e))

    def host_assign(self, sym, expr, when):
        line = f"{identifier(str(sym))} = {self.host.doprint(expr)}"
        self.host_lines.extend([f"if {self.host.doprint(when)}:", "    " + line] if when != sp.true else [line])

    def positive(self, test):
        return self._arg(("positive", test), f"_positive({self.host.doprint(test)})")

    # --------------------------------------------------------------------------------------- operations on one tensor
    def op_(self, x, op, *args):
        self.emit(f"{x}.{op}_({', '.join(args)})")

    def op(self, out, x, op, *args):
        self.emit(f"{out} = torch.{op}({', '.join((x,) + args)})")

    def accumulate(self, op, acc, xs, c=None, into=None):
        """The same ATen operation on one tensor.  A coefficient that is a kernel argument (a 0-d tensor, which
        ATen's ``alpha``/``value`` cannot take) is multiplied into the first operand as ATen does with its value
        (``self + (value·t1)·t2``, ``self + (value·t1)/t2``), and ``self + alpha·other`` is ``addcmul`` of alpha
        and other: the same roundings (eager, one fused multiply-add where ATen's kernel has one)."""
        args = list(xs)
        if c is not None and _NAME.match(c):       # a kernel argument
            args = [c] + args if op == "add" else [f"{c} * {args[0]}"] + args[1:]
            op, tail = ("addcmul" if op == "add" else op), ""
        else:
            tail = "" if c is None else f", {'alpha' if op == 'add' else 'value'}={c}"
        call = f"({', '.join(args)}{tail})"
        self.emit(f"{acc}.{op}_{call}" if into is None else f"{into} = torch.{op}({acc}, {call[1:]}")

    def bound_(self, fn, acc, arg, host=False):
        # torch._foreach_maximum_ with a number is clamp_min_ (minimum: clamp_max_)
        if host:
            self.emit(f"{acc}.clamp_{'min' if fn == 'maximum' else 'max'}_({arg})")
        else:
            self.emit(f"{acc}.copy_(torch.{fn}({acc}, {arg}))")

    def bound(self, out, fn, acc, arg, host=False):
        if host:
            self.emit(f"{out} = torch.clamp_{'min' if fn == 'maximum' else 'max'}({acc}, {arg})")
        else:
            self.emit(f"{out} = torch.{fn}({acc}, {arg})")

    def copy(self, dst, src):
        self.emit(f"{dst}.copy_({src})")

    def per_tensor(self, out, e, names):
        args = [sp.Symbol(n) if n is not None else (a if a.is_Number else sp.Symbol(self.h(a)))
                for n, a in zip(names, e.args)]
        self.emit(f"{out} = {ElementwisePrinter().doprint(e.func(*args))}")
