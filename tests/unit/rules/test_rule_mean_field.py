"""Rules ``mean_field`` (Eq. 55; Secs. 5.2-5.3), ``factor_messages`` (Eqs. 58-60) and ``plate_sum`` (Eq. 54).

A factorized candidate q(θ)q(τ) = N(θ | m, 1/s) Gamma(τ | α, β) for y_n ~ N(θ, 1/τ) with a normal-gamma prior
(the factors of catalog/vmp.yaml, with block learning rates as hyperparameters).  One step updates the blocks
coordinate-wise, each with the *current* q of the other (mean field); each block takes the BLR step
λ_b ← (1−ρ_b)λ_b + ρ_b Σ_f λ̃_f with λ̃_f = −∇_{μ_b} E_q[ℓ_f] (Eq. 58), the data factor's message being the sum over
the rows of the plate (Eq. 54); with ``messages: true`` each λ̃_f is state, smoothed with ρ_b (Eq. 60).

References computed here without the engine's algebra:

* E_q[τ], E_q[log τ] and the τ-expectations by scipy ``quad`` against the Gamma density; θ-expectations by
  Gauss-Hermite quadrature (exact for these polynomials);
* −∇_{μ_θ} E_q[ℓ] by central differences in μ_θ = (m, m² + 1/s), and −∇_{μ_τ} E_q[ℓ] as the Fisher-preconditioned
  gradient F⁻¹∇_λ E_q[ℓ] (Eq. 4) with F = ∇²A by second differences of A(λ) = log Γ(λ₁+1) − (λ₁+1) log(−λ₂);
* the plate sum by additivity over disjoint sets of rows and invariance under row permutations.
"""
import functools

import numpy as np
from scipy import integrate, special, stats

from blr_derive import api

RULES_CHECKED = ("mean_field", "factor_messages", "plate_sum")

RECIPE = """
name: mf_{name}
plate:
  index: n
  data:
    y: {{description: observations}}
hyperparameters:
  m0: {{default: 0.0}}
  kappa0: {{default: 1.0}}
  alpha0: {{default: 1.0}}
  beta0: {{default: 1.0}}
  rho_theta: {{default: 1.0}}
  rho_tau: {{default: 1.0}}
blocks:
  theta: {{family: gaussian_diag, approximations: [exact], learning_rate: rho_theta{extra}}}
  tau: {{family: gamma, approximations: [exact], learning_rate: rho_tau}}
factors:
  likelihood: {{plate: true, expression: "tau*(y - theta)**2/2 - log(tau)/2"}}
  prior_theta: {{expression: "kappa0*tau*(theta - m0)**2/2 - log(tau)/2"}}
  prior_tau: {{expression: "beta0*tau - (alpha0 - 1)*log(tau)"}}
"""

HP = dict(m0=0.4, kappa0=0.8, alpha0=1.7, beta0=0.9)
Y = np.array([0.3, 1.9, -0.4, 1.1, 2.6, 0.8, 1.4])
STATE = dict(theta_m=-0.5, theta_s=0.6, tau_alpha=2.2, tau_beta=3.1)

GH_X, GH_W = np.polynomial.hermite_e.hermegauss(20)
GH_W = GH_W / GH_W.sum()


@functools.lru_cache(maxsize=None)
def module(messages=False):
    text = RECIPE.format(name="msg" if messages else "plain", extra=", messages: true" if messages else "")
    return api.derive(text).compile("numpy")


# ------------------------------------------------------------------ references

def gamma_expect(fn, alpha, beta):
    q = stats.gamma(alpha, scale=1 / beta)
    return integrate.quad(lambda t: fn(t) * q.pdf(t), 0, np.inf, epsabs=1e-14, epsrel=1e-13)[0]


def theta_part(th, y, hp):
    """The factors' coefficient of τ as a function of θ: Σ_n (y_n − θ)²/2 + κ₀(θ − m₀)²/2."""
    return 0.5 * ((y[:, None] - th) ** 2).sum(0) + hp["kappa0"] * (th - hp["m0"]) ** 2 / 2


def theta_target(y, tau_alpha, tau_beta, hp):
    """λ̂_θ = −∇_{μ_θ} E_{q(θ)q(τ)}[ℓ] (terms with θ only), central differences of the quadrature in μ_θ."""
    e_tau = gamma_expect(lambda t: t, tau_alpha, tau_beta)

    def E(u1, u2):
        th = u1 + np.sqrt(u2 - u1 * u1) * GH_X
        return e_tau * (GH_W @ theta_part(th, y, hp))
    u1, u2 = STATE["theta_m"], STATE["theta_m"] ** 2 + 1 / STATE["theta_s"]
    return theta_target_at(E, u1, u2)


def theta_target_at(E, u1, u2, h=1e-5):
    g1 = (E(u1 + h, u2) - E(u1 - h, u2)) / (2 * h)
    g2 = (E(u1, u2 + h) - E(u1, u2 - h)) / (2 * h)
    return -np.array([g1, g2])


def tau_target(y, theta_m, theta_s, alpha, beta, hp):
    """λ̂_τ = −F(λ)⁻¹∇_λ E_q[ℓ] at q(τ) = Gamma(α, β), θ ~ N(theta_m, 1/theta_s) (Eq. 4; h = 1)."""
    th = theta_m + GH_X / np.sqrt(theta_s)
    c_tau = GH_W @ theta_part(th, y, hp) + hp["beta0"]
    c_log = -(len(y) / 2 + 0.5 + hp["alpha0"] - 1)

    def E(lam):                                          # E_q[ℓ] up to θ-only constants, by quadrature over τ
        return gamma_expect(lambda t: c_tau * t + c_log * np.log(t), lam[0] + 1, -lam[1])

    def A(lam):
        return special.gammaln(lam[0] + 1) - (lam[0] + 1) * np.log(-lam[1])
    lam = np.array([alpha - 1, -beta])
    h, k = 1e-5, 1e-4
    grad = np.array([(E(lam + h * e) - E(lam - h * e)) / (2 * h) for e in np.eye(2)])
    K = np.eye(2) * k
    F = np.array([[(A(lam + K[i] + K[j]) - A(lam + K[i] - K[j]) - A(lam - K[i] + K[j]) + A(lam - K[i] - K[j]))
                   / (4 * k * k) for j in range(2)] for i in range(2)])
    return -np.linalg.solve(F, grad)


def lam_theta(m, s):
    return np.array([s * m, -s / 2])


def lam_tau(alpha, beta):
    return np.array([alpha - 1, -beta])


# FD of a quadratic (θ block) is exact up to rounding ~1e-11 relative; the τ block's reference goes through a
# second-difference Fisher (~1e-7 relative) and quad (~1e-13): 1e-6 / 1e-5 bound the two, far below the O(1)
# differences between the coordinate-wise and the simultaneous updates checked below.
RTOL_THETA, RTOL_TAU = 1e-8, 1e-5


def test_each_block_is_the_natural_gradient_step_with_the_others_current_candidate():
    mod = module()
    out = mod.step(mod.init(**STATE), data={"y": Y}, rho_theta=1.0, rho_tau=1.0, **HP)
    want_theta = theta_target(Y, STATE["tau_alpha"], STATE["tau_beta"], HP)
    np.testing.assert_allclose(lam_theta(out["theta_m"], out["theta_s"]), want_theta, rtol=RTOL_THETA)
    # τ is updated second, with the *new* q(θ) (coordinate-wise, Eq. 55)
    want_tau = tau_target(Y, out["theta_m"], out["theta_s"], STATE["tau_alpha"], STATE["tau_beta"], HP)
    np.testing.assert_allclose(lam_tau(out["tau_alpha"], out["tau_beta"]), want_tau, rtol=RTOL_TAU)
    # ... and not with the old one (the two differ by far more than the tolerance)
    stale = tau_target(Y, STATE["theta_m"], STATE["theta_s"], STATE["tau_alpha"], STATE["tau_beta"], HP)
    assert np.abs(stale - want_tau).max() > 1.0


def test_block_learning_rates_smooth_the_natural_parameters():
    """λ_b ← (1−ρ_b)λ_b + ρ_b λ̂_b (Eq. 58), each λ̂_b at the other block's current candidate."""
    mod = module()
    r_th, r_tau = 0.35, 0.6
    out = mod.step(mod.init(**STATE), data={"y": Y}, rho_theta=r_th, rho_tau=r_tau, **HP)
    old_th = lam_theta(STATE["theta_m"], STATE["theta_s"])
    want_theta = (1 - r_th) * old_th + r_th * theta_target(Y, STATE["tau_alpha"], STATE["tau_beta"], HP)
    np.testing.assert_allclose(lam_theta(out["theta_m"], out["theta_s"]), want_theta, rtol=RTOL_THETA)
    old_tau = lam_tau(STATE["tau_alpha"], STATE["tau_beta"])
    target = tau_target(Y, out["theta_m"], out["theta_s"], STATE["tau_alpha"], STATE["tau_beta"], HP)
    np.testing.assert_allclose(lam_tau(out["tau_alpha"], out["tau_beta"]), (1 - r_tau) * old_tau + r_tau * target,
                               rtol=RTOL_TAU)


def test_plate_messages_add_up_over_rows():
    """Eq. 54: the data factor's message is a sum of per-row messages.  With the prior's message counted once on
    each side, λ_θ(A ∪ B) + λ_θ(C) = λ_θ(A) + λ_θ(B ∪ C) for disjoint row sets; an empty plate leaves the prior;
    and the order of the rows does not matter."""
    mod = module()
    st = mod.init(**STATE)

    def lam(rows):
        out = mod.step(st, data={"y": np.asarray(rows, float)}, rho_theta=1.0, rho_tau=1.0, **HP)
        return lam_theta(out["theta_m"], out["theta_s"])
    A, B, C = Y[:2], Y[2:5], Y[5:]
    # sums of a handful of terms, grouped differently: a few roundings
    np.testing.assert_allclose(lam(np.r_[A, B]) + lam(C), lam(A) + lam(np.r_[B, C]), rtol=1e-13)
    perm = np.random.default_rng(0).permutation(len(Y))
    np.testing.assert_allclose(lam(Y[perm]), lam(Y), rtol=1e-13)
    # per row: λ_θ(Y) − λ_θ(∅) = Σ_n λ̃_n with λ̃_n = −∇_μ E_q[τ(y_n − θ)²/2] = E_q[τ](y_n, −1/2)
    e_tau = gamma_expect(lambda t: t, STATE["tau_alpha"], STATE["tau_beta"])
    per_row = sum(e_tau * np.array([y, -0.5]) for y in Y)
    np.testing.assert_allclose(lam(Y) - lam([]), per_row, rtol=1e-11)
    np.testing.assert_allclose(lam([]), theta_target(np.zeros(0), STATE["tau_alpha"], STATE["tau_beta"], HP),
                               rtol=RTOL_THETA)


def test_message_form_smooths_each_factor_and_sums_them():
    """Eq. 60: with one stored message per factor, λ_θ is their sum, each message is smoothed with ρ_θ, and the
    parameters are those of the plain form (Eq. 58) started from the same λ_θ."""
    msg, plain = module(True), module()
    old = dict(theta_likelihood_msg1=1.3, theta_likelihood_msg2=-0.9, theta_prior_theta_msg1=-0.2,
               theta_prior_theta_msg2=-0.4)
    lam_old = np.array([old["theta_likelihood_msg1"] + old["theta_prior_theta_msg1"],
                        old["theta_likelihood_msg2"] + old["theta_prior_theta_msg2"]])
    s_old = -2 * lam_old[1]
    m_old = lam_old[0] / s_old
    r_th, r_tau = 0.45, 0.8
    a = msg.step(msg.init(**old, tau_alpha=STATE["tau_alpha"], tau_beta=STATE["tau_beta"]), data={"y": Y},
                 rho_theta=r_th, rho_tau=r_tau, **HP)
    b = plain.step(plain.init(theta_m=m_old, theta_s=s_old, tau_alpha=STATE["tau_alpha"],
                              tau_beta=STATE["tau_beta"]), data={"y": Y}, rho_theta=r_th, rho_tau=r_tau, **HP)
    e_tau = gamma_expect(lambda t: t, STATE["tau_alpha"], STATE["tau_beta"])
    new_lik = e_tau * np.array([Y.sum(), -len(Y) / 2])                         # −∇_μ E_q[Σ_n τ(y_n − θ)²/2]
    new_pri = e_tau * HP["kappa0"] * np.array([HP["m0"], -0.5])                # −∇_μ E_q[κ₀τ(θ − m₀)²/2]
    got_lik = np.array([a["theta_likelihood_msg1"], a["theta_likelihood_msg2"]])
    got_pri = np.array([a["theta_prior_theta_msg1"], a["theta_prior_theta_msg2"]])
    np.testing.assert_allclose(got_lik, (1 - r_th) * np.array([old["theta_likelihood_msg1"],
                                                               old["theta_likelihood_msg2"]]) + r_th * new_lik,
                               rtol=1e-11)
    np.testing.assert_allclose(got_pri, (1 - r_th) * np.array([old["theta_prior_theta_msg1"],
                                                               old["theta_prior_theta_msg2"]]) + r_th * new_pri,
                               rtol=1e-11)
    np.testing.assert_allclose(got_lik + got_pri, lam_theta(b["theta_m"], b["theta_s"]), rtol=1e-12)
    for k in ("tau_alpha", "tau_beta"):
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12)


def test_plate_sum_of_a_trace_mixing_rows_and_globals_is_the_trace_of_summed_rows():
    """Σ_n z_n tr(mᵀ L yₙ) and Σ_n z_n tr(yₙᵀ L yₙ) (a chain whose per-row factors are adjacent only after a cyclic
    rotation) as plate statistics, evaluated with numbers: equal to the direct sums over 50 rows (1e-12)."""
    import types
    import sympy as sp
    from blr_derive.rules.product import FactorizedDerivation, PlateSums
    P = sp.Symbol("P", integer=True, positive=True)
    y, m, L = sp.MatrixSymbol("y", P, 1), sp.MatrixSymbol("m", P, 1), sp.MatrixSymbol("L", P, P)
    z = sp.Symbol("z", real=True)
    R = types.SimpleNamespace(plate={"data": [types.SimpleNamespace(symbol=y)], "index": "n"}, dims={"P": P},
                              blocks=[])
    D = FactorizedDerivation(R)
    ctx = PlateSums(R, D)
    ctx.row.add(z)
    e = 3 * z * sp.Trace(m.T * L * y) - z * sp.Trace(y.T * L * y) / 2
    summed = ctx.plate_sum(e)
    rng = np.random.default_rng(2)
    Pn, N = 3, 50
    Y, Z = rng.normal(size=(N, Pn)), rng.random(N)
    mv, Lv = rng.normal(size=Pn), rng.normal(size=(Pn, Pn))
    def explicit(e, reps):
        return sp.N(e.subs(P, Pn).xreplace(reps).doit())
    stats_vals = {}
    for s, d in D.stats:                     # each statistic Σ_n d(row n), a per-row product of z and y's
        stats_vals[s.subs(P, Pn)] = sum((explicit(d, {z: sp.Float(Z[n]), y.subs(P, Pn): sp.ImmutableMatrix(Y[n])})
                                         for n in range(N)), sp.ZeroMatrix(*d.subs(P, Pn).shape)
                                        if isinstance(d, sp.MatrixExpr) else sp.Integer(0))
    got = explicit(summed, {m.subs(P, Pn): sp.ImmutableMatrix(mv), L.subs(P, Pn): sp.ImmutableMatrix(Lv),
                            **stats_vals})
    want = sum(3 * Z[n] * mv @ Lv @ Y[n] - Z[n] * Y[n] @ Lv @ Y[n] / 2 for n in range(N))
    got = float(got[0, 0]) if isinstance(got, sp.MatrixBase) else float(got)
    assert len(D.stats) == 2 and abs(got - want) < 1e-12 * max(1.0, abs(want))
