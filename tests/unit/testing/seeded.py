"""Hand-written optimizers for the tests of :mod:`blr_derive.testing`: a plain Adam and an RMSprop written from
their papers' update equations (Kingma & Ba 2015, Alg. 1; Tieleman & Hinton 2012), each with switches that
seed one mistake a user's implementation typically has.  They also serve ``blr-derive verify --against``."""
from __future__ import annotations

import torch


class HandAdam(torch.optim.Optimizer):
    """Adam (coupled L2 weight decay, as torch.optim.Adam).  Mistakes: ``eps_inside`` (eps under the square root),
    ``no_bias_correction``, ``beta1_on_second`` (β₁ instead of β₂ for the second moment), ``decoupled`` (AdamW's
    decay: the recipe 'adam' couples it)."""

    mistake = None

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
                t = st["step"]
                g = p.grad if (self.mistake == "decoupled" or wd == 0) else p.grad + wd * p
                if self.mistake == "decoupled":
                    p.mul_(1 - lr * wd)
                st["exp_avg"].mul_(b1).add_(g, alpha=1 - b1)
                b = b1 if self.mistake == "beta1_on_second" else b2
                st["exp_avg_sq"].mul_(b).addcmul_(g, g, value=1 - b)
                if self.mistake == "no_bias_correction":
                    m_hat, v_hat = st["exp_avg"], st["exp_avg_sq"]
                else:
                    m_hat, v_hat = st["exp_avg"] / (1 - b1 ** t), st["exp_avg_sq"] / (1 - b2 ** t)
                denom = (v_hat + eps).sqrt() if self.mistake == "eps_inside" else v_hat.sqrt() + eps
                p.sub_(lr * m_hat / denom)


def seeded_adam(mistake):
    return type(f"Adam_{mistake}", (HandAdam,), {"mistake": mistake})


class HandRMSprop(torch.optim.Optimizer):
    """RMSprop (no momentum): the squared gradient as the Hessian estimate, times ``hess_scale`` (a mistake when
    it is not 1; negative: the wrong sign)."""

    hess_scale = 1.0

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["square_avg"] = torch.zeros_like(p)
                st["step"] += 1
                g = p.grad + group["weight_decay"] * p
                st["square_avg"].mul_(group["alpha"]).add_(self.hess_scale * g * g, alpha=1 - group["alpha"])
                p.sub_(group["lr"] * g / (st["square_avg"].sqrt() + group["eps"]))


def seeded_rmsprop(scale):
    return type(f"RMSprop_hess_x{scale}", (HandRMSprop,), {"hess_scale": scale})


class WrongBetaAdam(HandAdam):
    """Adam with β₁ on the second moment (the README's worked example)."""

    mistake = "beta1_on_second"


# ------------------------------------------------------------------------------------- numpy references
import numpy as np  # noqa: E402


def newton_step(state, *, oracles, rng=None, rho=1.0):
    """Online Newton (Khan & Rue Eqs. 12-13): S ← (1−ρ)S + ρH, m ← m − ρ S⁻¹ g."""
    m, S = state["m"], state["S"]
    S_new = (1 - rho) * S + rho * oracles["hess"](m)
    return {"m": m - rho * np.linalg.solve(S_new, oracles["grad"](m)), "S": S_new}


def newton_step_negated_hessian(state, *, oracles, rng=None, rho=1.0):
    """A seeded mistake: the Hessian enters the precision with the wrong sign."""
    m, S = state["m"], state["S"]
    S_new = (1 - rho) * S - rho * oracles["hess"](m)
    return {"m": m - rho * np.linalg.solve(S_new, oracles["grad"](m)), "S": S_new}


def online_newton_diag_step(state, *, oracles, rng=None, rho=0.1, hess_scale=1.0):
    """The diagonal online Newton of Eq. 37: s ← (1−ρ)s + ρ diag(H), m ← m − ρ g/s (``hess_scale`` ≠ 1 seeds a
    wrong scale)."""
    m, s = state["m"], state["s"]
    s_new = (1 - rho) * s + rho * hess_scale * oracles["hess"](m)
    return {"m": m - rho * oracles["grad"](m) / s_new, "s": s_new}


class EpsInsideAdam(HandAdam):
    mistake = "eps_inside"


class NoBiasCorrectionAdam(HandAdam):
    mistake = "no_bias_correction"


class DecoupledDecayAdam(HandAdam):
    mistake = "decoupled"


class RMSpropHessianTimesTwo(HandRMSprop):
    hess_scale = 2.0


#: (recipe, seeded class name, the user's diverging variable, the derived assignment that differs) — the five kinds
#: of mistakes of issue 20, each pinpointed at step 1
SEEDED = [
    ("adam", "EpsInsideAdam", "parameter", "m ← -lr*u_hat/s_root + m"),
    ("adam", "NoBiasCorrectionAdam", "parameter", "m ← -lr*u_hat/s_root + m"),
    ("adam", "WrongBetaAdam", "exp_avg_sq", "s ← beta2*s + h_gsq*(1 - beta2)"),
    ("adam", "DecoupledDecayAdam", "exp_avg", "u ← beta1*u + g_wd*(1 - beta1)"),
    ("rmsprop", "RMSpropHessianTimesTwo", "square_avg", "s ← alpha*s + h_gsq*(1 - alpha)"),
]
