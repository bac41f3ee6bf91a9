"""Samplers of variables with named scalar components (a `components` variable or a fixed-size vector): the sampler
is a list with one expression per component, from up to 16 uniform and 16 normal draws.  normal_gamma (τ by the gamma
inverse CDF, θ | τ normal) and dirichlet (normalized gamma draws) against scipy.stats laws; `check` rejects a
component sampler of the wrong law; declaration errors are located; the sampling rules refuse several components."""
import numpy as np
import pytest
import yaml
from scipy import stats

from blr_derive import api
from blr_derive.core.errors import SpecError
from blr_derive.families.library import load_family
from blr_derive.verify.family import _draw_sampler, check_family
from conftest import ROOT

NORMAL_GAMMA = (ROOT / "families" / "normal_gamma.yaml").read_text(encoding="utf-8")


def test_normal_gamma_sampler_draws_the_joint_law():
    """τ ~ Gamma(α, β) (KS against scipy.stats.gamma) and the marginal of θ, a Student t with 2α degrees of
    freedom, location m and scale √(β/(ακ)) (KS against scipy.stats.t)."""
    fam = load_family("normal_gamma")
    P = fam.params
    m, kappa, alpha, beta = 0.4, 2.5, 1.7, 0.8
    th, tau = _draw_sampler(fam, {P["m"].symbol: m, P["kappa"].symbol: kappa, P["alpha"].symbol: alpha,
                                  P["beta"].symbol: beta}, np.random.default_rng(1), 200_000)
    assert stats.kstest(tau, stats.gamma(alpha, scale=1 / beta).cdf).pvalue > 1e-4
    assert stats.kstest(th, stats.t(2 * alpha, loc=m, scale=np.sqrt(beta / (alpha * kappa))).cdf).pvalue > 1e-4


@pytest.mark.parametrize("K", [3, 7, 16])
def test_dirichlet_sampler_matches_scipy(K):
    fam = load_family({"name": "dirichlet", "K": K})
    a = np.exp(np.random.default_rng(K).normal(size=K) * 0.7)
    th = _draw_sampler(fam, {fam.params[f"a{k + 1}"].symbol: a[k] for k in range(K)}, np.random.default_rng(2),
                       100_000)
    law = stats.dirichlet(a)
    assert th.shape == (K, 100_000)
    np.testing.assert_allclose(th.sum(axis=0), 1.0, rtol=1e-13)
    z = np.abs(th.mean(axis=1) - law.mean()) / np.sqrt(law.var() / th.shape[1])
    assert np.all(z < 5)
    assert stats.kstest(th[0], stats.beta(a[0], a.sum() - a[0]).cdf).pvalue > 1e-4     # the marginal law


def test_check_passes_them_and_rejects_a_wrong_component(tmp_path):
    for name in ("normal_gamma", "dirichlet"):
        res = {c.name: c for c in check_family(load_family(name), points=2)}
        assert res["sampler_vs_density"].passed
    wrong = NORMAL_GAMMA.replace("m + z/sqrt(kappa*tau_s)", "m + z/sqrt(tau_s)")
    assert wrong != NORMAL_GAMMA
    path = tmp_path / "ng_wrong.yaml"
    path.write_text(wrong, encoding="utf-8")
    res = {c.name: c for c in check_family(load_family(str(path)), points=2)}
    assert not res["sampler_vs_density"].passed


def test_a_list_of_the_wrong_length_is_a_located_error(tmp_path):
    text = NORMAL_GAMMA.replace("value: [m + z/sqrt(kappa*tau_s), tau_s]", "value: [tau_s]")
    path = tmp_path / "ng_short.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError, match=r"sampler: give a list of 2 expressions, one per component \(theta, tau\)"):
        load_family(str(path))


def test_the_sampling_rules_refuse_several_components():
    with pytest.raises(SpecError, match="samples 2 components"):
        api.derive(yaml.safe_dump({"name": "ng_sf", "family": "normal_gamma", "loss": "abstract",
                                   "hyperparameters": {"rho": 0.1},
                                   "approximations": [{"score_function": {"samples": 4}}]}))
