"""check's lines for a mixture's objective, a bound (blr_derive/verify/mixture_bound.py): they pass on the catalog's
multimodal_exact_unrolled (E_q[ℓ] to 1e-7 of quadrature, the entropy not above the mixture's), and they catch a
module whose entropy is above the mixture's (a bound that does not hold) or whose E_q[ℓ] is off."""
import types

import numpy as np

from blr_derive.candidates.load import load_recipe
from blr_derive.verify.mixture_bound import SLACK, mixture_bound_checks
from conftest import CATALOG, load_generated


def test_the_catalog_mixture_passes():
    recipe = load_recipe(CATALOG / "multimodal_exact_unrolled.yaml")
    checks = {c.name: c for c in mixture_bound_checks(recipe, load_generated("multimodal_exact_unrolled"))}
    assert checks["objective expected loss vs quadrature"].value < 1e-9
    assert checks["objective entropy is a lower bound"].value == 0.0


def test_a_wrong_module_fails():
    recipe = load_recipe(CATALOG / "multimodal_exact_unrolled.yaml")
    good = load_generated("multimodal_exact_unrolled")

    def shifted(de, dh):
        def objective(state, **hp):
            out = dict(good.objective(state, **hp))
            out["expected_loss"] += de * max(1.0, abs(out["expected_loss"]))
            out["entropy"] += dh
            return out
        return types.SimpleNamespace(objective=objective, HYPERPARAMETERS=good.HYPERPARAMETERS)

    checks = {c.name: c for c in mixture_bound_checks(recipe, shifted(0.0, 0.5))}
    assert checks["objective entropy is a lower bound"].value > 1e3 * SLACK     # H + 0.5 is above H(q): caught
    checks = {c.name: c for c in mixture_bound_checks(recipe, shifted(1e-5, 0.0))}
    assert np.isclose(checks["objective expected loss vs quadrature"].value, 1e-5, rtol=1e-3)
