"""Run-time checks of a factorized recipe's new global state (blr_derive/ir/validity.py product_checks,
codegen/arrays/views.py _axis_checks), found by helper-75's hunt:

* on a component axis each check reads the whole stacked array (``mu_s_new_all``): it read the loop's last
  per-component value, so a negative precision of component 1 of an SVI written with a wrong-signed prior was
  returned silently, and one of the last component was an IndexError instead of the located message;
* a point block's M-step (Sec. 5.2) is checked to be finite: a maximum-likelihood Poisson-mixture EM with a
  component far from every count returned its rate as 0/0 = NaN with only a RuntimeWarning.

The values are checked against hand-written formulas (the Robbins-Monro SVI step of an empty component, EM for a
Poisson mixture with gamma priors on the rates).
"""
import warnings

import numpy as np
import pytest
from scipy import special, stats

from blr_derive.api import build_ir, derive_record, emit
from conftest import CATALOG, load_module_from_path

EM_POISSON = """
name: em_poisson_mixture
components: {index: k, size: K}
plate:
  index: n
  data:
    y: {description: counts}
hyperparameters:
  a0: {default: 2.0}
  b0: {default: 0.5}
blocks:
  z: {family: categorical, components: true, local: true, approximations: [exact]}
  pi: {variable: {simplex: true}, components: true, approximations: [delta]}
  r: {variable: {shape: scalar}, components: true, approximations: [delta]}
factors:
  lik:
    plate: true
    components: true
    expression: -z*(log(pi) + y*log(r) - r)
  prior:
    components: true
    expression: b0*r - (a0 - 1)*log(r)
"""


def _module(tmp_path, name, text):
    p = tmp_path / f"{name}.yaml"
    p.write_text(text, encoding="utf-8")
    _, D = derive_record(p)
    out = tmp_path / f"{name}.py"
    out.write_text(emit(build_ir(D, p.name), "numpy"), encoding="utf-8")
    return load_module_from_path(out)


@pytest.fixture(scope="module")
def svi_wrong_sign(tmp_path_factory):
    text = (CATALOG / "svi.yaml").read_text(encoding="utf-8")
    right = "expression: s0*(mu - m0)**2/2"
    assert right in text
    return _module(tmp_path_factory.mktemp("svi"), "svi_wrong_sign",
                   text.replace(right, "expression: -s0*(mu - m0)**2/2").replace("name: svi\n", "name: svi_wrong_sign\n"))


@pytest.mark.parametrize("far", [0, 2])
def test_every_component_of_an_axis_is_checked(svi_wrong_sign, far):
    y = np.random.default_rng(0).normal(0.0, 0.3, 50)
    m = np.array([0.0, 0.1, -0.1])
    m[far] = 40.0                     # no row reads this component: its precision is the wrong-signed prior's
    state = svi_wrong_sign.init(w_a=np.ones(3), mu_m=m, mu_s=np.ones(3))
    rho = (1 + 1.0) ** -0.7           # Robbins-Monro rho_1 = (t + delay)^-forgetting at the defaults
    expected = (1 - rho) * 1.0 + rho * (-5.0)          # (1 - rho) s + rho (N/B sum_n r_nk / sigma2 - s0), r_nk = 0
    with pytest.raises(FloatingPointError) as e:
        svi_wrong_sign.step(state, data={"y": y}, s0=5.0, N=50)
    msg = str(e.value)
    assert f"the new mu_s of component {far + 1} (of 3) is not positive" in msg
    assert f"value {expected:.6g} at index ({far},)" in msg


def test_poisson_mixture_em_equals_hand_written_em(tmp_path):
    mod = _module(tmp_path, "em_poisson_mixture", EM_POISSON)
    rng = np.random.default_rng(1)
    y = np.r_[rng.poisson(2, 300), rng.poisson(9, 200), rng.poisson(30, 100)].astype(float)
    pi, r, a0, b0 = np.ones(3) / 3, np.array([1.0, 5.0, 20.0]), 2.0, 0.5
    state = mod.init(pi=pi.copy(), r=r.copy())
    for _ in range(30):
        lp = np.log(pi) + stats.poisson.logpmf(y[:, None], r)
        ll = special.logsumexp(lp, axis=1)
        R = np.exp(lp - ll[:, None])
        bound = ll.sum() + special.gammaln(y + 1).sum() - np.sum(b0 * r - (a0 - 1) * np.log(r))
        pi, r = R.sum(0) / len(y), (a0 - 1 + R.T @ y) / (b0 + R.sum(0))
        out = mod.step(state, data={"y": y})
        np.testing.assert_allclose(float(out["bound"]), bound, rtol=1e-13)
        state = {"pi": out["pi"], "r": out["r"]}
    np.testing.assert_allclose(state["pi"], pi, rtol=1e-12)
    np.testing.assert_allclose(state["r"], r, rtol=1e-12)
    # maximum likelihood (a0 = 1, b0 = 0) with a component no count reads: its M-step is 0/0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(FloatingPointError, match=r"the new r of component 2 \(of 2\) is not a number .*"
                                                     r"a component that no row reads"):
            mod.step(mod.init(pi=np.array([0.5, 0.5]), r=np.array([3.0, 1e4])), data={"y": y}, a0=1.0, b0=0.0)


def test_check_compares_the_em_bound_with_a_sum_of_a_prior_factor_over_the_components(tmp_path):
    """`blr-derive check` of the Poisson-mixture MAP-EM was an internal error (KeyError in
    verify/product.py: the bound's Σ_k (b0 r_k − (a0 − 1) log r_k) sums an expression, not a state, over the
    components); the symbolic program now evaluates it per component, and the bound it compares equals the one
    written by hand from scipy's Poisson log-pmf."""
    from blr_derive.verify.update import compare_update
    mod = _module(tmp_path, "em_poisson_mixture", EM_POISSON)
    recipe, D = derive_record(tmp_path / "em_poisson_mixture.yaml")
    pairs = {name: (got, want) for name, got, want in compare_update(recipe, D, mod, 0)}
    assert {"pi", "r", "bound", "z_p"} <= set(pairs)
    for got, want in pairs.values():
        np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=1e-12, atol=1e-12)
    y = np.array([0.0, 3.0, 7.0, 1.0, 12.0])
    pi, r = np.array([0.2, 0.3, 0.5]), np.array([0.5, 4.0, 10.0])
    out = mod.step(mod.init(pi=pi, r=r), data={"y": y})
    ll = special.logsumexp(np.log(pi) + stats.poisson.logpmf(y[:, None], r), axis=1)
    bound = ll.sum() + special.gammaln(y + 1).sum() - np.sum(0.5 * r - (2.0 - 1) * np.log(r))
    np.testing.assert_allclose(float(out["bound"]), bound, rtol=1e-14)
