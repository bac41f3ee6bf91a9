"""NumPy target: a plain module with ``init`` and a pure ``step`` function."""
from __future__ import annotations

from pathlib import Path

from blr_derive.codegen.arrays import mixture_axis
from blr_derive.codegen.arrays.rows import RowBatchPrinter
from blr_derive.codegen.arrays.views import (PointView, checks_view, entry_view, objective_estimate_view, objective_view, factorized_view, family_maps_view,
                                             module_shapes, own_shape_zeros, shaping_view)
from blr_derive.codegen.backends.numpy.config import CONFIG
from blr_derive.codegen.backends.numpy.context import FactorizedContext, ModuleContext, SamplingView
from blr_derive.codegen.context import fields_of, render
from blr_derive.codegen.backends.numpy.printer import HELPERS, BLRNumPyPrinter
from blr_derive.codegen.inert import template_env
from blr_derive.codegen.model import structure_of


class NumpyTarget:
    config = CONFIG
    name = CONFIG.name
    suffix = CONFIG.suffix
    modules = CONFIG.modules
    template = CONFIG.template

    def __init__(self):
        self.env = template_env(Path(__file__).parent / "templates")

    def render(self, ir) -> str:
        if structure_of(ir) == "product":
            return self.render_factorized(ir)
        if getattr(ir, "components", None) is not None:     # a mixture with the components as an array axis
            return self.render_component_axis(ir)
        printer = BLRNumPyPrinter()
        calls = [(printer.doprint(c.symbol), c.oracle, printer.doprint(c.argument), c.description)
                 for c in ir.oracle_calls]
        assigns = [(printer.doprint(s), printer.doprint(e)) for s, e in ir.assignments]
        dims = [(str(d), var, axis) for d, var, axis in ir.dims]
        sampling: SamplingView | None = None
        if ir.sampling is not None:
            sm = ir.sampling
            if sm.draw == "tanh_sinh":
                printer.helpers.add("_tanh_sinh")
            sampling = {
                "samples": printer.doprint(sm.samples), "eps": printer.doprint(sm.eps),
                "draw": "standard_normal" if sm.draw == "normal" else "random",
                "quadrature": sm.draw == "tanh_sinh",
                "more": [(printer.doprint(d), "standard_normal" if law == "normal" else "random")
                         for d, law in getattr(sm, "more_draws", [])],
                "theta": printer.doprint(sm.theta), "theta_expr": printer.doprint(sm.theta_expr),
                "accept": printer.doprint(sm.accept) if getattr(sm, "accept", None) is not None else None,
                "calls": [(printer.doprint(s), o) for s, o in sm.calls],
                "stats": [(printer.doprint(a), printer.doprint(e)) for a, e in sm.stats],
                "shaping": shaping_view(sm, printer),
                "point": sm.draw == "point",
                "reductions": [(printer.doprint(r), printer.doprint(e)) for r, e in sm.reductions],
                "chained": [(printer.doprint(c[0]), c[1], printer.doprint(c[2]), printer.doprint(c[3]))
                            for c in sm.chained],
                "zeros": own_shape_zeros(ir, printer),
            }
            if sampling["shaping"] is not None:      # what each sample keeps until the values are ranked
                kept = [sampling["eps"]] + [d for d, _ in sampling["more"]] + [sampling["theta"]] \
                    + [c for c, _ in sampling["calls"]]
                sampling["shaping"]["kept"] = kept
                sampling["shaping"]["index"] = kept.index(sampling["shaping"]["call"])
        maps = family_maps_view(ir, printer)
        entries = entry_view(ir, printer)
        objective = objective_view(ir, printer, "numpy")
        estimate = objective_estimate_view(ir, printer, "random", "standard_normal", "with ``rng`` (numpy's Generator)")
        point: PointView | None = None
        if getattr(ir, "parameter", None) is not None:      # what a model's weights hold (e.g. sign(lam))
            point = {"code": printer.doprint(ir.parameter),
                     "reads": [v.name for v in ir.state if v.symbol in ir.parameter.free_symbols]}
        init_syms = set()
        for v in ir.state:
            if v.init is not None and v.init_state is None:
                init_syms |= v.init.free_symbols
        shapes = module_shapes(ir)
        checks = checks_view(ir.checks, printer, assigns=assigns)
        printer.helpers |= {"_array", "_need"}
        out = render(self.env, self.template, ModuleContext(
            ir=ir, calls=calls, assigns=assigns, dims=dims, helpers=sorted(printer.helpers),
            helper_sources=[HELPERS[h] for h in sorted(printer.helpers)], sampling=sampling,
            imports=sorted(printer.imports), maps=maps,
            state_names=[v.name for v in ir.state], printer=printer,
            init_hyper=[h for h in ir.hyperparameters if any(s in init_syms for s in h.symbols)], entries=entries,
            point=point, shapes=shapes, symmetric=sorted(ir.symmetric), checks=checks, objective=objective,
            estimate=estimate,
        ))
        return out

    def render_component_axis(self, ir) -> str:
        """A mixture whose components are an array axis: the module of a single family, its program printed on
        arrays with the component axes first (codegen/arrays/mixture_axis.py)."""
        printer = BLRNumPyPrinter()
        ap, calls, assigns, outputs = mixture_axis.lower(ir, printer)
        shapes, symmetric = mixture_axis.shapes(ir, module_shapes)
        checks = checks_view(ir.checks, ap, printer, calls + assigns)
        printer.helpers |= {"_array", "_need"}
        return render(self.env, self.template, ModuleContext(
            ir=ir, calls=[], assigns=calls + assigns, dims=[(str(d), var, axis) for d, var, axis in ir.dims],
            helpers=sorted(printer.helpers), helper_sources=[HELPERS[h] for h in sorted(printer.helpers)],
            sampling=None, imports=sorted(printer.imports), maps=None, state_names=[v.name for v in ir.state],
            printer=ap, init_hyper=[], entries=None, point=None, shapes=shapes, symmetric=symmetric, checks=checks))

    def render_factorized(self, ir) -> str:
        """A factorized recipe: a plate loop for the local blocks and statistics, then the global blocks."""
        view = factorized_view(ir, BLRNumPyPrinter(), RowBatchPrinter)
        printer = view.printer
        printer.helpers |= {"_array", "_need"}
        return render(self.env, "factorized.py.j2", FactorizedContext(
            **fields_of(view), helper_sources=[HELPERS[h] for h in sorted(printer.helpers)],
            imports=sorted(printer.imports)))


TARGET = NumpyTarget()
