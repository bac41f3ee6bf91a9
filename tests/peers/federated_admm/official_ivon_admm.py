"""IVON-ADMM as the official code runs it, written here in numpy from the published algorithm (a test-side
reference, never imported by the engine).

Source read: team-approx-bayes/bayes-admm (Möllenhoff, Swaroop, Doshi-Velez & Khan, *Federated ADMM from Bayesian
Duality*): ``toyexamples/admm_ivon.py`` (``bayes_admm_diagonalcov``, ``variational_subproblem_ivon``),
``ivonwithprior.py`` (IVON with a Gaussian prior and the Lagrange multipliers' terms) and ``local_client_worker.py``
/ ``train.py`` (the same client, dual and server steps in the deep-learning runs).  Their quantities, in their own
units, are kept here on purpose (the generated module works in other units: the precision s instead of IVON's
per-example Hessian h, the total loss instead of the mean, the dual natural parameters instead of (v, u)), so a
mismatch of the unit conversions shows up as a difference.

One round (``bayes_admm_diagonalcov``), K clients with N_k examples each, penalty ρ, dual damping d, temperature τ,
server step size α (default 1/(1 + Kρ)):

* client k solves its subproblem by IVON started afresh at the server's posterior (``_set_posterior``): effective
  sample size ess = N_k/(τρ), weight decay wd = s_g/ess towards the prior mean m_g (the server's posterior is the
  client's prior), the Lagrange terms as dual_mean = −τ v_k/N_k, dual_prec = −τ u_k/N_k, IVON's Hessian h starting
  at s_g/ess − wd = 0, momentum 0, a cosine learning rate over the n_steps + 1 steps, one sample per step:
      θ = m + ε/√(ess(h + wd)),  ḡ = ∇ℓ̄_k(θ) (the mean loss),  avg_nxg = (θ − m)ḡ
      u ← β₁u + (1 − β₁)ḡ
      f = avg_nxg (h + wd) ess + dual_prec
      h ← β₂h + (1 − β₂)f + ½(1 − β₂)²(h − f)²/(h + wd)
      m ← m − lr_t (u/(1 − β₁ᵗ) − dual_mean + dual_prec m + wd(m − m_g))/(h + wd)
  and returns (m, s = ess(h + wd));
* dual step: v_k ← v_k + dρ(s_k m_k − s_g m_g), u_k ← u_k + dρ(s_k − s_g);
* server: s_g = (1 − α) mean_k s_k + α(s_0 + Σ_k u_k), m_g = ((1 − α) mean_k s_k m_k + α Σ_k v_k)/s_g.
"""
import math

import numpy as np


def cosine_lr(lr, n_steps, i):
    """torch's CosineAnnealingLR (eta_min = 0, T_max = n_steps) at step i, in its closed form."""
    return lr * (1 + math.cos(math.pi * i / n_steps)) / 2


def ivon_subproblem(mean_grad, N, m_prior, s_prior, v, u, rho, tau, lr, beta1, beta2, n_steps, draw):
    """``variational_subproblem_ivon`` with one Monte Carlo sample per step; ``draw()`` gives ε ~ N(0, I)."""
    ess = N / (tau * rho)
    wd = s_prior / ess
    dual_mean, dual_prec = -tau * v / N, -tau * u / N
    m = m_prior.copy()
    h = s_prior / ess - wd                      # _set_posterior: the client starts at the server's posterior
    momentum = np.zeros_like(m)
    for i in range(n_steps + 1):
        lr_i = cosine_lr(lr, n_steps, i)
        noise = draw() / np.sqrt(ess * (h + wd))
        g = mean_grad(m + noise)
        avg_nxg = noise * g
        t = i + 1
        momentum = beta1 * momentum + (1 - beta1) * g
        f = avg_nxg * (h + wd) * ess + dual_prec
        h = beta2 * h + (1 - beta2) * f + 0.5 * (1 - beta2) ** 2 * (h - f) ** 2 / (h + wd)
        lagr_grad = -dual_mean + dual_prec * m
        m = m - lr_i * (momentum / (1 - beta1 ** t) + lagr_grad + wd * (m - m_prior)) / (h + wd)
    return m, ess * (h + wd)


def bayes_admm_diagonalcov(mean_grads, sizes, rounds, m_init, s_init, s_prior, rho, dual_damping, ivon, draws,
                           temperature=1.0, alpha=None):
    """The official outer loop: ``rounds`` rounds (its ``n_admm_iters + 1``); ``ivon`` = dict(lr, beta1, beta2,
    n_steps); ``draws[k]()`` client k's noise.  Returns the server's (m, s) after every round."""
    K = len(mean_grads)
    m_g, s_g = m_init.copy(), s_init.copy()
    v = [np.zeros_like(m_init) for _ in range(K)]
    u = [np.zeros_like(s_init) for _ in range(K)]
    alpha = 1.0 / (1.0 + K * rho) if alpha is None else alpha
    out = []
    for _ in range(rounds):
        ms, ss = [], []
        for k in range(K):
            m_k, s_k = ivon_subproblem(mean_grads[k], sizes[k], m_g, s_g, v[k], u[k], rho, temperature,
                                       draw=draws[k], **ivon)
            ms.append(m_k)
            ss.append(s_k)
        for k in range(K):
            v[k] = v[k] + dual_damping * rho * (ss[k] * ms[k] - s_g * m_g)
            u[k] = u[k] + dual_damping * rho * (ss[k] - s_g)
        s_g = (1 - alpha) * np.mean(ss, axis=0) + alpha * (s_prior + np.sum(u, axis=0))
        m_g = ((1 - alpha) * np.mean([s * m for s, m in zip(ss, ms)], axis=0) + alpha * np.sum(v, axis=0)) / s_g
        out.append((m_g.copy(), s_g.copy()))
    return out
