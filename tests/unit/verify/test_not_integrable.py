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


BETA_MC = """\
name: beta_mean_conc
variable: theta
support: unit_interval
parameters:
  m: {domain: unit_interval, description: mean}
  c: {domain: positive, description: concentration}
sufficient_statistics: [log(theta), log(1 - theta)]
natural_parameters: [m*c - 1, (1 - m)*c - 1]
"""
COIN = """\
name: coin
family: beta_mc.yaml
loss:
  expression: {loss}
  data:
    heads: {{description: heads}}
    tails: {{description: tails}}
approximations: [{approx}]
hyperparameters:
  rho: {{default: 1.0}}
"""


def test_mass_within_rounding_of_a_finite_end_is_integrated_in_its_distance():
    """Beta(0.084, 0.071) keeps ~8 % of its mass within 1e-16 of 1, where θ itself cannot be told from 1: _quad with
    each end's integrand written in s = −log(distance) gives E[log(1 − θ)] to 1e-12 of the digamma closed form,
    where scipy's quad in θ is off by 1.5e-7 (and the objective's row at such a state by 2.5e-5); a pole q cannot integrate (1/θ² under Beta(2, 2)) is still
    not integrable."""
    from scipy import integrate, special

    def beta(a, b):
        logB = special.betaln(a, b)
        q = lambda t: math.exp((a - 1) * math.log(t) + (b - 1) * math.log1p(-t) - logB) if 0 < t < 1 else 0.0  # noqa: E731
        # θ = e^(−s) and θ = 1 − e^(−s): the density times the Jacobian e^(−s), as one exponential
        at0 = lambda s, f: math.exp(-a * s + (b - 1) * math.log1p(-math.exp(-s)) - logB) * f(math.exp(-s), s)  # noqa: E731
        at1 = lambda s, f: math.exp((a - 1) * math.log1p(-math.exp(-s)) - b * s - logB) * f(1 - math.exp(-s), s)  # noqa: E731
        return q, at0, at1

    a, b = 0.084, 0.071
    q, at0, at1 = beta(a, b)
    want = special.digamma(b) - special.digamma(a + b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _quad(lambda t: q(t) * math.log1p(-t), 0.0, 1.0,
                    {0.0: lambda s: at0(s, lambda t, s: math.log1p(-t)), 1.0: lambda s: at1(s, lambda t, s: -s)})
        plain = integrate.quad(lambda t: q(t) * math.log1p(-t), 0.0, 1.0, limit=400)[0]
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
        assert abs(plain - want) > 1e-7 * abs(want)        # 1.5e-7: more than check's tolerance for the row
        q, at0, at1 = beta(2.0, 2.0)
        with pytest.raises(NotIntegrable, match="does not converge at 0"):
            _quad(lambda t: q(t) / t ** 2, 0.0, 1.0, {0.0: lambda s: at0(s, lambda t, s: np.exp(2 * s)),
                                                       1.0: lambda s: at1(s, lambda t, s: 1 / t ** 2)})


def test_check_of_a_beta_with_a_small_concentration(tmp_path, capsys):
    """A user's Beta by mean and concentration with the conjugate coin loss: check's objective row passes (its
    random states reach concentrations ~0.15, where the quadrature in θ was off by 2e-5 and the row failed)."""
    (tmp_path / "beta_mc.yaml").write_text(BETA_MC)
    good = tmp_path / "good.yaml"
    good.write_text(COIN.format(loss="-heads*log(theta) - tails*log(1 - theta)", approx="exact"))
    assert cli.main(["check", str(good)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.lstrip().startswith("objective vs quadrature"))
    assert "pass" in row and float(row.split()[3]) < 1e-12, row


LOGIT_BETA = """\
name: logit_beta
variable: theta
support: real
parameters:
  a: {domain: positive, description: first shape}
  b: {domain: positive, description: second shape}
sufficient_statistics: [theta, log(1 + exp(theta))]
natural_parameters: [a, -(a + b)]
log_partition: lgamma(lambda1) + lgamma(-lambda2 - lambda1) - lgamma(-lambda2)
"""


def test_a_softplus_statistic_is_integrated_without_overflow(tmp_path, capsys):
    """A logit-beta (log of a beta-prime variable) with a loss linear in its statistics, 3 log(1 + e^θ) − 2θ: the
    integrand q·(ℓ + log q) written as it reads is inf − inf = NaN from θ ≈ 710 (e^θ overflows), and the objective's
    row failed with 'not integrable'; log(1 + e^θ) is now evaluated as logaddexp(0, θ) and the row passes."""
    (tmp_path / "logit_beta.yaml").write_text(LOGIT_BETA)
    good = tmp_path / "good.yaml"
    good.write_text("name: lb\nfamily: logit_beta.yaml\nloss:\n  expression: 3*log(1 + exp(theta)) - 2*theta\n"
                    "approximations: [exact]\n")
    assert cli.main(["check", str(good)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.lstrip().startswith("objective vs quadrature"))
    assert "pass" in row and float(row.split()[3]) < 1e-12, row
