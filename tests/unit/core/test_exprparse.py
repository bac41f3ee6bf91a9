"""The restricted expression parser and the line-aware YAML loader on untrusted input."""
from __future__ import annotations

import builtins
import os
import sys
import time

import pytest
import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import MAX_LENGTH, parse_expression
from blr_derive.core.yamlio import LDict, LList, load_yaml_text

P = sp.Symbol("P", integer=True, positive=True)
x = sp.Symbol("x", real=True)
y = sp.Symbol("y", real=True)
X = sp.MatrixSymbol("X", P, P)
Y = sp.MatrixSymbol("Y", P, P)
v = sp.MatrixSymbol("v", P, 1)
theta = sp.MatrixSymbol("theta", P, 1)
SYMS = {"P": P, "x": x, "y": y, "X": X, "Y": Y, "v": v, "theta": theta}


def parse(text):
    return parse_expression(text, SYMS)


# ---------------------------------------------------------------------------
# Audit: nothing is executed, imported from user text, or run in a shell
# ---------------------------------------------------------------------------

_AUDIT = {"on": False, "events": []}
_WATCH = ("exec", "os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
          "os.remove", "os.rename", "shutil.rmtree", "ctypes.dlopen")


def _hook(event, args):
    if _AUDIT["on"] and event.startswith(_WATCH):
        _AUDIT["events"].append((event, args))
    if _AUDIT["on"] and event == "open" and args and "pwned" in str(args[0]):
        _AUDIT["events"].append((event, args))


sys.addaudithook(_hook)


class no_execution:
    """Record dangerous audit events and forbid eval/exec while parsing."""

    def __enter__(self):
        self._eval, self._exec = builtins.eval, builtins.exec

        def forbidden(*a, **k):
            raise AssertionError("eval/exec called while parsing")

        builtins.eval = builtins.exec = forbidden
        _AUDIT["events"].clear()
        _AUDIT["on"] = True
        return self

    def __exit__(self, *exc):
        _AUDIT["on"] = False
        builtins.eval, builtins.exec = self._eval, self._exec
        self.events = list(_AUDIT["events"])
        return False


# ---------------------------------------------------------------------------
# Accepted grammar
# ---------------------------------------------------------------------------

ACCEPTED = [
    ("3", sp.Integer(3)),
    ("0.1", sp.Rational(1, 10)),
    ("2.50", sp.Rational(5, 2)),
    ("1.5e-3", sp.Rational(3, 2000)),
    ("0.5*x", x / 2),
    ("x + 2*y - x/y + x**2", x + 2 * y - x / y + x**2),
    ("-x + +y", -x + y),
    ("(x + y)**3", (x + y) ** 3),
    ("x**-2", x**-2),
    ("x**0.5", sp.sqrt(x)),
    ("log(x) + exp(y) + sqrt(x)", sp.log(x) + sp.exp(y) + sp.sqrt(x)),
    ("pi*x", sp.pi * x),
    ("E", sp.E),
    ("inv(x)", 1 / x),
    ("x.T", x),
    ("X @ Y", X * Y),
    ("X*Y", X * Y),
    ("X.T", X.T),
    ("(X @ Y).T", (X * Y).T),
    ("inv(X)", sp.Inverse(X)),
    ("X**-1", sp.Inverse(X)),
    ("det(X)", sp.Determinant(X)),
    ("logdet(X)", sp.log(sp.Determinant(X))),
    ("tr(X)", sp.Trace(X)),
    ("tr(X @ Y)", sp.Trace(X * Y)),
    ("eye(P)", sp.Identity(P)),
    ("2*X - eye(P)", 2 * X - sp.Identity(P)),
    ("X @ v", X * v),
    ("theta.T*theta", theta.T * theta),
    ("log(theta.T*theta)", sp.log(sp.Trace(theta.T * theta))),
    ("theta.T*X*theta/2", sp.Trace(theta.T * X * theta) / 2),
    ("x*v", x * v),
]


@pytest.mark.parametrize("text,want", ACCEPTED, ids=[a for a, _ in ACCEPTED])
def test_accepts_grammar(text, want):
    with no_execution() as audit:
        got = parse(text)
    assert audit.events == []
    assert got == want or sp.simplify(got - want) == 0
    assert not got.has(sp.Float), f"{text!r} must parse to exact numbers, got {got}"


def test_decimals_are_exact_rationals():
    for text, r in [("0.1", sp.Rational(1, 10)), ("0.3333", sp.Rational(3333, 10000)), ("12.75", sp.Rational(51, 4))]:
        got = parse(text)
        assert isinstance(got, sp.Rational) and got == r
    # YAML floats / ints arrive as Python numbers
    assert parse_expression(0.1, {}) == sp.Rational(1, 10)
    assert parse_expression(7, {}) == sp.Integer(7)


def test_numeric_value_of_composite():
    e = parse("(2*pi)**(-P/2)*exp(-x**2/2)")
    assert float(e.subs({P: 1, x: 0.7})) == pytest.approx((2 * 3.141592653589793) ** -0.5 * 2.718281828459045 ** (-0.245),
                                                          rel=1e-14)


def test_matrix_shapes():
    assert parse("X @ v").shape == (P, 1)
    assert parse("v.T @ X").shape == (1, P)
    assert parse("eye(P)").shape == (P, P)


# ---------------------------------------------------------------------------
# Rejected input
# ---------------------------------------------------------------------------

REJECTED = {
    "import": "__import__('os').system('touch /tmp/pwned_blr')",
    "dunder attribute": "x.__class__",
    "escape chain": "().__class__.__bases__[0].__subclasses__()",
    "other attribute": "X.I",
    "attribute call": "x.subs(x, 1)",
    "lambda": "lambda: 1",
    "lambda call": "(lambda: 1)()",
    "subscript": "v[0]",
    "list comprehension": "[i for i in x]",
    "generator": "sum(i for i in x)",
    "dict comprehension": "{i: i for i in x}",
    "string": "'abc'",
    "bytes": "b'abc'",
    "f-string": "f'{x}'",
    "unknown name": "foo",
    "unknown function": "foo(x)",
    "builtin eval": "eval('1')",
    "builtin exec": "exec('1')",
    "builtin open": "open('/etc/passwd')",
    "getattr": "getattr(x, 'T')",
    "keyword argument": "log(x, base=2)",
    "double star": "log(**x)",
    "starred": "log(*x)",
    "too many args": "log(x, y)",
    "walrus": "(x := 1)",
    "conditional": "x if y else 1",
    "comparison": "x < y",
    "boolean": "x and y",
    "bool literal": "True",
    "none literal": "None",
    "complex literal": "1j",
    "ellipsis": "...",
    "tuple": "(x, y)",
    "list": "[x]",
    "statement": "x = 1",
    "two statements": "x; y",
    "import statement": "import os",
    "floor division": "x // 2",
    "modulo": "x % 2",
    "bit not": "~x",
    "matrix division": "X / Y",
    "matrix square": "X**2",
    "matrix exponent": "x**X",
    "exp of matrix": "exp(X)",
    "inv of vector": "inv(v)",
    "function as value": "log",
    "call of call": "exp(x)(y)",
    "big integer exponent": "2**65",
    "big negative exponent": "x**-100",
    "empty": "   ",
    "syntax": "x +* y",
    "deep nesting": "-" * 400 + "x",
}


@pytest.mark.parametrize("text", list(REJECTED.values()), ids=list(REJECTED))
def test_rejects(text):
    with no_execution() as audit:
        with pytest.raises(SpecError) as ei:
            parse(text)
    assert audit.events == []
    msg = str(ei.value)
    assert "\n" not in msg and msg


@pytest.mark.parametrize("text, written, read", [
    ("ｘ + 1", "ｘ", " (Python would read it as 'x')"),         # fullwidth
    ("2*𝐱", "𝐱", " (Python would read it as 'x')"),            # mathematical bold
    ("ｅｘｐ(x)", "ｅｘｐ", " (Python would read it as 'exp')"),
    ("X.Ｔ", "Ｔ", " (Python would read it as 'T')"),
    ("θ*x", "θ", ""),                                           # not a look-alike, still not ASCII
])
def test_a_name_python_would_normalize_is_refused(text, written, read):
    """Python's parser reads identifiers after NFKC normalization: a fullwidth ``ｘ`` was silently the declared
    ``x``.  Names in expressions are ASCII as written, like declared names (core/names.py); comments may hold
    any text."""
    with pytest.raises(SpecError) as ei:
        parse(text)
    assert ei.value.message == (f"expression: '{written}' is not an ASCII name{read} in '{text}'; write names in "
                                "ASCII letters, digits and underscores")
    assert parse("x + 1  # ｘ, θ: a comment") == x + 1


def test_import_payload_is_not_executed(tmp_path):
    marker = "/tmp/pwned_blr"
    existed = os.path.exists(marker)
    own = tmp_path / "pwned_blr_marker"
    payloads = [
        "__import__('os').system('touch /tmp/pwned_blr')",
        f"__import__('os').system('touch {own}')",
        f"__import__('pathlib').Path('{own}').touch()",
        f"open('{own}', 'w')",
    ]
    for text in payloads:
        with no_execution() as audit:
            with pytest.raises(SpecError):
                parse(text)
        assert audit.events == []
    assert not own.exists()
    if not existed:
        assert not os.path.exists(marker)


def test_huge_power_tower_rejected_quickly():
    t0 = time.perf_counter()
    with pytest.raises(SpecError):
        parse("9**9**9**9")
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("text", ["10**10**10", "x**(10**10)", "x**2**7", "(x + 1)**(3**40)"])
def test_nested_integer_exponents_over_limit_rejected(text):
    """An exponent that is itself a literal power must obey the same bound as a literal integer."""
    t0 = time.perf_counter()
    with pytest.raises(SpecError):
        parse(text)
    assert time.perf_counter() - t0 < 1.0


def test_overly_long_input_rejected_quickly():
    for text in ["x+" * MAX_LENGTH + "x", "1" * 100_000, "(" * 50_000 + "x" + ")" * 50_000]:
        t0 = time.perf_counter()
        with pytest.raises(SpecError, match="longer than"):
            parse(text)
        assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("text", ["1e400", "-1e400"])
def test_overflowing_decimal_rejected(text):
    with pytest.raises(SpecError):
        parse(text)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_yaml_float_rejected(value):
    with pytest.raises(SpecError):
        parse_expression(value, {})


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}])
def test_non_expression_values_rejected(value):
    with pytest.raises(SpecError):
        parse_expression(value, {})


@pytest.mark.parametrize("text", ["eye(X)", "eye(0.5)", "eye(-1)"])
def test_eye_needs_a_dimension(text):
    with pytest.raises(SpecError):
        parse(text)


@pytest.mark.parametrize("text", ["v*v", "v + v.T", "v + X", "X @ v @ v"])
def test_shape_mismatch_rejected(text):
    """(P,1)·(P,1), (P,1)+(1,P), (P,1)+(P,P) are undefined for every P > 1."""
    with pytest.raises(SpecError):
        parse(text)


def test_error_names_the_expression_kind():
    with pytest.raises(SpecError) as ei:
        parse_expression("foo", {}, what="natural parameter 2")
    assert "natural parameter 2" in str(ei.value) and "foo" in str(ei.value)
    assert ei.value.line is None and ei.value.file is None


# ---------------------------------------------------------------------------
# YAML loading
# ---------------------------------------------------------------------------

def test_yaml_line_numbers():
    text = "name: g\nparams:\n  a: 1\n  b: [x, y]\nlist:\n  - one\n  - two\n"
    d = load_yaml_text(text, "f.yaml")
    assert isinstance(d, LDict) and isinstance(d["list"], LList)
    assert d.file == "f.yaml" and d.line == 1
    assert d.line_of("name") == 1 and d.line_of("params") == 2 and d.line_of("list") == 5
    assert d["params"].line_of("b") == 4
    assert d["list"].line_of(0) == 6 and d["list"].line_of(1) == 7
    assert d["params"]["b"] == ["x", "y"]


@pytest.mark.parametrize("text,line", [
    ("a: 1\nb: 2\n  c: 3\n", 3),
    ("a: 1\nb: [1, 2\nc: 3\n", 3),
    ("a: 1\nb: 2\nc: 'open\n", 4),
    ("a: 1\n\tb: 2\n", 2),
    ("a: 1\n---\nb: 2\n", 2),
])
def test_malformed_yaml_has_line(text, line):
    with pytest.raises(SpecError) as ei:
        load_yaml_text(text, "bad.yaml")
    assert ei.value.file == "bad.yaml"
    assert ei.value.line == line
    assert "malformed YAML" in ei.value.message or "document" in ei.value.message


def test_empty_yaml():
    with pytest.raises(SpecError) as ei:
        load_yaml_text("", "e.yaml")
    assert ei.value.line == 1


@pytest.mark.parametrize("text,line", [
    ("a: 1\nb: 2\na: 3\n", 3),
    ("top:\n  x: 1\n  y: 2\n  x: 3\n", 4),
    ("l:\n  - {k: 1, k: 2}\n", 2),
])
def test_duplicate_keys_rejected_with_line(text, line):
    with pytest.raises(SpecError, match="duplicate key") as ei:
        load_yaml_text(text, "dup.yaml")
    assert ei.value.line == line and ei.value.file == "dup.yaml"


@pytest.mark.parametrize("text,line", [
    ("!!python/name:os.system\n", 1),
    ("a: !!python/object/apply:os.system 'touch /tmp/pwned_blr'\n", 1),
    ("a: 1\nb: !!python/object/apply:os.system ['touch /tmp/pwned_blr']\n", 2),
    ("!!python/object/apply:os.system ['touch /tmp/pwned_blr']\n", 1),
    ("a: 1\nb: !!python/object/new:os.system {args: ['touch /tmp/pwned_blr']}\n", 2),
    ("a: !!python/object:builtins.dict {x: 1}\n", 1),
])
def test_python_tags_rejected(text, line):
    existed = os.path.exists("/tmp/pwned_blr")
    with pytest.raises(SpecError) as ei:
        load_yaml_text(text, "tag.yaml")
    assert ei.value.line == line
    if not existed:
        assert not os.path.exists("/tmp/pwned_blr")


def test_recursive_alias_is_a_spec_error():
    with pytest.raises(SpecError):
        load_yaml_text("a: &x [*x]\n", "alias.yaml")


def test_an_unknown_function_is_answered_with_the_known_ones():
    with pytest.raises(SpecError, match=r"unknown function 'sqr'; did you mean 'sqrt'\? \(known: abs, .*xlogy; "
                                        r"inverse CDFs: ndtri, gammaincinv, betaincinv\)"):
        parse("sqr(x)")
    with pytest.raises(SpecError, match=r"unknown function 'erfinv'; did you mean 'erf'\? \(known: .*erf, erfc, .*"
                                        r"log_ndtr, .*ndtr, ndtri, .*inverse CDFs: ndtri"):
        parse("erfinv(x)")


def test_a_sum_of_a_scalar_function_of_one_data_vector_expression():
    """sum(g(v)) with g any scalar expression of one column vector v = X*theta - y (Student-t regression's
    log(1 + v²/ν)) is the data sum Σ_n g(v_n), as sum(softplus(X*theta + b)) is; it was refused with sympy's
    'Mix of Matrix and Scalar symbols'.  Two different vector expressions in one sum are a located message that
    says to write one sum per vector."""
    from blr_derive.core.nodes import U, DataSum
    N, P = sp.Symbol("N"), sp.Symbol("P")
    syms = {"X": sp.MatrixSymbol("X", N, P), "theta": sp.MatrixSymbol("theta", P, 1), "y": sp.MatrixSymbol("y", N, 1),
            "nu": sp.Symbol("nu", positive=True)}
    e = parse_expression("sum(log(1 + (X*theta - y)**2/nu))", syms)
    assert isinstance(e, DataSum)
    assert sp.simplify(e.fn(U) - sp.log(1 + U**2 / syms["nu"])) == 0
    assert e.args[1] == syms["X"] * syms["theta"] - syms["y"]
    with pytest.raises(SpecError):
        parse_expression("sum((X*theta - y)**2 + (X*theta)**3)", syms)


@pytest.mark.parametrize("text, problem", [
    ("mode == mode", "'mode' is a choice hyperparameter (a, b): compare it with one of its choices, e.g. mode == 'a'"),
    ("mode", "'mode' is a choice hyperparameter (a, b): compare it with one of its choices, e.g. mode == 'a'"),
    ("mode + 1 > 0", "'mode' is a choice hyperparameter (a, b): compare it with one of its choices, e.g. mode == 'a'"),
    ("'b' == mode", "write the choice hyperparameter first: mode == 'b'"),
])
def test_a_choice_used_as_a_number_says_how_to_compare_it(text, problem):
    """A declared choice hyperparameter outside ``name == 'choice'`` was an 'unknown symbol' (and ``'b' == mode``
    'literal 'b' is not a number'): the message names the choice and the comparison to write."""
    choices = {"mode": {"a": sp.Symbol("mode__a"), "b": sp.Symbol("mode__b")}}
    with pytest.raises(SpecError) as ei:
        parse_expression(text, SYMS, what="when", logic=True, choices=choices)
    assert ei.value.message == f"when: {problem} in {text!r}"
    assert parse_expression("mode == 'b'", SYMS, logic=True, choices=choices) == sp.Symbol("mode__b")
