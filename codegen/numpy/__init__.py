"""NumPy target: a plain module with ``init`` and a pure ``step`` function."""
from __future__ import annotations

import json
from pathlib import Path

import jinja2

from .printer import HELPERS, BLRNumPyPrinter


class NumpyTarget:
    name = "numpy"
    suffix = ".py"
    template = "module.py.j2"

    def __init__(self):
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
            keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
        )
        self.env.filters["q"] = lambda s: json.dumps(str(s), ensure_ascii=False)
        self.env.globals["pyval"] = pyval

    def render(self, ir) -> str:
        printer = BLRNumPyPrinter()
        calls = [(printer.doprint(c.symbol), c.oracle, printer.doprint(c.argument), c.description)
                 for c in ir.oracle_calls]
        assigns = [(printer.doprint(s), printer.doprint(e)) for s, e in ir.assignments]
        dims = [(str(d), var, axis) for d, var, axis in ir.dims]
        out = self.env.get_template(self.template).render(
            ir=ir, calls=calls, assigns=assigns, dims=dims, helpers=sorted(printer.helpers), helper_sources=[HELPERS[h] for h in sorted(printer.helpers)],
            state_names=[v.name for v in ir.state], printer=printer,
        )
        return out


def pyval(v):
    """A Python literal for a hyperparameter default (deterministic)."""
    if isinstance(v, bool):
        return repr(v)
    if isinstance(v, tuple):
        return "(" + ", ".join(pyval(x) for x in v) + ")"
    return repr(float(v))


TARGET = NumpyTarget()
