"""The libyaml fast path of ``load_yaml_text`` (blr_derive/core/yamlio.py) reads every document as the pure-Python
path does: the same values, types, files and lines (of each mapping, sequence and key), and the same refusal for
everything it refuses (the pure-Python path words every refusal).  Checked on every YAML file of the repository,
on each of them with text that stresses the reader spliced into its strings (line and paragraph separators, NEL,
quotes, long text, exponent-looking scalars), on every prefix of a few of them (truncated files), and on inputs
written to be refused."""
from __future__ import annotations

import subprocess

import pytest
import yaml

from blr_derive.core import yamlio
from blr_derive.core.errors import SpecError
from conftest import ROOT


def _plain(x):
    """A comparable picture of a loaded document: container types, their file and lines, every value's type."""
    if isinstance(x, yamlio.LDict):
        return ("map", x.file, x.line, tuple((k, x.lines.get(k), _plain(v)) for k, v in x.items()))
    if isinstance(x, yamlio.LList):
        return ("seq", x.file, x.line, tuple(x.lines), tuple(_plain(v) for v in x))
    return (type(x).__name__, x)


def _both(text):
    """(fast path's result, pure-Python path's result): a picture of the document or the refusal's text."""
    def run():
        try:
            return _plain(yamlio.load_yaml_text(text, "f.yaml"))
        except SpecError as exc:
            return ("refused", str(exc), exc.line)
    fast = run()
    real = yamlio._libyaml_load
    yamlio._libyaml_load = lambda text, file: None
    try:
        slow = run()
    finally:
        yamlio._libyaml_load = real
    return fast, slow


def _files():
    out = subprocess.run(["git", "ls-files", "*.yaml", "*.yml"], cwd=ROOT, capture_output=True, text=True).stdout
    return [ROOT / p for p in out.split()]


def test_libyaml_is_used_here():
    """The fast path is taken where PyYAML has its C binding (else this file tests the fallback only)."""
    assert yaml.__with_libyaml__
    assert yamlio._libyaml_load("a: 1\n", "f.yaml") is not None


def test_every_file_of_the_repository_reads_the_same():
    files = _files()
    assert len(files) > 100
    for path in files:
        fast, slow = _both(path.read_text(encoding="utf-8"))
        assert fast == slow, path


STRESS = ["x\u2028y\u2029z", "x\x85y", "a\rb\r\nc", "x'''y\"\"\"z", "x\\", "}} {% raw %}", "A" * 3000,
          "1e-8", "2E5", "0x1F", "0o17", "yes", "~", "null", ".inf", "-.nan", "1_000", "12:30:00", "2026-11-29",
          "\u00e9\u4e2d\U0001F600", "  lead and trail  ", "#not a comment", "key: value", "- item"]


@pytest.mark.parametrize("name", ["catalog/ivon.yaml", "catalog/fed_admm_full.yaml", "families/normal_wishart.yaml",
                                  "families/categorical.yaml"])
def test_stressing_text_in_every_string_reads_the_same(name):
    """Each stressing text written into every string of a file (dumped by PyYAML in a scalar style that rotates
    over the plain, quoted, literal and folded ones), and into a plain scalar as it is."""
    path = ROOT / name
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))

    def poison(x, s):
        if isinstance(x, dict):
            return {k: poison(v, s) for k, v in x.items()}
        if isinstance(x, list):
            return [poison(v, s) for v in x]
        return x + s if isinstance(x, str) else x
    styles = (None, '"', "'", "|", ">")
    for i, s in enumerate(STRESS):
        for style in (styles[i % 5], styles[(i + 2) % 5]):
            text = yaml.safe_dump(poison(doc, s), sort_keys=False, allow_unicode=True, default_style=style,
                                  width=80)
            fast, slow = _both(text)
            assert fast == slow, (s, style)
    for s in STRESS[7:19]:
        fast, slow = _both(f"name: x\nvalue: {s}\nlist: [{s}, {s}]\n")
        assert fast == slow, s


def test_every_prefix_of_a_file_reads_the_same():
    """Truncated files: a document, or the same refusal at the same line."""
    for name in ("catalog/ivon.yaml", "families/normal_wishart.yaml"):
        text = (ROOT / name).read_text(encoding="utf-8")
        for n in range(0, len(text), 29):
            fast, slow = _both(text[:n])
            assert fast == slow, (name, n)


@pytest.mark.parametrize("text", [
    "a: 1\na: 2\n", "a: &x 1\nb: *x\n", "a: !!python/object:os.system 1\n", "a: !custom 1\n", "[" * 70 + "]" * 70,
    "a: 1\n---\nb: 2\n", "", "# only a comment\n", "a: [1, 2\n", "a: 'unterminated\n", "\ta: 1\n",
    "a: " + "9" * 400 + "\n", "a: .nan\n", "? [1, 2]\n: 3\n", "a: \"\\ud800\"\n", "a:\n  - b: 1\n   c: 2\n",
    "{a: 1, b: {c: [1, {d: 2}]}}\n", "- - - 1\n", "a: |\n  text\n  more\nb: >-\n  folded\n  text\n",
])
def test_hostile_and_odd_inputs_read_the_same(text):
    fast, slow = _both(text)
    assert fast == slow
