"""Factorized (mean-field) candidates, coordinate-wise BLR steps (Sec. 5.2-5.4): EM for a Gaussian
mixture against scikit-learn, VMP against hand-written CAVI, SVI against the full-batch VMP fixed point."""
import warnings

import numpy as np
import pytest

from blr_derive.api import derive_file, derive_record
from conftest import CATALOG, load_generated
from references.bgmm import SVI_HP, cavi_bgmm_sweep


# ------------------------------------------------------------------------------------------------ EM
def gmm_data(seed):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0], [5.0, 1.0], [1.0, 5.0]])
    covs = [np.array([[1.0, 0.3], [0.3, 0.5]]), np.array([[0.6, -0.2], [-0.2, 1.2]]), 0.8 * np.eye(2)]
    Y = np.concatenate([rng.multivariate_normal(c, S, size=n) for c, S, n in zip(centers, covs, (50, 70, 60))])
    means0 = centers + rng.normal(size=(3, 2))
    return Y, np.array([0.3, 0.3, 0.4]), means0, np.array([np.eye(2)] * 3)


@pytest.mark.parametrize("seed", [0, 1])
def test_em_gmm_equals_sklearn_gaussian_mixture(seed):
    """20 EM iterations from the same initialization as GaussianMixture(covariance_type='full', tol=0,
    reg_covar=0, max_iter=20): weights, means and precisions agree to 1e-8 (observed ~1e-13)."""
    from sklearn.mixture import GaussianMixture
    mod = load_generated("em_gmm_unrolled")
    Y, w0, m0, L0 = gmm_data(seed)
    state = mod.init(pi1=w0[0], pi2=w0[1], m1=m0[0], m2=m0[1], m3=m0[2], L1=L0[0], L2=L0[1], L3=L0[2])
    for _ in range(20):
        state = mod.step(state, data={"y": Y})
    gm = GaussianMixture(3, covariance_type="full", max_iter=20, tol=0, reg_covar=0, weights_init=w0,
                         means_init=m0, precisions_init=L0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # ConvergenceWarning: tol=0 never "converges"
        gm.fit(Y)
    assert gm.n_iter_ == 20
    weights = [state["pi1"], state["pi2"], 1 - state["pi1"] - state["pi2"]]
    np.testing.assert_allclose(weights, gm.weights_, rtol=0, atol=1e-8)
    np.testing.assert_allclose([state["m1"], state["m2"], state["m3"]], gm.means_, rtol=0, atol=1e-8)
    np.testing.assert_allclose([state["L1"], state["L2"], state["L3"]], gm.precisions_, rtol=0, atol=1e-8)
    # the local block (E-step) returns the responsibilities of the last step's E-step
    assert state["z_p1"].shape == (len(Y),)
    # the fitted model is a real mixture: each component took about a third of the data
    assert min(gm.weights_) > 0.2


def test_em_gmm_one_step_is_one_em_iteration_with_the_responsibilities():
    """One step: E-step responsibilities r ∝ π_k N(y | m_k, L_k⁻¹) (Eq. 56) then the closed-form M-step."""
    from scipy.stats import multivariate_normal
    mod = load_generated("em_gmm_unrolled")
    Y, w0, m0, L0 = gmm_data(3)
    state = mod.step(mod.init(pi1=w0[0], pi2=w0[1], m1=m0[0], m2=m0[1], m3=m0[2], L1=L0[0], L2=L0[1], L3=L0[2]),
                     data={"y": Y})
    dens = np.stack([w * multivariate_normal(m, np.linalg.inv(L)).pdf(Y) for w, m, L in zip(w0, m0, L0)], axis=1)
    r = dens / dens.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(state["z_p1"], r[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(state["z_p2"], r[:, 1], rtol=0, atol=1e-12)
    nk = r.sum(axis=0)
    np.testing.assert_allclose(state["pi1"], nk[0] / len(Y), rtol=0, atol=1e-12)
    for k in range(3):
        mk = r[:, k] @ Y / nk[k]
        Ck = (r[:, k, None] * (Y - mk)).T @ (Y - mk) / nk[k]
        np.testing.assert_allclose(state[f"m{k + 1}"], mk, rtol=0, atol=1e-12)
        np.testing.assert_allclose(state[f"L{k + 1}"], np.linalg.inv(Ck), rtol=1e-10, atol=1e-10)


def test_em_gmm_derivation_names_blocks_and_approximations():
    _, D = derive_file(CATALOG / "em_gmm_unrolled.yaml")
    md = D.to_markdown()
    assert "| `z` | `categorical` | local (one per plate row) | 1 | `exact` | coordinate-wise" in md
    assert "| `L1` | N(θ_t, I), point estimate | global | 1 | `delta` | coordinate-wise: fixed point" in md
    rules = [s.rule for s in D.steps]
    assert rules[0] == "mean_field"
    assert rules.count("stationarity") == 7 and rules.count("delta") == 7       # pi, m1..m3, L1..L3
    assert "plate_sum" in rules and "factor_messages" in rules
    # coordinate-wise: the precisions use the means of the same step
    assert any("m1_new" in line and line.startswith("L1_new") for line in D.update_lines())


EM_K2 = """name: em_gmm2
title: EM for a two-component Gaussian mixture (inline K = 2 categorical)
dimension: P
plate:
  data:
    y: {shape: [P]}
blocks:
  z:
    family:
      name: categorical2
      variable: {name: theta, shape: vector, size: 2}
      support: categorical
      parameters:
        p1: {domain: simplex}
      sufficient_statistics: [theta1]
      natural_parameters: ["log(p1/(1 - p1))"]
    local: true
    approximations: [exact]
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


def test_em_with_an_inline_two_class_categorical_is_two_component_em(tmp_path):
    """K is the size of the categorical family a recipe names: an inline K = 2 family gives two-component EM,
    equal to GaussianMixture(n_components=2) after 20 iterations."""
    from sklearn.mixture import GaussianMixture

    from blr_derive.api import generate
    from conftest import load_module_from_path
    path = tmp_path / "em_gmm2.yaml"
    path.write_text(EM_K2, encoding="utf-8")
    out = tmp_path / "em_gmm2.py"
    out.write_text(generate(path, "numpy"), encoding="utf-8")
    mod = load_module_from_path(out)
    Y, _, m0, L0 = gmm_data(4)
    Y = Y[Y[:, 1] < 3.0]                               # two of the three clusters
    w0, m0, L0 = np.array([0.4, 0.6]), m0[:2], L0[:2]
    state = mod.init(pi1=w0[0], m1=m0[0], m2=m0[1], L1=L0[0], L2=L0[1])
    for _ in range(20):
        state = mod.step(state, data={"y": Y})
    gm = GaussianMixture(2, covariance_type="full", max_iter=20, tol=0, reg_covar=0, weights_init=w0,
                         means_init=m0, precisions_init=L0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm.fit(Y)
    np.testing.assert_allclose([state["pi1"], 1 - state["pi1"]], gm.weights_, rtol=0, atol=1e-8)
    np.testing.assert_allclose([state["m1"], state["m2"]], gm.means_, rtol=0, atol=1e-8)
    np.testing.assert_allclose([state["L1"], state["L2"]], gm.precisions_, rtol=0, atol=1e-8)


# ----------------------------------------------------------------------------------------------- VMP
def cavi_normal_gamma(y, m, s, a, b, m0, kappa0, a0, b0):
    """One sweep of the CAVI fixed-point updates of Bishop, PRML Sec. 10.1.3 (Eqs. 10.26-10.30), written
    from the book: q(mu) = N(mu_N, 1/lambda_N) first, then q(tau) = Gam(a_N, b_N) with the new q(mu)."""
    N, xbar = len(y), np.mean(y)
    e_tau = a / b
    mu_N = (kappa0 * m0 + N * xbar) / (kappa0 + N)
    lam_N = (kappa0 + N) * e_tau
    a_N = a0 + (N + 1) / 2
    e_sq = np.sum((y - mu_N) ** 2) + N / lam_N                  # E_mu[Σ (x_n - mu)²]
    b_N = b0 + 0.5 * (e_sq + kappa0 * ((mu_N - m0) ** 2 + 1 / lam_N))
    return mu_N, lam_N, a_N, b_N


def test_vmp_equals_handwritten_cavi_iterations():
    mod = load_generated("vmp")
    rng = np.random.default_rng(5)
    y = rng.normal(1.5, 0.7, size=40)
    hp = dict(m0=0.3, kappa0=2.0, alpha0=1.5, beta0=0.8)
    m, s, a, b = 0.0, 1.0, 1.0, 1.0
    state = mod.init(theta_m=m, theta_s=s, tau_alpha=a, tau_beta=b)
    for _ in range(25):
        state = mod.step(state, data={"y": y}, **hp)
        m, s, a, b = cavi_normal_gamma(y, m, s, a, b, hp["m0"], hp["kappa0"], hp["alpha0"], hp["beta0"])
        np.testing.assert_allclose([state["theta_m"], state["theta_s"], state["tau_alpha"], state["tau_beta"]],
                                   [m, s, a, b], rtol=1e-12, atol=0)
    # the fixed point is a real posterior approximation: E[tau] near 1/0.7², the mean near the data mean
    assert abs(state["theta_m"] - (hp["kappa0"] * hp["m0"] + y.sum()) / (hp["kappa0"] + len(y))) < 1e-12
    assert 1.0 < state["tau_alpha"] / state["tau_beta"] < 3.5


def test_vmp_derivation_shows_messages_per_factor():
    _, D = derive_file(CATALOG / "vmp.yaml")
    md = D.to_markdown()
    assert "| `theta` | `gaussian_diag` | global | 1 | `exact` |" in md
    assert "| `tau` | `gamma` | global | 1 | `exact` |" in md
    msgs = [str(lhs) for s in D.steps if s.rule == "exact" for lhs, *_ in s.equations]
    assert any(r"{likelihood} \to \mathrm{tau}" in m for m in msgs)
    assert any(r"{prior\_theta} \to \mathrm{theta}" in m for m in msgs)
    assert not any(r"{prior\_tau} \to \mathrm{theta}" in m for m in msgs)     # no theta in it: no message


VMP_SUMS = """name: vmp_sums
data:
  n: {description: count}
  S1: {}
  S2: {}
hyperparameters: {m0: 0.0, kappa0: 1.0, alpha0: 1.0, beta0: 1.0}
blocks:
  theta: {family: gaussian_diag, approximations: [exact]}
  tau: {family: gamma, approximations: [exact]}
factors:
  likelihood: "tau*(S2 - 2*theta*S1 + n*theta**2)/2 - n*log(tau)/2"
  prior_theta: "kappa0*tau*(theta - m0)**2/2 - log(tau)/2"
  prior_tau: "beta0*tau - (alpha0 - 1)*log(tau)"
"""


def test_plate_sums_equal_declared_summary_data(tmp_path):
    """The same VMP with the data as declared summaries (n, S1, S2; no plate) equals the plate form (Eq. 54)."""
    from blr_derive.api import generate
    from conftest import load_module_from_path
    path = tmp_path / "vmp_sums.yaml"
    path.write_text(VMP_SUMS, encoding="utf-8")
    out = tmp_path / "vmp_sums.py"
    out.write_text(generate(path, "numpy"), encoding="utf-8")
    sums, plate = load_module_from_path(out), load_generated("vmp")
    assert sums.PLATE_DATA == () and "for n in" not in out.read_text(encoding="utf-8")
    y = np.random.default_rng(3).normal(1.0, 2.0, size=12)
    a = b = dict(theta_m=0.1, theta_s=2.0, tau_alpha=1.5, tau_beta=0.7)
    for _ in range(5):
        a = sums.step(sums.init(**{k: a[k] for k in sums.STATE}), data=dict(n=12.0, S1=y.sum(), S2=(y ** 2).sum()))
        b = plate.step(plate.init(**{k: b[k] for k in plate.STATE}), data=dict(y=y))
        for k in sums.STATE:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-13)


# ----------------------------------------------------------------------------------------------- SVI
def svi_data(seed=0, n=(60, 90, 75)):
    rng = np.random.default_rng(seed)
    y = np.concatenate([rng.normal(c, 1.0, size=k) for c, k in zip((-4.0, 0.5, 4.0), n)])
    return rng.permutation(y)


def svi_state(mod, a, m, s):
    return mod.init(w_a1=a[0], w_a2=a[1], w_a3=a[2], mu1_m=m[0], mu2_m=m[1], mu3_m=m[2],
                    mu1_s=s[0], mu2_s=s[1], mu3_s=s[2])


def svi_params(state):
    return (np.array([state["w_a1"], state["w_a2"], state["w_a3"]]),
            np.array([state["mu1_m"], state["mu2_m"], state["mu3_m"]]),
            np.array([state["mu1_s"], state["mu2_s"], state["mu3_s"]]))


A0, M0, S0 = np.array([2.0, 2.0, 2.0]), np.array([-2.0, 0.0, 2.0]), np.array([1.0, 1.0, 1.0])


def vmp_fixed_point(y):
    a, m, s = A0, M0, S0
    for _ in range(200):
        a, m, s, _ = cavi_bgmm_sweep(y, a, m, s, **SVI_HP)
    a2, m2, s2, _ = cavi_bgmm_sweep(y, a, m, s, **SVI_HP)
    assert np.abs(m2 - m).max() < 1e-13          # converged
    return a, m, s


def test_svi_full_batch_with_unit_rate_is_one_cavi_sweep():
    """forgetting = 0 makes rho_t = 1 and the batch the whole data set (N = B): the SVI step is a full-batch
    VMP (CAVI) sweep, equal to the hand-written one to 1e-12."""
    mod = load_generated("svi_unrolled")
    y = svi_data()
    state, (a, m, s) = svi_state(mod, A0, M0, S0), (A0, M0, S0)
    for _ in range(5):
        state = mod.step(state, data={"y": y}, N=len(y), forgetting=0.0, **SVI_HP)
        a, m, s, r = cavi_bgmm_sweep(y, a, m, s, **SVI_HP)
        for got, want in zip(svi_params(state), (a, m, s)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
        np.testing.assert_allclose(state["z_p1"], r[:, 0], rtol=0, atol=1e-12)


def test_svi_robbins_monro_converges_to_the_vmp_fixed_point():
    """Full batch, rho_t = (t + 1)^-0.51 < 1: the damped steps converge to the CAVI fixed point (the error
    falls from ~7e-4 after 100 steps to ~2e-7 after 400)."""
    mod = load_generated("svi_unrolled")
    y = svi_data()
    a_star, m_star, s_star = vmp_fixed_point(y)
    state = svi_state(mod, A0, M0, S0)
    errors = []
    for t in range(1, 401):
        state = mod.step(state, data={"y": y}, N=len(y), delay=1.0, forgetting=0.51, **SVI_HP)
        if t % 100 == 0:
            errors.append(np.abs(svi_params(state)[1] - m_star).max())
    assert int(state["step"]) == 400
    assert errors[0] > 1e-4 and all(e2 < e1 / 2 for e1, e2 in zip(errors, errors[1:]))
    a, m, s = svi_params(state)
    np.testing.assert_allclose(m, m_star, rtol=0, atol=1e-6)
    np.testing.assert_allclose(a, a_star, rtol=1e-6, atol=0)
    np.testing.assert_allclose(s, s_star, rtol=1e-6, atol=0)
    np.testing.assert_allclose(m_star, [-4.0, 0.5, 4.0], atol=0.35)      # the mixture is recovered


def test_svi_minibatches_approach_the_vmp_fixed_point():
    """Minibatches of B = 15 rows scaled by N/B, rho_t = (t + 10)^-0.7: close to the full-batch fixed point."""
    mod = load_generated("svi_unrolled")
    y = svi_data()
    a_star, m_star, _ = vmp_fixed_point(y)
    rng = np.random.default_rng(1)
    state = svi_state(mod, A0, M0, S0)
    for _ in range(400):
        batch = y[rng.choice(len(y), 15, replace=False)]
        state = mod.step(state, data={"y": batch}, N=len(y), delay=10.0, forgetting=0.7, **SVI_HP)
    a, m, _ = svi_params(state)
    np.testing.assert_allclose(m, m_star, rtol=0, atol=0.15)
    np.testing.assert_allclose(a / a.sum(), a_star / a_star.sum(), rtol=0, atol=0.05)
    # every minibatch carries the same scaled count N, so Σa → 3 a0 + N geometrically (Π(1 - rho_t) ~ 1e-6)
    np.testing.assert_allclose(a.sum(), a_star.sum(), rtol=1e-5)


def test_svi_derivation_local_and_global_blocks():
    _, D = derive_file(CATALOG / "svi_unrolled.yaml")
    md = D.to_markdown()
    assert "| `z` | `categorical` | local (one per plate row) | 1 | `exact` |" in md
    assert "| `w` | `dirichlet` | global | robbins_monro(delay=delay, forgetting=forgetting) | `exact` |" in md
    rules = [s.rule for s in D.steps]
    assert "robbins_monro" in rules and "minibatch" in rules
    assert any(line.startswith("batch_scale = N/sum") for line in D.update_lines())


# ------------------------------------------------------------------------------------ reports and errors
def test_factorized_recipes_in_explain_compare_and_check(tmp_path):
    from blr_derive.cli import main
    for name in ("svi", "em_gmm"):         # components as an array axis; vmp: to_markdown above
        for fmt in ("markdown", "latex", "html"):
            out = tmp_path / f"{name}.{fmt}"
            assert main(["explain", str(CATALOG / f"{name}.yaml"), "--format", fmt, "-o", str(out)]) == 0
            assert "Factorized candidate and coordinate-wise BLR steps" in out.read_text(encoding="utf-8")
    out = tmp_path / "cmp.txt"
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["compare", str(CATALOG / "vmp.yaml"), str(CATALOG / "svi_unrolled.yaml")]) == 0
    assert "add robbins_monro" in buf.getvalue() and "add minibatch" in buf.getvalue()


@pytest.mark.slow                   # ~4 s: derives svi and checks its generated step against the derivation
def test_check_of_a_factorized_recipe_names_its_block_families():
    import contextlib
    import io

    from blr_derive.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["check", str(CATALOG / "svi.yaml"), "--points", "1"]) == 0
    assert ("checked one by one (blr-derive check FAMILY): gaussian_diag (the categorical over the components and "
            "the dirichlet over the components: built in, no family file)") in buf.getvalue()
    assert "generated update vs symbolic update" in buf.getvalue() and "has no objective()" in buf.getvalue()


BASE = """name: bad
plate: {data: {y: {}}}
hyperparameters: {s0: 1.0}
blocks:
  z: {family: categorical, local: true, approximations: [exact]}
  mu: {family: gaussian_diag, approximations: [exact]}
factors:
  lik: {plate: true, expression: "z1*(y - mu)**2 + z2*(y + mu)**2"}
  prior: {expression: "s0*mu**2/2"}
"""


@pytest.mark.parametrize("edit, message, line", [
    (("mu: {family: gaussian_diag, approximations: [exact]}", "mu: {family: gaussian_diag, approximations: [delta]}"),
     "declares 'variable', not 'family'", 6),
    (("local: true, approximations: [exact]}", "local: true, approximations: [exact], learning_rate: 0.5}"),
     "needs learning_rate 1", 5),
    (("s0*mu**2/2", "s0*exp(mu)"), "not linear in the sufficient statistics of block 'mu', so the exact rule does "
     "not apply: in the term s0*exp(mu), exp(mu) is not a multiple of a sufficient statistic (mu, mu^2)", 9),
    (("approximations: [exact]}\n  mu", "approximations: [monte_carlo]}\n  mu"), "approximations must be [exact]", 5),
    (("prior: {expression", "prior: {plate: false, expression: \"z1\", x"), None, None),
])
def test_bad_factorized_recipes_are_one_line_errors(tmp_path, edit, message, line):
    from blr_derive.core.errors import SpecError
    text = BASE.replace(*edit)
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        derive_file(path)
    if message is not None:
        assert message in str(exc.value)
        assert exc.value.line == line and str(path) in str(exc.value)
    assert "\n" not in str(exc.value)


def test_local_factor_outside_the_plate_is_rejected(tmp_path):
    from blr_derive.core.errors import SpecError
    path = tmp_path / "bad.yaml"
    path.write_text(BASE.replace('prior: {expression: "s0*mu**2/2"}', 'prior: {expression: "s0*mu**2/2 + z1"}'),
                    encoding="utf-8")
    with pytest.raises(SpecError, match="uses the local block 'z': mark it plate: true"):
        derive_file(path)
    path.write_text(BASE, encoding="utf-8")
    _, D = derive_file(path)             # the valid base recipe derives
    assert [n for n, _ in D.outputs] == ["mu_m", "mu_s"]


def test_svi_message_form_of_eq60_equals_eq58(tmp_path):
    """`messages: true` keeps one natural parameter per factor as state and smooths each with rho_t (Eq. 60);
    started from messages that sum to the same lambda, it is the Eq. 58 step of `svi`, minibatch by minibatch."""
    from blr_derive.api import generate
    from blr_derive.verify.update import compare_update
    from conftest import load_module_from_path
    text = (CATALOG / "svi_unrolled.yaml").read_text(encoding="utf-8").replace("name: svi_unrolled", "name: svi_messages")
    text = text.replace("  w: {family: ", "  w: {messages: true, family: ")
    # svi repeats its mu blocks for k in 1..K (blr_derive/core/sizes.py): mu1 with messages, then mu2..muK
    line = next(ln for ln in text.splitlines() if ln.startswith('  "mu{k} for k in 1..K": {family: '))
    mu1 = line.replace('"mu{k} for k in 1..K": {family: ', "mu1: {messages: true, family: ").replace("{k}", "1")
    text = text.replace(line, mu1 + "\n" + line.replace("1..K", "2..K"))
    path = tmp_path / "svi_messages.yaml"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "svi_messages.py"
    out.write_text(generate(path, "numpy"), encoding="utf-8")
    msg = load_module_from_path(out)
    assert "w_likelihood_msg1" in msg.STATE and "mu1_prior_mu_msg2" in msg.STATE and "mu2_m" in msg.STATE
    recipe, D = derive_record(path)
    for _, got, want in compare_update(recipe, D, msg, 0):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)

    ref = load_generated("svi_unrolled")
    y = svi_data()
    a0, m0, s0 = SVI_HP["a0"], SVI_HP["m0"], SVI_HP["s0"]
    prior_w, prior_mu = [a0 - 1] * 3, [s0 * m0, -s0 / 2]            # the priors' messages (Eq. 54: lambda_0)
    lam_w, lam_mu1 = A0 - 1, [M0[0] * S0[0], -S0[0] / 2]
    st_ref = svi_state(ref, A0, M0, S0)
    st_msg = msg.init(**{f"w_prior_w_msg{i + 1}": prior_w[i] for i in range(3)},
                      **{f"w_likelihood_msg{i + 1}": lam_w[i] - prior_w[i] for i in range(3)},
                      mu1_prior_mu_msg1=prior_mu[0], mu1_prior_mu_msg2=prior_mu[1],
                      mu1_likelihood_msg1=lam_mu1[0] - prior_mu[0], mu1_likelihood_msg2=lam_mu1[1] - prior_mu[1],
                      mu2_m=M0[1], mu2_s=S0[1], mu3_m=M0[2], mu3_s=S0[2])
    rng = np.random.default_rng(2)
    for _ in range(30):
        batch = y[rng.choice(len(y), 20, replace=False)]
        st_ref = ref.step(st_ref, data={"y": batch}, N=len(y), **SVI_HP)
        st_msg = msg.step(st_msg, data={"y": batch}, N=len(y), **SVI_HP)
        for name in ("w_a1", "w_a2", "w_a3", "mu1_m", "mu1_s", "mu2_m", "mu3_s"):
            np.testing.assert_allclose(st_msg[name], st_ref[name], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(st_msg["w_prior_w_msg1"], a0 - 1, rtol=0, atol=1e-15)   # a constant message


def test_factorized_recipe_from_yaml_text_in_the_python_api():
    import blr_derive.api as blr
    d = blr.derive(blr.recipe((CATALOG / "vmp.yaml").read_text(encoding="utf-8")))
    mod = d.compile("numpy")
    y = np.array([0.5, 1.5, 2.0])
    state = mod.step(mod.init(theta_m=0.0, theta_s=1.0, tau_alpha=1.0, tau_beta=1.0), data={"y": y})
    ref = cavi_normal_gamma(y, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0)
    np.testing.assert_allclose([state["theta_m"], state["theta_s"], state["tau_alpha"], state["tau_beta"]], ref,
                               rtol=1e-12)


def test_row_loop_fallback_equals_the_batched_rows(monkeypatch):
    """Per-row programs the row-batched printer cannot express run in a loop over the rows; both agree."""
    from blr_derive.api import generate
    from blr_derive.core.errors import CodegenError
    from blr_derive.codegen.arrays import rows
    from conftest import load_module_from_path
    batched = load_generated("em_gmm_unrolled")
    assert "for n in range(n_rows)" not in (CATALOG / "generated/numpy/em_gmm_unrolled.py").read_text(encoding="utf-8")

    def refuse(self, e):
        raise CodegenError("forced")
    monkeypatch.setattr(rows.RowBatchPrinter, "plate_sum", refuse)
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "em_loop.py"
        out.write_text(generate(CATALOG / "em_gmm_unrolled.yaml", "numpy"), encoding="utf-8")
        assert "for n in range(n_rows)" in out.read_text(encoding="utf-8")
        loop = load_module_from_path(out)
    Y, w0, m0, L0 = gmm_data(0)
    s0 = dict(pi1=w0[0], pi2=w0[1], m1=m0[0], m2=m0[1], m3=m0[2], L1=L0[0], L2=L0[1], L3=L0[2])
    a = batched.step(batched.init(**s0), data={"y": Y})
    b = loop.step(loop.init(**s0), data={"y": Y})
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-12)


def test_em_gmm_last_component_with_tiny_responsibilities_keeps_full_precision():
    """The categorical's last class is implied (one-hot: z3 = 1 - z1 - z2).  Its responsibilities are computed from
    λ directly, exp(-logsumexp(0, λ1, λ2)), and its plate sums are Σ r3 y, never Σ (r1 + r2 - 1) y: a component far
    from the data (responsibilities ~1e-13) still gets its weighted mean and precision to full relative precision
    (against a hand-written M-step with log-space responsibilities); the cancellation form is off by more than 1e-2
    here (asserted, so that this test would catch a return to it)."""
    from scipy.special import logsumexp
    from scipy.stats import multivariate_normal
    mod = load_generated("em_gmm_unrolled")
    rng = np.random.default_rng(7)
    Y = np.concatenate([rng.normal([0.0, 0.0], 1.0, size=(200, 2)), rng.normal([6.0, 0.0], 1.0, size=(200, 2))])
    w0 = np.array([0.5, 0.5 - 2.0**-30, 2.0**-30])      # exact in binary: the state's implied pi3 = 1 - pi1 - pi2 too
    m0 = np.array([[0.0, 0.0], [6.0, 0.0], [3.0, 4.0]])          # the third component above the data
    L0 = np.array([np.eye(2), np.eye(2), 4.0 * np.eye(2)])
    state = mod.step(mod.init(pi1=w0[0], pi2=w0[1], m1=m0[0], m2=m0[1], m3=m0[2], L1=L0[0], L2=L0[1], L3=L0[2]),
                     data={"y": Y})
    logd = np.stack([np.log(w) + multivariate_normal(m, np.linalg.inv(L)).logpdf(Y)
                     for w, m, L in zip(w0, m0, L0)], axis=1)
    logr = logd - logsumexp(logd, axis=1, keepdims=True)
    r3 = np.exp(logr[:, 2])
    assert 1e-16 < r3.max() < 1e-12                               # tiny, but far above underflow
    np.testing.assert_allclose(state["z_p3"], r3, rtol=1e-11, atol=0)
    m3 = r3 @ Y / r3.sum()
    C3 = (r3[:, None] * (Y - m3)).T @ (Y - m3) / r3.sum()
    np.testing.assert_allclose(state["m3"], m3, rtol=1e-10, atol=0)
    np.testing.assert_allclose(state["L3"], np.linalg.inv(C3), rtol=1e-8, atol=0)
    # the form the engine no longer uses: the same sums by cancellation
    r12 = np.exp(logr[:, 0]) + np.exp(logr[:, 1])
    cancelled = (r12 - 1) @ Y / (r12 - 1).sum()
    assert np.max(np.abs(cancelled - m3) / np.abs(m3)) > 1e-2
