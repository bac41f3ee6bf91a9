"""LaTeX views: a standalone document of a derivation (``blr-derive explain --format latex``) and the one way text
reaches LaTeX: :func:`tex_text` in a document's text, :func:`tex_math_text` inside math (the notebook views)."""
from __future__ import annotations

import unicodedata

from blr_derive.core.text import text_of
from blr_derive.report.markdown import CONVENTION, OBJECTIVE_TEXT, final_latex, is_convention, objective_latex
from blr_derive.report.texprint import eq_tex, oracle_tex

#: TeX's special characters, each as the command that prints it in text (nothing in a report's text is TeX: a
#: backslash cannot start a command, a brace cannot open a group, '^^5c' is not a character code, '%' hides nothing)
_TEX_SPECIALS = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$",
                 "{": r"\{", "}": r"\}", "^": r"\^{}", "~": r"\~{}"}
#: the same characters inside math (where a text command would not work in MathJax or KaTeX)
_MATH_SPECIALS = {"\\": r"\backslash", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$", "{": r"\{",
                  "}": r"\}", "^": r"\hat{\ }", "~": r"\sim"}

_GREEK = {"α": "alpha", "β": "beta", "γ": "gamma", "δ": "delta", "ε": "epsilon", "ϵ": "epsilon", "ζ": "zeta",
          "η": "eta", "θ": "theta", "ϑ": "vartheta", "ι": "iota", "κ": "kappa", "λ": "lambda", "μ": "mu",
          "ν": "nu", "ξ": "xi", "π": "pi", "ϖ": "varpi", "ρ": "rho", "ϱ": "varrho", "σ": "sigma", "ς": "varsigma",
          "τ": "tau", "υ": "upsilon", "φ": "phi", "ϕ": "phi", "χ": "chi", "ψ": "psi", "ω": "omega",
          "Γ": "Gamma", "Δ": "Delta", "Θ": "Theta", "Λ": "Lambda", "Ξ": "Xi", "Π": "Pi", "Σ": "Sigma",
          "Υ": "Upsilon", "Φ": "Phi", "Ψ": "Psi", "Ω": "Omega"}
#: Unicode that the reports' text uses (the engine's own words and recipe text), in math
_UNICODE_MATH = {
    **{u: "\\" + name for u, name in _GREEK.items()},
    "<": "<", ">": ">", "|": "|",                      # OT1 text fonts print ¡, ¿ and — for these
    "ο": "o", "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Χ": "X",
    "∇": r"\nabla", "ℓ": r"\ell", "∂": r"\partial", "∞": r"\infty", "∑": r"\sum", "∏": r"\prod", "∫": r"\int",
    "√": r"\surd", "∘": r"\circ", "·": r"\cdot", "⋅": r"\cdot", "×": r"\times", "÷": r"\div", "±": r"\pm",
    "∓": r"\mp", "−": "-", "≈": r"\approx", "≃": r"\simeq", "∼": r"\sim", "≅": r"\cong", "≡": r"\equiv",
    "≠": r"\neq", "≤": r"\le", "≥": r"\ge", "≪": r"\ll", "≫": r"\gg", "∝": r"\propto", "∈": r"\in",
    "∉": r"\notin", "⊂": r"\subset", "⊆": r"\subseteq", "∪": r"\cup", "∩": r"\cap", "∅": r"\emptyset",
    "∀": r"\forall", "∃": r"\exists", "¬": r"\neg", "∧": r"\wedge", "∨": r"\vee", "⊗": r"\otimes",
    "⊙": r"\odot", "⊕": r"\oplus", "‖": r"\|", "∥": r"\|", "⟨": r"\langle", "⟩": r"\rangle", "⌈": r"\lceil",
    "⌉": r"\rceil", "⌊": r"\lfloor", "⌋": r"\rfloor", "→": r"\to", "←": r"\leftarrow", "↦": r"\mapsto",
    "⇒": r"\Rightarrow", "⇔": r"\Leftrightarrow", "↔": r"\leftrightarrow", "↑": r"\uparrow",
    "↓": r"\downarrow", "′": r"\prime", "″": r"\prime\prime", "°": r"^{\circ}", "ℝ": r"\mathbb{R}",
    "ℕ": r"\mathbb{N}", "ℤ": r"\mathbb{Z}", "∖": r"\setminus", "⋯": r"\cdots", "⋮": r"\vdots", "ħ": r"\hbar",
    "ĝ": r"\hat{g}", "£": r"\pounds", "½": r"\frac{1}{2}", "¼": r"\frac{1}{4}", "¾": r"\frac{3}{4}",
    **{c: "^{%s}" % t for c, t in zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ᵀᵏⁿⁱᵗ", "0123456789+-=()Tknit")},
    **{c: "_{%s}" % t for c, t in zip("₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₖₙᵢⱼₜ", "0123456789+-=()knijt")},
}
#: Unicode printed as text
_UNICODE_TEXT = {"–": "--", "—": "---", "…": r"\ldots{}", "‘": "`", "’": "'", "“": "``", "”": "''",
                 "\u00a0": "~", "\u00ad": r"\-", "ß": r"\ss{}", "æ": r"\ae{}", "Æ": r"\AE{}", "ø": r"\o{}",
                 "Ø": r"\O{}", "œ": r"\oe{}", "Œ": r"\OE{}", "å": r"\aa{}", "Å": r"\AA{}", "ı": r"\i{}",
                 "¡": "!`", "¿": "?`"}
#: combining marks and the accent they are in math (ℓ̄, θ̂)
_COMBINING = {"\u0304": r"\bar", "\u0305": r"\bar", "\u0302": r"\hat", "\u0303": r"\tilde", "\u0307": r"\dot",
              "\u0308": r"\ddot", "\u0301": r"\acute", "\u0300": r"\grave", "\u030c": r"\check"}
#: accents of text letters (é, ü) as LaTeX writes them in the OT1 encoding
_TEXT_ACCENTS = {"\u0301": "'", "\u0300": "`", "\u0302": "^", "\u0308": '"', "\u0303": "~", "\u0304": "=",
                 "\u0307": ".", "\u030c": "v", "\u0327": "c", "\u0306": "u", "\u030a": "r", "\u030b": "H"}


def _accented(c: str):
    """(accent command, base letter) of a precomposed Latin letter (é -> ("'", "e")), else None."""
    parts = unicodedata.decomposition(c).split()
    if len(parts) != 2 or parts[0].startswith("<"):
        return None
    base, mark = chr(int(parts[0], 16)), chr(int(parts[1], 16))
    if base.isascii() and base.isalpha() and mark in _TEXT_ACCENTS:
        return _TEXT_ACCENTS[mark], base
    return None


_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _pieces(text: str, inline: bool) -> list:
    """The text as [(kind, TeX, character)]: kind 'char' (printable ASCII without a meaning in TeX), 'special'
    (TeX's), 'math' (math-mode TeX), 'text' (text-mode TeX of a Unicode character), 'space', 'par' (a paragraph
    break) or 'other' (a character nothing here prints: a control character, a symbol without a command).  Line
    breaks are spaces when ``inline``, else a line break, and a blank line one paragraph break."""
    out, breaks = [], 0
    for c in text.replace("\r\n", "\n"):
        if c in _BREAKS:
            breaks += 1
            if inline or breaks == 1:
                out.append(("space", " " if inline else "\n", c))
            elif breaks == 2:
                out.append(("par", "\n\n", c))
            continue
        if not c.isspace():
            breaks = 0
        if c.isspace() and c != "\u00a0":
            out.append(("space", " ", c))
        elif c in _TEX_SPECIALS:
            out.append(("special", c, c))
        elif c in _UNICODE_MATH:
            out.append(("math", _UNICODE_MATH[c], c))
        elif c.isascii() and c.isprintable():
            out.append(("char", c, c))
        elif c in _UNICODE_TEXT:
            out.append(("text", _UNICODE_TEXT[c], c))
        elif c in _COMBINING and out and (out[-1][0] == "math" or out[-1][0] == "char" and out[-1][2].isalnum()):
            _, prev, base = out.pop()
            out.append(("math", "%s{%s}" % (_COMBINING[c], prev), base + c))
        elif _accented(c) is not None:
            accent, base = _accented(c)
            out.append(("text", "\\%s{%s}" % (accent, base), c))
        else:
            out.append(("other", "[U+%04X]" % ord(c), c))
    return out


def tex_text(value, inline: bool = False) -> str:
    """The one way text reaches a LaTeX document's text (``explain --format latex``): recipe and family text
    (:class:`~blr_derive.core.text.Prose`) and the engine's own words (``str``) alike, each character printed as
    itself — TeX's specials as the commands that print them, Unicode as math symbols or accents, anything else
    (control characters, symbols without a command here) as its code point — so the text can neither run TeX
    (``\\input``, ``\\write18``, ``\\openout``, ``\\catcode``, ``^^`` codes) nor break the document.  ``inline``:
    line breaks become spaces (a section title, an item), else a blank line stays one paragraph break."""
    out, math = [], []

    def formula():                              # consecutive symbols in one formula, each a group: ${\lambda}{^{-}}$
        if math:
            out.append("$%s$" % (math[0] if len(math) == 1 else "".join("{%s}" % m for m in math)))
            math.clear()

    for kind, tex, _ in _pieces(text_of(value), inline):
        if kind == "math":
            math.append(tex)
            continue
        formula()
        out.append(_TEX_SPECIALS[tex] if kind == "special" else r"\texttt{%s}" % tex if kind == "other" else tex)
    formula()
    return "".join(out)


def tex_math_text(value) -> str:
    """The one way text reaches LaTeX inside math (the notebook's ``text/latex`` views, which MathJax or KaTeX
    typeset as well as TeX): on one line, runs of letters and other Unicode text in ``\\text{...}``, every
    special character and symbol as a math command outside it."""
    out, run = [], []

    def close():
        if run:
            out.append(r"\text{%s}" % "".join(run))
            run.clear()

    for kind, tex, c in _pieces(text_of(value), inline=True):
        if kind in ("char", "space", "text"):
            run.append(c if kind == "text" else tex)      # MathJax and KaTeX show Unicode text as it is
        elif kind == "other":
            run.append(tex)
        else:
            close()
            out.append(_MATH_SPECIALS[tex] if kind == "special" else "{%s}" % tex)
    close()
    return "".join(out)


#: the bullet of an item from the math fonts: the text bullet is a TS1 glyph, whose font a plain TeX Live
#: (texlive-latex-base, no cm-super) has only as METAFONT source, generated into the user's texmf-var at first use
PREAMBLE_FONTS = r"\renewcommand{\labelitemi}{$\bullet$}"


def derivation_document(D) -> str:
    """A standalone LaTeX document with the content of the Markdown report."""
    r = D.recipe
    lines = [r"\documentclass{article}", r"\usepackage{amsmath,amssymb}", r"\usepackage[margin=2cm]{geometry}",
             PREAMBLE_FONTS, r"\begin{document}",
             r"\section*{Derivation of \texttt{%s}: %s}" % (tex_text(r.name), tex_text(r.title, inline=True))]
    if r.description:
        lines.append(tex_text(r.description.strip()))
    lines.append(r"\begin{itemize}")
    lines.append(r"\item Family: \texttt{%s}" % tex_text(r.family.name))
    lines.append(r"\item Approximations: %s" % (", ".join(r"\texttt{%s}" % tex_text(a.name)
                                                            for a in r.approximations) or "none"))
    if r.paper:
        lines.append(r"\item Paper: %s" % tex_text(r.paper, inline=True))
    lines.append(r"\end{itemize}")
    for i, st in enumerate(D.steps, 1):
        lines.append(r"\subsection*{Step %d. %s}" % (i, tex_text(st.title, inline=True)))
        tag = f" ({tex_text(CONVENTION)})" if is_convention(st.rule) else ""
        lines.append(r"\emph{rule} \texttt{%s}%s --- \emph{%s}\par" % (tex_text(st.rule), tag,
                                                                     tex_text(st.equation, inline=True)))
        if st.text:
            lines.append(tex_text(st.text.strip()))
        for eq in st.equations:
            if isinstance(eq, str):
                body = eq
            else:
                lhs, rhs, *op = eq
                body = eq_tex(D, lhs, rhs, op[0] if op else "=")
            lines.append(r"\begin{equation*}%s\end{equation*}" % body)
    lines.append(r"\subsection*{Update}")
    for call in D.oracle_calls:
        lines.append(r"\begin{equation*}%s\end{equation*}" % oracle_tex(D, call))
    for l in final_latex(D):
        lines.append(r"\begin{equation*}%s\end{equation*}" % l)
    objective = objective_latex(D)
    if objective is not None:
        lines.append(r"\subsection*{Objective}")
        lines.append(tex_text(OBJECTIVE_TEXT))
        lines += [r"\begin{equation*}%s\end{equation*}" % l for l in objective]
    lines.append(r"\end{document}")
    return "\n".join(lines) + "\n"
