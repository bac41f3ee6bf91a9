"""Rule ``mean_field_bound`` (Sec. 5.3, Eqs. 2, 58): a factorized recipe whose blocks are all global, each exact in a
family (or a point), over the whole data set, returns from every step the bound −L(q) = Σ_b H(q_b) − Σ_n E_q[ℓ_n] −
Σ_f E_q[ℓ_f] at the state the step started from, and its module's ``objective`` returns L.

A recipe of its own (VMP for a Bayesian linear regression with an unknown noise precision, y_n ~ N(w x_n, 1/τ)):

* L equals E_q[ℓ + log q] estimated from 400,000 draws of q(w) q(τ) with scipy's densities and the recipe's
  factors written here (z-test, |z| < 5), at the state after 8 steps and at a random state;
* VMP steps never increase it (8 rounds), and with τ a point block (the delta method: an M-step) too;
* no mean-field bound where it does not apply: a minibatch (svi), local blocks (em_gmm: rule em_bound's instead).
"""
import numpy as np
import pytest
import scipy.stats

from blr_derive.api import derive_file, generate
from conftest import CATALOG, load_module_from_path

REGRESSION = """
name: vmp_regression
title: VMP for a Bayesian linear regression with unknown noise precision
plate:
  index: n
  data:
    x: {description: input}
    y: {description: output}
hyperparameters:
  alpha: {default: 1.0, description: prior precision of w}
  a0: {default: 2.0, description: prior shape}
  b0: {default: 1.0, description: prior rate}
blocks:
  w: {family: gaussian_diag, approximations: [exact], description: slope}
  tau: TAU
factors:
  lik: {plate: true, expression: "tau*(y - w*x)**2/2 - log(tau)/2"}
  prior_w: {expression: "alpha*w**2/2"}
  prior_tau: {expression: "b0*tau - (a0 - 1)*log(tau)"}
"""
HYPER = {"alpha": 0.7, "a0": 2.5, "b0": 1.3}


def module(tmp_path, tau):
    path = tmp_path / "vreg.yaml"
    path.write_text(REGRESSION.replace("TAU", tau), encoding="utf-8")
    (tmp_path / "vreg.py").write_text(generate(path, "numpy"), encoding="utf-8")
    return load_module_from_path(tmp_path / "vreg.py")


def data(seed=1, n=60):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    return x, 1.7 * x + rng.normal(scale=0.5, size=n)


def run(mod, state, x, y, rounds):
    values = []
    for _ in range(rounds):
        values.append(mod.objective(state, data={"x": x, "y": y}, **HYPER)["objective"])
        out = mod.step(state, data={"x": x, "y": y}, **HYPER)
        assert out["bound"] == -values[-1]
        state = {k: out[k] for k in mod.STATE}
    return values, state


def test_the_bound_is_the_elbo_and_vmp_never_raises_it(tmp_path):
    mod = module(tmp_path, "{family: gamma, approximations: [exact], description: noise precision}")
    x, y = data()
    values, last = run(mod, mod.init(w_m=-1.0, w_s=1.0, tau_alpha=1.0, tau_beta=1.0), x, y, 8)
    assert np.diff(values).max() <= 1e-12 * abs(values[0]) and values[0] - values[-1] > 100.0
    rng = np.random.default_rng(5)
    for state in (last, {"w_m": 0.4, "w_s": 3.0, "tau_alpha": 2.2, "tau_beta": 0.9}):
        m, s, a, b = (float(state[k]) for k in ("w_m", "w_s", "tau_alpha", "tau_beta"))
        got = mod.objective(state, data={"x": x, "y": y}, **HYPER)["objective"]
        n = 400_000
        w, tau = rng.normal(m, 1 / np.sqrt(s), size=n), rng.gamma(a, 1 / b, size=n)
        ell = sum(tau * (yi - w * xi) ** 2 / 2 - np.log(tau) / 2 for xi, yi in zip(x, y))
        ell += HYPER["alpha"] * w ** 2 / 2 + HYPER["b0"] * tau - (HYPER["a0"] - 1) * np.log(tau)
        values = ell + scipy.stats.norm(m, 1 / np.sqrt(s)).logpdf(w) + scipy.stats.gamma(a, scale=1 / b).logpdf(tau)
        z = (values.mean() - got) / (values.std(ddof=1) / np.sqrt(n))
        assert abs(z) < 5


def test_a_point_block_next_to_an_exact_one(tmp_path):
    mod = module(tmp_path, "{variable: {shape: scalar}, approximations: [delta], description: noise precision}")
    x, y = data(2)
    values, _ = run(mod, mod.init(w_m=-1.0, w_s=1.0, tau=1.0), x, y, 8)
    assert np.diff(values).max() <= 1e-12 * abs(values[0]) and values[0] - values[-1] > 100.0


@pytest.mark.parametrize("name, rule", [("svi", None), ("em_gmm", "em_bound"), ("vmp", "mean_field_bound")])
def test_where_it_applies(name, rule):
    _, D = derive_file(CATALOG / f"{name}.yaml")
    assert D.bound_rule == rule
    assert any(s.rule == "mean_field_bound" for s in D.steps) == (rule == "mean_field_bound")
