"""A finite integer support ("integers 0..n"): the binomial with known n, a sized family.  Against
scipy.stats.binom (μ, entropy, log-pmf), and as a BLR candidate under `exact` with a loss that is not linear in
T (a finite support makes E_q[ℓ] a sum), against Eq. 6 computed by enumeration."""
import numpy as np
import pytest
import yaml
from scipy import special, stats

from blr_derive import api
from blr_derive.core.errors import SpecError
from blr_derive.families.library import load_family


@pytest.mark.parametrize("n, p", [(10, 0.3), (25, 0.91), (1, 0.5)])
def test_binomial_matches_scipy(n, p):
    fam = load_family({"name": "binomial", "n": n})
    vals = {fam.params["p"].symbol: p}
    law = stats.binom(n, p)
    assert float(fam.evaluate(fam.mu_ord[0], vals)) == pytest.approx(law.mean(), rel=1e-14)
    assert float(fam.evaluate(fam.entropy(), vals)) == pytest.approx(float(law.entropy()), rel=1e-12)
    logq = fam.log_density()
    for k in (0, n // 2, n):
        assert float(fam.evaluate(logq, {**vals, fam.theta: k})) == pytest.approx(law.logpmf(k), rel=1e-12,
                                                                                     abs=1e-13)


def test_a_nonlinear_loss_is_summed_exactly_over_the_support():
    """ℓ(θ) = (θ − 3)²/4: E_q[ℓ] = Σ_k q(k)ℓ(k); Eq. 6, λ ← (1 − ρ)λ − ρ∇_μE_q[ℓ + log h] with h = C(n, θ) and
    ∇_μ = F⁻¹∇_λ, by enumeration and central differences at λ = logit p."""
    mod = api.derive(yaml.safe_dump({"name": "binomial_sq", "family": {"name": "binomial", "n": 8},
                                     "loss": {"expression": "(theta - 3)**2/4"},
                                     "hyperparameters": {"rho": 0.4}, "approximations": ["exact"]})).compile("numpy")
    p, rho, n = 0.6, 0.4, 8
    k = np.arange(n + 1)
    lam = np.log(p / (1 - p))

    def expected_loss(l):
        q = stats.binom(n, special.expit(l)).pmf(k)
        return float(np.sum(q * ((k - 3) ** 2 / 4 + np.log(special.comb(n, k)))))

    h = 1e-5
    grad_lam = (expected_loss(lam + h) - expected_loss(lam - h)) / (2 * h)
    fisher = n * p * (1 - p)
    lam_new = (1 - rho) * lam - rho * grad_lam / fisher
    out = float(mod.step(mod.init(p=p), rho=rho)["p"])
    assert out == pytest.approx(special.expit(lam_new), rel=1e-9)          # central differences: O(h²)


@pytest.mark.parametrize("support", ["integers 3..3", "integers 0..99999", "integers -1..4", "integers 0.5..4"])
def test_bad_ranges_are_located_errors(support, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\nvariable: theta\nsupport: '{support}'\nparameters:\n  a: {{domain: real}}\n"
                    "sufficient_statistics: [theta]\nnatural_parameters: [a]\n", encoding="utf-8")
    with pytest.raises(SpecError, match="bad.yaml:3: unsupported support"):
        load_family(str(path))
