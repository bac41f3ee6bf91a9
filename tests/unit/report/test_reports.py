"""Derivation reports (Markdown, LaTeX), notebook views and `blr-derive compare`."""
import re

from blr_derive.api import derive_file
from blr_derive.core.text import plain
from blr_derive.report.compare import compare_recipes
from blr_derive.families.library import load_family
from conftest import CATALOG

#: the conventions adam.yaml applies: Adam's bias correction, AMSGrad's running max, AdamW's decoupled decay
#: (torch.optim.Adam's decoupled_weight_decay switch)
CONVENTIONS = ("debias", "running_max", "decoupled_weight_decay")


def test_latex_report_is_a_balanced_standalone_document():
    _, D = derive_file(CATALOG / "newton.yaml")
    tex = D.to_latex()
    assert tex.startswith("\\documentclass{article}") and tex.rstrip().endswith("\\end{document}")
    assert tex.count("\\begin{equation*}") == tex.count("\\end{equation*}") >= 10
    assert tex.count("{") == tex.count("}")
    assert "Bonnet" in tex and "Price" in tex and "App. D" in tex
    # outside math, underscores and other specials are escaped
    text = re.sub(r"\\begin\{equation\*\}.*?\\end\{equation\*\}|\$[^$]*\$", "", tex, flags=re.S)
    assert not re.search(r"(?<!\\)_", text)
    assert "S}_{t+1}" in tex                                  # the final update is in the report


def _shell():
    from IPython.core.interactiveshell import InteractiveShell

    from blr_derive.report.views import register_notebook_views
    return register_notebook_views(InteractiveShell.instance())


def test_notebook_views_display_through_ipython_formatters():
    """What a notebook shows: families and recipes through the display formatters the API registers, and a
    derivation through its own views — with the content each view must have (not one view against another)."""
    fmt = _shell().display_formatter.format
    data, _ = fmt(load_family("gaussian_full"))
    md = data["text/markdown"]
    assert "gaussian_full" in md and "\\mathbf{S} \\mathbf{m}" in md and "A(λ)" in md
    recipe, D = derive_file(CATALOG / "adam.yaml")
    md = fmt(recipe)[0]["text/markdown"]
    assert "`adam`" in md and "`debias`" in md and "`lr` = 0.001" in md
    md = fmt(D)[0]["text/markdown"]
    assert md.startswith("# Derivation of `adam`") and md.count("\n## Step ") == len(D.steps)
    for s in D.steps:              # every step names its rule and the equation it cites; conventions say so
        tag = " (a peer's convention, not a BLR step)" if s.rule in CONVENTIONS else ""
        assert f"*rule* `{s.rule}`{tag} — *{plain(s.equation)}*" in md       # (the references have no markup)
    assert md.count("(a peer's convention, not a BLR step)") == sum(len(D.steps_for(r)) for r in CONVENTIONS)
    assert md.rstrip().endswith("$$") and "## Update" in md and "m_{t+1}" in md.split("## Update")[1]


def test_compare_marks_conventions():
    out = compare_recipes(CATALOG / "rmsprop.yaml", CATALOG / "adam.yaml")
    assert "- add debias {param: u, rate: beta1}  (convention, not a consequence of the BLR; Adam convention" in out
    assert "- add ema_momentum {rate: beta1, state: u}  (App. F, Eq. 77:" in out      # a BLR step: no tag


def test_compare_names_the_approximations_that_separate_algorithms():
    out = compare_recipes(CATALOG / "ogn.yaml", CATALOG / "vogn.yaml")
    assert "- remove delta" in out and "- add monte_carlo" in out
    assert "candidate family: gaussian_diag (both)" in out
    out = compare_recipes(CATALOG / "gd.yaml", CATALOG / "newton.yaml")
    assert "change the candidate family gaussian_fixed_cov -> gaussian_full" in out
    out = compare_recipes(CATALOG / "adam.yaml", CATALOG / "adam.yaml")
    assert "nothing: the recipes derive the same update" in out
    assert "candidate structure: none (both)" in out


def test_compare_names_the_candidate_structure_sections():
    """Adam and SOAP share the family and most rules; what separates them is the eigenbasis section (and its
    refresh rule), which compare names next to the family."""
    out = compare_recipes(CATALOG / "adam.yaml", CATALOG / "soap.yaml")
    assert "candidate structure: none vs eigenbasis (diagonal in a Kronecker eigenbasis, d_out x d_in)" in out
    assert "- add kronecker_eigenbasis" in out
    out = compare_recipes(CATALOG / "svrg.yaml", CATALOG / "fed_admm_isotropic.yaml")
    assert ("candidate structure: posterior_correction (a stored posterior) vs federated (Bayesian ADMM sites)"
            in out)


def test_cli_explain_latex_and_compare(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "blr_derive", "explain", str(CATALOG / "ridge.yaml"), "--format", "latex",
                        "-o", str(tmp_path / "ridge.tex")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ridge.tex").read_text(encoding="utf-8").startswith("\\documentclass")
    r = subprocess.run([sys.executable, "-m", "blr_derive", "compare", str(CATALOG / "adam.yaml"),
                        str(CATALOG / "adamw.yaml")], capture_output=True, text=True)
    # adam.yaml applies either decay under its decoupled_weight_decay switch; adamw.yaml always decouples
    assert r.returncode == 0 and "- remove weight_decay {coefficient: weight_decay, when: not decoupled_weight_decay}" \
        in r.stdout and "- change decoupled_weight_decay {coefficient: weight_decay, when: decoupled_weight_decay} " \
        "-> decoupled_weight_decay {coefficient: weight_decay}" in r.stdout
