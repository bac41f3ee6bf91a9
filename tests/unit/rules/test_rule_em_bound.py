"""Rule ``em_bound`` (Sec. 5.2, Eq. 2): a factorized recipe with point (delta) global blocks and an exact local
E-step returns, from every step, the bound −L(q) at the state the step started from: Σ_n log Σ_z exp(−ℓ_n(z, θ))
minus the global factors at θ, i.e. log p(y, θ) up to the constants the factors drop.

* em_gmm (the components as an array axis) equals scikit-learn's GaussianMixture ``score(Y)·N`` and scipy's
  logsumexp of the mixture density written here, once the −(N·P/2)·log 2π the factor drops is put back (1e-9);
* EM never decreases it (30 iterations, K = 2 and 5);
* em_gmm_unrolled (the minimal categorical, the last component implied) gives the same value, and the jax modules
  the numpy ones';
* a recipe of its own (MAP-EM of a Poisson mixture with gamma priors on the rates: a global factor) equals scipy's
  Poisson and gamma log-densities of the same model (minus the log y! and the gamma normalizers the recipe drops),
  and increases along the run;
* no EM bound where it does not apply (SVI and VMP: global blocks that are not points; VMP has the mean-field
  bound instead, rule mean_field_bound).
"""
import numpy as np
import pytest
import scipy.special
import scipy.stats

from blr_derive.api import derive_file, generate
from conftest import CATALOG, load_generated, load_module_from_path


def mixture_data(K, P, N, seed):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=4.0, size=(K, P))
    Y = centers[rng.integers(K, size=N)] + rng.normal(size=(N, P))
    w0 = rng.dirichlet(np.full(K, 5.0))
    m0 = Y[rng.choice(N, K, replace=False)]
    A = rng.normal(size=(K, P, P))
    L0 = np.einsum("kab,kcb->kac", A, A) / P + 0.5 * np.eye(P)
    return Y, w0, m0, L0


def log_likelihood(Y, w, m, L):
    """log p(Y | w, m, L) of a Gaussian mixture with precisions L, from scipy's densities."""
    comps = np.stack([np.log(w[k]) + scipy.stats.multivariate_normal(m[k], np.linalg.inv(L[k])).logpdf(Y)
                      for k in range(len(w))])
    return scipy.special.logsumexp(comps, axis=0).sum()


@pytest.mark.parametrize("K, P, N", [(2, 2, 200), (5, 3, 400)])
def test_em_gmm_bound_is_the_log_likelihood_and_never_decreases(K, P, N):
    from sklearn.mixture import GaussianMixture
    mod = load_generated("em_gmm")
    Y, w, m, L = mixture_data(K, P, N, K)
    state = mod.init(pi=w, m=m, L=L)
    bounds = []
    for it in range(30):
        out = mod.step(state, data={"y": Y})
        loglik = out["bound"] - N * P / 2 * np.log(2 * np.pi)
        if it in (0, 1, 29):
            want = log_likelihood(Y, state["pi"], state["m"], state["L"])
            assert abs(loglik - want) < 1e-9 * abs(want)
            gm = GaussianMixture(K, covariance_type="full")
            gm.weights_, gm.means_ = state["pi"], state["m"]
            gm.precisions_cholesky_ = np.linalg.cholesky(state["L"])
            assert abs(loglik - gm.score(Y) * N) < 1e-9 * abs(want)
        bounds.append(float(out["bound"]))
        state = {name: out[name] for name in mod.STATE}
    steps = np.diff(bounds)
    assert steps.min() > -1e-9 * abs(bounds[-1])          # EM's theorem: never down
    assert bounds[-1] - bounds[0] > 10.0                   # and it moved


def test_unrolled_and_jax_give_the_same_bound(x64):
    K, P, N = 3, 2, 150
    Y, w, m, L = mixture_data(K, P, N, 7)
    arrays = load_generated("em_gmm")
    want = arrays.step(arrays.init(pi=w, m=m, L=L), data={"y": Y})["bound"]
    unrolled = load_generated("em_gmm_unrolled")
    state = unrolled.init(pi1=w[0], pi2=w[1], **{f"m{k + 1}": m[k] for k in range(K)},
                          **{f"L{k + 1}": L[k] for k in range(K)})
    got = unrolled.step(state, data={"y": Y})["bound"]
    assert abs(got - want) < 1e-10 * abs(want)
    assert abs(want - (log_likelihood(Y, w, m, L) + N * P / 2 * np.log(2 * np.pi))) < 1e-9 * abs(want)
    for name in ("em_gmm", "em_gmm_unrolled"):
        jmod = load_generated(name, "jax")
        s = jmod.init(pi=w, m=m, L=L) if name == "em_gmm" else jmod.init(**state)
        assert abs(float(jmod.step(s, data={"y": Y})["bound"]) - want) < 1e-10 * abs(want)


POISSON_MIXTURE = """
name: poisson_mixture_map
title: MAP-EM for a Poisson mixture with gamma priors on the rates
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


def test_a_map_em_recipe_of_its_own_with_a_prior_factor(tmp_path):
    path = tmp_path / "pmix.yaml"
    path.write_text(POISSON_MIXTURE, encoding="utf-8")
    (tmp_path / "pmix.py").write_text(generate(path, "numpy"), encoding="utf-8")
    mod = load_module_from_path(tmp_path / "pmix.py")
    rng = np.random.default_rng(3)
    y = np.concatenate([rng.poisson(2.0, 60), rng.poisson(9.0, 90), rng.poisson(20.0, 50)]).astype(float)
    a, b = 2.5, 0.3
    state = mod.init(w=np.array([0.2, 0.3, 0.5]), r=np.array([1.0, 5.0, 12.0]))
    bounds = []
    for it in range(25):
        out = mod.step(state, data={"y": y}, a=a, b=b)
        w, r = state["w"], state["r"]
        log_post = (scipy.special.logsumexp(np.log(w)[:, None] + scipy.stats.poisson(r[:, None]).logpmf(y),
                                            axis=0).sum()
                    + scipy.stats.gamma(a, scale=1 / b).logpdf(r).sum())
        dropped = -scipy.special.gammaln(y + 1).sum() + len(r) * (a * np.log(b) - scipy.special.gammaln(a))
        assert abs(out["bound"] + dropped - log_post) < 1e-10 * abs(log_post)
        bounds.append(float(out["bound"]))
        state = {"w": out["w"], "r": out["r"]}
    assert np.diff(bounds).min() > -1e-10 * abs(bounds[-1]) and bounds[-1] > bounds[0] + 1.0


def test_explain_shows_the_step_and_no_bound_without_points():
    _, D = derive_file(CATALOG / "em_gmm.yaml")
    step = next(s for s in D.steps if s.rule == "em_bound")
    assert "log p(y, θ)" in step.text and dict(D.outputs)["bound"] is not None
    _, D = derive_file(CATALOG / "svi.yaml")
    assert "bound" not in dict(D.outputs) and not any(s.rule == "em_bound" for s in D.steps)
    # VMP's global blocks are distributions: its bound is the mean-field one (tests/unit/codegen/test_objective_bounds.py)
    _, D = derive_file(CATALOG / "vmp.yaml")
    assert not any(s.rule == "em_bound" for s in D.steps) and D.bound_rule == "mean_field_bound"
