"""The worked example of ARCHITECTURE.md (adding a rule is one module) runs as written and does what it says."""
import re

import numpy as np

from blr_derive import api
from blr_derive.rules.base import RULES
from conftest import ROOT

RECIPE = """
name: unscaled_sgd
family: gaussian_fixed_cov
loss: abstract
hyperparameters: {c: 4.0}
approximations:
  - delta
{extra}
"""


def test_the_documented_rule_module_registers_and_rewrites_the_update():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(# blr_derive/rules/unscale_gradient\.py.*?)```", text, re.S).group(1)
    try:
        exec(compile(code, "ARCHITECTURE.md", "exec"), {"__name__": "unscale_gradient_example"})
        assert RULES["unscale_gradient"].kind == "pass"
        with_rule = api.derive(RECIPE.replace("{extra}", "  - unscale_gradient: {factor: c}")).compile("numpy")
        without = api.derive(RECIPE.replace("{extra}", "")).compile("numpy")
    finally:
        RULES.pop("unscale_gradient", None)
    rng = np.random.default_rng(0)
    m = rng.normal(size=5)
    g = lambda x: 3.0 * x - 1.0                   # the loss's gradient
    a = with_rule.step(without.init(m=m), oracles={"grad": lambda x: 4.0 * g(x)}, rho=0.1, c=4.0)
    b = without.step(without.init(m=m), oracles={"grad": g}, rho=0.1)
    np.testing.assert_allclose(a["m"], b["m"], rtol=0, atol=1e-15)    # one division by 4: exact up to rounding
    np.testing.assert_allclose(b["m"], m - 0.1 * g(m), rtol=0, atol=1e-15)
