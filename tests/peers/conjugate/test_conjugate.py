"""Conjugate Bayes by the BLR with rho = 1 (Sec. 5.1): one generated step equals the closed-form posterior."""
import numpy as np

from conftest import CATALOG, load_generated


def test_beta_bernoulli():
    mod = load_generated("beta_bernoulli")
    y = np.random.default_rng(0).random(37) < 0.3
    out = mod.step(mod.init(a=5.0, b=0.5), data={"n1": y.sum(), "n0": (~y).sum()}, a0=2.0, b0=3.0)
    assert out["a"] == 2.0 + y.sum() and out["b"] == 3.0 + (~y).sum()


def test_gamma_poisson():
    mod = load_generated("gamma_poisson")
    y = np.random.default_rng(1).poisson(4.0, size=50)
    out = mod.step(mod.init(alpha=1.0, beta=1.0), data={"n": len(y), "s": y.sum()}, alpha0=2.0, beta0=0.5)
    np.testing.assert_allclose([out["alpha"], out["beta"]], [2.0 + y.sum(), 0.5 + len(y)], rtol=1e-14)


def test_dirichlet_categorical():
    """The axis form: K is the length of the arrays (here 3, with a prior concentration per class)."""
    mod = load_generated("dirichlet_categorical")
    z = np.random.default_rng(2).integers(0, 3, size=40)
    c = np.bincount(z, minlength=3)
    out = mod.step(mod.init(a=np.ones(3)), data={"c": c}, a0=np.array([0.5, 1.5, 2.5]))
    np.testing.assert_allclose(out["a"], np.array([0.5, 1.5, 2.5]) + c, rtol=1e-14)


def test_dirichlet_categorical_unrolled():
    mod = load_generated("dirichlet_categorical_unrolled")
    z = np.random.default_rng(2).integers(0, 3, size=40)
    c = np.bincount(z, minlength=3)
    out = mod.step(mod.init(a1=1.0, a2=1.0, a3=1.0), data={"c1": c[0], "c2": c[1], "c3": c[2]},
                   a01=0.5, a02=1.5, a03=2.5)
    np.testing.assert_allclose([out["a1"], out["a2"], out["a3"]], np.array([0.5, 1.5, 2.5]) + c, rtol=1e-14)


def test_normal_gamma_matches_the_textbook_posterior():
    mod = load_generated("normal_gamma")
    y = np.random.default_rng(3).normal(1.3, 0.7, size=25)
    m0, k0, a0, b0 = 0.2, 2.0, 1.5, 0.8
    n, S1, S2 = len(y), y.sum(), (y ** 2).sum()
    out = mod.step(mod.init(m=0.0, kappa=1.0, alpha=1.0, beta=1.0), data={"n": n, "S1": S1, "S2": S2},
                   m0=m0, kappa0=k0, alpha0=a0, beta0=b0)
    kn = k0 + n
    mn = (k0 * m0 + S1) / kn
    an = a0 + n / 2
    bn = b0 + 0.5 * ((y - y.mean()) ** 2).sum() + k0 * n * (y.mean() - m0) ** 2 / (2 * kn)   # Murphy (2007), Eq. 89
    np.testing.assert_allclose([out["m"], out["kappa"], out["alpha"], out["beta"]], [mn, kn, an, bn], rtol=1e-12)


def test_normal_normal_known_variance():
    mod = load_generated("normal_normal")
    y = np.random.default_rng(4).normal(-0.5, 2.0, size=30)
    sigma2, m0, s0 = 4.0, 1.0, 0.25
    out = mod.step(mod.init(m=3.0, s=7.0), data={"n": len(y), "S1": y.sum(), "S2": (y ** 2).sum()},
                   sigma2=sigma2, m0=m0, s0=s0)
    prec = s0 + len(y) / sigma2
    np.testing.assert_allclose(out["s"], prec, rtol=1e-14)
    np.testing.assert_allclose(out["m"], (s0 * m0 + y.sum() / sigma2) / prec, rtol=1e-13)


def test_bayesian_linear_regression():
    mod = load_generated("bayesian_linear_regression")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 4))
    y = X @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.3 * rng.normal(size=40)
    alpha, beta = 0.7, 11.0
    out = mod.step(mod.init(m=np.ones(4), S=np.eye(4)), data={"X": X, "y": y}, alpha=alpha, beta=beta)
    S = beta * X.T @ X + alpha * np.eye(4)
    np.testing.assert_allclose(out["S"], S, rtol=1e-13)
    np.testing.assert_allclose(out["m"], beta * np.linalg.solve(S, X.T @ y), rtol=1e-11)
    np.testing.assert_allclose(np.linalg.inv(out["S"]), np.linalg.inv(S), rtol=1e-10)   # posterior covariance



def _scatter(seed, N, P, cov):
    x = np.random.default_rng(seed).multivariate_normal(np.zeros(P), cov, size=N)
    return x, x.T @ x


def test_wishart_precision_matches_the_textbook_posterior():
    """x_i ~ N(0, X⁻¹), X ~ W(V0, n0): the posterior is W((V0⁻¹ + S)⁻¹, n0 + N) (Murphy 2007, Sec. 8; Bishop,
    PRML Eq. 2.155 with known mean); one generated BLR step with ρ = 1 from an arbitrary state gives it."""
    mod = load_generated("wishart_gaussian")
    P = 3
    x, S = _scatter(11, 40, P, np.array([[2.0, 0.3, 0.0], [0.3, 1.0, -0.4], [0.0, -0.4, 0.7]]))
    V0 = np.array([[1.5, 0.2, 0.1], [0.2, 0.8, 0.0], [0.1, 0.0, 1.1]])
    out = mod.step(mod.init(V=np.eye(P) * 4.0, n=9.0), data={"N_obs": len(x), "S": S, "W0": np.linalg.inv(V0)},
                   n0=4.5)
    np.testing.assert_allclose(out["V"], np.linalg.inv(np.linalg.inv(V0) + S), rtol=1e-12)
    assert out["n"] == 4.5 + len(x)
    # and the posterior mean of the precision nV approaches the data's precision as N grows
    x, S = _scatter(12, 20000, 2, np.array([[2.0, 0.5], [0.5, 1.0]]))
    out = mod.step(mod.init(V=np.eye(2), n=3.0), data={"N_obs": len(x), "S": S, "W0": np.eye(2)}, n0=3.0)
    np.testing.assert_allclose(out["n"] * out["V"], np.linalg.inv(np.array([[2.0, 0.5], [0.5, 1.0]])), atol=0.03)


def test_inverse_wishart_covariance_matches_the_textbook_posterior():
    """x_i ~ N(0, X), X ~ IW(Ψ0, n0): the posterior is IW(Ψ0 + S, n0 + N) (Murphy 2007, Sec. 8, Eq. 274 with known
    mean); one generated step with ρ = 1 gives it, and its mean Ψ/(n − P − 1) agrees with scipy.stats.invwishart's."""
    from scipy import stats
    mod = load_generated("inverse_wishart_gaussian")
    P = 3
    x, S = _scatter(13, 25, P, np.diag([1.0, 2.0, 0.5]))
    Psi0 = np.array([[2.0, 0.4, 0.0], [0.4, 1.0, 0.2], [0.0, 0.2, 1.5]])
    out = mod.step(mod.init(Psi=np.eye(P), n=7.0), data={"N_obs": len(x), "S": S, "Psi0": Psi0}, n0=6.0)
    np.testing.assert_allclose(out["Psi"], Psi0 + S, rtol=1e-13)
    assert out["n"] == 6.0 + len(x)
    np.testing.assert_allclose(stats.invwishart(df=out["n"], scale=out["Psi"]).mean(),
                               (Psi0 + S) / (6.0 + len(x) - P - 1), rtol=1e-12)


def test_normal_wishart_matches_the_textbook_posterior():
    """y_i ~ N(θ, Λ⁻¹), (θ, Λ) ~ NW(m0, κ0, V0, n0): the posterior is NW(m_N, κ_N, V_N, n_N) with κ_N = κ0 + N,
    m_N = (κ0 m0 + N ȳ)/κ_N, n_N = n0 + N and V_N⁻¹ = V0⁻¹ + Σ(y_i − ȳ)(y_i − ȳ)ᵀ + κ0 N/κ_N (ȳ − m0)(ȳ − m0)ᵀ
    (Murphy 2007, Eqs. 250-254, written here in that centred form); one generated BLR step with ρ = 1 gives it."""
    mod = load_generated("normal_wishart")
    P = 3
    rng = np.random.default_rng(21)
    y = rng.multivariate_normal([1.0, -0.5, 2.0], [[1.0, 0.3, 0.0], [0.3, 0.5, 0.1], [0.0, 0.1, 2.0]], size=30)
    m0, k0, n0 = np.array([0.5, 0.0, 1.0]), 2.0, 5.0
    V0 = np.array([[1.2, 0.1, 0.0], [0.1, 0.9, 0.2], [0.0, 0.2, 1.5]])
    N, ybar = len(y), y.mean(axis=0)
    out = mod.step(mod.init(m=np.zeros(P), kappa=1.0, V=np.eye(P), n=4.0),
                   data={"N_obs": N, "s1": y.sum(axis=0), "S": y.T @ y, "m0": m0, "W0": np.linalg.inv(V0)},
                   kappa0=k0, n0=n0)
    kN = k0 + N
    Sc = (y - ybar).T @ (y - ybar)
    VN = np.linalg.inv(np.linalg.inv(V0) + Sc + k0 * N / kN * np.outer(ybar - m0, ybar - m0))
    np.testing.assert_allclose(out["kappa"], kN, rtol=1e-14)
    np.testing.assert_allclose(out["n"], n0 + N, rtol=1e-14)
    np.testing.assert_allclose(out["m"], (k0 * m0 + N * ybar) / kN, rtol=1e-13)
    np.testing.assert_allclose(out["V"], VN, rtol=1e-11)


def test_normal_wishart_damped_step_interpolates_the_natural_parameters():
    """The catalog recipe without `unit_learning_rate` (ρ a hyperparameter): one BLR step is λ ← (1 − ρ)λ + ρλ_post
    (Eq. 6 with a conjugate loss), where λ(m, κ, V, n) = (κm, −κ/2, −(V⁻¹ + κmmᵀ)/2, (n − P)/2) and λ_post is the
    closed-form posterior's (written here); the generated step's ordinary parameters map to exactly that λ."""
    import yaml
    from blr_derive import api
    spec = yaml.safe_load((CATALOG / "normal_wishart.yaml").read_text(encoding="utf-8"))
    spec["name"] = "normal_wishart_damped"
    spec["approximations"] = ["exact"]
    spec["hyperparameters"]["rho"] = {"default": 0.3}
    mod = api.derive(yaml.safe_dump(spec)).compile("numpy")
    P, rng = 2, np.random.default_rng(31)
    y = rng.normal(size=(15, P)) @ np.array([[1.0, 0.3], [0.0, 0.7]]) + np.array([0.5, -1.0])
    m0, k0, n0, V0 = np.array([0.1, 0.2]), 1.5, 4.0, np.array([[1.0, 0.2], [0.2, 0.6]])
    N, ybar = len(y), y.mean(axis=0)

    def lam(m, kappa, V, n):
        return [kappa * m, -kappa / 2, -(np.linalg.inv(V) + kappa * np.outer(m, m)) / 2, (n - P) / 2]
    kN = k0 + N
    VN = np.linalg.inv(np.linalg.inv(V0) + (y - ybar).T @ (y - ybar) + k0 * N / kN * np.outer(ybar - m0, ybar - m0))
    post = lam((k0 * m0 + N * ybar) / kN, kN, VN, n0 + N)
    state = dict(m=np.array([-0.3, 0.4]), kappa=2.5, V=np.array([[0.5, -0.1], [-0.1, 0.8]]), n=3.5)
    now = lam(state["m"], state["kappa"], state["V"], state["n"])
    out = mod.step(mod.init(**state), data={"N_obs": N, "s1": y.sum(axis=0), "S": y.T @ y, "m0": m0,
                                            "W0": np.linalg.inv(V0)}, kappa0=k0, n0=n0, rho=0.3)
    got = lam(out["m"], out["kappa"], out["V"], out["n"])
    for g, a, b in zip(got, now, post):
        np.testing.assert_allclose(g, 0.7 * np.asarray(a) + 0.3 * np.asarray(b), rtol=1e-11, atol=1e-12)
