"""jax target, factorized (several-block) recipes: plain jax.numpy functions mirroring the numpy target's
factorized module (codegen/backends/numpy/templates/factorized.py.j2).

The view is the numpy target's (:func:`~blr_derive.codegen.arrays.views.factorized_view`: the same lowering of the
plate, of the component axis and of the global blocks), printed with jax.numpy names: global expressions by
:class:`~blr_derive.codegen.backends.jax.functions.JnpPrinter`, the per-row program on all rows at once by
:class:`~blr_derive.codegen.backends.jax.rows.JnpRowBatchPrinter`, the lines of a component axis with ``jnp``
(one Python iteration per component: the component count is an array size, static under ``jax.jit``).  Where
the numpy target falls back to a Python loop over the rows, the template maps the per-row program over the rows
with ``jax.vmap`` and sums the statistics, so nothing in ``step`` branches or loops in Python on a traced value
and ``jax.jit(step)`` works; the symmetry check of a matrix is skipped for a traced value.
"""
from __future__ import annotations

from blr_derive.codegen.backends.jax.functions import HELPER_SOURCES, JnpPrinter, refuse_reserved
from blr_derive.codegen.backends.jax.rows import JnpRowBatchPrinter
from blr_derive.codegen.arrays.views import factorized_view
from blr_derive.codegen.backends.jax.context import FactorizedContext
from blr_derive.codegen.context import fields_of, render
from blr_derive.codegen.inert import identifier
from blr_derive.core.errors import UnsupportedTarget

#: the template of a factorized recipe
TEMPLATE = "factorized.py.j2"
#: the numpy printer's helpers the template defines in jax (any other one is quadrature or sampling); _check_domain
#: checks eager calls (a traced value is not checked)
HELPERS = frozenset({"_spd_solve", "_check_domain", "_logdet"})
#: the modules the numpy printer asks for -> their jax counterparts
MODULES = {"scipy.linalg": "jax.scipy.linalg", "scipy.special": "jax.scipy.special"}


def render_factorized(env, ir) -> str:
    """The module of a factorized recipe: ``init`` and a pure, ``jax.jit``-compatible ``step`` in jax.numpy."""
    _check(ir)
    printer = JnpPrinter()
    view = factorized_view(ir, printer, JnpRowBatchPrinter, xp="jnp")
    extra = sorted(printer.helpers - HELPERS)
    missing = sorted(set(printer.imports) - set(MODULES))
    if extra or missing:
        raise UnsupportedTarget(f"recipe '{ir.recipe}': the jax target writes a factorized recipe without quadrature "
                                f"or sampling only (it needs {', '.join(extra + missing)}: the numpy target)",
                                "approximations")
    plate = [identifier(name) for name, _, _, _ in ir.plate["data"]] if ir.plate is not None else []
    helpers = ["_array", "_need"] + sorted(printer.helpers)          # the single-family modules' helpers
    return render(env, TEMPLATE, FactorizedContext(
        **fields_of(view), imports=sorted(MODULES[m] for m in printer.imports), solve="_spd_solve" in printer.helpers,
        helper_sources=[HELPER_SOURCES[h] for h in helpers],
        plate=plate, index=identifier(str(ir.plate["index"])) if ir.plate is not None else None,
        step=None if ir.step_symbol is None else identifier(str(ir.step_symbol))))


def _check(ir):
    names = [v.name for v in ir.state + ir.data] + [h.name for h in ir.hyperparameters]
    if ir.plate is not None:
        names += [name for name, _, _, _ in ir.plate["data"]] + [name for name, _ in ir.plate["local_outputs"]]
    refuse_reserved(ir, (("blocks", names),))
