"""The continuous Bernoulli (Loaiza-Ganem & Cunningham 2019), a family whose log-partition the engine derives by
integration, A = log((e^λ − 1)/λ), and whose μ → p inverse has no closed form (Newton).  Against
torch.distributions.ContinuousBernoulli in float64 (mean, variance = Fisher, entropy, log-density), and as a BLR
candidate: a loss linear in θ is conjugate (Eq. 6 with the coefficient as natural gradient)."""
import numpy as np
import pytest
import torch
import yaml
from scipy import special

from blr_derive import api
from blr_derive.families.library import load_family


@pytest.mark.parametrize("p", [0.1, 0.37, 0.62, 0.93])
def test_continuous_bernoulli_matches_torch(p):
    fam = load_family("continuous_bernoulli")
    vals = {fam.params["p"].symbol: p}
    law = torch.distributions.ContinuousBernoulli(probs=torch.tensor(p, dtype=torch.float64))
    assert float(fam.evaluate(fam.mu_ord[0], vals)) == pytest.approx(float(law.mean), rel=1e-12)
    assert float(fam.evaluate(fam.entropy(), vals)) == pytest.approx(float(law.entropy()), rel=1e-11)
    lam = {fam.lam[0]: float(special.logit(p))}
    assert float(np.asarray(fam.fisher_at(lam), dtype=float).item()) == pytest.approx(float(law.variance), rel=1e-10)
    for x in (0.05, 0.5, 0.97):
        got = float(fam.evaluate(fam.log_density(), {**vals, fam.theta: x}))
        assert got == pytest.approx(float(law.log_prob(torch.tensor(x, dtype=torch.float64))), rel=1e-12)


def test_a_linear_loss_is_a_conjugate_step():
    """ℓ = 3θ: ∇_μ E_q[ℓ] = 3, so λ ← (1 − ρ)λ − 3ρ (Eq. 6, h = 1); the new p = σ(λ) is read back through the
    family's numeric μ → p solve, and the step is compared with the closed form."""
    rho, p = 0.3, 0.8
    mod = api.derive(yaml.safe_dump({"name": "cb_lin", "family": "continuous_bernoulli",
                                     "loss": {"expression": "3*theta"}, "hyperparameters": {"rho": rho},
                                     "approximations": ["exact"]})).compile("numpy")
    out = float(mod.step(mod.init(p=p), rho=rho)["p"])
    assert out == pytest.approx(special.expit((1 - rho) * special.logit(p) - 3 * rho), rel=1e-10)
