"""``check`` compares the objective of a family of several scalar components (normal-gamma) with quadrature
(blr_derive/verify/objective_components.py); it printed 'n/a' for every such family before.  The reference is the
family check's product quadrature, trusted at a point only where it reproduces the family's normalization and mean;
here it is compared with ∫∫ q(ℓ + log q) written from scipy.stats' densities (the θ | τ integral by Gaussian
moments, τ by scipy's quad), the check is shown
to fail on an objective off by 1e-6, and a point where the grid misses mass (shape below 1) is refused, not used."""
from __future__ import annotations

import types

import numpy as np
import pytest
from scipy import integrate, stats

import blr_derive.api as api
from blr_derive.candidates.options import recipe_from_options
from blr_derive.verify.objective_components import ComponentsReference, applies
from blr_derive.verify.recipe import objective_checks

LOSS = "n*tau*(theta - xbar)**2/2 + tau*ss/2 - n*log(tau)/2"        # Gaussian data, unknown mean and precision
DATA = {"n": 5.0, "xbar": 0.7, "ss": 2.0}


@pytest.fixture(scope="module")
def recipe_and_module():
    r = recipe_from_options("normal_gamma", loss=LOSS, approximations=["exact"], data=list(DATA))
    mod = types.ModuleType("ng_objective")
    exec(compile(api.generate(r, "numpy"), "<ng>", "exec"), mod.__dict__)
    return r, mod


def _scipy(state, data):
    """∫∫ q (ℓ + log q) dθ dτ: the inner integral over θ | τ ~ N(m, 1/(κτ)) by its Gaussian moments (written
    here), the outer one over τ ~ Gamma(α, rate β) by scipy's quad with scipy.stats' log-density."""
    a, b, m, k = state["alpha"], state["beta"], state["m"], state["kappa"]
    n, xbar, ss = data["n"], data["xbar"], data["ss"]

    def inner(tau):                     # E_{θ|τ}[ℓ + log q(θ, τ)]
        loss = n * tau * (1 / (k * tau) + (m - xbar) ** 2) / 2 + tau * ss / 2 - n * np.log(tau) / 2
        log_normal = -0.5 * np.log(2 * np.pi / (k * tau)) - 0.5
        return loss + log_normal + stats.gamma.logpdf(tau, a, scale=1 / b)
    return integrate.quad(lambda tau: stats.gamma.pdf(tau, a, scale=1 / b) * inner(tau), 0, np.inf,
                          epsabs=1e-13, epsrel=1e-13, limit=400)[0]


def test_the_reference_equals_scipy_and_the_generated_objective(recipe_and_module):
    r, mod = recipe_and_module
    assert applies(r)
    ref = ComponentsReference(r, [d.symbol for d in r.data], [])
    sym = {p.name: p.symbol for p in r.family.params.values()}
    for state in ({"m": 0.3, "kappa": 2.0, "alpha": 3.0, "beta": 1.5}, {"m": -1.1, "kappa": 0.6, "alpha": 1.4,
                                                                      "beta": 0.8}):
        want = _scipy(state, DATA)
        got = ref({sym[k]: v for k, v in state.items()}, list(DATA.values()), [])
        assert abs(got - want) < 1e-8 * max(1.0, abs(want)), (got, want)
        gen = float(mod.objective({k: np.array([v]) for k, v in state.items()}, data=DATA)["objective"])
        assert abs(gen - want) < 1e-8 * max(1.0, abs(want)), (gen, want)


def test_a_point_the_grid_does_not_reach_is_refused(recipe_and_module):
    """At a shape of 0.3 the product grid's normalization is far from 1 (mass at τ → 0): no value is given."""
    r, _ = recipe_and_module
    ref = ComponentsReference(r, [d.symbol for d in r.data], [])
    sym = {p.name: p.symbol for p in r.family.params.values()}
    with pytest.raises(ValueError, match="normalization and mean"):
        ref({sym["m"]: 0.0, sym["kappa"]: 0.7, sym["alpha"]: 0.3, sym["beta"]: 0.9}, list(DATA.values()), [])


def test_check_passes_and_fails_on_a_shifted_objective(recipe_and_module):
    r, mod = recipe_and_module
    checks = {c.name: c for c in objective_checks(r, mod, points=3)}
    c = checks["objective vs quadrature"]
    assert c.kind == "max" and c.value < 1e-11 and "3 random inputs" in c.note
    assert checks["objective does not increase along a small step"].value == 0.0
    shifted = types.ModuleType("ng_shifted")
    shifted.__dict__.update(mod.__dict__)

    def objective(state, **kw):
        out = dict(mod.objective(state, **kw))
        out["objective"] = out["objective"] + 1e-6
        return out
    shifted.objective = objective
    bad = {c.name: c for c in objective_checks(r, shifted, points=3)}["objective vs quadrature"]
    assert 5e-7 < bad.value and bad.value > bad.tol
