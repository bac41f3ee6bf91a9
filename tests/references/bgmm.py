"""Hand-written reference of the Bayesian Gaussian mixture with known variance (CAVI), shared by the tests of
the factorized candidates and of family sizes."""
import numpy as np
from scipy.special import digamma, logsumexp

SVI_HP = dict(sigma2=1.0, a0=1.0, m0=0.0, s0=0.1)


def cavi_bgmm_sweep(y, a, m, s, sigma2, a0, m0, s0):
    """One full-batch CAVI sweep for the Bayesian mixture with known variance (written from Bishop PRML
    Sec. 10.2 / Blei et al. 2017, Sec. 3): q(z_n) ∝ exp(E[log w_k] - E[(y_n - mu_k)²]/(2 sigma2)), then
    q(w) = Dir(a0 + N_k), then q(mu_k) = N(m_k, 1/s_k) with s_k = s0 + N_k/sigma2."""
    e_logw = digamma(a) - digamma(a.sum())
    logits = e_logw[None, :] - ((y[:, None] - m[None, :]) ** 2 + 1 / s[None, :]) / (2 * sigma2)
    r = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
    nk = r.sum(axis=0)
    a_new = a0 + nk
    s_new = s0 + nk / sigma2
    m_new = (s0 * m0 + r.T @ y / sigma2) / s_new
    return a_new, m_new, s_new, r
