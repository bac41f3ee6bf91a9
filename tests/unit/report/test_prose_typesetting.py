"""Report prose writes maths in Unicode, not ASCII (issue 40 item 6): 'Solve λ⁽²⁾ₜ₊₁ = …', not
'Solve λ^(2)_(t+1) = …', in the Markdown, and the same text typeset as maths in the LaTeX report."""
import re

from blr_derive import api


def test_natural_to_ordinary_and_increment_steps_use_unicode_indices():
    d = api.derive(api.recipe("newton"))
    texts = {s.rule: s.text for s in d.steps}
    assert texts["natural_to_ordinary"].startswith("Solve λ⁽²⁾ₜ₊₁ = ") and texts["natural_to_ordinary"].endswith(
        "for S, using the parameters already updated.")
    assert texts["increment_form"].startswith("m enters λ⁽¹⁾ linearly; writing mₜ₊₁ = mₜ + Δ, the terms of λ⁽¹⁾ₜ₊₁")
    md = d.to_markdown()
    assert "λ⁽²⁾ₜ₊₁" in md and not re.search(r"λ\^\(\d\)|_\(t\+1\)", md)
    tex = d.to_latex()
    assert r"{\lambda}{^{(}}{^{2}}{^{)}}{_{t}}{_{+}}{_{1}}" in tex and "λ" not in tex


def test_a_rule_named_twice_is_shown_with_the_parameter_each_acts_on():
    """Adam's approximations row said 'debias, debias'; each is labelled with its parameter."""
    d = api.derive(api.recipe("adam"))
    row = next(line for line in d.to_markdown().splitlines() if line.startswith("- **Approximations**"))
    assert "debias (u), debias (s)" in row and "debias, debias" not in row
    assert "delta, weight_decay" in row                  # a rule named once keeps its bare name
