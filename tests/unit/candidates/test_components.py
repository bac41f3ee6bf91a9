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


@pytest.mark.parametrize("K, P, N", [(2, 2, 300), (7, 3, 3000), (64, 2, 20000), (256, 2, 20000)])
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
    ("z: {family: categorical, components: true", "z: {family: dirichlet, components: true",
     "the Dirichlet over the components is a global block"),
    ("z: {family: categorical, components: true", "z: {family: gaussian_full, components: true",
     "family 'gaussian_full' has vector or matrix statistics"),
    ("z: {family: categorical, components: true", "z: {family: normal_gamma, components: true",
     "a per-component family block needs a family of one scalar variable ('normal_gamma' is not)"),
    ("expression: -z*(log(pi)", "expression: -z**2*(log(pi)",
     "is not linear in the one-hot 'z' of block 'z'"),
    ("size: K,", "size: P,", "components: the size 'P' clashes with another name"),
    ("L: {variable: {shape: matrix, symmetric: true}, components: true,",
     "L: {variable: {shape: matrix, symmetric: true},",
     "uses the block 'L', which has no component axis (a block shared by all components, e.g. a tied covariance, "
     "is not supported yet)"),
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


def test_svi_equals_the_unrolled_recipe_step_for_step():
    """The same SVI (Dirichlet and Gaussian blocks with a Robbins-Monro rate, minibatches scaled by N/B) derived once
    for a generic component and unrolled at K = 3: 12 minibatch steps agree to 1e-12."""
    new, old = load_generated("svi"), load_generated("svi_unrolled")
    rng = np.random.default_rng(0)
    y = np.concatenate([rng.normal(c, 1.0, 200) for c in (-4.0, 0.0, 5.0)])
    a, m, s = np.array([1.0, 2.0, 3.0]), np.array([-1.0, 0.5, 2.0]), np.array([1.0, 1.5, 0.7])
    so = old.init(**{f"w_a{k + 1}": a[k] for k in range(3)}, **{f"mu{k + 1}_m": m[k] for k in range(3)},
                  **{f"mu{k + 1}_s": s[k] for k in range(3)})
    sn = new.init(w_a=a, mu_m=m, mu_s=s)
    for _ in range(12):
        batch = y[rng.choice(len(y), 50, replace=False)]
        so = old.step(so, data={"y": batch}, N=len(y))
        sn = new.step(sn, data={"y": batch}, N=len(y))
    np.testing.assert_allclose(sn["w_a"], [so[f"w_a{k}"] for k in (1, 2, 3)], rtol=1e-12)
    np.testing.assert_allclose(sn["mu_m"], [so[f"mu{k}_m"] for k in (1, 2, 3)], rtol=1e-12)
    np.testing.assert_allclose(sn["mu_s"], [so[f"mu{k}_s"] for k in (1, 2, 3)], rtol=1e-12)
    assert int(sn["step"]) == 12


@pytest.mark.parametrize("K", [3, 16, 256])
def test_svi_full_batch_with_unit_rate_is_a_cavi_sweep_at_any_number_of_components(K):
    """Full batch (N = B) and ρ_1 = (1 + 0)^-κ = 1: each step is one CAVI sweep of the hand-written reference
    (tests/references/bgmm.py, Bishop PRML Sec. 10.2); the first step, and 5 steps restarting the counter."""
    from references.bgmm import SVI_HP, cavi_bgmm_sweep
    mod = load_generated("svi")
    rng = np.random.default_rng(K)
    y = rng.normal(scale=3.0 * np.sqrt(K), size=20 * K)
    a, m, s = np.full(K, 1.0) + rng.random(K), rng.normal(scale=3.0 * np.sqrt(K), size=K), np.ones(K)
    state = mod.init(w_a=a, mu_m=m, mu_s=s)
    for _ in range(5):
        state = mod.step({**state, "step": np.asarray(0)}, data={"y": y}, N=len(y), delay=0.0, **SVI_HP)
        a, m, s, r = cavi_bgmm_sweep(y, a, m, s, **SVI_HP)
        np.testing.assert_allclose(state["z_p"], r, rtol=0, atol=1e-12)
        np.testing.assert_allclose(state["w_a"], a, rtol=1e-11)
        np.testing.assert_allclose(state["mu_m"], m, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(state["mu_s"], s, rtol=1e-11)


def test_a_global_block_without_the_axis_next_to_the_components(tmp_path):
    """A recipe with a component axis and a global block that has none (a scalar point estimate in its own
    factor, with a hyperparameter): the generated step equals the derivation's program evaluated with sympy
    component by component (verify.update.compare_update), and the extra block lands at its own minimum."""
    from blr_derive.api import derive_record, generate
    from blr_derive.verify.update import compare_update
    from conftest import load_module_from_path
    text = EM.replace("factors:\n", "  c: {variable: {shape: scalar}, approximations: [delta]}\nfactors:\n", 1)
    text = text.replace("dimension: P\n", "dimension: P\nhyperparameters:\n  c0: {default: 2.0}\n", 1)
    text += "  offset: {expression: (c - c0)**2/2}\n"
    path = tmp_path / "em_c.yaml"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "em_c.py"
    out.write_text(generate(path, "numpy"), encoding="utf-8")
    mod = load_module_from_path(out)
    recipe, D = derive_record(path)
    for seed in (0, 1):
        pairs = compare_update(recipe, D, mod, seed)
        # bound: the EM bound (rule em_bound) with the offset factor at c, compared like the state
        assert {name for name, _, _ in pairs} == {"z_p", "pi", "m", "L", "c", "bound"}
        for _, generated, symbolic in pairs:
            np.testing.assert_allclose(generated, symbolic, rtol=1e-10, atol=1e-12)
    Y, w0, m0, L0 = mixture_data(3, 2, 200, 1)
    st = mod.step(mod.init(pi=w0, m=m0, L=L0, c=0.0), data={"y": Y}, c0=2.5)
    assert st["c"] == pytest.approx(2.5, rel=1e-14)
