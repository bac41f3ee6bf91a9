"""The torch optimizers' ``objective(loss=None, samples=None)`` (issue 42): L(q) = E_q[ℓ] − H(q) of Eq. 2 from the
optimizer's state.

* exact recipes (three families): equal to the numpy module's ``objective`` at the same state to float64 rounding
  (that one is checked against scipy quadrature in test_objective.py), and to a scipy quadrature here too;
* Monte Carlo recipes (IVON, VOGN from the catalog): the estimate of E_q[ℓ] from loss values at samples of q is
  unbiased (a z-test against the exact E_q[ℓ] of a quadratic loss under the Gaussian, fixed seed), its entropy is
  scipy's and the recipe's loss model (N × the mini-batch mean + the weight-decay prior) is applied;
* delta-method recipes (OGN, Adam): ℓ(m) − H(q) against a hand computation from the optimizer's state;
* BayesBiNN (family_prior): the entropy of the ±1 Bernoulli and E_q[−log p₀] by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

import blr_derive.api as api
from blr_derive.candidates.options import recipe_from_options
from conftest import load_generated, load_module_from_path

#: (family, loss, hyperparameters, settings, state of one coordinate besides the parameter, the parameter's
#: value from the state, the density of q from the state, quadrature limits, the loss as a function)
EXACT = {
    # a convex loss (a, c >= 0): the torch target refuses one whose precision may turn negative (ir/validity.py)
    "gaussian_diag": ("gaussian_diag", "a*theta**4 + (theta - b)**2/2 + c*theta**6", {"a": 0.3, "b": 1.2, "c": 0.1},
                      ["state_init={s: 2.0}"], {"m": 0.4, "s": 2.5},
                      lambda st: stats.norm(st["m"], 1 / math.sqrt(st["s"])), (-np.inf, np.inf),
                      lambda t, a, b, c: a * t**4 + (t - b)**2 / 2 + c * t**6),
    "gamma": ("gamma", "n*theta - y*log(theta)", {"n": 3.0, "y": 7.0},
              ["state_init={alpha: 2.0, beta: 1.0}", "parameter=alpha/beta"], {"alpha": 2.5, "beta": 1.7},
              lambda st: stats.gamma(st["alpha"], scale=1 / st["beta"]), (0, np.inf),
              lambda t, n, y: n * t - y * math.log(t)),
    "beta": ("beta", "-k*log(theta) - (n - k)*log(1 - theta)", {"k": 4.0, "n": 9.0},
             ["state_init={a: 2.0, b: 2.0}", "parameter=a/(a + b)"], {"a": 1.8, "b": 3.2},
             lambda st: stats.beta(st["a"], st["b"]), (0, 1),
             lambda t, k, n: -k * math.log(t) - (n - k) * math.log(1 - t)),
}


def _modules(tmp_path, key):
    fam, loss, hyper, settings = EXACT[key][:4]
    r = recipe_from_options(fam, loss=loss, approximations=["exact"],
                            hyperparameters=[f"{k}={v}" for k, v in hyper.items()], settings=settings)
    d = api.derive(r)                                   # one derivation, both targets
    out = []
    for target in ("numpy", "torch"):
        path = tmp_path / f"{key}_{target}.py"
        path.write_text(d.code(target), encoding="utf-8")
        out.append(load_module_from_path(path))
    return out


def _torch_state(mod, key, values):
    """A generated optimizer over one float64 tensor whose state holds ``values`` (one list per state name)."""
    hyper = EXACT[key][2]
    p = torch.nn.Parameter(torch.zeros(len(next(iter(values.values()))), dtype=torch.float64))
    cls = next(v for k, v in vars(mod).items() if isinstance(v, type) and issubclass(v, torch.optim.Optimizer)
               and v is not torch.optim.Optimizer)
    opt = cls([p], rho=0.1, **hyper)
    st = opt._state(p, opt.param_groups[0])
    with torch.no_grad():
        for name, v in values.items():
            if name in st:
                st[name].copy_(torch.tensor(v, dtype=torch.float64))
            else:                        # the family's mean: the parameter itself
                p.copy_(torch.tensor(v, dtype=torch.float64))
    return opt, p


@pytest.mark.parametrize("key", list(EXACT))
def test_exact_objective_equals_numpy_and_quadrature(tmp_path, key):
    np_mod, t_mod = _modules(tmp_path, key)
    _, _, hyper, _, state, density, (lo, hi), loss = EXACT[key]
    rng = np.random.default_rng(3)
    values = {k: list(v * np.exp(0.2 * rng.standard_normal(3))) for k, v in state.items()}
    opt, _ = _torch_state(t_mod, key, values)
    got = opt.objective()
    assert got["estimate"] == "exact" and got["samples"] == 0 and got["standard_error"] == 0.0
    assert tuple(got) == t_mod.OBJECTIVE_KEYS
    want = np_mod.objective({k: np.array(v) for k, v in values.items()}, **hyper)
    for k in ("objective", "expected_loss", "entropy"):
        assert abs(got[k] - float(want[k])) <= 4e-16 * max(1.0, abs(float(want[k]))) * 8, (k, got[k], float(want[k]))
    # and independently: the sum over the three coordinates of ∫ q (ℓ + log q)
    quad = 0.0
    for i in range(3):
        q = density({k: v[i] for k, v in values.items()})
        f = lambda t: q.pdf(t) * (loss(t, **hyper) + q.logpdf(t)) if q.pdf(t) > 0 else 0.0   # noqa: E731
        quad += integrate.quad(f, lo, hi, limit=400, epsabs=1e-13, epsrel=1e-13)[0]
    assert abs(got["objective"] - quad) < 1e-9 * max(1.0, abs(quad)), (got["objective"], quad)
    with pytest.raises(TypeError, match="exact"):
        opt.objective(loss=1.0)
    # a natural-gradient descent on it: every step with a small learning rate lowers it
    opt.param_groups[0]["rho"] = 0.05
    before = got["objective"]
    for _ in range(20):
        opt.step()
        after = opt.objective()["objective"]
        assert after < before, (before, after)
        before = after


def _catalog(tmp_path, name):
    """The committed torch artifact of a catalog recipe (catalog/generated/torch, which tests/golden keeps equal to
    what the engine generates)."""
    return load_generated(name, "torch")


A = torch.tensor([0.5, 2.0, 1.0], dtype=torch.float64)
C = torch.tensor([1.0, -0.5, 0.3], dtype=torch.float64)


def _quadratic(p):
    """A mini-batch mean loss ℓ_o(θ) = Σ a_i (θ_i − c_i)²/2."""
    return (A * (p - C) ** 2).sum() / 2


def _exact_quadratic(m, s):
    """E_q[ℓ_o] under N(m, 1/s) by hand: Σ a_i ((m_i − c_i)² + 1/s_i)/2."""
    return float((A * ((m - C) ** 2 + 1 / s)).sum() / 2)


def test_monte_carlo_estimate_is_unbiased_ivon(tmp_path):
    """IVON: E_q[ℓ] = ess·E_q[ℓ_o] + ess·wd/2·E_q[θ²] (minibatch, weight_decay), s = ess·(h + wd); the estimate
    from 4000 samples of q is within 4 standard errors of the exact value (fixed seed), its standard error is
    the loss's standard deviation / √n, and the entropy is scipy's."""
    mod = _catalog(tmp_path, "ivon")
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.tensor([0.2, -0.4, 0.9], dtype=torch.float64))
    ess, wd = 50.0, 0.01
    opt = mod.IVON([p], lr=0.05, ess=ess, weight_decay=wd, hess_init=0.3)
    for _ in range(3):                                   # move the state away from its start
        with opt.sampled_params(train=True):
            opt.zero_grad()
            _quadratic(p).backward()
        opt.step()
    h = opt.state[p]["h"].clone()
    m = p.detach().clone()
    s = ess * (h + wd)
    torch.manual_seed(1)
    got = opt.objective(lambda: _quadratic(p), samples=4000)
    assert got["estimate"] == "monte_carlo" and got["samples"] == 4000
    assert torch.equal(p.detach(), m) and torch.equal(opt.state[p]["h"], h)   # the state is left as it was
    exact_ell = ess * _exact_quadratic(m, s) + ess * wd / 2 * float((m ** 2 + 1 / s).sum())
    z = (got["expected_loss"] - exact_ell) / got["standard_error"]
    assert abs(z) < 4, (got["expected_loss"], exact_ell, got["standard_error"], z)
    assert got["standard_error"] < 0.05 * abs(exact_ell)            # the test can fail: the estimate is informative
    H = sum(stats.norm(0, 1 / math.sqrt(float(x))).entropy() for x in s)
    assert abs(got["entropy"] - H) < 1e-12 * max(1.0, abs(H))
    assert got["objective"] == got["expected_loss"] - got["entropy"]
    # given values: ess × their mean + the prior's exact expectation, and ess × their standard error
    vals = [1.0, 2.0, 4.0, 5.0]
    out = opt.objective(torch.tensor(vals))
    prior = ess * wd / 2 * float((m ** 2 + 1 / s).sum())
    assert abs(out["expected_loss"] - (ess * 3.0 + prior)) < 1e-12 * (ess * 3.0 + prior)
    assert abs(out["standard_error"] - ess * np.std(vals, ddof=1) / 2) < 1e-12 * ess
    assert math.isnan(opt.objective([2.0])["standard_error"])
    with pytest.raises(TypeError, match="loss values"):
        opt.objective()


def test_monte_carlo_estimate_is_unbiased_vogn(tmp_path):
    """VOGN keeps s itself: the same z-test, with E_q[ℓ] = ess·E_q[ℓ_o] + δ/2·E_q[θ²]."""
    mod = _catalog(tmp_path, "vogn")
    p = torch.nn.Parameter(torch.tensor([-0.3, 0.6, 1.1], dtype=torch.float64))
    ess, delta = 20.0, 0.5
    opt = mod.VOGN([p], ess=ess, lr=0.1, prior_precision=delta)
    s = torch.tensor([5.0, 30.0, 12.0], dtype=torch.float64)
    opt._state(p, opt.param_groups[0])["s"].copy_(s)           # a state away from the prior's
    m = p.detach().clone()
    torch.manual_seed(2)
    got = opt.objective(lambda: _quadratic(p), samples=4000)
    exact_ell = ess * _exact_quadratic(m, s) + delta / 2 * float((m ** 2 + 1 / s).sum())
    z = (got["expected_loss"] - exact_ell) / got["standard_error"]
    assert abs(z) < 4, (got["expected_loss"], exact_ell, z)
    H = sum(0.5 * math.log(2 * math.pi * math.e / float(x)) for x in s)
    assert abs(got["entropy"] - H) < 1e-12 * max(1.0, abs(H))


def test_delta_method_value_ogn(tmp_path):
    """OGN (delta method, minibatch N, prior δ): objective(loss) = N·ℓ_o(m) + δ/2·Σ m² − Σ ½ log(2πe/s), by
    hand from the optimizer's state; the callable and the value give the same; labelled 'delta'."""
    mod = _catalog(tmp_path, "ogn")
    p = torch.nn.Parameter(torch.tensor([0.2, -0.4, 0.9], dtype=torch.float64))
    ess, delta = 10.0, 0.3
    opt = mod.OGN([p], ess=ess, lr=0.1, prior_precision=delta)
    for _ in range(2):
        opt.zero_grad()
        _quadratic(p).backward()
        p.ggn = p.grad.detach() ** 2
        opt.step()
    m, s = p.detach().clone(), opt.state[p]["s"].clone()
    value = float(_quadratic(m))
    want = ess * value + delta / 2 * float((m ** 2).sum()) - sum(0.5 * math.log(2 * math.pi * math.e / float(x)) for x in s)
    got = opt.objective(lambda: _quadratic(p))
    assert got["estimate"] == "delta" and got["samples"] == 1 and math.isnan(got["standard_error"])
    assert abs(got["objective"] - want) < 1e-12 * max(1.0, abs(want)), (got["objective"], want)
    assert opt.objective(torch.tensor(value, dtype=torch.float64))["objective"] == got["objective"]
    with pytest.raises(ValueError, match="one loss value"):
        opt.objective([1.0, 2.0])
    with pytest.raises(TypeError, match="samples"):
        opt.objective(value, samples=3)


def test_delta_method_value_adam(tmp_path):
    """Adam: the family's s is the state exp_avg_sq; weight decay is a prior only when coupled."""
    mod = _catalog(tmp_path, "adam")
    p = torch.nn.Parameter(torch.tensor([0.2, -0.4, 0.9], dtype=torch.float64))
    for decoupled in (False, True):
        opt = mod.Adam([p], lr=0.01, weight_decay=0.1, decoupled_weight_decay=decoupled)
        opt.zero_grad()
        _quadratic(p).backward()
        opt.step()
        s = opt.state[p]["exp_avg_sq"]
        m = p.detach()
        prior = 0.0 if decoupled else 0.1 / 2 * float((m ** 2).sum())
        want = 1.5 + prior - sum(0.5 * math.log(2 * math.pi * math.e / float(x)) for x in s)
        got = opt.objective(1.5)
        assert abs(got["objective"] - want) < 1e-12 * max(1.0, abs(want)), (decoupled, got["objective"], want)


def test_bayesbinn_entropy_and_family_prior(tmp_path):
    """BayesBiNN (±1 Bernoulli, natural parameter λ, prior P(+1) = p₀, loss N·ℓ_o): by hand, p = σ(2λ),
    H = −p log p − (1 − p) log(1 − p) and E_q[−log p₀(θ)] = −p log p₀ − (1 − p) log(1 − p₀); the entropy of a large
    λ is finite (0)."""
    mod = _catalog(tmp_path, "bayesbinn")
    w = torch.nn.Parameter(torch.tensor([0.3, -1.2, 2.0, 800.0], dtype=torch.float64))
    n, p0 = 7.0, 0.3
    opt = mod.BayesBiNN([w], lr=0.01, train_set_size=n, prior_p=p0)
    lam = opt.state[w]["lam"].clone()
    got = opt.objective([2.0, 4.0])
    p = torch.sigmoid(2 * lam)
    H = float(sum(-x * math.log(x) - (1 - x) * math.log(1 - x) if 0 < x < 1 else 0.0 for x in p.tolist()))
    prior = float(sum(-x * math.log(p0) - (1 - x) * math.log(1 - p0) for x in p.tolist()))
    assert abs(got["entropy"] - H) < 1e-12
    assert abs(got["expected_loss"] - (n * 3.0 + prior)) < 1e-12 * (n * 3.0 + prior)
    assert abs(got["objective"] - (n * 3.0 + prior - H)) < 1e-11


def test_objective_only_where_derived(tmp_path):
    """A recipe whose loss a rule changes in a way the objective does not follow (kronecker_eigenbasis: a prior in
    rotated coordinates) gets no objective and says why; SAM, whose steps descend a relaxation of L(q) while the
    loss stays Eq. 1's, has the delta value and says that it is not what the steps descend."""
    evon = _catalog(tmp_path, "evon")
    assert not hasattr(evon.EVON, "objective") and "No ``objective()``" in evon.__doc__
    sam = _catalog(tmp_path, "sam").SAM
    assert hasattr(sam, "objective") and "relaxation of L(q)" in " ".join(sam.objective.__doc__.split())


def test_recipes_without_entropy_minimize_the_expected_loss(tmp_path):
    """no_entropy (STE, SNES; Sec. 4.5): the update minimizes E_q[ℓ] alone, so the entropy term is 0 and the
    objective is the (estimated) expected loss; SNES's Monte Carlo estimate is still unbiased (z-test)."""
    ste = _catalog(tmp_path, "ste")
    w = torch.nn.Parameter(torch.tensor([0.3, -1.2], dtype=torch.float64))
    got = ste.STE([w], lr=0.1).objective(0.75)
    assert (got["objective"], got["entropy"], got["estimate"]) == (0.75, 0.0, "delta")
    snes = _catalog(tmp_path, "snes")
    p = torch.nn.Parameter(torch.tensor([0.2, -0.4, 0.9], dtype=torch.float64))
    opt = snes.SNES([p], lr_std=0.1, popsize=4)
    std = opt._state(p, opt.param_groups[0])["std"]
    std.copy_(torch.tensor([0.5, 0.2, 1.5], dtype=torch.float64))
    m = p.detach().clone()
    torch.manual_seed(4)
    got = opt.objective(lambda: _quadratic(p), samples=4000)
    assert got["entropy"] == 0.0 and got["objective"] == got["expected_loss"]
    z = (got["expected_loss"] - _exact_quadratic(m, 1 / std ** 2)) / got["standard_error"]
    assert abs(z) < 4, z
