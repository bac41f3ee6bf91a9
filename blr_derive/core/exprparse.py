"""A restricted expression grammar for family and recipe files.

Untrusted input is data: expressions are parsed with :func:`ast.parse` (which only
builds a syntax tree, it never executes anything) and the tree is walked with an
explicit whitelist that builds sympy objects directly.  ``sympify``/``parse_expr``/
``eval`` are never called.  Anything outside the grammar is rejected with a
one-line :class:`~blr_derive.core.errors.SpecError`.

Grammar
-------
* numbers: integers and decimals (decimals become exact rationals), ``pi``, ``E``
* names: only the symbols the caller declares (parameters, data, dimensions, λ, μ ...)
* operators: ``+ - * / **`` and ``@`` (matrix product), unary ``-``/``+``, parentheses
* attribute: ``X.T`` (transpose) only
* calls: the functions in :data:`FUNCTIONS` (``log exp sqrt abs inv det tr eye ...``; special
  functions ``lgamma digamma polygamma gamma factorial log1p lmvgamma mvdigamma besseli exp1``)
* ``sum(v)`` and ``sum(f(v))``: the sum over the entries of a column vector, with f applied entrywise
  (f in :data:`ELEMENTWISE`), e.g. ``sum(softplus(X*theta))`` for a loss summed over data
"""
from __future__ import annotations

import ast
import math
from fractions import Fraction
from typing import Mapping

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprfuncs import CONSTANTS, ELEMENTWISE, FUNCTIONS, as_scalar as _sc, is_mat as _is_mat
from blr_derive.core.nodes import U, DataSum
from blr_derive.core.text import MAX_EXPANDED_LENGTH, Expanded, did_you_mean, quote
from blr_derive.core.yamlio import where

MAX_LENGTH = 2000
MAX_DEPTH = 200
MAX_INT_EXPONENT = 64
MAX_NUMBER_BITS = 3400          # numbers of about 1000 decimal digits at most (no huge constants to print)
MAX_SPECIAL_ARG = 200           # |x| of a numeric argument of factorial/gamma/lgamma/digamma/... (evaluated exactly)
MAX_TERMS = 10_000             # terms after expansion: a product of 32 sums of two symbols expands to 2**32 terms
MAX_DEGREE = 32                # degree bound (products and powers of symbols): deriving E_q of (theta+1)**64
                               # took 95 s, ((theta+1)**64)**64 ran out of memory
SPECIAL = ("lgamma", "digamma", "polygamma", "gamma", "factorial", "lmvgamma", "mvdigamma", "besseli", "exp1")
_NOT_FINITE = (sp.core.numbers.Infinity, sp.core.numbers.NegativeInfinity, sp.core.numbers.ComplexInfinity,
               sp.core.numbers.NaN, sp.core.numbers.ImaginaryUnit)


def parse_at(text, symbols, container, key, file=None, *, what: str = "expression", logic: bool = False,
             functions: Mapping | None = None):
    """:func:`parse_expression` of the YAML entry ``container[key]``: a problem is a SpecError located at that
    entry (or in ``file`` when the entry carries no file of its own)."""
    try:
        return parse_expression(text, symbols, what=what, logic=logic, functions=functions)
    except SpecError as exc:
        f, l = where(container, key)
        raise exc.located(f or file, l) from None


def parse_expression(text, symbols: Mapping[str, sp.Basic], *, what: str = "expression", logic: bool = False,
                     choices: Mapping | None = None, functions: Mapping | None = None):
    """Parse ``text`` into a sympy expression using only ``symbols`` (and, besides :data:`FUNCTIONS`, the
    ``functions`` of one context, e.g. a sampler's random draws).

    ``text`` may be a string, an int or a float (YAML scalars).  Raises
    :class:`SpecError` (without location; callers add file and line).
    """
    if isinstance(text, bool):
        raise SpecError(f"{what}: expected an expression, got a boolean")
    if isinstance(text, int):
        return sp.Integer(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise SpecError(f"{what}: {text!r} is not a finite number")
        return sp.Rational(Fraction(repr(text)))
    if not isinstance(text, str):
        kind = ("a list" if isinstance(text, list) else "a mapping" if isinstance(text, dict)
                else "nothing (null)" if text is None else type(text).__name__)
        raise SpecError(f"{what}: expected an expression string, got {kind}")
    limit = MAX_EXPANDED_LENGTH if isinstance(text, Expanded) else MAX_LENGTH     # a size template's output
    src = text.strip()
    if not src:
        raise SpecError(f"{what}: empty expression")
    if len(src) > limit:
        raise SpecError(f"{what}: expression longer than {limit} characters")
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as exc:
        raise SpecError(f"{what}: syntax error in {_shown(src)} ({exc.msg})") from None
    except (RecursionError, MemoryError):
        raise SpecError(f"{what}: expression nested too deeply") from None
    _names_as_written(tree, src, what)
    b = _Builder(symbols, what, src, logic)
    b.choices = choices or {}
    b.functions = {**FUNCTIONS, **(functions or {})}
    out = b.build(tree.body, 0)
    _check_numbers(out, b)
    return out


def _names_as_written(tree, src, what):
    """Every name and attribute of the expression spelled in ASCII, as the source writes it.  Python's parser reads
    identifiers after NFKC normalization, so the fullwidth ``ｗｄ``, the ligature ``ﬁ`` or a mathematical ``𝐱``
    would silently stand for ``wd``, ``fi`` and ``x``: a look-alike of a declared name is refused, with the name to
    write instead, as a declared name is (blr_derive/core/names.py)."""
    if src.isascii():
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            name, written = node.id, ast.get_source_segment(src, node)
        elif isinstance(node, ast.Attribute):
            name, seg = node.attr, ast.get_source_segment(src, node) or ""
            written = seg[seg.rfind(".") + 1:].strip() if "." in seg else None
        else:
            continue
        if written != name or not name.isascii():
            read = f" (Python would read it as {_shown(name)})" if written and written != name else ""
            raise SpecError(f"{what}: {_shown(written or name)} is not an ASCII name{read} in {_shown(src)}; write "
                            "names in ASCII letters, digits and underscores")


SHOWN = 120


def _shown(src):
    """An expression quoted in an error message: at most :data:`SHOWN` characters of it, so that the reason after it
    survives the command line's 1000-character error line (an expression may be 2000 characters long)."""
    return repr(src[:SHOWN] + ("…" if len(src) > SHOWN else ""))


def _degree(e, memo):
    """An upper bound of the polynomial degree of ``e`` in its symbols (a function counts as its argument)."""
    if e in memo:
        return memo[e]
    if isinstance(e, sp.MatrixSymbol) or (e.is_Atom if hasattr(e, "is_Atom") else True):
        d = 0 if getattr(e, "is_number", False) else 1
    elif isinstance(e, (sp.Pow, sp.MatPow)) and isinstance(e.args[1], sp.Rational):
        d = _degree(e.args[0], memo) * math.ceil(abs(e.args[1]))
    elif isinstance(e, (sp.Mul, sp.MatMul, sp.Pow, sp.MatPow)):
        d = sum(_degree(a, memo) for a in e.args)
    else:
        d = max((_degree(a, memo) for a in e.args), default=0)
    memo[e] = d
    return d


def _terms(e, memo):
    """An upper bound of the number of terms of ``e`` fully expanded (a function application counts as one)."""
    if e in memo:
        return memo[e]
    if isinstance(e, (sp.Add, sp.MatAdd)):
        n = sum(_terms(a, memo) for a in e.args)
    elif isinstance(e, (sp.Mul, sp.MatMul)):
        n = 1
        for a in e.args:
            n = min(n * _terms(a, memo), MAX_TERMS + 1)
    elif isinstance(e, (sp.Pow, sp.MatPow)) and isinstance(e.args[1], sp.Integer) and e.args[1] > 0:
        k, p = _terms(e.args[0], memo), int(e.args[1])
        n = math.comb(k + p - 1, p) if k <= MAX_TERMS else MAX_TERMS + 1      # monomials of degree p in k terms
    else:
        n = 1
    memo[e] = n = min(n, MAX_TERMS + 1)
    return n


def _check_numbers(expr, b):
    """Reject expressions of a degree above MAX_DEGREE or that expand to more than MAX_TERMS terms, and constants
    that are not finite real numbers (``1/0``, ``log(0)``, ``sqrt(-1)``) or that are huge (``(10**64)**64``,
    products of big factorials): generated code must print every number."""
    if _degree(expr, {}) > MAX_DEGREE:
        b.fail(f"the expression's degree exceeds {MAX_DEGREE} (powers and products of symbols)")
    if _terms(expr, {}) > MAX_TERMS:
        b.fail(f"the expression expands to more than {MAX_TERMS} terms (products of sums, powers of sums)")
    for node in sp.preorder_traversal(expr):
        if isinstance(node, _NOT_FINITE):
            b.fail(f"the constant {node} is not a finite real number")
        if isinstance(node, sp.Rational) and max(abs(node.p), node.q).bit_length() > MAX_NUMBER_BITS:
            b.fail("a number in the expression is too large (more than about 1000 digits)")
        if isinstance(node, sp.Rational) and abs(node.p).bit_length() > 1000 and not _is_double(node):
            # 10^990 printed as repr(float(...)) = 'inf', which the module would read as a name
            b.fail(f"the number {_digits(node)} is beyond a double's range (magnitude at most about 1.8e308)")
        if (isinstance(node, sp.Pow) and isinstance(node.base, sp.Rational) and isinstance(node.exp, sp.Rational)
                and max(abs(node.base.p), node.base.q).bit_length() * abs(node.exp) > MAX_NUMBER_BITS):
            b.fail("a power in the expression is too large (more than about 1000 digits)")


def _is_double(x) -> bool:
    """Is the rational ``x`` within a double's range (its float finite)?"""
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def _digits(x) -> str:
    """A huge number in a message: its leading digits and its number of digits, never a thousand of them."""
    text = str(abs(x.p))
    return f"{'-' if x.p < 0 else ''}{text[:6]}… ({len(text)} digits){'' if x.q == 1 else ' / …'}"


class _Builder:
    def __init__(self, symbols, what, src, logic=False):
        self.logic = logic
        self.functions = FUNCTIONS
        self.symbols = symbols
        self.what = what
        self.src = src

    def fail(self, msg):
        src = self.src if len(self.src) <= 160 else self.src[:160] + "…"
        raise SpecError(f"{self.what}: {msg} in {_shown(src)}")

    def build(self, node, depth):
        out = self._build(node, depth)
        if isinstance(node, (ast.BinOp, ast.Call)) and not _is_mat(out) and getattr(out, "is_number", False):
            self._finite(out)
        return out

    def _finite(self, x):
        """A constant subexpression must be a finite real double (``exp(1000)``, ``(-8)**(1/3)`` are not): its
        arguments were checked before, so evaluating it is cheap and cannot blow up."""
        try:
            v = x.evalf(17)
            ok = bool(v.is_real) and math.isfinite(float(v))
        except (TypeError, ValueError, OverflowError, ArithmeticError):
            ok = False
        if not ok:
            self.fail("a constant is not a finite real number (overflow, division by zero, or a complex value)")

    def _build(self, node, depth):
        if depth > MAX_DEPTH:
            self.fail("expression nested too deeply")
        handler = getattr(self, f"_node_{type(node).__name__}", None)
        if handler is None or (isinstance(node, (ast.Compare, ast.BoolOp)) and not self.logic):
            self.fail(f"{type(node).__name__} is not allowed")
        return handler(node, depth + 1)

    def _node_Constant(self, node, d):
        v = node.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(f"literal {v!r} is not a number")
        if isinstance(v, int):
            return sp.Integer(v)
        if not math.isfinite(v):
            self.fail(f"literal {v!r} is not a finite number")
        return sp.Rational(Fraction(repr(v)))

    def _node_Name(self, node, d):
        if node.id in self.symbols:
            return self.symbols[node.id]
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        if node.id in self.choices:        # declared, but a choice is no number: it is compared with one of them
            opts = list(self.choices[node.id])
            self.fail(f"'{node.id}' is a choice hyperparameter ({', '.join(opts)}): compare it with one of its "
                      f"choices, e.g. {node.id} == '{opts[0]}'")
        self.fail(f"unknown symbol '{node.id}'")

    def _node_UnaryOp(self, node, d):
        x = self.build(node.operand, d)
        if isinstance(node.op, ast.USub):
            return -x
        if isinstance(node.op, ast.UAdd):
            return x
        if isinstance(node.op, ast.Not) and self.logic:
            return sp.Not(x)
        self.fail(f"operator {type(node.op).__name__} is not allowed")

    def _node_BinOp(self, node, d):
        a = self.build(node.left, d)
        b = self.build(node.right, d)
        op = node.op
        if isinstance(op, (ast.Add, ast.Sub, ast.Div, ast.Pow)) or _is_mat(a) != _is_mat(b):
            if not (_is_mat(a) and _is_mat(b)):
                a, b = _sc(a), _sc(b)
        elif isinstance(op, (ast.Mult, ast.MatMult)) and _is_mat(a) and _is_mat(b) and a.shape[1] != b.shape[0]:
            a, b = _sc(a), _sc(b)
        if _is_mat(a) and _is_mat(b):
            if isinstance(op, (ast.Add, ast.Sub)) and a.shape != b.shape:
                self.fail(f"shape mismatch: {a.shape} {'+' if isinstance(op, ast.Add) else '-'} {b.shape}")
            if isinstance(op, (ast.Mult, ast.MatMult)) and a.shape[1] != b.shape[0]:
                self.fail(f"shape mismatch in a matrix product: {a.shape} times {b.shape}")
        try:
            return self._apply(op, a, b)
        except SpecError:
            raise
        except Exception as exc:  # shape mismatch and similar sympy errors
            self.fail(f"invalid operation ({type(exc).__name__}: {exc})")

    def _apply(self, op, a, b):
        if isinstance(op, ast.Add):
            return a + b
        if isinstance(op, ast.Sub):
            return a - b
        if isinstance(op, (ast.Mult, ast.MatMult)):
            return a * b
        if isinstance(op, ast.Div):
            if _is_mat(b):
                self.fail("division by a matrix (use inv())")
            return a / b
        if isinstance(op, ast.Pow):
            if _is_mat(b):
                self.fail("matrix exponent")
            if b.is_number:
                if not (b.is_Rational and abs(b.p) <= MAX_INT_EXPONENT and b.q <= MAX_INT_EXPONENT):
                    self.fail(f"numeric exponents must be rationals p/q with |p|, q <= {MAX_INT_EXPONENT}")
            if _is_mat(a):
                if b == -1:
                    return sp.Inverse(a)
                self.fail("only X**-1 is allowed for matrices")
            if a.is_number and b.is_number and (not a.is_Rational or abs(a.p) > 10**6 or a.q > 10**6):
                return sp.Pow(a, b, evaluate=False)
            return a ** b
        self.fail(f"operator {type(op).__name__} is not allowed")

    def _node_Compare(self, node, d):
        if len(node.ops) != 1:
            self.fail("chained comparisons are not allowed")
        right = node.comparators[0]
        left = node.left
        if isinstance(left, ast.Constant) and isinstance(left.value, str) and isinstance(right, ast.Name) \
                and right.id in self.choices:
            self.fail(f"write the choice hyperparameter first: {right.id} == '{quote(left.value)}'")
        if isinstance(right, ast.Constant) and isinstance(right.value, str):
            if not (isinstance(node.left, ast.Name) and node.left.id in self.choices):
                self.fail("only a choice hyperparameter can be compared with a string")
            opts = self.choices[node.left.id]
            if right.value not in opts:
                self.fail(f"'{right.value}' is not a choice of {node.left.id} ({', '.join(opts)})")
            if isinstance(node.ops[0], ast.Eq):
                return opts[right.value]
            if isinstance(node.ops[0], ast.NotEq):
                return sp.Not(opts[right.value])
            self.fail("choices compare with == or != only")
        a = self.build(node.left, d)
        b = self.build(node.comparators[0], d)
        if _is_mat(a) or _is_mat(b):
            self.fail("comparisons take scalars")
        ops = {ast.Eq: sp.Eq, ast.NotEq: sp.Ne, ast.Lt: sp.Lt, ast.LtE: sp.Le, ast.Gt: sp.Gt, ast.GtE: sp.Ge}
        op = type(node.ops[0])
        if op not in ops:
            self.fail(f"comparison {op.__name__} is not allowed")
        return ops[op](a, b)

    def _node_BoolOp(self, node, d):
        vals = [self.build(v, d) for v in node.values]
        return sp.And(*vals) if isinstance(node.op, ast.And) else sp.Or(*vals)

    def _node_Attribute(self, node, d):
        if node.attr != "T":
            self.fail(f"attribute '.{node.attr}' is not allowed (only .T)")
        x = self.build(node.value, d)
        return x.T if _is_mat(x) else x

    def _node_Call(self, node, d):
        if not isinstance(node.func, ast.Name):
            self.fail("only plain function calls are allowed")
        name = node.func.id
        if name == "sum":
            return self._sum(node, d)
        if name not in self.functions:
            self.fail(f"unknown function '{name}'{did_you_mean(name, self.functions)} (known: "
                      f"{', '.join(sorted(self.functions))}; inverse CDFs: ndtri, gammaincinv, betaincinv)")
        if node.keywords:
            self.fail(f"{name}() takes no keyword arguments")
        args = [self.build(a, d) for a in node.args]
        if name in SPECIAL and any(isinstance(a, sp.Rational) and abs(a) > MAX_SPECIAL_ARG for a in args):
            self.fail(f"{name}() of a number larger than {MAX_SPECIAL_ARG} in magnitude (evaluated exactly)")
        try:
            return self.functions[name](name, args)
        except SpecError as exc:
            self.fail(exc.message)

    def _sum(self, node, depth):
        """``sum(v)`` or ``sum(f(v))``: Σ_n f(v_n) over the entries of a column vector v, with f one of the
        unary functions (e.g. ``sum(softplus(X*theta))``; blr_derive/rules/datasum.py); otherwise an expression in
        the rows of data vectors (``sum(theta - y*log(theta))``, :meth:`_row_sum`)."""
        if len(node.args) != 1 or node.keywords:
            self.fail("sum() takes exactly one argument")
        arg = node.args[0]
        if (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id in ELEMENTWISE
                and len(arg.args) == 1 and not arg.keywords):
            v = self._column(arg.args[0], depth)
            if v is not None:
                return DataSum(sp.Lambda(U, self.functions[arg.func.id](arg.func.id, [U])), v)
        try:                                                # sum(log(1 + theta*y)): by rows
            return self._row_sum(arg, depth)
        except SpecError as row_error:                      # sum(X*theta): a vector expression, summed as one
            v = self._column(arg, depth)
            if v is not None:
                return DataSum(sp.Lambda(U, U), v)
            composed = self._composed_sum(arg, depth)      # sum(log(1 + (X*theta - y)**2/nu))
            if composed is None:
                raise row_error from None
            return composed

    def _composed_sum(self, arg, depth):
        """``sum(g(v))`` with v one column-vector expression (``X*theta - y``) inside a scalar expression g of it
        (``log(1 + (X*theta - y)**2/nu)``, Student-t regression): Σ_n g(v_n) as DataSum(u ↦ g(u), v), the form
        ``sum(softplus(X*theta + b))`` has (blr_derive/rules/datasum.py), or None where the argument is not one
        (no vector, two different ones, or g not a scalar of u)."""
        found = []

        def visit(node):
            if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Name, ast.Call)):
                v = self._column(node, depth)
                if v is not None:
                    found.append((node, v))
                    return
            for child in ast.iter_child_nodes(node):
                visit(child)
        visit(arg)
        if not found:
            return None
        if any(v != found[0][1] for _, v in found[1:]):     # y*(X*theta): the row-wise error says what to write
            return None
        slot = "_sum_row_"
        while slot in self.symbols:
            slot += "_"
        nodes = {id(n) for n, _ in found}
        body_node = _replace_nodes(arg, nodes, slot)
        saved = self.symbols
        self.symbols = {**saved, slot: U}
        try:
            body = self.build(body_node, depth)
        except SpecError:
            return None
        finally:
            self.symbols = saved
        if _is_mat(body) or not body.has(U) or any(_is_mat(s) for s in body.free_symbols):
            return None
        return DataSum(sp.Lambda(U, body), found[0][1])

    def _column(self, node, depth):
        """The column vector ``node`` builds to, or None (it does not build, or is not a column vector)."""
        try:
            v = self.build(node, depth)
        except SpecError:
            return None
        return v if _is_mat(v) and v.shape[1] == 1 and v.shape[0] != 1 else None

    def _row_sum(self, arg, depth):
        """``sum(g(theta, y))`` over the rows of data column vectors, each written as if it were one number
        (``sum(theta - y*log(theta))``): every column vector of the argument becomes its row, and each term of
        the expanded argument must be a function of the scalars times a function of one vector's row,
        Σ_n a(θ) b(y_n) = a(θ) Σ_n b(y_n) (Σ_n 1 is the number of rows)."""
        if any(isinstance(n, ast.Attribute) for n in ast.walk(arg)):
            self.fail("sum() of a matrix expression: write sum(v) for a column vector v, or an expression in the "
                      "rows of data vectors without transposes")
        vectors = sorted({s for s in self.symbols.values() if _is_mat(s) and s.shape[1] == 1 and s.shape[0] != 1
                          and isinstance(s, sp.MatrixSymbol)}, key=str)
        rows = {v: sp.Dummy(f"{v.name}_n", real=True) for v in vectors}
        saved = self.symbols
        self.symbols = {**saved, **{v.name: rows[v] for v in vectors}}
        try:
            body = self.build(arg, depth)
        finally:
            self.symbols = saved
        if _is_mat(body):
            self.fail("sum() takes a column vector, a unary function of one, or an expression in the rows of data "
                      "vectors (e.g. sum(theta - y*log(theta)))")
        used = [v for v in vectors if body.has(rows[v])]
        if not used:
            self.fail("sum() needs a data vector in its argument")
        if len({v.shape[0] for v in used}) > 1:
            self.fail("sum() over vectors of different lengths")
        total = sp.Integer(0)
        for term in sp.Add.make_args(sp.expand(body)):
            per_row = [f for f in sp.Mul.make_args(term) if f.has(*rows.values())]
            scalar = sp.Mul(*[f for f in sp.Mul.make_args(term) if not f.has(*rows.values())])
            row = sp.Mul(*per_row)
            present = [v for v in used if row.has(rows[v])]
            if len(present) > 1:
                self.fail("sum(): a term multiplies the rows of two data vectors; write it as a product, "
                          "e.g. x.T*y for Σ_n x_n y_n")
            vec = present[0] if present else used[0]
            f = row.xreplace({rows[vec]: U}) if present else sp.Integer(1)
            if f.has(*rows.values()):
                self.fail("sum(): the argument does not separate into a function of the parameters times a "
                          "function of one data row")
            total += scalar * DataSum(sp.Lambda(U, f), vec)
        return total


def _replace_nodes(node, ids, name):
    """A copy of the AST ``node`` with each sub-node whose id() is in ``ids`` replaced by the name ``name``."""
    if id(node) in ids:
        return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)
    if not isinstance(node, ast.AST):
        return node
    fields = {}
    for field, value in ast.iter_fields(node):
        if isinstance(value, list):
            fields[field] = [_replace_nodes(v, ids, name) for v in value]
        else:
            fields[field] = _replace_nodes(value, ids, name)
    out = type(node)(**fields)
    return ast.copy_location(out, node) if hasattr(node, "lineno") else out
