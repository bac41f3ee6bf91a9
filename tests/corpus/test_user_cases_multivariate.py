"""User-style multivariate and structured cases, written from README.md and docs/ alone: a Gaussian by its
covariance, a Wishart by its rate matrix, a vector normal-gamma (a vector and a scalar component), a mean-field
product N(θ) × Gamma(τ) and a Dirichlet by its mean and concentration (tests/corpus/families).  Each generated step
is compared, over several iterations in float64, with the BLR written here from the paper, λ ← (1 − ρ)λ − ρ∇_μE_q[ℓ]
(Khan & Rue 2023, Eq. 6; Eqs. 10–11 for the Gaussian's ∇_μ through its mean and covariance), with E_q[ℓ] in closed
form (Isserlis' theorem, conjugate coefficients, independent moments of the product).  Where the update leaves the
family (an indefinite covariance, a negative gamma rate) the step raises FloatingPointError."""
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.special as sc

from blr_derive import api

FAMILIES = Path(__file__).parent / "families"


def compiled(text):
    return api.derive(textwrap.dedent(text).replace("FAMILIES", str(FAMILIES))).compile("numpy")


def rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b))))


def test_quartic_loss_over_a_covariance_parameterized_gaussian():
    """ℓ = ¼(θᵀθ − 1)² − bᵀθ under N(m, Σ), exact rule: E_q[ℓ] by Isserlis (q = mᵀm + tr Σ, E(θᵀθ)² = q² +
    2 tr Σ² + 4 mᵀΣm), ∇_Σ E = ½(q − 1)I + Σ + mmᵀ, ∇_m E = (q − 1)m + 2Σm − b; with ρ = 1 from a tight q the
    precision (q − 1)I + 2Σ + 2mmᵀ is indefinite and the step refuses it."""
    mod = compiled("""\
        name: quartic_cov
        family: FAMILIES/gauss_cov.yaml
        loss:
          expression: 0.25*(theta.T*theta - 1)**2 - b.T*theta
          data:
            b: {shape: [P]}
        approximations: [exact]
        hyperparameters:
          rho: 0.3
        """)
    b = np.array([0.3, -0.2])
    m, Sig = np.array([1.2, -0.7]), np.linalg.inv(np.array([[3.0, 0.5], [0.5, 2.0]]))
    state = mod.init(m=m, Sigma=Sig)
    for _ in range(12):
        q = m @ m + np.trace(Sig)
        gS = 0.5 * (q - 1) * np.eye(2) + Sig + np.outer(m, m)
        gm = (q - 1) * m + 2 * Sig @ m - b
        S = np.linalg.inv(Sig)
        l1 = 0.7 * S @ m - 0.3 * (gm - 2 * gS @ m)
        l2 = 0.7 * (-S / 2) - 0.3 * gS
        Sig = np.linalg.inv(-2 * l2)
        m = Sig @ l1
        state = mod.step(state, data={"b": b}, rho=0.3)
        assert rel(state["m"], m) < 1e-12 and rel(state["Sigma"], Sig) < 1e-12
    out = mod.objective(state, data={"b": b})
    q = m @ m + np.trace(Sig)
    expected = 0.25 * (q**2 + 2 * np.trace(Sig @ Sig) + 4 * m @ Sig @ m - 2 * q + 1) - b @ m
    assert rel(out["expected_loss"], expected) < 1e-13
    with pytest.raises(FloatingPointError, match="Sigma is not positive definite"):
        mod.step(mod.init(m=np.zeros(2), Sigma=0.05 * np.eye(2)), data={"b": b}, rho=1.0)


def test_wishart_by_rate_matrix_and_vector_normal_gamma_steps():
    wish = compiled("""\
        name: wishart_rate_conj
        family: FAMILIES/wishart_rate.yaml
        loss:
          expression: tr(Sc*X)/2 - a*logdet(X)/2
          data:
            Sc: {shape: [P, P]}
            a: {}
        approximations: [exact]
        hyperparameters:
          rho: 0.5
        """)
    W, n = np.array([[2.0, 0.3], [0.3, 1.0]]), 4.0
    Sc = np.array([[3.0, 1.0], [1.0, 2.0]])
    state = wish.init(n=n, W=W)
    for _ in range(5):      # λ = (−W/2, (n − P − 1)/2), ∇_μE_q[ℓ] = (Sc/2, −a/2)
        W, n = 0.5 * W + 0.5 * Sc, 0.5 * (n - 3) + 0.5 * 5.0 + 3
        state = wish.step(state, data={"Sc": Sc, "a": 5.0})
        assert rel(state["W"], W) < 1e-14 and rel(state["n"], n) < 1e-14
    with pytest.raises(FloatingPointError, match="W is not positive definite"):
        wish.step(state, data={"Sc": -4 * np.eye(2), "a": 5.0}, rho=1.0)

    ngv = compiled("""\
        name: ngv_conj
        family: FAMILIES/normal_gamma_vec.yaml
        loss:
          expression: 0.5*tau*(n*theta.T*theta - 2*sy.T*theta + syy) - n*P*log(tau)/2
          data:
            sy: {shape: [P]}
            n: {}
            syy: {}
        approximations: [exact]
        hyperparameters:
          rho: 0.5
        """)
    data = {"sy": np.array([2.0, 1.0]), "n": 4.0, "syy": 9.0}
    m, k, a, b = np.array([0.5, -1.0]), 2.0, 3.0, 1.5
    state = ngv.init(m=m, kappa=k, a=a, b=b)
    for _ in range(6):      # T = (τθ, τθᵀθ, τ, log τ): the loss's coefficients (−sy, n/2, syy/2, −nP/2)
        lam = [k * m, -k / 2, -b - k * m @ m / 2, a]
        c = [-data["sy"], data["n"] / 2, data["syy"] / 2, -data["n"]]
        lam = [0.5 * x - 0.5 * y for x, y in zip(lam, c)]
        k = -2 * lam[1]
        m = lam[0] / k
        a = lam[3]
        b = -lam[2] - k * m @ m / 2
        state = ngv.step(state, data=data)
        assert max(rel(state[key], v) for key, v in (("m", m), ("kappa", k), ("a", a), ("b", b))) < 1e-13
    with pytest.raises(FloatingPointError, match="b is not positive"):
        ngv.step(ngv.init(m=np.array([0.5, -1.0]), kappa=2.0, a=3.0, b=1.5), data={**data, "syy": 0.5}, rho=1.0)


def test_mean_field_normal_times_gamma_couples_through_the_moments():
    """ℓ = ½τ(nθ² − 2 s_y θ + s_yy) − (n/2) log τ + ½θ² under q(θ)q(τ): E_q[ℓ] is linear in each block's μ given
    the other's (E[θ²τ] = μ₂μ₄), so ∇_μ E = (−s_y μ₄, (nμ₄ + 1)/2, −n/2, (nμ₂ − 2s_yμ₁ + s_yy)/2)."""
    mod = compiled("""\
        name: nxg
        family: FAMILIES/normal_x_gamma.yaml
        loss:
          expression: 0.5*tau*(n*theta**2 - 2*sy*theta + syy) - n*log(tau)/2 + 0.5*theta**2
          data: {n: {}, sy: {}, syy: {}}
        approximations: [exact]
        hyperparameters:
          rho: 0.5
        """)
    d = {"n": 5.0, "sy": 4.0, "syy": 6.0}
    m, s, a, r = 0.3, 2.0, 1.5, 0.7
    state = mod.init(m=np.array([m]), s=np.array([s]), a=np.array([a]), r=np.array([r]))
    for _ in range(20):
        mu = [m, m * m + 1 / s, sc.digamma(a) - np.log(r), a / r]
        g = [-d["sy"] * mu[3], 0.5 * d["n"] * mu[3] + 0.5, -d["n"] / 2, 0.5 * (d["n"] * mu[1] - 2 * d["sy"] * mu[0] + d["syy"])]
        lam = [0.5 * x - 0.5 * y for x, y in zip([s * m, -s / 2, a - 1, -r], g)]
        s = -2 * lam[1]
        m, a, r = lam[0] / s, lam[2] + 1, -lam[3]
        state = mod.step(state, data=d)
        assert max(rel(state[key], v) for key, v in (("m", m), ("s", s), ("a", a), ("r", r))) < 1e-13
    with pytest.raises(FloatingPointError, match="r is not positive"):
        mod.step(state, data={**d, "syy": -60.0}, rho=1.0)


def test_mean_parameterized_dirichlet_and_beta_refuse_negative_counts():
    """A Dirichlet by its mean (p1, p2 on the simplex) and concentration c, and a Beta by its mean p (unit interval):
    ρ = 1 on counts lands on α = counts + 1 (Eq. 6 with the loss's coefficients); a negative count that puts α out of
    (0, ∞) made p leave its range silently, and is now named."""
    dirichlet = compiled("""\
        name: dir_counts
        family: FAMILIES/dirichlet_mp.yaml
        loss:
          expression: -n1*log(theta1) - n2*log(theta2) - n3*log(theta3)
          data: {n1: {}, n2: {}, n3: {}}
        approximations: [exact]
        hyperparameters:
          rho: 1.0
        """)
    st = dirichlet.init(p1=0.2, p2=0.3, c=4.0)
    new = dirichlet.step(st, data={"n1": 3.0, "n2": 0.0, "n3": 7.0})
    assert rel([new["p1"], new["p2"], new["c"]], [4 / 13, 1 / 13, 13.0]) < 1e-15
    with pytest.raises(FloatingPointError, match=r"the new p1 is not positive \(value -0.285714"):
        dirichlet.step(st, data={"n1": -3.0, "n2": 0.0, "n3": 7.0})
    beta = compiled("""\
        name: beta_mean_counts
        family:
          name: beta_mean
          variable: theta
          support: unit_interval
          parameters:
            p: {domain: unit_interval}
            c: {domain: positive}
          sufficient_statistics: [log(theta), log(1 - theta)]
          natural_parameters: [c*p - 1, c*(1 - p) - 1]
        loss:
          expression: -k*log(theta) - f*log(1 - theta)
          data: {k: {}, f: {}}
        approximations: [exact]
        hyperparameters:
          rho: 1.0
        """)
    st = beta.init(p=np.array([0.3]), c=np.array([2.0]))
    new = beta.step(st, data={"k": 3.0, "f": 1.0})
    assert rel([new["p"][0], new["c"][0]], [4 / 6, 6.0]) < 1e-15
    with pytest.raises(FloatingPointError, match=r"the new p is not positive \(value -1 "):
        beta.step(st, data={"k": -3.0, "f": 3.0})
    with pytest.raises(FloatingPointError, match=r"the new 1 - p is not positive \(value -3 "):
        beta.step(st, data={"k": 3.0, "f": -4.0})


def test_bivariate_gaussian_by_cholesky_factor_of_its_precision():
    """A quadratic loss ½θᵀQθ − yᵀθ is linear in T = (θ₁, θ₂, θ₁², θ₂², θ₁θ₂): Eq. 6 moves λ = (Sm, −S/2) to
    (1 − ρ)λ + ρ(y, −Q/2); the state is read back as S = LLᵀ, L = [[l1, 0], [l21, l2]].  With Q indefinite and ρ = 1
    the new precision has no Cholesky factor: the step names l2 (NaN) instead of returning it."""
    mod = compiled("""\
        name: biv_quad
        family: FAMILIES/biv_chol.yaml
        loss:
          expression: 0.5*a*theta1**2 + 0.5*b*theta2**2 + c*theta1*theta2 - y1*theta1 - y2*theta2
          data: {a: {}, b: {}, c: {}, y1: {}, y2: {}}
        approximations: [exact]
        hyperparameters:
          rho: 0.5
        """)
    d = dict(a=3.0, b=2.0, c=0.5, y1=1.0, y2=-1.0)
    Q, y = np.array([[3.0, 0.5], [0.5, 2.0]]), np.array([1.0, -1.0])
    m, L = np.array([0.2, 0.1]), np.array([[1.0, 0.0], [0.3, 1.5]])
    state = mod.init(m1=m[0], m2=m[1], l1=L[0, 0], l2=L[1, 1], l21=L[1, 0])
    for _ in range(10):
        S = L @ L.T
        eta, S = 0.5 * S @ m + 0.5 * y, 0.5 * S + 0.5 * Q
        m, L = np.linalg.solve(S, eta), np.linalg.cholesky(S)
        state = mod.step(state, data=d)
        got = [state[k] for k in ("m1", "m2", "l1", "l21", "l2")]
        assert rel(got, [m[0], m[1], L[0, 0], L[1, 0], L[1, 1]]) < 1e-14
    with np.errstate(invalid="ignore"), pytest.raises(FloatingPointError, match="the new l2 is not a number"):
        mod.step(state, data=dict(d, c=5.0), rho=1.0)
