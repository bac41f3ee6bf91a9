"""How recipe text reaches generated code: as inert data, through this module only (principle 4).

Generated modules contain three kinds of text that come from a recipe or a family file:

* **identifiers** (class, hyperparameter, state, data and oracle names): validated when the file is read
  (:mod:`blr_derive.core.names`) and checked again by every printer (:func:`identifier`);
* **prose** (title, paper, descriptions, the source path, the plain-text equations): wrapped in
  :class:`Prose` when the update IR is built.  A ``Prose`` has no text of its own for a template: ``str()``,
  formatting, concatenation and joins of it raise, and the template environment's ``finalize`` refuses it.
  Its only renderings are the filters ``comment`` (one physical line for a ``#`` comment), ``doc`` (the
  inside of a ``\"\"\"`` docstring) and ``q`` (a Python string literal), which escape everything that could
  end the comment or the string;
* **numbers and choices**, printed by :func:`pyval` as Python literals.

Jinja2 has no autoescaping for Python, so the environment (:func:`template_env`) is the one place where these
filters are installed, and :func:`audit` checks every rendered module before it is returned: it must parse,
import only the target's modules, bind nothing at the top level but what the templates bind, and call none of
``eval``, ``exec``, ``open``, ``__import__``, ``getattr`` and their kind.  A recipe whose text would break out
of its place is therefore either rendered inert or refused, never emitted.
"""
from __future__ import annotations

import ast
import builtins
import json
import keyword
import math
import re
import symtable
from pathlib import Path

import sympy as sp

from blr_derive.codegen.source import SHARED as SHARED_RUNTIME, Sources
from blr_derive.core.errors import CodegenError
from blr_derive.core.text import Prose
from blr_derive.families.diskcache import template_bytecode_cache

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _text(value) -> str:
    if isinstance(value, Prose):
        return value.text
    if isinstance(value, str):
        return value
    raise CodegenError(f"expected text, got {type(value).__name__}")


_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape_char(c: str) -> str:
    o = ord(c)
    if o < 0x100:
        return f"\\x{o:02x}"
    if o < 0x10000:
        return f"\\u{o:04x}"
    return f"\\U{o:08x}"


def comment(value) -> str:
    """Text for the rest of a ``#`` comment line: every character that is not printable (newlines, carriage
    returns, NUL, form feeds, Unicode line and paragraph separators, unpaired surrogates ...) is written as an
    escape sequence, so the comment is one physical line whatever the text."""
    return "".join(c if c.isprintable() and not _is_surrogate(c) else _SHORT.get(c) or _escape_char(c)
                   for c in _text(value))


def doc(value) -> str:
    """Text for the inside of a ``\"\"\"`` docstring: backslashes and double quotes are escaped (the string can
    neither end nor escape its closing quotes), line breaks are kept and every other non-printable character is
    written as the text of its escape sequence (the docstring's value then holds no control character)."""
    out = []
    for c in _text(value):
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif c == "\n" or (c.isprintable() and not _is_surrogate(c)):
            out.append(c)
        else:                           # shown as text (\\x00 reads as \x00): the docstring holds no control character
            out.append("\\" + (_SHORT.get(c) or _escape_char(c)))
    return "".join(out)


def pystr(value) -> str:
    """A double-quoted Python string literal equal to the text (``ast.literal_eval`` gives it back)."""
    out = ['"']
    for c in _text(value):
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif c.isprintable() and not _is_surrogate(c):
            out.append(c)
        else:
            out.append(_SHORT.get(c) or _escape_char(c))
    out.append('"')
    return "".join(out)


def _is_surrogate(c: str) -> bool:
    return 0xD800 <= ord(c) <= 0xDFFF


def identifier(name) -> str:
    """A name printed into code: an ASCII identifier that is not a keyword (a last line of defence; declared
    names are validated when the file is read)."""
    s = name if isinstance(name, str) else str(name)
    if not _IDENT.match(s) or keyword.iskeyword(s):
        raise CodegenError(f"'{comment(s)[:60]}' is not a valid Python identifier")
    return s


def pyval(v) -> str:
    """A Python literal for a hyperparameter default or a choice (deterministic)."""
    if v is None or isinstance(v, bool):
        return repr(v)
    if isinstance(v, int):
        return repr(v)
    if isinstance(v, str):
        return repr(identifier(v))          # choices are validated identifiers
    if isinstance(v, tuple):
        return "(" + ", ".join(pyval(x) for x in v) + ")"
    f = float(v)
    if math.isnan(f):
        raise CodegenError("NaN cannot be a default value")
    return "float('inf')" if f == math.inf else "float('-inf')" if f == -math.inf else repr(f)


def _finalize(value):
    """Every ``{{ ... }}`` of a template passes here: untrusted prose must have gone through a filter, a symbol
    is printed as a checked identifier, and any other expression must have been printed by the target's
    printer."""
    if isinstance(value, Prose):
        value._refuse()
    if isinstance(value, (sp.Symbol, sp.MatrixSymbol)):
        return identifier(value.name)
    if isinstance(value, sp.Basic):
        raise CodegenError(f"a sympy expression reached a template unprinted: {comment(sp.sstr(value))[:80]}")
    return value


#: the templates every target shares (``codegen/templates``), found after the target's own
SHARED_TEMPLATES = Path(__file__).parent / "templates"


def template_env(folder, runtime=None):
    """The jinja2 environment every target renders with: deterministic, strict about undefined names, with the
    rendering helpers as filters and ``finalize`` refusing raw prose.  Templates are looked up in the target's
    ``folder``, then in the shared :data:`SHARED_TEMPLATES` (e.g. ``_validate.py.j2``, the constructor checks).
    The global ``source`` copies definitions from the runtime sources (:mod:`blr_derive.codegen.source`): the
    shared ones of ``codegen/runtime/`` by their module name, and the target's own ``runtime`` module as
    ``"own"``."""
    import jinja2
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(folder), str(SHARED_TEMPLATES)]), keep_trailing_newline=True, trim_blocks=True,
        lstrip_blocks=True, undefined=jinja2.StrictUndefined, finalize=_finalize, autoescape=False,
        bytecode_cache=template_bytecode_cache(),
    )
    env.filters["q"] = pystr
    env.filters["comment"] = comment
    env.filters["doc"] = doc
    env.filters["tojson"] = lambda v: json.dumps([_text(x) for x in v], ensure_ascii=True)
    env.globals["pyval"] = pyval
    env.globals["zip"] = zip
    modules = {f.stem: f for f in sorted(SHARED_RUNTIME.glob("*.py")) if f.stem != "__init__"}
    if runtime is not None:
        modules["own"] = Path(runtime)
    env.globals["source"] = Sources(modules)
    return env


# --------------------------------------------------------------------------------------------- audit

#: names a generated module may never mention (code execution, introspection, files, the environment)
FORBIDDEN_NAMES = frozenset({
    "eval", "exec", "compile", "__import__", "open", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "breakpoint", "input", "exit", "quit", "help", "memoryview", "__builtins__", "__loader__",
    "__spec__", "os", "sys", "subprocess", "shutil", "socket", "importlib", "builtins", "pickle", "marshal",
    "ctypes", "pathlib", "io",
})
#: dunder attributes the templates use (constructors and pickling of the torch optimizers)
ALLOWED_DUNDER = frozenset({"__init__", "__setstate__", "__getstate__", "__name__"})
_TOP_LEVEL = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.FunctionDef, ast.ClassDef, ast.Expr)


def audit(source: str, target: str, modules: frozenset) -> str:
    """Check a rendered module (see the module docstring); returns it unchanged or raises CodegenError."""
    try:
        tree = ast.parse(source)
        # the compiler's symbol table finds what the parser does not (a duplicate argument, a misplaced
        # nonlocal): a module that parses is not yet one that imports
        compile(tree, f"<{target}>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise CodegenError(f"the {target} target rendered invalid Python (line {exc.lineno}: {exc.msg})") from None
    for i, top in enumerate(tree.body):
        if not isinstance(top, _TOP_LEVEL) or (isinstance(top, ast.Expr) and not (
                i == 0 and isinstance(top.value, ast.Constant) and isinstance(top.value.value, str))):
            raise CodegenError(f"the {target} target rendered an unexpected top-level statement "
                               f"(line {top.lineno}: {type(top).__name__})")
    _refuse_rebound_imports(tree, target)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for n in names:
                if n not in modules:
                    raise CodegenError(f"the {target} target rendered an import of '{comment(n)[:60]}' "
                                       f"(line {node.lineno}); it imports only {', '.join(sorted(modules))}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            raise CodegenError(f"the {target} target rendered a use of '{node.id}' (line {node.lineno})")
        elif (isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr.endswith("__")
              and node.attr not in ALLOWED_DUNDER):
            raise CodegenError(f"the {target} target rendered an access to '{node.attr}' (line {node.lineno})")
    unbound = unbound_names(source, tree, modules)
    if unbound:
        name, line, why = unbound[0]
        raise CodegenError(f"the {target} target rendered a module that reads '{comment(name)[:60]}' (line {line}), "
                           f"{why}: it would fail when that code runs")
    return source


def _refuse_rebound_imports(tree: ast.Module, target: str) -> None:
    """A top-level ``def``, ``class`` or assignment must not bind a name that a top-level import binds: a recipe
    named ``NamedTuple`` gave a jax module whose optax factory replaced ``typing.NamedTuple`` (the module still
    imported, and every later reader of the name got the factory).  Re-importing a package for a submodule
    (``import jax.scipy.linalg`` after ``import jax``) binds the same module and is not a rebinding."""
    imported: dict[str, int] = {}
    for top in tree.body:
        if isinstance(top, (ast.Import, ast.ImportFrom)):
            for alias in top.names:
                imported.setdefault(alias.asname or alias.name.split(".")[0], top.lineno)
    for top in tree.body:
        if isinstance(top, (ast.FunctionDef, ast.ClassDef)):
            bound = [top.name]
        elif isinstance(top, (ast.Assign, ast.AnnAssign)):
            targets = top.targets if isinstance(top, ast.Assign) else [top.target]
            bound = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        else:
            continue
        for name in bound:
            if name in imported:
                raise CodegenError(f"the {target} target rendered a module that binds '{comment(name)[:60]}' "
                                   f"(line {top.lineno}), a name its import on line {imported[name]} binds: "
                                   f"rename the recipe entry that names it")


#: names every module may read without binding them (Python's builtins)
_BUILTINS = frozenset(dir(builtins))


def unbound_names(source: str, tree: ast.Module, modules=frozenset()) -> list:
    """[(name, line, why)] for every name the module reads that nothing binds (a global no import, def, class or
    assignment at the top level binds, and no builtin), found with the compiler's own symbol tables (scopes,
    comprehensions, lambdas and class bodies as Python resolves them), and for every dotted use of a module of
    ``modules`` (``scipy.special.erf``) that the module does not import itself (``import scipy.linalg`` binds
    ``scipy`` but does not load ``scipy.special``).  Empty for a module that can run."""
    top = symtable.symtable(source, "<generated>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    read: set = set()
    scopes: dict = {}                   # name -> the first lines of the functions that read it unbound

    def walk(table):
        for s in table.get_symbols():
            if s.is_referenced() and (table is top or s.is_global()) and s.get_name() not in bound:
                read.add(s.get_name())
                if table is not top:
                    scopes.setdefault(s.get_name(), set()).add(table.get_lineno())
        for child in table.get_children():
            walk(child)
    walk(top)
    missing = read - _BUILTINS
    first: dict = {}
    imported: set[str] = set()          # modules an import statement loads (every parent package too)
    plain: set[str] = set()             # top-level names bound by `import a.b.c` (without `as`)
    outer: list[ast.Attribute] = []     # the outermost attribute of each dotted chain (a.b.c)
    inner_attrs: set[int] = set()
    # a name read unbound in a function is located at its first read there (another function may bind it locally)
    spans = [(f.lineno, f.end_lineno or f.lineno) for f in ast.walk(tree)
             if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]

    def unbound_here(name, line):
        starts = scopes.get(name)
        if not starts:
            return True
        return any(a in starts and a <= line <= b for a, b in spans)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id in missing and isinstance(node.ctx, ast.Load) and unbound_here(node.id, node.lineno):
                first[node.id] = min(first.get(node.id, node.lineno), node.lineno)
        elif isinstance(node, ast.Attribute):
            if id(node) not in inner_attrs:
                outer.append(node)
            if isinstance(node.value, ast.Attribute):
                inner_attrs.add(id(node.value))
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                imported.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                if a.asname is None:
                    plain.add(parts[0])
        elif isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            imported.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    found = [(n, first.get(n, 0), "which nothing in it binds (no import, definition or assignment)")
             for n in sorted(missing)]
    for node in outer:
        chain, inner = [node.attr], node.value
        while isinstance(inner, ast.Attribute):
            chain.append(inner.attr)
            inner = inner.value
        if not isinstance(inner, ast.Name) or inner.id not in plain:
            continue
        dotted = [inner.id] + chain[::-1]
        for i in range(2, len(dotted)):
            prefix = ".".join(dotted[:i])
            if prefix in modules and prefix not in imported:
                found.append((".".join(dotted), node.lineno, f"but the module does not import {prefix}"))
                break
    return sorted(set(found), key=lambda f: (f[1], f[0]))
