"""Samplers are part of a family's declaration (θ from one draw u ~ U(0, 1) or z ~ N(0, 1)): `check` compares the
declared sampler's moments of T with the density's (a sampler of the wrong law is rejected), and a Gaussian with
a normal-draw sampler supports the score-function (evolution-strategies) natural gradient (Eq. 4)."""
import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError
from blr_derive.families.library import load_family
from blr_derive.verify.family import check_family
from conftest import ROOT

DIAG = (ROOT / "families" / "gaussian_diag.yaml").read_text(encoding="utf-8")
EXPONENTIAL = (ROOT / "families" / "exponential.yaml").read_text(encoding="utf-8")


def sampler_check(text, tmp_path, name):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    (res,) = [c for c in check_family(load_family(str(path)), points=2) if c.name == "sampler_vs_density"]
    return res


@pytest.mark.parametrize("text, name", [(DIAG, "gaussian_diag"), (EXPONENTIAL, "exponential")])
def test_the_built_in_samplers_pass(text, name, tmp_path):
    res = sampler_check(text, tmp_path, name)
    assert res.passed and res.value < 5


@pytest.mark.parametrize("text, old, new", [
    (DIAG, "sampler: m + z/sqrt(s)", "sampler: m + 1.1*z/sqrt(s)"),          # 10 % too wide
    (DIAG, "sampler: m + z/sqrt(s)", "sampler: m + 0.05 + z/sqrt(s)"),       # shifted
    (EXPONENTIAL, "sampler:", "sampler: 1.05*"),                               # the wrong rate
])
def test_a_sampler_of_the_wrong_law_fails_check(text, old, new, tmp_path):
    assert old in text
    res = sampler_check(text.replace(old, new, 1), tmp_path, "wrong")
    assert not res.passed and res.value > 5


def test_a_sampler_uses_exactly_one_draw(tmp_path):
    path = tmp_path / "two_draws.yaml"
    path.write_text(DIAG.replace("sampler: m + z/sqrt(s)", "sampler: m + z*u/sqrt(s)"), encoding="utf-8")
    with pytest.raises(SpecError, match="one draw"):
        load_family(str(path))


def test_score_function_over_a_diagonal_gaussian_is_unbiased_for_the_exact_blr_step():
    """ES over N(m, 1/s): the step from S loss values per coordinate, averaged over 40 000 independent
    coordinates (replicas of one problem), equals the exact BLR step on ℓ = a(θ − c)²/2 (s ← (1−ρ)s + ρa,
    m ← m − ρa(m − c)/s_new) within 5 standard errors, in the natural parameters (s m, −s/2) in which the
    estimator is linear (m_new itself is a ratio of estimates)."""
    mod = api.derive(yaml.safe_dump({"name": "es_diag", "family": "gaussian_diag", "loss": "abstract",
                                     "hyperparameters": {"rho": 0.1, "S": {"default": 8, "type": "int"}},
                                     "approximations": [{"score_function": {"samples": "S"}}]})).compile("numpy")
    n, a, c, m0, s0, rho = 40_000, 1.7, 0.4, -0.3, 2.0, 0.1
    loss = lambda th: 0.5 * a * (th - c) ** 2                                  # noqa: E731  (per coordinate)
    out = mod.step(mod.init(m=np.full(n, m0), s=np.full(n, s0)), oracles={"loss": loss},
                   rng=np.random.default_rng(0), rho=rho, S=8)
    s_exact = (1 - rho) * s0 + rho * a
    m_exact = m0 - rho * a * (m0 - c) / s_exact
    for got, want in ((out["s"], s_exact), (out["s"] * out["m"], s_exact * m_exact)):
        assert abs(got.mean() - want) < 5 * got.std(ddof=1) / np.sqrt(n)
    assert out["s"].std() > 1e-3                                                # really a Monte Carlo estimate
