"""docs/recipes.md is what blr_derive.report.recipe_docs writes: every recipe and family key described, every
rule of the registry listed with the arguments its source reads (issue 19)."""
import re

from conftest import ROOT

from blr_derive.report import recipe_docs
from blr_derive.report.rule_args import rule_arguments
from blr_derive.rules.base import RULES
from blr_derive.spec.components import COMPONENTS_KEYS
from blr_derive.spec.product import BLOCK_KEYS, FACTOR_KEYS, FACTORIZED_KEYS, PLATE_KEYS
from blr_derive.spec.recipe import LOSS_KEYS, RECIPE_KEYS
from blr_derive.spec.vocabulary import FAMILY_KEYS, PARAM_KEYS

DOC = ROOT / "docs" / "recipes.md"


def test_committed_docs_are_what_the_generator_writes():
    assert DOC.read_text(encoding="utf-8") == recipe_docs.recipe_docs(), \
        "regenerate: python -m blr_derive.report.recipe_docs > docs/recipes.md"


def test_every_key_has_a_description():
    assert recipe_docs.missing_descriptions() == {}
    described = {title: {k for k, _, _ in doc} for title, _, doc, _ in recipe_docs.SECTIONS}
    assert described["Recipe keys"] == RECIPE_KEYS and described["Family file keys"] == FAMILY_KEYS
    assert described["Loss"] == LOSS_KEYS and described["Family parameters"] == PARAM_KEYS
    # the factorized recipes' keys (issue 40: blocks, factors, plate, components, dimension were undocumented)
    assert described["Factorized recipes"] == FACTORIZED_KEYS and described["Blocks"] == BLOCK_KEYS
    assert described["Factors"] == FACTOR_KEYS and described["Plate"] == PLATE_KEYS
    assert described["Components axis"] == COMPONENTS_KEYS
    text = DOC.read_text(encoding="utf-8")
    for key in ("blocks", "factors", "plate", "components", "dimension", "local", "minibatch", "messages"):
        assert f"| `{key}` |" in text.split("## Factorized recipes", 1)[1].split("## Family file keys", 1)[0], key


def test_a_key_without_a_description_fails(monkeypatch):
    monkeypatch.setattr(recipe_docs, "SECTIONS", [("Recipe keys", RECIPE_KEYS | {"brand_new"},
                                                   recipe_docs.RECIPE_DOC, "")])
    assert recipe_docs.missing_descriptions() == {"Recipe keys": ["brand_new"]}
    try:
        recipe_docs.recipe_docs()
    except ValueError as exc:
        assert "brand_new" in str(exc)
    else:
        raise AssertionError("an undescribed key must be an error")


def test_every_rule_and_key_appears():
    text = DOC.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]*\| (.*) \|$", text, re.M))
    for name in RULES:
        assert f"| `{name}` |" in text, name
    for key in RECIPE_KEYS | LOSS_KEYS | FAMILY_KEYS | PARAM_KEYS:
        assert f"| `{key}` |" in text, key
    assert rows                                    # the tables parse


def _args(name):
    return {a.key: (a.type_text(), a.default_text()) for a in rule_arguments(RULES[name])}


def test_arguments_follow_the_source():
    assert _args("ema_momentum") == {"rate": ("expression of hyperparameters", "required"),
                                     "state": ("name of the state it adds", "u")}
    hb = _args("heavy_ball_momentum")
    assert list(hb) == ["momentum", "dampening", "nesterov", "when", "state"]
    assert hb["nesterov"] == ("condition (a comparison or a boolean hyperparameter)", "false")
    assert hb["when"][1] == "optional" and hb["dampening"][1] == "0"
    assert _args("monte_carlo") == {"samples": ("positive integer or int hyperparameter", "1")}
    assert _args("quadrature")["nodes"][1] == "65"
    assert _args("gauss_hermite") == {"nodes": ("positive integer or int hyperparameter", "required")}
    assert _args("delta") == {} and _args("exact") == {} and _args("straight_through") == {}   # guarded reads
    assert _args("concrete_relaxation")["temperature"] == ("positive expression of hyperparameters", "required")
    assert _args("running_max")["state"][1] == "{param}_max"
    assert _args("fitness_shaping")["utilities"] == ("one of `nes`, `centered_ranks`", "nes")
    assert list(_args("separate_learning_rates")) == ["<parameter>"]
    assert _args("change_variable")["value"] == ("expression", "required")
    assert _args("nesterov_lookahead")["schedule"][1] == "optional"


def test_catalog_arguments_are_documented():
    """Every argument a catalog recipe passes is one the docs list for that rule (a fixed-key rule)."""
    import yaml
    documented = {name: set(_args(name)) for name in RULES}
    for path in sorted((ROOT / "catalog").glob("*.yaml")):
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        entries = list(spec.get("approximations") or [])
        for block in (spec.get("blocks") or {}).values():
            entries += list(block.get("approximations") or []) if isinstance(block, dict) else []
        for entry in entries:
            if isinstance(entry, dict):
                (name, args), = entry.items()
                keys = documented[name]
                if any(k.startswith("<") for k in keys):
                    continue
                assert set(args or {}) <= keys, (path.name, name, set(args) - keys)
