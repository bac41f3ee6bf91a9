"""A derivation: an ordered list of steps, each naming the rule and the paper equation
it implements, with the equations it produced (sympy) and their LaTeX."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp


@dataclass
class Step:
    rule: str
    equation: str                 # paper reference, e.g. "Eq. 6" or "App. D"
    title: str
    text: str
    equations: list = field(default_factory=list)   # [(lhs, rhs)] sympy pairs or strings


@dataclass
class Sampling:
    """Monte Carlo over the candidate: θ_k = theta_expr(ε_k), oracles at θ_k, averaged statistics."""
    samples: object                 # number of samples (expression of hyperparameters)
    eps: object                     # ε_k ~ N(0, 1), shaped like the mean
    theta: object                   # θ_k
    theta_expr: object              # θ_k in terms of the state and ε_k
    calls: list                     # [(symbol, oracle name)] evaluated at θ_k
    stats: list                     # [(average symbol, per-sample expression)]
    draw: str = "normal"            # the draw behind eps: "normal" (N(0, 1)) or "uniform" (U(0, 1))
    views: dict = field(default_factory=dict)   # oracle name -> the averaged statistic that stands for it
    grad_stat: object = None        # the average that stands for the loss gradient in the update (for passes)


@dataclass
class Derivation:
    recipe: object
    steps: list = field(default_factory=list)
    updates: list = field(default_factory=list)      # [(param_name, new_symbol, expr)] in update order
    oracle_calls: list = field(default_factory=list)  # [(symbol, oracle_name, argument_expr, description)]
    symbol_names: dict = field(default_factory=dict)  # LaTeX names
    placeholders: dict = field(default_factory=dict)  # name -> symbol used in intermediate steps
    defs: list = field(default_factory=list)          # [(symbol, expr)] intermediate definitions (passes)
    aux_state: list = field(default_factory=list)     # [AuxState] state added by passes
    views: dict = field(default_factory=dict)         # what currently stands for grad/hess/each parameter
    step_symbol: object = None                        # the step counter t (1-based) when a pass needs it
    elementwise: bool = False                         # every update acts coordinate-wise
    sampling: object = None                           # Sampling, for Monte Carlo recipes
    renamed: dict = field(default_factory=dict)       # family parameter -> (new state name, symbol, value)

    def add(self, rule, equation, title, text, equations=()):
        self.steps.append(Step(rule, equation, title, text, list(equations)))

    # ------------------------------------------------------------------ rendering
    def latex(self, e) -> str:
        if isinstance(e, str):
            return e
        return sp.latex(e, symbol_names=self.symbol_names, mat_symbol_style="bold")

    def eq_latex(self, lhs, rhs, op=r"\leftarrow") -> str:
        return f"{self.latex(lhs)} {op} {self.latex(rhs)}"

    def update_lines(self) -> list[str]:
        """Plain-text update equations (for generated-code headers)."""
        out = []
        if self.sampling is not None:
            sm = self.sampling
            dist = "N(0, 1)" if sm.draw == "normal" else "U(0, 1)"
            out.append(f"for k in 1..{sm.samples}: {sm.eps} ~ {dist}, {sm.theta} = {_plain(sm.theta_expr)}, "
                       + ", ".join(f"{s} = {o}({sm.theta})" for s, o in sm.calls))
            for avg, e in sm.stats:
                out.append(f"{avg} = mean_k({_plain(e)})")
        for call in self.oracle_calls:
            out.append(f"{call[0]} = {call[1]}({call[2]})")
        for sym, expr in self.defs:
            out.append(f"{sym} = {_plain(expr)}")
        for name, sym, expr in self.updates:
            out.append(f"{name} <- {_plain(expr)}")
        return out

    def final_latex(self) -> list[str]:
        return ([self.eq_latex(sym, expr, "=") for sym, expr in self.defs]
                + [self.eq_latex(sym, expr) for _, sym, expr in self.updates])

    def steps_markdown(self) -> list[str]:
        """The derivation steps in Markdown: title, rule and equation cited, text, display equations."""
        lines = []
        for i, s in enumerate(self.steps, 1):
            lines.append(f"## Step {i}. {s.title}  ")
            lines.append(f"*rule* `{s.rule}` — *{s.equation}*")
            lines.append("")
            if s.text:
                lines += [s.text.strip(), ""]
            for eq in s.equations:
                if isinstance(eq, str):
                    lines.append(f"$$ {eq} $$")
                else:
                    lhs, rhs, *op = eq
                    lines.append(f"$$ {self.eq_latex(lhs, rhs, op[0] if op else '=')} $$")
            lines.append("")
        return lines

    def to_markdown(self) -> str:
        r = self.recipe
        fam = r.family
        lines = [f"# Derivation of `{r.name}`: {r.title}", ""]
        if r.description:
            lines += [r.description.strip(), ""]
        lines += [
            f"- **Family**: `{fam.name}` — {fam.description}",
            f"- **Loss**: {'abstract ℓ(θ) (oracles)' if r.loss_kind == 'abstract' else '$' + self.latex(r.loss) + '$'}",
            f"- **Approximations**: {', '.join(a.name for a in r.approximations) or 'none'}",
            f"- **Paper**: {r.paper}" if r.paper else "",
            "",
        ]
        lines += self.steps_markdown()
        lines.append("## Update")
        lines.append("")
        for call in self.oracle_calls:
            lines.append(f"$$ {self.latex(call[0])} = \\mathrm{{{call[1]}}}({self.latex(call[2])}) $$")
        for l in self.final_latex():
            lines.append(f"$$ {l} $$")
        lines.append("")
        return "\n".join(lines)


def _plain(e) -> str:
    s = sp.sstr(e)
    return s.replace("**(-1)", "^-1").replace("**", "^")


_TEX_ESCAPES = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$",
                "{": r"\{", "}": r"\}", "^": r"\^{}", "~": r"\~{}"}


def tex_escape(text: str) -> str:
    """Plain text for LaTeX: specials escaped, and common Unicode math letters mapped to commands."""
    out = "".join(_TEX_ESCAPES.get(c, c) for c in text)
    for u, t in {"λ": r"$\lambda$", "μ": r"$\mu$", "ρ": r"$\rho$", "θ": r"$\theta$", "∇": r"$\nabla$",
                 "ℓ": r"$\ell$", "σ": r"$\sigma$", "ε": r"$\epsilon$", "γ": r"$\gamma$", "δ": r"$\delta$",
                 "→": r"$\to$", "−": "-", "≈": r"$\approx$", "²": r"$^2$", "ᵀ": r"$^T$", "Ω": r"$\Omega$",
                 "√": r"$\sqrt{}$", "⁻¹": r"$^{-1}$", "∘": r"$\circ$", "Σ": r"$\Sigma$", "π": r"$\pi$",
                 "ψ": r"$\psi$", "Γ": r"$\Gamma$", "κ": r"$\kappa$", "α": r"$\alpha$", "β": r"$\beta$",
                 "τ": r"$\tau$", "ĝ": r"$\hat g$", "½": r"$\frac12$", "…": r"\ldots{}", "–": "--", "—": "---",
                 "×": r"$\times$", "≤": r"$\le$", "≥": r"$\ge$", "⟨": r"$\langle$", "⟩": r"$\rangle$"}.items():
        out = out.replace(u, t)
    return out


def _derivation_to_latex(self) -> str:
    """A standalone LaTeX document with the same content as :meth:`Derivation.to_markdown`."""
    r = self.recipe
    lines = [r"\documentclass{article}", r"\usepackage{amsmath,amssymb}", r"\usepackage[margin=2cm]{geometry}",
             r"\begin{document}", r"\section*{Derivation of \texttt{%s}: %s}" % (tex_escape(r.name), tex_escape(r.title))]
    if r.description:
        lines.append(tex_escape(r.description.strip()))
    lines.append(r"\begin{itemize}")
    lines.append(r"\item Family: \texttt{%s}" % tex_escape(r.family.name))
    lines.append(r"\item Approximations: %s" % (", ".join(r"\texttt{%s}" % tex_escape(a.name)
                                                            for a in r.approximations) or "none"))
    if r.paper:
        lines.append(r"\item Paper: %s" % tex_escape(r.paper))
    lines.append(r"\end{itemize}")
    for i, st in enumerate(self.steps, 1):
        lines.append(r"\subsection*{Step %d. %s}" % (i, tex_escape(st.title)))
        lines.append(r"\emph{rule} \texttt{%s} --- \emph{%s}\par" % (tex_escape(st.rule), tex_escape(st.equation)))
        if st.text:
            lines.append(tex_escape(st.text.strip()))
        for eq in st.equations:
            if isinstance(eq, str):
                body = eq
            else:
                lhs, rhs, *op = eq
                body = self.eq_latex(lhs, rhs, op[0] if op else "=")
            lines.append(r"\begin{equation*}%s\end{equation*}" % body)
    lines.append(r"\subsection*{Update}")
    for call in self.oracle_calls:
        lines.append(r"\begin{equation*}%s = \mathrm{%s}(%s)\end{equation*}"
                     % (self.latex(call[0]), tex_escape(call[1]), self.latex(call[2])))
    for l in self.final_latex():
        lines.append(r"\begin{equation*}%s\end{equation*}" % l)
    lines.append(r"\end{document}")
    return "\n".join(lines) + "\n"


Derivation.to_latex = _derivation_to_latex
Derivation._repr_markdown_ = Derivation.to_markdown


def _derivation_to_html(self) -> str:
    """A standalone HTML page with KaTeX inlined (see :mod:`blr_derive.report_html`)."""
    from blr_derive.report.html import derivation_page
    return derivation_page(self)


def _derivation_repr_html(self) -> str:
    from blr_derive.report.html import derivation_fragment
    return derivation_fragment(self, heading=3)


def _derivation_repr_latex(self) -> str:
    from blr_derive.report.html import derivation_latex
    return derivation_latex(self)


Derivation.to_html = _derivation_to_html
Derivation._repr_html_ = _derivation_repr_html
Derivation._repr_latex_ = _derivation_repr_latex


# ---------------------------------------------------------------------- notebook API (see blr_derive/api.py)

def _derivation_step(self, key) -> Step:
    """One step: ``key`` is its 1-based number, its rule name (``'delta'``, ``'bonnet'``) or a word of its title.
    A rule used by several steps (``'blr'`` states Eq. 6 and later applies it) must be picked by number;
    :meth:`steps_for` lists them."""
    if isinstance(key, int):
        if not 1 <= key <= len(self.steps):
            raise KeyError(f"step {key}: the derivation has steps 1..{len(self.steps)}")
        return self.steps[key - 1]
    hits = [i for i, s in enumerate(self.steps, 1) if s.rule == key]
    if not hits:
        hits = [i for i, s in enumerate(self.steps, 1) if str(key).lower() in s.title.lower()]
    if len(hits) == 1:
        return self.steps[hits[0] - 1]
    listing = "; ".join(f"{i}: {s.rule} ({s.title})" for i, s in enumerate(self.steps, 1))
    if not hits:
        raise KeyError(f"no step with rule or title {key!r}; steps: {listing}")
    raise KeyError(f"{key!r} matches steps {', '.join(map(str, hits))}: pick one by number (d.step(n)) "
                   f"or use d.steps_for({key!r})")


def _derivation_steps_for(self, rule: str) -> list:
    """Every step that applied ``rule``, in order."""
    return [s for s in self.steps if s.rule == rule]


def _derivation_update(self) -> dict:
    """The derived update as sympy expressions: state name -> new value (in update order), e.g. ``d.update['m']``.
    Symbols of updated parameters that appear on the right (``S_new``) are the values computed before."""
    return {name: expr for name, _, expr in self.updates}


def _derivation_definitions(self) -> dict:
    """Intermediate quantities of the update (oracle results and pass definitions): name -> sympy expression;
    an oracle call ``g = grad(m)`` appears as ``Function('grad')(m)``."""
    out = {str(c[0]): sp.Function(c[1])(c[2]) for c in self.oracle_calls}
    out.update({str(sym): expr for sym, expr in self.defs})
    return out


def _derivation_code(self, target: str = "numpy", label: str | None = None) -> str:
    """The generated module for ``target`` (``numpy`` or ``torch``), exactly as ``blr-derive RECIPE --target``
    writes it."""
    from blr_derive.codegen import emit

    from blr_derive.ir.build import build_ir
    if label is None:
        from blr_derive.api import source_label
        label = source_label(self.recipe.file) if self.recipe.file else f"<{self.recipe.name}>"
    return emit(build_ir(self, label), target)


def _derivation_compile(self, target: str = "numpy"):
    """Generate the code for ``target`` and load it as a module (``mod.init``/``mod.step`` for numpy; the
    optimizer class, named by the recipe's ``class_name``, for torch). The module is registered in
    ``sys.modules`` as ``blr_generated.<recipe>_<target>`` and its source is visible to tracebacks."""
    import linecache
    import sys
    import types
    src = self.code(target)
    name = f"blr_generated.{self.recipe.name}_{target}"
    filename = f"<blr-derive {self.recipe.name} {target}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    mod = types.ModuleType(name, f"Generated by blr-derive from recipe '{self.recipe.name}' ({target}).")
    mod.__file__ = filename
    mod.SOURCE = src
    sys.modules[name] = mod
    exec(compile(src, filename, "exec"), mod.__dict__)        # the engine's own generated code
    return mod


def _derivation_save(self, path, format: str | None = None):
    """Write the report (``.md``, ``.tex``, ``.html``) or the generated code (``.py``: numpy, or
    ``format='torch'``) to ``path``; the format follows the suffix unless given. Returns the path."""
    from pathlib import Path

    from blr_derive.cli import _write_atomic
    path = Path(path)
    fmt = format or {".md": "markdown", ".tex": "latex", ".html": "html", ".py": "numpy"}.get(path.suffix)
    render = {"markdown": self.to_markdown, "latex": self.to_latex, "html": self.to_html,
              "numpy": lambda: self.code("numpy"), "torch": lambda: self.code("torch")}
    if fmt not in render:
        raise ValueError(f"unknown format {fmt!r} for {path} (markdown, latex, html, numpy, torch)")
    _write_atomic(path, render[fmt]())
    return path


Derivation.step = _derivation_step
Derivation.steps_for = _derivation_steps_for
Derivation.update = property(_derivation_update)
Derivation.definitions = property(_derivation_definitions)
Derivation.code = _derivation_code
Derivation.compile = _derivation_compile
Derivation.save = _derivation_save
