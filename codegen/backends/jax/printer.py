"""The jax printer: elementwise update expressions as ``jax.numpy`` code, for one leaf of a pytree at a time.

Every value is a jax array or a number.  Two kinds of condition appear in a ``Piecewise``:

* **static** conditions read only the recipe's boolean and choice hyperparameters (``amsgrad``,
  ``hess_approx == 'price'``).  They are Python values when the transformation is built, also under
  ``optax.inject_hyperparams`` (which keeps booleans and strings static), so they print as Python conditional
  expressions: the branch not taken is never traced, and a state that only that branch reads is never created;
* **dynamic** conditions read numeric hyperparameters or the step count (``weight_decay != 0``, ``t == 1``),
  which may be traced (``jax.jit``, ``optax.inject_hyperparams``).  They print through the module's helpers
  ``_where``/``_and``/``_or``/``_not``: a condition that is a Python bool (the hyperparameters are plain numbers)
  picks its branch in Python, so the other is never computed; a traced one becomes ``jnp.where`` and
  ``jnp.logical_*``.  No Python control flow ever depends on a traced value.

Functions print from :attr:`JaxPrinter.KNOWN_FUNCTIONS` (sympy's ``known_functions`` model) or a ``_print_``
method of their own; any other function raises :class:`~blr_derive.core.errors.UnsupportedTarget`.
"""
from __future__ import annotations

import sympy as sp
from sympy.logic.boolalg import BooleanFunction
from sympy.printing.pycode import PythonCodePrinter

from blr_derive.codegen.printing import HostConditionalMixin, cosh_power_as_sech, stable_sech
from blr_derive.core.errors import UnsupportedTarget


def is_static(cond, static) -> bool:
    """Whether the condition reads only static symbols (names in ``static``)."""
    return all(s.name in static for s in cond.free_symbols)


def static_part(cond, static):
    """A condition on the static symbols only that holds wherever ``cond`` holds (each literal on a dynamic
    value, in negation normal form, replaced by true): the static guard of a value needed under ``cond``."""
    if cond in (sp.true, sp.false) or is_static(cond, static):
        return cond
    nnf = sp.to_nnf(cond) if isinstance(cond, BooleanFunction) else cond

    def over(c):
        if isinstance(c, (sp.And, sp.Or)):
            return c.func(*[over(a) for a in c.args])
        return c if is_static(c, static) else sp.true
    return over(nnf)


class JaxPrinter(HostConditionalMixin, PythonCodePrinter):
    """``jax.numpy`` expressions; ``static``: the names of the symbols that are Python values when traced."""

    MAXIMUM = "jnp.maximum"
    MINIMUM = "jnp.minimum"
    LOG = "jnp.log"
    LOG1P = "jnp.log1p"
    TARGET_NAME = "jax"

    #: sympy function name -> the jax function that computes it elementwise (no entry: UnsupportedTarget)
    KNOWN_FUNCTIONS = {
        "exp": "jnp.exp", "tanh": "jnp.tanh", "sin": "jnp.sin", "cos": "jnp.cos", "cosh": "jnp.cosh",
        "sinh": "jnp.sinh", "sign": "jnp.sign", "Abs": "jnp.abs", "sqrt": "jnp.sqrt", "expm1": "jnp.expm1",
        "atan": "jnp.arctan", "asin": "jnp.arcsin", "acos": "jnp.arccos", "tan": "jnp.tan", "atanh": "jnp.arctanh",
        "asinh": "jnp.arcsinh", "acosh": "jnp.arccosh", "floor": "jnp.floor", "ceiling": "jnp.ceil",
        "atan2": "jnp.arctan2", "loggamma": "jax.scipy.special.gammaln", "digamma": "jax.scipy.special.digamma",
        "erf": "jax.scipy.special.erf", "erfc": "jax.scipy.special.erfc", "ndtri": "jax.scipy.special.ndtri",
        "ndtr": "jax.scipy.special.ndtr", "log_ndtr": "jax.scipy.special.log_ndtr",
    }

    def __init__(self, static=()):
        super().__init__({"fully_qualified_modules": True, "standard": "python3"})
        self.static = set(static)

    def _print_Float(self, expr):
        return repr(float(expr))

    def _static(self, cond):
        return is_static(cond, self.static)

    # ------------------------------------------------------------------ conditions
    def _print_Piecewise(self, expr):
        if expr.args[-1].cond != sp.true:
            raise UnsupportedTarget(f"the jax target needs a default branch in {sp.sstr(expr)[:80]}")
        out = self._print(expr.args[-1].expr)
        for e, c in reversed(expr.args[:-1]):
            if c == sp.true:
                out = self._print(e)
            elif c == sp.false:
                continue
            elif self._static(c):
                out = f"({self._print(e)} if {self._print(c)} else {out})"
            else:
                stat = [a for a in sp.And.make_args(c) if self._static(a)] if isinstance(c, sp.And) else []
                dyn = [a for a in sp.And.make_args(c) if not self._static(a)] if stat else [c]
                value = f"_where({self._print(sp.And(*dyn))}, {self._print(e)}, {out})"
                out = f"({value} if {self._print(sp.And(*stat))} else {out})" if stat else value
        return out

    def _logic(self, expr, helper, python):
        if self._static(expr):
            return python(expr)
        return f"{helper}({', '.join(self._print(a) for a in expr.args)})"

    def _print_And(self, expr):
        return self._logic(expr, "_and", super()._print_And)

    def _print_Or(self, expr):
        return self._logic(expr, "_or", super()._print_Or)

    def _print_Not(self, expr):
        return self._logic(expr, "_not", super()._print_Not)

    def _print_BooleanTrue(self, expr):
        return "True"

    def _print_BooleanFalse(self, expr):
        return "False"

    # ------------------------------------------------------------------ arithmetic and functions
    def _print_Pow(self, expr, rational=False):
        sech = cosh_power_as_sech(expr)
        if sech is not None:
            return self._print(sech)
        b, e = expr.args
        if e == sp.Rational(1, 2):
            return f"jnp.sqrt({self._print(b)})"
        if e == sp.Rational(-1, 2):
            return f"(1/jnp.sqrt({self._print(b)}))"
        if e == -1:
            return f"(1/{self.parenthesize(b, 60)})"
        return f"{self.parenthesize(b, 60)}**{self.parenthesize(e, 60)}"

    def _print_known_function(self, expr):
        fn = self.KNOWN_FUNCTIONS.get(type(expr).__name__)
        if fn is None:
            return self._print_Function(expr)
        return f"{fn}({', '.join(self._print(a) for a in expr.args)})"

    def _print_Function(self, expr):
        raise UnsupportedTarget(f"the {self.TARGET_NAME} target cannot print {type(expr).__name__}")

    NAN_WHERE = "jnp.where({test}, {x}, jnp.nan)"
    WHERE = "jnp.where({test}, {a}, {b})"

    def _print_binary(self, expr):
        return f"jnp.where({self.parenthesize(expr.args[0], 0)} < 0, -1.0, 1.0)"

    def _print_sech(self, expr):
        return stable_sech(self._print(expr.args[0]), "jnp.abs", "jnp.exp")

    def _print_gamma(self, expr):
        return f"jnp.exp(jax.scipy.special.gammaln({self._print(expr.args[0])}))"

    def _print_polygamma(self, expr):
        n, x = expr.args
        return f"jax.scipy.special.polygamma({self._print(n)}, {self._print(x)})"

    def _print_softplus(self, expr):
        return f"jnp.logaddexp(0.0, {self._print(expr.args[0])})"

    def _print_logaddexp(self, expr):
        """log(e^x + e^y) of the exponential-sum lowering (codegen/expsums.py)."""
        return f"jnp.logaddexp({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    def _print_Heaviside(self, expr):
        # sympy's Heaviside(x, H0) is H0 at x = 0 (1/2 when H0 is not given), numpy.heaviside's second argument:
        # the same text as the numpy target prints (codegen/arrays/printer.py)
        h0 = expr.args[1] if len(expr.args) > 1 else sp.Rational(1, 2)
        return f"jnp.heaviside({self._print(expr.args[0])}, {self._print(h0)})"

    def _print_xlogy(self, expr):
        return f"jax.scipy.special.xlogy({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    def _print_logsumexp(self, expr):
        args = ", ".join(self._print(a) for a in expr.args)
        return f"jax.scipy.special.logsumexp(jnp.stack(jnp.broadcast_arrays({args})), axis=0)"


def _not_elementwise(self, expr):
    return self._print_Function(expr)


# sympy's Python printer prints its known functions from the math module, which cannot take a traced array: each is
# printed from KNOWN_FUNCTIONS (or by a _print_ method of its own above) or refused
for _name in PythonCodePrinter._kf:
    _fn = _name.split(".")[-1]
    _attr = f"_print_{_fn}"
    if getattr(JaxPrinter, _attr, None) is getattr(PythonCodePrinter, _attr, None):
        setattr(JaxPrinter, _attr, JaxPrinter._print_known_function
                if _fn in JaxPrinter.KNOWN_FUNCTIONS else _not_elementwise)
for _fn in JaxPrinter.KNOWN_FUNCTIONS:
    if getattr(JaxPrinter, f"_print_{_fn}", None) is getattr(PythonCodePrinter, f"_print_{_fn}", None):
        setattr(JaxPrinter, f"_print_{_fn}", JaxPrinter._print_known_function)
