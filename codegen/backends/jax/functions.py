"""jax target, single-family recipes that are not optax transformations: a module of plain ``jax.numpy``
functions (``init``, a pure ``step`` and whatever else the numpy target's module defines) that mirrors the numpy
target's module (codegen/backends/numpy: ``render``, templates/module.py.j2 and entry_points.py.j2).

It covers everything that module covers for one family:

* the state, data inputs and oracle values with the numpy module's ``SHAPES``/``SYMMETRIC`` checks (``_array``:
  elementwise ``"*"``/``"?"`` arrays, named dimensions, symmetric matrices; shapes are static under ``jax.jit``,
  and the symmetry of a traced value is not checked);
* Monte Carlo samples of q (normal and uniform draws, several draws per sample, rejection samplers as a
  ``jax.lax.while_loop``) from an explicit ``jax.random`` key, rank-based fitness shaping (stable ``jnp.argsort``),
  tanh-sinh quadrature nodes and Gauss-Hermite expectations (nodes computed on the host with numpy); the samples
  and nodes are a ``jax.lax.scan``, so ``step`` is traced once whatever their number;
* the family's parameter maps (``natural_parameters`` ... ``ordinary_from_expectation``, the last with the engine's
  Newton solver, blr_derive/core/newton.py, run on the host), the entry points besides ``init``/``step`` (e.g.
  federated ADMM's dual and server steps) and a recipe ``parameter``.

Every expression is printed by the numpy target's printer with its module names replaced by their ``jax.numpy``
/ ``jax.scipy`` counterparts (:class:`JnpPrinter`); ``Piecewise`` becomes ``jnp.where``, solves stay Cholesky solves
(``jax.scipy.linalg.cho_factor``/``cho_solve``), the scaled Bessel functions ``ive(0, x)``/``ive(1, x)`` of every
printer's lowering (codegen/scaled.py) are ``i0e``/``i1e``, and
``scipy.special.gammaincinv``, which jax lacks, is a Halley iteration on ``jax.scipy.special.gammainc``
(``_gammaincinv``).  Nothing in ``step`` branches in Python on a traced value, so
``jax.jit(step, static_argnames=STATIC_HYPERPARAMETERS)`` works: numbers may be traced; boolean, choice and
integer hyperparameters (sample and node counts) are Python values.  A recipe is refused (UnsupportedTarget, located
at its entry) when it needs a special function jax has no counterpart for (``kve``, ``ive`` of another order,
``betaincinv``, the Bessel-function derivative ``_dbesselk``) or declares a name the module binds itself
(:data:`RESERVED`: ``jax``, ``jnp``, ``numpy``, ``scipy``, ``key``)."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import sympy as sp

from blr_derive.codegen.arrays.printer import ArrayPrinter
from blr_derive.codegen.arrays.views import (NEWTON_SOURCE, PointView, checks_view, entry_view, hyperparameter_names, objective_estimate_view, objective_view, family_maps_view,
                                             module_shapes, shaping_view)
from blr_derive.codegen.backends.jax.context import FunctionsContext, FunctionsSamplingView
from blr_derive.codegen.inert import identifier
from blr_derive.codegen.source import SHARED, definition
from blr_derive.core.errors import UnsupportedTarget
from blr_derive.core.text import Prose

#: scipy.special functions that jax.scipy.special has under the same name
JAX_SPECIAL = frozenset({"gammaln", "digamma", "polygamma", "gamma", "factorial", "xlogy", "logsumexp",
                         "expit", "ndtri", "ndtr", "i0", "i1", "i0e", "i1e", "erf", "erfc"})
#: scipy.special functions that jax lacks, computed by a helper of the module (generic numerics)
#: (exp1: jax's hangs on an array holding a small argument, see the runtime's _exp1)
SPECIAL_HELPERS = {"gammaincinv": "_gammaincinv", "log_ndtr": "_log_ndtr", "exp1": "_exp1"}
_NUMPY = re.compile(r"(?<![\w.])numpy\.")
_SPECIAL = re.compile(r"(?<![\w.])scipy\.special\.([A-Za-z_][A-Za-z0-9_]*)")
#: names that a recipe's identifiers must not take: the modules and the ``key`` argument of ``step``
RESERVED = frozenset({"jax", "jnp", "numpy", "scipy", "key", "optax"})
#: hyperparameter kinds that are Python values in ``step`` (static under jax.jit)
STATIC_KINDS = ("bool", "choice", "int")

#: the target's runtime source (codegen/source.py)
RUNTIME = Path(__file__).parent / "runtime.py"
#: the module's helpers in jax, by the name the array printer gives them: the jax target's runtime source and the
#: one it shares with the numpy target (codegen/runtime/arrays.py); ``_tanh_sinh`` and the Gauss-Hermite nodes are
#: host constants (numpy), ``_newton_dual`` is the engine's solver (NEWTON_SOURCE)
HELPER_SOURCES = {
    **{name: definition(SHARED / "arrays.py", name) for name in ("_need", "_tanh_sinh", "_hermite_nodes")},
    **{name: definition(RUNTIME, name) for name in ("_array", "_check_domain", "_spd_solve", "_logdet", "_tri_solve", "_expm_sym",
                                                     "_gauss_hermite", "_gauss_hermite_stein", "_gammaincinv", "_log_ndtr",
                                                     "_eigenbasis", "_rayleigh_order", "_power_basis", "_reordered",
                                                     "_exp1", "_exp1e")},
}
#: the numpy printer's helpers that the module defines in jax (any other one is refused)
HELPERS = frozenset(HELPER_SOURCES)
#: helpers that run on the host with numpy
HOST_HELPERS = frozenset({"_tanh_sinh", "_gauss_hermite", "_gauss_hermite_stein", "_hermite_nodes"})


class JnpPrinter(ArrayPrinter):
    """The numpy target's printer with ``jax.numpy`` names: every ``numpy.f`` it prints is ``jnp.f`` and every
    ``scipy.special.f`` is ``jax.scipy.special.f``, or the module's helper for a function jax lacks
    (:data:`SPECIAL_HELPERS`); any other one is UnsupportedTarget."""

    def doprint(self, expr, assign_to=None):
        return self.postprocess(super().doprint(expr, assign_to))

    def postprocess(self, text):
        """The numpy printer's ``text`` with jax names (also for what the printer set aside: the ``_maxN`` locals of
        codegen.arrays.views._with_max_temps)."""
        text = _NUMPY.sub("jnp.", text)

        def special(m):
            name = m.group(1)
            if name in SPECIAL_HELPERS:
                self.helpers.add(SPECIAL_HELPERS[name])
                self.special = True         # the helper calls jax.scipy.special
                return SPECIAL_HELPERS[name]
            if name not in JAX_SPECIAL:
                raise UnsupportedTarget(f"the jax target has no jax.scipy.special.{name} (scipy.special.{name})")
            self.special = True
            return f"jax.scipy.special.{name}"
        return _SPECIAL.sub(special, text)

    special = False

    def _print_Or(self, expr):
        # numpy's logical_or.reduce over a tuple has no jax.numpy counterpart: fold the binary function
        out = self._print(expr.args[0])
        for a in expr.args[1:]:
            out = f"numpy.logical_or({out}, {self._print(a)})"
        return out

    def _print_And(self, expr):
        out = self._print(expr.args[0])
        for a in expr.args[1:]:
            out = f"numpy.logical_and({out}, {self._print(a)})"
        return out

    def _print_exp1e(self, expr):
        self.special = True             # the helper calls jax.scipy.special.exp1 (through _exp1)
        self.helpers.update(("_exp1e", "_exp1"))
        return f"_exp1e({self._print(expr.args[0])})"

    def _print_besseli(self, expr):
        # I_0 and I_1 are jax.scipy.special.i0/i1; another order has no jax counterpart (refused by doprint)
        nu, x = expr.args
        if nu in (0, 1):
            return f"scipy.special.i{int(nu)}({self._print(x)})"
        return super()._print_besseli(expr)

    def _print_besselie(self, expr):
        # the scaled I_0 and I_1 (codegen/scaled.py) are jax.scipy.special.i0e/i1e; another order has no jax
        # counterpart (scipy.special.ive: refused by doprint)
        nu, x = expr.args
        if nu in (0, 1):
            return f"scipy.special.i{int(nu)}e({self._print(x)})"
        return f"scipy.special.ive({self._print(nu)}, {self._print(x)})"

    def _print_Piecewise(self, expr):
        out = self._print(expr.args[-1].expr) if expr.args[-1].cond == sp.true else "jnp.nan"
        for e, c in reversed(expr.args[:-1] if expr.args[-1].cond == sp.true else expr.args):
            out = f"numpy.where({self._print(c)}, {self._print(e)}, {out})"
        return out


def check_functions(ir):
    """UnsupportedTarget, naming the recipe entry, where the module cannot be written: a name the module binds
    itself (:data:`RESERVED`) or a draw that is neither normal nor uniform.  (Special functions and helpers that
    jax lacks are refused while printing, by :func:`functions_view`.)"""
    refuse_reserved(ir, (("hyperparameters", hyperparameter_names(ir)),
                         ("family", [v.name for v in ir.state] + [str(d) for d, _, _ in ir.dims]),
                         ("loss", [v.name for v in ir.data] + [o for o, _ in ir.oracles])))   # data: the loss's
    sm = ir.sampling
    if sm is not None and sm.draw not in ("normal", "uniform", "tanh_sinh", "point"):
        raise UnsupportedTarget(f"recipe '{ir.recipe}': the jax target samples q with normal or uniform draws only "
                                f"(got '{sm.draw}')", "approximations")


def refuse_reserved(ir, groups):
    """UnsupportedTarget at the first recipe entry (``groups``: [(entry, names)]) that declares a name a jax module
    binds itself (:data:`RESERVED`); shared by the single-family and the factorized modules."""
    for key, names in groups:
        clash = sorted(set(names) & RESERVED)
        if clash:
            raise UnsupportedTarget(f"recipe '{ir.recipe}': the jax target needs names other than {', '.join(clash)} "
                                    f"(its modules and the random key of step); rename {', '.join(clash)}", key)



def _with_key(eps):
    """Entry points as this module takes them: the random source is ``key`` (a jax.random key), as ``step`` takes
    it, where the numpy module's is ``rng`` (the exact objective accepts it unused: docs/targets.md, "it takes what
    step takes"; it was ``rng=`` here, so ``objective(state, key=...)`` raised an unknown hyperparameter 'key')."""
    if eps is None:
        return None
    def doc(d):
        if isinstance(d, Prose):
            return Prose(d.text.replace("oracles and rng are", "oracles and key are"))
        return d.replace("oracles and rng are", "oracles and key are")

    fns = [dataclasses.replace(f, keywords=["key" if k == "rng" else k for k in f.keywords], doc=doc(f.doc))
           if f.keywords and "rng" in f.keywords else f for f in eps.functions]
    return dataclasses.replace(eps, functions=fns)

def functions_view(ir) -> FunctionsContext:
    """The template's view of a single-family recipe: the numpy module's view (codegen/arrays/views.py) printed by
    :class:`JnpPrinter`, with the sampling loop's parts for ``jax.lax.scan``."""
    check_functions(ir)
    pr = JnpPrinter()
    calls = [(pr.doprint(c.symbol), c.oracle, pr.doprint(c.argument)) for c in ir.oracle_calls]
    assigns = [(pr.doprint(s), pr.doprint(e)) for s, e in ir.assignments]
    outputs = [(name, pr.doprint(sym)) for name, sym in ir.outputs]
    inits = [(v.name, v.init_state, None if v.init_state else pr.doprint(v.init))
             for v in ir.state if v.init is not None]
    init_doc = {v.name: pr.doprint(v.init) for v in ir.state if v.init is not None}
    sampling = _sampling_view(ir, pr)
    maps = family_maps_view(ir, pr)
    entries = entry_view(ir, pr)
    objective = objective_view(SimpleNamespace(objective=_with_key(getattr(ir, "objective", None))), pr, "jnp")
    estimate = objective_estimate_view(ir, pr, "uniform", "normal", "with ``key`` (a jax.random key) split")
    point: PointView | None = None
    if ir.parameter is not None:                # what a model's weights hold (e.g. sign(lam))
        point = {"code": pr.doprint(ir.parameter),
                 "reads": [v.name for v in ir.state if v.symbol in ir.parameter.free_symbols]}
    checks = checks_view(ir.checks, pr, assigns=assigns)
    pr.helpers |= {"_array", "_need"}
    extra = sorted(pr.helpers - HELPERS)
    if extra:
        raise UnsupportedTarget(f"recipe '{ir.recipe}': the jax target has no jax counterpart of the numpy "
                                f"target's {', '.join(extra)}", "approximations")
    init_syms = set()
    for v in ir.state:
        if v.init is not None and v.init_state is None:
            init_syms |= v.init.free_symbols
    helpers = sorted(pr.helpers)
    return FunctionsContext(
        ir=ir, calls=calls, assigns=assigns, outputs=outputs, inits=inits, init_doc=init_doc,
        special=pr.special, solve=bool({"_spd_solve", "_tri_solve"} & pr.helpers),
        host=bool(set(helpers) & HOST_HELPERS) or maps is not None or (sampling is not None
                                                                        and sampling["shaping"] is not None),
        helper_sources=[HELPER_SOURCES[h] for h in helpers], sampling=sampling, maps=maps,
        newton=NEWTON_SOURCE if maps is not None else None, entries=entries, point=point,
        dims=[(identifier(str(d)), identifier(var), axis) for d, var, axis in ir.dims],
        init_hyper=[h for h in ir.hyperparameters if any(s in init_syms for s in h.symbols)],
        static=[h.name for h in ir.hyperparameters if h.kind in STATIC_KINDS],
        step=None if ir.step_symbol is None else identifier(str(ir.step_symbol)),
        shapes=module_shapes(ir), symmetric=sorted(ir.symmetric),
        first=identifier(ir.state[0].name), checks=checks, check_domains="_check_domain" in pr.helpers,
        objective=objective, estimate=estimate,
    )


def _sampling_view(ir, pr) -> FunctionsSamplingView | None:
    """Samples of q or quadrature nodes: the draws of a sample (in their order, each with its jax.random law),
    θ, the acceptance condition of a rejection sampler, the oracle calls at θ, the statistics and their running
    averages, and a fitness shaping (its weights printed for numpy on the host: they depend on n_samples alone)."""
    sm = ir.sampling
    if sm is None:
        return None
    if sm.draw == "tanh_sinh":
        pr.helpers.add("_tanh_sinh")
    law = {"normal": "normal", "uniform": "uniform"}
    draws = [] if sm.draw in ("tanh_sinh", "point") else \
        [(pr.doprint(sm.eps), law[sm.draw])] + [(pr.doprint(d), law[w]) for d, w in getattr(sm, "more_draws", [])]
    theta = pr.doprint(sm.theta)
    calls = [(pr.doprint(s), o) for s, o in sm.calls]
    stats = [(pr.doprint(a), pr.doprint(e)) for a, e in sm.stats]
    host = ArrayPrinter()
    shaping = shaping_view(sm, host)
    if shaping is not None:
        if host.imports or host.helpers:
            raise UnsupportedTarget(f"recipe '{ir.recipe}': the jax target computes the fitness shaping's weights "
                                    "with numpy alone", "approximations")
        kept = [d for d, _ in draws] + [theta] + [c for c, _ in calls]
        shaping["call"] = pr.doprint(sm.shaping.call)
        shaping["kept"] = kept
    return FunctionsSamplingView(
        samples=pr.doprint(sm.samples), eps=pr.doprint(sm.eps), quadrature=sm.draw == "tanh_sinh",
        draws=draws, theta=theta, theta_expr=pr.doprint(sm.theta_expr),
        accept=pr.doprint(sm.accept) if getattr(sm, "accept", None) is not None else None,
        calls=calls, stats=stats, point=sm.draw == "point",
        reductions=[(pr.doprint(r), pr.doprint(e)) for r, e in sm.reductions],
        chained=[(pr.doprint(c[0]), c[1], pr.doprint(c[2]), pr.doprint(c[3])) for c in sm.chained],
        shaping=shaping, avgs=[a for a, _ in stats],
        # a matrix statistic (the full Gaussian's score) starts from zeros of its own shape, not the first state's
        shapes=[f"shape=({pr.doprint(a.shape[0])}, {pr.doprint(a.shape[1])})"
                if isinstance(a, sp.MatrixSymbol) and a.shape[1] != 1 else None for a, _ in sm.stats])
