"""Markdown views of families, recipes and derivations (``blr-derive explain``, notebooks).

A derivation report lists the recipe, each step with the rule it applied and the paper equation it cites,
and the final update; a product (mean-field) recipe adds its blocks and factors."""
from __future__ import annotations

import re

from blr_derive.core.text import Prose, text_of
from blr_derive.ir.objective import objective_terms
from blr_derive.report.texprint import derivation_tex, eq_tex, latex, oracle_tex
from blr_derive.rules.base import RULES
from blr_derive.spec.product import FactorizedRecipe


def final_latex(D) -> list[str]:
    """The update after the oracle calls, one LaTeX equation per definition or state update."""
    return [eq_tex(D, lhs, rhs, op) for lhs, rhs, op in D.final_equations()]


def is_convention(rule_name) -> bool:
    """A step applied a peer's convention (``Rule.kind == 'convention'``), not a consequence of the BLR."""
    r = RULES.get(rule_name)
    return r is not None and r.kind == "convention"


CONVENTION = "a peer's convention, not a BLR step"


#: what a character of text becomes in Markdown: HTML's specials as entities (a title '<script>...' or
#: '<img onerror=...>' would run in a viewer that renders HTML), the backslash as an entity too (an escaped '\\('
#: opens math in Jupyter's Markdown), Markdown's own syntax backslash-escaped (a line of ``` opened a code block
#: that swallowed the rest of the report, '#' made headings, '$$...$$' math, '[...](...)' links)
_MD_CHARS = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\\": "&#92;", **{c: "\\" + c for c in "`*_[]#$|~"}}
#: what opens a block at the start of a line: a list item, a numbered item, a thematic break or setext underline;
#: the backslash goes where the match ends (before the '-', or after the number of '1.')
_MD_LINE_START = re.compile(r"^(?=[-+=])|^\d+(?=[.)])")
#: a code span of the engine's own words (a name: `adam`)
_CODE_SPAN = re.compile(r"(`[^`\n]+`)")


def _md_chars(text: str) -> str:
    return "".join(_MD_CHARS.get(c, c) for c in text)


def md_text(value, inline: bool = False) -> str:
    """The one way text reaches a Markdown report (``explain``, the notebook views): shown as the text it is.
    Recipe and family text (:class:`~blr_derive.core.text.Prose`) is escaped character by character (see
    ``_MD_CHARS``); the engine's own words (``str``) likewise, but for their code spans (`name`).  Each line
    loses its indentation (an indented code block) and what would open a block at its start; lines are kept as
    hard line breaks, or joined by spaces where the text is ``inline``: after other text on its line (in a heading,
    a list item, a table cell), where nothing opens a block."""
    if isinstance(value, Prose):
        s = _md_chars(value.text)
    else:
        s = "".join(part if i % 2 else _md_chars(part) for i, part in enumerate(_CODE_SPAN.split(text_of(value))))
    if inline:                      # after other text on its line: nothing in it opens a block
        return " ".join(line.strip() for line in s.splitlines() if line.strip())
    lines = [_MD_LINE_START.sub(lambda m: m.group(0) + "\\", line.strip(), count=1) for line in s.splitlines()]
    return "  \n".join(line for line in lines if line)


def step_markdown(number: int, step, equations, heading: str = "## ") -> list[str]:
    """One step in Markdown: its title, the rule and the equation it cites, its text and its display equations
    (LaTeX strings); ``heading`` opens the title line (``'## '``, or ``''`` for a bold title)."""
    title = f"Step {number}. {md_text(step.title, inline=True)}"
    tag = f" ({CONVENTION})" if is_convention(step.rule) else ""
    lines = [f"{heading}{title}  " if heading else f"**{title}**  ",
             f"*rule* `{step.rule}`{tag} — *{md_text(step.equation, inline=True)}*", ""]
    if step.text:
        lines += [md_text(step.text), ""]
    lines += [f"$$ {eq} $$" for eq in equations]
    return lines


def step_equations(D, step) -> list[str]:
    """A step's display equations in LaTeX, with the derivation's symbol names (LaTeX strings pass through)."""
    return [eq if isinstance(eq, str) else eq_tex(D, eq[0], eq[1], eq[2] if len(eq) > 2 else "=")
            for eq in step.equations]


def steps_markdown(D) -> list[str]:
    """The derivation steps in Markdown: title, rule and equation cited, text, display equations."""
    lines = []
    for i, s in enumerate(D.steps, 1):
        lines += step_markdown(i, s, step_equations(D, s)) + [""]
    return lines


def _recipe_lines(D) -> list[str]:
    r = D.recipe
    fam = r.family
    return [
        f"- **Family**: `{fam.name}` — {md_text(fam.description, inline=True)}",
        f"- **Loss**: {'abstract ℓ(θ) (oracles)' if r.loss_kind == 'abstract' else '$' + derivation_tex(D, r.loss) + '$'}",
        f"- **Approximations**: {', '.join(approximation_labels(r.approximations)) or 'none'}",
        f"- **Paper**: {md_text(r.paper, inline=True)}" if r.paper else "",
        "",
    ]


def _product_lines(D) -> list[str]:
    r = D.recipe
    lines = ["| block | candidate | scope | learning rate ρ | approximation | step |", "|---|---|---|---|---|---|"]
    for b in r.blocks:
        if b.one_hot:
            cand = "`categorical` over the components"
        elif b.family is not None:
            cand = f"`{b.family.name}`"
        else:
            cand = ("N(θ_t, I), point estimate" + (" on the simplex" if b.simplex else "")
                    + (", one per component" if b.per_component else ""))
        kind = ("exact natural-gradient step (Eq. 6)" if b.approximation == "exact"
                else "fixed point under the delta method (stationarity)")
        lines.append(f"| `{b.name}` | {cand} | {'local (one per plate row)' if b.local else 'global'} | "
                     f"{b.rho_text} | `{b.approximation}` | coordinate-wise: {kind} |")
    lines.append("")
    lines.append("**Factors** (loss = Σ of their negative logs): "
                 + "; ".join(f"`{f.name}`{' (summed over the plate)' if f.plate else ''}"
                             f"{' (written for one component k, summed over the components)' if f.components else ''}"
                             f": ${derivation_tex(D, f.expr)}$" for f in r.factors))
    if r.paper:
        lines += ["", f"- **Paper**: {md_text(r.paper, inline=True)}"]
    lines.append("")
    return lines


def derivation_markdown(D) -> str:
    r = D.recipe
    lines = [f"# Derivation of `{r.name}`: {md_text(r.title, inline=True)}", ""]
    if r.description:
        lines += [md_text(r.description), ""]
    product = isinstance(r, FactorizedRecipe)
    lines += _product_lines(D) if product else _recipe_lines(D)
    lines += steps_markdown(D)
    lines += ["## Update", ""]
    if not product:
        for call in D.oracle_calls:
            lines.append(f"$$ {oracle_tex(D, call)} $$")
    for l in final_latex(D):
        lines.append(f"$$ {l} $$")
    lines.append("")
    objective = objective_latex(D)
    if objective is not None:
        lines += ["## Objective", "", OBJECTIVE_TEXT, ""] + [f"$$ {l} $$" for l in objective] + [""]
    return "\n".join(lines)


#: what the report says of the objective the generated modules compute (blr_derive/ir/objective.py)
OBJECTIVE_TEXT = ("The objective the BLR minimizes over the family (Eq. 2), L(q) = E_q[ℓ] − H(q): the expected loss as "
                  "the expectation rule derived it and the family's entropy H(q) = A(λ) − ⟨λ, μ⟩ − E_q[log h] "
                  "(App. B), in the ordinary parameters; the generated numpy and jax modules compute it as "
                  "objective(state, ...).")


def objective_latex(D) -> list[str] | None:
    """[E_q[ℓ] = ..., H(q) = ..., L(q) = ...] in LaTeX where the objective is closed (``objective_terms``), else
    None."""
    terms = objective_terms(D) if not isinstance(D.recipe, FactorizedRecipe) else None
    if terms is None:
        return None
    E, H = terms
    return [r"\mathbb{E}_q[\ell(\theta)] = " + latex(E), r"\mathcal{H}(q) = " + latex(H),
            r"\mathcal{L}(q) = \mathbb{E}_q[\ell(\theta)] - \mathcal{H}(q)"]


def family_markdown(fam) -> str:
    """T(θ), h(θ), λ, μ and A(λ) in LaTeX."""
    rows = [("T(θ)", ", ".join(f"${latex(t)}$" for t in fam.T)),
            ("h(θ)", f"${latex(fam.h)}$"),
            ("λ", ", ".join(f"${latex(e)}$" for e in fam.eta)),
            ("μ = ∇A(λ)", ", ".join(f"${latex(e)}$" for e in fam.mu_ord)),
            ("A(λ)", f"${latex(fam.A)}$" + ("" if fam.A_given else " (derived)"))]
    params = ", ".join(f"`{p.name}` ({p.shape}, {p.domain}{', fixed' if p.fixed else ''})" for p in fam.params.values())
    out = [f"**Family `{fam.name}`** — {md_text(fam.description, inline=True)}", "", f"parameters: {params}", "",
           "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(out) + "\n"


def approximation_labels(approximations, code: bool = False) -> list[str]:
    """The approximations' names; a rule named more than once (Adam's two ``debias``) with the parameter each
    acts on, ``debias (u), debias (s)``, not ``debias, debias``."""
    names = [a.name for a in approximations]
    out = []
    for a in approximations:
        label = f"`{a.name}`" if code else a.name
        param = a.args.get("param") if isinstance(getattr(a, "args", None), dict) else None
        if names.count(a.name) > 1 and isinstance(param, str):
            label += f" ({md_text(param, inline=True)})"
        out.append(label)
    return out


def recipe_markdown(r) -> str:
    """Family, loss, approximations and hyperparameters."""
    loss = "abstract ℓ(θ) (oracles)" if r.loss_kind == "abstract" else f"${latex(r.loss)}$"
    hyper = ", ".join(f"`{h.name}` = {md_text(repr(h.default), inline=True)}" for h in r.hyper) or "none"
    approx = ", ".join(approximation_labels(r.approximations, code=True)) or "none"
    return "\n".join([f"**Recipe `{r.name}`** — {md_text(r.title, inline=True)}", "", f"- family: `{r.family.name}`",
                      f"- loss: {loss}", f"- approximations: {approx}", f"- hyperparameters: {hyper}",
                      f"- paper: {md_text(r.paper, inline=True)}" if r.paper else ""]) + "\n"
