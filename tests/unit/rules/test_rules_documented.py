"""Every rule in the registry (blr_derive/rules/base.py) is documented in the README and cites where it comes from."""
from pathlib import Path

from blr_derive.rules.base import RULES

from conftest import ROOT  # noqa: E402


def test_every_registered_rule_is_named_in_the_readme():
    text = (ROOT / "README.md").read_text() + (ROOT / "catalog" / "README.md").read_text()
    missing = sorted(n for n in RULES if f"`{n}" not in text)
    assert not missing, f"rules without documentation in README.md: {missing}"


def test_every_rule_cites_an_equation_or_a_source():
    assert all(r.equation.strip() and r.summary.strip() for r in RULES.values())


def test_every_approximation_is_named_by_a_catalog_recipe():
    """So that the catalog's golden artifacts and peer tests exercise every rule a recipe can name."""
    import re
    text = "\n".join(p.read_text() for p in (ROOT / "catalog").glob("*.yaml"))
    unused = sorted(n for n, r in RULES.items() if r.kind != "identity" and not re.search(rf"\b{n}\b", text))
    assert not unused, f"approximations no catalog recipe names: {unused}"
