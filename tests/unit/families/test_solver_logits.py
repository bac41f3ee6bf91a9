"""The parameter solver reads log(a) = t as a = e^t and cancels a rational μ(p) before sympy's solve
(blr_derive/families/solve.py): the categorical's logits log(p_k/(1 − Σ_j p_j)) = λ_k are then a linear system, and
its derived μ_k, p_k/((1 − Σp)(Σ_j p_j/(1 − Σp) + 1)), is p_k.  Before, the natural solve took 12 s at K = 9 and the
μ solve ran out of its 20 s from K = 12 (μ → p then by Newton's method); a recipe over the categorical at K = 16,
the largest size the family declares, did not derive within 800 s.  Now it derives in seconds, and its conjugate
step is the posterior computed here by Bayes' rule over the 16 classes."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from blr_derive import api
from blr_derive.families.solve import _cancelled

p1, p2, p3 = sp.symbols("p1 p2 p3", positive=True)


def test_a_rational_function_is_cancelled_only_where_that_shortens_it():
    rest = 1 - p1 - p2 - p3
    mu1 = p1 / (rest * (p1 / rest + p2 / rest + p3 / rest + 1))
    assert _cancelled(mu1, [p1, p2, p3]) == p1
    assert _cancelled(p1 / (1 + p2), [p1, p2, p3]) == p1 / (1 + p2)             # nothing to cancel: as it is
    assert _cancelled(sp.log(p1) + p2, [p1, p2]) == sp.log(p1) + p2            # not rational: as it is


@pytest.mark.slow
def test_a_categorical_at_its_largest_size_derives_and_steps_to_the_posterior():
    a, b, K = 2.0, -1.5, 16
    d = api.derive(f"""name: cat16_posterior
family: {{name: categorical, K: {K}}}
loss: (theta3 - theta5)*a + theta{K}*b
approximations: [exact]
hyperparameters: {{rho: 1.0, a: {a}, b: {b}}}
""")
    mod = d.compile("numpy")
    # the step with ρ = 1 is the posterior of a loss with no prior term: q(k) ∝ e^{−ℓ(e_k)} (Bayes' rule)
    loss = np.zeros(K)
    loss[2], loss[4], loss[K - 1] = a, -a, b
    want = np.exp(-loss - np.logaddexp.reduce(-loss))
    start = {f"p{k}": np.array([1.0 / K]) for k in range(1, K)}
    out = mod.step(mod.init(**start), rho=1.0, a=a, b=b)
    got = np.array([float(out[f"p{k}"][0]) for k in range(1, K)])
    assert np.max(np.abs(got - want[:-1]) / want[:-1]) < 1e-12
