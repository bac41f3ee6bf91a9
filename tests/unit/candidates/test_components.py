"""Recipes with a component axis (``components: {index: k, size: K}``, blocks and factors with
``components: true``): the factors are written for one generic component, the engine derives once for it, and the
generated numpy step holds the components as an array axis (catalog/em_gmm.yaml).

* em_gmm equals scikit-learn's GaussianMixture(covariance_type='full') over 20 iterations from the same
  initialization at K = 2, 7, 64 and 256 (float64, 1e-8);
* the derivation does not depend on K (no per-component symbol, one module for every K; its time is measured in
  benchmarks/bench_em.py, not here);
* wrong declarations are one located line each.
"""
import warnings

import numpy as np
import pytest

from blr_derive.api import derive_file
from blr_derive.core.errors import SpecError
from conftest import CATALOG, load_generated


def mixture_data(K, P, N, seed):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=6.0, size=(K, P))
    Y = centers[rng.integers(K, size=N)] + rng.normal(size=(N, P))
    w0 = rng.dirichlet(np.full(K, 5.0))
    m0 = Y[rng.choice(N, K, replace=False)]
    L0 = np.array([np.eye(P)] * K)
    return Y, w0, m0, L0


@pytest.mark.parametrize("K, P, N", [(2, 2, 300), (7, 3, 3000), (64, 2, 20000), (256, 2, 40000)])
def test_em_gmm_equals_sklearn_at_any_number_of_components(K, P, N):
    from sklearn.mixture import GaussianMixture
    mod = load_generated("em_gmm")
    Y, w0, m0, L0 = mixture_data(K, P, N, K)
    state = mod.init(pi=w0, m=m0, L=L0)
    for _ in range(20):
        state = mod.step(state, data={"y": Y})
    gm = GaussianMixture(K, covariance_type="full", max_iter=20, tol=0, reg_covar=0, weights_init=w0,
                         means_init=m0, precisions_init=L0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # ConvergenceWarning: tol=0 never "converges"
        gm.fit(Y)
    assert gm.n_iter_ == 20
    assert state["pi"].shape == (K,) and state["m"].shape == (K, P) and state["L"].shape == (K, P, P)
    np.testing.assert_allclose(state["pi"], gm.weights_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(state["m"], gm.means_, rtol=0, atol=1e-8)
    scale = np.abs(gm.precisions_).max(axis=(1, 2))[:, None, None]
    np.testing.assert_allclose(state["L"] / scale, gm.precisions_ / scale, rtol=0, atol=1e-8)
    # a step's z_p is its E-step, at the parameters it starts from: one more step from the fitted ones gives
    # scikit-learn's predict_proba
    nxt = mod.step(state, data={"y": Y})
    assert nxt["z_p"].shape == (N, K)
    np.testing.assert_allclose(nxt["z_p"], gm.predict_proba(Y), rtol=0, atol=1e-8)


def test_the_derivation_has_no_per_component_symbol():
    """One generic component: the record names m, L, pi and z_p, never m1, L2, ...; the same module runs at
    K = 3 and K = 40."""
    _, D = derive_file(CATALOG / "em_gmm.yaml")
    names = {str(s) for e in [e for _, e in D.local_assign + D.stats + D.assignments] for s in e.free_symbols}
    assert {"pi", "z_p"} <= names | {str(s) for s, _ in D.local_assign}
    assert not any(n[-1].isdigit() and n[:-1] in ("m", "L", "pi", "z_p") for n in names)
    assert D.local_outputs == [("z_p", D.local_outputs[0][1])]
    mod = load_generated("em_gmm")
    for K in (3, 40):
        Y, w0, m0, L0 = mixture_data(K, 2, 2000, 5)
        out = mod.step(mod.init(pi=w0, m=m0, L=L0), data={"y": Y})
        assert out["m"].shape == (K, 2) and out["z_p"].shape == (2000, K)


def test_unrolled_state_names_get_a_message_that_says_what_to_pass():
    mod = load_generated("em_gmm")
    with pytest.raises(TypeError, match=r"components along the first axis \(pi: \(K,\), m: \(K, P\), L: "
                                        r"\(K, P, P\)\).*unknown \['pi1', 'm1'\]"):
        mod.init(pi1=0.5, m1=[0.0, 0.0])


EM = (CATALOG / "em_gmm.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize("old, new, message", [
    ("components: {index: k, size: K, description: mixture components}\n", "",
     "components must be true or false, and true needs the recipe's 'components: {index: k, size: K}'"),
    ("    components: true\n    description: -log", "    description: -log",
     "factor 'likelihood' uses the per-component block 'z': write the term of one component k and mark the "
     "factor components: true"),
    ("z: {family: categorical, components: true", "z: {family: bernoulli, components: true",
     "an exact block over the components is the categorical over them: write family: categorical"),
    ("expression: -z*(log(pi)", "expression: -z**2*(log(pi)",
     "is not linear in the one-hot 'z' of block 'z'"),
    ("size: K,", "size: P,", "components: the size 'P' clashes with another name"),
    ("pi: {variable: {simplex: true}, components: true", "pi: {variable: {simplex: true, shape: vector}, "
     "components: true", "simplex must be true or false (a scalar per component)"),
])
def test_bad_component_declarations_are_located_errors(tmp_path, old, new, message):
    assert old in EM
    path = tmp_path / "em.yaml"
    path.write_text(EM.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(SpecError) as info:
        derive_file(path)
    assert message in str(info.value) and info.value.line is not None, str(info.value)
