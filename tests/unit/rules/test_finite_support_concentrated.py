"""The exact rule over a finite support without a closed-form μ → ordinary map writes ∇_μE_q[ℓ] = F(λ)⁻¹Cov_q(T, ℓ)
(Eq. 4) by Cramer's rule with Cauchy–Binet sums over (n + 1)-point subsets of the support, no mean subtracted
(blr_derive/rules/finite_support.py ``_cauchy_binet_solve``), so that a q concentrated on one point keeps the step's
precision.

The case, written from docs/family-format.md: a discretized Gaussian on the lattice {0, …, 6}, T = (k, k²),
λ = (a, −b), and the non-conjugate loss √(k + 1) + 0.05(k − 3)⁴.  The reference is the BLR step (Eq. 6)
λ ← (1 − ρ)λ − ρF⁻¹Cov_q(T, ℓ) with the sums over the support in 250-digit arithmetic (mpmath).  With the explicit
inverse of F, the step was off by 59 % at a = 0.001, b = 30 (q_1/q_0 = 1e-13, q_2/q_0 = 1e-52: F ≈ q_1(1, 1)(1, 1)ᵀ,
whose determinant F₁₁F₂₂ − F₁₂² is rounding noise, with no error raised), raised "not a number" at a = −20, −200,
b = 10, and was off by 1e-7 at a = 200, b = 10; now every state is within 1e-13 of it."""
import mpmath
import numpy as np
import pytest

from blr_derive import api

FAMILY = """\
name: disc_gauss
description: discretized Gaussian on 0..6
variable: k
support: integers 0..6
parameters:
  a: {domain: real, description: linear coefficient}
  b: {domain: positive, description: quadratic precision}
sufficient_statistics: [k, k**2]
natural_parameters: [a, -b]
"""

RECIPE = """\
name: lattice_rec
family: lattice.yaml
loss:
  expression: sqrt(k + 1) + 0.05*(k - 3)**4
approximations: [exact]
hyperparameters:
  rho: {default: 0.3}
"""

RHO = 0.3
STATES = [(0.0, 0.1), (3.0, 0.5), (-5.0, 1e-3), (0.5, 1e-6), (24.0, 2.0), (60.0, 5.0), (-20.0, 10.0),
          (-200.0, 10.0), (0.001, 30.0)]


def reference(a: float, b: float) -> tuple[float, float]:
    with mpmath.workdps(250):           # local: the global precision is the other tests' (a global 30 left here
        return _reference(a, b)         # made test_rule_concrete_relaxation's 50-digit reference fail under xdist)


def _reference(a: float, b: float) -> tuple[float, float]:
    ks = [mpmath.mpf(k) for k in range(7)]
    w = [mpmath.exp(mpmath.mpf(a) * k - mpmath.mpf(b) * k * k) for k in ks]
    p = [x / sum(w) for x in w]
    T = [mpmath.matrix([k, k * k]) for k in ks]
    mu = sum((pi * t for pi, t in zip(p, T)), mpmath.matrix([0, 0]))
    F = mpmath.zeros(2, 2)
    for pi, t in zip(p, T):
        F += pi * (t - mu) * (t - mu).T
    ell = [mpmath.sqrt(k + 1) + mpmath.mpf("0.05") * (k - 3) ** 4 for k in ks]
    mean = sum(pi * li for pi, li in zip(p, ell))
    cov = sum((pi * (li - mean) * (t - mu) for pi, li, t in zip(p, ell, T)), mpmath.matrix([0, 0]))
    g = mpmath.lu_solve(F, cov)
    new = (1 - RHO) * mpmath.matrix([a, -b]) - RHO * g
    return float(new[0]), float(-new[1])


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    d = tmp_path_factory.mktemp("lattice")
    (d / "lattice.yaml").write_text(FAMILY)
    (d / "lattice_rec.yaml").write_text(RECIPE)
    ns: dict = {}
    exec(compile(api.generate(d / "lattice_rec.yaml", "numpy"), "<lattice_rec>", "exec"), ns)
    return ns


@pytest.mark.parametrize("a, b", STATES)
def test_step_equals_the_250_digit_reference(module, a, b):
    out = module["step"](module["init"](a=np.array([a]), b=np.array([b])), rho=RHO)
    want_a, want_b = reference(a, b)
    assert abs(out["a"][0] - want_a) <= 1e-13 * max(1.0, abs(want_a))
    assert abs(out["b"][0] - want_b) <= 1e-13 * max(1.0, abs(want_b))


BLOGIT = """\
name: blogit
family: bernoulli_logit
loss:
  expression: softplus(-3*theta) + 0.5*theta + erf(theta)
approximations: [exact]
hyperparameters:
  rho: {default: 0.9}
"""


@pytest.mark.parametrize("lam", [0.0, 1.0, 30.0, -400.0, 800.0])
def test_one_statistic_keeps_its_precision_where_q_is_concentrated(tmp_path, lam):
    """One statistic: ∇_μE_q[ℓ] = Σ w_jk (T_k − T_j)(ℓ_k − ℓ_j) / Σ w_jk (T_k − T_j)², no mean subtracted; for the
    Bernoulli on {−1, +1} in its logit (μ = tanh λ, a numeric μ → ordinary map) it is (ℓ(1) − ℓ(−1))/2 at every λ.
    The centred sums it replaces were off by 20 % at λ = 30 (1 − μ rounds to 0 where it is 2e-26) and NaN, with
    no error, at λ = −400 and 800."""
    (tmp_path / "blogit.yaml").write_text(BLOGIT)
    ns: dict = {}
    exec(compile(api.generate(tmp_path / "blogit.yaml", "numpy"), "<blogit>", "exec"), ns)
    with mpmath.workdps(30):
        ell = [mpmath.log1p(mpmath.exp(-3 * t)) + mpmath.mpf(t) / 2 + mpmath.erf(t) for t in (-1, 1)]
        want = float((1 - mpmath.mpf("0.9")) * lam - mpmath.mpf("0.9") * (ell[1] - ell[0]) / 2)
    got = ns["step"](ns["init"](lam=np.array([lam])), rho=0.9)["lam"][0]
    assert abs(got - want) <= 1e-14 * max(1.0, abs(want))
