"""LaTeX views: a standalone document of a derivation (``blr-derive explain --format latex``) and the escaping
of prose for LaTeX."""
from __future__ import annotations

from blr_derive.report.markdown import CONVENTION, final_latex, is_convention
from blr_derive.report.texprint import eq_tex, oracle_tex

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


def derivation_document(D) -> str:
    """A standalone LaTeX document with the content of the Markdown report."""
    r = D.recipe
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
    for i, st in enumerate(D.steps, 1):
        lines.append(r"\subsection*{Step %d. %s}" % (i, tex_escape(st.title)))
        tag = f" ({tex_escape(CONVENTION)})" if is_convention(st.rule) else ""
        lines.append(r"\emph{rule} \texttt{%s}%s --- \emph{%s}\par" % (tex_escape(st.rule), tag, tex_escape(st.equation)))
        if st.text:
            lines.append(tex_escape(st.text.strip()))
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
    lines.append(r"\end{document}")
    return "\n".join(lines) + "\n"
