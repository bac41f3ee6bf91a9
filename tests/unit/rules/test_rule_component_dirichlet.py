"""Rule ``component_dirichlet`` (Sec. 1.2; Sec. 5.1, conjugate prior of the weights; Eq. 58): the Dirichlet over a
recipe's components, λ_k = a_k − 1 ← (1 − ρ)λ_k + ρ Σ_f λ̃_f, with E[log w_k] = ψ(a_k) − ψ(Σ_j a_j) for the other
blocks.

Checked with numbers only on catalog/svi.yaml: (1) E[log w_k] that the step's E-step uses, against Monte Carlo
over numpy's Dirichlet sampler (z-test, 200 000 draws) — read off the responsibilities, whose log-ratios are
E[log w_j] − E[log w_k] when the Gaussian terms are equal; (2) the new concentrations against the conjugate
Dirichlet update a0 + (N/B) Σ_n r_nk smoothed with ρ_t, computed here with the responsibilities the step returns."""
import numpy as np

from conftest import load_generated


def test_expected_log_weights_and_the_smoothed_conjugate_update():
    mod = load_generated("svi")
    K = 4
    a = np.array([0.7, 2.0, 5.0, 11.0])
    mu = np.zeros(K)                           # equal components: only E[log w] differs between them
    state = mod.init(w_a=a, mu_m=mu, mu_s=np.full(K, 2.0))
    y = np.array([0.3, -1.2, 2.0, 0.1, 0.0])
    hp = dict(N=40, sigma2=1.0, a0=1.5, m0=0.0, s0=0.1, delay=2.0, forgetting=0.7)
    out = mod.step(state, data={"y": y}, **hp)
    logr = np.log(out["z_p"][0])
    draws = np.random.default_rng(0).dirichlet(a, size=200_000)
    logw = np.log(draws)
    est, se = logw.mean(0), logw.std(0, ddof=1) / np.sqrt(len(logw))
    diff_mc, diff = est[1:] - est[0], logr[1:] - logr[0]
    se_diff = np.sqrt(se[1:] ** 2 + se[0] ** 2)
    assert np.all(np.abs(diff - diff_mc) < 5 * se_diff), (diff, diff_mc)
    rho = (1 + hp["delay"]) ** -hp["forgetting"]
    target = hp["a0"] + hp["N"] / len(y) * out["z_p"].sum(0)
    np.testing.assert_allclose(out["w_a"], (1 - rho) * a + rho * target, rtol=1e-13)
