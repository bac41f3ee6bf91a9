"""A family file whose prose changed (its description, its reference, a parameter's description) is not derived
again: blr_derive/families/library.py reuses the family derived for the same mathematics at the same lines
(``without_prose``) and gives it the new prose.  What is generated from it must be byte for byte what a fresh
derivation (no process cache, no disk cache) generates from the edited file — the new prose included, nothing
of the old left — for every built-in family; and anything that is not prose still derives afresh."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
import yaml

from blr_derive import cli
from blr_derive.families import library
from blr_derive.families.library import without_prose
from blr_derive.core.errors import SpecError
from blr_derive.core.text import Prose
from blr_derive.core.yamlio import load_yaml_text
from conftest import ROOT


def _generate(path: Path, out: Path, args) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main([str(path), "--target", "numpy", "-o", str(out), *args])
    assert rc == 0, err.getvalue()
    return out.read_text(encoding="utf-8")


def _reprose(text: str, tag: str):
    """(the file as PyYAML writes it, the same with ``tag`` appended to every description and reference): one
    entry per line, so that both hold every key at the same line."""
    def edit(x):
        if isinstance(x, dict):
            return {k: (f"{v} {tag}" if k in ("description", "reference") and isinstance(v, str) else edit(v))
                    for k, v in x.items()}
        return [edit(v) for v in x] if isinstance(x, list) else x
    doc = yaml.safe_load(text)
    dump = lambda d: yaml.safe_dump(d, sort_keys=False, allow_unicode=True, width=10**6)   # noqa: E731
    return dump(doc), dump(edit(doc))


@contextlib.contextmanager
def _fresh():
    """No process cache and no disk cache: the family is derived from its file."""
    saved = dict(library._FAMILY_CACHE), dict(library._ALIASES)
    library._FAMILY_CACHE.clear()
    library._ALIASES.clear()
    old = os.environ.get("BLR_DERIVE_CACHE")
    os.environ["BLR_DERIVE_CACHE"] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["BLR_DERIVE_CACHE"]
        else:
            os.environ["BLR_DERIVE_CACHE"] = old
        library._FAMILY_CACHE.clear()
        library._ALIASES.clear()
        library._FAMILY_CACHE.update(saved[0])
        library._ALIASES.update(saved[1])


def _picture(x, seen=None):
    """Everything a family holds, comparable across derivations: sympy expressions written out (the indices of
    Dummy symbols left out), prose as its text, dataclasses (but their memos of what is computed on demand),
    mappings and sequences entry by entry."""
    seen = set() if seen is None else seen
    if isinstance(x, sp.Basic):
        return re.sub(r"dummy_index=\d+", "", sp.srepr(x))
    if isinstance(x, Prose):
        return ("prose", x.text)
    if isinstance(x, (str, bytes, int, float, bool, type(None))):
        return x
    if id(x) in seen:
        return "<seen>"
    seen.add(id(x))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):      # memos (repr=False) are not what it is
        return (type(x).__name__, tuple((f.name, _picture(getattr(x, f.name, None), seen))
                                        for f in dataclasses.fields(x) if f.repr))
    if isinstance(x, dict):
        return ("dict", tuple((_picture(k, seen), _picture(v, seen)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_picture(v, seen) for v in x))
    if isinstance(x, (set, frozenset)):
        return (type(x).__name__, tuple(sorted(map(str, x))))
    if isinstance(x, np.ndarray):
        return ("array", x.tolist())
    return type(x).__name__


#: a command that derives from the family file alone (the one its error message suggests), where there is one
DERIVES = {"gaussian_diag": ["--loss", "abstract", "--approx", "delta"],
           "gamma": ["--loss", "abstract", "--approx", "score_function"],
           "bernoulli_logit": ["--loss", "abstract", "--approx", "score_function"]}


#: one built-in family of each kind: elementwise, scalar continuous, discrete, sized, matrix, mixed, vector, sphere
KINDS = ["gaussian_diag", "gamma", "poisson", "categorical", "wishart", "normal_gamma", "gaussian_full",
         "von_mises_fisher"]


@pytest.mark.parametrize("name", KINDS)
def test_new_prose_on_a_derived_family_is_what_a_fresh_derivation_gives(name, tmp_path):
    fam = tmp_path / f"{name}.yaml"
    original, edited = _reprose((ROOT / "families" / f"{name}.yaml").read_text(encoding="utf-8"), "EDITED-PROSE-7")
    assert edited != original and edited.count("\n") == original.count("\n")
    assert without_prose(load_yaml_text(edited, "f")) == without_prose(load_yaml_text(original, "f"))
    fam.write_text(original, encoding="utf-8")
    library.load_family(str(fam))
    fam.write_text(edited, encoding="utf-8")
    reused = library.load_family(str(fam))
    with _fresh():
        fresh = library.load_family(str(fam))
    assert reused is not fresh
    assert _picture(reused) == _picture(fresh)
    assert "EDITED-PROSE-7" in reused.description.text


@pytest.mark.parametrize("name", sorted(DERIVES))
def test_what_is_generated_from_the_edited_family_is_what_a_fresh_derivation_generates(name, tmp_path):
    fam = tmp_path / f"{name}.yaml"
    original, edited = _reprose((ROOT / "families" / f"{name}.yaml").read_text(encoding="utf-8"), "EDITED-PROSE-7")
    fam.write_text(original, encoding="utf-8")
    before = _generate(fam, tmp_path / "a.py", DERIVES[name])
    fam.write_text(edited, encoding="utf-8")
    reused = _generate(fam, tmp_path / "b.py", DERIVES[name])
    with _fresh():
        fresh = _generate(fam, tmp_path / "c.py", DERIVES[name])
    assert reused == fresh and "EDITED-PROSE-7" not in before


def test_the_reuse_is_what_makes_it_fast(tmp_path):
    """The edited file loads from the derived family (no derivation: well under the time the first load took)."""
    fam = tmp_path / "gaussian_diag.yaml"
    original, edited = _reprose((ROOT / "families" / "gaussian_diag.yaml").read_text(encoding="utf-8"), "again")
    fam.write_text(original, encoding="utf-8")
    with _fresh():
        t0 = time.process_time()
        first = library.load_family(str(fam))
        derive = time.process_time() - t0
        fam.write_text(edited, encoding="utf-8")
        t0 = time.process_time()
        second = library.load_family(str(fam))
        reuse = time.process_time() - t0
    assert second is not first and second.A == first.A and second.description.text.endswith("again")
    assert reuse < derive / 5, (reuse, derive)


@pytest.mark.parametrize("edit", [
    ("sufficient_statistics:\n  - theta\n  - theta**2", "sufficient_statistics:\n  - theta\n  - theta**2 + 0"),
    ("support: real", "support: positive"),
])
def test_what_is_not_prose_is_part_of_the_key(edit):
    text = (ROOT / "families" / "gaussian_diag.yaml").read_text(encoding="utf-8")
    old, new = edit
    if old not in text:
        pytest.fail(f"the family file changed: {old!r} not in it")
    changed = text.replace(old, new, 1)
    assert without_prose(load_yaml_text(changed, "f")) != without_prose(load_yaml_text(text, "f"))


def test_a_copy_elsewhere_is_the_same_family_with_its_own_file_name(tmp_path):
    """The same declaration in another folder (with other prose) is not derived again, and names its own file."""
    original, edited = _reprose((ROOT / "families" / "gamma.yaml").read_text(encoding="utf-8"), "copied")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "g.yaml").write_text(original, encoding="utf-8")
    (tmp_path / "b" / "g.yaml").write_text(edited, encoding="utf-8")
    first = library.load_family(str(tmp_path / "a" / "g.yaml"))
    second = library.load_family(str(tmp_path / "b" / "g.yaml"))
    assert first.file == str(tmp_path / "a" / "g.yaml") and second.file == str(tmp_path / "b" / "g.yaml")
    assert second.A is first.A and second.description.text.endswith("copied")
    with _fresh():
        fresh = library.load_family(str(tmp_path / "b" / "g.yaml"))
    assert _picture(second) == _picture(fresh)


def test_lines_are_not_part_of_the_key():
    """A description written over several lines moves every key after it: the same mathematics."""
    text = (ROOT / "families" / "gaussian_diag.yaml").read_text(encoding="utf-8")
    moved = re.sub(r"(?m)^description: (.*)$", lambda m: "description: |\n  " + m.group(1) + "\n  more\n  lines",
                   text, count=1)
    assert moved.count("\n") == text.count("\n") + 3
    assert without_prose(load_yaml_text(moved, "f")) == without_prose(load_yaml_text(text, "f"))


def test_invalid_prose_is_refused_where_it_is_even_when_the_mathematics_was_derived(tmp_path):
    fam = tmp_path / "gamma.yaml"
    original = (ROOT / "families" / "gamma.yaml").read_text(encoding="utf-8")
    fam.write_text(original, encoding="utf-8")
    library.load_family(str(fam))
    bad = re.sub(r"(?m)^description:.*$", "description: [not, text]", original, count=1)
    fam.write_text(bad, encoding="utf-8")
    line = next(i for i, t in enumerate(bad.splitlines(), 1) if t.startswith("description"))
    with pytest.raises(SpecError, match="'description' must be text") as exc:
        library.load_family(str(fam))
    assert (exc.value.file, exc.value.line) == (str(fam), line)
