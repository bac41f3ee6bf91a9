"""Views (``rules/base.py`` :class:`Views`): what pass and convention rules read and move — the gradient, the
Hessian, each state's way into the update, other oracles' values — as named fields, not string keys (issue 38).

Checked: after ``delta``, ``weight_decay`` and ``hessian_damping`` the record's views are the symbols those rules
defined, with the values Eq. 34 and damping give (δm added to the gradient, δ then γ to the Hessian); a name a
recipe gives that is no view is refused listing the states and oracles only (not the internal damped-Hessian view);
the lookup order of the class itself (grad/hess, then states, then other oracles) and ``rebind``."""
import pytest
import sympy as sp
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError
from blr_derive.rules.base import Views


def text(approximations):
    return yaml.safe_dump({"name": "views_test", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": {"lr": 0.1, "gamma": 0.01, "wd": 0.001, "beta": 0.1},
                           "approximations": approximations}, sort_keys=False)


def test_views_after_weight_decay_and_damping_are_the_rules_definitions():
    D = api.derive(text(["delta", {"weight_decay": {"coefficient": "wd"}},
                         {"hessian_damping": {"value": "gamma"}}])).record
    defs = D.definitions
    g, H, m, wd, gamma = (sp.Symbol(n, real=True) for n in ("g", "H", "m", "wd", "gamma"))
    assert str(D.views.grad) == "g_wd" and str(D.views.hess) == "h_damped"
    assert D.views.damped_hess == D.views.hess               # an estimate replacing it now would drop γ
    # the gradient view's value: g + δm where δ ≠ 0 (Eq. 34); the Hessian's: H + δ + γ
    assert sp.simplify(defs["g_wd"].xreplace({wd: 0.5}) - (g + 0.5 * m)) == 0
    assert sp.simplify(defs["h_damped"].xreplace({sp.Symbol("h_wd", real=True): defs["h_wd"]}) - (H + wd + gamma)) == 0
    assert {k: str(v) for k, v in D.views.state.items()} == {"m": "m_new", "s": "s_new"}
    assert D.views.oracles == {} and D.views.covariance_factor is None


def test_an_unknown_view_lists_the_states_not_the_internal_views():
    with pytest.raises(SpecError, match=r"'q' is not a parameter or state of this update \(known: m, s\)$"):
        api.derive(text(["delta", {"hessian_damping": {"value": "gamma"}}, {"debias": {"param": "q", "rate": "beta"}}]))


def test_lookup_order_and_rebind():
    a, b, c, d = sp.symbols("a b c d")
    v = Views()
    v.set_oracle("grad", a)
    v.set_oracle("loss", b)
    v.set("m", c)
    assert (v.grad, v.of("grad"), v.of("loss"), v.of("m"), v.of("nothing")) == (a, a, b, c, None)
    v.set("loss", d)                      # an existing oracle view moves; a state of the same name would shadow it
    assert v.oracles == {"loss": d} and v.state == {"m": c}
    v.state["loss"] = c
    assert v.of("loss") == c and v.names() == ["loss", "m"]
    v.set("hess", b)
    v.damped_hess = b
    v.rebind(b, a)
    assert (v.hess, v.damped_hess, v.oracles["loss"]) == (a, a, d)
