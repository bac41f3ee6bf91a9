"""Principle 2: every registered rule has its own numeric unit test.

A rule is covered by ``tests/unit/rules/test_rule_<name>.py``, or by a module of this folder that declares it in a
module-level tuple ``RULES_CHECKED = ("name", ...)`` (for rules that are only meaningful together, such as Bonnet's
and Price's theorems).  The tuple is read from the source (not imported), so a name that no longer is a rule is an
error too.
"""
import ast

from blr_derive.rules.base import RULES
from conftest import ROOT

HERE = ROOT / "tests" / "unit" / "rules"


def declared():
    found = {}
    for path in sorted(HERE.glob("test_*.py")):
        stem = path.stem
        if stem.startswith("test_rule_"):
            found.setdefault(stem[len("test_rule_"):], []).append(path.name)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "RULES_CHECKED" for t in node.targets):
                for name in ast.literal_eval(node.value):
                    found.setdefault(name, []).append(path.name)
    return found


def test_every_registered_rule_has_a_numeric_unit_test():
    missing = sorted(set(RULES) - set(declared()))
    assert not missing, f"rules without a unit test module in tests/unit/rules/: {missing}"


def test_every_tested_name_is_a_registered_rule():
    stale = {name: files for name, files in declared().items() if name not in RULES}
    assert not stale, f"tests name rules that do not exist: {stale}"
