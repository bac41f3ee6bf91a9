"""Bad arguments of the newer approximations are one-line located errors (no traceback, no silent acceptance)."""
import pytest

from blr_derive.derive.driver import derive
from blr_derive.core.errors import SpecError
from blr_derive.candidates.load import load_recipe

BASE = """name: bad
family: {family}
loss: {loss}
hyperparameters:
  rho: {{default: 0.1}}
approximations:
{approximations}
"""
DATA_LOSS = "{expression: 'sum(exp(X*theta))', data: {X: {shape: [N, P]}}}"
SPIKE = "{mixture: gaussian_diag, components: 2, fixed: {2: {m: 0, s: 1}}}"


@pytest.mark.parametrize("family, loss, approximations, line, message", [
    ("gaussian_full", DATA_LOSS, "  - gauss_hermite: {nodes: 0}", 7, "nodes must be a positive integer"),
    ("gaussian_full", DATA_LOSS, "  - gauss_hermite: {nodes: 2.5}", 7, "nodes must be a positive integer"),
    (SPIKE, "abstract", "  - delta\n  - dropout_masks: {samples: 0}", 8, "samples must be a positive integer"),
    (SPIKE, "abstract", "  - delta\n  - dropout_masks: {samples: -2}", 8, "samples must be a positive integer"),
    ("gaussian_diag", "abstract", "  - delta\n  - posterior_correction: {x: 1}", 8, "takes no arguments"),
    ("gaussian_diag", "abstract", "  - monte_carlo: {samples: 0}", 7, "samples must be a positive integer"),
    ("bernoulli_logit", "abstract", "  - concrete_relaxation: {temperature: 0}", 7, "temperature must be positive"),
    ("bernoulli_logit", "abstract", "  - concrete_relaxation: {temperature: -1.5}", 7, "temperature must be positive"),
    ("bernoulli_logit", "abstract", "  - concrete_relaxation: {temperature: 1, samples: 1.5}", 7,
     "samples must be a positive integer"),
], ids=["nodes0", "nodes_float", "samples0", "samples_negative", "poco_args", "mc_samples0", "temperature0",
        "temperature_negative", "relaxation_samples_float"])
def test_bad_argument_is_a_located_error(tmp_path, family, loss, approximations, line, message):
    p = tmp_path / "bad.yaml"
    p.write_text(BASE.format(family=family, loss=loss, approximations=approximations))
    with pytest.raises(SpecError, match=message) as exc:
        derive(load_recipe(p))
    assert (exc.value.file, exc.value.line) == (str(p), line)


@pytest.mark.parametrize("family, loss, approximations, line, message", [
    ("gaussian_diag", "abstract", "  - delta: {bogus: 1}", 7,
     "approximation 'delta' takes no arguments, got bogus; write it as '- delta'"),
    ("gaussian_diag", "abstract", "  - delta\n  - unit_learning_rate: {rho: 1}", 8,
     "approximation 'unit_learning_rate' takes no arguments, got rho; write it as '- unit_learning_rate'"),
    ("gamma", "{expression: theta}", "  - exact: {samples: 4}\n  - no_entropy", 7,
     "approximation 'exact' takes no arguments, got samples; write it as '- exact'"),
], ids=["delta", "unit_learning_rate", "exact"])
def test_an_argument_of_a_rule_that_reads_none_is_a_located_error(tmp_path, family, loss, approximations, line,
                                                                    message):
    """``delta: {bogus: 1}`` derived as if the argument were not there (docs/recipes.md: an unknown argument is an
    error), while ``weight_decay: {bogus: 1}`` was refused."""
    p = tmp_path / "bad.yaml"
    p.write_text(BASE.format(family=family, loss=loss, approximations=approximations))
    with pytest.raises(SpecError) as exc:
        derive(load_recipe(p))
    assert (exc.value.file, exc.value.line, exc.value.message) == (str(p), line, message)


def test_rules_that_take_no_arguments_are_those_that_read_none():
    """``Rule.takes_arguments`` (what refuse_arguments reads) against the arguments each rule's source reads (the
    scan behind docs/recipes.md); posterior_correction reads its section of the recipe, not arguments."""
    from blr_derive.report.rule_args import rule_arguments
    from blr_derive.rules.base import RULES, recipe_rule_kinds
    argless = {n for n in recipe_rule_kinds() if not RULES[n].takes_arguments}
    assert argless == {n for n in recipe_rule_kinds() if not rule_arguments(RULES[n])} - {"posterior_correction"}
    assert "delta" in argless and "weight_decay" not in argless


def test_a_tuple_element_name_listed_twice_is_a_located_error(tmp_path):
    """``names: [beta1, beta1]`` bound both elements to one name: the generated code read ``beta1, beta1 = betas``
    and kept 0.999 for the first moment's rate."""
    p = tmp_path / "bad.yaml"
    p.write_text("name: bad\nfamily: gaussian_diag\nloss: abstract\nhyperparameters:\n  rho: 0.1\n"
                 "  betas: {default: [0.9, 0.999], names: [beta1, beta1]}\napproximations: [delta]\n")
    with pytest.raises(SpecError) as exc:
        load_recipe(p)
    assert (exc.value.line, exc.value.message) == (
        6, "hyperparameter 'betas': element name 'beta1' is listed twice; give each element a new name")
    p.write_text(p.read_text().replace("names: [beta1, beta1]", "names: [rho, beta2]"))
    with pytest.raises(SpecError) as exc:
        load_recipe(p)
    assert (exc.value.line, exc.value.message) == (
        6, "hyperparameter 'betas': element name 'rho' is already a name of the recipe or its family; give each "
           "element a new name")
