"""A recipe that names an expectation rule for the other kind of loss gets one located line that says which kind
the rule takes and which rules take its loss (read from the rule registry): a user with an explicit loss and a
family whose sampler is not an inverse CDF went round in circles ('exact' said "use a sampling rule
('score_function')", 'score_function' said "add 'exact'")."""
from __future__ import annotations

import contextlib
import io

from blr_derive import cli
from blr_derive.rules import RULES

FAMILY = """\
name: maxwell_scale
description: Maxwell-Boltzmann with scale a (T = theta^2, h = theta^2), not in the library
variable: theta
support: positive
parameters:
  a: {domain: positive, description: scale}
sufficient_statistics:
  - theta**2
base_measure: theta**2
natural_parameters:
  - -1/(2*a**2)
sampler: a*sqrt(z**2 + z2**2 + z3**2)
"""


def _run(tmp_path, loss, approx):
    (tmp_path / "maxwell.yaml").write_text(FAMILY, encoding="utf-8")
    (tmp_path / "rec.yaml").write_text(f"name: fit\nfamily: maxwell.yaml\nloss: {loss}\nlearning_rate: rho\n"
                                       f"hyperparameters: {{rho: 0.1}}\napproximations: [{approx}]\n",
                                       encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main([str(tmp_path / "rec.yaml"), "--target", "numpy", "-o", str(tmp_path / "out.py")])
    return rc, err.getvalue()


def _takes(kind):
    return sorted(n for n, r in RULES.items() if r.kind == "expectation" and kind in r.losses)


def test_a_sampling_rule_with_an_explicit_loss_names_the_rules_that_take_it(tmp_path):
    rc, msg = _run(tmp_path, "{expression: theta + theta**2/2 - 2*log(theta)}", "score_function")
    assert rc == 2 and msg.count("\n") == 1 and not (tmp_path / "out.py").exists()
    assert "rec.yaml:6: approximation 'score_function' takes an abstract loss (`loss: abstract`" in msg
    assert msg.rstrip().endswith("with this loss name one of: " + ", ".join(_takes("explicit")))
    assert {"exact", "quadrature", "delta"} <= set(_takes("explicit")) and "score_function" not in _takes("explicit")


def test_the_rule_it_names_derives_with_that_loss(tmp_path):
    """Following the message: the abstract loss with the sampling rule derives (exit 0, a module)."""
    rc, msg = _run(tmp_path, "abstract", "score_function")
    assert rc == 0, msg
    assert "def step" in (tmp_path / "out.py").read_text(encoding="utf-8")
