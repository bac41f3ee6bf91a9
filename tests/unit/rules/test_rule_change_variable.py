"""change_variable (IVON's convention, not a BLR step): store a parameter p through a new state variable,
p = value(new), e.g. IVON's precision s = ess·(h + δ) (Shen et al. 2024; Sec. 4.4 of the paper, Eqs. 34, 46).

A change of variable changes what the state holds, never the algorithm: the BLR step (Eq. 6) in the ordinary
parameters is the same.  Checked numerically:

* the step WITH the rule on the state (m, h) equals the step WITHOUT it on (m, s = value(h)), and the new state
  is the inverse map of the updated s: h_{t+1} = s_{t+1}/a − b for s = a(h + b), h_{t+1} = log s_{t+1} for
  s = exp(h), over several steps of online Newton (Eq. 37, delta method);
* under Monte Carlo (Eq. 46) the samples θ_k = m + ε_k/√s are drawn through the map (same seed, same draws);
* the catalog's IVON (change_variable s = ess(h + δ), Monte Carlo, Price's estimator, the Riemannian correction,
  debiasing, clipping) equals the same recipe without the rule run on s, with h = s/ess − δ;
* the identity map (a = 1, b = 0, or value = h) is the update without the rule, bit for bit.
"""
import functools

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError
from conftest import CATALOG

# Deterministic identities in float64: the two programs compute s_{t+1} from a(h + b) and from s with the same
# operations up to one or two roundings, and the inverse map adds a couple more; 1e-12 relative is a wide margin
# over ≤ 10 steps, while any wrong map or a missed use of s changes the values by O(1).
RTOL = 1e-12


def recipe(approx, hp, name="change_variable_test"):
    return yaml.safe_dump({"name": name, "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def compiled(value="a*(h + b)", expectation="delta"):
    exp = expectation if expectation == "delta" else {"monte_carlo": {"samples": "S"}}
    hp = {"lr": 0.1}
    if expectation != "delta":
        hp["S"] = {"default": 2, "type": "int"}
    approx = [exp]
    if value is not None:
        approx.append({"change_variable": {"param": "s", "to": "h", "value": value}})
        if "a" in value:
            hp.update(a=2.0, b=0.5)
    return api.derive(recipe(approx, hp)).compile("numpy")


@functools.lru_cache(maxsize=None)
def ivon(with_rule=True):
    spec = yaml.safe_load((CATALOG / "ivon.yaml").read_text(encoding="utf-8"))
    if not with_rule:
        spec["approximations"] = [x for x in spec["approximations"]
                                  if not (isinstance(x, dict) and "change_variable" in x)]
        del spec["state_init"]                       # {h: hess_init}: without the rule the state is s itself
        spec["name"] = "ivon_in_s"
    return api.derive(yaml.safe_dump(spec, sort_keys=False)).compile("numpy")


def problem(seed=0, n=6):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)
    hess = lambda x: a + 0.3 * np.cos(x)
    return rng.normal(size=n), rng.uniform(0.2, 1.5, size=n), grad, hess


def test_affine_map_with_the_rule_equals_without_it_on_the_mapped_state():
    with_, without = compiled(), compiled(value=None)
    assert "h" in with_.STATE and "s" not in with_.STATE
    m0, h0, grad, hess = problem(1)
    lr, a, b = 0.3, 3.0, 0.25
    oracles = {"grad": grad, "hess": hess}
    x, y = with_.init(m=m0, h=h0), without.init(m=m0, s=a * (h0 + b))
    for _ in range(8):
        x = with_.step(x, oracles=oracles, lr=lr, a=a, b=b)
        y = without.step(y, oracles=oracles, lr=lr)
        np.testing.assert_allclose(x["m"], y["m"], rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(x["h"], y["s"] / a - b, rtol=RTOL, atol=1e-14)     # the inverse map
        np.testing.assert_allclose(a * (x["h"] + b), y["s"], rtol=RTOL, atol=0)


def test_log_map_stores_the_log_precision():
    """s = exp(h) (not affine, but solvable): h_{t+1} = log s_{t+1}."""
    with_, without = compiled("exp(h)"), compiled(value=None)
    m0, h0, grad, hess = problem(2)
    oracles = {"grad": grad, "hess": hess}
    x, y = with_.init(m=m0, h=np.log(h0)), without.init(m=m0, s=h0)
    for _ in range(6):
        x = with_.step(x, oracles=oracles, lr=0.3)
        y = without.step(y, oracles=oracles, lr=0.3)
        np.testing.assert_allclose(x["m"], y["m"], rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(x["h"], np.log(y["s"]), rtol=RTOL, atol=1e-14)


def test_monte_carlo_samples_are_drawn_through_the_map():
    """θ_k = m + ε_k/√(a(h + b)): with the same generator seed both programs evaluate the oracles at the same θ_k;
    the oracle records them."""
    with_, without = compiled(expectation="mc"), compiled(value=None, expectation="mc")
    m0, h0, grad, hess = problem(3)
    a, b = 2.0, 0.5
    seen = {"with": [], "without": []}

    def oracles(key):
        return {"grad": lambda th: (seen[key].append(th.copy()), grad(th))[1], "hess": hess}
    x = with_.step(with_.init(m=m0, h=h0), oracles=oracles("with"), rng=np.random.default_rng(11),
                   lr=0.3, a=a, b=b, S=3)
    y = without.step(without.init(m=m0, s=a * (h0 + b)), oracles=oracles("without"),
                     rng=np.random.default_rng(11), lr=0.3, S=3)
    assert len(seen["with"]) == len(seen["without"]) == 3
    eps = np.random.default_rng(11).standard_normal((3,) + m0.shape)
    for k in range(3):
        np.testing.assert_allclose(seen["with"][k], m0 + eps[k] / np.sqrt(a * (h0 + b)), rtol=RTOL, atol=1e-15)
        np.testing.assert_allclose(seen["with"][k], seen["without"][k], rtol=RTOL, atol=1e-15)
    np.testing.assert_allclose(x["m"], y["m"], rtol=RTOL, atol=1e-14)
    np.testing.assert_allclose(x["h"], y["s"] / a - b, rtol=RTOL, atol=1e-14)


def test_catalog_ivon_in_h_equals_ivon_in_s():
    with_, without = ivon(), ivon(with_rule=False)
    rng = np.random.default_rng(4)
    n = 6
    A, c = rng.uniform(0.5, 2.0, size=n), rng.normal(size=n)
    grad = lambda th: A * (th - c) + 0.3 * np.sin(th)     # a mini-batch-mean gradient
    hp = dict(lr=0.1, ess=50.0, hess_init=0.3, beta1=0.9, beta2=0.99, weight_decay=1e-2, mc_samples=2)
    m0 = rng.normal(size=n)
    x = with_.init(hyperparameters=hp, m=m0)
    np.testing.assert_allclose(x["h"], 0.3, rtol=0, atol=0)
    y = without.init(m=m0, s=hp["ess"] * (x["h"] + hp["weight_decay"]))
    for t in range(10):
        x = with_.step(x, oracles={"grad": grad}, rng=np.random.default_rng(t), **hp)
        y = without.step(y, oracles={"grad": grad}, rng=np.random.default_rng(t), **hp)
        np.testing.assert_allclose(x["m"], y["m"], rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(x["momentum"], y["momentum"], rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(x["h"], y["s"] / hp["ess"] - hp["weight_decay"], rtol=RTOL, atol=1e-14)
    assert np.abs(x["h"] - 0.3).max() > 1e-2              # the precision really moved


def test_the_identity_map_is_the_update_without_the_rule():
    without = compiled(value=None)
    m0, s0, grad, hess = problem(5)
    oracles = {"grad": grad, "hess": hess}
    for mod, hp in ((compiled(), {"a": 1.0, "b": 0.0}), (compiled("h"), {})):
        x, y = mod.init(m=m0, h=s0), without.init(m=m0, s=s0)
        for _ in range(5):
            x = mod.step(x, oracles=oracles, lr=0.3, **hp)
            y = without.step(y, oracles=oracles, lr=0.3)
            # 1·(0 + h), s/1 − 0: multiplications by 1 and additions of 0 are exact
            np.testing.assert_array_equal(x["m"], y["m"])
            np.testing.assert_array_equal(x["h"], y["s"])


def test_a_map_that_cannot_be_inverted_is_refused():
    # s = (h - 1)² has two inverses h = 1 ± √s that can both be positive: no branch is the positive one
    with pytest.raises(SpecError, match="cannot invert"):
        api.derive(recipe(["delta", {"change_variable": {"param": "s", "to": "h", "value": "(h - 1)**2"}}],
                          {"lr": 0.1}))


def test_a_positive_parameter_takes_the_positive_branch():
    """s = h² (s > 0) has inverses ±√s; the new state is the positive one, h_{t+1} = √s_{t+1}."""
    D = api.derive(recipe(["delta", {"change_variable": {"param": "s", "to": "h", "value": "h**2"}}], {"lr": 0.1}))
    h_new = D.update["h"]
    s_new = [e for s_, e in D.defs if str(s_) == "s_new"][0]
    vals = {sym: 0.7 for sym in (h_new.free_symbols | s_new.free_symbols) if str(sym) != "s_new"}
    vals.update({sym: 1.3 for sym in vals if str(sym) == "h"})
    s_val = float(s_new.xreplace(vals))
    assert s_val > 0
    assert float(h_new.xreplace({**vals, **{sym: s_val for sym in h_new.free_symbols if str(sym) == "s_new"}})) \
        == pytest.approx(np.sqrt(s_val), rel=1e-14)
