"""Every function a target's printer can print from its known-function table names a real function of a module the
generated module imports (issue 37: the numpy and jax modules of a user family called ``math.erf`` without importing
``math``, a NameError in ``log_partition``, ``expectation_parameters`` and the Fisher information).

By construction (codegen/backends/numpy/printer.py): the numpy printer's table has no ``math.*`` entry (each is its
scipy.special counterpart), every module-qualified name it prints is recorded in ``printer.imports`` and the templates
import every module there; :func:`codegen.inert.audit` refuses a module that reads a name nothing binds.  These tests
check each entry of each table against the modules themselves."""
from __future__ import annotations

import ast
import importlib

import numpy as np
import pytest
import scipy.special
import sympy as sp

from blr_derive.codegen.backends.jax.functions import JAX_SPECIAL, JnpPrinter
from blr_derive.codegen.backends.jax.printer import JaxPrinter
from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
from blr_derive.codegen.backends.torch.printer import ElementwisePrinter, HostPrinter
from blr_derive.codegen.backends.triton.printer import TritonPrinter
from blr_derive.codegen.inert import audit, unbound_names
from blr_derive.codegen.registry import RENDERERS
from blr_derive.core.errors import CodegenError, UnsupportedTarget

#: the names the templates bind to modules (import ... as ...)
ALIASES = {"jnp": "jax.numpy", "tl": "triton.language"}


def resolve(dotted):
    """The object a printed dotted name denotes (an alias expanded, the longest importable module prefix imported)."""
    parts = dotted.split(".")
    parts = ALIASES.get(parts[0], parts[0]).split(".") + parts[1:]
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for a in parts[i:]:
            obj = getattr(obj, a)
        return ".".join(parts[:i]), obj
    raise ImportError(dotted)


def _table(printer):
    table = getattr(printer, "KNOWN_FUNCTIONS", None)
    return dict(table) if table is not None else dict(printer.known_functions)


PRINTERS = [("numpy", BLRNumPyPrinter), ("jax", JaxPrinter), ("torch", ElementwisePrinter), ("torch", HostPrinter),
            ("triton", TritonPrinter)]


@pytest.mark.parametrize("target,cls", PRINTERS, ids=[f"{t}-{c.__name__}" for t, c in PRINTERS])
def test_every_table_entry_is_a_function_of_an_imported_module(target, cls):
    printer = cls()
    modules = RENDERERS[target].config.modules
    for name, dotted in _table(printer).items():
        if "." not in dotted:
            assert dotted in ("abs", "min", "max"), (name, dotted)        # Python's builtins
            continue
        module, fn = resolve(dotted)
        assert callable(fn), (name, dotted)
        top = ALIASES.get(dotted.split(".")[0], dotted.split(".")[0])
        assert module in modules or top in modules or module.split(".")[0] in modules, (target, name, dotted)


def test_the_numpy_table_has_no_math_module_entry():
    """sympy's NumPyPrinter falls back to math.erf, math.erfc, math.gamma, math.lgamma, math.factorial: none is left."""
    table = BLRNumPyPrinter().known_functions
    assert not [v for v in table.values() if v.startswith("math.")]
    assert table["erf"] == "scipy.special.erf" and table["erfc"] == "scipy.special.erfc"


def _functions_of_table(printer):
    """(sympy function class, arguments) for every function the printer's table names."""
    out = []
    for name in _table(printer):
        cls = getattr(sp, name, None)
        if cls is None or not isinstance(cls, type) or not issubclass(cls, sp.Function):
            continue
        for n in (1, 2):
            try:
                e = cls(*[sp.Symbol(f"x{i}", positive=True) for i in range(n)])
            except (TypeError, ValueError):
                continue
            if isinstance(e, sp.Function) and type(e) is cls:
                out.append((name, e))
                break
    return out


@pytest.mark.parametrize("printer_cls,target,header", [
    (BLRNumPyPrinter, "numpy", "import numpy\n"),
    (JnpPrinter, "jax", "import jax\nimport jax.numpy as jnp\nimport jax.scipy.special\nimport numpy\n"),
])
def test_each_table_function_prints_into_a_module_that_runs(printer_cls, target, header, x64):
    """Each function of the table, printed alone into a module with the imports its printer recorded, passes the
    audit, imports and computes sympy's value at x = 0.7 or 1.3 (whichever is in its domain)."""
    checked = 0
    for name, e in _functions_of_table(printer_cls()):
        printer = printer_cls()
        try:
            text = printer.doprint(e)
        except (UnsupportedTarget, CodegenError):
            continue
        imports = "".join(f"import {m}\n" for m in sorted(printer.imports) if target == "numpy")
        args = sorted(e.free_symbols, key=str)
        source = header + imports + f"\n\ndef f({', '.join(map(str, args))}):\n    return {text}\n"
        audit(source, target, RENDERERS[target].config.modules)
        ns = {}
        exec(compile(source, f"<{name}>", "exec"), ns)
        for vals in ([0.7, 1.3][:len(args)], [1.3, 0.7][:len(args)]):      # a point of the function's domain
            want = e.xreplace(dict(zip(args, vals))).evalf(20)
            if want.is_real:
                break
        got = float(ns["f"](*vals))
        assert got == pytest.approx(float(want), rel=1e-6), (name, text)
        checked += 1
    assert checked >= 20


def test_jax_special_names_exist():
    import jax.scipy.special as jss
    assert not [n for n in JAX_SPECIAL if not hasattr(jss, n)]
    assert {"erf", "erfc"} <= JAX_SPECIAL


def test_erf_prints_as_scipy_and_records_its_import():
    x = sp.Symbol("x")
    p = BLRNumPyPrinter()
    assert p.doprint(sp.erf(x) + sp.erfc(x)) == "scipy.special.erf(x) + scipy.special.erfc(x)"
    assert p.imports == {"scipy.special"}
    j = JnpPrinter()
    assert j.doprint(sp.erf(x)) == "jax.scipy.special.erf(x)" and j.special
    assert scipy.special.erf(0.3) == pytest.approx(0.3286267594591112, rel=1e-15)


# ------------------------------------------------------------------------------------- the undefined-name audit

MODULES = frozenset({"numpy", "scipy.linalg", "scipy.special"})


def test_audit_refuses_a_module_without_the_import_of_a_name_it_reads():
    src = "import numpy\n\n\ndef f(x):\n    return math.erf(x)\n"
    with pytest.raises(CodegenError, match=r"reads 'math' \(line 5\), which nothing in it binds"):
        audit(src, "numpy", MODULES)


def test_audit_locates_a_name_where_it_is_read_unbound_not_where_another_function_binds_it():
    """A federated module's client step binds ``s`` locally and its server step reads it unbound: the refusal
    names the server step's line (it named the first read anywhere, in the function that binds it)."""
    src = ("import numpy\n\n\ndef step(state):\n    s = state['s']\n    return s*2\n\n\n"
           "def server_step(x):\n    return x/s\n")
    assert [(n, line) for n, line, _ in unbound_names(src, ast.parse(src), MODULES)] == [("s", 10)]
    with pytest.raises(CodegenError, match=r"reads 's' \(line 10\), which nothing in it binds"):
        audit(src, "numpy", MODULES)


def test_audit_refuses_a_submodule_it_does_not_import():
    src = "import numpy\nimport scipy.linalg\n\n\ndef f(x):\n    return scipy.special.erf(x)\n"
    with pytest.raises(CodegenError, match=r"'scipy.special.erf' \(line 6\), but the module does not import "
                                           r"scipy.special"):
        audit(src, "numpy", MODULES)


def test_audit_sees_scopes_as_python_does():
    """Comprehensions, lambdas, closures, class bodies and builtins resolve as Python resolves them: a class
    attribute read unqualified inside a method is undefined; a closure's variable is not."""
    ok = '''import numpy


def f(x):
    y = [numpy.exp(z) for z in x]
    g = lambda t: t + len(y)
    def h():
        return g(1) + sum(y)
    return h()


class C:
    a = 1

    def m(self):
        return self.a + max(1, 2)
'''
    assert unbound_names(ok, ast.parse(ok), MODULES) == []
    bad = ok.replace("return self.a", "return a")
    assert [n for n, _, _ in unbound_names(bad, ast.parse(bad), MODULES)] == ["a"]


def test_scipy_erf_matches_the_reference():
    assert np.allclose(scipy.special.erf([0.0, 0.5, 2.0]), [0.0, 0.5204998778130465, 0.9953222650189527],
                       rtol=1e-15)
