"""The numerical lowering of the printers (log-sum-exps, sums of exponentials normalized by the largest exponent,
expm1: codegen/expsums.py, codegen/cancel.py) is applied to a program's expressions before common-subexpression
elimination (blr_derive/ir/build.py ``_program``), so that CSE does not name the pieces of a pattern apart where no
printer sees it whole.

The case: a family of one statistic on (0, 1), q(θ) ∝ exp(−rθ) (a truncated exponential, r of either sign; A is
derived, log((e^λ − 1)/λ), with its Taylor guard near λ = 0), and the non-conjugate loss cθ + (θ − 0.3)² under
`exact` (E_q[θ²] from the log-partition, App. B of Khan & Rue 2023).  The BLR step (Eq. 6) is
λ ← (1 − ρ)λ − ρ(c − 0.6 + Cov_q(θ², θ)/Var_q(θ)); the reference integrates the moments with mpmath at 40 digits.
Before the lowering ran first, the generated step was NaN at r = 700 and 800 (exp(2r) and exp(3r) overflowed in
separate temporaries) and off by 1e-8 at r = 0.13 and 1e-9 at r = −0.2 (cancellation just outside the Taylor
guard); now it is within 1e-11 at every r in [−800, 800], in the numpy and the jax targets."""
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

from blr_derive import api

FAMILY = """\
name: trunc_exp
description: exponential tilt on (0, 1), density proportional to exp(-r theta)
variable: theta
support: unit_interval
parameters:
  r: {domain: real, description: rate (either sign)}
sufficient_statistics: [theta]
natural_parameters: [-r]
"""

RECIPE = """\
name: trexp_rec
family: trexp.yaml
loss:
  expression: c*theta + (theta - 0.3)**2
  data:
    c: {description: slope}
approximations: [exact]
hyperparameters:
  rho: {default: 0.5}
"""

RS = [-800.0, -300.0, -5.0, -0.2, -1e-3, 0.0, 0.13, 3.0, 300.0, 700.0, 800.0]
C, RHO = 0.7, 0.5


def reference(r: float) -> float:
    """The new r of one exact BLR step, from the moments of q by 40-digit quadrature (local precision: a global
    one would be left to the other test modules of the worker)."""
    with mpmath.workdps(40):
        lam = -mpmath.mpf(r)
        m = [mpmath.quad(lambda t, k=k: t ** k * mpmath.exp(lam * t), [0, 1]) for k in range(4)]
        m1, m2, m3 = m[1] / m[0], m[2] / m[0], m[3] / m[0]
        grad = C - mpmath.mpf("0.6") + (m3 - m2 * m1) / (m2 - m1 ** 2)
        return float(-((1 - RHO) * lam - RHO * grad))


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    d = tmp_path_factory.mktemp("trexp")
    (d / "trexp.yaml").write_text(FAMILY)
    (d / "trexp_rec.yaml").write_text(RECIPE)
    out = {}
    for target in ("numpy", "jax"):
        ns: dict = {}
        exec(compile(api.generate(d / "trexp_rec.yaml", target), f"<trexp {target}>", "exec"), ns)
        out[target] = ns
    return out


def test_numpy_step_is_finite_and_accurate_at_every_rate(modules):
    M = modules["numpy"]
    for r in RS:
        got = M["step"](M["init"](r=np.array([r])), data={"c": C}, rho=RHO)["r"][0]
        want = reference(r)
        assert np.isfinite(got), r
        assert abs(got - want) <= 1e-11 * max(1.0, abs(want)), (r, got, want)


def test_jax_step_is_finite_and_accurate_at_every_rate(modules, x64):
    M = modules["jax"]
    for r in RS:
        got = float(M["step"](M["init"](r=jnp.array([r])), data={"c": jnp.array(C)}, rho=RHO)["r"][0])
        want = reference(r)
        assert abs(got - want) <= 1e-11 * max(1.0, abs(want)), (r, got, want)
