"""The objective of recipes whose E_q[ℓ] comes from a deterministic quadrature rule (issue 42, item 1): the
``quadrature`` rule (tanh-sinh nodes in u = F(θ)) over an explicit loss gives ``objective`` the same quadrature of
the module's own loss, with no draws and no loss values from the caller (``OBJECTIVE_ESTIMATE = 'quadrature'``);
an abstract loss is the ``loss`` oracle at the same nodes; ``gauss_hermite`` over a vector Gaussian gives the exact
objective with the step's Gauss–Hermite nodes.  Against independent computations: scipy quadrature of
∫ q (ℓ + log q) with scipy.stats' densities (per data row for the logistic regression's E[softplus(xᵀθ)]); L
decreases along small-ρ runs; ``blr-derive check`` verifies it and fails on a wrong one."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

import blr_derive.api as api
from blr_derive.verify.recipe import estimated_objective_checks
from conftest import load_generated


def _gamma_truth(a, b, loss):
    q = stats.gamma(a, scale=1 / b)
    return integrate.quad(lambda t: q.pdf(t) * (loss(t) + q.logpdf(t)) if q.pdf(t) > 0 else 0.0, 0, np.inf,
                          limit=400, epsabs=1e-13, epsrel=1e-13)[0]


def test_quadrature_gamma_objective_is_the_quadrature_of_its_own_loss():
    """quadrature_gamma (ℓ = log(1 + θ) + θ/2): objective(state) needs no oracle, rng or values; it equals scipy's
    quadrature of ∫ Gamma(θ; α, β)(ℓ + log q) per coordinate, summed, to 1e-11 at the recipe's 65 nodes; the
    entropy is scipy's; labelled 'quadrature' with the number of nodes and a standard error of 0."""
    mod = load_generated("quadrature_gamma")
    assert mod.OBJECTIVE_ESTIMATE == "quadrature"
    alpha, beta = np.array([0.7, 2.5, 5.0, 1.2]), np.array([1.3, 0.4, 3.0, 0.05])
    out = mod.objective({"alpha": alpha, "beta": beta})
    want = sum(_gamma_truth(a, b, lambda t: math.log1p(t) + t / 2) for a, b in zip(alpha, beta))
    assert abs(out["objective"] - want) < 1e-11 * max(1.0, abs(want)), (out["objective"], want)
    H = sum(float(stats.gamma(a, scale=1 / b).entropy()) for a, b in zip(alpha, beta))
    assert abs(out["entropy"] - H) < 1e-12
    assert out["estimate"] == "quadrature" and out["standard_error"] == 0.0 and out["samples"] == 65
    with pytest.raises(TypeError):
        mod.objective({"alpha": alpha, "beta": beta}, loss=[1.0, 2.0])
    with pytest.raises(TypeError):
        mod.objective({"alpha": alpha, "beta": beta}, samples=10)


def test_quadrature_gamma_objective_decreases_along_a_small_step_run():
    """40 steps with ρ = 0.05 from three gammas: L falls at every step (the step is a natural-gradient step on the
    same quadrature of L), by more than 2.5 in all."""
    mod = load_generated("quadrature_gamma")
    s = {"alpha": np.array([0.7, 2.5, 5.0]), "beta": np.array([1.3, 0.4, 3.0])}
    L = [mod.objective(s)["objective"]]
    for _ in range(40):
        s = mod.step(s, rho=0.05)
        L.append(mod.objective(s)["objective"])
    assert np.all(np.diff(L) < 0), np.diff(L).max()
    assert L[0] - L[-1] > 2.5, (L[0], L[-1])


_BETA = """
name: beta_quad_test
family: beta
loss: {expression: (theta - 0.3)**2 + exp(theta)}
hyperparameters:
  rho: {default: 0.1}
  nodes: {default: 129, type: int}
approximations:
  - quadrature: {nodes: nodes}
"""

_GAMMA_ABSTRACT = """
name: gamma_quad_abstract_test
family: gamma
loss: abstract
hyperparameters:
  rho: {default: 0.1}
  nodes: {default: 129, type: int}
approximations:
  - quadrature: {nodes: nodes}
"""


def test_user_written_explicit_loss_on_a_beta():
    """A recipe written here (a beta candidate, ℓ = (θ − 0.3)² + e^θ): its objective is scipy's quadrature of
    ∫ Beta(θ; a, b)(ℓ + log q) to 1e-9, and it falls along 20 steps with ρ = 0.05."""
    mod = api.derive(_BETA).compile("numpy")
    assert mod.OBJECTIVE_ESTIMATE == "quadrature" and mod.ORACLES == ()
    st = {"a": np.array([1.5, 3.0, 0.8]), "b": np.array([2.0, 1.2, 1.7])}
    want = 0.0
    for a, b in zip(st["a"], st["b"]):
        q = stats.beta(a, b)
        want += integrate.quad(lambda t: q.pdf(t) * ((t - 0.3) ** 2 + math.exp(t) + q.logpdf(t)), 0, 1,
                               limit=400, epsabs=1e-13, epsrel=1e-13)[0]
    got = mod.objective(st)["objective"]
    assert abs(got - want) < 1e-9 * max(1.0, abs(want)), (got, want)
    L = [got]
    for _ in range(20):
        st = mod.step(st, rho=0.05)
        L.append(mod.objective(st)["objective"])
    assert np.all(np.diff(L) < 0), np.diff(L).max()


def test_user_written_abstract_loss_reads_the_oracle_at_the_nodes():
    """An abstract loss under the quadrature rule: objective needs oracles['loss'] (no values, no draws) and is the
    quadrature of it at the step's nodes (129 here): scipy's ∫ Gamma (ℓ_o + log q) to 1e-9 for ℓ_o = (θ − 1)²."""
    mod = api.derive(_GAMMA_ABSTRACT).compile("numpy")
    assert mod.OBJECTIVE_ESTIMATE == "quadrature"
    st = {"alpha": np.array([2.0, 4.5]), "beta": np.array([1.5, 2.0])}
    loss = lambda t: (t - 1.0) ** 2          # noqa: E731
    got = mod.objective(st, oracles={"loss": loss})["objective"]
    want = sum(_gamma_truth(a, b, loss) for a, b in zip(st["alpha"], st["beta"]))
    assert abs(got - want) < 1e-9 * max(1.0, abs(want)), (got, want)
    with pytest.raises(TypeError, match="oracles"):
        mod.objective(st)


@pytest.mark.parametrize("name", ["quadrature_gamma"])
def test_check_verifies_the_quadrature_objective(name):
    """check's lines for a quadrature objective pass on the generated module (below 1e-7 with the rule's nodes
    raised to 257, no rise along a ρ = 0.01 step) and the first fails on an objective off by 1e-5."""
    r, D = api.derive_record(f"catalog/{name}.yaml")
    mod = load_generated(name)
    c, rise = estimated_objective_checks(r, D, mod, 2)
    assert c.kind == "max" and c.passed and c.value < 1e-9, (c.value, c.note)
    assert rise.passed, rise.value
    right = mod.objective
    mod.objective = lambda state, **kw: {**right(state, **kw), "objective": right(state, **kw)["objective"] + 1e-5}
    c, _ = estimated_objective_checks(r, D, mod, 2)
    assert not c.passed, c.value


# ------------------------------------------------------------------ Gauss–Hermite over a vector Gaussian


def _logistic_data():
    rng = np.random.default_rng(0)
    N, P = 7, 3
    X = rng.normal(size=(N, P))
    y = (rng.random(N) < 0.5).astype(float)
    m = rng.normal(size=P)
    A = rng.normal(size=(P, P))
    return X, y, m, A @ A.T + P * np.eye(P)


def _logistic_truth(X, y, m, S, alpha):
    """E_q[Σ softplus(xₙᵀθ) − yᵀXθ + α/2 θᵀθ] − H(q) under q = N(m, S⁻¹): each E[softplus(xₙᵀθ)] by scipy quadrature
    over the one-dimensional Gaussian of xₙᵀθ, the rest in closed form, the entropy scipy's."""
    C = np.linalg.inv(S)

    def e_softplus(eta, v):
        return integrate.quad(lambda z: np.logaddexp(0, eta + math.sqrt(v) * z) * stats.norm.pdf(z), -np.inf, np.inf,
                              epsabs=1e-13, epsrel=1e-13)[0]
    E = sum(e_softplus(X[n] @ m, X[n] @ C @ X[n]) for n in range(len(X))) - y @ X @ m \
        + alpha / 2 * (m @ m + np.trace(C))
    return E - float(stats.multivariate_normal(m, C).entropy())


@pytest.mark.parametrize("name", ["ncvi", "ncvmp"])
def test_gauss_hermite_objective_of_a_full_gaussian(name):
    """ncvi, ncvmp (logistic regression, full Gaussian, 32 Gauss–Hermite nodes): objective is exact in everything
    but the one-dimensional integrals, which it takes with the step's nodes: scipy's quadrature to 1e-10; and it
    falls along 20 steps (ρ = 0.05 for ncvi; ncvmp's ρ = 1 message passing)."""
    mod = load_generated(name)
    X, y, m, S = _logistic_data()
    data = {"X": X, "y": y}
    got = mod.objective({"m": m, "S": S}, data=data, alpha=1.3)
    want = _logistic_truth(X, y, m, S, 1.3)
    assert abs(got["objective"] - want) < 1e-10 * max(1.0, abs(want)), (got["objective"], want)
    hp = {"rho": 0.05} if "rho" in mod.HYPERPARAMETERS else {}
    s, L = {"m": m, "S": S}, [got["objective"]]
    for _ in range(20):
        s = mod.step(s, data=data, alpha=1.3, **hp)
        L.append(mod.objective(s, data=data, alpha=1.3)["objective"])
    assert np.all(np.diff(L) <= 1e-12), np.diff(L).max()
    assert L[-1] < L[0] - 0.5, (L[0], L[-1])
