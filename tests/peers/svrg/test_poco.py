"""Posterior correction from a checkpoint with IVON's estimators (PoCo; the Bayes-duality slides, "Speeding up
training with memories": q ← q^{1−ρ} q_old^ρ Π_{j∈B} exp(−ρ(ℓ̂_j − ℓ̂_{j|old})); Khan 2025; Daheim et al. 2026).

The recipe (``ivon_poco.yaml`` here: IVON's approximations with ``posterior_correction`` listed after Price's
estimator) is derived by the engine; the reference below is written from the equations, in natural parameters,
never from the engine's output:

* a site of the diagonal Gaussian is linear in T(θ) = (θ, θ²) with the coefficients ∇_μ E_q[ℓ_j]
  = (E[∇ℓ] − E[∇²ℓ] m, E[∇²ℓ]/2) (Khan & Rue Eq. 10-11), estimated as IVON does: the mean of the gradients at
  θ_k = m + ε_k/√s and Price's estimate mean(ε_k ∇ℓ(θ_k))·√s;
* the correction replaces the batch's old sites by new ones: the batch's coefficients at q, minus the same
  estimates at q_old with the same draws (θ_k,old = m_old + ε_k/√s_old), plus the sum of q_old's sites, the stored
  full-data estimates (ḡ, h̄) at q_old;
* the corrected coefficients (G₁, G₂) are those of the estimates h̃ = 2G₂, g̃ = G₁ + h̃ m, which IVON's step then
  uses (momentum, mini-batch scaling by ess, the prior ess·weight_decay, the improved-BLR precision update).

Not in the catalog: on a small least-squares problem the derived update diverges where plain IVON trains (the
Hessian correction (h̄ − ĥ_old)(m − m_old) in the gradient carries Price's estimate of the snapshot, whose noise
ε·∇ℓ_B(m_old)·√s_old enters the gradient undamped, where IVON's precision damps it by 1 − β₂).
"""
import functools
import pathlib

import numpy as np
import pytest

from blr_derive import api

RECIPE = pathlib.Path(__file__).with_name("ivon_poco.yaml")


@functools.lru_cache(maxsize=None)
def module():
    return api.derive(RECIPE.read_text()).compile("numpy")


def reference_step(m, h, mom, t, eps_list, grad, old, *, lr, ess, hess_init=1.0, beta1=0.9, beta2=0.99999,
                   weight_decay=1e-4, clip_radius=np.inf, rescale_lr=True, debias=True, mc_samples=1):
    assert len(eps_list) == mc_samples
    s = ess * (h + weight_decay)
    m_old, s_old, gbar, hbar = old["m_old"], old["s_old"], old["grad_full"], old["hess_full"]

    def site(mean, prec):                  # IVON's estimates of E_q[∇ℓ_B], E_q[∇²ℓ_B] -> ∇_μ E_q[ℓ_B]
        gs = [grad(mean + e / np.sqrt(prec)) for e in eps_list]
        g = np.mean(gs, axis=0)
        hh = np.mean([e * gk for e, gk in zip(eps_list, gs)], axis=0) * np.sqrt(prec)
        return g - hh * mean, hh / 2

    now, then = site(m, s), site(m_old, s_old)
    full = (gbar - hbar * m_old, hbar / 2)
    G1, G2 = now[0] - then[0] + full[0], now[1] - then[1] + full[1]
    h_t = 2 * G2
    g_t = G1 + h_t * m
    mom = beta1 * mom + (1 - beta1) * g_t
    mhat = mom / (1 - beta1 ** t) if debias else mom
    target = ess * h_t + ess * weight_decay
    s_new = beta2 * s + (1 - beta2) * target + 0.5 * (1 - beta2) ** 2 * (s - target) ** 2 / s
    lr_m = lr * (hess_init + weight_decay) if rescale_lr else lr
    step = np.clip((ess * mhat + ess * weight_decay * m) / s_new, -clip_radius, clip_radius)
    return m - lr_m * step, s_new / ess - weight_decay, mom


def problem(seed=0, n=7):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, n))
    A = A @ A.T / n + np.eye(n)
    c = rng.normal(size=n)
    grad = lambda x: A @ (x - c) + 0.3 * np.tanh(2 * x)           # non-quadratic: Price's estimate varies with q
    old = {"m_old": rng.normal(size=n), "s_old": 40 * rng.uniform(0.5, 2.0, size=n),
           "grad_full": rng.normal(size=n), "hess_full": rng.uniform(0.5, 2.0, size=n)}
    return rng.normal(size=n), grad, old


CASES = [dict(mc_samples=1), dict(mc_samples=3),
         dict(mc_samples=2, clip_radius=0.05, weight_decay=1e-2, beta2=0.99),
         dict(mc_samples=2, debias=False, rescale_lr=False, hess_init=0.5, beta2=0.9)]


@pytest.mark.parametrize("kw", CASES, ids=[str(i) for i in range(len(CASES))])
def test_generated_numpy_step_equals_the_reference(kw):
    mod = module()
    x0, grad, old = problem()
    hi = kw.get("hess_init", 1.0)
    state = mod.init(m=x0, h=np.full_like(x0, hi))
    m, h, mom = x0.copy(), np.full_like(x0, hi), np.zeros_like(x0)
    worst = 0.0
    for t in range(1, 21):
        state = mod.step(state, oracles={"grad": grad}, data=old, rng=np.random.default_rng(t), lr=0.05, ess=40.0,
                         **kw)
        r = np.random.default_rng(t)                                  # the same draws, in the module's order
        eps = [r.standard_normal(x0.shape) for _ in range(kw["mc_samples"])]
        m, h, mom = reference_step(m, h, mom, t, eps, grad, old, lr=0.05, ess=40.0, **kw)
        worst = max(worst, np.abs(state["m"] - m).max(), np.abs(state["h"] - h).max() / np.abs(h).max())
    print(f"max error over 20 steps: {worst:.1e}")
    assert worst < 1e-12, worst
    assert np.abs(state["m"] - x0).max() > 1e-2


def test_at_the_checkpoint_the_step_reads_the_stored_full_data_estimates_only():
    """q = q_old: the batch terms cancel draw by draw, whatever the batch; the step is IVON's on (ḡ, h̄)."""
    mod = module()
    x0, grad, old = problem(1)
    kw = dict(lr=0.05, ess=40.0, mc_samples=2, beta2=0.9)
    at = dict(old, m_old=x0, s_old=40.0 * (np.ones_like(x0) + 1e-4))
    a = mod.step(mod.init(m=x0, h=np.ones_like(x0)), oracles={"grad": grad}, data=at, rng=np.random.default_rng(3), **kw)
    b = mod.step(mod.init(m=x0, h=np.ones_like(x0)), oracles={"grad": lambda th: 5 * grad(th) + th ** 3}, data=at,
                 rng=np.random.default_rng(4), **kw)
    m, h, _ = reference_step(x0, np.ones_like(x0), np.zeros_like(x0), 1, [np.zeros_like(x0)] * 2, lambda th: 0 * th,
                             at, **kw)
    for out in (a, b):
        np.testing.assert_allclose(out["m"], m, rtol=0, atol=1e-13)
        np.testing.assert_allclose(out["h"], h, rtol=1e-13)
