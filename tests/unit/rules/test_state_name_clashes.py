"""A state a recipe names (``state:`` of a momentum or running maximum, ``to:`` of a change of variable) must not
take a name that already stands for another quantity: a hyperparameter, the learning rate, an oracle's value, data,
or a name the derivation defines later.  Such recipes once generated code in which the state overwrote the
hyperparameter (``beta1 <- beta1**2 + ...``) or the gradient (momentum silently off), and a torch kernel with a
duplicate argument; each is now one located error, and an unclashing name still derives the same numbers."""
import numpy as np
import pytest

from blr_derive import api
from blr_derive.core.errors import SpecError

BASE = """
name: clash
family: gaussian_diag
loss: abstract
learning_rate: lr
hyperparameters:
  lr: 0.1
  beta1: 0.9
state_init: {{s: 1.0}}
approximations:
  - delta
  - {hess}
  - {rule}
"""


@pytest.mark.parametrize("rule, name, what", [
    ("ema_momentum: {rate: beta1, state: beta1}", "beta1", "hyperparameter 'beta1'"),
    ("heavy_ball_momentum: {momentum: beta1, state: lr}", "lr", "hyperparameter 'lr'"),
    ("ema_momentum: {rate: beta1, state: g}", "g", "the value of oracle 'grad'"),
    ("running_max: {param: s, state: g}", "g", "the value of oracle 'grad'"),
    ("centered: {param: s, rate: beta1, state: H}", "H", "the value of oracle 'hess'"),
    ("change_variable: {param: s, to: beta1, value: 2*beta1}", "beta1", "hyperparameter 'beta1'"),
    ("ema_momentum: {rate: beta1, state: s}", "s", "state 's'"),
])
def test_a_state_named_like_another_quantity_is_a_located_error(rule, name, what):
    hess = "square_root_scaling: {param: s}" if name == "H" else "squared_gradient_hessian"
    text = BASE.format(rule=rule, hess=hess).replace(f"  - {hess}\n  - {rule}", f"  - {rule}\n  - {hess}") \
        if name == "H" else BASE.format(rule=rule, hess=hess)
    with pytest.raises(SpecError) as e:
        api.derive(text)
    assert e.value.line == text.splitlines().index(f"  - {rule}") + 1
    assert f"state '{name}': the name is already {what}" in str(e.value)


def test_a_state_named_like_a_later_definition_is_a_located_error():
    """IVON's ``avg_gsq`` is defined by a rule after the momentum is added: the update IR's name check refuses it."""
    text = (api.catalog_dir() / "ivon.yaml").read_text().replace("state: momentum}", "state: avg_gsq}") \
        .replace("param: momentum,", "param: avg_gsq,")
    with pytest.raises(SpecError, match="the name 'avg_gsq' is also used by the derivation for another quantity; "
                                        "rename the state") as e:
        api.derive(text).compile("numpy")
    assert e.value.line == text.splitlines().index("approximations:") + 1


def test_an_unclashing_state_name_gives_the_momentum_step():
    """The same recipe with the momentum named ``buf``: m ← m − lr·u/s with u = β₁u + (1−β₁)g, by hand."""
    mod = api.derive(BASE.format(rule="ema_momentum: {rate: beta1, state: buf}", hess="squared_gradient_hessian")).compile("numpy")
    x = np.array([1.0, -2.0])
    st = mod.step(mod.init(m=x, s=np.ones(2), buf=np.array([0.5, 0.5])),
                  oracles={"grad": lambda v: 2 * v})
    u = 0.9 * 0.5 + 0.1 * 2 * x
    s_new = 1.0 + 0.1 * ((2 * x) ** 2 - 1.0)          # s ← (1−ρ)s + ρg² (Eq. 22 with H ≈ g²)
    np.testing.assert_allclose(st["buf"], u, rtol=1e-14)
    np.testing.assert_allclose(st["s"], s_new, rtol=1e-14)
    np.testing.assert_allclose(st["m"], x - 0.1 * u / s_new, rtol=1e-14)


def test_debias_of_a_state_nothing_reads_is_refused():
    """``debias`` of the mean: nothing else reads m, the correction would be silently dropped."""
    text = BASE.format(rule="debias: {param: m, rate: beta1}", hess="squared_gradient_hessian")
    with pytest.raises(SpecError, match="no other update reads 'm', so there is nothing to correct") as e:
        api.derive(text)
    assert e.value.line == text.splitlines().index("  - debias: {param: m, rate: beta1}") + 1
