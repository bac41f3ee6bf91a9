"""How loosely the engine's records are typed (issue 38, item 3): reproducible counts.

* fields of the dataclasses, NamedTuples and TypedDicts of ``blr_derive/ir``, ``blr_derive/rules``,
  ``blr_derive/candidates`` (and, reported apart, ``codegen``) whose annotation is only ``object``, ``list``,
  ``dict``, ``tuple``, ``set``, ``frozenset`` or ``Any`` (optionally ``| None``): a reader cannot tell what they hold;
* ``getattr(x, "name", None)`` probes in those folders (an attribute that may or may not be there);
* ``setattr`` calls there (attributes attached at run time).

Run: ``python benchmarks/count_loose_types.py [-v] [ROOT]`` (``-v`` lists the loose fields; ``ROOT``, a checkout of
the repository, defaults to this one: give another to count an older version).  It reads the source with
:mod:`ast` only (nothing is imported).

Measured (issue 38): before, 196 of 264 fields in ir/ rules/ candidates/ (22 of 29 in codegen/), 21 probes and
1 setattr there; after, 0 of 323, 2 probes (a YAML node's line, a rule's optional stage) and the 2 setattr
of ``Views`` (its own fields by name)."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]      # the repository (``main`` may count another)
ENGINE = ("blr_derive/ir", "blr_derive/rules", "blr_derive/candidates")
LOOSE = {"object", "list", "dict", "tuple", "set", "frozenset", "Any", "typing.Any"}


def _record_kind(cls: ast.ClassDef) -> str | None:
    for d in cls.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if ast.unparse(target) in ("dataclass", "dataclasses.dataclass"):
            return "dataclass"
    for b in cls.bases:
        if ast.unparse(b) in ("NamedTuple", "typing.NamedTuple", "TypedDict", "typing.TypedDict"):
            return ast.unparse(b).rsplit(".", 1)[-1]
    return None


def _loose(annotation: str) -> bool:
    parts = [p.strip() for p in annotation.split("|")]
    return all(p in LOOSE or p == "None" for p in parts) and any(p in LOOSE for p in parts)


def fields(folders, root: Path = ROOT) -> list[tuple[str, str, str, str]]:
    """(file, class, field, annotation) of every field of every record class under ``folders``."""
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for cls in ast.walk(tree):
                if not isinstance(cls, ast.ClassDef) or _record_kind(cls) is None:
                    continue
                for stmt in cls.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                        ann = ast.unparse(stmt.annotation)
                        if ann.startswith("ClassVar"):
                            continue
                        out.append((str(path.relative_to(root)), cls.name, stmt.target.id, ann))
    return out


def calls(folders, name: str, none_default: bool, root: Path = ROOT) -> list[str]:
    """``file:line`` of every call of builtin ``name`` (with a literal ``None`` third argument if asked)."""
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
                    if none_default and not (len(node.args) == 3 and isinstance(node.args[2], ast.Constant)
                                             and node.args[2].value is None):
                        continue
                    out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def main(argv) -> int:
    verbose = "-v" in argv
    roots = [a for a in argv if a != "-v"]
    root = Path(roots[0]).resolve() if roots else ROOT
    for label, folders in (("ir/ rules/ candidates/", ENGINE), ("codegen/", ("codegen",))):
        fs = fields(folders, root)
        loose = [f for f in fs if _loose(f[3])]
        print(f"{label}: {len(loose)} of {len(fs)} record fields typed only object/list/dict/tuple/set/Any; "
              f"{len(calls(folders, 'getattr', True, root))} getattr(..., None) probes; "
              f"{len(calls(folders, 'setattr', False, root))} setattr calls")
        if verbose:
            for f in loose:
                print(f"  {f[0]}: {f[1]}.{f[2]}: {f[3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
