"""Size parameters (blr_derive/core/sizes.py): the built-in categorical and Dirichlet families at K = 2, 4, 5 pass
the numerical checks of `blr-derive check`, and em_gmm instantiated at K = 4 is four-component EM, equal to
scikit-learn's GaussianMixture.  Bad sizes are one-line located errors (exit status 2)."""
import io
import warnings
from contextlib import redirect_stderr

import numpy as np
import pytest
import scipy.special as sps
from scipy.stats import dirichlet as scipy_dirichlet

from blr_derive.api import generate
from blr_derive.verify.check import check_family
from blr_derive.cli import main
from blr_derive.core.errors import SpecError
from blr_derive.families.library import load_family
from blr_derive.candidates.load import load_recipe
from conftest import CATALOG, load_module_from_path


# ------------------------------------------------------------------------------------------- families
@pytest.mark.parametrize("name,K", [("categorical", 2), ("categorical", 4), ("categorical", 5),
                                    ("dirichlet", 2), ("dirichlet", 4)])
@pytest.mark.slow
def test_sized_family_passes_the_numeric_checks(name, K):
    """μ vs ∇A (quadrature/summation, finite differences, Monte Carlo), the Fisher information, the entropy
    and both round trips, as `blr-derive check` runs them, at the instantiated K."""
    fam = load_family({"name": name, "K": K})
    assert fam.sizes == (("K", K),)
    assert len(fam.T) == (K - 1 if name == "categorical" else K)
    checks = check_family(fam, points=2)
    assert {c.name for c in checks} >= {"normalization", "mu_vs_finite_differences", "entropy_vs_quadrature",
                                        "round_trip_natural", "round_trip_expectation", "fisher_vs_covariance"}
    assert all(c.passed for c in checks), [(c.name, c.value) for c in checks if not c.passed]


def test_dirichlet_five_against_closed_forms():
    """At K = 5 the simplex has four free coordinates, past what the checker's quadrature grid integrates
    accurately (it reports 1e-7 normalization error there, taking ~20 s): check μ, A and the entropy against
    the Dirichlet's closed forms instead, and both round trips."""
    fam = load_family({"name": "dirichlet", "K": 5})
    a = np.array([0.7, 1.3, 2.0, 3.5, 0.9])
    vals = {fam.params[f"a{k + 1}"].symbol: a[k] for k in range(5)}
    mu = np.array([float(fam.evaluate(m, vals)) for m in fam.mu_ord])
    np.testing.assert_allclose(mu, sps.digamma(a) - sps.digamma(a.sum()), rtol=0, atol=1e-12)   # E[log θ_k]
    lam = {l: float(fam.evaluate(e, vals)) for l, e in zip(fam.lam, fam.eta)}
    log_beta = sps.gammaln(a).sum() - sps.gammaln(a.sum())
    assert abs(float(fam.evaluate(fam.A, lam)) - log_beta) < 1e-12
    assert abs(float(fam.evaluate(fam.entropy(), vals)) - scipy_dirichlet(a).entropy()) < 1e-12
    back = {p: float(fam.evaluate(e, lam)) for p, e in fam.ord_from_nat.items()}
    np.testing.assert_allclose([back[fam.params[f"a{k + 1}"].symbol] for k in range(5)], a, rtol=0, atol=1e-12)
    ordinary = fam.numeric_ord_from_mu({f"mu{k + 1}": mu[k] for k in range(5)})
    np.testing.assert_allclose([float(ordinary[fam.params[f"a{k + 1}"].symbol]) for k in range(5)], a,
                               rtol=1e-9, atol=0)


def test_default_size_is_three_and_instances_are_cached_per_size():
    cat = load_family("categorical")
    assert cat is load_family({"name": "categorical", "K": 3})          # the default, one derivation
    assert [str(t) for t in cat.T] == ["theta1", "theta2"]
    assert str(cat.eta[0]) == "log(p1/(-p1 - p2 + 1))"
    assert cat.params["p2"].description.text == "probability of class 2 (class 3 has 1 - p1 - p2)"
    five = load_family({"name": "categorical", "K": 5})
    assert five is load_family({"name": "categorical", "K": 5}) and five is not cat
    assert list(five.params) == ["p1", "p2", "p3", "p4"]
    dir3 = load_family("dirichlet")
    assert str(dir3.A) == str(load_family({"name": "dirichlet", "K": 3}).A)
    assert dir3.description.text.startswith("Dirichlet(a1, a2, a3) on the probability simplex with K = 3 ")


# ------------------------------------------------------------------------------------------- EM at K = 4
def gmm4_data(seed=5):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0], [6.0, 1.0], [1.0, 6.0], [6.0, 6.5]])
    covs = [np.array([[1.0, 0.3], [0.3, 0.5]]), np.array([[0.6, -0.2], [-0.2, 1.2]]), 0.8 * np.eye(2),
            np.array([[0.9, 0.1], [0.1, 0.7]])]
    Y = np.concatenate([rng.multivariate_normal(c, S, size=n) for c, S, n in zip(centers, covs, (50, 70, 60, 45))])
    means0 = centers + rng.normal(size=(4, 2))
    return Y, np.array([0.2, 0.3, 0.25, 0.25]), means0, np.array([np.eye(2)] * 4)


def em4_equals_sklearn(mod, iterations=10):
    from sklearn.mixture import GaussianMixture
    Y, w0, m0, L0 = gmm4_data()
    state = mod.init(pi1=w0[0], pi2=w0[1], pi3=w0[2], **{f"m{k + 1}": m0[k] for k in range(4)},
                     **{f"L{k + 1}": L0[k] for k in range(4)})
    for _ in range(iterations):
        state = mod.step(state, data={"y": Y})
    gm = GaussianMixture(4, covariance_type="full", max_iter=iterations, tol=0, reg_covar=0, weights_init=w0,
                         means_init=m0, precisions_init=L0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # ConvergenceWarning: tol=0 never "converges"
        gm.fit(Y)
    assert gm.n_iter_ == iterations
    weights = [state["pi1"], state["pi2"], state["pi3"], 1 - state["pi1"] - state["pi2"] - state["pi3"]]
    np.testing.assert_allclose(weights, gm.weights_, rtol=0, atol=1e-8)
    np.testing.assert_allclose([state[f"m{k + 1}"] for k in range(4)], gm.means_, rtol=0, atol=1e-8)
    np.testing.assert_allclose([state[f"L{k + 1}"] for k in range(4)], gm.precisions_, rtol=0, atol=1e-8)
    assert min(gm.weights_) > 0.15            # a real four-component fit
    return state


@pytest.mark.slow
def test_em_gmm_at_four_components_equals_sklearn(tmp_path):
    """The catalog recipe is a template over K (K copies of the m_k, L_k blocks, z categorical at K):
    `--size K=4` gives four-component EM, equal to GaussianMixture(4, 'full', tol=0, reg_covar=0) over 10
    iterations from the same initialization to 1e-8.  A recipe variant in tmp_path that sets the size as its
    default derives the same code."""
    code = generate(CATALOG / "em_gmm_unrolled.yaml", "numpy", sizes={"K": 4})
    assert "from recipe 'em_gmm_unrolled' (catalog/em_gmm_unrolled.yaml --size K=4)" in code.splitlines()[0]
    assert "(K = 4 components, full covariances)" in code
    out = tmp_path / "em_gmm4.py"
    out.write_text(code, encoding="utf-8")
    em4_equals_sklearn(load_module_from_path(out))
    variant = tmp_path / "em_gmm_k4.yaml"
    variant.write_text((CATALOG / "em_gmm_unrolled.yaml").read_text(encoding="utf-8").replace(
        "K: {default: 3, min: 2,", "K: {default: 4, min: 2,"), encoding="utf-8")
    recipe = load_recipe(variant)
    assert [b.name for b in recipe.blocks] == ["z", "pi", "m1", "m2", "m3", "m4", "L1", "L2", "L3", "L4"]
    assert recipe.blocks[0].family is load_family({"name": "categorical", "K": 4})
    body = generate(variant, "numpy").split("\n", 2)[2]
    assert body == code.split("\n", 2)[2]


KSPECIFIC = """name: em_two
title: two-component EM naming the categorical family at K = 2
dimension: P
plate:
  data:
    y: {shape: [P]}
blocks:
  z: {family: {name: categorical, K: 2}, local: true, approximations: [exact]}
  pi: {variable: {components: [pi1]}, approximations: [delta]}
  m1: {variable: {shape: vector}, approximations: [delta]}
  m2: {variable: {shape: vector}, approximations: [delta]}
  L1: {variable: {shape: matrix, symmetric: true}, approximations: [delta]}
  L2: {variable: {shape: matrix, symmetric: true}, approximations: [delta]}
factors:
  likelihood:
    plate: true
    expression: >
      -z1*(log(pi1) + logdet(L1)/2 - (y - m1).T*L1*(y - m1)/2)
      - z2*(log(1 - pi1) + logdet(L2)/2 - (y - m2).T*L2*(y - m2)/2)
"""


def test_a_k_specific_recipe_names_the_family_size(tmp_path):
    """Without templates: a block names `{name: categorical, K: 2}`; its E-step gives the responsibilities."""
    from scipy.stats import multivariate_normal
    path = tmp_path / "em_two.yaml"
    path.write_text(KSPECIFIC, encoding="utf-8")
    out = tmp_path / "em_two.py"
    out.write_text(generate(path, "numpy"), encoding="utf-8")
    mod = load_module_from_path(out)
    Y, _, m0, L0 = gmm4_data()
    state = mod.step(mod.init(pi1=0.4, m1=m0[0], m2=m0[1], L1=L0[0], L2=L0[1]), data={"y": Y})
    dens = np.stack([w * multivariate_normal(m, np.linalg.inv(L)).pdf(Y)
                     for w, m, L in zip((0.4, 0.6), m0[:2], L0[:2])], axis=1)
    np.testing.assert_allclose(state["z_p1"], dens[:, 0] / dens.sum(axis=1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(state["pi1"], (dens[:, 0] / dens.sum(axis=1)).mean(), rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------- errors
def line_of(text, needle):
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


@pytest.mark.parametrize("value,message", [
    ("1", "size K = 1 is outside 2..16"),
    ("a", "size K must be an integer from 2 to 16, got 'a'"),
    ("1000000", "size K = 1000000 is outside 2..16"),
    ("2.5", "size K must be an integer from 2 to 16, got 2.5"),
    ("true", "size K must be an integer from 2 to 16, got True"),
])
def test_bad_family_size_in_a_recipe_is_a_located_error(tmp_path, value, message):
    text = KSPECIFIC.replace("{name: categorical, K: 2}", f"{{name: categorical, K: {value}}}")
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as ei:
        load_recipe(path)
    assert ei.value.message == message
    assert ei.value.file == str(path) and ei.value.line == line_of(text, "categorical, K:")
    err = io.StringIO()
    with redirect_stderr(err):
        assert main([str(path), "-o", str(tmp_path / "out.py")]) == 2
    assert err.getvalue() == f"blr-derive: error: {path}:{line_of(text, 'categorical, K:')}: {message}\n"
    assert not (tmp_path / "out.py").exists()


def test_unknown_size_and_unsized_family_are_located_errors(tmp_path):
    for old, new, message in [
        ("{name: categorical, K: 2}", "{name: categorical, J: 2}", "'J' is not a size of the family 'categorical' "
                                                                    "(sizes: K)"),
        ("{name: categorical, K: 2}", "{name: poisson, K: 2}", "'K' is not a size of the family 'poisson' "
                                                               "(it declares no sizes)"),
    ]:
        text = KSPECIFIC.replace(old, new)
        path = tmp_path / "bad.yaml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(SpecError) as ei:
            load_recipe(path)
        assert (ei.value.message, ei.value.line) == (message, line_of(text, new))


@pytest.mark.parametrize("arg,message", [
    ("K=1", "catalog/em_gmm_unrolled.yaml:{line}: size K = 1 is outside 2..7"),
    ("K=a", "<command line>: size K must be a positive integer, got 'a'"),
    ("K=1000000", "catalog/em_gmm_unrolled.yaml:{line}: size K = 1000000 is outside 2..7"),
    ("J=2", "catalog/em_gmm_unrolled.yaml:{sizes}: 'J' is not a size of the recipe (sizes: K)"),
    ("K", "<command line>: --size takes NAME=N (e.g. K=5), got 'K'"),
    # '²'.isdigit() holds and int('²') raised: an internal error (exit 3)
    ("K=²", "<command line>: size K must be a positive integer, got '²'"),
    ("K=٣", "<command line>: size K must be a positive integer, got '٣'"),
    # ten digits or more: said 'must be a positive integer' of a positive integer
    ("K=1000000000", "<command line>: size K = 1000000000 is too large: a size is at most 64 (see 'sizes' in "
                     "docs/family-format.md)"),
    ("K=" + "9" * 5000, "<command line>: size K = " + "9" * 80 + "… is too large: a size is at most 64 (see 'sizes' "
                        "in docs/family-format.md)"),
])
def test_bad_size_on_the_command_line_is_one_line_exit_2(tmp_path, arg, message):
    text = (CATALOG / "em_gmm_unrolled.yaml").read_text(encoding="utf-8")
    msg = message.format(line=line_of(text, "  K: {default"), sizes=line_of(text, "sizes:"))
    err = io.StringIO()
    with redirect_stderr(err):
        assert main([str(CATALOG / "em_gmm_unrolled.yaml"), "--size", arg, "-o", str(tmp_path / "o.py")]) == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("blr-derive: error: ") and lines[0].endswith(msg)
    assert not (tmp_path / "o.py").exists()


SIZED_FAMILY = """name: cat_t
sizes:
  K: {default: 3, min: 2, max: 6}
variable: {name: theta, shape: vector, size: "{K}"}
support: categorical
parameters:
  "p{k} for k in 1..K-1": {domain: simplex}
sufficient_statistics:
  - "theta{k} for k in 1..K-1"
natural_parameters:
  - "log(p{k}/(1 - {- j in 1..K-1: p{j}})) for k in 1..K-1"
"""


@pytest.mark.parametrize("old,new,message", [
    ("theta{k} for", "theta{J} for", "unknown size or index 'J' in 'J' (known: K, k)"),
    ("theta{k} for", "theta{k/2} for", "bad size expression 'k/2' (integers, sizes, loop indices, + - * and "
                                       "parentheses only)"),
    ("theta{k} for", "theta{k for", "unclosed '{' in 'theta{k'"),
    ("{- j in 1..K-1: p{j}}", "{- j in 2..1: p{j}}", "empty range j in 2..1 (2..1)"),
    ("max: 6}", "max: 99}", "size 'K': max must be an integer from 1 to 64"),
    ("default: 3,", "default: 9,", "size 'K': default 9 is outside 2..6"),
    ("p{k} for k in 1..K-1", "p{k} for K in 1..K-1", "loop index 'K' shadows a size or an outer index"),
])
def test_bad_templates_are_located_errors(tmp_path, old, new, message):
    text = SIZED_FAMILY.replace(old, new)
    path = tmp_path / "cat_t.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as ei:
        load_family(str(path))
    assert ei.value.message == message
    assert ei.value.file == str(path) and ei.value.line == line_of(text, new.split()[0].rstrip("}"))


def test_a_sized_family_file_in_a_recipe_directory(tmp_path):
    """A family file of one's own declares sizes too; the recipe names it by path with the size."""
    (tmp_path / "cat_t.yaml").write_text(SIZED_FAMILY, encoding="utf-8")
    fam = load_family({"name": "cat_t.yaml", "K": 4}, tmp_path)
    assert [str(t) for t in fam.T] == ["theta1", "theta2", "theta3"]
    assert all(c.passed for c in check_family(fam, points=1))
    assert load_family("cat_t.yaml", tmp_path).sizes == (("K", 3),)


@pytest.mark.slow
def test_svi_at_four_components_full_batch_is_one_cavi_sweep(tmp_path):
    """svi is a template over K too: at K = 4 (Dirichlet and categorical at K = 4, four Gaussian blocks), a
    full-batch step with rho = 1 is one CAVI sweep of the four-component Bayesian mixture (the hand-written
    sweep of tests/unit/candidates/test_factorized.py) to 1e-12."""
    from references.bgmm import SVI_HP, cavi_bgmm_sweep
    out = tmp_path / "svi4.py"
    out.write_text(generate(CATALOG / "svi_unrolled.yaml", "numpy", sizes={"K": 4}), encoding="utf-8")
    mod = load_module_from_path(out)
    rng = np.random.default_rng(1)
    y = rng.permutation(np.concatenate([rng.normal(c, 1.0, size=n) for c, n in zip((-6.0, -1.5, 2.0, 6.0),
                                                                                    (40, 60, 50, 45))]))
    a, m, s = np.full(4, 2.0), np.array([-3.0, -1.0, 1.0, 3.0]), np.ones(4)
    state = mod.init(**{f"w_a{k + 1}": a[k] for k in range(4)}, **{f"mu{k + 1}_m": m[k] for k in range(4)},
                     **{f"mu{k + 1}_s": s[k] for k in range(4)})
    for _ in range(5):
        state = mod.step(state, data={"y": y}, N=len(y), forgetting=0.0, **SVI_HP)
        a, m, s, r = cavi_bgmm_sweep(y, a, m, s, **SVI_HP)
        np.testing.assert_allclose([state[f"w_a{k + 1}"] for k in range(4)], a, rtol=1e-12, atol=0)
        np.testing.assert_allclose([state[f"mu{k + 1}_m"] for k in range(4)], m, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose([state[f"mu{k + 1}_s"] for k in range(4)], s, rtol=1e-12, atol=0)
        np.testing.assert_allclose(state["z_p3"], r[:, 2], rtol=0, atol=1e-12)


@pytest.mark.slow
def test_check_command_takes_a_size(capsys):
    """`blr-derive check families/categorical.yaml --size K=5` checks the family at K = 5; a size the family
    does not declare is a located one-line error (exit 2)."""
    fam_file = str(CATALOG.parent / "families" / "categorical.yaml")
    assert main(["check", fam_file, "--size", "K=5", "--points", "1"]) == 0
    out = capsys.readouterr().out
    assert f"check family 'categorical' ({fam_file}, K = 5)" in out and "all 17 checks passed" in out
    # the hunt's checks at the hard points run at K = 5 too, and so do the generated modules' maps
    assert all(f"  {name} " in out for name in ("hard_mu", "hard_fisher", "generated_numpy", "generated_jax"))
    assert main(["check", fam_file, "--size", "J=5"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"blr-derive: error: {fam_file}:6: 'J' is not a size of the family 'categorical' (sizes: K)"]


def test_python_api_names_a_size():
    from blr_derive import api as blr
    assert blr.family({"name": "categorical", "K": 5}) is load_family({"name": "categorical", "K": 5})
    with pytest.raises(SpecError, match=r"size K = 17 is outside 2\.\.16"):
        blr.family({"name": "categorical", "K": 17})


@pytest.mark.parametrize("new,message", [
    ('"{+ a in 1..4000: {+ b in 1..4000: p}}"', "the templates expand to more than 1000000 characters or 100000 "
                                               "entries"),
    ('"{' + "(" * 1900 + "K" + ")" * 1900 + '}"', "templates nested too deeply"),
    ('"{K}' + " " * 4000 + '"', "a template string is at most 4000 characters"),
    ('"p{k} for k in 1..100000"', "range k in 1..100000 is too long"),
])
def test_templates_cannot_blow_up(tmp_path, new, message):
    """Untrusted templates are bounded: nested repetitions, deep nesting and long strings are located errors
    (no memory blow-up, no RecursionError traceback)."""
    text = SIZED_FAMILY.replace('size: "{K}"', f"size: {new}") if "for k" not in new else \
        SIZED_FAMILY.replace('"p{k} for k in 1..K-1"', new)
    path = tmp_path / "cat_t.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as ei:
        load_family(str(path))
    assert ei.value.message == message
    assert ei.value.line == line_of(text, "variable:" if "for k" not in new else "p{k} for")


@pytest.mark.parametrize("K", [2, 5])
def test_dirichlet_categorical_posterior_at_other_sizes(tmp_path, K):
    """A plain (one-family) recipe is a template over K too: at K = 2 and 5 one step with ρ = 1 is the
    closed-form Dirichlet posterior a_k = a0_k + c_k (Sec. 5.1)."""
    out = tmp_path / f"dc{K}.py"
    out.write_text(generate(CATALOG / "dirichlet_categorical_unrolled.yaml", "numpy", sizes={"K": K}), encoding="utf-8")
    mod = load_module_from_path(out)
    c = np.bincount(np.random.default_rng(K).integers(0, K, size=60), minlength=K)
    a0 = np.linspace(0.5, 2.5, K)
    st = mod.step(mod.init(**{f"a{k + 1}": 1.0 for k in range(K)}), data={f"c{k + 1}": c[k] for k in range(K)},
                  **{f"a0{k + 1}": a0[k] for k in range(K)})
    np.testing.assert_allclose([st[f"a{k + 1}"] for k in range(K)], a0 + c, rtol=1e-14)


def test_a_template_may_expand_past_the_expression_limit_but_a_written_expression_may_not(tmp_path):
    """A size template's output is accepted up to 50 000 characters (its template is at most 4000 and the sizes are
    bounded by the declaration): the multinomial's E[log h] at K = 4, n = 10 is ~9000.  An expression written out by
    hand stays limited to 2000 characters, and a template that expands further is a located error."""
    fam = load_family({"name": "multinomial", "K": 4, "n": 10})
    assert len(fam.T) == 3
    long_sum = " + ".join(f"x1*{k}" for k in range(400))            # > 2000 characters, written out
    path = tmp_path / "long.yaml"
    path.write_text("name: long\nvariable: {name: x, shape: vector, size: 2}\nsupport: counts summing to 3\n"
                    "parameters:\n  a: {domain: real}\nsufficient_statistics: [x1]\nnatural_parameters: [a]\n"
                    f"base_measure: exp({long_sum})\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"long.yaml:8: base_measure: expression longer than 2000 characters"):
        load_family(str(path))
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: huge\nsizes:\n  K: {default: 60, min: 2, max: 60}\n"
                    "variable: {name: x, shape: vector, size: 2}\nsupport: counts summing to 3\n"
                    "parameters:\n  a: {domain: real}\nsufficient_statistics: [x1]\nnatural_parameters: [a]\n"
                    "base_measure: \"exp({+ i in 1..K: {+ j in 1..K: x1*x2*x1*x2*x1*x2*x1*x2*x1*x2*x1*x2}})\"\n",
                    encoding="utf-8")
    with pytest.raises(SpecError, match=r"huge.yaml:10: .*longer than 50000 characters"):
        load_family(str(huge))
