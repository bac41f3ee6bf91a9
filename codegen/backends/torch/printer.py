"""The torch printer: compiles elementwise update expressions into multi-tensor
``torch._foreach_*`` programs.

Every symbol is either a *tensor list* (state, gradients, earlier assignments that
depend on them) or a *host scalar* (hyperparameters, the step counter and expressions
of those), which is printed as ordinary Python (``math``) and computed once per group.
Conditions of ``Piecewise`` are host scalars, so they become Python ``if`` blocks that
pick one multi-tensor program.  Unsupported nodes raise
:class:`~blr_derive.core.errors.CodegenError`.
"""
from __future__ import annotations

import re

from collections import Counter

import sympy as sp

from blr_derive.core.errors import CodegenError, UnsupportedTarget
from blr_derive.codegen.inert import identifier
from blr_derive.codegen.printing import HostPrinter
from blr_derive.codegen.torch_elementwise import ElementwisePrinter  # noqa: F401 - the torch target's elementwise printer


UNARY = {
    sp.exp: "_foreach_exp", sp.Abs: "_foreach_abs", sp.tanh: "_foreach_tanh",
    sp.sin: "_foreach_sin", sp.cos: "_foreach_cos", sp.loggamma: "_foreach_lgamma", sp.sign: "_foreach_sign",
}


#: the tensor list an emitted line changes in place (its first argument): torch._foreach_*_ and the runtime's helpers
_MUTATES = re.compile(r"(?:torch\.\w+_|_foreach_copy|_foreach_bound_)\((?:'\w+', )?(\w+)")


class ForeachCompiler:
    def __init__(self, tensors, indent="            ", seed=None):
        self.tensors = set(tensors)       # symbols bound to lists of tensors
        self.host = HostPrinter()
        self.lines: list[str] = []
        self.indent = indent
        self.base = indent
        self.n = 0
        self.temps: set[str] = set()      # lists this program allocated
        self.bound: dict = {}             # symbol -> the list name assign() bound it to
        #: expression -> a list holding its value, computed by an earlier program (common subexpressions
        #: across programs, e.g. a sample's draw and its statistics): read, never changed in place
        self.seed = dict(seed or {})
        self.used_seed: set[str] = set()
        #: expression -> the fresh list this program computed it into, unconditionally and never changed since
        #: (what a later program may take as its seed)
        self.memo: dict = {}

    def tmp(self):
        self.n += 1
        name = f"_f{self.n}"
        self.temps.add(name)
        return name

    def emit(self, line):
        self.lines.append(self.indent + line)
        hit = _MUTATES.match(line)
        if hit:
            self.memo = {e: n for e, n in self.memo.items() if n != hit.group(1)}

    def is_tensor(self, e):
        return bool(e.free_symbols & self.tensors)

    def host_expr(self, e):
        return self.host.doprint(e)

    # ------------------------------------------------------------------ statements
    def assign(self, sym, expr, when=sp.true):
        """Bind ``sym`` to ``expr``: a tensor list (foreach program) or a host scalar; only when the
        host condition ``when`` holds (values needed only by branches not taken are not computed)."""
        if when == sp.false:
            return
        if when != sp.true:
            self.emit(f"if {self.host_expr(when)}:")
            self.indent += "    "
        if not self.is_tensor(expr):
            self.emit(f"{identifier(str(sym))} = {self.host_expr(expr)}")
        else:
            name = self.compile(expr, target=identifier(str(sym)))
            if name != str(sym):
                self.emit(f"{sym} = {name}")
            self.tensors.add(sym)
            self.bound[sym] = name
        if when != sp.true:
            self.indent = self.indent[:-4]

    # ------------------------------------------------------------------ expressions
    def compile(self, e, target=None):
        """The name of a tensor list holding ``e`` (statements emitted as needed); ``target`` names a Piecewise's result."""
        if isinstance(e, sp.Symbol):
            return identifier(e.name)
        if e in self.seed:
            self.used_seed.add(self.seed[e])
            return self.seed[e]
        if isinstance(e, sp.Piecewise):
            return self._piecewise(e, target)
        name = self._compute(e)
        if name in self.temps and self.indent == self.base:
            self.memo[e] = name
        return name

    def _compute(self, e):
        if isinstance(e, sp.Add):
            return self._add(e)
        if isinstance(e, sp.Mul):
            return self._mul(e)
        if isinstance(e, sp.Pow):
            return self._pow(e)
        if isinstance(e, (sp.Max, sp.Min)):
            return self._minmax(e)
        if isinstance(e, sp.Function) and type(e) in UNARY:
            return self._unary(e)
        if isinstance(e, sp.Function):
            return self._per_tensor(e)
        raise UnsupportedTarget(f"the torch target cannot print {type(e).__name__}: {e}")

    def _piecewise(self, e, target):
        out = target or self.tmp()
        first = True
        for expr, cond in e.args:
            if cond == sp.true:
                self.emit("else:" if not first else "if True:")
            else:
                self.emit(f"{'if' if first else 'elif'} {self.host_expr(cond)}:")
            first = False
            self.indent += "    "
            if self.is_tensor(expr):
                name = self.compile(expr)
            else:
                raise CodegenError(f"a Piecewise branch without tensors cannot be broadcast: {expr}")
            self.emit(f"{out} = {name}")
            self.indent = self.indent[:-4]
        return out

    def _add(self, e):
        host = [a for a in e.args if not self.is_tensor(a)]
        terms = [a for a in e.args if self.is_tensor(a)]
        acc, owned = None, False
        for term in terms:
            coeff, rest = self._split(term)
            x = self.compile(rest)
            if acc is None:
                if coeff == 1:
                    acc, owned = x, False
                else:
                    acc, owned = self.tmp(), True
                    self.emit(f"{acc} = torch._foreach_mul({x}, {self.host_expr(coeff)})")
                continue
            alpha = "" if coeff == 1 else f", alpha={self.host_expr(coeff)}"
            if owned:
                self.emit(f"torch._foreach_add_({acc}, {x}{alpha})")
            else:
                new = self.tmp()
                self.emit(f"{new} = torch._foreach_add({acc}, {x}{alpha})")
                acc, owned = new, True
        if host:
            c = self.host_expr(sp.Add(*host))
            if owned:
                self.emit(f"torch._foreach_add_({acc}, {c})")
            else:
                new = self.tmp()
                self.emit(f"{new} = torch._foreach_add({acc}, {c})")
                acc = new
        return acc

    def _seeded_part(self, rest):
        """The largest product of two or more of ``rest``'s factors that an earlier program computed (a seed; e.g.
        the draw's scaled noise ε/σ inside a statistic ε·g/σ) and the factors left over, or None: the product is
        then the seed times the rest, one operation per factor left instead of one per factor (the same real
        number, rounded in that order)."""
        have = Counter(sp.Mul.make_args(rest))
        best = None
        for s in self.seed:
            if not isinstance(s, sp.Mul):
                continue
            part = Counter(sp.Mul.make_args(s))
            if (sum(part.values()) >= 2 and all(have[f] >= k for f, k in part.items()) and part != have
                    and (best is None or sum(part.values()) > sum(best[1].values()))):
                best = (s, part)
        if best is None:
            return None
        return best[0], list((have - best[1]).elements())

    def _mul(self, e):
        coeff, rest = self._split(e)
        seeded = self._seeded_part(rest) if self.seed else None
        if seeded is not None:
            s, left = seeded
            acc = self.compile(s)
            out = self.tmp()
            for k, f in enumerate(left):
                div = isinstance(f, sp.Pow) and f.exp.is_number and f.exp < 0
                x = self.compile(f.base ** (-f.exp) if div else f)
                op = "div" if div else "mul"
                self.emit(f"{out} = torch._foreach_{op}({acc}, {x})" if k == 0 else f"torch._foreach_{op}_({out}, {x})")
                acc = out
            if coeff != 1:
                self.emit(f"torch._foreach_mul_({out}, {self.host_expr(coeff)})")
            return out
        num, den = [], []
        for f in sp.Mul.make_args(rest):
            if isinstance(f, sp.Pow) and f.exp.is_number and f.exp < 0:
                den.append(f.base ** (-f.exp))
            else:
                num.append(f)
        out = self.tmp()
        if len(num) == 1 and not den:
            self.emit(f"{out} = torch._foreach_mul({self.compile(num[0])}, {self.host_expr(coeff)})")
            return out
        if num:
            first = self.compile(num[0])
            rest_num = num[1:]
            if rest_num:
                self.emit(f"{out} = torch._foreach_mul({first}, {self.compile(rest_num[0])})")
                for f in rest_num[1:]:
                    self.emit(f"torch._foreach_mul_({out}, {self.compile(f)})")
            elif den:
                self.emit(f"{out} = torch._foreach_div({first}, {self.compile(den[0])})")
                den = den[1:]
            else:
                self.emit(f"{out} = torch._foreach_mul({first}, 1.0)")
        else:
            self.emit(f"{out} = torch._foreach_reciprocal({self.compile(den[0])})")
            den = den[1:]
        for f in den:
            self.emit(f"torch._foreach_div_({out}, {self.compile(f)})")
        if coeff != 1:
            self.emit(f"torch._foreach_mul_({out}, {self.host_expr(coeff)})")
        return out

    def _pow(self, e):
        b, p = e.args
        x = self.compile(b)
        out = self.tmp()
        if p == 2:
            self.emit(f"{out} = torch._foreach_mul({x}, {x})")
        elif p == sp.Rational(1, 2):
            self.emit(f"{out} = torch._foreach_sqrt({x})")
        elif p == -1:
            self.emit(f"{out} = torch._foreach_reciprocal({x})")
        elif p == sp.Rational(-1, 2):
            self.emit(f"{out} = torch._foreach_sqrt({x})")
            self.emit(f"torch._foreach_reciprocal_({out})")
        elif not self.is_tensor(p):
            self.emit(f"{out} = torch._foreach_pow({x}, {self.host_expr(p)})")
        else:
            raise UnsupportedTarget(f"the torch target cannot print a tensor exponent: {e}")
        return out

    def _minmax(self, e):
        fn = "_foreach_maximum" if isinstance(e, sp.Max) else "_foreach_minimum"
        tens = [a for a in e.args if self.is_tensor(a)]
        host = [a for a in e.args if not self.is_tensor(a)]
        out = self.tmp()
        self.emit(f"{out} = torch.{fn}({self.compile(tens[0])}, {self.compile(tens[1]) if len(tens) > 1 else self.host_expr(host[0])})")
        for a in tens[2:]:
            self.emit(f"torch.{fn}_({out}, {self.compile(a)})")
        return out

    def _unary(self, e):
        out = self.tmp()
        self.emit(f"{out} = torch.{UNARY[type(e)]}({self.compile(e.args[0])})")
        return out

    def _per_tensor(self, e):
        """No multi-tensor kernel: apply the elementwise form tensor by tensor."""
        names = [self.compile(a) if self.is_tensor(a) else None for a in e.args]
        loc = [sp.Symbol(f"_a{i}") for i in range(len(e.args))]
        local = e.func(*[l if n is not None else a for l, n, a in zip(loc, names, e.args)])
        body = ElementwisePrinter().doprint(local)
        lists = [n for n in names if n is not None]
        vars_ = [str(l) for l, n in zip(loc, names) if n is not None]
        out = self.tmp()
        source = lists[0] if len(lists) == 1 else f"zip({', '.join(lists)})"
        self.emit(f"{out} = [{body} for {', '.join(vars_)} in {source}]")
        return out

    def _split(self, e):
        """Split a product into (host coefficient, tensor part)."""
        if isinstance(e, sp.Mul):
            host = [a for a in e.args if not self.is_tensor(a)]
            tens = [a for a in e.args if self.is_tensor(a)]
            return sp.Mul(*host), sp.Mul(*tens)
        return sp.Integer(1), e


def scaled_root(c):
    """The *scaled square root* convention (torch.optim's order of operations) for sqrt(c·x), a host factor c and
    a tensor x: (op, host, test) -- the root of x, then ``op`` ('div' or 'mul') by the host number ``host``
    (sqrt(d) where c = 1/d, else sqrt(c)), and ``test``, the host value whose positivity selects this form over
    the plain sqrt(c·x) (None where sympy knows c > 0).  Read by the planned programs (inplace.PlannedCompiler),
    which the multi-tensor path and the fused kernel (kernel.KernelCompiler) both print."""
    num, den = sp.fraction(sp.factor_terms(c))
    op, host = ("div", sp.sqrt(den)) if num == 1 else ("mul", sp.sqrt(c))
    return op, host, None if c.is_positive else (den if num == 1 else c)
