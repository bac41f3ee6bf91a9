"""What the notebook API returns for a derivation, and the notebook views of families and recipes.

:class:`DerivationView` wraps the engine's record (:class:`~blr_derive.rules.base.Derivation`, reachable as
``.record``): every attribute of the record reads through (``steps``, ``step(rule)``, ``update``,
``definitions``, ``recipe`` ...; ``steps``, ``step(key)`` and ``steps_for(rule)`` give :class:`StepView` objects
that render in notebooks), and the view adds the reports (``to_markdown/to_latex/to_html`` and the
notebook ``_repr_*_`` methods), the generated code (``code``, ``compile``) and ``save``.

Families and recipes are plain data; :func:`register_notebook_views` teaches an IPython shell to display them
(Markdown, HTML with math, LaTeX) through its display formatters, without methods added to their classes."""
from __future__ import annotations

import linecache
import sys
import types
from pathlib import Path

from blr_derive.codegen.printing import numeric_lowering
from blr_derive.codegen.registry import emit
from blr_derive.core.io import source_label, write_atomic
from blr_derive.core.text import plain
from blr_derive.families.mixture import MixtureFamily
from blr_derive.families.model import Family
from blr_derive.ir.build import build_ir
from blr_derive.report.html import (derivation_fragment, derivation_latex, derivation_page, family_fragment,
                                    family_latex, recipe_fragment, recipe_latex)
from blr_derive.report.latex import derivation_document, tex_math_text
from blr_derive.report.markdown import derivation_markdown, family_markdown, recipe_markdown, step_markdown
from blr_derive.spec.product import FactorizedRecipe
from blr_derive.spec.recipe import Recipe


class StepView:
    """One step of a derivation as the notebook API returns it: every attribute of the engine's
    :class:`~blr_derive.rules.base.Step` reads through (``rule``, ``equation``, ``title``, ``text``,
    ``equations``, reachable as ``.step``), and the step renders in Jupyter (``_repr_markdown_``,
    ``_repr_latex_``) with the derivation's symbol names (``D.latex``, ``D.eq_latex``)."""

    def __init__(self, record, step, number):
        self.record = record
        self.step = step
        self.number = number

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.step, name)

    def __repr__(self):
        return f"<step {self.number} of '{self.record.recipe.name}': {self.step.rule} ({plain(self.step.title)})>"

    def latex(self) -> list[str]:
        """The step's equations, one LaTeX string each (``lhs op rhs``; LaTeX strings pass through)."""
        out = []
        for eq in self.step.equations:
            if isinstance(eq, str):
                out.append(eq)
            else:
                lhs, rhs, *op = eq
                out.append(self.record.eq_latex(lhs, rhs, op[0] if op else "="))
        return out

    def _repr_markdown_(self) -> str:
        return "\n".join(step_markdown(self.number, self.step, self.latex(), heading="")) + "\n"

    def _repr_latex_(self) -> str:
        rows = self.latex()
        head = r"&\text{Step %d (}%s\text{, }%s\text{)}" % (self.number, tex_math_text(self.step.rule),
                                                             tex_math_text(self.step.equation))
        return "$$\\begin{aligned}" + r" \\ ".join([head] + [r"& " + r for r in rows]) + "\\end{aligned}$$"


class DerivationView:
    """A derivation with its reports and generated code (see the module docstring)."""

    def __init__(self, record):
        self.record = record
        self._step_views = {}

    # ------------------------------------------------------------------ steps (rendering views of the record's)
    def _view(self, step):
        view = self._step_views.get(id(step))
        if view is None or view.step is not step:
            number = next(i for i, s in enumerate(self.record.steps, 1) if s is step)
            view = self._step_views[id(step)] = StepView(self.record, step, number)
        return view

    @property
    def steps(self) -> list:
        """The steps in order, as :class:`StepView` objects."""
        return [self._view(s) for s in self.record.steps]

    def step(self, key) -> StepView:
        """One step by number, rule name or title word (``Derivation.step``), as a :class:`StepView`."""
        return self._view(self.record.step(key))

    def steps_for(self, rule: str) -> list:
        """Every step that applied ``rule``, as :class:`StepView` objects."""
        return [self._view(s) for s in self.record.steps_for(rule)]

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.record, name)

    def __repr__(self):
        return f"<derivation of recipe '{self.record.recipe.name}': {len(self.record.steps)} steps>"

    # ------------------------------------------------------------------ reports
    def to_markdown(self) -> str:
        return derivation_markdown(self.record)

    def to_latex(self) -> str:
        """A standalone LaTeX document with the content of :meth:`to_markdown`."""
        return derivation_document(self.record)

    def to_html(self) -> str:
        """A standalone HTML page with KaTeX inlined (``blr_derive/report/html.py``)."""
        return derivation_page(self.record)

    def _repr_markdown_(self) -> str:
        return derivation_markdown(self.record)

    def _repr_html_(self) -> str:
        return derivation_fragment(self.record, heading=3)

    def _repr_latex_(self) -> str:
        return derivation_latex(self.record)

    # ------------------------------------------------------------------ code
    def code(self, target: str = "numpy", label: str | None = None) -> str:
        """The generated module for ``target``, exactly as ``blr-derive RECIPE --target`` writes it."""
        r = self.record.recipe
        if label is None:
            label = source_label(r.file) if r.file else f"<{r.name}>"
        return emit(build_ir(self.record, label, numeric_lowering), target)

    def compile(self, target: str = "numpy"):
        """Generate the code for ``target`` and load it as a module (``mod.init``/``mod.step`` for numpy; the
        optimizer class, named by the recipe's ``class_name``, for torch).  The module is registered in
        ``sys.modules`` as ``blr_generated.<recipe>_<target>`` and its source is visible to tracebacks."""
        name_ = self.record.recipe.name
        src = self.code(target)
        name = f"blr_generated.{name_}_{target}"
        filename = f"<blr-derive {name_} {target}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        mod = types.ModuleType(name, f"Generated by blr-derive from recipe '{name_}' ({target}).")
        mod.__file__ = filename
        mod.SOURCE = src
        sys.modules[name] = mod
        exec(compile(src, filename, "exec"), mod.__dict__)        # the engine's own generated code
        return mod

    def save(self, path, format: str | None = None):
        """Write the report (``.md``, ``.tex``, ``.html``) or the generated code (``.py``: numpy, or
        ``format='torch'``) to ``path``; the format follows the suffix unless given.  Returns the path."""
        path = Path(path)
        fmt = format or {".md": "markdown", ".tex": "latex", ".html": "html", ".py": "numpy"}.get(path.suffix)
        render = {"markdown": self.to_markdown, "latex": self.to_latex, "html": self.to_html,
                  "numpy": lambda: self.code("numpy"), "torch": lambda: self.code("torch")}
        if fmt not in render:
            raise ValueError(f"unknown format {fmt!r} for {path} (markdown, latex, html, numpy, torch)")
        write_atomic(path, render[fmt]())
        return path


#: (class, Markdown, HTML, LaTeX) views of the engine's data in notebooks
VIEWS = [
    (Family, family_markdown, family_fragment, family_latex),
    (MixtureFamily, family_markdown, family_fragment, family_latex),
    (Recipe, recipe_markdown, recipe_fragment, recipe_latex),
    (FactorizedRecipe, recipe_markdown, recipe_fragment, recipe_latex),
]


def register_notebook_views(shell=None):
    """Register the views of :data:`VIEWS` with an IPython shell's display formatters (the running one by
    default; nothing happens outside IPython).  Returns the shell, or None."""
    if shell is None:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return None
    formatters = shell.display_formatter.formatters
    for cls, md, html, tex in VIEWS:
        for mime, fn in (("text/markdown", md), ("text/html", html), ("text/latex", tex)):
            if fn is not None:
                formatters[mime].for_type(cls, fn)
    return shell
