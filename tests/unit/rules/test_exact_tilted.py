"""`exact` beyond losses linear in the statistics: a loss made of polynomials in T times exponentials of linear
combinations of T has E_q[ℓ] from the tilted log-partition, E_q[Tᵏe^{cᵀT}] = ∂ᵏ_c exp(A(λ + c) − A(λ)) (App. B).
The generated numpy step against Eq. 6 computed independently: E_q[ℓ] by scipy quadrature, ∇_λ by central
differences, F(λ) = Cov_q[T] by quadrature, λ ← (1 − ρ)λ − ρF⁻¹∇_λE_q[ℓ] (h = 1 for both families)."""
import numpy as np
import pytest
import yaml
from scipy import integrate, special

from blr_derive import api
from blr_derive.core.errors import SpecError
from blr_derive.families.library import load_family
from blr_derive.families.tilting import tilted_expectation


def step(family, loss, init):
    return api.derive(yaml.safe_dump({"name": "tilt", "family": family, "loss": {"expression": loss},
                                      "hyperparameters": {"rho": 0.2}, "approximations": ["exact"]})
                      ).compile("numpy").step(init, rho=0.2)


def reference(pdf_of_lam, T, loss, lam, lo, hi, rho=0.2):
    def E(f, l):
        return integrate.quad(lambda t: f(t) * pdf_of_lam(t, l), lo, hi, epsabs=0, epsrel=1e-13, limit=400)[0]
    h = 1e-5
    g = np.array([(E(loss, lam + h * e) - E(loss, lam - h * e)) / (2 * h) for e in np.eye(len(lam))])
    mu = np.array([E(t, lam) for t in T])
    F = np.array([[E(lambda x: (ti(x) - mu[i]) * (tj(x) - mu[j]), lam) for j, tj in enumerate(T)]
                  for i, ti in enumerate(T)])
    return (1 - rho) * lam - rho * np.linalg.solve(F, g)


@pytest.mark.parametrize("loss, f", [
    ("sqrt(theta) + exp(-theta)", lambda t: np.sqrt(t) + np.exp(-t)),
    ("theta**2 + 3/theta", lambda t: t ** 2 + 3 / t),
    ("log(theta)**2 + theta*log(theta)", lambda t: np.log(t) ** 2 + t * np.log(t)),
])
def test_gamma(loss, f):
    a, b = 2.6, 1.4                                  # α > 1: E[1/θ] is finite (the shift λ + c stays in Ω)

    def pdf(t, lam):                                 # λ = (α − 1, −β)
        al, be = lam[0] + 1, -lam[1]
        return np.exp(al * np.log(be) - special.gammaln(al) + (al - 1) * np.log(t) - be * t)
    want = reference(pdf, [np.log, lambda t: t], f, np.array([a - 1, -b]), 0, np.inf)
    out = step("gamma", loss, {"alpha": a, "beta": b})
    assert [float(out["alpha"]), float(out["beta"])] == pytest.approx([want[0] + 1, -want[1]], rel=1e-7)


def test_beta():
    a, b = 2.2, 3.1

    def pdf(t, lam):                                 # λ = (a − 1, b − 1)
        p, q = lam[0] + 1, lam[1] + 1
        return np.exp((p - 1) * np.log(t) + (q - 1) * np.log1p(-t) - special.betaln(p, q))
    f = lambda t: t ** 2 * (1 - t) + np.sqrt(1 - t)                                       # noqa: E731
    want = reference(pdf, [np.log, lambda t: np.log1p(-t)], f,
                     np.array([a - 1, b - 1]), 0, 1)
    out = step("beta", "theta**2*(1 - theta) + sqrt(1 - theta)", {"a": a, "b": b})
    assert [float(out["a"]), float(out["b"])] == pytest.approx([want[0] + 1, want[1] + 1], rel=1e-7)


def test_the_shift_is_reported_and_other_losses_are_refused():
    fam = load_family("gamma")
    _, shifts = tilted_expectation(fam, 1 / fam.theta)
    assert [tuple(map(int, c)) for c in shifts] == [(-1, 0)]
    with pytest.raises(SpecError, match="nor a sum of polynomials in them times exponentials"):
        step("gamma", "log(1 + theta)", {"alpha": 2.0, "beta": 1.0})


def test_a_high_degree_polynomial_takes_each_derivative_once():
    """(θ + n + s + 1)¹² expands to 455 terms but 13 powers of θ: each ∂ᵏM/∂cᵏ is taken and evaluated once (the
    loop took it again for every term: 8.1 s, now 1.0 s; degree 30, 5456 terms, past 200 s, now 8.6 s).  The value
    against E[(θ + c)¹²] = Σ_j C(12, j) c^(12−j) Γ(α + j)/(Γ(α) β^j) under Gamma(α, β)."""
    import math
    import time

    import sympy as sp
    fam = load_family("gamma")
    n, s = sp.symbols("n s")
    t0 = time.perf_counter()
    value, shifts = tilted_expectation(fam, (fam.theta + n + s + 1) ** 12)
    assert time.perf_counter() - t0 < 5
    assert shifts == []
    a, b, c = 2.6, 1.4, 1.5
    lam1, lam2 = fam.lam
    got = float(value.subs({lam1: a - 1, lam2: -b, n: 0.3, s: 0.2}))
    want = sum(math.comb(12, j) * c ** (12 - j) * math.exp(math.lgamma(a + j) - math.lgamma(a)) / b ** j
               for j in range(13))
    assert got == pytest.approx(want, rel=1e-12)
