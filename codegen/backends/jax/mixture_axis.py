"""jax target, a mixture whose components are an array axis (``components: K``): the numpy target's lowering
(codegen/arrays/mixture_axis.py: batched einsum/matmul over the component axes, a stable log-softmax
over the components) printed with ``jnp`` and rendered by the plain-functions template (templates/functions.py.j2).
The component count is an array length, static under ``jax.jit``: the oracle calls, one per component mean, are a
Python loop of K calls at trace time; everything else is one batched operation.
"""
from __future__ import annotations

from blr_derive.codegen.backends.jax.functions import HELPER_SOURCES, HELPERS, STATIC_KINDS, JnpPrinter, \
    check_functions
from blr_derive.codegen.arrays import mixture_axis
from blr_derive.codegen.arrays.views import checks_view, module_shapes
from blr_derive.codegen.backends.jax.context import FunctionsContext
from blr_derive.codegen.context import render
from blr_derive.codegen.inert import identifier
from blr_derive.core.errors import UnsupportedTarget

#: the template (the single-family plain-functions module)
TEMPLATE = "functions.py.j2"


def render_component_axis(env, ir) -> str:
    check_functions(ir)
    pr = JnpPrinter()
    ap, calls, assigns, outputs = mixture_axis.lower(ir, pr, xp="jnp")
    shapes, symmetric = mixture_axis.shapes(ir, module_shapes)
    checks = checks_view(ir.checks, ap, pr, calls + assigns)
    pr.helpers |= {"_array", "_need"}
    extra = sorted(pr.helpers - HELPERS)
    if extra:
        raise UnsupportedTarget(f"recipe '{ir.recipe}': the jax target has no jax counterpart of the numpy "
                                f"target's {', '.join(extra)}", "approximations")
    helpers = sorted(pr.helpers)
    return render(env, TEMPLATE, FunctionsContext(
        ir=ir, calls=[], assigns=calls + assigns, outputs=outputs, inits=[], init_doc={}, special=pr.special,
        solve="_spd_solve" in pr.helpers, host=False, helper_sources=[HELPER_SOURCES[h] for h in helpers],
        sampling=None, maps=None, newton=None, entries=None, point=None,
        dims=[(identifier(str(d)), identifier(var), axis) for d, var, axis in ir.dims], init_hyper=[],
        static=[h.name for h in ir.hyperparameters if h.kind in STATIC_KINDS], step=None, shapes=shapes,
        symmetric=symmetric, first=identifier(ir.state[0].name), checks=checks,
        check_domains="_check_domain" in pr.helpers))
