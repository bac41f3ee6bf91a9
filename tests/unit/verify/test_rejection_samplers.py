"""Rejection samplers (a family's `sampler: {define, value, accept}`): every draw is made again until the acceptance
condition holds.  The von Mises samples by Best & Fisher (1979); `check` draws it, the numpy target draws it per
sample for the score-function estimator, the optimizer targets and the gradient-through-the-sampler rules refuse
it, and a sampler whose acceptance test is wrong fails `check`."""
import numpy as np
import pytest
import yaml
from scipy import stats

from blr_derive import api
from blr_derive.core.errors import SpecError, UnsupportedTarget
from blr_derive.families.library import load_family
from blr_derive.verify.family import _draw_sampler, check_family
from conftest import ROOT

VON_MISES = (ROOT / "families" / "von_mises.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize("a, kappa", [(0.4, 2.0), (-2.9, 0.3), (3.0, 40.0)])
def test_best_fisher_draws_the_von_mises_law(a, kappa):
    """400 000 draws against scipy.stats.vonmises (Kolmogorov-Smirnov on the circle cut at −π, and the circular
    mean E[cos(θ − a)] = I1(κ)/I0(κ))."""
    fam = load_family("von_mises")
    vals = {fam.params["a"].symbol: a, fam.params["kappa"].symbol: kappa}
    th = _draw_sampler(fam, vals, np.random.default_rng(5), 400_000)
    assert np.all((-np.pi <= th) & (th <= np.pi))
    law = stats.vonmises(kappa, loc=a)
    assert stats.kstest(th, lambda x: law.cdf(x) - law.cdf(-np.pi)).pvalue > 1e-4
    c = np.cos(th - a)
    from scipy.special import i0, i1
    assert abs(c.mean() - i1(kappa) / i0(kappa)) < 5 * c.std() / np.sqrt(len(c))


def test_check_passes_the_rejection_sampler_and_rejects_a_wrong_acceptance(tmp_path):
    res = {c.name: c for c in check_family(load_family("von_mises"), points=3)}
    assert res["sampler_vs_density"].passed and res["sampler_ks"].passed
    wrong = VON_MISES.replace("accept: u2 <= c*exp(1 - c)", "accept: u2 <= c*exp(1 - c)/2 + 1/2")
    assert wrong != VON_MISES
    path = tmp_path / "vm_wrong.yaml"
    path.write_text(wrong, encoding="utf-8")
    res = {c.name: c for c in check_family(load_family(str(path)), points=3)}
    assert not (res["sampler_vs_density"].passed and res["sampler_ks"].passed)


def test_score_function_over_the_von_mises_is_unbiased_for_the_exact_blr_step():
    """ℓ = b1 cos θ + b2 sin θ is linear in T, so the exact step is λ ← (1 − ρ)λ − ρ(b1, b2) with
    λ = κ(cos a, sin a) (Eq. 6, h = 1); the generated numpy step (a rejection loop per sample) averaged over 40 000
    replicas equals it in λ within 5 standard errors."""
    mod = api.derive(yaml.safe_dump({"name": "es_vm", "family": "von_mises", "loss": "abstract",
                                     "hyperparameters": {"rho": 0.1, "S": {"default": 8, "type": "int"}},
                                     "approximations": [{"score_function": {"samples": "S"}}]})).compile("numpy")
    n, b1, b2, a0, k0, rho = 40_000, 0.7, -1.2, 0.5, 1.5, 0.1
    out = mod.step(mod.init(a=np.full(n, a0), kappa=np.full(n, k0)),
                   oracles={"loss": lambda th: b1 * np.cos(th) + b2 * np.sin(th)}, rng=np.random.default_rng(3),
                   rho=rho, S=8)
    lam = (out["kappa"] * np.cos(out["a"]), out["kappa"] * np.sin(out["a"]))
    want = ((1 - rho) * k0 * np.cos(a0) - rho * b1, (1 - rho) * k0 * np.sin(a0) - rho * b2)
    for got, w in zip(lam, want):
        assert abs(got.mean() - w) < 5 * got.std(ddof=1) / np.sqrt(n)
        assert got.std() > 1e-3


def test_rejection_samplers_are_refused_where_they_cannot_be_used():
    recipe = {"name": "vm", "family": "von_mises", "loss": "abstract", "parameter": "a",
              "hyperparameters": {"rho": 0.1}, "approximations": [{"score_function": {"samples": 4}}]}
    with pytest.raises(UnsupportedTarget, match="rejects draws until a condition holds"):
        api.derive(yaml.safe_dump(recipe)).compile("torch")
    recipe["approximations"] = [{"reparameterization": {"samples": 4}}]
    with pytest.raises(SpecError, match="declares a rejection sampler .* use 'score_function'") as exc:
        api.derive(yaml.safe_dump(recipe))
    assert exc.value.line is not None


@pytest.mark.parametrize("sampler, message", [
    ("{value: x, accept: r <= 1, define: {x: u}}", "'accept' must depend on a random draw"),
    ("{value: u, accept: u2 + 1}", "'accept' must be a condition"),
    ("{value: u, define: {r: u}}", "'r' is already a parameter"),
    ("{accept: u < 1/2}", "missing required key 'value'"),
    ("{value: u, acept: u < 1/2}", "unknown key 'acept' in sampler"),
    ("{value: x*r, define: {x: u, y: import}}", "sampler definition"),
    ("{value: pi*r, define: {pi: u}}", "'pi' is a function or constant of the expression grammar"),
    ("{value: r*exp, define: {exp: u}}", "'exp' is a function or constant of the expression grammar"),
])
def test_bad_rejection_samplers_are_located_errors(sampler, message, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nvariable: theta\nsupport: positive\nparameters:\n  r: {domain: positive}\n"
                    f"sufficient_statistics: [theta]\nnatural_parameters: [-r]\nsampler: {sampler}\n",
                    encoding="utf-8")
    with pytest.raises(SpecError, match=message) as exc:
        load_family(str(path))
    assert exc.value.file.endswith("bad.yaml") and exc.value.line == 8
