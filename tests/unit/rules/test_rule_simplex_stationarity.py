"""Rule ``simplex_stationarity`` (Sec. 5.2 with the constraint Σ_k θ_k = 1): a delta block on the simplex over the
components jumps to the stationary point of E[ℓ] + ν(Σ_k θ_k − 1), θ_k = a_k/ν with ν = Σ_k a_k.

Checked on catalog/em_gmm.yaml with numbers only: the mixture weights of one step maximize the expected
complete-data log-likelihood Σ_k (Σ_n r_nk) log π_k over the simplex (the responsibilities r the same step
returns): scipy's SLSQP on the simplex finds the same point (1e-6, its tolerance), no feasible perturbation does
better, and they are Σ_n r_nk / N (1e-13)."""
import numpy as np
from scipy import optimize

from conftest import load_generated


def step():
    mod = load_generated("em_gmm")
    rng = np.random.default_rng(11)
    K, P = 6, 2
    Y = np.concatenate([rng.normal(c, 1.0, size=(n, P)) for c, n in zip(rng.normal(scale=4, size=(K, P)),
                                                                          (40, 80, 120, 20, 60, 100))])
    w = rng.dirichlet(np.ones(K))
    m = Y[rng.choice(len(Y), K, replace=False)]
    L = np.array([np.eye(P)] * K)
    return mod.step(mod.init(pi=w, m=m, L=L), data={"y": Y}), len(Y)


def test_weights_maximize_the_expected_log_likelihood_on_the_simplex():
    out, N = step()
    S = out["z_p"].sum(axis=0)
    pi = out["pi"]
    assert pi.shape == S.shape and abs(pi.sum() - 1) < 1e-14
    np.testing.assert_allclose(pi, S / N, rtol=1e-13, atol=0)

    def neg(p):
        return -np.sum(S * np.log(p))
    res = optimize.minimize(neg, np.full(len(S), 1 / len(S)), method="SLSQP", bounds=[(1e-9, 1)] * len(S),
                            constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1}], options={"ftol": 1e-14})
    assert res.success
    np.testing.assert_allclose(pi, res.x, rtol=0, atol=1e-6)
    rng = np.random.default_rng(0)
    for _ in range(200):                 # feasible directions: Σ d = 0
        d = rng.normal(size=len(S))
        d -= d.mean()
        q = pi + 1e-3 * d / np.abs(d).max()
        assert neg(q) > neg(pi)
