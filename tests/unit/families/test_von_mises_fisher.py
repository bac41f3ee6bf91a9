"""The von Mises-Fisher on the sphere S^(K-1) (a joint support 'sphere': `check` integrates in hyperspherical
coordinates), in its natural parameters v = κm.  Against scipy.stats.vonmises_fisher (mean E[θ] = A_K(κ)m,
entropy, log-density, Fisher = Cov[θ] from scipy's samples) at K = 3 and 4, and as a BLR candidate: a loss linear in
θ is a conjugate step, v ← (1 − ρ)v − ρc (Eq. 6, h = 1), through the generated numpy module."""
import numpy as np
import pytest
import yaml
from scipy import special, stats

from blr_derive import api
from blr_derive.core.errors import SpecError
from blr_derive.families.library import load_family


def mean_resultant(K, kappa):
    return special.iv(K / 2, kappa) / special.iv(K / 2 - 1, kappa)


@pytest.mark.parametrize("K, seed", [(3, 0), (3, 1), (4, 2)])
def test_von_mises_fisher_matches_scipy(K, seed):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=K) * 1.5
    kappa = np.linalg.norm(v)
    m = v / kappa
    fam = load_family({"name": "von_mises_fisher", "K": K})
    vals = {fam.params[f"v{k + 1}"].symbol: v[k] for k in range(K)}
    law = stats.vonmises_fisher(m, kappa)
    assert [float(fam.evaluate(e, vals)) for e in fam.mu_ord] == pytest.approx(mean_resultant(K, kappa) * m,
                                                                               rel=1e-12, abs=1e-14)
    assert float(fam.evaluate(fam.entropy(), vals)) == pytest.approx(float(law.entropy()), rel=1e-12)
    x = rng.normal(size=K)
    x /= np.linalg.norm(x)
    got = float(fam.evaluate(fam.log_density(), {**vals, **dict(zip(fam.components, x))}))
    assert got == pytest.approx(float(law.logpdf(x)), rel=1e-12)
    # Cov[θ] = (A/κ) I + (1 − A² − (K−1)A/κ) m mᵀ... here against scipy's own samples (independent of A)
    S = law.rvs(400_000, random_state=rng)
    F = np.asarray(fam.fisher_at(dict(zip(fam.lam, v))), dtype=float)
    C = np.cov(S.T)
    se = np.sqrt((np.var(S[:, :, None] * S[:, None, :], axis=0) + 1e-12) / len(S))
    assert np.all(np.abs(F - C) < 6 * se + 1e-4)


def test_a_linear_loss_is_a_conjugate_step():
    rho, c = 0.3, np.array([0.5, -1.0, 2.0])
    mod = api.derive(yaml.safe_dump({"name": "vmf_lin", "family": "von_mises_fisher",
                                     "loss": {"expression": "0.5*theta1 - theta2 + 2*theta3"},
                                     "hyperparameters": {"rho": rho}, "approximations": ["exact"]})).compile("numpy")
    v = np.array([1.2, 0.4, -0.7])
    out = mod.step(mod.init(v1=v[0], v2=v[1], v3=v[2]), rho=rho)
    assert [float(out[f"v{k}"]) for k in (1, 2, 3)] == pytest.approx((1 - rho) * v - rho * c, rel=1e-10)


def test_the_sphere_needs_a_declared_log_partition(tmp_path):
    path = tmp_path / "sph.yaml"
    path.write_text("name: sph\nvariable: {name: x, shape: vector, size: 3}\nsupport: sphere\nparameters:\n"
                    "  a: {domain: real}\nsufficient_statistics: [x3]\nnatural_parameters: [a]\n", encoding="utf-8")
    with pytest.raises(SpecError, match="log_partition must be given for the sphere support"):
        load_family(str(path))


@pytest.mark.parametrize("K, seed", [(3, 4), (4, 5)])
def test_wood_rejection_sampler_draws_the_law(K, seed):
    """Wood's sampler (a rejection step for w = θ·m, then a uniform direction and a Householder reflection):
    unit vectors whose projection on m follows scipy's (two-sample KS against scipy.stats.vonmises_fisher's draws),
    with the mean A_K(κ)m, and an orthogonal part with no preferred direction."""
    from blr_derive.verify.family import _draw_sampler
    rng = np.random.default_rng(seed)
    v = rng.normal(size=K) * 2.0
    kappa = np.linalg.norm(v)
    m = v / kappa
    fam = load_family({"name": "von_mises_fisher", "K": K})
    th = _draw_sampler(fam, {fam.params[f"v{k + 1}"].symbol: v[k] for k in range(K)}, np.random.default_rng(7),
                       100_000).T
    np.testing.assert_allclose(np.linalg.norm(th, axis=1), 1.0, rtol=1e-12)
    ref = stats.vonmises_fisher(m, kappa).rvs(100_000, random_state=np.random.default_rng(8))
    assert stats.ks_2samp(th @ m, ref @ m).pvalue > 1e-4
    se = th.std(axis=0) / np.sqrt(len(th))
    assert np.all(np.abs(th.mean(axis=0) - mean_resultant(K, kappa) * m) < 5 * se)


def test_check_rejects_the_sampler_without_its_acceptance_step(tmp_path):
    from conftest import ROOT
    from blr_derive.verify.family import check_family
    text = (ROOT / "families" / "von_mises_fisher.yaml").read_text(encoding="utf-8")
    wrong = text.replace('  accept: "kap*w + {K-1}*log(1 - x0*w) - cw >= log(u2)"\n', "")
    assert wrong != text
    path = tmp_path / "vmf_wrong.yaml"
    path.write_text(wrong, encoding="utf-8")
    res = {c.name: c for c in check_family(load_family(str(path)), points=2)}
    assert not res["sampler_vs_density"].passed
