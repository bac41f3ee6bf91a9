"""check's lines for a factorized recipe's objective (blr_derive/verify/product_objective.py; rules em_bound and
mean_field_bound): 'objective vs summation and quadrature' and 'objective never increases over rounds'.

* The engine's reference, L(q) from the recipe's blocks and factors, against formulas written here: for EM,
  −log p(y | θ) from scipy's multivariate normal (em_gmm, em_gmm_unrolled: the factor drops P/2·log 2π per row);
  for VMP, the Gaussian and gamma moments of the recipe's factors and scipy's entropies (1e-12).
* Both lines pass on the catalog's em_gmm, em_gmm_unrolled and vmp and on recipes written here (a VMP regression
  with an exact or a point noise precision, vmp with ρ = 0.3 in one block, a MAP-EM Poisson mixture over a component
  axis); the comparison line catches an objective shifted by 1e-3, the monotonicity line a step that undoes every
  other round; with ρ = 1.5 (a step past the block's minimizer) the rounds are not judged.
* ``blr-derive check`` reports them for a factorized recipe (slow: derives and generates).
"""
import types

import numpy as np
import pytest
import scipy.special
import scipy.stats

from blr_derive.api import derive_file
from blr_derive.verify.product_objective import (MONOTONE, NAME, RISE, TOLERANCE, Reference,
                                                 product_objective_checks)
from conftest import CATALOG, load_generated, load_module_from_path

_DERIVED = {}


def derived(name):
    if name not in _DERIVED:
        _DERIVED[name] = derive_file(CATALOG / f"{name}.yaml")
    return _DERIVED[name]


def checks_of(recipe, D, mod, points=2):
    return {c.name: c for c in product_objective_checks(recipe, D, mod, points)}


@pytest.mark.parametrize("name", ["em_gmm", "em_gmm_unrolled"])
def test_em_reference_is_minus_the_log_likelihood(name):
    R, D = derived(name)
    ref = Reference(R, D)
    state, data, hp = ref.inputs(0)
    Y = data["y"]
    N, P = Y.shape
    if name == "em_gmm":
        w, m, L = state["pi"], state["m"], state["L"]
    else:
        w = np.array([state["pi1"], state["pi2"], 1 - state["pi1"] - state["pi2"]])
        m = [state[f"m{k}"] for k in (1, 2, 3)]
        L = [state[f"L{k}"] for k in (1, 2, 3)]
    comps = np.stack([np.log(w[k]) + scipy.stats.multivariate_normal(m[k], np.linalg.inv(L[k])).logpdf(Y)
                      for k in range(len(w))])
    want = -(scipy.special.logsumexp(comps, axis=0).sum() + N * P / 2 * np.log(2 * np.pi))
    assert abs(ref.objective(state, data, hp) - want) < 1e-12 * abs(want)


def test_vmp_reference_is_the_moments_and_entropies():
    R, D = derived("vmp")
    ref = Reference(R, D)
    for seed in range(2):
        state, data, hp = ref.inputs(seed)
        m, s, a, b = (float(state[k]) for k in ("theta_m", "theta_s", "tau_alpha", "tau_beta"))
        y, (m0, kappa0, alpha0, beta0) = data["y"], (hp[k] for k in ("m0", "kappa0", "alpha0", "beta0"))
        e_tau, e_log_tau = a / b, scipy.special.digamma(a) - np.log(b)
        e_sq = lambda c: (c - m) ** 2 + 1 / s                        # noqa: E731 - E[(c − θ)²]
        expected = (np.sum(e_tau * e_sq(y) / 2 - e_log_tau / 2) + kappa0 * e_tau * e_sq(m0) / 2 - e_log_tau / 2
                    + beta0 * e_tau - (alpha0 - 1) * e_log_tau)
        entropy = scipy.stats.norm(m, 1 / np.sqrt(s)).entropy() + scipy.stats.gamma(a, scale=1 / b).entropy()
        want = expected - entropy
        assert abs(ref.objective(state, data, hp) - want) < 1e-12 * max(1.0, abs(want))


@pytest.mark.parametrize("name", ["em_gmm", "em_gmm_unrolled", "vmp"])
def test_the_catalog_passes(name):
    R, D = derived(name)
    checks = checks_of(R, D, load_generated(name))
    assert checks[NAME].kind == "max" and checks[NAME].value < 1e-12
    assert checks[MONOTONE].kind == "max" and checks[MONOTONE].value <= 1e-13
    assert all(c.passed for c in checks.values())


def shifted(mod, by):
    """The module with its objective moved by ``by`` (relative to max(1, |L|))."""
    def objective(state, **kw):
        out = dict(mod.objective(state, **kw))
        out["objective"] += by * max(1.0, abs(out["objective"]))
        return out
    return types.SimpleNamespace(objective=objective, init=mod.init, step=mod.step, STATE=mod.STATE)


def undoing(mod):
    """The module with a step that, every other call, returns the state the previous call was given: one round
    forward, one back, so L rises on the way back."""
    calls = []

    def step(state, **kw):
        calls.append(state)
        if len(calls) % 2 == 0:
            back = calls[-2]
            return {**mod.step(state, **kw), **back}
        return mod.step(state, **kw)
    return types.SimpleNamespace(objective=mod.objective, init=mod.init, step=step, STATE=mod.STATE)


@pytest.mark.parametrize("name", ["em_gmm", "vmp"])
def test_a_wrong_objective_is_caught(name):
    R, D = derived(name)
    mod = load_generated(name)
    checks = checks_of(R, D, shifted(mod, 1e-3))
    assert not checks[NAME].passed and np.isclose(checks[NAME].value, 1e-3, rtol=1e-6)
    assert checks[MONOTONE].passed              # a constant shift does not change the rounds
    checks = checks_of(R, D, undoing(mod))
    assert checks[NAME].passed
    assert not checks[MONOTONE].passed and checks[MONOTONE].value > 1e3 * RISE


REGRESSION = """
name: vmp_regression
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

POISSON_MIXTURE = """
name: poisson_mixture_map
components: {index: k, size: K, description: components}
plate:
  index: n
  data:
    y: {description: counts}
hyperparameters:
  a: {default: 2.0, description: gamma shape}
  b: {default: 0.5, description: gamma rate}
blocks:
  z: {family: categorical, components: true, local: true, approximations: [exact], description: component}
  w: {variable: {simplex: true}, components: true, approximations: [delta], description: weights}
  r: {variable: {shape: scalar}, components: true, approximations: [delta], description: rates}
factors:
  likelihood:
    plate: true
    components: true
    expression: -z*(log(w) + y*log(r) - r)
  prior:
    components: true
    expression: -(a - 1)*log(r) + b*r
"""


SLOW_VMP = (CATALOG / "vmp.yaml").read_text(encoding="utf-8").replace(
    "theta: {family: gaussian_diag, approximations: [exact],",
    "theta: {family: gaussian_diag, approximations: [exact], learning_rate: 0.3,")


@pytest.mark.parametrize("text", [
    REGRESSION.replace("TAU", "{family: gamma, approximations: [exact], description: noise precision}"),
    SLOW_VMP,
    REGRESSION.replace("TAU", "{variable: {positive: true}, approximations: [delta], description: noise precision}"),
    POISSON_MIXTURE], ids=["exact-exact", "vmp-rho-0.3", "exact-point", "poisson-em"])
def test_recipes_of_its_own(tmp_path, text):
    from blr_derive.api import generate
    path = tmp_path / "own.yaml"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "own.py").write_text(generate(path, "numpy"), encoding="utf-8")
    mod = load_module_from_path(tmp_path / "own.py")
    R, D = derive_file(path)
    checks = checks_of(R, D, mod)
    assert checks[NAME].value < 1e-10 and checks[MONOTONE].kind == "max" and checks[MONOTONE].passed
    assert not checks_of(R, D, shifted(mod, 1e-3))[NAME].passed


def test_rounds_are_not_judged_where_a_step_need_not_lower_the_objective(tmp_path):
    """ρ = 1.5 in a global exact block overshoots the block's minimizer: L may rise, so no rounds line is judged."""
    from blr_derive.api import generate
    path = tmp_path / "vmp15.yaml"
    path.write_text(SLOW_VMP.replace("learning_rate: 0.3", "learning_rate: 1.5"), encoding="utf-8")
    (tmp_path / "vmp15.py").write_text(generate(path, "numpy"), encoding="utf-8")
    R, D = derive_file(path)
    checks = checks_of(R, D, load_module_from_path(tmp_path / "vmp15.py"))
    assert checks[NAME].passed and checks[MONOTONE].kind == "na" and "theta" in checks[MONOTONE].note


@pytest.mark.slow
def test_check_reports_the_lines(capsys):
    from blr_derive.cli import main
    assert main(["check", str(CATALOG / "em_gmm.yaml"), "--points", "1"]) == 0
    out = capsys.readouterr().out
    assert "a factorized recipe" in out and "generated update vs symbolic update" in out
    for line in (NAME, MONOTONE):
        assert any(row.split()[-1] != "n/a" and line in row and " pass " in row for row in out.splitlines())
    assert f"<= {TOLERANCE:.0e}" in out
