"""step_coordinates: Eq. 6 stepped in other coordinates of q agrees with Eq. 6 to first order in ρ (the difference
shrinks as ρ², measured), moves a parameter named with log(·) multiplicatively, and is refused where it cannot
apply.  Also change_variable's choice of the positive branch of a map with two inverses (s = std⁻²)."""
import numpy as np
import pytest

from blr_derive import api
from blr_derive.ir.build import build_ir
from blr_derive.core.errors import SpecError

RULES_CHECKED = ("step_coordinates", "change_variable")

BASE = """
name: coords_check
title: check
class_name: CoordsCheck
family: gaussian_diag
loss: abstract
learning_rate: rho
hyperparameters:
  rho: {default: 0.1, description: learning rate}
  mc_samples: {default: 3, type: int, description: samples}
state_init: {s: 1.0}
approximations:
  - score_function: {samples: mc_samples}
"""


class Fixed:
    def __init__(self, z):
        self.z = [np.asarray(r, dtype=float) for r in z]

    def standard_normal(self, shape):
        return self.z.pop(0).copy()


def build(extra=""):
    return api.derive(BASE + extra).compile("numpy")


loss = lambda th: float(np.sum(np.cos(th) + 0.3 * th ** 2))
Z = [np.array([0.3, -1.2]), np.array([1.1, 0.4]), np.array([-0.7, 0.9])]
STATE = {"m": np.array([0.4, -0.8]), "s": np.array([2.0, 0.7])}


def test_coordinates_step_agrees_with_eq6_to_first_order():
    blr = build()
    logs = build("  - step_coordinates: {s: log(s)}\n")
    plain = build("  - step_coordinates: {}\n")       # every parameter along its own tangent
    gaps = {}
    for rho in (0.1, 0.05, 0.025):
        a = blr.step(STATE, oracles={"loss": loss}, rng=Fixed(Z), rho=rho)
        b = logs.step(STATE, oracles={"loss": loss}, rng=Fixed(Z), rho=rho)
        c = plain.step(STATE, oracles={"loss": loss}, rng=Fixed(Z), rho=rho)
        gaps[rho] = max(np.max(np.abs(a[k] - b[k])) for k in ("m", "s"))
        # the tangent step of s in s itself is Eq. 6's s-update exactly (it is linear in ρ)
        np.testing.assert_allclose(c["s"], a["s"], rtol=1e-14)
        # log coordinates: s' = s·exp(ṡ/s), the tangent ṡ from Eq. 6
        sdot = (a["s"] - STATE["s"])
        np.testing.assert_allclose(b["s"], STATE["s"] * np.exp(sdot / STATE["s"]), rtol=1e-13)
        # the mean moves along its tangent with the current s, not λ_{t+1}'s: m' = m + (s'_Eq6/s)(m'_Eq6 - m)
        np.testing.assert_allclose(b["m"], STATE["m"] + a["s"] / STATE["s"] * (a["m"] - STATE["m"]), rtol=1e-13)
    # second order: halving ρ divides the gap by about 4
    assert 3.5 < gaps[0.1] / gaps[0.05] < 4.5 and 3.5 < gaps[0.05] / gaps[0.025] < 4.5, gaps


def test_log_coordinates_keep_the_precision_positive():
    """A large step that drives Eq. 6's s negative leaves the log-coordinate s positive."""
    blr = build()
    logs = build("  - step_coordinates: {s: log(s)}\n")
    z = [np.array([2.5, 0.0]), np.array([0.1, 0.0]), np.array([-0.1, 0.0])]
    steep = lambda th: float(-10 * th[0] ** 2)          # rewards spread: pushes s down
    # Eq. 6's step is checked (a score-function estimate of either sign): it raises naming s ...
    with pytest.raises(FloatingPointError, match=r"the new s is not positive \(value -80\.1"):
        blr.step(STATE, oracles={"loss": steep}, rng=Fixed(z), rho=0.5)
    blr.CHECK_DOMAINS = False                           # ... and unchecked it returns the negative s
    try:
        a = blr.step(STATE, oracles={"loss": steep}, rng=Fixed(z), rho=0.5)
    finally:
        blr.CHECK_DOMAINS = True
    b = logs.step(STATE, oracles={"loss": steep}, rng=Fixed(z), rho=0.5)
    # s = exp(log s): positive whatever the estimate, unchecked (m, a real mean, is checked only to be a number)
    D = api.derive(BASE + "  - step_coordinates: {s: log(s)}\n").record
    assert [(c.name, c.domain) for c in build_ir(D, "x.yaml").checks] == [("m", "finite")]
    assert a["s"][0] < 0 < b["s"][0]


@pytest.mark.parametrize("args, message", [
    ("{q: log(q)}", "'q' is not a parameter of family 'gaussian_diag'"),
    ("{s: log(m)}", "unknown symbol 'm'"),
    ("{s: s**2 + rho}", "must be a function of s alone"),
    ("{s: __import__}", "step_coordinates"),
    ("{s: log(s)**2}", "cannot invert log(s)**2 for s (2 solutions)"),
    ("{s: s*exp(s)}", "needs LambertW (not an elementary function"),
])
def test_refused_with_a_located_message(tmp_path, args, message):
    (tmp_path / "bad.yaml").write_text(BASE + f"  - step_coordinates: {args}\n")
    with pytest.raises(SpecError) as e:
        api.generate(str(tmp_path / "bad.yaml"), "numpy")
    assert message in str(e.value)
    assert "bad.yaml:14: " in str(e.value)          # the approximation's line


def test_change_variable_takes_the_positive_branch():
    """s = std⁻² has two inverses ±1/√s; the state keeps std = 1/√s (positive, like s)."""
    logs = build("  - change_variable: {param: s, to: std, value: std**-2}\n")
    blr = build()
    a = blr.step(STATE, oracles={"loss": loss}, rng=Fixed(Z), rho=0.1)
    b = logs.step({"m": STATE["m"], "std": 1 / np.sqrt(STATE["s"])}, oracles={"loss": loss}, rng=Fixed(Z), rho=0.1)
    np.testing.assert_allclose(b["std"], 1 / np.sqrt(a["s"]), rtol=1e-14)
    np.testing.assert_allclose(b["m"], a["m"], rtol=1e-14)
    assert np.all(b["std"] > 0)
