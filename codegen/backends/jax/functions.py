"""jax target, matrix recipes: a module of plain ``jax.numpy`` functions (``init`` and a pure ``step``) that
mirrors the numpy target's module.

The subset: a single family whose update is not elementwise (full-covariance Gaussians, Wishart families ...),
without samples of q or quadrature, family maps, entry points or a recipe ``parameter``.  The update IR is
printed by the numpy target's printer (codegen/backends/numpy/printer.py) with its module names replaced by
their ``jax.numpy`` / ``jax.scipy`` counterparts (:class:`JnpPrinter`); ``Piecewise`` becomes ``jnp.where``, and
solves with the updated precision stay Cholesky solves (``jax.scipy.linalg.cho_factor``/``cho_solve``).  Nothing
in ``step`` branches in Python on a traced value, so ``jax.jit(step)`` works (numbers may be traced; boolean and
choice hyperparameters, none in the catalog's subset, are Python values)."""
from __future__ import annotations

import re

import sympy as sp

from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
from blr_derive.codegen.inert import identifier
from blr_derive.core.errors import UnsupportedTarget

#: scipy.special functions that jax.scipy.special has under the same name (any other is refused)
JAX_SPECIAL = frozenset({"exp1", "gammaln", "digamma", "polygamma", "gamma", "factorial", "xlogy", "logsumexp",
                         "expit", "ndtri"})
#: the numpy printer's helpers that the template defines in jax (any other one is quadrature or sampling)
HELPERS = frozenset({"_spd_solve"})
_NUMPY = re.compile(r"(?<![\w.])numpy\.")
_SPECIAL = re.compile(r"(?<![\w.])scipy\.special\.([A-Za-z_][A-Za-z0-9_]*)")
#: module names that a recipe's identifiers must not shadow in the generated module
RESERVED = frozenset({"jax", "jnp", "numpy", "scipy"})


class JnpPrinter(BLRNumPyPrinter):
    """The numpy target's printer with ``jax.numpy`` names: every ``numpy.f`` it prints is ``jnp.f`` and every
    ``scipy.special.f`` is ``jax.scipy.special.f`` (a function jax lacks is UnsupportedTarget)."""

    def doprint(self, expr, assign_to=None):
        text = _NUMPY.sub("jnp.", super().doprint(expr, assign_to))

        def special(m):
            if m.group(1) not in JAX_SPECIAL:
                raise UnsupportedTarget(f"the jax target has no jax.scipy.special.{m.group(1)}")
            self.special = True
            return f"jax.scipy.special.{m.group(1)}"
        return _SPECIAL.sub(special, text)

    special = False

    def _print_Piecewise(self, expr):
        out = self._print(expr.args[-1].expr) if expr.args[-1].cond == sp.true else "jnp.nan"
        for e, c in reversed(expr.args[:-1] if expr.args[-1].cond == sp.true else expr.args):
            out = f"numpy.where({self._print(c)}, {self._print(e)}, {out})"
        return out


def check_functions(ir):
    """UnsupportedTarget, naming the recipe entry, unless the recipe is in the subset rendered as functions."""
    def no(msg, key):
        raise UnsupportedTarget(f"recipe '{ir.recipe}': the jax target {msg}", key)
    if ir.sampling is not None:
        what = "quadrature nodes" if ir.sampling.draw == "tanh_sinh" else "samples of q"
        no(f"writes a matrix (non-elementwise) update as jax.numpy functions without {what} only (the numpy "
           "target)", "approximations")
    if getattr(ir, "components", None) is not None:
        no("writes a matrix update without a component axis only (the numpy target)", "family")
    if ir.family_maps:
        no("writes a matrix update without the family's parameter maps only (the numpy target)", "family")
    if ir.entry_points is not None:
        no("writes a matrix update with init and step only; the recipe has more entry points (the numpy target)",
           "approximations")
    if getattr(ir, "parameter", None) is not None:
        no("writes a matrix update without a recipe 'parameter' only (the numpy target)", "parameter")
    names = [v.name for v in ir.state + ir.data] + [h.name for h in ir.hyperparameters] + [o for o, _ in ir.oracles]
    clash = sorted(set(names) & RESERVED)
    if clash:
        no(f"needs names other than {', '.join(clash)} (its modules)", "family")


def functions_view(ir):
    """The template's view of a recipe in the subset: the update IR printed by :class:`JnpPrinter`."""
    check_functions(ir)
    pr = JnpPrinter()
    calls = [(pr.doprint(c.symbol), c.oracle, pr.doprint(c.argument)) for c in ir.oracle_calls]
    assigns = [(pr.doprint(s), pr.doprint(e)) for s, e in ir.assignments]
    outputs = [(name, pr.doprint(sym)) for name, sym in ir.outputs]
    inits = [(v.name, v.init_state, None if v.init_state else pr.doprint(v.init))
             for v in ir.state if v.init is not None]
    extra = sorted(pr.helpers - HELPERS)
    if extra:
        raise UnsupportedTarget(f"recipe '{ir.recipe}': the jax target writes a matrix update as jax.numpy functions "
                                f"without quadrature or sampling only (it needs {', '.join(extra)}: the numpy target)",
                                "approximations")
    init_syms = set()
    for v in ir.state:
        if v.init is not None and v.init_state is None:
            init_syms |= v.init.free_symbols
    return dict(
        ir=ir, calls=calls, assigns=assigns, outputs=outputs, inits=inits, special=pr.special,
        dims=[(identifier(str(d)), identifier(var), axis) for d, var, axis in ir.dims],
        solve="_spd_solve" in pr.helpers,
        init_hyper=[h for h in ir.hyperparameters if any(s in init_syms for s in h.symbols)],
        step=None if ir.step_symbol is None else identifier(str(ir.step_symbol)),
    )
