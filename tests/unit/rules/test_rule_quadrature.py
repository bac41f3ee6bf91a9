"""`quadrature`: ∇_λE_q[ℓ] = E_q[ℓ(θ)(T − μ)] by the tanh-sinh rule in u = F(θ) through the family's inverse-CDF
sampler, deterministic.  Against Eq. 6 computed independently (scipy quadrature of E_q[ℓ], central differences in λ,
F = Cov_q[T] by quadrature) for explicit losses with no closed form under gamma and beta candidates; against the
closed form of `exact` (tilted log-partition) on a loss that has one; with an abstract loss through the `loss`
oracle; and the located refusals."""
import numpy as np
import pytest
import yaml
from scipy import integrate, special

from blr_derive import api
from blr_derive.core.errors import SpecError, UnsupportedTarget


def derive(family, loss, approx, rho=0.2):
    return api.derive(yaml.safe_dump({"name": "quad", "family": family, "loss": loss,
                                      "hyperparameters": {"rho": rho}, "approximations": [approx]}))


def reference(pdf_of_lam, T, loss, lam, lo, hi, rho=0.2):
    def E(f, l):
        return integrate.quad(lambda t: f(t) * pdf_of_lam(t, l), lo, hi, epsabs=0, epsrel=1e-13, limit=400)[0]
    h = 1e-5
    g = np.array([(E(loss, lam + h * e) - E(loss, lam - h * e)) / (2 * h) for e in np.eye(len(lam))])
    mu = np.array([E(t, lam) for t in T])
    F = np.array([[E(lambda x: (ti(x) - mu[i]) * (tj(x) - mu[j]), lam) for j, tj in enumerate(T)]
                  for i, ti in enumerate(T)])
    return (1 - rho) * lam - rho * np.linalg.solve(F, g)


def gamma_pdf(t, lam):                       # λ = (α − 1, −β)
    al, be = lam[0] + 1, -lam[1]
    return np.exp(al * np.log(be) - special.gammaln(al) + (al - 1) * np.log(t) - be * t)


@pytest.mark.parametrize("a, b", [(2.6, 1.4), (0.7, 3.0)])        # α < 1: F⁻¹ and the density are singular at 0
def test_gamma_with_a_loss_without_closed_form(a, b):
    f = lambda t: np.log1p(t) + t / 2 + np.sqrt(t) * np.cos(t)                                 # noqa: E731
    mod = derive("gamma", {"expression": "log(1 + theta) + theta/2 + sqrt(theta)*cos(theta)"},
                 {"quadrature": {"nodes": 81}}).compile("numpy")
    want = reference(gamma_pdf, [np.log, lambda t: t], f, np.array([a - 1, -b]), 0, np.inf)
    out = mod.step(mod.init(alpha=a, beta=b), rho=0.2)
    assert [float(out["alpha"]), float(out["beta"])] == pytest.approx([want[0] + 1, -want[1]], rel=1e-7)


def test_beta_with_a_loss_without_closed_form():
    a, b = 1.8, 0.6

    def pdf(t, lam):
        p, q = lam[0] + 1, lam[1] + 1
        return np.exp((p - 1) * np.log(t) + (q - 1) * np.log1p(-t) - special.betaln(p, q))
    f = lambda t: 1 / (1 + t ** 2) + np.exp(t)                                                 # noqa: E731
    mod = derive("beta", {"expression": "1/(1 + theta**2) + exp(theta)"},
                 {"quadrature": {"nodes": 81}}).compile("numpy")
    want = reference(pdf, [np.log, lambda t: np.log1p(-t)], f, np.array([a - 1, b - 1]), 0, 1)
    out = mod.step(mod.init(a=a, b=b), rho=0.2)
    assert [float(out["a"]), float(out["b"])] == pytest.approx([want[0] + 1, want[1] + 1], rel=1e-7)


def test_it_agrees_with_the_closed_form_and_converges():
    """ℓ = √θ + e^{−θ} has E_q[ℓ] from the tilted log-partition (`exact`); the quadrature step approaches it as the
    nodes grow (error below 1e-12 at 81 nodes)."""
    loss = {"expression": "sqrt(theta) + exp(-theta)"}
    exact = derive("gamma", loss, "exact").compile("numpy").step({"alpha": 1.9, "beta": 0.8}, rho=0.2)
    errs = []
    for n in (9, 21, 81):
        out = derive("gamma", loss, {"quadrature": {"nodes": n}}).compile("numpy").step({"alpha": 1.9, "beta": 0.8},
                                                                                        rho=0.2)
        errs.append(max(abs(float(out[k]) / float(exact[k]) - 1) for k in ("alpha", "beta")))
    assert errs[2] < 1e-12 and errs[0] > errs[2]


def test_an_abstract_loss_is_the_oracle_at_the_nodes():
    mod = derive("exponential", "abstract", {"quadrature": {"nodes": 81}}).compile("numpy")
    calls = []

    def loss(th):
        calls.append(np.size(th))
        return np.log1p(th ** 2)
    r, rho = 1.3, 0.2
    out = mod.step(mod.init(r=r), oracles={"loss": loss}, rho=rho)
    assert len(calls) == 81

    def pdf(t, lam):                          # λ = −r
        return -lam[0] * np.exp(lam[0] * t)
    want = reference(pdf, [lambda t: t], lambda t: np.log1p(t ** 2), np.array([-r]), 0, np.inf)
    assert float(out["r"]) == pytest.approx(-want[0], rel=1e-8)


@pytest.mark.parametrize("nodes", [1, 2, 64])
def test_the_node_count_is_odd_and_at_least_three(nodes):
    with pytest.raises(SpecError, match=f"nodes must be an odd number of at least 3.*got {nodes}"):
        derive("gamma", {"expression": "log(1 + theta)"}, {"quadrature": {"nodes": nodes}})


def test_the_weights_integrate_to_one():
    """The generated helper's weights sum to 1 for every size (normalized: the raw trapezoidal weights of a coarse
    rule do not, 2.4 at 3 points), and the normalization moves a fine rule by less than 1e-10."""
    from blr_derive.codegen.backends.numpy.printer import HELPERS
    ns = {"numpy": np}
    exec(HELPERS["_tanh_sinh"], ns)
    for n in (3, 9, 65, 201):
        u, w = ns["_tanh_sinh"](n)
        assert len(u) == n and np.all((0 < u) & (u < 1)) and np.allclose(u + u[::-1], 1.0, rtol=0, atol=1e-15)
        assert abs(w.sum() - 1) < 1e-14
        m = (n - 1) // 2
        t = np.arange(-m, m + 1) * np.arcsinh(34 / np.pi) / m
        raw = np.arcsinh(34 / np.pi) / m * np.pi * np.cosh(t) * u * (1 - u)
        if n >= 65:
            assert np.allclose(w, raw, rtol=1e-10, atol=0)


def test_refusals():
    with pytest.raises(SpecError, match="inverse CDF of one uniform draw u; family 'inverse_gaussian'"):
        derive("inverse_gaussian", {"expression": "theta**2"}, "quadrature")
    with pytest.raises(SpecError, match="family 'wishart' declares none"):
        derive("wishart", {"expression": "tr(X)"}, "quadrature")
    with pytest.raises(UnsupportedTarget, match="quadrature"):
        api.derive(yaml.safe_dump({"name": "q", "family": "exponential", "loss": "abstract", "parameter": "r",
                                   "hyperparameters": {"rho": 0.1}, "approximations": ["quadrature"]})
                   ).compile("torch")
