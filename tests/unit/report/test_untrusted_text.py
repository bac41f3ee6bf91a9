"""Recipe and family text in every report, opened for real (issue 36): nothing in it runs or becomes markup.

The text fields are found, not listed: every key of every key set of the spec layer (``*_KEYS`` in
``blr_derive.spec``, ``.families``, ``.core``, ``.candidates``) is tried, in every kind of mapping the catalog
recipes and the built-in families have, with a probe text; a key is a *text field* where the parsed records keep
the probe as :class:`~blr_derive.core.text.Prose` (an expression is one too where a ``# comment`` after it is
kept).  A new text field, or a text field at a new place, is covered without editing this file.

Then one payload per field (an ``<img onerror>``, ``<svg onload>``, ``<script>``, ``<details ontoggle>``, a
``javascript:`` link, Markdown's headings, fences, lists and emphasis, ``$$`` math, and TeX's ``\\input{/etc/passwd}``,
``\\write18``, ``\\openout``, ``\\catcode`` and ``^^5c``) is written into every field of a few catalog recipes and
of copies of the built-in families they use (the hosts: chosen to hold every field), and every report is made:

* ``blr-derive explain HOST --format markdown|html|latex`` in a subprocess for the first host (the issue's attack:
  a family file's ``reference``), in process (``cli.main``) for the others;
* the notebook views: a derivation's and each step's ``_repr_markdown_``, ``_repr_html_``, ``_repr_latex_``, and the
  Markdown, HTML and LaTeX views of recipes and families that ``register_notebook_views`` installs.

and opened: the Markdown through a CommonMark renderer (markdown-it-py, raw HTML on, as notebooks and editors
render it) and the HTML in headless Chromium (``--dump-dom``), where each payload would mark the page if any of it
ran; the LaTeX with ``pdflatex -recorder`` (the ``.fls`` lists every file TeX read or wrote), without shell escape
and again *with* it, so that the escaping alone is what keeps ``\\write18`` inert.  Each run has a positive
control (the raw payload, unescaped), which must trip the same detectors: a detector that cannot see an attack
proves nothing.
"""
from __future__ import annotations

import copy
import functools
import html
import html.parser
import importlib
import pkgutil
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import yaml

from blr_derive.core.errors import BLRError
from blr_derive.core.text import Prose
from blr_derive.core.yamlio import LDict, LList, load_yaml_text
from conftest import CATALOG, ROOT

FAMILIES = ROOT / "families"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--virtual-time-budget=5000"]
PROBE = 'probe <b>"x"</b> & $y$ \\z'


# ------------------------------------------------------------------------------------------ the text fields
def key_sets() -> dict:
    """{module.NAME: keys} for every ``*_KEYS`` set of strings in the layers that read recipes and families."""
    out = {}
    for pkg in ("blr_derive.spec", "blr_derive.families", "blr_derive.core", "blr_derive.candidates"):
        for info in pkgutil.iter_modules(importlib.import_module(pkg).__path__, pkg + "."):
            for name, value in vars(importlib.import_module(info.name)).items():
                if (name.endswith("_KEYS") and isinstance(value, (set, frozenset)) and value
                        and all(isinstance(k, str) for k in value)):
                    out[f"{info.name}.{name}"] = frozenset(value)
    return out


def _mappings(doc, path=()):
    if isinstance(doc, dict):
        yield path, doc
        for k, v in doc.items():
            yield from _mappings(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _mappings(v, path + (i,))


def _at(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def _dump(doc) -> str:
    return yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False, allow_unicode=True,
                     default_flow_style=False, width=10**6)


def _load(src):
    """A corpus file as plain data (a recipe's family file, if it names one, as an absolute path)."""
    doc = yaml.load(src.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if isinstance(doc.get("family"), str) and doc["family"].endswith((".yaml", ".yml")):
        doc["family"] = str((src.parent / doc["family"]).resolve())
    return doc


@functools.lru_cache(maxsize=1)
def _corpus():
    """(kind, file, document) of every catalog recipe (family paths made absolute) and built-in family."""
    return ([("recipe", p, _load(p)) for p in sorted(CATALOG.glob("*.yaml"))]
            + [("family", p, _load(p)) for p in sorted(FAMILIES.glob("*.yaml"))])


def _parse(kind, doc, src):
    """The records the spec layer makes of ``doc`` (a recipe, or a family declaration), or None if refused."""
    from blr_derive.candidates.load import recipe_from_spec
    from blr_derive.core.sizes import declared_sizes, resolve_sizes
    from blr_derive.spec.family import parse_family
    try:
        spec = load_yaml_text(_dump(doc), str(src))
        if kind == "recipe":
            return recipe_from_spec(spec, str(src), src.parent)
        sizes = resolve_sizes(declared_sizes(spec), None, None, src.stem) if "sizes" in spec else None
        return parse_family(spec, str(src), sizes)
    except BLRError:
        return None


def _held(obj, needle) -> set:
    """How the records ``obj`` hold text containing ``needle``: 'prose' (a Prose), 'args' (a rule's arguments
    as written, which the rule validates when it runs), 'str' (a bare string anywhere else).  The YAML documents
    some records keep (LDict, LList) are the input itself and are not looked at."""
    import numpy as np
    import sympy as sp
    from blr_derive.spec.hyper import Approx
    seen, found, stack = set(), set(), [(obj, False)]
    while stack:
        o, in_args = stack.pop()
        if id(o) in seen or isinstance(o, (LDict, LList, sp.Basic, np.ndarray, type, int, float, bool)) or o is None:
            continue
        seen.add(id(o))
        if isinstance(o, Prose):
            found |= {"prose"} if needle in o.text else set()
        elif isinstance(o, str):
            found |= {"args" if in_args else "str"} if needle in o else set()
        elif isinstance(o, dict):
            stack += [(x, in_args) for kv in o.items() for x in kv]
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack += [(x, in_args) for x in o]
        elif not callable(o) or hasattr(o, "__dict__"):
            attrs = dict(getattr(o, "__dict__", {}))
            attrs.update({s: getattr(o, s) for s in getattr(type(o), "__slots__", ()) if hasattr(o, s)})
            stack += [(v, in_args or (isinstance(o, Approx) and k == "args")) for k, v in attrs.items()]
    return found


@functools.lru_cache(maxsize=1)
def discover():
    """Every key the spec layer accepts free text under, by where it is: {(kind, pattern, key): (how, hold,
    sets)} with ``pattern`` the mapping's path (names a recipe chooses as ``*``), ``how`` 'text' (any text) or
    'comment' (an expression with a trailing ``# text``), ``hold`` how the records keep the probe (:func:`_held`)
    and ``sets`` the smallest key sets that the keys of the mapping it was tried in fit; and {(kind, pattern):
    [(file, path, sets)]} of every mapping of the corpus."""
    sets = key_sets()
    known = frozenset().union(*sets.values())
    probes, places = {}, {}
    for kind, src, doc in _corpus():
        for path, m in list(_mappings(doc)):
            pattern = tuple(p if isinstance(p, str) and p in known else "*" for p in path)
            here = {k for k in m if isinstance(k, str)}
            fitting = {name: ks for name, ks in sets.items() if here and here <= ks}
            smallest = min(map(len, fitting.values()), default=0)
            fitting = {name: ks for name, ks in fitting.items() if len(ks) == smallest}
            places.setdefault((kind, pattern), []).append((src, path, tuple(sorted(fitting))))
            candidates = {k for k, v in m.items() if k in known and not isinstance(v, (dict, list))}
            candidates |= {k for ks in fitting.values() for k in ks}
            for key in sorted(candidates):
                if (kind, pattern, key) in probes:
                    continue
                mutant = copy.deepcopy(doc)
                old = _at(mutant, path).get(key)
                result = None
                for how, value in (("text", PROBE),
                                   ("comment", f"{old}  # {PROBE}" if isinstance(old, str) else None)):
                    if value is None:
                        continue
                    _at(mutant, path)[key] = value
                    records = _parse(kind, mutant, src)
                    if records is not None:
                        result = (how, frozenset(_held(records, PROBE)), tuple(sorted(fitting)))
                        break
                probes[(kind, pattern, key)] = result
    return {k: v for k, v in probes.items() if v is not None}, places


@functools.lru_cache(maxsize=None)
def _places(field):
    """(file, path) of the mappings of the corpus a field is in: its pattern, where the key is written, or where
    it is not but the mapping is of the kind (the smallest key sets its keys fit) the field was found in (a
    'description' is text in a mixture mapping; a sized family's reference ``{name: dirichlet, K: 3}`` with one
    would be read as a declaration)."""
    probes, places = discover()
    docs = {src: doc for _, src, doc in _corpus()}
    return [(src, path) for src, path, sets in places.get(field[:2], [])
            if field[-1] in _at(docs[src], path) or sets == probes[field][2]]


def text_fields():
    """The fields the payloads go into: where a probe is held as Prose, and where a key that is text elsewhere is
    accepted as text (a description the records drop at loading may still be read later, e.g. an axis family's);
    never a rule's argument (validated as a name, an expression or a number when the rule runs)."""
    probes, _ = discover()
    text_keys = {field[-1] for field, (how, held, _) in probes.items() if how == "text" and "prose" in held}
    return sorted(field for field, (how, held, _) in probes.items()
                  if "prose" in held or (how == "text" and field[-1] in text_keys and not held))


def _text_at(doc, how, old, text):
    if "sizes" in doc:                  # a template (blr_derive/core/sizes.py): literal braces are doubled
        text = text.replace("{", "{{").replace("}", "}}")
    return f"{old}  # {text}" if how == "comment" else text


@functools.lru_cache(maxsize=1)
def payload_kinds() -> dict:
    """{field: payload function}: the full payload where the field takes it, else the short one (a peer check's
    message is one line of at most 200 characters without braces)."""
    probes, _ = discover()
    docs = {src: (kind, doc) for kind, src, doc in _corpus()}
    out = {}
    for field in text_fields():
        how = probes[field][0]
        kind, key = field[0], field[-1]
        src, path = _places(field)[0]
        mutant = copy.deepcopy(docs[src][1])
        m = _at(mutant, path)
        m[key] = _text_at(mutant, how, m.get(key), payload("F999", one_line=how == "comment"))
        full = functools.partial(payload, one_line=how == "comment")
        out[field] = full if _parse(kind, mutant, src) is not None else short_payload
    return out


def test_recipe_and_family_text_is_prose_from_the_parser():
    """The type that keeps text out of outputs: every piece of recipe or family text the parsed records keep is a
    Prose (which refuses str()), never a bare string that a report could paste; a rule's arguments are kept as
    written and validated by the rule.  The discovery is not vacuous: titles, descriptions, paper and family
    references, hyperparameter descriptions are among the fields it finds."""
    probes, _ = discover()
    bare = sorted(f for f, (_, held, _) in probes.items() if "str" in held)
    assert not bare, f"recipe or family text kept as a bare string: {bare}"
    found = {(kind, pattern[-1:], key) for kind, pattern, key in text_fields()}
    assert {("recipe", (), "title"), ("recipe", (), "description"), ("recipe", (), "paper"),
            ("family", (), "reference"), ("family", (), "description"),
            ("recipe", ("*",), "description")} <= found, found


# ------------------------------------------------------------------------------------------ the payloads
def payload(tag: str, one_line: bool = False) -> str:
    """Text that tries every way out of a report's escaping: if any of it ran in a browser it would set the
    attribute ``data-hit-<tag>-<vector>`` of the page; TeX would read /etc/passwd, run ``touch``, or write a file."""
    def js(vector):
        return f"document.documentElement.setAttribute('data-hit-{tag}-{vector}','1')"
    text = (f'{tag} <img src=x onerror="{js("img")}"><svg onload="{js("svg")}"></svg><script>{js("script")}</script>'
            f'<details open ontoggle="{js("details")}"></details> [click](javascript:{js("link")}) '
            f"\\immediate\\write18{{touch PWNED-{tag}}} \\newwrite\\blrout\\immediate\\openout\\blrout=pwned-{tag}.tex "
            f"\\input{{/etc/passwd}} ^^5cinput{{/etc/passwd}} \\catcode 126=0 ~input{{/etc/passwd}} "
            "<b>bold</b> `code` *em* _em_ $$x$$ \\(y\\) &amp; }} {{ # % ^ _ | ~ "
            "\n# heading\n- item\n1. one\n    indented code\n> quote\n```\nfence\n===\n"
            f"{tag}-END")
    return text.replace("\n", " ") if one_line else text


def short_payload(tag: str) -> str:
    """The payload in one line of less than 200 characters, without braces."""
    return (f"{tag} <img src=x onerror=\"document.documentElement.setAttribute('data-hit-{tag}-img','1')\"> "
            f"\\input /etc/passwd `x` *y* $$ {tag}-END")


def _words(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------------------------------------------------------ the hosts
def _family_uses(doc):
    """[(path, built-in family file)] of each place a recipe names a built-in family (its family, a mixture's
    component family, a block's family, a sized family's name)."""
    out = []
    for path, m in _mappings(doc):
        for k, v in m.items():
            if k in ("family", "mixture", "name") and isinstance(v, str) and (FAMILIES / f"{v}.yaml").is_file():
                out.append((path + (k,), FAMILIES / f"{v}.yaml"))
    return out


def choose_hosts():
    """[(recipe file, the recipe fields it holds)]: a few catalog recipes that together hold every recipe text field
    and, through the built-in families they name, every family text field (a family field that only a family no
    host names holds adds that family's smallest user); the first host names a family of its own at its top level
    (the issue's attack: that family's reference in step 1) and holds the most fields."""
    fields = text_fields()
    recipes = [(src, doc) for kind, src, doc in _corpus() if kind == "recipe"]
    docs = dict(recipes)

    def held(kind, src, wanted):
        return {f for f in wanted if f[0] == kind for s, _ in _places(f) if s == src}

    def family_fields(src):
        return set().union(*(held("family", f, fields) for _, f in _family_uses(docs[src])), set())

    need = set(fields)
    chosen = []
    while need:
        best = max(docs, key=lambda s: (len((held("recipe", s, need) | family_fields(s)) & need),
                                        -s.stat().st_size))
        got = (held("recipe", best, need) | family_fields(best)) & need
        if not got:
            pytest.fail(f"text fields that no catalog recipe (or a family it names) holds: {sorted(need)}")
        chosen.append(best)
        need -= got

    def rank(src):
        return (any(path == ("family",) for path, _ in _family_uses(docs[src])),
                len(held("recipe", src, fields) | family_fields(src)))
    chosen.sort(key=rank, reverse=True)
    return [(src, held("recipe", src, fields)) for src in chosen]


def poison(doc, kind, src, wanted, fields):
    """Write a payload into every field of ``wanted`` at every place ``doc`` (read from ``src``) has it."""
    probes, _ = discover()
    for field in sorted(wanted):
        how, key = probes[field][0], field[-1]
        for s, path in _places(field):
            if s != src:
                continue
            tag = f"F{len(fields):03d}"
            fields[tag] = (field, src.name)
            m = _at(doc, path)
            m[key] = _text_at(doc, how, m.get(key), payload_kinds()[field](tag))


def write_hosts(tmp):
    """The poisoned hosts written under ``tmp``: [recipe path], {tag: (field, file it is in)}; every built-in family
    a host names is a poisoned copy next to it."""
    hosts = choose_hosts()
    family_fields = [f for f in text_fields() if f[0] == "family"]
    fields, out = {}, []
    for i, (src, recipe_fields) in enumerate(hosts):
        doc = _load(src)
        poison(doc, "recipe", src, recipe_fields, fields)
        if _parse("recipe", doc, src) is None:
            pytest.fail(f"{src.name} refuses the payloads in its text fields {sorted(recipe_fields)}")
        copies = {}
        for path, fam_src in _family_uses(copy.deepcopy(doc)):
            if fam_src not in copies:
                fdoc = _load(fam_src)
                poison(fdoc, "family", fam_src, family_fields, fields)
                copies[fam_src] = tmp / f"host{i}_family_{fam_src.name}"
                copies[fam_src].write_text(_dump(fdoc), encoding="utf-8")
            trial = copy.deepcopy(doc)
            _at(trial, path[:-1])[path[-1]] = str(copies[fam_src])
            if _parse("recipe", trial, src) is not None:        # a name that is a keyword stays (categorical
                doc = trial                                     # blocks over the components)
        recipe = tmp / f"host{i}_{src.name}"
        recipe.write_text(_dump(doc), encoding="utf-8")
        out.append(recipe)
    return out, fields


# ------------------------------------------------------------------------------------------ the reports
FORMATS = (("markdown", "md"), ("html", "html"), ("latex", "tex"))


def notebook_views(path) -> dict:
    """{'markdown' | 'html' | 'latex': [text]}: what a notebook shows of a host: the derivation's and each step's
    views, and the views ``register_notebook_views`` installs for its recipe and families (``VIEWS``)."""
    from blr_derive.api import derive_file
    from blr_derive.report.views import VIEWS
    recipe, D = derive_file(path)
    out = {"markdown": [D._repr_markdown_()] + [s._repr_markdown_() for s in D.steps],
           "html": [D._repr_html_()],
           "latex": [D._repr_latex_()] + [s._repr_latex_() for s in D.steps]}
    shown = [recipe, recipe.family] + [b.family for b in getattr(recipe, "blocks", ()) if b.family is not None]
    for obj in shown:
        for cls, md, page, tex in VIEWS:
            if type(obj) is cls:
                out["markdown"].append(md(obj))
                out["html"].append(page(obj))
                out["latex"].append(tex(obj))
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Every report of every poisoned host: {'markdown' | 'html' | 'latex': [explain output files],
    'notebook': {format: [text]}, 'fields': {tag: (field, file)}, 'tmp': folder}."""
    tmp = tmp_path_factory.mktemp("untrusted")
    hosts, fields = write_hosts(tmp)
    files = {fmt: [tmp / f"host{i}.{ext}" for i in range(len(hosts))] for fmt, ext in FORMATS}
    # the first host through the real command line (a process per format, side by side) ...
    procs = [subprocess.Popen([sys.executable, "-m", "blr_derive", "explain", str(hosts[0]), "--format", fmt,
                               "-o", str(files[fmt][0])], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for fmt, _ in FORMATS]
    # ... the others through the same command line in this process, and the notebook views of all
    from blr_derive import cli
    for i, host in enumerate(hosts[1:], 1):
        for fmt, _ in FORMATS:
            assert cli.main(["explain", str(host), "--format", fmt, "-o", str(files[fmt][i])]) == 0, host
    notebook = {fmt: [] for fmt, _ in FORMATS}
    for host in hosts:
        for fmt, texts in notebook_views(host).items():
            notebook[fmt] += texts
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0 and err == "", err
    return {**files, "notebook": notebook, "fields": fields, "tmp": tmp}


# ------------------------------------------------------------------------------------------ opening them
def chromium_dom(page: Path) -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
    r = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={page.parent / 'profile'}", "--dump-dom",
                        page.as_uri()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


class _Page(html.parser.HTMLParser):
    """The visible text of a rendered page (not scripts, styles or KaTeX's TeX annotations), and its elements that
    could run something: any ``on...`` attribute, ``<script>``, ``<img>``, ``<iframe>``, ``<details>``."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text, self.live, self._skip, self.title = [], [], 0, []
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "img", "iframe", "details", "object", "embed") or any(
                k.lower().startswith("on") for k, _ in attrs):
            self.live.append(self.get_starttag_text())
        if tag in ("script", "style", "annotation") or self._skip:
            self._skip += 1
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        if self._skip:
            self._skip -= 1
        self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title.append(data)
        elif not self._skip:
            self.text.append(data)


def opened(dom: str):
    """(hits, text and live elements before the control, the page's title) of a dumped DOM."""
    root = re.search(r"<html[^>]*>", dom).group(0)
    hits = {f"{tag.upper()}-{vector}" for tag, vector in re.findall(r'data-hit-([a-z0-9]+)-([a-z]+)=', root)}
    before, _, _ = dom.partition("<!--control-->")
    head, _, body = before.partition("<body")
    page = _Page()
    page.feed("<body" + body)
    head_page = _Page()
    head_page.feed(head)
    return hits, _words("".join(page.text)), page.live, _words("".join(head_page.title))


def check_inert(hits, text, live, fields, what):
    """No payload ran or became an element; the control (the raw payload) did; each payload a report shows is
    shown whole, as text.  Returns the tags shown."""
    assert {h.split("-")[0] for h in hits} == {"CTRL"}, f"{what}: payload code ran: {sorted(hits)}"
    assert {"CTRL-img", "CTRL-svg", "CTRL-script"} <= hits, f"{what}: the control did not run: {sorted(hits)}"
    assert not live, f"{what}: markup from recipe text: {live[:5]}"
    shown = {tag for tag in fields if f"{tag}-END" in text}
    kinds = payload_kinds()
    for tag in sorted(shown):
        field, _ = fields[tag]
        assert _words(kinds[field](tag)) in text, f"{what}: the payload of {field} is not shown as its text"
    return shown


def _shown_keys(shown, fields):
    return {fields[tag][0][-1] for tag in shown}


@pytest.mark.slow
def test_markdown_reports_are_text_in_a_commonmark_renderer(reports, tmp_path):
    """``explain`` Markdown and the notebook's Markdown views, rendered by a CommonMark renderer with raw HTML on
    (markdown-it-py) and opened in Chromium: no payload runs or becomes markup, every payload shown is its text;
    the same payload unescaped runs."""
    from markdown_it import MarkdownIt
    md = MarkdownIt("commonmark").enable("table")
    parts = [f.read_text(encoding="utf-8") for f in reports["markdown"]] + reports["notebook"]["markdown"]
    body = "\n".join(f"<section>{md.render(p)}</section>" for p in parts)
    page = tmp_path / "markdown.html"
    page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>reports</title></head><body>\n{body}\n'
                    f"<!--control--><section>{md.render(payload('CTRL'))}</section></body></html>\n", encoding="utf-8")
    hits, text, live, _ = opened(chromium_dom(page))
    shown = check_inert(hits, text, live, reports["fields"], "Markdown")
    assert {"title", "description", "paper", "reference"} <= _shown_keys(shown, reports["fields"])
    # the attack through a real blr-derive process: a family file's reference in step 1
    first = parts[0]
    assert any(f"{tag}-END" in first and fields_key == ("family", (), "reference")
               for tag, (fields_key, _) in reports["fields"].items()), first[:3000]


@pytest.mark.slow
def test_html_reports_are_text_in_a_browser(reports, tmp_path):
    """``explain --format html`` (the first host's page as the command wrote it, the others' bodies added to it)
    and the notebook's HTML and LaTeX views (the LaTeX typeset by the page's KaTeX, as MathJax does in a notebook),
    opened in Chromium under the page's own Content-Security-Policy (inline scripts allowed): no payload runs or
    becomes markup, KaTeX reports no error, every payload shown is its text, the page's title included."""
    first, *others = [f.read_text(encoding="utf-8") for f in reports["html"]]
    extra = [re.search(r"<body>(.*)</body>", o, re.S).group(1) for o in others] + reports["notebook"]["html"]
    extra += [f'<div class="nb-latex">{html.escape(t)}</div>' for t in reports["notebook"]["latex"]]
    head, _, _ = first.rpartition("</body>")
    control = payload("CTRL").replace("$", "")
    page = tmp_path / "reports.html"
    page.write_text(head + "\n".join(extra) + f"\n<!--control-->{control}</body></html>\n", encoding="utf-8")
    dom = chromium_dom(page)
    hits, text, live, title = opened(dom)
    assert 'class="katex-error"' not in dom and int(re.search(r'data-katex-count="(\d+)"', dom).group(1)) > 100
    shown = check_inert(hits, text, live, reports["fields"], "HTML")
    assert {"title", "description", "paper", "reference"} <= _shown_keys(shown, reports["fields"])
    title_tags = [t for t in shown if f"{t}-END" in title]
    assert title_tags and all(_words(payload(t)) in title for t in title_tags), title


def _texmf_roots() -> list:
    """The folders TeX's own files live in (kpathsea's trees: distribution, configuration, generated files)."""
    names = "TEXMFROOT TEXMFDIST TEXMFMAIN TEXMFSYSVAR TEXMFSYSCONFIG TEXMFLOCAL TEXMFVAR TEXMFCONFIG TEXMFHOME"
    r = subprocess.run(["kpsewhich", "--expand-var=" + "|".join(f"${n}" for n in names.split())],
                       capture_output=True, text=True, timeout=60)
    roots = [Path(p).resolve() for p in r.stdout.strip().split("|") if p.startswith("/")]
    assert roots, r.stderr
    return roots


def run_tex(source: str, folder: Path, shell_escape: bool, halt: bool = True):
    """pdflatex on ``source`` in a folder of its own: (exit status, [(INPUT|OUTPUT, path)] of the recorder, log,
    the files in the folder afterwards)."""
    exe = shutil.which("pdflatex")
    if exe is None:
        pytest.fail("pdflatex is not installed (apt-get install -y texlive-latex-base; .ci/run installs it)")
    folder.mkdir()
    (folder / "doc.tex").write_text(source, encoding="utf-8")
    r = subprocess.run([exe, "-shell-escape" if shell_escape else "-no-shell-escape", "-recorder",
                        "-interaction=nonstopmode", *(["-halt-on-error"] if halt else []), "doc.tex"],
                       cwd=folder, capture_output=True, timeout=300)
    fls = [tuple(line.split(" ", 1)) for line in (folder / "doc.fls").read_text(encoding="utf-8").splitlines()
           if line.startswith(("INPUT ", "OUTPUT "))]
    log = (folder / "doc.log").read_text(encoding="utf-8", errors="replace")
    return r.returncode, fls, log, sorted(p.name for p in folder.iterdir())


def engine_characters() -> str:
    """Every character of the string constants of the rules and candidates (what step texts are written with)."""
    import ast
    chars = set()
    for folder in ("rules", "candidates"):
        for f in sorted((ROOT / "blr_derive" / folder).glob("*.py")):
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    chars |= set(node.value)
    return " ".join(sorted("x" + c if unicodedata.combining(c) else c for c in chars if c.isprintable()))


def test_engine_characters_have_latex_commands():
    """The words of the engine's step texts (Greek, operators, sub- and superscripts, combining accents) are all
    typeset: none is printed as a code point."""
    from blr_derive.report.latex import tex_text
    assert "[U+" not in tex_text(engine_characters())


@pytest.mark.slow
def test_latex_reports_compile_and_run_nothing(reports, tmp_path):
    """``explain --format latex`` (the first host's document as the command wrote it; the other hosts' bodies, the
    notebook's LaTeX views and every character of the engine's texts in a second document) compiles with pdflatex
    without an error, with shell escape off and on: TeX reads only its own files and the document, writes only the
    document's .aux, .log and .pdf, runs no command; the same payload unescaped reads /etc/passwd, writes a file
    and runs ``touch`` (with shell escape on)."""
    from blr_derive.report.latex import tex_text
    first, *others = [f.read_text(encoding="utf-8") for f in reports["latex"]]
    preamble, _, _ = first.partition(r"\begin{document}")
    bodies = [re.search(r"\\begin\{document\}(.*)\\end\{document\}", o, re.S).group(1) for o in others]
    second = (preamble + "\\begin{document}\n" + "\n".join(bodies) + "\n\\section*{Notebook views}\n"
              + "\n\n".join(reports["notebook"]["latex"]) + "\n\n" + tex_text(engine_characters())
              + "\n\\end{document}\n")
    roots = _texmf_roots()
    job = {"doc.tex", "doc.aux", "doc.log", "doc.pdf", "doc.fls"}
    for shell in (False, True):
        for name, source in (("first", first), ("second", second)):
            status, fls, log, files = run_tex(source, tmp_path / f"{name}-{shell}", shell)
            what = f"{name} document, shell escape {'on' if shell else 'off'}"
            assert status == 0, f"{what}: {log[-3000:]}"
            outside = [(k, p) for k, p in fls
                       if not (p.removeprefix("./") in job or any(Path(p).resolve().is_relative_to(r) for r in roots))]
            assert not outside, f"{what}: files outside TeX's own and the document's: {outside}"
            assert {p.removeprefix("./") for k, p in fls if k == "OUTPUT"} <= job, f"{what}: {fls}"
            assert set(files) <= job, f"{what}: {files}"
            assert "runsystem" not in log, what
    control = preamble + "\\begin{document}\n" + payload("CTRL") + "\n\\end{document}\n"
    status, fls, log, files = run_tex(control, tmp_path / "control", True, halt=False)
    assert ("INPUT", "/etc/passwd") in fls and "PWNED-CTRL" in files and "pwned-CTRL.tex" in files, (fls, files)
