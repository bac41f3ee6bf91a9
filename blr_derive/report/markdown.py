"""Markdown views of families, recipes and derivations (``blr-derive explain``, notebooks).

A derivation report lists the recipe, each step with the rule it applied and the paper equation it cites,
and the final update; a product (mean-field) recipe adds its blocks and factors."""
from __future__ import annotations

import re

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


#: characters with a meaning anywhere in a line of Markdown (code, emphasis, links, headings, math, tables)
_MD_INLINE = re.compile(r"([\\`*_\[\]#$|~])")
#: what opens a block at the start of a line: a list item, a numbered item, a thematic break or setext underline;
#: the backslash goes where the match ends (before the '-', or after the number of '1.')
_MD_LINE_START = re.compile(r"^(?=[-+=])|^\d+(?=[.)])")


def _md(text) -> str:
    """A recipe's or family's own text in Markdown, shown as the text it is: HTML is escaped (a title
    '<script>...' or '<img onerror=...>' would run in a viewer that renders HTML), and so is Markdown's own
    syntax (a line of ``` opened a code block that swallowed the rest of the report; '# ...' became a heading and
    '$$...$$' math).  Lines are kept as hard line breaks, without their indentation (an indented code block)."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    lines = [_MD_LINE_START.sub(lambda m: m.group(0) + "\\", _MD_INLINE.sub(r"\\\1", line.strip()), count=1)
             for line in s.splitlines()]
    return "  \n".join(line for line in lines if line) if len(lines) > 1 else (lines[0] if lines else "")


def steps_markdown(D) -> list[str]:
    """The derivation steps in Markdown: title, rule and equation cited, text, display equations."""
    lines = []
    for i, s in enumerate(D.steps, 1):
        lines.append(f"## Step {i}. {s.title}  ")
        tag = f" ({CONVENTION})" if is_convention(s.rule) else ""
        lines.append(f"*rule* `{s.rule}`{tag} — *{s.equation}*")
        lines.append("")
        if s.text:
            lines += [s.text.strip(), ""]
        for eq in s.equations:
            if isinstance(eq, str):
                lines.append(f"$$ {eq} $$")
            else:
                lhs, rhs, *op = eq
                lines.append(f"$$ {eq_tex(D, lhs, rhs, op[0] if op else '=')} $$")
        lines.append("")
    return lines


def _recipe_lines(D) -> list[str]:
    r = D.recipe
    fam = r.family
    return [
        f"- **Family**: `{fam.name}` — {_md(fam.description)}",
        f"- **Loss**: {'abstract ℓ(θ) (oracles)' if r.loss_kind == 'abstract' else '$' + derivation_tex(D, r.loss) + '$'}",
        f"- **Approximations**: {', '.join(a.name for a in r.approximations) or 'none'}",
        f"- **Paper**: {_md(r.paper)}" if r.paper else "",
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
        lines += ["", f"- **Paper**: {_md(r.paper)}"]
    lines.append("")
    return lines


def derivation_markdown(D) -> str:
    r = D.recipe
    lines = [f"# Derivation of `{r.name}`: {_md(r.title)}", ""]
    if r.description:
        lines += [_md(r.description.strip()), ""]
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
    return "\n".join(lines)


def family_markdown(fam) -> str:
    """T(θ), h(θ), λ, μ and A(λ) in LaTeX."""
    rows = [("T(θ)", ", ".join(f"${latex(t)}$" for t in fam.T)),
            ("h(θ)", f"${latex(fam.h)}$"),
            ("λ", ", ".join(f"${latex(e)}$" for e in fam.eta)),
            ("μ = ∇A(λ)", ", ".join(f"${latex(e)}$" for e in fam.mu_ord)),
            ("A(λ)", f"${latex(fam.A)}$" + ("" if fam.A_given else " (derived)"))]
    params = ", ".join(f"`{p.name}` ({p.shape}, {p.domain}{', fixed' if p.fixed else ''})" for p in fam.params.values())
    out = [f"**Family `{fam.name}`** — {_md(fam.description)}", "", f"parameters: {params}", "",
           "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(out) + "\n"


def recipe_markdown(r) -> str:
    """Family, loss, approximations and hyperparameters."""
    loss = "abstract ℓ(θ) (oracles)" if r.loss_kind == "abstract" else f"${latex(r.loss)}$"
    hyper = ", ".join(f"`{h.name}` = {h.default!r}" for h in r.hyper) or "none"
    approx = ", ".join(f"`{a.name}`" for a in r.approximations) or "none"
    return "\n".join([f"**Recipe `{r.name}`** — {_md(r.title)}", "", f"- family: `{r.family.name}`",
                      f"- loss: {loss}", f"- approximations: {approx}", f"- hyperparameters: {hyper}",
                      f"- paper: {_md(r.paper)}" if r.paper else ""]) + "\n"
