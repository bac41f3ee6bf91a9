"""Finite-difference derivatives for the numeric checks."""
from __future__ import annotations

import numpy as np


def fd_hessian(f, x, eps=1e-4):
    d = len(x)
    H = np.zeros((d, d))
    for i in range(d):
        for j in range(i, d):
            ei = np.zeros(d)
            ej = np.zeros(d)
            ei[i] = eps
            ej[j] = eps
            H[i, j] = H[j, i] = (f(x + ei + ej) - f(x + ei - ej) - f(x - ei + ej) + f(x - ei - ej)) / (4 * eps * eps)
    return H
