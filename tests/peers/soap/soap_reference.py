"""Test-side references for SOAP (Vyas et al. 2025) on one 2-D weight W (m × n), written from the slides'
Algorithm 1 (``/work/shared/references/bayes-duality-project-summary-slides.md``, "Using SOAP within the BLR") and
from the conventions of pytorch-optimizer's ``SOAP`` (read from its source, 4.1.0; nothing imported from it).

Algorithm 1 (the slides), per step:

    3:  G ← ∇ℓ(Θ),  G° ← Q_Lᵀ G Q_R
    4:  Ĥ ← G° ⊙ G°
    5:  Ḡ ← β1 Ḡ + (1 − β1) G°
    6:  H ← β2 H + (1 − β2) Ĥ
    7:  U ← Ḡ / (√H + ε)
    8:  Θ ← Θ − α Q_L U Q_Rᵀ
    9:  L ← β3 L + (1 − β3) G Gᵀ
    10: R ← β3 R + (1 − β3) Gᵀ G
    11: every T steps: Q_L, Q_R ← Eig(L), Eig(R); Ḡ carried into the new basis.

:func:`algorithm1` transcribes it literally (Ḡ kept in the rotated coordinates and rotated into the new basis at a
refresh: Ḡ ← Q_Lnewᵀ Q_L Ḡ Q_Rᵀ Q_Rnew).  :func:`soap_peer_conventions` is the same algorithm with the peer's
conventions, each a switch:

* the first call only initialises the statistics: L = (1 − β3) G₀G₀ᵀ, R = (1 − β3) G₀ᵀG₀, Q_L, Q_R their
  eigenvectors (``eigh``, columns in decreasing eigenvalue order), no parameter step, no weight decay; the step
  count t of the bias corrections starts at the second call (t = call − 1);
* the first moment is kept in the original coordinates (EMA of G) and rotated each step: equal to Algorithm 1's
  Ḡ carried into the new basis, because the rotation is linear;
* bias corrections as Adam's "efficient" form: the step size α√(1 − β2ᵗ)/(1 − β1ᵗ), ε added to √H undebiased
  (= √Ĥ + ε/√(1 − β2ᵗ) with the debiased Ĥ);
* decoupled weight decay after the step: Θ ← (Θ − step)(1 − α δ);
* the refresh at t % T == 0 (after the statistics' update) is one power iteration and a QR step per factor instead
  of an eigendecomposition: P = L Q_L, the estimated eigenvalues diag(Q_Lᵀ L Q_L) sorted decreasing, P's columns
  and H's rows (H's columns for R) permuted in that order, Q_L ← qr(P).Q; the peer casts P to float32 for the QR,
  which a float64 comparison cannot undo (``qr``: the QR's orthonormal factor as a function, default numpy's in
  float64);
* ``refresh="eigh"``: the refresh by an eigendecomposition as Algorithm 1 writes it (H kept as it is).
"""
from __future__ import annotations

import numpy as np


def eig_desc(X):
    """Eigenvectors of the symmetric X, columns in decreasing eigenvalue order (the peer: eigh(X + 1e-30 I),
    flipped)."""
    _, q = np.linalg.eigh(X + 1e-30 * np.eye(X.shape[0]))
    return q[:, ::-1].copy()


def power_qr(S, Q, H, axis, qr=None):
    """One power iteration and a QR step of the factor S from the basis Q; H permuted along ``axis`` in the order
    of the estimated eigenvalues."""
    P = S @ Q
    est = (Q * P).sum(axis=0)
    order = np.argsort(-est, kind="stable")
    H = np.take(H, order, axis=axis)
    P = P[:, order]
    return (np.linalg.qr(P)[0] if qr is None else qr(P)), H


def soap_peer_conventions(W0, grads, steps, *, lr, beta1, beta2, shampoo_beta=None, eps, weight_decay, every,
                          refresh="power_qr", qr=None, correct_bias=True, basis=None):
    """The peer's SOAP on W0 for 1 + ``steps`` calls of its step, ``grads`` a function of W called once per call;
    returns the list of W after each call (the first equals W0: the call that only initialises).  ``basis``: the
    initial (Q_L, Q_R) instead of the eigenvectors of the first statistics (which, for a non-square W, have a null
    space where LAPACK's choice of eigenvectors is arbitrary)."""
    b3 = beta2 if shampoo_beta is None else shampoo_beta
    W = W0.copy()
    G = grads(W)
    L, R = (1 - b3) * G @ G.T, (1 - b3) * G.T @ G
    QL, QR = (eig_desc(L), eig_desc(R)) if basis is None else basis
    mom, H = np.zeros_like(W), np.zeros_like(W)
    out = [W.copy()]
    for t in range(1, steps + 1):
        G = grads(W)
        Gr = QL.T @ G @ QR
        mom = beta1 * mom + (1 - beta1) * G
        H = beta2 * H + (1 - beta2) * Gr * Gr
        size = lr * (np.sqrt(1 - beta2**t) / (1 - beta1**t) if correct_bias else 1.0)
        N = QL @ ((QL.T @ mom @ QR) / (np.sqrt(H) + eps)) @ QR.T
        W = W - size * N
        if weight_decay:
            W = W * (1 - lr * weight_decay)
        L = b3 * L + (1 - b3) * G @ G.T
        R = b3 * R + (1 - b3) * G.T @ G
        if t % every == 0:
            if refresh == "eigh":
                QL, QR = eig_desc(L), eig_desc(R)
            else:
                QL, H = power_qr(L, QL, H, 0, qr)
                QR, H = power_qr(R, QR, H, 1, qr)
        out.append(W.copy())
    return out


def algorithm1(W0, QL, QR, L, R, grads, *, alpha, beta1, beta2, beta3, eps, every, steps, debias=None):
    """The slides' Algorithm 1 as written (lines 3-11), from a state Θ = W0, Q_L, Q_R, L, R with Ḡ = H = 0; the
    refresh by ``eig_desc`` and Ḡ rotated into the new basis.  ``debias``: None (as written), or the peer's
    bias corrections (step size α√(1 − β2ᵗ)/(1 − β1ᵗ)).  Returns the list of Θ after each step."""
    W = W0.copy()
    Gbar, H = np.zeros_like(W), np.zeros_like(W)
    out = []
    for t in range(1, steps + 1):
        G = grads(W)                                              # 3
        Gc = QL.T @ G @ QR
        Hhat = Gc * Gc                                            # 4
        Gbar = beta1 * Gbar + (1 - beta1) * Gc                    # 5
        H = beta2 * H + (1 - beta2) * Hhat                        # 6
        U = Gbar / (np.sqrt(H) + eps)                             # 7
        a = alpha if debias is None else alpha * np.sqrt(1 - beta2**t) / (1 - beta1**t)
        W = W - a * QL @ U @ QR.T                                 # 8
        L = beta3 * L + (1 - beta3) * G @ G.T                     # 9
        R = beta3 * R + (1 - beta3) * G.T @ G                     # 10
        if t % every == 0:                                        # 11
            QLn, QRn = eig_desc(L), eig_desc(R)
            Gbar = QLn.T @ QL @ Gbar @ QR.T @ QRn                 # momentum into the new basis
            QL, QR = QLn, QRn
        out.append(W.copy())
    return out


class Grads:
    """Mini-batch-like gradients of ℓ(W) = ½‖A W B − Y‖²_F + ¼Σ W⁴ (non-quadratic, so the curvature moves) plus
    the k-th fixed noise matrix on the k-th call since :meth:`reset`: each run sees the same sequence.  (Without
    the noise, G₁ is nearly diagonal in the eigenbasis of G₀G₀ᵀ and SOAP's sign-like normalisation of the tiny
    off-diagonal entries amplifies the rounding of the rotation: runs agree to ~1e-9 only.)"""

    def __init__(self, rng, m, n, calls, noise=1.0):
        self.A = rng.standard_normal((m, m))
        self.B = rng.standard_normal((n, n))
        self.Y = rng.standard_normal((m, n))
        self.noise = noise * rng.standard_normal((calls, m, n))
        self.k = 0

    def reset(self):
        self.k = 0
        return self

    def __call__(self, W):
        G = self.A.T @ (self.A @ W @ self.B - self.Y) @ self.B.T + W**3 + self.noise[self.k]
        self.k += 1
        return G
