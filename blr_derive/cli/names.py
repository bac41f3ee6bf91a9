"""``blr-derive list``: the catalog recipes and the built-in families, one line each, so that their names can be
found without reading the folders (``blr-derive list adam``, ``blr-derive list --kind family gauss``)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from blr_derive.cli.options import _Parser
from blr_derive.core.resources import catalog_dir, families_dir
from blr_derive.core.text import terminal_safe
from blr_derive.core.yamlio import load_yaml_file

KINDS = ("recipe", "family")


def entries(kind: str | None = None) -> list[tuple[str, str, str]]:
    """(kind, name, one line of text) for every catalog recipe (its ``title``) and built-in family (its
    ``description``), recipes first, each sorted by name."""
    out = []
    recipes = {p.stem for p in catalog_dir().glob("*.yaml")}
    for k, folder, key in (("recipe", catalog_dir(), "title"), ("family", families_dir(), "description")):
        if kind not in (None, k):
            continue
        for path in sorted(folder.glob("*.yaml"), key=lambda p: p.stem):
            spec = load_yaml_file(path, f"{k} file")
            text = spec.get(key, "") if isinstance(spec, dict) else ""
            text = " ".join(str(text or "").split())
            if k == "family" and path.stem in recipes:     # the name alone means the recipe: say how to name it
                text += f" [the name '{path.stem}' alone is the catalog recipe; give this family as {_shown(path)}]"
            out.append((k, path.stem, text))
    return out


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when it lies below it, else absolute."""
    rel = os.path.relpath(path)
    return rel if not rel.startswith(os.pardir) else str(path.resolve())


def cmd_list(argv) -> int:
    p = _Parser(prog="blr-derive list",
                description="List the catalog recipes and the built-in families, one line each: kind, name and "
                            "title (a recipe) or description (a family). Either name works wherever a recipe or a "
                            "family file does (blr-derive adam --target torch).")
    p.add_argument("word", nargs="*", help="show only the lines whose name or text contains every WORD "
                                          "(case-insensitive)")
    p.add_argument("--kind", choices=KINDS, help="only recipes or only families")
    args = p.parse_args(argv)
    words = [w.lower() for w in args.word]
    rows = [r for r in entries(args.kind) if all(w in f"{r[1]} {r[2]}".lower() for w in words)]
    width = max((len(r[1]) for r in rows), default=0)
    for kind, name, text in rows:
        sys.stdout.write(terminal_safe(f"{kind:<6}  {name:<{width}}  {text}".rstrip()) + "\n")
    if not rows:
        print(terminal_safe(f"blr-derive list: nothing matches {' '.join(args.word)!r}"), file=sys.stderr)
        return 1
    return 0
