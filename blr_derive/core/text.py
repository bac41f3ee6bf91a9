"""Untrusted text as data.

:class:`Prose` marks recipe and family text (titles, descriptions, paper and family references, the source path)
from the moment the spec layer reads it until an output renders it: a generated module through the template
filters of ``codegen/inert.py``, a report through its format's one escaping function (``report/markdown.py``
:func:`~blr_derive.report.markdown.md_text`, ``report/html.py`` ``html_text``, ``report/latex.py`` ``tex_text``
and ``tex_math_text``, :func:`plain` for text on a terminal).  A ``Prose`` has no ``str()``: formatting it into a
string raises, so recipe text cannot be pasted into an output by accident.  :func:`quote` makes untrusted text
safe to show in a one-line error message."""
from __future__ import annotations

from blr_derive.core.errors import CodegenError


class Prose:
    """Untrusted text on its way to an output: a template renders it with ``|comment``, ``|doc`` or ``|q``, a
    report with its format's escaping function.  Concatenating it with text gives ``Prose`` again (the whole is
    untrusted); ``str()``, ``format()``, ``%`` and iteration raise."""

    __slots__ = ("text",)

    def __init__(self, text=""):
        self.text = text.text if isinstance(text, Prose) else str(text)

    def _refuse(self, *_args, **_kw):
        raise CodegenError("recipe text reached an output without its format's escaping "
                           "(templates: the |comment, |doc or |q filter; reports: md_text, html_text, tex_text, plain)")

    __str__ = __format__ = __mod__ = __iter__ = _refuse

    def __add__(self, other):
        if isinstance(other, (str, Prose)):
            return Prose(self.text + (other.text if isinstance(other, Prose) else other))
        return NotImplemented

    def __radd__(self, other):
        if isinstance(other, str):
            return Prose(other + self.text)
        return NotImplemented

    def strip(self) -> "Prose":
        return Prose(self.text.strip())

    def __bool__(self):
        return bool(self.text)

    def __eq__(self, other):
        return isinstance(other, Prose) and other.text == self.text

    def __hash__(self):
        return hash(("Prose", self.text))

    def __repr__(self):
        return f"Prose({self.text!r})"


def text_of(value) -> str:
    """The characters of a piece of text, engine words (``str``) or :class:`Prose`, for an output's escaping
    function to escape (never to print as they are)."""
    if isinstance(value, Prose):
        return value.text
    if isinstance(value, str):
        return value
    raise TypeError(f"text must be a str or Prose, not {type(value).__name__}")


def plain(value) -> str:
    """Text for a plain-text output (a terminal, ``families.txt``): engine words as they are; recipe or family
    text (:class:`Prose`) on one line, every line break or other non-printable character written as an escape.
    The command line still passes its whole output through :func:`terminal_safe`."""
    if isinstance(value, Prose):
        return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                       for c in value.text)
    return text_of(value)


MAX_QUOTED = 80


def quote(text, limit: int = MAX_QUOTED) -> str:
    """Untrusted text for an error message: at most ``limit`` characters, every non-printable character
    escaped (an error is one line), so a message never carries a file's content or a control sequence."""
    s = text.text if isinstance(text, Prose) else str(text)
    out = "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                  for c in s[:limit])
    return out + ("…" if len(s) > limit else "")


def terminal_safe(text: str) -> str:
    """Text for a terminal: every control character but newline and tab (ESC sequences, BEL, carriage returns,
    Unicode separators) written as an escape, so that a recipe's text cannot drive the terminal it is shown on."""
    return "".join(c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text)


#: what file_safe escapes besides control characters: the bidirectional overrides and isolates ("Trojan source")
_BIDI = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def file_safe(text: str) -> str:
    """Text for a report file, read in editors and terminals: control characters (but newline and tab) and the
    bidirectional controls written as escapes; ordinary Unicode (a no-break space, a soft hyphen, a joiner in a
    name) kept as it is."""
    import unicodedata
    return "".join(c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   if (unicodedata.category(c) == "Cc" and c not in "\n\t") or c in _BIDI or c in "\u2028\u2029"
                   else c for c in text)


class Expanded(str):
    """A string that a size template produced (``blr_derive/core/sizes.py``): the expression grammar accepts it up to
    ``MAX_EXPANDED_LENGTH`` characters instead of 2000, since its template is at most 4000 characters, the sizes it
    was instantiated at are bounded by the declaration, and one instantiation's whole output is capped."""


#: the longest expression a size template may expand to (a multinomial's E[log h] at K = 4, n = 10: ~9000)
MAX_EXPANDED_LENGTH = 50_000


def did_you_mean(name, known) -> str:
    """'; did you mean 'x'?' for a misspelt ``name`` among ``known`` (close in spelling, or one a prefix of the
    other: ``exact_expectations`` → ``exact``), else ''."""
    import difflib
    if not isinstance(name, str) or not name:
        return ""
    known = sorted(str(k) for k in known)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
    close += [k for k in known if k not in close and len(k) >= 3 and (name.startswith(k) or k.startswith(name))]
    if not close:
        return ""
    return "; did you mean " + " or ".join(f"'{quote(k)}'" for k in close[:3]) + "?"
