"""Update passes rewrite one view (gradient, Hessian, mean): where a derivation has several (free mixture components,
posterior correction's current and snapshot oracles) they are located errors instead of silently rewriting one."""
import pytest

from blr_derive import api as blr
from blr_derive.core.errors import SpecError


def test_a_pass_on_a_mixture_with_two_free_components_is_a_located_error():
    """squared_gradient_hessian used to replace the Hessian of the last component only (H1 stayed in s1's update)."""
    with pytest.raises(SpecError, match="one free component") as exc:
        blr.derive(family={"mixture": "gaussian_diag", "components": 2},
                   approximations=["delta", "separated_components", "squared_gradient_hessian"])
    assert exc.value.line is not None


def test_a_pass_on_a_mixture_with_one_free_component_applies():
    d = blr.derive(family={"mixture": "gaussian_diag", "components": 2, "fixed": {2: {"m": 0, "s": 10}}},
                   approximations=["delta", "separated_components", "squared_gradient_hessian"])
    assert "H" not in {str(s) for e in d.update.values() for s in e.free_symbols}
    assert {str(s) for s in d.update["s"].free_symbols} >= {"h_gsq", "s"}
    assert str(d.definitions["h_gsq"]) == "g**2"              # the squared-gradient estimate of the Hessian


@pytest.mark.parametrize("p", ["squared_gradient_hessian", {"weight_decay": {"coefficient": 0.1}},
                               {"minibatch": {"size": 10}}])
def test_a_pass_after_posterior_correction_rewrites_the_corrected_estimates(p):
    """A pass after posterior_correction used to rewrite the snapshot's oracle values (g_old, H_old) only (the last
    oracle call took the view); it was then a located error.  The correction now acts on the update program at its
    place in the list, so a pass after it sees the corrected estimates: the step equals the step of the recipe
    without the correction on the oracles g' = g(m) − g(m_old) + ḡ + (H̄ − H(m_old))(m − m_old),
    H' = H(m) − H(m_old) + H̄ (the diagonal Gaussian; what (g − Hm, H/2) of the three natural gradients sums to)."""
    import numpy as np
    a, c = np.array([1.5, 0.8, 3.0]), np.array([-0.4, 0.6, 1.0])

    def g(t):
        return a * np.tanh(t - c)

    def H(t):
        return a * (1 - np.tanh(t - c) ** 2)

    m, s, m_old, s_old = (np.array([1.0, -0.5, 0.2]), np.array([2.0, 0.7, 4.0]), np.array([0.3, 0.9, -1.1]),
                          np.array([1.0, 3.0, 0.5]))
    gbar, Hbar = np.array([0.2, -0.7, 0.4]), np.array([1.1, 0.6, 2.5])
    with_ = blr.derive(family="gaussian_diag", approximations=["delta", "posterior_correction", p]).compile("numpy")
    without = blr.derive(family="gaussian_diag", approximations=["delta", p]).compile("numpy")
    g_corr = g(m) - g(m_old) + gbar + (Hbar - H(m_old)) * (m - m_old)
    H_corr = H(m) - H(m_old) + Hbar
    x = with_.step(with_.init(m=m, s=s), oracles={"grad": g, "hess": H},
                   data={"m_old": m_old, "s_old": s_old, "grad_full": gbar, "hess_full": Hbar}, rho=0.3)
    y = without.step(without.init(m=m, s=s), oracles={"grad": lambda t: g_corr, "hess": lambda t: H_corr}, rho=0.3)
    for k in ("m", "s"):
        np.testing.assert_allclose(x[k], y[k], rtol=1e-12, atol=1e-14)
    assert np.abs(x["m"] - without.step(without.init(m=m, s=s), oracles={"grad": g, "hess": H}, rho=0.3)["m"]).max() > 1e-3
