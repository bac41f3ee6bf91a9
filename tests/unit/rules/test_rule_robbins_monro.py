"""Rule ``robbins_monro`` (Sec. 5.3, SVI; Hoffman et al. 2013; Eq. 58 with ρ_t): the global blocks take
λ_{t+1} = (1 − ρ_t)λ_t + ρ_t λ̂_t with ρ_t = (t + delay)^(−forgetting), t = 1, 2, ... the step counter.

Checked on SVI for a Gaussian mixture with known variance (catalog/svi_unrolled.yaml, K = 3) against stochastic variational
inference written here from Hoffman et al. (2013): local responsibilities r_nk ∝ exp(E[log w_k] − E[(y_n − μ_k)²]/2σ²)
(digamma, Gaussian moments), intermediate global parameters â_k = a₀ + (N/B)Σ_n r_nk,
λ̂(μ_k) = (s₀m₀ + (N/B)Σ_n r_nk y_n/σ², −(s₀ + (N/B)Σ_n r_nk/σ²)/2), then the Robbins-Monro average:

* every global natural parameter after one step, at several step counts, delays and forgetting rates;
* ρ_t read back from the output (the ratio (λ_{t+1} − λ_t)/(λ̂_t − λ_t), the same for every coordinate) equals
  (t + delay)^(−forgetting), and the step counter advances by one per step;
* with forgetting = 0 (ρ_t = 1) the step is the full coordinate-ascent (VMP) step λ̂_t.
"""
import functools

import numpy as np
from scipy import special

from blr_derive import api

K = 3
HP = dict(N=500, sigma2=0.8, a0=1.3, m0=0.2, s0=0.15)


@functools.lru_cache(maxsize=None)
def module():
    return api.derive("svi_unrolled").compile("numpy")


def batch_and_state():
    rng = np.random.default_rng(8)
    y = np.concatenate([rng.normal(-2, 0.8, 6), rng.normal(1, 0.8, 5), rng.normal(4, 0.8, 7)])
    state = dict(w_a1=2.0, w_a2=5.0, w_a3=3.5, mu1_m=-1.5, mu1_s=0.7, mu2_m=0.5, mu2_s=1.4, mu3_m=3.0, mu3_s=0.4)
    return y, state


def hand_svi_targets(y, st, hp):
    """Hoffman et al. (2013), Alg. 1: local step, then the intermediate global natural parameters."""
    a = np.array([st[f"w_a{k}"] for k in range(1, K + 1)])
    m = np.array([st[f"mu{k}_m"] for k in range(1, K + 1)])
    s = np.array([st[f"mu{k}_s"] for k in range(1, K + 1)])
    e_logw = special.digamma(a) - special.digamma(a.sum())
    e_sq = (y[:, None] - m) ** 2 + 1 / s                     # E_q[(y_n − μ_k)²]
    logits = e_logw - e_sq / (2 * hp["sigma2"])
    r = np.exp(logits - special.logsumexp(logits, axis=1, keepdims=True))
    scale = hp["N"] / len(y)
    a_hat = hp["a0"] + scale * r.sum(0)
    lam1_hat = hp["s0"] * hp["m0"] + scale * (r * y[:, None]).sum(0) / hp["sigma2"]
    lam2_hat = -(hp["s0"] + scale * r.sum(0) / hp["sigma2"]) / 2
    return r, a_hat, lam1_hat, lam2_hat


def natural(st):
    """The global natural parameters (Dirichlet a_k − 1; Gaussian (s m, −s/2)) as one flat vector."""
    a = np.array([st[f"w_a{k}"] for k in range(1, K + 1)], float)
    m = np.array([st[f"mu{k}_m"] for k in range(1, K + 1)], float)
    s = np.array([st[f"mu{k}_s"] for k in range(1, K + 1)], float)
    return np.concatenate([a - 1, s * m, -s / 2])


def test_global_blocks_average_with_the_robbins_monro_rate():
    mod = module()
    y, st = batch_and_state()
    r, a_hat, l1_hat, l2_hat = hand_svi_targets(y, st, HP)
    target = np.concatenate([a_hat - 1, l1_hat, l2_hat])
    old = natural(st)
    for steps_done, delay, forgetting in ((0, 1.0, 0.7), (4, 1.0, 0.7), (99, 10.0, 0.55), (7, 2.5, 1.0)):
        out = mod.step(mod.init(**st, step=steps_done), data={"y": y}, delay=delay, forgetting=forgetting, **HP)
        t = steps_done + 1
        rho_t = (t + delay) ** (-forgetting)
        assert int(out["step"]) == t
        # digamma/logsumexp and sums over 18 rows, the same on both sides up to grouping: 1e-12 relative
        np.testing.assert_allclose(natural(out), (1 - rho_t) * old + rho_t * target, rtol=1e-11, atol=1e-11)
        ratio = (natural(out) - old) / (target - old)
        np.testing.assert_allclose(ratio, rho_t, rtol=1e-9)
        np.testing.assert_allclose(out["z_p1"], r[:, 0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(out["z_p2"], r[:, 1], rtol=0, atol=1e-12)


def test_the_rate_decays_along_the_run_and_the_counter_advances():
    """Over consecutive steps on the same batch, the read-back ρ_t follows (t + delay)^(−κ) for t = 1..6."""
    mod = module()
    y, st = batch_and_state()
    state = mod.init(**st)
    delay, forgetting = 1.0, 0.7
    rates = []
    for t in range(1, 7):
        cur = {k: float(state[k]) for k in st}
        _, a_hat, l1_hat, l2_hat = hand_svi_targets(y, cur, HP)
        target = np.concatenate([a_hat - 1, l1_hat, l2_hat])
        state = mod.step(state, data={"y": y}, delay=delay, forgetting=forgetting, **HP)
        assert int(state["step"]) == t
        ratio = (natural(state) - natural(cur)) / (target - natural(cur))
        assert np.ptp(ratio) < 1e-8 * ratio.mean()
        rates.append(ratio.mean())
    np.testing.assert_allclose(rates, (np.arange(1, 7) + delay) ** (-forgetting), rtol=1e-8)
    assert np.all(np.diff(rates) < 0)


def test_forgetting_zero_is_the_full_coordinate_ascent_step():
    mod = module()
    y, st = batch_and_state()
    _, a_hat, l1_hat, l2_hat = hand_svi_targets(y, st, HP)
    out = mod.step(mod.init(**st, step=12), data={"y": y}, delay=1.0, forgetting=0.0, **HP)
    np.testing.assert_allclose(natural(out), np.concatenate([a_hat - 1, l1_hat, l2_hat]), rtol=1e-11, atol=1e-11)
