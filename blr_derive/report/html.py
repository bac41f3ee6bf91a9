"""HTML views of families, recipes and derivations.

* :func:`derivation_page` — ``blr-derive explain FILE --format html``: one self-contained page.
  The equations are typeset in the browser by KaTeX (auto-render), whose script, style sheet and
  woff2 fonts are bundled with the package (``blr_derive/assets/katex``, KaTeX |version|, MIT) and
  inlined into the page (fonts as ``data:`` URIs). A Content-Security-Policy forbids every network
  request, so the page looks the same offline. The output is byte-identical on every run.
* :func:`derivation_fragment`, :func:`family_fragment`, :func:`recipe_fragment` — the
  ``_repr_html_`` views for notebooks: small HTML with ``$$…$$`` and ``\\(…\\)`` math, which the
  notebook's own MathJax/KaTeX typesets (no assets inlined).

The content is that of the Markdown report (``blr_derive/report/markdown.py``): recipe, family (T, h, λ, μ, A), each step with
its rule name and paper equation, and the final update.
"""
from __future__ import annotations

import base64
import functools
import html
import re
from pathlib import Path

from blr_derive import __version__
from blr_derive.core.text import Prose, text_of
from blr_derive.report.latex import tex_math_text
from blr_derive.report.markdown import CONVENTION, final_latex, is_convention
from blr_derive.report.texprint import eq_tex, latex, oracle_tex

KATEX_VERSION = "0.16.22"
KATEX_DIR = Path(__file__).resolve().parents[1] / "assets" / "katex"

_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "font-src data:; img-src data:")

_PAGE_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; max-width: 60rem;
       margin: 2rem auto; padding: 0 1rem; line-height: 1.5; color: #1b1b1b; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
code { background: #f3f3f3; padding: 0 .25em; border-radius: 3px; }
table.blr { border-collapse: collapse; margin: 1rem 0; }
table.blr td, table.blr th { border: 1px solid #ddd; padding: .3rem .6rem; text-align: left; vertical-align: top; }
.rule { color: #555; margin: .2rem 0 .6rem 0; }
.eq { overflow-x: auto; }
.katex-display { margin: .4em 0; }
footer { margin-top: 3rem; color: #777; font-size: .85rem; }
"""

_RENDER_JS = """
document.addEventListener("DOMContentLoaded", function () {
  renderMathInElement(document.body, {
    delimiters: [{left: "$$", right: "$$", display: true}, {left: "\\\\(", right: "\\\\)", display: false}],
    ignoredClasses: ["prose"], throwOnError: false, strict: "ignore"
  });
  document.body.setAttribute("data-katex-count", String(document.querySelectorAll(".katex").length));
  document.fonts.ready.then(function () {
    var loaded = [];
    document.fonts.forEach(function (f) { if (f.status === "loaded") { loaded.push(f.family); } });
    document.body.setAttribute("data-fonts-loaded", loaded.sort().join(" "));
  });
});
"""


# ---------------------------------------------------------------------- bundled KaTeX

def katex_files() -> list[Path]:
    """The bundled KaTeX files (all of them are package data)."""
    return sorted(p for p in KATEX_DIR.rglob("*") if p.is_file())


@functools.lru_cache(maxsize=1)
def katex_inline() -> tuple[str, str]:
    """(style sheet, script) of the bundled KaTeX, ready to inline: every ``@font-face`` points at its woff2
    font as a ``data:`` URI (the woff/ttf fallbacks, which are not bundled, are dropped)."""
    css = (KATEX_DIR / "katex.min.css").read_text(encoding="utf-8")

    def font_src(match):
        name = match.group(1)
        data = base64.b64encode((KATEX_DIR / "fonts" / f"{name}.woff2").read_bytes()).decode("ascii")
        return f'src:url(data:font/woff2;base64,{data}) format("woff2")'

    css, n = re.subn(r'src:url\(fonts/(KaTeX_[A-Za-z0-9_-]+)\.woff2\) format\("woff2"\)[^;}]*', font_src, css)
    if n == 0 or "url(fonts/" in css:       # pragma: no cover - a changed KaTeX build
        raise RuntimeError("bundled katex.min.css has unexpected @font-face rules")
    js = ((KATEX_DIR / "katex.min.js").read_text(encoding="utf-8") + "\n"
          + (KATEX_DIR / "contrib" / "auto-render.min.js").read_text(encoding="utf-8"))
    if "</script" in js.lower():            # pragma: no cover
        raise RuntimeError("bundled KaTeX script cannot be inlined")
    return css, js


# ---------------------------------------------------------------------- pieces

def _e(text) -> str:
    """A name or the engine's own vocabulary, escaped (recipe text, a ``Prose``, goes through :func:`html_text`:
    ``str()`` of it raises)."""
    return html.escape(str(text), quote=True)


def html_text(value, code_spans: bool = True) -> str:
    """The one way text reaches an HTML report or notebook view: every character with a meaning in HTML escaped
    (``&``, ``<``, ``>``, both quotes), so that the text is shown as the text it is, recipe and family text
    (:class:`~blr_derive.core.text.Prose`) whole; in the engine's own words (``str``) a code span (`name`) becomes
    ``<code>`` (not inside ``<title>``, where tags are text: ``code_spans=False``).  The element around it carries
    the class ``prose``, which the page's KaTeX auto-render skips: ``$$`` or ``\\(`` in the text is not typeset."""
    s = _e(text_of(value))
    if isinstance(value, Prose) or not code_spans:
        return s
    return re.sub(r"`([^`<>]+)`", r"<code>\1</code>", s)


def _display(tex: str) -> str:
    return f'<div class="eq">$$ {_e(tex)} $$</div>'


def _inline(tex: str) -> str:
    return f"\\({_e(tex)}\\)"


def _fam_latex(e) -> str:
    return latex(e)


def exponential_family(fam):
    """The exponential family whose T, h, λ, μ, A a report shows: the family itself, or for a structured candidate
    (a Kronecker-factored Gaussian) the family it restricts (``base``)."""
    return fam if hasattr(fam, "T") or hasattr(fam, "report_rows") else fam.base


def family_rows(fam) -> list[tuple[str, str]]:
    """(label, LaTeX) rows: T(θ), h(θ), λ, μ = ∇A(λ), A(λ); a family written for a generic coordinate k of a run-time
    size (``report_rows``) gives its own."""
    if hasattr(fam, "report_rows"):
        return fam.report_rows()
    join = lambda es: r",\quad ".join(_fam_latex(e) for e in es)
    return [(r"T(\theta)", join(fam.T)), (r"h(\theta)", _fam_latex(fam.h)), (r"\lambda", join(fam.eta)),
            (r"\mu = \nabla A(\lambda)", join(fam.mu_ord)), (r"A(\lambda)", _fam_latex(fam.A))]


def family_fragment(fam) -> str:
    params = ", ".join(f"<code>{_e(p.name)}</code> ({_e(p.shape)}, {_e(p.domain)}{', fixed' if p.fixed else ''})"
                       for p in fam.params.values())
    out = [f'<div class="blr-family"><p><strong>Family <code>{_e(fam.name)}</code></strong>'
           + (f' <span class="prose">— {html_text(fam.description)}</span>' if fam.description else "") + "</p>",
           f"<p>parameters: {params}</p>", '<table class="blr">']
    ef = exponential_family(fam)
    if ef is not fam:
        out.append(f'<tr><td colspan="2"><span class="prose">the exponential family it restricts: '
                   f'<code>{_e(ef.name)}</code></span></td></tr>')
    for label, tex in family_rows(ef):
        note = "" if label != r"A(\lambda)" or getattr(ef, "A_given", True) else ' <span class="prose">(derived)</span>'
        out.append(f"<tr><th>{_inline(label)}</th><td>{_inline(tex)}{note}</td></tr>")
    out.append("</table></div>")
    return "\n".join(out)


def _loss_html(r) -> str:
    if r.loss_kind == "abstract":
        return '<span class="prose">abstract ℓ(θ) (oracles)</span>'
    return _inline(latex(r.loss))


def recipe_fragment(r) -> str:
    approx = ", ".join(f"<code>{_e(a.name)}</code>" for a in r.approximations) or "none"
    rows = [("family", f"<code>{_e(r.family.name)}</code>"), ("loss", _loss_html(r)), ("approximations", approx)]
    if r.paper:
        rows.append(("paper", f'<span class="prose">{html_text(r.paper)}</span>'))
    out = [f'<div class="blr-recipe"><p><strong>Recipe <code>{_e(r.name)}</code></strong> '
           f'<span class="prose">— {html_text(r.title)}</span></p>', '<table class="blr">']
    out += [f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows]
    if r.hyper:
        hp = "<br>".join(f"<code>{_e(h.name)}</code> = {_e(repr(h.default))}"
                         + (f' <span class="prose">— {html_text(h.description)}</span>' if h.description else "")
                         for h in r.hyper)
        out.append(f"<tr><th>hyperparameters</th><td>{hp}</td></tr>")
    out.append("</table></div>")
    return "\n".join(out)


def derivation_equations(D) -> list[tuple[str | None, list[str]]]:
    """The report's display equations, grouped: (step title or None for the update, [LaTeX])."""
    groups = []
    for st in D.steps:
        eqs = []
        for eq in st.equations:
            if isinstance(eq, str):
                eqs.append(eq)
            else:
                lhs, rhs, *op = eq
                eqs.append(eq_tex(D, lhs, rhs, op[0] if op else "="))
        groups.append((st, eqs))
    final = [oracle_tex(D, c) for c in D.oracle_calls] + final_latex(D)
    groups.append((None, final))
    return groups


def derivation_fragment(D, heading: int = 1) -> str:
    """The derivation as an HTML fragment (no assets): the body of :func:`derivation_page`."""
    r = D.recipe
    h1, h2 = f"h{heading}", f"h{heading + 1}"
    out = ['<div class="blr-derivation">',
           f"<{h1}>Derivation of <code>{_e(r.name)}</code>: <span class=\"prose\">{html_text(r.title)}</span></{h1}>"]
    if r.description:
        out.append(f'<p class="prose description">{html_text(r.description.strip())}</p>')
    out.append(recipe_fragment(r))
    blocks = getattr(r, "blocks", None)             # a factorized recipe: the family of every exact block
    fams = [r.family] if not blocks else [b.family for b in blocks if b.family is not None]
    for j, fam in enumerate(fams):
        if fam.name not in [f.name for f in fams[:j]]:
            out.append(family_fragment(fam))
    for i, (st, eqs) in enumerate(derivation_equations(D), 1):
        if st is None:
            out.append(f'<section class="update"><{h2}>Update</{h2}>')
        else:
            out.append(f'<section class="step" id="step-{i}"><{h2}>Step {i}. <span class="prose">'
                       f"{html_text(st.title)}</span></{h2}>")
            tag = f' <span class="prose">({CONVENTION})</span>' if is_convention(st.rule) else ""
            out.append(f'<p class="rule">rule <code>{_e(st.rule)}</code>{tag} — '
                       f'<em class="prose">{html_text(st.equation)}</em></p>')
            if st.text:
                out.append(f'<p class="prose">{html_text(st.text.strip())}</p>')
        out += [_display(t) for t in eqs]
        out.append("</section>")
    out.append("</div>")
    return "\n".join(out)


def derivation_page(D) -> str:
    """A standalone HTML page (KaTeX inlined; no network at view time)."""
    r = D.recipe
    css, js = katex_inline()
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta name="generator" content="blr-derive {_e(__version__)}">',
        f"<title>Derivation of {_e(r.name)}: {html_text(r.title, code_spans=False)}</title>",
        f"<style>\n/* KaTeX {KATEX_VERSION} (MIT License, https://katex.org), fonts inlined */\n{css}\n</style>",
        f"<style>{_PAGE_CSS}</style>",
        f"<script>\n/* KaTeX {KATEX_VERSION} and its auto-render extension (MIT License) */\n{js}\n</script>",
        f"<script>{_RENDER_JS}</script>",
        "</head>",
        "<body>",
        derivation_fragment(D),
        f'<footer class="prose">Generated by blr-derive {_e(__version__)} from recipe {_e(r.name)}; '
        f"equations typeset by the bundled KaTeX {KATEX_VERSION}.</footer>",
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------- text/latex views

def family_latex(fam) -> str:
    rows = [f"{label} &= {tex}" for label, tex in family_rows(exponential_family(fam))]
    return "$$\\begin{aligned}" + r" \\ ".join(rows) + "\\end{aligned}$$"


def recipe_latex(r) -> str:
    approx = ", ".join(a.name for a in r.approximations) or "none"
    return ("$$\\begin{aligned}" + r" \\ ".join([
        "&" + tex_math_text("recipe " + r.name + ": " + r.title),
        "&" + tex_math_text("family " + r.family.name + "; approximations: " + approx),
    ]) + "\\end{aligned}$$")


def derivation_latex(D) -> str:
    """The final update as one aligned block (the notebook's text/latex view)."""
    rows = [oracle_tex(D, c).replace(" = ", " &= ", 1) for c in D.oracle_calls]
    rows += [eq_tex(D, s, e, "&=") for s, e in D.defs]
    rows += [eq_tex(D, s, e, r"&\leftarrow") for _, s, e in D.updates]
    return "$$\\begin{aligned}" + r" \\ ".join(rows) + "\\end{aligned}$$"
