"""The LaTeX printer of the reports: the engine's names typeset as a mathematician would write them.

sympy's own printer reads a name like ``weight_decay`` as ``weight`` with subscript ``decay`` (an italic product
w·e·i·g·h·t), ``lr`` as l·r, and runs products of such names together.  :class:`TexPrinter` typesets

* multi-letter names upright: ``lr`` -> ``\\mathrm{lr}``, ``weight_decay`` -> ``\\mathrm{weight\\_decay}``,
  a short index stays a subscript (``grad_N`` -> ``\\mathrm{grad}_{N}``);
* Greek names, with digits or short indices as subscripts: ``beta1`` -> ``\\beta_{1}``, ``rho_t`` -> ``\\rho_{t}``;
* single letters italic (bold for matrices), with indices and accents: ``g_wd`` -> ``g_{\\mathrm{wd}}``,
  ``s_hat`` -> ``\\hat{s}``;
* time indices on the whole name: the state ``X_new`` (and a name written ``X_{t+1}`` by a rule) is
  ``X_{t+1}``, merged with the name's own index (``m_{k,t+1}``), never a nested subscript;
* products with ``\\cdot`` where juxtaposition would be ambiguous (next to an upright name, before a number);
* conditions as conditions: ``Piecewise`` as ``cases`` with ``\\text{if }`` / ``\\text{otherwise}``, the choice
  indicator ``hess_approx__price`` as ``\\mathrm{hess\\_approx} = \\text{price}``, ``And``/``Or``/``Not`` in words.

:func:`latex` prints an expression, :func:`derivation_tex` and :func:`eq_tex` print with a derivation's own
symbol names (``Derivation.symbol_names``, which rules write as LaTeX or as plain names), :func:`name_tex`
typesets a bare name.
"""
from __future__ import annotations

import re

import sympy as sp
from sympy.printing.latex import LatexPrinter, accepted_latex_functions, greek_letters_set
from sympy.printing.precedence import precedence_traditional

from blr_derive.core.pretty import choice_parts
from blr_derive.rules.base import TexForm

_GREEK = (set(greek_letters_set) - {"omicron"}) | {g.capitalize() for g in greek_letters_set
                                   if g not in ("alpha", "beta", "epsilon", "eta", "iota", "kappa", "mu",
                                                "nu", "omicron", "rho", "tau", "chi", "zeta")}
_ACCENTS = {"hat": r"\hat", "bar": r"\bar", "tilde": r"\tilde", "dot": r"\dot", "ddot": r"\ddot",
            "check": r"\check", "vec": r"\vec"}
#: name suffixes of the engine's state names that mean a time index (``rules/program.py``: ``X_new``)
TIME_SUFFIXES = {"new": "t+1"}
_SEP = " \x00 "                          # product separator, decided by :meth:`TexPrinter._print_Mul`
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*")
_UPRIGHT_END = re.compile(r"\\math(?:rm|bf)\{[^{}]{2,}\}(?:[_^](?:\{(?:[^{}]|\{[^{}]*\})*\}|[A-Za-z0-9]))*\s*$")
_UPRIGHT_START = re.compile(r"^\s*\\math(?:rm|bf)\{[^{}]{2,}\}")


def escape_name(name: str) -> str:
    """A name inside ``\\mathrm{...}`` / ``\\text{...}``: underscores escaped."""
    return name.replace("\\", "").replace("_", r"\_").replace("{", "").replace("}", "")


def upright(name: str, bold: bool = False) -> str:
    return (r"\mathbf{%s}" if bold else r"\mathrm{%s}") % escape_name(name)


def _letter(core: str, bold: bool):
    """TeX of a Greek name or a single letter; None for a longer word."""
    if core in _GREEK:
        return (r"\boldsymbol{\%s}" if bold else r"\%s") % core
    if len(core) == 1:
        return r"\mathbf{%s}" % core if bold else core
    return None


def _short(part: str) -> bool:
    return len(part) == 1 or part.isdigit() or part in _GREEK


def _index(part: str) -> str:
    """One index of a subscript: a letter or number as it is, a Greek name as Greek, a word upright."""
    if part.isdigit() or len(part) == 1:
        return part
    if part in _GREEK:
        return "\\" + part
    m = re.fullmatch(r"([A-Za-z]+)(\d+)", part)
    if m and m.group(1) in _GREEK:
        return r"\%s_{%s}" % m.groups()
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", part):
        return upright(part)
    return part


def _subscripts(parts) -> list[str]:
    """Indices of a name's tail: short ones one by one (``k``, ``1``), words together upright (``max``)."""
    if not parts:
        return []
    if all(not _short(p) for p in parts):
        return [upright("_".join(parts))]
    return [_index(p) for p in parts]


def name_tex(name: str, bold: bool = False, extra=()) -> str:
    """TeX of an engine name (see the module docstring); ``extra``: further indices in TeX (``t+1``)."""
    if name.startswith("\\"):                       # a name that is LaTeX already
        return name
    subs_after = list(extra)
    head_tail = name.rsplit("_", 1)
    if len(head_tail) == 2 and head_tail[1] in TIME_SUFFIXES and head_tail[0]:
        name, subs_after = head_tail[0], [TIME_SUFFIXES[head_tail[1]]] + subs_after
    if not _IDENT.fullmatch(name):
        return upright(name, bold) + _sub(subs_after)
    head, *tail = name.split("_")
    core, digits = re.fullmatch(r"([A-Za-z]+?)(\d*)", head).groups() if re.fullmatch(r"[A-Za-z]+\d*", head) \
        else (head, "")
    letter = _letter(core, bold)
    if letter is not None:
        if tail and tail[-1] in _ACCENTS:
            letter = r"%s{%s}" % (_ACCENTS[tail[-1]], letter)
            tail = tail[:-1]
        return letter + _sub(([digits] if digits else []) + _subscripts(tail) + subs_after)
    if all(_short(p) for p in tail):                # grad_N, lr_t, sum1: a word with short indices
        return upright(core, bold) + _sub(([digits] if digits else []) + [_index(p) for p in tail] + subs_after)
    return upright(name, bold) + _sub(subs_after)  # weight_decay, momentum_buffer


def _sub(indices) -> str:
    return "_{%s}" % ",".join(indices) if indices else ""


_NAMED = re.compile(r"(?P<open>\\mathbf\{)?(?P<id>%s)(?:_\{(?P<isub>[^{}]*)\})?(?(open)\})"
                    r"(?:_\{(?P<sub>[^{}]*)\}|_(?P<sub1>[A-Za-z0-9]))?(?P<prime>'*)" % _IDENT.pattern)


def _sub_pieces(text):
    return [_index(p.strip()) if _IDENT.fullmatch(p.strip()) and "_" not in p else p.strip()
            for p in text.split(",")] if text else []


def fix_name_tex(tex: str) -> str:
    """A symbol name written by a rule (``Derivation.symbol_names``), typeset like :func:`name_tex`: rules write
    plain names (``lr``, ``momentum_buffer_{t+1}``, ``\\mathbf{m1}``) as well as LaTeX (``\\hat{g}_{old}``)."""
    braced = re.fullmatch(r"\{(.+)\}('+)", tex)
    if braced and braced.group(1).count("{") == braced.group(1).count("}"):
        return "{%s}%s" % (fix_name_tex(braced.group(1)), braced.group(2))
    m = _NAMED.fullmatch(tex)
    if m:
        extra = _sub_pieces(m.group("isub")) + _sub_pieces(m.group("sub") or m.group("sub1"))
        return name_tex(m.group("id"), bold=bool(m.group("open")), extra=extra) + m.group("prime")
    # LaTeX already: only words in subscripts are set upright (\hat{g}_{old} -> \hat{g}_{\mathrm{old}})
    return re.sub(r"_\{([A-Za-z]{2,})\}",
                  lambda w: "_{%s}" % _index(w.group(1)), tex)


class TexPrinter(LatexPrinter):
    """sympy's LaTeX printer with the typesetting of the module docstring."""

    def __init__(self, symbol_names=None, **settings):
        names = {k: fix_name_tex(v) for k, v in (symbol_names or {}).items()}
        super().__init__(dict({"mat_symbol_style": "bold"}, **settings, symbol_names=names, mul_symbol=_SEP))

    def doprint(self, expr):
        return super().doprint(expr).replace(_SEP, " ")

    # ---- names
    def _print_Symbol(self, expr, style="plain"):
        name = self._settings["symbol_names"].get(expr)
        if name is not None:
            return name
        parts = choice_parts(expr.name)
        if parts is not None:
            return r"%s = \text{%s}" % (name_tex(parts[0]), escape_name(parts[1]))
        return name_tex(expr.name, bold=(style == "bold"))

    _print_Dummy = _print_Symbol

    def _print_MatrixSymbol(self, expr):
        return self._print_Symbol(expr, style=self._settings["mat_symbol_style"])

    def _hprint_Function(self, func: str) -> str:
        if func in accepted_latex_functions:
            return "\\" + func
        if len(func) == 1 or func.startswith("\\"):
            return func
        return r"\operatorname{%s}" % escape_name(func)

    # ---- products
    @staticmethod
    def _join(terms) -> str:
        """Factors side by side, with ``\\cdot`` where juxtaposition is ambiguous: next to an upright name, or
        before a number."""
        out = terms[0]
        for term in terms[1:]:
            ambiguous = (_UPRIGHT_END.search(out) or _UPRIGHT_START.match(term)
                         or re.match(r"\s*[0-9.]", term))
            out += (r" \cdot " if ambiguous else " ") + term
        return out

    def _print_Mul(self, expr):
        return self._join(super()._print_Mul(expr).split(_SEP))

    def _print_MatMul(self, expr):
        def factor(x):
            if isinstance(x, sp.Mul) and not isinstance(x, sp.MatMul):
                return self._print(x)
            return self.parenthesize(x, precedence_traditional(expr), False)

        args = list(expr.args)
        sign = ""
        if expr.could_extract_minus_sign():
            sign = "- "
            args = args[1:] if args[0] == -1 else [-args[0]] + args[1:]
        return sign + self._join([factor(a) for a in args])

    def _print_Float(self, expr):
        return super()._print_Float(expr).replace(_SEP, r" \cdot ")

    # ---- conditions
    def _print_Piecewise(self, expr):
        rows = []
        for e, c in expr.args:
            when = r"\text{otherwise}" if c == sp.true else r"\text{if } %s" % self._print(c)
            rows.append(f"{self._print(e)} & {when}")
        return r"\begin{cases} %s \end{cases}" % r" \\ ".join(rows)

    def _logic(self, args, word):
        parts = []
        for a in args:
            s = self._print(a)
            if isinstance(a, (sp.And, sp.Or)):
                s = r"\left(%s\right)" % s
            parts.append(s)
        return (r" \text{ %s } " % word).join(parts)

    def _print_And(self, expr):
        return self._logic(expr.args, "and")

    def _print_Or(self, expr):
        return self._logic(expr.args, "or")

    def _print_Not(self, expr):
        a = expr.args[0]
        parts = choice_parts(getattr(a, "name", ""))
        if parts is not None:
            return r"%s \neq \text{%s}" % (name_tex(parts[0]), escape_name(parts[1]))
        s = self._print(a)
        return r"\text{not } \left(%s\right)" % s if isinstance(a, (sp.And, sp.Or)) else r"\text{not } %s" % s

    def _print_BooleanTrue(self, expr):
        return r"\text{true}"

    def _print_BooleanFalse(self, expr):
        return r"\text{false}"

    # ---- matrices and special functions
    def _print_Determinant(self, expr):
        return r"\det\left(%s\right)" % self._print(expr.arg)

    def _print_polygamma(self, expr, exp=None):
        n, x = expr.args
        name = {0: r"\psi", 1: r"\psi'"}.get(int(n)) if n.is_Integer else None
        tex = (r"%s\left(%s\right)" % (name, self._print(x)) if name
               else r"\psi^{(%s)}\left(%s\right)" % (self._print(n), self._print(x)))
        return r"\left(%s\right)^{%s}" % (tex, exp) if exp is not None else tex


def latex(e, symbol_names=None) -> str:
    """LaTeX of an expression (strings, LaTeX already, pass through)."""
    if isinstance(e, str):
        return e
    return TexPrinter(symbol_names).doprint(e)


def _side(printer, e) -> str:
    if isinstance(e, str):
        return e
    if isinstance(e, TexForm):
        return e.render(printer.doprint)
    return printer.doprint(e)


def derivation_tex(D, e) -> str:
    """LaTeX of an expression with the symbol names of the derivation ``D`` (strings, LaTeX already, pass
    through; a :class:`~blr_derive.rules.base.TexForm` is filled in)."""
    return _side(TexPrinter(D.symbol_names), e)


def eq_tex(D, lhs, rhs, op=r"\leftarrow") -> str:
    """``lhs op rhs`` with the derivation's symbol names."""
    printer = TexPrinter(D.symbol_names)
    return f"{_side(printer, lhs)} {op} {_side(printer, rhs)}"


def oracle_tex(D, call) -> str:
    """An oracle call ``(symbol, oracle, argument, ...)`` of the update: ``g = \\mathrm{grad}(m)``."""
    return r"%s = %s(%s)" % (derivation_tex(D, call.symbol), upright(call.oracle), derivation_tex(D, call.argument))
