"""prior_site (Eq. 1; Sec. 5.1; Khan 2025): the Gaussian prior site N(θ | m₀, diag(p₀)⁻¹) with per-coordinate mean
and precision given as data adds p₀(m − m₀) to the gradient and p₀ to the Hessian.

Checked numerically: the derived step WITH the rule equals the step WITHOUT it on the oracles (g + p₀(x − m₀),
H + p₀) under the delta method; under Monte Carlo the site's terms are the exact expectations p₀(m − m₀) and p₀
(not p₀(θ_k − m₀)), checked with the same draws; with m₀ = 0, p₀ = δ it is ``weight_decay`` bit for bit; and on a
quadratic loss the fixed point of the delta-method iteration is the posterior of the loss times the site
(the exact product of Gaussians, in closed form).
"""
import functools

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError, UnsupportedTarget

RTOL = 1e-12     # same sums grouped differently: a few roundings of 1e-16; a missing site term is O(0.1)

SITE_DATA = {"m0": {"shape": [], "default": 0, "description": "site mean"},
             "p0": {"shape": [], "default": "wd", "description": "site precision"}}


@functools.lru_cache(maxsize=None)
def compiled(expectation="delta", rule="site"):
    approx = [expectation]
    if expectation != "delta":
        approx[0] = {"monte_carlo": {"samples": "S"}}
    if rule == "site":
        approx.append({"prior_site": {"mean": "m0", "precision": "p0"}})
    elif rule == "wd":
        approx.append({"weight_decay": {"coefficient": "wd"}})
    hp = {"lr": 0.2, "wd": 0.3}
    if expectation != "delta":
        hp["S"] = {"default": 3, "type": "int"}
    loss = {"kind": "abstract", "data": SITE_DATA} if rule == "site" else "abstract"
    text = yaml.safe_dump({"name": "site_test", "family": "gaussian_diag", "loss": loss, "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)
    return api.derive(text).compile("numpy")


def problem(seed=0, n=6):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)
    hess = lambda x: a + 0.3 * np.cos(x)
    site = {"m0": rng.normal(size=n), "p0": rng.uniform(0.5, 4.0, size=n)}
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), grad, hess, site


def test_the_site_adds_its_gradient_and_precision_under_the_delta_method():
    with_, without = compiled(), compiled(rule=None)
    m0, s0, grad, hess, site = problem()
    mu, p = site["m0"], site["p0"]
    a, b, plain = with_.init(m=m0, s=s0), without.init(m=m0, s=s0), without.init(m=m0, s=s0)
    for _ in range(5):
        a = with_.step(a, oracles={"grad": grad, "hess": hess}, data=site, lr=0.2)
        b = without.step(b, oracles={"grad": lambda x: grad(x) + p * (x - mu), "hess": lambda x: hess(x) + p},
                         lr=0.2)
        plain = without.step(plain, oracles={"grad": grad, "hess": hess}, lr=0.2)
        for k in ("m", "s"):
            np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=0)
    assert np.abs(a["m"] - plain["m"]).max() > 1e-2


def test_hand_formula_one_step():
    mod = compiled()
    m0, s0, grad, hess, site = problem(1)
    new = mod.step(mod.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, data=site, lr=0.2)
    s1 = 0.8 * s0 + 0.2 * (hess(m0) + site["p0"])
    m1 = m0 - 0.2 * (grad(m0) + site["p0"] * (m0 - site["m0"])) / s1
    np.testing.assert_allclose(new["s"], s1, rtol=RTOL, atol=0)
    np.testing.assert_allclose(new["m"], m1, rtol=RTOL, atol=0)


def test_under_monte_carlo_the_site_terms_are_exact_expectations():
    """Gradients at samples θ_k: the site contributes p₀(m − m₀) and p₀, the same for every sample."""
    with_, without = compiled("mc"), compiled("mc", rule=None)
    m0, s0, grad, hess, site = problem(4)
    mu, p = site["m0"], site["p0"]
    a = with_.step(with_.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, data=site,
                   rng=np.random.default_rng(9), lr=0.2)
    b = without.step(without.init(m=m0, s=s0), oracles={"grad": lambda th: grad(th) + p * (m0 - mu),
                                                        "hess": lambda th: hess(th) + p},
                     rng=np.random.default_rng(9), lr=0.2)
    for k in ("m", "s"):
        np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=0)


def test_zero_mean_isotropic_site_is_weight_decay():
    site, wd = compiled(), compiled(rule="wd")
    m0, s0, grad, hess, _ = problem(2)
    a = site.step(site.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess},
                  data={"m0": np.zeros_like(m0), "p0": np.full_like(m0, 0.3)}, lr=0.2)
    b = wd.step(wd.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, lr=0.2, wd=0.3)
    for k in ("m", "s"):
        np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=0)


def test_quadratic_fixed_point_is_the_product_of_loss_and_site():
    """ℓ = ½ a (θ − c)²: the delta-method BLR converges to N(m*, 1/s*) with s* = a + p₀ and
    m* = (a c + p₀ m₀)/(a + p₀), the exact posterior of the likelihood times the site."""
    mod = compiled()
    rng = np.random.default_rng(5)
    a, c = rng.uniform(0.5, 2.0, 5), rng.normal(size=5)
    site = {"m0": rng.normal(size=5), "p0": rng.uniform(0.5, 3.0, 5)}
    state = mod.init(m=np.zeros(5), s=np.ones(5))
    for _ in range(400):
        state = mod.step(state, oracles={"grad": lambda x: a * (x - c), "hess": lambda x: a}, data=site, lr=0.2)
    np.testing.assert_allclose(state["s"], a + site["p0"], rtol=1e-12)
    np.testing.assert_allclose(state["m"], (a * c + site["p0"] * site["m0"]) / (a + site["p0"]), rtol=1e-12)


def test_arguments_are_checked_and_located():
    text = yaml.safe_dump({"name": "bad", "family": "gaussian_diag", "loss": {"kind": "abstract", "data": SITE_DATA},
                           "hyperparameters": {"wd": 0.3},
                           "approximations": ["delta", {"prior_site": {"mean": "m0", "precision": "q9"}}]})
    with pytest.raises(SpecError, match="q9"):
        api.derive(text)
    text = yaml.safe_dump({"name": "bad", "family": "gaussian_diag", "loss": {"kind": "abstract", "data": SITE_DATA},
                           "hyperparameters": {"wd": 0.3}, "approximations": ["delta", {"prior_site": {"mean": "m0"}}]})
    with pytest.raises(SpecError, match="missing argument 'precision'"):
        api.derive(text)


def test_data_defaults_are_for_abstract_losses_and_torch_needs_them():
    """A ``default`` on an explicit loss's data is a located error; the torch target keeps an abstract loss's data as
    per-parameter state and refuses data without a default (naming it)."""
    text = yaml.safe_dump({"name": "bad", "family": "gaussian_diag",
                           "loss": {"expression": "0.5*(theta - c)**2", "data": {"c": {"shape": [], "default": 1}}},
                           "approximations": ["exact"]})
    with pytest.raises(SpecError, match="default is for the data of an abstract loss"):
        api.derive(text)
    data = {"m0": {"shape": [], "description": "site mean"}, "p0": SITE_DATA["p0"]}
    text = yaml.safe_dump({"name": "nodefault", "family": "gaussian_diag", "loss": {"kind": "abstract", "data": data},
                           "learning_rate": "lr", "hyperparameters": {"lr": 0.2, "wd": 0.3},
                           "approximations": ["delta", {"prior_site": {"mean": "m0", "precision": "p0"}}]})
    with pytest.raises(UnsupportedTarget, match=r"from a default, which only an abstract loss's data declare "
                                                 r"\(\{m0: \{shape: \[\], default: 1.0\}\} under loss: data\); data 'm0' has none"):
        api.derive(text).compile("torch")
    assert compiled().DATA == ("m0", "p0")          # numpy takes them as step(..., data=...) with or without


def test_a_default_that_reads_an_otherwise_unused_hyperparameter_is_a_constructor_argument():
    """A data default may read a hyperparameter that nothing else reads (a user recipe: prior precision `lam`): it is
    still a hyperparameter of every target, the torch optimizer starts the data at it, and torch = numpy."""
    import torch
    text = """
name: rms_prior
family: gaussian_diag
loss:
  kind: abstract
  data:
    center: {shape: [], default: 0.0, description: prior mean}
    prec: {shape: [], default: lam, description: prior precision}
learning_rate: lr
hyperparameters:
  lr: {default: 0.01}
  lam: {default: 0.1}
state_init: {s: 1.0}
approximations:
  - delta
  - squared_gradient_hessian
  - prior_site: {mean: center, precision: prec}
  - separate_learning_rates: {s: 0.1}
"""
    d = api.derive(text)
    nm, tm = d.compile("numpy"), d.compile("torch")
    assert nm.HYPERPARAMETERS == {"lr": 0.01, "lam": 0.1}
    cls = [v for v in vars(tm).values() if isinstance(v, type) and issubclass(v, torch.optim.Optimizer)
           and v is not torch.optim.Optimizer][0]
    p = torch.nn.Parameter(torch.tensor([0.5, -0.3], dtype=torch.float64))
    opt = cls([p], lam=0.25)
    opt.zero_grad()
    ((p - 1.0) ** 2).sum().backward()
    opt.step()
    assert torch.equal(opt.state[p]["prec"], torch.full((2,), 0.25, dtype=torch.float64))
    st = nm.step(nm.init(m=np.array([0.5, -0.3]), s=np.array([1.0, 1.0])), oracles={"grad": lambda x: 2 * (x - 1.0)},
                 data={"center": np.zeros(2), "prec": np.full(2, 0.25)})
    np.testing.assert_allclose(p.detach().numpy(), st["m"], rtol=1e-14)
