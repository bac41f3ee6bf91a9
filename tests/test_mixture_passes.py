"""Update passes on mixture candidates rewrite one view (gradient, Hessian, mean): they need one free component."""
import pytest

from blr_derive import api as blr
from blr_derive.errors import SpecError


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
    assert "g" in {str(s) for s in d.update["s"].free_symbols}
