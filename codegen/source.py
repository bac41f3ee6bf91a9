"""Python source inlined into generated modules from real modules (issue 38, item 1).

What every generated module of a target shares (helpers, classes, methods that do not depend on the recipe) is
written once as ordinary Python in a *runtime source* module — ``codegen/runtime/`` for what several targets
share, ``codegen/backends/<target>/runtime.py`` for one target's — where it is linted, type-checked and unit-tested
like any module, and copied into each generated module from that source, so the generated modules stay standalone
(they import only their target's libraries; the README promises it).  The numpy target has always embedded the
engine's own ``dbesselk_numpy`` and Newton solver this way (:func:`inspect.getsource`); a runtime source module
is read as text instead of imported, so that generating torch or triton code needs neither torch nor triton.

A definition is found by its name among the module's top-level statements (functions with their decorators,
classes, assignments), or as ``Class.method`` among a class's methods (indented as in the class), and copied
exactly: its text in the generated module is its text in the source, byte for byte.  ``name as other`` copies the
definition under another name (a variant kept beside the common one, e.g. two forms of one helper).
"""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from blr_derive.core.errors import CodegenError

#: the runtime sources several targets share
SHARED = Path(__file__).parent / "runtime"


@dataclass(frozen=True)
class _Module:
    lines: tuple[str, ...]
    spans: dict[str, tuple[int, int]]        # name or Class.method -> (first line, end line), 0-based, end exclusive


def _span(node: ast.stmt) -> tuple[int, int]:
    decorators = getattr(node, "decorator_list", [])
    first = min([node.lineno] + [d.lineno for d in decorators]) - 1
    assert node.end_lineno is not None
    return first, node.end_lineno


@functools.lru_cache(maxsize=None)
def _module(path: Path) -> _Module:
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    spans: dict[str, tuple[int, int]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            spans[node.name] = _span(node)
            if isinstance(node, ast.ClassDef):
                for sub in node.body:
                    if isinstance(sub, ast.FunctionDef):
                        spans[f"{node.name}.{sub.name}"] = _span(sub)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    spans[t.id] = _span(node)
    return _Module(tuple(text.splitlines()), spans)


_AS = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)(?:\s+as\s+([A-Za-z_][A-Za-z0-9_]*))?\s*\Z")


def definition(path: Path, name: str) -> str:
    """The exact source text of one definition of the module at ``path`` (see the module docstring), without a
    final newline."""
    m = _AS.match(name)
    if m is None:
        raise CodegenError(f"'{name}' names no definition")
    own, alias = m.groups()
    mod = _module(path)
    if own not in mod.spans:
        raise CodegenError(f"{path.name} defines no '{own}'")
    first, end = mod.spans[own]
    text = "\n".join(mod.lines[first:end])
    if alias is not None:
        short = own.rsplit(".", 1)[-1]
        text, n = re.subn(rf"^(\s*(?:def|class) ){re.escape(short)}\b", rf"\g<1>{alias}", text, count=1, flags=re.M)
        if n != 1:
            raise CodegenError(f"'{own}' in {path.name} is not a function or class to rename")
    return text


def definitions(path: Path, *names: str, sep: str = "\n\n\n") -> str:
    """Several definitions of the module at ``path``, in the order named, separated by ``sep`` (two blank lines
    between top-level definitions; one between methods)."""
    return sep.join(definition(path, n) for n in names)


class Sources:
    """The runtime sources a target's templates read, by a short name (``shared`` is :data:`SHARED`'s modules,
    ``own`` the target's ``runtime.py``), as the template global ``source``:
    ``{{ source("own", "_work", "_real") }}``."""

    def __init__(self, modules: dict[str, Path]):
        self.modules = dict(modules)

    def __call__(self, module: str, *names: str, sep: str = "\n\n\n") -> str:
        if module not in self.modules:
            raise CodegenError(f"no runtime source '{module}' (known: {', '.join(sorted(self.modules))})")
        return definitions(self.modules[module], *names, sep=sep)
