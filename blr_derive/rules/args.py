"""Reading a rule's arguments from a recipe (untrusted: every value is parsed by the restricted grammar, every
name validated, every unknown argument a located error)."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.matexpr import is_mat
from blr_derive.core.names import name_problem
from blr_derive.spec.hyper import compared_flag


#: the most a count argument may ask for, with what to write instead (docs/recipe-format.md, "Limits on counts"):
#: draws per step (every rule with ``samples``), quadrature nodes (``quadrature``, ``gauss_hermite``) and the
#: period in steps of ``kronecker_eigenbasis``'s refresh (``every``).  A count is checked where the recipe writes a
#: number and, where it names hyperparameters, at their defaults (``--hyper`` included).
COUNT_LIMITS = {
    "samples": (100_000, "a Monte Carlo estimate's error falls only as 1/sqrt(samples); draw fewer per step (the "
                        "steps average them further)"),
    "nodes": (1001, "more nodes add nothing in double precision (65 tanh-sinh or 32 Gauss-Hermite nodes already "
                    "integrate a smooth loss to rounding error)"),
    "every": (1_000_000, "a longer period never refreshes in practice"),
}


class Ctx:
    def __init__(self, D, approx):
        self.D = D
        self.r = D.recipe
        self.approx = approx
        self.args = dict(approx.args)

    def fail(self, msg):
        return SpecError(f"approximation '{self.approx.name}': {msg}", self.r.file, self.approx.line)

    def symbols(self):
        syms = dict(self.r.hyper_symbols())
        if self.D.step_symbol is not None:
            syms["t"] = self.D.step_symbol
        return syms

    def expr(self, key, default=None, logic=False):
        if key not in self.args:
            if default is None:
                raise self.fail(f"missing argument '{key}'")
            return default
        try:
            e = parse_expression(self.args.pop(key), self.symbols(), what=f"{self.approx.name}.{key}", logic=logic,
                                 choices=self.r.choices())
        except SpecError as exc:
            raise exc.located(self.r.file, self.approx.line) from None
        if not logic:
            flags = sorted(h.name for h in self.r.hyper if h.kind == "bool" and e.has(h.symbol))
            if flags:   # a flag as a number: the generated code reads it with bool(...), so 0.5 would become 1
                raise self.fail(f"argument '{key}': hyperparameter '{flags[0]}' is a flag (true/false), not a "
                                "number; give it a numeric default (e.g. 0.0) or use it in 'when'")
            if is_mat(e) and not e.free_symbols:
                raise self.fail(f"argument '{key}': a number or an expression of hyperparameters, not a matrix")
        return e

    def count(self, key, default=1):
        """A number of draws or nodes: a positive integer, or an expression of hyperparameters (required when
        ``default`` is None)."""
        e = self.expr(key, None if default is None else sp.Integer(default))
        if e.is_number and not (e.is_Integer and e >= 1):
            raise self.fail(f"{key} must be a positive integer (or an int hyperparameter), got {e}")
        limit, instead = COUNT_LIMITS.get(key, (None, None))
        if limit is None:
            return e
        if e.is_number:
            if e > limit:
                raise self.fail(f"{key} must be at most {limit}, got {e}: {instead}")
            return e
        # an expression of hyperparameters: checked at their defaults (a required one has none)
        defaults = {}
        for h in self.r.hyper:
            if h.kind in ("int", "float") and h.default is not None:
                defaults[h.symbol] = h.default
            elif h.kind == "tuple":
                defaults.update({es: v for (_, es), v in zip(h.elements, h.default)})
        at = e.xreplace({s: sp.Integer(v) if isinstance(v, int) else sp.Float(v) for s, v in defaults.items()})
        if at.is_number and at.is_real and not (float(at).is_integer() and at >= 1):
            shown = f"{float(at):g}"
            if e.is_Symbol:
                raise self.fail(f"{key}: the default of '{e}' is {shown}; a count is a positive integer")
            raise self.fail(f"{key} = {e} is {shown} at the hyperparameters' defaults; a count is a positive integer")
        if at.is_number and at.is_real and at > limit:
            shown = int(at) if float(at).is_integer() and abs(at) < 1e15 else f"{float(at):g}"   # --hyper: floats
            if e.is_Symbol:
                raise self.fail(f"{key}: the default of '{e}' is {shown}, more than {limit}: {instead}")
            names = " or ".join(f"'{s.name}'" for s in sorted(e.free_symbols & set(defaults), key=str))
            raise self.fail(f"{key} = {e} is {shown} at the hyperparameters' defaults, more than {limit}: "
                            f"{instead} (lower the default of {names})")
        return e

    def positive(self, key, default=None):
        """A strictly positive number, or an expression of hyperparameters."""
        e = self.expr(key, default)
        if e.is_number and not (e.is_real and e > 0):
            raise self.fail(f"{key} must be positive, got {e}")
        return e

    def name(self, key, default=None):
        v = self.args.pop(key, default)
        if v is None:
            raise self.fail(f"missing argument '{key}'")
        if not isinstance(v, str):
            raise self.fail(f"argument '{key}' must be a name")
        problem = name_problem(v)
        if problem is not None:
            raise self.fail(f"argument '{key}': {problem}")
        return v

    def view(self, key):
        """The symbol through which ``key`` (a parameter, a state, 'grad' or 'hess') currently enters the update;
        a name the update does not have is a located error (recipe arguments are untrusted)."""
        v = self.D.views.of(key) if isinstance(key, str) else None
        if v is None:
            if key in ("grad", "hess"):
                raise self.fail(f"the update has no {'gradient' if key == 'grad' else 'Hessian'} to act on")
            known = ", ".join(self.D.views.names())
            raise self.fail(f"'{key}' is not a parameter or state of this update (known: {known})")
        return v

    def when(self):
        if "when" not in self.args:
            return None
        w = self.expr("when", logic=True)
        if not isinstance(w, sp.logic.boolalg.Boolean) or (w.is_Symbol and w.is_real):
            raise self.fail(f"'when' must be a condition (a comparison or a boolean hyperparameter), got {w}")
        flag = compared_flag(w, self.r.hyper)
        if flag is not None:
            raise self.fail(f"'when': '{flag}' is a flag (true or false), compared in '{w}': a flag is a condition by "
                            f"itself; write when: {flag} or when: not {flag}")
        return w

    def done(self):
        if self.args:
            raise self.fail(f"unknown argument(s): {', '.join(sorted(self.args))}")
