"""Every rule in the registry (blr_derive/rules/base.py) is documented in the hand-written documentation (docs/, the
explanation pages, not only the generated docs/recipes.md) and cites where it comes from."""
from pathlib import Path

from blr_derive.rules.base import RULES

from conftest import ROOT  # noqa: E402


def test_every_registered_rule_is_named_in_the_docs():
    pages = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "recipes.md"]   # recipes.md is generated
    text = "".join(p.read_text(encoding="utf-8") for p in pages) + (ROOT / "catalog" / "README.md").read_text()
    missing = sorted(n for n in RULES if f"`{n}" not in text)
    assert not missing, f"rules without documentation in docs/ (hand-written pages): {missing}"


def test_every_rule_cites_an_equation_or_a_source():
    assert all(r.equation.strip() and r.summary.strip() for r in RULES.values())


def test_every_approximation_is_named_by_a_catalog_recipe():
    """So that the catalog's golden artifacts and peer tests exercise every rule a recipe can name."""
    import re
    text = "\n".join(p.read_text() for p in (ROOT / "catalog").glob("*.yaml"))
    unused = sorted(n for n, r in RULES.items() if r.kind != "identity" and not re.search(rf"\b{n}\b", text))
    assert not unused, f"approximations no catalog recipe names: {unused}"
