"""An explicit loss must be a finite real number on the candidate family's support (E_q[ℓ] of Eq. 2 is over all
of it; blr_derive/families/loss_domain.py).  Before, `log(-theta) + theta` under the gamma derived
`alpha <- alpha*(1 - rho)` (sympy's log(−θ) = log θ + iπ, the iπ dropped with the constants) and `log(theta)` under
the Bernoulli on {−1, +1} derived `cov_q = I*pi*...`: both wrote a module without a word."""
from __future__ import annotations

import textwrap

import pytest

from blr_derive import api
from blr_derive.core.errors import SpecError


def recipe(family, loss, approx="exact", extra=""):
    return textwrap.dedent(f"""\
        name: domain_unit
        family: {family}
        loss:
          expression: {loss}
        """) + f"approximations: [{approx}]\n" + extra


@pytest.mark.parametrize("family,loss,approx,words", [
    ("gamma", "log(-theta) + theta", "exact", ["not a real number at theta = 0.375", "'gamma' (positive)"]),
    ("bernoulli_logit", "log(theta) + theta", "exact", ["not a real number at theta = -1", "binary_pm1"]),
    ("beta", "log(theta - 2)", "exact", ["not a real number at theta = 0.125", "unit_interval"]),
    ("gaussian_diag", "log(theta) + theta**2", "exact", ["not a real number at theta = -2.25"]),
    ("poisson", "log(theta) + theta", "exact", ["not finite at theta = 0", "nonnegative_integers"]),
    ("binomial", "1/theta", "exact", ["not finite at theta = 0"]),
    ("gamma", "sqrt(theta - c)", "{quadrature: {nodes: 33}}", ["at theta = 0.375"]),
    # a term that reads data is not judged, the others are: w*theta does not excuse log(-theta)
    ("gamma", "w*theta + log(-theta)", "{quadrature: {nodes: 33}}", ["not a real number at theta = 0.375"]),
])
def test_a_loss_that_is_not_real_on_the_support_is_refused_at_its_line(family, loss, approx, words):
    extra = ("hyperparameters:\n  c: 1.0\n" if "c)" in loss else "")
    loss_text = recipe(family, loss, approx, extra)
    if "w*" in loss:
        loss_text = loss_text.replace("approximations:", "  data: {w: {}}\napproximations:")
    with pytest.raises(SpecError) as info:
        api.derive(loss_text)
    msg = str(info.value)
    assert ":4:" in msg and "E_q[loss] (Eq. 2) is an expectation over all of the support" in msg, msg
    for w in words:
        assert w in msg, msg


def test_a_data_sum_over_a_real_vector_reads_every_real_row_value():
    text = textwrap.dedent("""\
        name: log_rows
        family: gaussian_full
        loss:
          expression: sum(log(X*theta))
          data:
            X: {shape: [N, P]}
        approximations: [{gauss_hermite: {nodes: 20}}]
        """)
    with pytest.raises(SpecError, match=r":4: the loss is not a real number at u = -2.25 in the data sum"):
        api.derive(text)


@pytest.mark.parametrize("family,loss,approx,extra", [
    ("gamma", "theta - 2*log(theta) + 1/theta", "exact", ""),                 # a pole at the boundary only
    ("poisson", "lgamma(theta + 1) - theta*log(r0) + r0 + c*theta", "exact", "  data: {r0: {}, c: {}}\n"),
    ("beta", "-3*log(theta) - 2*log(1 - theta) + theta**2", "exact", ""),
    ("gamma", "log(theta - c) + theta", "{quadrature: {nodes: 33}}", "  data: {c: {}}\n"),   # data: unknown sign
    ("bernoulli_logit", "exp(w*theta) + 0.3*theta", "exact", "  data: {w: {}}\n"),
])
def test_losses_real_on_the_support_or_reading_data_still_derive(family, loss, approx, extra):
    text = textwrap.dedent(f"""\
        name: domain_ok
        family: {family}
        loss:
          expression: {loss}
        """) + extra + f"approximations: [{approx}]\n"
    d = api.derive(text)
    assert d.update


def test_the_points_are_evaluated_numerically_so_a_deep_loss_costs_little():
    """The support points enter as floats, so each function evaluates as it is built: exact points made sympy
    simplify a sigmoid nested twelve deep at θ = -1 symbolically (over 60 s; tests/unit/rules/
    test_finite_support_depth.py timed out at its budget).  Twelve nested sqrt(sigmoid(.)) with no data: judged
    (real and finite at θ = ±1) in well under a second."""
    import time

    from blr_derive.families.loss_domain import loss_off_support
    fam = api.family("bernoulli")
    e = "theta"
    for _ in range(12):
        e = f"sqrt(sigmoid({e}))"
    r = api.recipe(recipe("bernoulli", e))
    t0 = time.perf_counter()
    assert loss_off_support(fam, r.loss) is None
    assert time.perf_counter() - t0 < 2.0
