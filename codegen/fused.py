"""The split of an elementwise update program into host values and one per-element kernel body, shared by the
targets that compile a kernel per update (the torch target's fused path, the triton target): each target gives
its per-element printer (a :class:`~blr_derive.codegen.printing.KernelPrinter`) as ``ELEMENTWISE``."""
from __future__ import annotations

import sympy as sp

from blr_derive.codegen.inert import identifier
from blr_derive.codegen.printing import HostPrinter, KernelPrinter


class FusedCompiler:
    """Split an elementwise program into host scalars (hoisted, passed as 0-d tensors so that one
    compiled graph serves every step) and a per-tensor kernel body."""

    #: the target's per-element printer
    ELEMENTWISE: type[KernelPrinter] = KernelPrinter

    def __init__(self, tensors, flags=()):
        self.tensors = set(tensors)
        self.flags = set(flags)            # boolean host symbols (flags, choices)
        self.host = HostPrinter()
        self.el = self.ELEMENTWISE()
        self.host_lines: list[str] = []    # Python statements computing host values
        self.args: list[tuple] = []        # (name, host expression text, is_bool)
        self.body: list[str] = []          # per-tensor statements (inside the kernel loop)
        self._hoisted: dict = {}

    def is_tensor(self, e):
        return bool(e.free_symbols & self.tensors)

    def _hoist(self, e):
        if not isinstance(e, sp.Basic) or e.is_Number or e in (sp.true, sp.false):
            return e
        if not self.is_tensor(e):
            if e not in self._hoisted:
                name = sp.Symbol(f"_h{len(self._hoisted)}")
                self._hoisted[e] = name
                self.args.append((name.name, self.host.doprint(e)))
            return self._hoisted[e]
        if isinstance(e, sp.Piecewise):
            return sp.Piecewise(*[(self._hoist(x), self._hoist(c)) if c != sp.true else (self._hoist(x), True)
                                  for x, c in e.args])
        if not e.args:
            return e
        return e.func(*[self._hoist(a) for a in e.args], evaluate=False)

    def assign(self, sym, expr, when=sp.true):
        if when == sp.false:
            return
        if not self.is_tensor(expr):
            line = f"{identifier(str(sym))} = {self.host.doprint(expr)}"
            self.host_lines.extend([f"if {self.host.doprint(when)}:", "    " + line] if when != sp.true else [line])
            return
        line = f"{identifier(str(sym))} = {self.el.doprint(self._hoist(expr))}"
        if when != sp.true:
            self.body.extend([f"if {self._hoist(when)}:", "    " + line])
        else:
            self.body.append(line)
        self.tensors.add(sym)
