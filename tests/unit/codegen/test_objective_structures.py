"""The objective of the structures that had none (issue 42: "objective in every generated module"), each against
a value written here from the distribution's own formulas:

* the jax optax transformations whose parameters hold another function of q than its mean (``bayesbinn``: the sign
  of the natural parameter; ``ste``): q is read from the optimizer state.  bayesbinn's Monte Carlo value is
  N × the mean of the loss values + E_q[−log p₀] − H(q) with the Bernoulli's p = σ(2λ) on {−1, +1}: entropy
  −p log p − (1 − p) log(1 − p) and E_q[−log p₀] = −p log p₀ − (1 − p) log(1 − p₀) (scipy);
* the gradient at an adversarial point (rule sharpness_aware; ``sam`` over N(m, I) by the delta method at sub-batches
  of the point m, ``bsam`` over a diagonal Gaussian with samples): L(q) of Eq. 2 with the loss as written, ℓ_o(m) +
  δ/2 ‖m‖² − P/2 log(2πe) and ess·mean(ℓ_o) + ess·δ/2 Σ (m² + 1/s) − Σ ½ log(2πe/s), s = ess·s_ex; the Monte Carlo
  estimate is unbiased (z-test against E_q of a quadratic, by hand);
* the posterior correction with the full-data gradient as q_old's sites (a control variate: the loss is unchanged;
  ``svrg``, ``svrg_newton`` by the delta method at m, ``ivon_poco`` by Monte Carlo), the anchor q_old read nowhere:
  ℓ_o(m) − P/2 log(2πe), ℓ_o(m) − (P/2 (1 + log 2π) − ½ log det S) (scipy's entropy) and IVON's
  ess·mean(ℓ_o) + ess·wd/2 Σ (m² + 1/s) − Σ ½ log(2πe/s), s = ess·(h + wd).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import torch
from scipy import stats

from conftest import CATALOG, load_generated

HALF_LOG_2PIE = 0.5 * math.log(2 * math.pi * math.e)


def _bernoulli_terms(lam, prior_p):
    """(H(q), E_q[−log p₀]) of the mean-field Bernoulli on {−1, +1} with P(θ = +1) = σ(2λ), summed."""
    p = scipy.special.expit(2 * lam)
    H = float(np.sum(scipy.special.entr(p) + scipy.special.entr(1 - p)))
    cross = float(np.sum(-(p * math.log(prior_p) + (1 - p) * math.log(1 - prior_p))))
    return H, cross


def test_jax_bayesbinn_objective_reads_q_from_the_optimizer_state(x64):
    import jax.numpy as jnp
    mod = load_generated("bayesbinn", "jax")
    rng = np.random.default_rng(7)
    N, prior_p = 60.0, 0.3
    tx = mod.bayesbinn(train_set_size=N, prior_p=prior_p)
    params = {"w": jnp.asarray(rng.normal(size=(3, 2))), "b": jnp.asarray(rng.normal(size=4))}
    state = tx.init(params)
    lam = {"w": rng.normal(size=(3, 2)), "b": rng.normal(size=4)}
    state = state._replace(lam={k: jnp.asarray(v) for k, v in lam.items()})
    values = rng.normal(loc=2.0, size=6)
    out = mod.objective(params, state, loss=values, train_set_size=N, prior_p=prior_p)
    lam_all = np.concatenate([lam["w"].ravel(), lam["b"]])
    H, cross = _bernoulli_terms(lam_all, prior_p)
    expected = N * values.mean() + cross
    assert out["estimate"] == "monte_carlo" and out["samples"] == 6
    assert abs(out["entropy"] - H) < 1e-12 * abs(H)
    assert abs(out["expected_loss"] - expected) < 1e-12 * abs(expected)
    assert abs(out["objective"] - (expected - H)) < 1e-12 * abs(expected)
    assert abs(out["standard_error"] - N * values.std(ddof=1) / math.sqrt(6)) < 1e-12 * N
    # the parameters (binary signs) are not read: other signs, the same value
    flipped = {k: -v for k, v in params.items()}
    assert mod.objective(flipped, state, loss=values, train_set_size=N, prior_p=prior_p) == out


def test_jax_ste_objective_is_the_loss_at_the_signs(x64):
    """ste drops the entropy and reads the loss at the signs the parameters hold: 'objective' is ℓ_o there."""
    import jax.numpy as jnp
    mod = load_generated("ste", "jax")
    params = {"w": jnp.asarray([1.0, -1.0, 1.0])}
    state = mod.ste().init(params)
    out = mod.objective(params, state, loss=2.5)
    assert out["estimate"] == "delta" and out["entropy"] == 0.0 and out["objective"] == 2.5
    assert math.isnan(out["standard_error"])
    with pytest.raises(ValueError, match="one value"):
        mod.objective(params, state, loss=[1.0, 2.0])


def _quadratic_np(a, c):
    return lambda theta: float(np.sum(a * (np.asarray(theta) - c) ** 2) / 2)


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_sam_objective_is_the_delta_value_at_the_mean(target, x64):
    """sam: the delta method at the sub-batches' point m: ℓ_o(m) + wdecay/2 ‖m‖² − P/2 log(2πe), written here;
    the docstring says the steps descend a sharpness-aware relaxation."""
    mod = load_generated("sam", target)
    rng = np.random.default_rng(11)
    m, a, c = rng.normal(size=5), rng.uniform(0.5, 2.0, 5), rng.normal(size=5)
    wd = 0.3
    loss = _quadratic_np(a, c)
    state = mod.init(m=m)
    kwargs = {"key": None} if target == "jax" else {}
    out = mod.objective(state, oracles={"loss": loss}, wdecay=wd, **kwargs)
    want = loss(m) + wd / 2 * m @ m - 5 * HALF_LOG_2PIE
    assert out["estimate"] == "delta" and out["samples"] == 1
    assert abs(out["objective"] - want) < 1e-12 * max(1.0, abs(want))
    assert abs(out["entropy"] - 5 * HALF_LOG_2PIE) < 1e-12
    assert "relaxation" in " ".join(mod.objective.__doc__.split())
    assert mod.objective(state, loss=loss(m), wdecay=wd)["objective"] == pytest.approx(want, rel=1e-12)


def test_sam_steps_lower_the_objective():
    """Steps of sam with a small learning rate on a convex quadratic lower its objective (values computed by
    objective(), the loss written here)."""
    mod = load_generated("sam")
    rng = np.random.default_rng(12)
    a, c = rng.uniform(0.5, 2.0, 4), rng.normal(size=4)
    loss = _quadratic_np(a, c)
    grad = lambda theta: a * (np.asarray(theta) - c)          # noqa: E731
    hyper = {"lr": 0.05, "momentum": 0.0, "wdecay": 0.01, "rho": 0.05, "msharpness": 1}
    state = mod.init(m=rng.normal(size=4) * 3)
    before = mod.objective(state, oracles={"loss": loss}, **hyper)["objective"]
    for _ in range(30):
        state = mod.step(state, oracles={"grad": grad}, **hyper)
        after = mod.objective(state, oracles={"loss": loss}, **hyper)["objective"]
        assert after < before
        before = after


def _bsam_state(mod, rng, P):
    return mod.init(m=rng.normal(size=P), s_ex=rng.uniform(0.5, 3.0, P), gm=rng.normal(size=P))


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_bsam_objective_from_loss_values(target, x64):
    """bsam: ess × the mean of the values + ess·wdecay/2 Σ (m² + 1/s) − Σ ½ log(2πe/s), s = ess·s_ex (the
    per-example prior scaled by the mini-batch rule as the step scales it), with its standard error."""
    mod = load_generated("bsam", target)
    rng = np.random.default_rng(13)
    P, ess, wd = 6, 40.0, 0.02
    st = _bsam_state(mod, rng, P)
    m, s = np.asarray(st["m"]), ess * np.asarray(st["s_ex"])
    values = rng.normal(loc=1.0, size=7)
    out = mod.objective(st, loss=values, ess=ess, wdecay=wd)
    H = float(np.sum(stats.norm(m, 1 / np.sqrt(s)).entropy()))
    expected = ess * values.mean() + ess * wd / 2 * float(np.sum(m ** 2 + 1 / s))
    assert out["estimate"] == "monte_carlo" and out["samples"] == 7
    assert abs(out["entropy"] - H) < 1e-12 * max(1.0, abs(H))
    assert abs(out["expected_loss"] - expected) < 1e-12 * abs(expected)
    assert abs(out["standard_error"] - ess * values.std(ddof=1) / math.sqrt(7)) < 1e-12 * ess


def test_bsam_monte_carlo_objective_is_unbiased():
    """With oracles['loss'] a quadratic, 4,000 fresh samples of q give E_q[ℓ] within 5 standard errors of its exact
    value Σ a ((m − c)² + 1/s)/2 × ess + the prior's expectation (by hand)."""
    mod = load_generated("bsam")
    rng = np.random.default_rng(14)
    P, ess, wd = 4, 30.0, 0.05
    st = _bsam_state(mod, rng, P)
    a, c = rng.uniform(0.5, 2.0, P), rng.normal(size=P)
    m, s = np.asarray(st["m"]), ess * np.asarray(st["s_ex"])
    out = mod.objective(st, oracles={"loss": _quadratic_np(a, c)}, rng=np.random.default_rng(0), samples=4000,
                        ess=ess, wdecay=wd)
    exact = ess * float(np.sum(a * ((m - c) ** 2 + 1 / s)) / 2) + ess * wd / 2 * float(np.sum(m ** 2 + 1 / s))
    z = (out["expected_loss"] - exact) / out["standard_error"]
    assert out["samples"] == 4000 and abs(z) < 5, z


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_svrg_objective_is_the_delta_value_at_the_mean(target, x64):
    """svrg: the anchor's oracle calls are a control variate; the delta method at m: ℓ_o(m) − P/2 log(2πe)."""
    mod = load_generated("svrg", target)
    rng = np.random.default_rng(15)
    m, a, c = rng.normal(size=4), rng.uniform(0.5, 2.0, 4), rng.normal(size=4)
    loss = _quadratic_np(a, c)
    out = mod.objective(mod.init(m=m), oracles={"loss": loss})
    want = loss(m) - 4 * HALF_LOG_2PIE
    assert out["estimate"] == "delta" and abs(out["objective"] - want) < 1e-12 * max(1.0, abs(want))


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_svrg_newton_objective_is_the_delta_value_with_the_full_entropy(target, x64):
    """svrg_newton: ℓ_o(m) − H(N(m, S⁻¹)), H scipy's, to 1e-12."""
    mod = load_generated("svrg_newton", target)
    rng = np.random.default_rng(16)
    m, B = rng.normal(size=3), rng.normal(size=(3, 3))
    S = B @ B.T + 2 * np.eye(3)
    a, c = rng.uniform(0.5, 2.0, 3), rng.normal(size=3)
    loss = _quadratic_np(a, c)
    out = mod.objective(mod.init(m=m, S=S), oracles={"loss": loss})
    H = float(stats.multivariate_normal(m, np.linalg.inv(S)).entropy())
    assert out["estimate"] == "delta"
    assert abs(out["entropy"] - H) < 1e-12 and abs(out["objective"] - (loss(m) - H)) < 1e-12 * max(1.0, abs(loss(m) - H))


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_ivon_poco_objective_is_ivons(target, x64):
    """ivon_poco: the correction leaves the loss as it is: ess·mean(values) + ess·wd/2 Σ (m² + 1/s) − Σ ½ log(2πe/s),
    s = ess·(h + wd), the anchor (m_old, s_old, grad_full) not read."""
    mod = load_generated("ivon_poco", target)
    rng = np.random.default_rng(17)
    P, ess, wd = 5, 80.0, 0.01
    m, h = rng.normal(size=P), rng.uniform(0.2, 2.0, P)
    values = rng.normal(loc=0.5, size=4)
    out = mod.objective(mod.init(m=m, h=h), loss=values, ess=ess, weight_decay=wd, lr=0.1)
    s = ess * (h + wd)
    H = float(np.sum(0.5 * np.log(2 * math.pi * math.e / s)))
    expected = ess * values.mean() + ess * wd / 2 * float(np.sum(m ** 2 + 1 / s))
    assert out["estimate"] == "monte_carlo"
    assert abs(out["entropy"] - H) < 1e-12 * max(1.0, abs(H))
    assert abs(out["expected_loss"] - expected) < 1e-12 * abs(expected)


def test_torch_sam_and_bsam_objectives():
    """The torch optimizers: SAM's delta value from the loss at the parameters, bSAM's Monte Carlo value from loss
    values, against the formulas above with the state read from the optimizer."""
    sam = load_generated("sam", "torch")
    p = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))
    opt = sam.SAM([p], lr=0.1, wdecay=0.2)
    out = opt.objective(loss=1.25)
    m = p.detach().numpy()
    assert out["estimate"] == "delta"
    assert abs(out["objective"] - (1.25 + 0.1 * m @ m - 3 * HALF_LOG_2PIE)) < 1e-12
    bsam = load_generated("bsam", "torch")
    q = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0, 0.1], dtype=torch.float64))
    ess, wd = 20.0, 0.05
    opt = bsam.BSAM([q], ess=ess, wdecay=wd, s_init=0.7)
    values = [1.0, 1.5, 0.25]
    out = opt.objective(loss=values)
    m = q.detach().numpy()
    s = ess * opt.state[q]["s_ex"].double().numpy() if "s_ex" in opt.state[q] else np.full(4, ess * 0.7)
    H = float(np.sum(0.5 * np.log(2 * math.pi * math.e / s)))
    expected = ess * np.mean(values) + ess * wd / 2 * float(np.sum(m ** 2 + 1 / s))
    assert out["estimate"] == "monte_carlo"
    assert abs(out["entropy"] - H) < 1e-10 and abs(out["expected_loss"] - expected) < 1e-10 * abs(expected)


def _task_arithmetic_objective(m, theta, alpha):
    """E_q[ℓ] − H(q) under q = N(m, I) by hand: E‖θ − a‖²/2 = ‖m − a‖²/2 + P/2 for each of the loss's squares."""
    P = len(m)
    sq = lambda a: (float((m - a) @ (m - a)) + P) / 2                   # noqa: E731
    expected = sq(theta[0]) + sum(al * (sq(t) - sq(theta[0])) for al, t in zip(alpha, theta[1:]))
    return expected - P * HALF_LOG_2PIE, expected


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_task_arithmetic_objective_is_exact(target, x64):
    """task_arithmetic (a vector family whose program runs one coordinate at a time): the exact E_q[ℓ] − H(q) as
    the vector's totals, against the Gaussian moments written here (1e-12); its step (ρ = 1, the exact BLR's fixed
    point) lands on the minimum over m, below the objective at random means."""
    mod = load_generated("task_arithmetic", target)
    rng = np.random.default_rng(18)
    P = 4
    theta = [rng.normal(size=P) for _ in range(3)]
    alpha = (0.7, 0.4)
    data = {f"theta{t}": theta[t] for t in range(3)}
    hyper = {"alpha1": alpha[0], "alpha2": alpha[1]}
    m = rng.normal(size=P)
    out = mod.objective(mod.init(m=m), data=data, **hyper)
    want, expected = _task_arithmetic_objective(m, theta, alpha)
    assert abs(out["objective"] - want) < 1e-12 * max(1.0, abs(want))
    assert abs(out["expected_loss"] - expected) < 1e-12 * max(1.0, abs(expected))
    assert abs(out["entropy"] - P * HALF_LOG_2PIE) < 1e-12
    merged = mod.step(mod.init(m=m), data=data, **hyper)
    best = float(mod.objective(merged, data=data, **hyper)["objective"])
    assert abs(best - _task_arithmetic_objective(np.asarray(merged["m"]), theta, alpha)[0]) < 1e-12 * abs(best)
    for _ in range(10):
        assert best < _task_arithmetic_objective(rng.normal(size=P), theta, alpha)[0]


def test_torch_soap_objective_is_the_delta_value_in_the_eigenbasis():
    """The torch target's matrix-state optimizer (one parameter at a time): SOAP's delta value ℓ_o(M) − Σ ½ log(2πe/s)
    over every parameter's rotated coordinates (a 1-D parameter is one column), to 1e-12, equal to the numpy
    module's objective on the same state; a parameter without its state is refused as step() refuses it."""
    mod, np_mod = load_generated("soap", "torch"), load_generated("soap")
    rng = np.random.default_rng(19)
    w = torch.nn.Parameter(torch.tensor(rng.normal(size=(3, 2)), dtype=torch.float64))
    b = torch.nn.Parameter(torch.tensor(rng.normal(size=4), dtype=torch.float64))
    opt = mod.SOAP([w, b])
    with pytest.raises(RuntimeError, match="init_state"):
        opt.objective(loss=1.0)
    states = {}
    for p, (r, c) in ((w, (3, 2)), (b, (4, 1))):
        QL, _ = np.linalg.qr(rng.normal(size=(r, r)))
        QR, _ = np.linalg.qr(rng.normal(size=(c, c)))
        s = rng.uniform(0.5, 4.0, size=(r, c))
        opt.init_state(p, s=torch.tensor(s), L=torch.eye(r, dtype=torch.float64), R=torch.eye(c, dtype=torch.float64),
                       Q_L=torch.tensor(QL), Q_R=torch.tensor(QR))
        states[r] = (s, QL, QR)
    out = opt.objective(loss=2.5)
    H = sum(float(np.sum(0.5 * np.log(2 * math.pi * math.e / s))) for s, _, _ in states.values())
    assert out["estimate"] == "delta" and abs(out["entropy"] - H) < 1e-12 and abs(out["objective"] - (2.5 - H)) < 1e-12
    s, QL, QR = states[3]
    one = np_mod.objective({"M": w.detach().numpy(), "s": s, "Q_L": QL, "Q_R": QR}, loss=2.5)
    assert abs(one["entropy"] - float(np.sum(0.5 * np.log(2 * math.pi * math.e / s)))) < 1e-12


def test_an_optimizer_target_says_why_it_prints_no_objective():
    """codegen/objective.py target_note, the reason an optimizer module would give where the numpy module has the
    objective and the optimizer's view has none: E_q[ℓ] closed only with the recipe's data (ridge's design matrix),
    or the recipe's own explicit loss at a point (laplace); None where the optimizer prints it (adam); the
    derivation's own reason where it gives none (kalman_update)."""
    from blr_derive.api import derive_record
    from blr_derive.codegen.objective import objective_view, target_note
    from blr_derive.ir.build import build_ir

    def ir_of(name):
        return build_ir(derive_record(CATALOG / f"{name}.yaml")[1], name)
    ridge, laplace, adam, kalman = (ir_of(n) for n in ("ridge", "laplace", "adam", "kalman_update"))
    assert ridge.objective is not None and objective_view(ridge, {}) is None
    assert "data" in target_note(ridge, None) and "Eq. 2" in target_note(ridge, None)
    assert objective_view(laplace, {}) is None and "explicit loss" in target_note(laplace, None)
    view = objective_view(adam, {})
    assert view is not None and target_note(adam, view) is None
    assert target_note(kalman, None) == kalman.objective_note and "q's own parameters" in kalman.objective_note


CORRECTED = """
name: corrected
title: A posterior correction over N(m, I) with q_old itself as its sites
family: gaussian_fixed_cov
loss: abstract
posterior_correction:
  old: {m: m_old}
  sites: SITES
hyperparameters:
  rho: {default: 0.1, description: step}
approximations:
  - delta
  - posterior_correction
"""


@pytest.mark.parametrize("sites", ["gradient", "posterior"])
def test_a_posterior_correction_keeps_the_objective_only_as_a_control_variate(tmp_path, sites):
    """Recipes written here: with the full-data gradient as q_old's sites the anchor's oracle call is set aside
    and the module has the delta value at m (ℓ_o(m) − P/2 log(2πe), by hand); with q_old itself as its sites the
    loss becomes the batch's sites plus −log q_old, and the module says so instead."""
    from blr_derive import api
    path = tmp_path / "corrected.yaml"
    path.write_text(CORRECTED.replace("SITES", sites), encoding="utf-8")
    code = api.generate(path, "numpy")
    if sites == "posterior":
        assert "def objective(" not in code and "No ``objective()``" in code and "sites: posterior" in code
        return
    out_py = tmp_path / "corrected.py"
    out_py.write_text(code, encoding="utf-8")
    import importlib.util
    spec = importlib.util.spec_from_file_location("corrected", out_py)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    m = np.array([0.4, -1.1, 2.0])
    out = mod.objective(mod.init(m=m), loss=3.25)
    assert out["estimate"] == "delta" and abs(out["objective"] - (3.25 - 3 * HALF_LOG_2PIE)) < 1e-12


def test_a_loss_that_reads_the_state_has_no_objective_and_says_why(tmp_path):
    """A loss written here that reads the candidate's own mean (a prior at the state the step starts from)."""
    from blr_derive import api
    path = tmp_path / "selfprior.yaml"
    path.write_text("name: selfprior\ntitle: t\nfamily: gaussian_diag\nloss:\n  expression: 0.5*(theta - y)**2 + "
                    "0.5*(theta - m)**2\n  data:\n    y: {description: obs}\napproximations:\n  - exact\n",
                    encoding="utf-8")
    code = api.generate(path, "numpy")
    assert "def objective(" not in code and "q's own parameters (m:" in " ".join(code.split())
