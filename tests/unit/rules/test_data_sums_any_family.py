"""Data sums with any candidate family (Eq. 6 with ℓ = Σ_n ℓ_n): ``sum(...)`` over data rows written as if each
data vector were one number, conjugate one-step posteriors (Sec. 5.1) against their closed forms, and the λ → ordinary
solve of Eq. 9 when the new natural parameter holds data sums."""
import functools

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError


def recipe(family, loss, hyper, approximations=("exact", "unit_learning_rate"), data=("y",)):
    return yaml.safe_dump({"name": "data_sum_case", "family": family,
                           "loss": {"expression": loss, "data": {d: {"shape": ["N"]} for d in data}},
                           "hyperparameters": hyper, "approximations": list(approximations)}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def compiled(family, loss, hyper_items, approximations=("exact", "unit_learning_rate")):
    return api.derive(recipe(family, loss, dict(hyper_items), approximations)).compile("numpy")


Y = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0])


def test_gamma_poisson_with_rows_is_the_closed_form_posterior():
    """Poisson counts, Gamma(α0, β0) prior: α = α0 + Σy, β = β0 + N (Gelman et al., BDA Sec. 2.6)."""
    mod = compiled("gamma", "sum(theta - y*log(theta)) - (alpha0 - 1)*log(theta) + beta0*theta",
                   (("alpha0", 2.0), ("beta0", 0.5)))
    out = mod.step(mod.init(alpha=7.0, beta=3.0), data={"y": Y}, alpha0=2.0, beta0=0.5)
    assert out["alpha"] == pytest.approx(2.0 + Y.sum(), rel=1e-15)
    assert out["beta"] == pytest.approx(0.5 + Y.size, rel=1e-15)


def test_beta_bernoulli_with_rows_is_the_closed_form_posterior():
    """Bernoulli rows, Beta(a0, b0) prior: a = a0 + Σy, b = b0 + N − Σy; the data-free row term (1 per row)
    becomes the number of rows."""
    y = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    mod = compiled("beta", "sum(-y*log(theta) - (1 - y)*log(1 - theta)) - (a0 - 1)*log(theta) - (b0 - 1)*log(1 - theta)",
                   (("a0", 1.5), ("b0", 2.5)))
    out = mod.step(mod.init(a=1.0, b=1.0), data={"y": y}, a0=1.5, b0=2.5)
    assert out["a"] == pytest.approx(1.5 + y.sum(), rel=1e-15)
    assert out["b"] == pytest.approx(2.5 + y.size - y.sum(), rel=1e-15)


def test_row_sum_equals_the_summary_statistic_form():
    """The same loss written with summary data (n, Σy as numbers) gives the same update for a learning rate < 1."""
    rows = api.derive(recipe("gamma", "sum(theta - y*log(theta)) + theta", {"rho": 0.3}, ["exact"])).compile("numpy")
    summary = api.derive(yaml.safe_dump({
        "name": "summary_case", "family": "gamma",
        "loss": {"expression": "n*theta - s*log(theta) + theta", "data": {"n": {}, "s": {}}},
        "hyperparameters": {"rho": 0.3}, "approximations": ["exact"]})).compile("numpy")
    a = rows.step(rows.init(alpha=2.0, beta=1.5), data={"y": Y}, rho=0.3)
    b = summary.step(summary.init(alpha=2.0, beta=1.5), data={"n": float(Y.size), "s": Y.sum()}, rho=0.3)
    for k in ("alpha", "beta"):
        np.testing.assert_allclose(a[k], b[k], rtol=1e-15)
    # and against Eq. 6 by hand: λ ← (1 − ρ)λ + ρ(−∇_μ E[ℓ]) with T = (log θ, θ), λ = (α − 1, −β)
    lam = np.array([2.0 - 1, -1.5])
    lam = 0.7 * lam + 0.3 * np.array([Y.sum(), -(Y.size + 1.0)])
    np.testing.assert_allclose([a["alpha"], a["beta"]], [lam[0] + 1, -lam[1]], rtol=1e-14)


@pytest.mark.parametrize("loss, message", [
    ("sum(log(1 + theta*y))", "not linear in its sufficient statistics"),
    ("sum(theta*y*z)", "two data vectors"),
    ("sum(theta)", "needs a data vector"),
])
def test_sums_that_are_not_row_separable_are_located_errors(loss, message):
    with pytest.raises(SpecError, match=message):
        api.derive(recipe("gamma", loss, {}, ["exact"], data=("y", "z")))


SCALE_FAMILY = """
name: normal_scale
description: N(0, sigma^2) with unknown scale sigma
variable: theta
support: real
parameters:
  sigma: {domain: positive, description: scale}
sufficient_statistics:
  - theta**2
base_measure: 1
natural_parameters:
  - -1/(2*sigma**2)
"""


def test_a_scale_parameter_is_solved_on_its_domain(tmp_path):
    """λ = −1/(2σ²) has two roots σ = ±(−2λ)^(−1/2); the positive domain chooses one (Eq. 9)."""
    fam = tmp_path / "normal_scale.yaml"
    fam.write_text(SCALE_FAMILY, encoding="utf-8")
    mod = api.derive(recipe(str(fam), "sum(0.5*y*theta**2)", {"rho": 0.25}, ["exact"])).compile("numpy")
    out = mod.step(mod.init(sigma=2.0), data={"y": Y}, rho=0.25)
    lam = 0.75 * (-1 / (2 * 2.0 ** 2)) + 0.25 * (-0.5 * Y.sum())
    assert out["sigma"] == pytest.approx((-2 * lam) ** -0.5, rel=1e-14)
    assert out["sigma"] > 0
