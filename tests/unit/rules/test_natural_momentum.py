"""The BLR with momentum in natural parameters (Eq. 80) against a reference written in λ."""
import numpy as np

from conftest import load_generated


def test_online_newton_momentum_equals_eq80_in_natural_parameters():
    mod = load_generated("online_newton_momentum")
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 2.0, size=5)
    c = rng.normal(size=5)
    grad = lambda x: a * (x - c) + 0.2 * np.sin(x)
    hess = lambda x: a + 0.2 * np.cos(x)
    rho, gamma = 0.3, 0.6
    m, s = np.zeros(5), np.ones(5)
    lam = [s * m, -s / 2]
    lam_prev = [l.copy() for l in lam]
    state = mod.init(m=m, s=s)
    for _ in range(40):
        g, H = grad(m), hess(m)
        nat = [g - H * m, H / 2]                        # ∇_μ E_q[ℓ] with the delta method (Eqs. 10, 11, 13)
        new = [(1 - rho) * l - rho * d + gamma * (l - lp) for l, d, lp in zip(lam, nat, lam_prev)]   # Eq. 80
        lam_prev, lam = lam, new
        s = -2 * lam[1]
        m = lam[0] / s
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, rho=rho, gamma=gamma)
        np.testing.assert_allclose(state["m"], m, rtol=0, atol=1e-12)
        np.testing.assert_allclose(state["s"], s, rtol=0, atol=1e-12)
    for _ in range(300):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, rho=rho, gamma=gamma)
    assert np.linalg.norm(grad(state["m"])) < 1e-8      # converges to the minimum ...
    np.testing.assert_allclose(state["s"], hess(state["m"]), rtol=1e-8)   # ... with the Hessian as precision
