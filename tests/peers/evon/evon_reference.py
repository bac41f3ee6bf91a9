"""Test-side reference for EVON (Minut, Daheim, Miani, Khan, Lin & Möllenhoff 2026, "SOAP-Bubbles") on one 2-D
weight W (m × n), written from the slides' Algorithm 2 (``/work/shared/references/bayes-duality-project-summary-
slides.md``, "Using SOAP within the BLR"); nothing is imported from the engine or from the official code.

Algorithm 2 (the slides), per step:

    1:  V ← 1 / (ζ (H + δ))                                  (elementwise, in the rotated coordinates)
    2:  Θ ← M + Q_L E Q_Rᵀ,   E_ij ~ N(0, V_ij)
    3:  G ← ∇ℓ(Θ),   G° ← Q_Lᵀ G Q_R
    4:  Ĥ ← clip(E ⊙ G° / V)
    5:  Ḡ ← β1 Ḡ + (1 − β1) G°
    6:  H ← β2 H + (1 − β2) Ĥ + ½ (1 − β2)² (Ĥ − H)^⊙2 / (H + δ)
    7:  U ← (Ḡ + δ Q_Lᵀ M Q_R) / (H + δ)
    8:  M ← M − α clip(Q_L U Q_Rᵀ)
    9:  L ← β3 L + (1 − β3) G Gᵀ
    10: R ← β3 R + (1 − β3) Gᵀ G
    11: every T steps: Q_L, Q_R ← Eig(L), Eig(R); Ḡ carried into the new basis.

:func:`algorithm2` transcribes it.  The slides do not say the clips' form: line 4's clip is off unless ``clip_ratio``
> 0, then Ĥ is clipped to ±clip_ratio·(H + clip_eps) (H before the step: the official code's form, read from
``team-approx-bayes/evon``); line 8's clip is not transcribed (the tests run without it).
The draw E is ``sqrt(V) * z`` with ``z = rng.standard_normal(M.shape)``, one z per step, so that a run given the
same generator state sees the same draws as a generated module.  ``refresh``:

* ``"eigh"``: line 11 as written, Eig by an eigendecomposition (columns by decreasing eigenvalue), H kept;
* ``"power"``: SOAP's cheap refresh (Vyas et al. 2025, Alg. 4): P = L Q_L, its columns ordered by decreasing
  Rayleigh quotient diag(Q_Lᵀ L Q_L) (stable sort), Q_L ← the Q factor of P's QR; H's rows (columns for R)
  permuted in the same order, since each entry of H belongs to a column of the basis.
"""
from __future__ import annotations

import numpy as np


def eig_desc(S):
    """Eigenvectors of the symmetric S as columns, by decreasing eigenvalue."""
    return np.linalg.eigh(S)[1][:, ::-1]


def power_refresh(S, Q):
    order = np.argsort(-np.einsum("ij,ij->j", Q, S @ Q), kind="stable")
    return np.linalg.qr((S @ Q)[:, order])[0], order


def algorithm2(M, H, Gbar, L, R, QL, QR, grads, rng, *, zeta, delta, alpha, beta1, beta2, beta3, every, steps,
               refresh="eigh", t0=0, clip_ratio=0.0, clip_eps=1e-8):
    """``steps`` steps of Algorithm 2 from the state (M, H, Ḡ, L, R, Q_L, Q_R) at step count t0.  Returns the list
    of states (dicts) after each step."""
    out = []
    for t in range(t0 + 1, t0 + steps + 1):
        V = 1.0 / (zeta * (H + delta))                                   # 1
        E = np.sqrt(V) * rng.standard_normal(M.shape)                    # 2
        Theta = M + QL @ E @ QR.T
        G = grads(Theta)                                                 # 3
        Gc = QL.T @ G @ QR
        Hhat = E * Gc / V                                                # 4
        if clip_ratio > 0:
            Hhat = np.clip(Hhat, -clip_ratio * (H + clip_eps), clip_ratio * (H + clip_eps))
        Gbar = beta1 * Gbar + (1 - beta1) * Gc                           # 5
        H = beta2 * H + (1 - beta2) * Hhat + 0.5 * (1 - beta2) ** 2 * (Hhat - H) ** 2 / (H + delta)   # 6
        U = (Gbar + delta * QL.T @ M @ QR) / (H + delta)                 # 7
        M = M - alpha * QL @ U @ QR.T                                    # 8 (no clip)
        L = beta3 * L + (1 - beta3) * G @ G.T                            # 9
        R = beta3 * R + (1 - beta3) * G.T @ G                            # 10
        if t % every == 0:                                               # 11
            if refresh == "eigh":
                QLn, QRn = eig_desc(L), eig_desc(R)
            else:
                (QLn, oL), (QRn, oR) = power_refresh(L, QL), power_refresh(R, QR)
                H = H[oL][:, oR]
            Gbar = QLn.T @ QL @ Gbar @ QR.T @ QRn                        # momentum into the new basis
            QL, QR = QLn, QRn
        out.append(dict(M=M.copy(), H=H.copy(), Gbar=Gbar.copy(), L=L.copy(), R=R.copy(), Q_L=QL.copy(),
                        Q_R=QR.copy()))
    return out


class Grads:
    """Gradients of ℓ(W) = (1/(2N))‖A W B − Y‖²_F + ¼ Σ W⁴ / N (non-quadratic, so the Price estimate moves)."""

    def __init__(self, rng, m, n, N=20.0):
        self.A = rng.standard_normal((m + 2, m))
        self.B = rng.standard_normal((n, n + 1))
        self.Y = rng.standard_normal((m + 2, n + 1))
        self.N = N

    def __call__(self, W):
        return (self.A.T @ (self.A @ W @ self.B - self.Y) @ self.B.T + W**3) / self.N
