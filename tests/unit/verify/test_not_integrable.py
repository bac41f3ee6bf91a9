"""check's quadrature references (blr_derive/verify/recipe.py ``_quad``) tell a loss that is not integrable under q
(a pole where q > 0, a tail heavier than q's) from a hard but convergent integral: the objective's row fails with
the reason instead of a comparison with a meaningless number."""
import math
import warnings

import numpy as np
import pytest

from blr_derive import cli
from blr_derive.verify.recipe import NotIntegrable, _quad

HALF_NORMAL = """\
name: half_normal
variable: theta
support: positive
parameters:
  s: {domain: positive, description: precision}
sufficient_statistics: [theta**2]
base_measure: sqrt(2/pi)
natural_parameters: [-s/2]
sampler: ndtri((1 + u)/2)/sqrt(s)
"""
RECIPE = """\
name: half_normal_loss
family: half_normal.yaml
loss:
  expression: {loss}
approximations: [quadrature]
hyperparameters:
  rho: {{default: 0.1}}
"""


def half_normal(s):
    return lambda t: math.sqrt(2 * s / math.pi) * math.exp(-s * t * t / 2)


def test_convergent_integrals_keep_their_value():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = half_normal(2.0)
        assert _quad(lambda t: q(t) * t * t, 0.0, np.inf) == pytest.approx(0.5, rel=1e-12)            # E[θ²] = 1/s
        # 1/√θ has an integrable pole: E = √(2s/π)·Γ(1/4)/(2(s/2)^(1/4))  (∫ θ^(a-1)e^(-cθ²) = Γ(a/2)/(2c^(a/2)))
        want = math.sqrt(2 * 2.0 / math.pi) * math.gamma(0.25) / (2 * (2.0 / 2) ** 0.25)
        assert _quad(lambda t: q(t) / math.sqrt(t), 0.0, np.inf) == pytest.approx(want, rel=1e-9)
        assert _quad(lambda t: math.exp(-abs(t)) / 2 * t * t, -np.inf, np.inf) == pytest.approx(2.0, rel=1e-12)


def test_a_pole_and_a_heavy_tail_are_not_integrable():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = half_normal(1.0)
        with pytest.raises(NotIntegrable, match="does not converge at 0"):
            _quad(lambda t: q(t) * (t * t + 1 / t), 0.0, np.inf)
        # t² under a Cauchy density: scipy's quad returns -1.64 with an error estimate of 1e-11 over (-∞, ∞)
        with pytest.raises(NotIntegrable, match="does not converge at -inf"):
            _quad(lambda t: t * t / (math.pi * (1 + t * t)), -np.inf, np.inf)


def test_check_names_a_loss_that_q_cannot_integrate(tmp_path, capsys):
    (tmp_path / "half_normal.yaml").write_text(HALF_NORMAL)
    bad, good = tmp_path / "bad.yaml", tmp_path / "good.yaml"
    bad.write_text(RECIPE.format(loss="theta**2 + 1/theta"))
    good.write_text(RECIPE.format(loss="theta**2 + 1/sqrt(theta)"))
    assert cli.main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.lstrip().startswith("objective (quadrature)"))
    assert "inf" in row and "FAIL" in row and "not integrable under q" in row and "does not converge at 0" in row
    assert cli.main(["check", str(good)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.lstrip().startswith("objective (quadrature)"))
    assert "pass" in row
