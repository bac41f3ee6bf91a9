"""Rule ``memory_perturbation``: the derived per-example site λ̃_i = −∇_μ E_q[ℓ_i] against finite differences.

The generated ``sensitivities`` returns the parameters of q_{-i}, whose natural parameters are λ_{-i} = λ − λ̃_i, so
λ̃_i = λ(state) − λ(q_{-i}) is read back from its output and compared with

* central finite differences of E_q[ℓ_i](μ), the Gaussian expectation of one example's squared error written
  here in the expectation parameters μ = (m, S⁻¹ + mmᵀ) (Bayesian linear regression, rule ``exact``);
* the delta method's site (H_i m − g_i, −H_i/2) from finite-difference derivatives of one example's logistic loss
  at the mean (Laplace, rule ``delta``), at a state that is not a fixed point.

The rule changes nothing in the update, and its misuse is a located error.
"""
import numpy as np
import pytest
import yaml

from blr_derive.api import derive
from blr_derive.core.errors import SpecError
from conftest import CATALOG

P = 4


def _spec(recipe, rule="memory_perturbation"):
    spec = yaml.safe_load((CATALOG / f"{recipe}.yaml").read_text())
    spec["approximations"] = [a for a in spec["approximations"] if a != "memory_perturbation"] + [rule]
    return yaml.safe_dump(spec, sort_keys=False)


def _sites(out, m, S):
    """λ̃_i = λ(m, S) − λ(q_{-i}) for the full Gaussian, λ = (S m, −S/2)."""
    lam1 = S @ m - np.einsum("npq,nq->np", out["S"], out["m"])
    lam2 = -S / 2 + out["S"] / 2
    return lam1, lam2


def _state(seed):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(P, P))
    return rng.normal(size=P), A @ A.T + 30 * np.eye(P), rng.normal(size=(6, P)), rng.normal(size=6)


def _fd(f, x, h=1e-5):
    g = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[idx] = h
        g[idx] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def test_exact_site_is_minus_the_gradient_of_the_expected_loss_in_mu():
    mod = derive(_spec("bayesian_linear_regression")).compile("numpy")
    beta = 1.7
    m, S, X, y = _state(0)
    out = mod.sensitivities({"m": m, "S": S}, data={"X": X, "y": y}, alpha=1.0, beta=beta)
    lam1, lam2 = _sites(out, m, S)
    mu1, mu2 = m, np.linalg.inv(S) + np.outer(m, m)
    for i in range(len(X)):
        def expected(u1, u2, x=X[i], t=y[i]):      # E_q[½β(t − xᵀθ)²] = ½β((t − xᵀm)² + xᵀCx), C = μ2 − μ1μ1ᵀ
            return 0.5 * beta * ((t - x @ u1) ** 2 + x @ (u2 - np.outer(u1, u1)) @ x)
        np.testing.assert_allclose(lam1[i], -_fd(lambda u: expected(u, mu2), mu1), rtol=0, atol=1e-7)
        np.testing.assert_allclose(lam2[i], -_fd(lambda u: expected(mu1, u), mu2), rtol=0, atol=1e-7)


def test_delta_site_from_finite_difference_derivatives_of_one_example_loss():
    mod = derive(_spec("laplace")).compile("numpy")
    m, S, X, y = _state(1)
    y = (y > 0).astype(float)
    out = mod.sensitivities({"m": m, "S": S}, data={"X": X, "y": y}, alpha=2.0)
    lam1, lam2 = _sites(out, m, S)
    for i in range(len(X)):
        def loss(th, x=X[i], t=y[i]):
            return np.logaddexp(0.0, x @ th) - t * (x @ th)
        g = _fd(loss, m)
        H = np.array([_fd(lambda th: _fd(loss, th, 1e-4)[j], m, 1e-4) for j in range(P)])
        np.testing.assert_allclose(lam1[i], H @ m - g, rtol=0, atol=1e-6)
        np.testing.assert_allclose(lam2[i], -H / 2, rtol=0, atol=1e-6)
        np.testing.assert_allclose(out["mean_deviation"][i], out["m"][i] - m, rtol=0, atol=1e-14)


@pytest.mark.parametrize("recipe", ["laplace", "online_newton_diag", "ivon"])
def test_the_rule_leaves_the_update_unchanged(recipe):
    spec = yaml.safe_load((CATALOG / f"{recipe}.yaml").read_text())
    assert "memory_perturbation" in spec["approximations"]
    spec["approximations"].remove("memory_perturbation")
    with_rule = derive(recipe)
    without = derive(yaml.safe_dump(spec, sort_keys=False))
    assert with_rule.record.update_lines() == without.record.update_lines()
    assert with_rule.record.sensitivities is not None and without.record.sensitivities is None


def test_an_explicit_loss_without_a_data_plate_is_a_located_error():
    with pytest.raises(SpecError) as exc:
        derive(_spec("normal_normal"))
    assert "leading axis of examples" in str(exc.value) and exc.value.line is not None


def test_an_unknown_argument_is_a_located_error():
    with pytest.raises(SpecError) as exc:
        derive(_spec("laplace", {"memory_perturbation": {"oracles": "grad"}}))
    assert "takes no arguments, got oracles" in str(exc.value) and exc.value.line is not None
