"""fitness_shaping: the loss values at the samples replaced by rank-based utilities, checked against the utilities
written out here from Wierstra et al. (2014), Sec. 3.1, and Salimans et al. (2017), through generated steps."""
import numpy as np
import pytest
import torch

from blr_derive import api
from blr_derive.core.errors import SpecError

RULES_CHECKED = ("fitness_shaping",)

BASE = """
name: shaping_check
title: check
class_name: ShapingCheck
family: gaussian_diag
loss: abstract
learning_rate: rho
hyperparameters:
  rho: {default: 0.1, description: learning rate}
  mc_samples: {default: 3, type: int, description: samples}
state_init: {s: 1.0}
approximations:
  - score_function: {samples: mc_samples}
  - no_entropy
"""


def build(extra=""):
    return api.derive(BASE + extra).compile("numpy")


class Fixed:
    def __init__(self, z):
        self.z = [np.asarray(r, dtype=float) for r in z]

    def standard_normal(self, shape):
        return self.z.pop(0).copy()


def nes_utilities(S):
    """Wierstra et al. (2014), Sec. 3.1: u_k = max(0, log(S/2 + 1) − log k)/Σ_j max(0, log(S/2 + 1) − log j) − 1/S."""
    raw = [max(0.0, np.log(S / 2 + 1) - np.log(k)) for k in range(1, S + 1)]
    return np.array([w / sum(raw) - 1 / S for w in raw])


def shaped_mean_step(mod, losses, z, **hp):
    """Feed one coordinate's draws and losses; return dlam1 recovered from m' = m − ρ dlam1 (no_entropy, s = 1)."""
    it = iter(losses)
    # ρ = 1 with random losses may take s out of (0, ∞) (the step then raises, blr_derive/ir/validity.py): these
    # tests check the step's algebra, so the domain check is off here
    mod.CHECK_DOMAINS = False
    out = mod.step({"m": np.zeros(1), "s": np.ones(1)}, oracles={"loss": lambda th: next(it)},
                   rng=Fixed([np.array([v]) for v in z]), mc_samples=len(losses), rho=1.0, **hp)
    return out


@pytest.mark.parametrize("S", [2, 5, 8, 13])
def test_nes_utilities_replace_the_losses(S):
    mod = build("  - fitness_shaping: {utilities: nes}\n")
    rng = np.random.default_rng(S)
    losses, z = rng.normal(size=S) * 10, rng.normal(size=S)
    out = shaped_mean_step(mod, losses, z)
    u = nes_utilities(S)[np.argsort(np.argsort(losses))]
    # dlam1 = mean_k(ℓ̃_k (θ_k − m)) with ℓ̃_k = −S u_k and θ_k − m = z_k (s = 1); the mean step of Eq. 6 is
    # λ1' = λ1 − ρ·∇_μ1 with ∇_μ1 = s(dlam1(2m²s + 1) − dlam2·m·s) = dlam1 at m = 0, s = 1
    dlam1 = np.mean(-S * u * z)
    dlam2 = np.mean(-S * u * (z ** 2 - 1))
    s_new = 1 - 2 * 0 + dlam2            # s' = s + ρ s²(dlam2 − 2 m dlam1) at m = 0, s = 1, ρ = 1
    np.testing.assert_allclose(out["s"], s_new, rtol=1e-13)
    np.testing.assert_allclose(out["m"], -dlam1 / s_new, rtol=1e-13)


def test_centered_ranks():
    mod = build("  - fitness_shaping: {utilities: centered_ranks}\n")
    losses, z = np.array([0.5, -2.0, 4.0, 1.0, 3.0]), np.array([0.3, -1.0, 2.0, 0.7, -0.4])
    out = shaped_mean_step(mod, losses, z)
    ranks = np.argsort(np.argsort(losses))
    v = ranks / (len(losses) - 1) - 0.5                 # Salimans et al. (2017), evosax's centered_rank
    dlam2 = np.mean(v * (z ** 2 - 1))
    np.testing.assert_allclose(out["s"], 1 + dlam2, rtol=1e-13)
    np.testing.assert_allclose(out["m"], -np.mean(v * z) / (1 + dlam2), rtol=1e-13)


def test_step_depends_on_the_losses_only_through_their_order():
    mod = build("  - fitness_shaping: {utilities: nes}\n")
    z = [np.array([0.3, -1.2]), np.array([1.1, 0.4]), np.array([-0.7, 0.9])]
    state = {"m": np.array([0.4, -0.8]), "s": np.array([2.0, 0.7])}
    f = lambda th: float(np.sum(np.cos(th) + 0.3 * th ** 2))
    a = mod.step(state, oracles={"loss": f}, rng=Fixed(z), rho=0.2)
    b = mod.step(state, oracles={"loss": lambda th: np.exp(f(th)) - 3.0}, rng=Fixed(z), rho=0.2)
    c = mod.step(state, oracles={"loss": lambda th: -f(th)}, rng=Fixed(z), rho=0.2)
    for k in ("m", "s"):
        np.testing.assert_array_equal(a[k], b[k])        # a monotone transform: the same ranks, the same step
        assert np.all(a[k] != c[k])                      # reversing the order changes it


def test_a_nan_loss_ranks_last():
    mod = build("  - fitness_shaping: {utilities: nes}\n")
    z = np.array([0.3, -1.0, 2.0, 0.7])
    a = shaped_mean_step(mod, [1.0, np.nan, 0.0, 2.0], z)
    b = shaped_mean_step(mod, [1.0, 99.0, 0.0, 2.0], z)       # the same order with the NaN as the worst
    np.testing.assert_array_equal(a["m"], b["m"])
    assert np.all(np.isfinite(a["m"]))


@pytest.mark.parametrize("extra, message", [
    ("  - fitness_shaping: {utilities: fancy}\n", "utilities must be one of nes, centered_ranks"),
    ("  - fitness_shaping: {utilities: nes, temperature: 2}\n", "unknown argument(s): temperature"),
])
def test_refused_with_a_located_message(tmp_path, extra, message):
    (tmp_path / "bad.yaml").write_text(BASE + extra)
    with pytest.raises(SpecError) as e:
        api.generate(str(tmp_path / "bad.yaml"), "numpy")
    assert message in str(e.value) and "bad.yaml:15: " in str(e.value)


def test_needs_samples_and_the_torch_target_ranks_them_at_step(tmp_path):
    delta = BASE.replace("  - score_function: {samples: mc_samples}\n  - no_entropy\n", "  - delta\n")
    (tmp_path / "delta.yaml").write_text(delta + "  - fitness_shaping: {utilities: nes}\n")
    with pytest.raises(SpecError, match="draws none"):
        api.generate(str(tmp_path / "delta.yaml"), "numpy")
    # the torch optimizer keeps each sample's draw and loss until step(), ranks there: the numpy step's values
    text = BASE + "  - fitness_shaping: {utilities: centered_ranks}\n"
    p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = api.derive(text).compile("torch").ShapingCheck([p], rho=1.0, mc_samples=5)
    losses, z = [0.5, -2.0, 4.0, 1.0, 3.0], []
    torch.manual_seed(0)
    for v in losses:
        with opt.sampled_params(train=True) as tell:
            z.append(float(p.detach()))           # θ_k = m + z_k/sqrt(s) = z_k at m = 0, s = 1
            tell(v)
    opt.step()
    out = shaped_mean_step(api.derive(text).compile("numpy"), losses, z)
    np.testing.assert_allclose(p.detach().numpy(), out["m"], rtol=1e-13)
    np.testing.assert_allclose(opt.state[p]["s"].numpy(), out["s"], rtol=1e-13)


def test_centered_ranks_of_one_sample_is_an_error_not_a_nan():
    mod = build("  - fitness_shaping: {utilities: centered_ranks}\n")
    with pytest.raises(ValueError, match=r"fitness shaping \(centered_ranks\) is undefined for 1 sample"):
        shaped_mean_step(mod, [0.5], [0.3])
