"""Update passes rewrite one view (gradient, Hessian, mean): where a derivation has several (free mixture components,
posterior correction's current and snapshot oracles) they are located errors instead of silently rewriting one."""
import pytest

from blr_derive import api as blr
from blr_derive.core.errors import SpecError


def test_a_pass_on_a_mixture_with_two_free_components_is_a_located_error():
    """squared_gradient_hessian used to replace the Hessian of the last component only (H1 stayed in s1's update)."""
    with pytest.raises(SpecError, match="one free component") as exc:
        blr.derive(family={"mixture": "gaussian_diag", "components": 2},
                   approximations=["delta", "separated_components", "squared_gradient_hessian"])
    assert exc.value.line is not None


def test_a_pass_on_a_mixture_with_one_free_component_applies():
    d = blr.derive(family={"mixture": "gaussian_diag", "components": 2, "fixed": {2: {"m": 0, "s": 10}}},
                   approximations=["delta", "separated_components", "squared_gradient_hessian"])
    assert "H" not in {str(s) for e in d.update.values() for s in e.free_symbols}
    assert {str(s) for s in d.update["s"].free_symbols} >= {"h_gsq", "s"}
    assert str(d.definitions["h_gsq"]) == "g**2"              # the squared-gradient estimate of the Hessian


@pytest.mark.parametrize("p", ["squared_gradient_hessian", {"weight_decay": {"coefficient": 0.1}},
                               {"minibatch": {"size": 10}}])
def test_a_pass_after_posterior_correction_is_a_located_error(p):
    """The passes used to rewrite the snapshot's oracle values (g_old, H_old): the last oracle call took the view."""
    with pytest.raises(SpecError, match="cannot follow 'posterior_correction'") as exc:
        blr.derive(family="gaussian_diag", approximations=["delta", "posterior_correction", p])
    assert exc.value.line is not None
