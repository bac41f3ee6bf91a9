"""`blr-derive explain --format html`: a standalone page whose equations KaTeX typesets in a real headless browser.

Chromium is required (CI installs Debian's `chromium`, see .ci/run); the browser tests fail, not skip, without it.
"""
import hashlib
import html.parser
import re
import shutil
import subprocess
import tomllib

import pytest

from blr_derive.api import derive_file
from blr_derive.families.library import load_family
from blr_derive.report.html import KATEX_DIR, KATEX_VERSION, derivation_fragment, katex_files
from conftest import CATALOG, ROOT

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--virtual-time-budget=15000"]


def chromium(*args, tmp_path):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
    r = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


class Elements(html.parser.HTMLParser):
    """Counts elements by class in the rendered body and collects the visible text outside KaTeX's MathML."""

    def __init__(self):
        super().__init__()
        self.classes, self.text, self.body_attrs, self._skip = {}, [], {}, 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "body":
            self.body_attrs = attrs
        for c in (attrs.get("class") or "").split():
            self.classes[c] = self.classes.get(c, 0) + 1
        if tag in ("annotation", "script", "style") or self._skip:
            self._skip += 1

    def handle_endtag(self, tag):
        if self._skip:
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


def rendered(dom: str) -> Elements:
    p = Elements()
    p.feed(dom[dom.index("<body"):])
    return p


@pytest.mark.parametrize("recipe", ["newton", "ivon"])
def test_browser_typesets_every_equation(recipe, tmp_path, capsys):
    from blr_derive.cli import main
    out = tmp_path / f"{recipe}.html"
    assert main(["explain", str(CATALOG / f"{recipe}.yaml"), "--format", "html", "-o", str(out)]) == 0
    body = out.read_text(encoding="utf-8").split("<body>", 1)[1]
    display, inline = body.count("$$") // 2, body.count("\\(")
    assert display >= 20 and inline == 10                # 5 family rows: label and value
    el = rendered(chromium("--dump-dom", out.as_uri(), tmp_path=tmp_path))
    assert el.classes.get("katex") == display + inline
    assert el.classes.get("katex-display") == display
    assert "katex-error" not in el.classes
    text = "".join(el.text)
    assert "$$" not in text and "\\(" not in text and "\\frac" not in text
    assert int(el.body_attrs["data-katex-count"]) == display + inline
    fonts = el.body_attrs["data-fonts-loaded"].split()   # the inlined woff2 fonts loaded under the CSP
    assert {"KaTeX_Main", "KaTeX_Math"} <= set(fonts)
    assert "Step 8." in text and "Bonnet" in text and "Update" in text


def test_screenshot_is_a_nonblank_png(tmp_path):
    _, D = derive_file(CATALOG / "newton.yaml")
    page = tmp_path / "newton.html"
    page.write_text(D.to_html(), encoding="utf-8")
    png = tmp_path / "newton.png"
    chromium(f"--screenshot={png}", "--window-size=1000,1400", page.as_uri(), tmp_path=tmp_path)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    from PIL import Image                  # pillow comes with matplotlib (test extra)
    img = Image.open(png).convert("L")
    assert img.size == (1000, 1400)
    hist = img.histogram()
    dark = sum(hist[:128]) / (img.size[0] * img.size[1])
    assert 0.005 < dark < 0.5              # typeset text on a white page: ink, but not a blank or black image


def test_page_is_self_contained_and_deterministic():
    _, D = derive_file(CATALOG / "newton.yaml")
    page = D.to_html()
    assert page == D.to_html()
    assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "url(fonts/" not in page and page.count("data:font/woff2;base64,") == 20
    assert f"KaTeX {KATEX_VERSION}" in page
    # prose and names are escaped: no stray markup from recipe text
    assert "<script>" not in derivation_fragment(D)


def test_notebook_html_and_latex_views():
    from IPython.core.interactiveshell import InteractiveShell

    from blr_derive.report.views import register_notebook_views
    fmt = register_notebook_views(InteractiveShell.instance()).display_formatter.format
    data, _ = fmt(load_family("gaussian_full"))
    assert "\\mathbf{S} \\mathbf{m}" in data["text/html"] and data["text/latex"].startswith("$$\\begin{aligned}")
    recipe, D = derive_file(CATALOG / "newton.yaml")
    data, _ = fmt(recipe)
    assert "<code>delta</code>" in data["text/html"] and "newton" in data["text/latex"]
    frag = D._repr_html_()
    assert "<script" not in frag and "Step 7." in frag and frag.count("$$") % 2 == 0
    tex = D._repr_latex_()
    assert tex.startswith("$$\\begin{aligned}") and tex.count("\\leftarrow") == 2      # S and m


def test_bundled_katex_matches_checksums_and_is_package_data():
    sums = {}
    for line in (KATEX_DIR / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        sums[name] = digest
    files = {p.relative_to(KATEX_DIR).as_posix(): p for p in katex_files()}
    assert set(sums) == set(files) - {"SHA256SUMS", "README.md"}
    for name, digest in sums.items():
        assert hashlib.sha256(files[name].read_bytes()).hexdigest() == digest, name
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["blr_derive"]
    import fnmatch
    for name in files:
        assert any(fnmatch.fnmatch(f"assets/katex/{name}", pat) for pat in patterns), name


def test_bad_recipe_exits_2_without_writing_the_page(tmp_path, capsys):
    from blr_derive.cli import main
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nfamily: gaussian_diag\nloss: abstract\napproximations: [exact]\n", encoding="utf-8")
    out = tmp_path / "bad.html"
    assert main(["explain", str(bad), "--format", "html", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml:4:" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


# ---------------------------------------------------------------------- every catalog recipe in the browser

#: the catalog's explanations, in CHUNKS pages (one chromium process each; xdist spreads the chunks)
CHUNKS = 4
RAW_SYMPY = ("Piecewise(", "Eq(", "Ne(", "Determinant(", "Trace(", "polygamma(", "**", "$$", "\\(", "\\frac",
             "\\mathrm", "\\begin")
_TEX_WRAPPERS = re.compile(r"\\(?:mathrm|text|operatorname|mathbb|mathbf|boldsymbol|begin|end)\{[^{}]*\}")


def italic_words(tex: str) -> list[str]:
    """Words of two or more letters that KaTeX would set as an italic product (``lr`` as l·r)."""
    t = re.sub(r"\\[A-Za-z]+", " ", _TEX_WRAPPERS.sub(" ", tex))
    return re.findall(r"[A-Za-z]{2,}", t)


def tex_problems(tex: str) -> list[str]:
    """Typesetting faults in one equation's LaTeX: italic multi-letter names, subscripts inside an upright
    name, sympy's own condition syntax."""
    out = [f"italic name {w!r}" for w in italic_words(tex)]
    out += [f"subscript inside \\mathrm: {m}" for m in re.findall(r"\\mathrm\{[^{}]*_\{[^{}]*", tex)]
    out += [f"sympy text {s!r}" for s in ("\\text{for}", "\\wedge", "\\neg", "Piecewise", "Eq(") if s in tex]
    return out


class Recipes(Elements):
    """:class:`Elements` that also records KaTeX errors per recipe (``data-recipe`` of the enclosing section)."""

    def __init__(self):
        super().__init__()
        self.recipe, self.errors, self.by_recipe, self._described = None, [], {}, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-recipe" in a:
            self.recipe = a["data-recipe"]
        classes = (a.get("class") or "").split()
        if "katex-error" in classes:
            self.errors.append((self.recipe, a.get("title", "")))
        self._described = "description" in classes      # the recipe author's prose, as written
        super().handle_starttag(tag, attrs)

    def handle_endtag(self, tag):
        self._described = False
        super().handle_endtag(tag)

    def handle_data(self, data):
        if not self._skip and self.recipe and not self._described:
            self.by_recipe.setdefault(self.recipe, []).append(data)
        super().handle_data(data)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_browser_typesets_every_catalog_explanation(chunk, tmp_path):
    """Every catalog recipe's explanation (page content of `explain --format html`) renders in chromium without
    a KaTeX error, shows no raw sympy or LaTeX text, and its LaTeX sets no multi-letter name in italics."""
    from blr_derive.report.html import derivation_page
    recipes = sorted(CATALOG.glob("*.yaml"))[chunk::CHUNKS]
    head = body = None
    sections, problems, display = [], [], 0
    for path in recipes:
        _, D = derive_file(path)
        page = derivation_page(D.record)
        head, rest = page.split("<body>\n", 1)
        body = rest[: rest.index("<footer")]
        sections.append(f'<section data-recipe="{path.stem}">{body}</section>')
        src = html.unescape(body)
        for tex in re.findall(r"\$\$(.*?)\$\$|\\\((.*?)\\\)", src, flags=re.S):
            problems += [f"{path.stem}: {p}" for p in tex_problems(tex[0] or tex[1])]
        display += body.count("$$") // 2
    assert not problems, "\n".join(problems[:40])
    out = tmp_path / f"catalog{chunk}.html"
    out.write_text(head + "<body>\n" + "\n".join(sections) + "\n</body></html>\n", encoding="utf-8")
    el = Recipes()
    dom = chromium("--dump-dom", out.as_uri(), tmp_path=tmp_path)
    el.feed(dom[dom.index("<body"):])
    assert not el.errors, el.errors[:10]
    assert "katex-error" not in el.classes
    assert el.classes.get("katex-display") == display
    assert set(el.by_recipe) == {p.stem for p in recipes}
    for name, text in el.by_recipe.items():
        text = "".join(text)
        bad = [s for s in RAW_SYMPY if s in text]
        assert not bad, (name, bad, [text[max(0, text.index(s) - 80): text.index(s) + 80] for s in bad])
