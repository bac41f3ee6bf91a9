"""Paths and module names written in comments, docstrings and documents name files that exist: a test, engine
module or code generator that is moved or renamed must take the sentences that name it along (issue 38: about
twenty comments named ``tests/test_name_policy.py``-style paths of an older layout).

Checked: every ``tests/…py``, ``blr_derive/…py``, ``codegen/…py``, ``benchmarks/…py`` and ``examples/…py`` path,
every ``families/NAME.py`` (the engine's ``blr_derive/families/``: the top-level ``families/`` holds YAML only),
and every dotted ``blr_derive.…`` name (the longest prefix that is a module, then a name its source defines), in
the sources and documents of the repository (the generated catalog artifacts excepted: they are compared byte for
byte by tests/golden; and :data:`FROZEN`)."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

#: installed package -> source folder, where they differ (setup.py)
FOLDER_OF = {("blr_derive", "codegen"): "codegen", ("blr_derive", "data", "families"): "families",
             ("blr_derive", "data", "catalog"): "catalog"}
#: files a document writes on purpose though they do not exist: ARCHITECTURE.md's worked example of a rule (the
#: block that tests/unit/rules/test_architecture_example.py runs)
EXAMPLES = {"blr_derive/rules/unscale_gradient.py"}
#: (file, stale name) left as they are on purpose: a recipe's or family's bytes are hashed into the generated
#: artifacts and the family index (catalog/generated), so fixing a comment there changes every artifact built from it;
#: fix them with the next change that regenerates those artifacts
FROZEN = {(f, "blr_derive/sizes.py") for f in ("families/categorical.yaml", "families/dirichlet.yaml",
                                                "catalog/dirichlet_categorical_unrolled.yaml",
                                                "catalog/em_gmm_unrolled.yaml", "catalog/svi_unrolled.yaml")}
FOLDERS = ("blr_derive", "codegen", "tests", "benchmarks", "examples", "docs", "catalog", "families", ".ci")
SUFFIXES = {".py", ".md", ".yaml", ".j2", ".txt", ".toml", ""}
PATH = re.compile(r"(?<![\w/.-])((?:tests|blr_derive|codegen|benchmarks|examples)/[\w/.-]*?\.py|families/\w+\.py)(?![\w.]*\w)")
DOTTED = re.compile(r"(?<![\w.])blr_derive(?:\.\w+)+")


def _texts():
    files = [p for p in ROOT.glob("*.md")] + [ROOT / "pyproject.toml", ROOT / "setup.py"]
    for folder in FOLDERS:
        for p in (ROOT / folder).rglob("*"):
            rel = p.relative_to(ROOT).parts
            if (p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in rel and "assets" not in rel[:2]
                    and rel[:2] != ("catalog", "generated") and "out" not in rel[:2]):
                files.append(p)
    for p in sorted(files):
        if p == Path(__file__).resolve():
            continue                              # this file's docstring and checks name stale paths on purpose
        try:
            yield p, p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue


def _source_of(parts):
    """The file of the module named by ``parts`` (blr_derive.codegen is the folder codegen/, ...), or None."""
    here, rest = ROOT / "blr_derive", parts[1:]
    for prefix, folder in FOLDER_OF.items():
        if tuple(parts[:len(prefix)]) == prefix:
            here, rest = ROOT / folder, parts[len(prefix):]
    for part in rest:
        here = here / part
    if here.is_dir() and (here / "__init__.py").is_file():
        return here / "__init__.py"
    if here.with_suffix(".py").is_file():
        return here.with_suffix(".py")
    return None


def _defines(source: str, name: str) -> bool:
    """Whether a module's source defines or imports ``name`` (a mention in a docstring is not a definition)."""
    n = re.escape(name)
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{n}\b|^\s*{n}\s*[:=]|^\s*(?:from\s+\S+\s+)?import\s[^#\n]*\b{n}\b"
                     rf"|^\s+{n},", source, re.M) is not None


def _dotted_exists(name: str) -> bool:
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        src = _source_of(parts[:n])
        if src is not None:
            rest = parts[n:]
            return not rest or _defines(src.read_text(encoding="utf-8"), rest[0])
    return False


def stale_names():
    """(where, name) for every path or dotted module name that names nothing."""
    out = []
    for p, text in _texts():
        rel = p.relative_to(ROOT)
        for i, line in enumerate(text.splitlines(), 1):
            for m in PATH.finditer(line):
                path = m.group(1)
                if path in EXAMPLES:
                    continue
                target = ROOT / ("blr_derive/" + path if path.startswith("families/") else path)
                if path.startswith("families/") or not target.is_file():
                    out.append((f"{rel}:{i}", path))
            for m in DOTTED.finditer(line):
                if not _dotted_exists(m.group(0)):
                    out.append((f"{rel}:{i}", m.group(0)))
    return out


def test_every_path_and_module_named_in_the_repository_exists():
    stale = [(w, n) for w, n in stale_names() if (w.split(":")[0], n) not in FROZEN]
    assert not stale, "\n".join(f"{where}: {name}" for where, name in stale)


def test_the_check_sees_a_stale_path_and_a_stale_module(tmp_path):
    """The scanner is not blind: the old layout's names are found stale, the current ones not."""
    assert PATH.findall("see tests/test_name_policy.py and families/model.py") == ["tests/test_name_policy.py",
                                                                                  "families/model.py"]
    assert not (ROOT / "tests/test_name_policy.py").exists() and (ROOT / "tests/unit/core/test_name_policy.py").exists()
    assert not _dotted_exists("blr_derive.fedrun.run_rank") and _dotted_exists("blr_derive.runtime.fedrun.run_rank")
    assert not _dotted_exists("blr_derive.family.Family") and _dotted_exists("blr_derive.families.model.Family")
    assert _dotted_exists("blr_derive.codegen.backends.jax") and not _dotted_exists("blr_derive.codegen.backends.fortran")
