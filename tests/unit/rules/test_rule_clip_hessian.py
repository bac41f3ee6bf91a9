"""clip_hessian (EVON's clipped Price estimate, the slides' Algorithm 2 line 4): the Hessian estimate is clipped
elementwise to [−radius, radius] before the precision update; the radius may read the state.

Checked numerically (numpy target): online Newton with the rule equals online Newton on the clipped Hessian oracle
(a constant radius, and a radius relative to the precision s, 0.5·s), the clip is active on part of the entries (a
positive Hessian: the online Newton's s would leave the family where a clipped −r took it below 0) and
``when`` switches it off; located errors.
"""
import functools

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError


def recipe(approx, hp):
    return yaml.safe_dump({"name": "clip_hessian_test", "family": "gaussian_diag", "loss": "abstract",
                           "learning_rate": "lr", "hyperparameters": hp, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def online_newton(radius=None):
    approx = ["delta"]
    hp = {"lr": 0.1}
    if radius is not None:
        approx.append({"clip_hessian": {"radius": radius, "when": "clip"}})
        hp.update(r=1.0, clip=True)
    return api.derive(recipe(approx, hp)).compile("numpy")


def problem(seed=0, n=8):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.2, 4.0, size=n)
    return (rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), lambda x: a * x + 0.3 * np.sin(x),
            lambda x: a + 0.3 * np.cos(x))


@pytest.mark.parametrize("relative", [False, True])
def test_with_the_rule_is_without_it_on_the_clipped_hessian_oracle(relative):
    with_, without = online_newton("r*s" if relative else "r"), online_newton()
    m0, s0, grad, hess = problem(1)
    r = 0.5 if relative else 1.5
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    active = 0
    for _ in range(6):
        bound = r * b["s"] if relative else r
        active += int(np.sum(np.abs(hess(b["m"])) > bound))
        a = with_.step(a, oracles={"grad": grad, "hess": hess}, lr=0.3, r=r)
        b = without.step(b, oracles={"grad": grad, "hess": lambda x, c=bound: np.clip(hess(x), -c, c)}, lr=0.3)
        for k in ("m", "s"):
            np.testing.assert_allclose(a[k], b[k], rtol=1e-14, atol=0)
    assert active > 3


def test_when_switches_it_off():
    with_, without = online_newton("r"), online_newton()
    m0, s0, grad, hess = problem(2)
    a = with_.step(with_.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, lr=0.3, r=0.1, clip=False)
    b = without.step(without.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, lr=0.3)
    np.testing.assert_array_equal(a["s"], b["s"])


@pytest.mark.parametrize("approx, message", [
    ({"clip_hessian": {}}, "missing argument 'radius'"),
    ({"clip_hessian": {"radius": "nope"}}, "nope"),
])
def test_bad_arguments_are_located_errors(approx, message):
    with pytest.raises(SpecError, match=message) as exc:
        api.derive(recipe(["delta", approx], {"lr": 0.1}))
    assert exc.value.line is not None

