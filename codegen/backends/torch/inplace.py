"""Buffer planning for the torch target's default (multi-tensor) path, as torch's own foreach optimizers do it.

:class:`~codegen.backends.torch.printer.ForeachCompiler` prints each operation of an update into a fresh
tensor list.  :class:`PlannedCompiler` prints the same program with three transformations, all decided from
the IR alone (no algorithm is named):

* **inlining** (:mod:`codegen.backends.torch.inline`) — an intermediate tensor value read by exactly one later
  assignment is substituted into it, so
  host factors fold into one coefficient (``u_hat = c·u`` read once by ``m - lr·u_hat/…`` becomes one
  ``addcdiv_`` with value ``-lr·c``);
* **in-place temporaries** — a temporary that nothing reads any more is updated in place (``sqrt_``,
  ``add_``, ``mul_``) instead of allocating the next one;
* **state updated in place** — a new state value whose old value no later assignment reads is computed in the
  state's own tensors (liveness): ``a·x + (1-a)·y`` as ``lerp_``, ``c·x + Σ terms`` as ``mul_`` then
  ``add_``/``addcmul_``/``addcdiv_``, ``x·y`` as ``mul_``, ``max(x, y)`` as ``maximum_``, host ``Piecewise`` as
  ``if`` blocks.  The parameter itself is a state (the mean), so the last step writes into it directly.

The values are those of the unplanned program (same operations on the same operands, up to the order of
floating-point additions in ``lerp``), checked against torch.optim and the numpy target by the tests.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.codegen.backends.torch.inline import _occurrences
from blr_derive.codegen.inert import identifier
from blr_derive.codegen.backends.torch.printer import UNARY, ElementwisePrinter, scaled_root
from blr_derive.codegen.printing import HostPrinter
from blr_derive.core.errors import UnsupportedTarget

class PlannedCompiler:
    """Compile a whole elementwise program (``assignments`` in order) into ``_foreach`` statements with the
    buffer plan above.  ``tensors``: symbols bound to tensor lists; ``dests``: output symbol -> (state list
    name, state symbol) of values that may be computed in their state's tensors; ``final``: symbols read after
    the program (the outputs and what the parameter holds)."""

    def __init__(self, tensors, dests, final, indent="            ", step=None):
        self.step = step           # the step count's symbol: a host test of it is a select when compiling
        self.tensors = set(tensors)
        self.dests = dict(dests)
        self.final = set(final)
        self.host = HostPrinter()
        self.lines: list[str] = []
        self.indent = indent
        self.n = 0
        self.binding = {}          # symbol -> list name it is bound to
        self.temps = set()         # list names this program allocated
        self.later = set()         # symbols read after the assignment being compiled
        self.expr = None           # the expression being compiled
        self.host_defs = {}        # host symbol -> its definition (to recognise c·old + (1 − c)·x through a name)

    # --------------------------------------------------------------------------------------- helpers
    def emit(self, line):
        self.lines.append(self.indent + line)

    def tmp(self):
        self.n += 1
        name = f"_f{self.n}"
        self.temps.add(name)
        return name

    def is_tensor(self, e):
        return bool(e.free_symbols & self.tensors)

    def h(self, e):
        return self.host.doprint(e)

    def name_of(self, sym):
        return self.binding.get(sym, identifier(sym.name))

    # --------------------------------------------------------------------------------------- the printed operations
    # Every operation the plan decides is printed by one of these methods: here as a multi-tensor (``_foreach``)
    # statement over lists, in codegen/backends/torch/kernel.py as the same operation on one tensor (the fused
    # kernel), so that both paths compute each element by the same operations in the same order.
    def op_(self, x, op, *args):
        """``x`` = op(x, *args) in place (``op``: a torch operation's name: mul, div, add, sqrt, lerp, ...)."""
        self.emit(f"torch._foreach_{op}_({x}{''.join(f', {a}' for a in args)})")

    def op(self, out, x, op, *args):
        """``out`` = op(x, *args), a new value."""
        self.emit(f"{out} = torch._foreach_{op}({x}{''.join(f', {a}' for a in args)})")

    def accumulate(self, op, acc, xs, c=None, into=None):
        """acc + c·x (``op`` add, ``xs`` = (x,)), acc + c·x·y (addcmul) or acc + c·x/y (addcdiv), in ``acc``
        or (``into``) as a new value; ``c`` None: 1."""
        args = "".join(f", {x}" for x in xs) + ("" if c is None else f", {'alpha' if op == 'add' else 'value'}={c}")
        head, tail = ("", "_") if into is None else (f"{into} = ", "")
        self.emit(f"{head}torch._foreach_{op}{tail}({acc}{args})")

    def bound_(self, fn, acc, arg, host=False):
        """acc = max(acc, arg) (``fn`` 'maximum') or min, in place; ``host``: arg is a host number."""
        if host:                # a host bound at its infinity changes nothing (NaN stays NaN): the pass over every
            # tensor is skipped then, e.g. for an elementwise clip that is off
            self.emit(f"if {arg} != {'-' if fn == 'maximum' else ''}math.inf:")
            self.emit(f"    _foreach_bound_({fn!r}, {acc}, {arg})")
        else:                   # the helpers handle DTensors (FSDP2), which lack these kernels
            self.emit(f"_foreach_bound_({fn!r}, {acc}, {arg})")

    def bound(self, out, fn, acc, arg, host=False):
        """out = max(acc, arg) or min, a new value; ``host``: arg is a host number."""
        self.emit(f"{out} = _foreach_bound({fn!r}, {acc}, {arg})")

    def copy(self, dst, src):
        self.emit(f"_foreach_copy({dst}, {src})")

    def positive(self, test):
        """The host condition test > 0 (see printer.scaled_root)."""
        return f"_positive({self.h(test)})"

    def per_tensor(self, out, e, names):
        """out = the function ``e`` of its arguments (``names``: the lists holding its tensor arguments, None for
        a host argument), printed elementwise and applied tensor by tensor (no multi-tensor kernel)."""
        loc = [sp.Symbol(f"_a{i}") for i in range(len(e.args))]
        body = ElementwisePrinter().doprint(e.func(*[l if n is not None else a for l, n, a in zip(loc, names, e.args)]))
        lists = [n for n in names if n is not None]
        vars_ = [str(l) for l, n in zip(loc, names) if n is not None]
        source = lists[0] if len(lists) == 1 else f"zip({', '.join(lists)})"
        self.emit(f"{out} = [{body} for {', '.join(vars_)} in {source}]")

    def _split(self, e):
        if isinstance(e, sp.Mul):
            return (sp.Mul(*[a for a in e.args if not self.is_tensor(a)]),
                    sp.Mul(*[a for a in e.args if self.is_tensor(a)]))
        return sp.Integer(1), e

    # --------------------------------------------------------------------------------------- program
    def compile_program(self, assignments, need):
        for k, (sym, expr) in enumerate(assignments):
            self.later = set().union(*[e.free_symbols for _, e in assignments[k + 1:]]) if k + 1 < len(assignments) \
                else set()
            self.assign(sym, expr, need.get(sym, sp.true))
        return self.lines

    def assign(self, sym, expr, when=sp.true):
        if when == sp.false:
            return
        if not self.is_tensor(expr):
            self.host_assign(sym, expr, when)
            if when == sp.true:
                self.host_defs[sym] = expr.xreplace(self.host_defs)
            return
        cond = when != sp.true
        if cond:
            self.emit(f"if {self.h(when)}:")
            self.indent += "    "
        self.expr = expr
        dest = self.dests.get(sym)
        if dest is not None and not cond and self._dest_free(dest, expr):
            self.compile_into(expr, *dest)
            self.binding[sym] = dest[0]
            self.emit(f"{identifier(str(sym))} = {dest[0]}")
        else:
            name, _ = self.compile(expr, target=identifier(str(sym)))
            if name != str(sym):
                self.emit(f"{identifier(str(sym))} = {name}")
                if name in self.temps:
                    self.binding[sym] = name
        self.tensors.add(sym)
        if cond:
            self.indent = self.indent[:-4]

    def host_assign(self, sym, expr, when):
        """A host value (a number of the hyperparameters and the step count), computed where the program runs."""
        if when != sp.true:
            self.emit(f"if {self.h(when)}:")
        self.emit(("    " if when != sp.true else "") + f"{identifier(str(sym))} = {self.h(expr)}")

    def _dest_free(self, dest, expr):
        """The state's old value is read by no later assignment (so its tensors may take the new value), and
        the new value reads the state's tensors through its old symbol only."""
        lst, old = dest
        if any(s != old and self.name_of(s) == lst for s in expr.free_symbols):
            return False
        return not any(self.name_of(s) == lst or s == old for s in self.later)

    # --------------------------------------------------------------------------------------- into a state
    def compile_into(self, e, lst, old):
        if e == old:
            return
        if isinstance(e, sp.Piecewise) and all(not self.is_tensor(c) for _, c in e.args):
            conds = self._traced_conditions(e)
            if conds is not None:           # compiled: a select of the branches; eager: the branches as below
                # a count known on the host (an int: SGD's, from whether the state was just created) keeps its
                # branch, on which the compiled graph specializes; a traced count (a float read from the step
                # tensor) takes the select
                self.emit(f"if torch.compiler.is_compiling() and not isinstance({self.h(self.step)}, int):")
                self.indent += "    "
                self._select_into(e, lst, conds)
                self.indent = self.indent[:-4]
                self.emit("else:")
                self.indent += "    "
                self._branches_into(e, lst, old)
                self.indent = self.indent[:-4]
                return
            self._branches_into(e, lst, old)
            return
        if isinstance(e, sp.Add) and self._into_add(e, lst, old):
            return
        if isinstance(e, sp.Mul) and e.args.count(old) == 1 and _occurrences(e, old) == 1:
            c, rest = self._split(sp.Mul(*[a for a in e.args if a != old]))
            if rest != 1:
                self._accumulate_factor(lst, rest)
            if c != 1:
                self.op_(lst, "mul", self.h(c))
            return
        if isinstance(e, (sp.Max, sp.Min)) and old in e.args and _occurrences(e, old) == 1:
            fn = "maximum" if isinstance(e, sp.Max) else "minimum"
            for a in e.args:
                if a != old:
                    self.bound_(fn, lst, self.compile(a)[0] if self.is_tensor(a) else self.h(a))
            return
        name, _ = self.compile(e)
        self.copy(lst, name)

    def _branches_into(self, e, lst, old):
        """A host Piecewise into a state: one ``if``/``elif`` block per branch."""
        for i, (x, c) in enumerate(e.args):
            self.emit("else:" if c == sp.true else f"{'if' if i == 0 else 'elif'} {self.h(c)}:")
            self.indent += "    "
            n = len(self.lines)
            self.compile_into(x, lst, old)
            if len(self.lines) == n:
                self.emit("pass")
            self.indent = self.indent[:-4]

    def _traced_conditions(self, e):
        """The *select* convention, for a whole step under torch.compile: the conditions of a host Piecewise
        that tests the step count (the start of a running average, ``t == 1``), printed as tests of a 0-d
        tensor holding the count (``_step_t``), so the branch is chosen by ``torch.where`` in the graph
        instead of a comparison of a traced number on the host (a graph break).  None when no condition reads
        the count or one is not a comparison (and/or/not of comparisons) of host numbers."""
        if self.step is None or not any(c.has(self.step) for _, c in e.args):
            return None
        stand_in = sp.Symbol("_step_t", real=True)

        def text(c):
            if c == sp.true:
                return "True"
            if isinstance(c, (sp.And, sp.Or)):
                parts = [text(a) for a in c.args]
                return None if None in parts else "(" + (" & " if isinstance(c, sp.And) else " | ").join(parts) + ")"
            if isinstance(c, sp.Not):
                inner = text(c.args[0])
                return None if inner is None else f"(~{inner})"
            if isinstance(c, sp.core.relational.Relational):
                if not c.has(self.step):                    # a test of hyperparameters alone: a Python bool
                    return f"bool({self.h(c)})"
                return self.h(c.xreplace({self.step: stand_in}))
            return None
        conds = [text(c) for _, c in e.args]
        return None if None in conds else conds

    def _select_into(self, e, lst, conds):
        """``lst`` = the branch whose condition holds first, by ``torch.where`` per tensor (every branch
        computed: a select, not a jump; the same values as the branches)."""
        vals = []
        for x, _ in e.args:
            vals.append((self.compile(x)[0], True) if self.is_tensor(x) else (self.h(x), False))
        names = [f"_x{k}" for k in range(len(vals))]
        out = names[-1] if vals[-1][1] else vals[-1][0]
        for k in range(len(vals) - 2, -1, -1):
            out = f"torch.where({conds[k]}, {names[k] if vals[k][1] else vals[k][0]}, {out})"
        lists = [(n, v) for n, (v, is_list) in zip(names, vals) if is_list]
        self.emit(f"_step_t = torch.scalar_tensor({self.h(self.step)}, dtype=torch.float64, device={lst}[0].device)")
        self.emit(f"_foreach_copy({lst}, [{out} for {', '.join(n for n, _ in lists)}{',' if len(lists) == 1 else ''} "
                  f"in zip({', '.join(v for _, v in lists)})])")

    def _into_add(self, e, lst, old):
        """``c·old + Σ terms`` in the state's tensors (False when ``old`` is not one linear term)."""
        with_old = [a for a in e.args if a.has(old)]
        if not with_old:
            return False
        coefs = []
        for a in with_old:                      # old·(c₁ + c₂ + …): the terms linear in old, collected
            c_i, rest = self._split(a)
            if rest != old or c_i.has(old):
                return False
            coefs.append(c_i)
        c = sp.Add(*coefs)
        others = [a for a in e.args if not any(a is w for w in with_old)]
        tens = [a for a in others if self.is_tensor(a)]
        host = [a for a in others if not self.is_tensor(a)]
        if len(tens) == 1 and not host:
            b, x = self._split(tens[0])
            if isinstance(x, sp.Symbol) and sp.expand((c + b - 1).xreplace(self.host_defs)) == 0:  # c·old + (1 - c)·x
                self.op_(lst, "lerp", self.compile(x)[0], self.h(b))
                return True
        if c != 1:
            self.op_(lst, "mul", self.h(c))
        for t in tens:
            self._accumulate(lst, t)
        if host:
            self.op_(lst, "add", self.h(sp.Add(*host)))
        return True

    def _fused_term(self, term):
        """(op, x, y, c) where ``term`` is c·x·y or c·x² (op 'addcmul') or c·x/y ('addcdiv'), else None."""
        c, rest = self._split(term)
        num, den = [], []
        for f in sp.Mul.make_args(rest):
            if isinstance(f, sp.Pow) and f.exp == 2 and self.is_tensor(f.base):
                num += [f.base, f.base]
            elif isinstance(f, sp.Pow) and f.exp == -1 and self.is_tensor(f.base):
                den.append(f.base)
            else:
                num.append(f)
        if len(num) == 2 and not den:
            return "addcmul", num[0], num[1], c
        if len(num) == 1 and len(den) == 1:
            return "addcdiv", num[0], den[0], c
        return None

    def _accumulate(self, acc, term, into=None):
        """acc += term, as ``add_``, ``addcmul_`` (c·x·y, c·x²) or ``addcdiv_`` (c·x/y); with ``into`` (a new
        list name), into = acc + term without touching acc (``add``, ``addcmul``, ``addcdiv``)."""
        c, rest = self._split(term)
        if into is None and self._distributed(acc, term):
            return
        fused = self._fused_term(term)
        if fused is not None:
            op, x, y, c = fused
            self.accumulate(op, acc, (self.compile(x)[0], self.compile(y)[0]), None if c == 1 else self.h(c), into)
        else:
            self.accumulate("add", acc, (self.compile(rest)[0],), None if c == 1 else self.h(c), into)

    def _distributed(self, acc, term):
        """The *distributed quotient* convention (torch.optim's order): ``acc += c·(Σ cᵢ·xᵢ)/y``, where every
        summand is a host multiple of one tensor, as one ``addcdiv_(acc, xᵢ, y, value=c·cᵢ)`` per summand in the
        sum's order (y computed once) -- fewer passes than forming the sum, and torch's roundings where it
        accumulates a Nesterov-style numerator into the parameter term by term.  False (nothing emitted) when
        ``term`` is not of this form."""
        fused = self._fused_term(term)
        if fused is None or fused[0] != "addcdiv" or not isinstance(fused[1], sp.Add):
            return False
        _, num, den, c = fused
        parts = [self._split(a) for a in num.args]
        if any(not isinstance(x, sp.Symbol) or not self.is_tensor(x) for _, x in parts):
            return False
        y = self.compile(den)[0]
        for ci, x in parts:
            self.accumulate("addcdiv", acc, (self.compile(x)[0], y), self.h(c * ci))
        return True

    def _accumulate_factor(self, acc, rest):
        for f in sp.Mul.make_args(rest):
            if isinstance(f, sp.Pow) and f.exp == -1:
                self.op_(acc, "div", self.compile(f.base)[0])
            else:
                self.op_(acc, "mul", self.compile(f)[0])

    # --------------------------------------------------------------------------------------- expressions
    def compile(self, e, target=None):
        """(name of a tensor list holding ``e``, whether this program owns it and nothing else reads it)."""
        if isinstance(e, sp.Symbol):
            name = self.name_of(e)
            owned = (name in self.temps and e not in self.later and e not in self.final
                     and _occurrences(self.expr, e) == 1 and not self._shared(name, e))
            return name, owned
        if isinstance(e, sp.Piecewise):
            return self._piecewise(e, target), False
        if isinstance(e, sp.Add):
            return self._add(e)
        if isinstance(e, sp.Mul):
            return self._mul(e)
        if isinstance(e, sp.Pow):
            return self._pow(e)
        if isinstance(e, (sp.Max, sp.Min)):
            return self._minmax(e)
        if isinstance(e, sp.Function) and type(e) in UNARY:
            x, owned = self.compile(e.args[0])
            return self._fresh(x, owned, UNARY[type(e)][len("_foreach_"):]), True
        if isinstance(e, sp.Function):
            return self._per_tensor(e), True
        raise UnsupportedTarget(f"the torch target cannot print {type(e).__name__}: {e}")

    def _shared(self, name, sym):
        return any(s != sym and self.name_of(s) == name for s in self.binding)

    def _fresh(self, x, owned, op, *args):
        """``op`` applied to list ``x``: in place when owned, else into a new temporary."""
        if owned:
            self.op_(x, op, *args)
            return x
        out = self.tmp()
        self.op(out, x, op, *args)
        return out

    def _piecewise(self, e, target):
        out = target or self.tmp()
        for i, (x, c) in enumerate(e.args):
            if c == sp.true:
                self.emit("else:" if i else "if True:")
            else:
                self.emit(f"{'elif' if i else 'if'} {self.h(c)}:")
            self.indent += "    "
            if not self.is_tensor(x):
                raise UnsupportedTarget(f"a Piecewise branch without tensors cannot be broadcast: {x}")
            self.emit(f"{out} = {self.compile(x)[0]}")
            self.indent = self.indent[:-4]
        return out

    def _add(self, e):
        terms = [a for a in e.args if self.is_tensor(a)]
        host = [a for a in e.args if not self.is_tensor(a)]
        c, rest = self._split(terms[0])
        acc, owned = self.compile(rest)
        if c != 1:
            acc, owned = self._fresh(acc, owned, "mul", self.h(c)), True
        for t in terms[1:]:
            if not owned:                       # x + c·y·z as one addcmul (x + c·y/z: addcdiv), as torch does
                x, acc, owned = acc, self.tmp(), True
                self._accumulate(x, t, into=acc)
                continue
            self._accumulate(acc, t)
        if host:
            acc = self._fresh(acc, owned, "add", self.h(sp.Add(*host)))
        return acc, True

    def _mul(self, e):
        c, rest = self._split(e)
        num, den = [], []
        for f in sp.Mul.make_args(rest):
            (den.append(f.base ** (-f.exp)) if isinstance(f, sp.Pow) and f.exp.is_number and f.exp < 0
             else num.append(f))
        if den and any(isinstance(f, sp.Symbol) for f in num) and any(not isinstance(f, sp.Symbol) for f in num):
            return self._quotient_first(c, num, den)
        if num:
            acc, owned = self.compile(num[0])
            for f in num[1:]:
                acc, owned = self._fresh(acc, owned, "mul", self.compile(f)[0]), True
        else:
            acc, owned = self._fresh(self.compile(den.pop(0))[0], False, "reciprocal"), True
        for f in den:
            acc, owned = self._fresh(acc, owned, "div", self.compile(f)[0]), True
        if c != 1:
            acc, owned = self._fresh(acc, owned, "mul", self.h(c)), True
        return acc, owned

    def _quotient_first(self, c, num, den):
        """The *quotient first* convention (torch.optim's order): in a product of a computed tensor, a divisor
        and a plain tensor (an input or a state), ``x·√a/√b`` is printed as ``(√a / √b)·x`` -- the computed
        factors divided first, the plain ones multiplied after (a ratio of roots times the gradient, as torch's
        foreach and for-loop paths compute it).  The same real number; the float32 roundings are torch's."""
        compound = [f for f in num if not isinstance(f, sp.Symbol)]
        plain = [f for f in num if isinstance(f, sp.Symbol)]
        acc, owned = self.compile(compound[0])
        for f in compound[1:]:
            acc, owned = self._fresh(acc, owned, "mul", self.compile(f)[0]), True
        for f in den:
            acc, owned = self._fresh(acc, owned, "div", self.compile(f)[0]), True
        for f in plain:
            acc, owned = self._fresh(acc, owned, "mul", self.compile(f)[0]), True
        if c != 1:
            acc, owned = self._fresh(acc, owned, "mul", self.h(c)), True
        return acc, owned

    def _pow(self, e):
        b, p = e.args
        if p == sp.Rational(1, 2) and self._scaled(b) is not None:
            return self._scaled_sqrt(*self._scaled(b)), True
        x, owned = self.compile(b)
        if p == 2:
            return self._fresh(x, owned, "mul", x), True
        if p == sp.Rational(1, 2):
            return self._fresh(x, owned, "sqrt"), True
        if p == -1:
            return self._fresh(x, owned, "reciprocal"), True
        if p == sp.Rational(-1, 2):
            return self._fresh(self._fresh(x, owned, "sqrt"), True, "reciprocal"), True
        if not self.is_tensor(p):
            return self._fresh(x, owned, "pow", self.h(p)), True
        raise UnsupportedTarget(f"the torch target cannot print a tensor exponent: {e}")

    def _scaled(self, b):
        """(c, x) where ``b`` is c·x with a host factor c (not 1) and a tensor x, else None."""
        if not isinstance(b, sp.Mul):
            return None
        c, rest = self._split(b)
        return None if c == 1 or rest == 1 else (c, rest)

    def _scaled_sqrt(self, c, x):
        """The *scaled square root* convention (torch.optim's order of operations): sqrt(c·x) for a host factor
        c is printed as the square root of the tensor, then divided by the host number sqrt(d) where c = 1/d
        (multiplied by sqrt(c) otherwise) -- ``sqrt(s/(1 - β^t))`` as ``sqrt(s)/sqrt(1 - β^t)``, as torch.optim
        computes a bias-corrected root.  The same real number for c > 0; the float32 roundings are torch's.
        Where the sign of c is not known to sympy, a host test (``_positive``: under torch.compile a check at run
        time) picks this form for c > 0 and the plain one (scale, then root) otherwise."""
        op, host, test = scaled_root(c)
        if test is None:
            out = self._fresh(*self.compile(x), "sqrt")
            self.op_(out, op, self.h(host))
            return out
        out = self.tmp()
        self.emit(f"if {self.positive(test)}:")
        self.indent += "    "
        self.op(out, self.compile(x)[0], "sqrt")
        self.op_(out, op, self.h(host))
        self.indent = self.indent[:-4]
        self.emit("else:")
        self.indent += "    "
        self.op(out, self.compile(x)[0], "mul", self.h(c))
        self.op_(out, "sqrt")
        self.indent = self.indent[:-4]
        return out

    def _minmax(self, e):
        fn = "maximum" if isinstance(e, sp.Max) else "minimum"
        tens = [a for a in e.args if self.is_tensor(a)]
        host = [a for a in e.args if not self.is_tensor(a)]
        acc, owned = self.compile(tens[0])
        for a in tens[1:] + host:
            arg = self.compile(a)[0] if self.is_tensor(a) else self.h(a)
            if owned:
                self.bound_(fn, acc, arg, host=not self.is_tensor(a))
            else:
                out = self.tmp()
                self.bound(out, fn, acc, arg, host=not self.is_tensor(a))
                acc, owned = out, True
        return acc, owned

    def _per_tensor(self, e):
        """No multi-tensor kernel: the elementwise form, tensor by tensor."""
        names = [self.compile(a)[0] if self.is_tensor(a) else None for a in e.args]
        out = self.tmp()
        self.per_tensor(out, e, names)
        return out
