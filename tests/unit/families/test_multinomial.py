"""A joint count support ("counts summing to n"): the multinomial with known n, a family sized by K and n.  Against
scipy.stats.multinomial (μ, entropy, log-pmf, Fisher = Cov[T]) at several sizes, and as a BLR candidate under
`exact` with a loss that couples the counts, against Eq. 6 computed by enumeration of the support."""
import itertools

import numpy as np
import pytest
import sympy as sp
import yaml
from scipy import special, stats

from blr_derive import api
from blr_derive.core.errors import SpecError
from blr_derive.families.library import load_family


def counts(n, K):
    return [c for c in itertools.product(range(n + 1), repeat=K) if sum(c) == n]


@pytest.mark.parametrize("K, n, seed", [(3, 4, 0), (2, 4, 1), (4, 4, 2), (4, 1, 3), (3, 10, 4), (4, 10, 5), (6, 6, 6),
                                        (5, 7, 7), (2, 10, 8)])
def test_multinomial_matches_scipy(K, n, seed):
    fam = load_family({"name": "multinomial", "K": K, "n": n})
    p = np.random.default_rng(seed).dirichlet(np.ones(K))
    vals = {fam.params[f"p{k}"].symbol: p[k - 1] for k in range(1, K)}
    law = stats.multinomial(n, p)
    assert [float(fam.evaluate(m, vals)) for m in fam.mu_ord] == pytest.approx(n * p[:-1], rel=1e-13)
    assert float(fam.evaluate(fam.entropy(), vals)) == pytest.approx(float(law.entropy()), rel=1e-12)
    logq = fam.log_density()
    for c in counts(n, K)[:: max(1, len(counts(n, K)) // 7)]:
        pt = {**vals, **{s: v for s, v in zip(fam.components, c)}}
        assert float(fam.evaluate(logq, pt)) == pytest.approx(law.logpmf(c), rel=1e-12, abs=1e-13)
    lam = {l: float(fam.evaluate(e, vals)) for l, e in zip(fam.lam, fam.eta)}
    F = np.array(fam.fisher_at(lam), dtype=float)
    cov = law.cov()[:-1, :-1]
    assert F == pytest.approx(cov, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("n", [4, 7])
def test_a_coupled_loss_is_summed_exactly_over_the_counts(n):
    """ℓ(θ) = (θ1 − 2)²/4 + θ2·θ3 with K = 3: Eq. 6, λ ← (1 − ρ)λ − ρ F⁻¹ ∇_λ E_q[ℓ + log h] with
    h = n!/Πθ_k!, by enumeration of the count vectors (15 at n = 4, 36 at n = 7) and central differences at
    λ_k = log(p_k/p_3)."""
    rho = 0.4
    mod = api.derive(yaml.safe_dump({"name": f"mn_sq{n}", "family": {"name": "multinomial", "K": 3, "n": n},
                                     "loss": {"expression": "(theta1 - 2)**2/4 + theta2*theta3"},
                                     "hyperparameters": {"rho": rho}, "approximations": ["exact"]})).compile("numpy")
    C = np.array(counts(n, 3), dtype=float)
    loss = (C[:, 0] - 2) ** 2 / 4 + C[:, 1] * C[:, 2]
    logh = special.gammaln(n + 1) - special.gammaln(C + 1).sum(axis=1)

    def probs(lam):
        return special.softmax(np.append(lam, 0.0))

    def expected(lam):
        return float(stats.multinomial(n, probs(lam)).pmf(C) @ (loss + logh))

    p = np.array([0.2, 0.5, 0.3])
    lam = np.log(p[:2] / p[2])
    h = 1e-5
    g = np.array([(expected(lam + h * e) - expected(lam - h * e)) / (2 * h) for e in np.eye(2)])
    F = stats.multinomial(n, p).cov()[:2, :2]
    lam_new = (1 - rho) * lam - rho * np.linalg.solve(F, g)
    out = mod.step(mod.init(p1=0.2, p2=0.5), rho=rho)
    assert [float(out["p1"]), float(out["p2"])] == pytest.approx(probs(lam_new)[:2], rel=1e-8)   # O(h²)


def test_too_many_count_vectors_is_a_located_error(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("name: big\nvariable: {name: x, shape: vector, size: 6}\nsupport: counts summing to 40\n"
                    "parameters:\n  a: {domain: real}\nsufficient_statistics: [x1]\nnatural_parameters: [a]\n",
                    encoding="utf-8")
    with pytest.raises(SpecError, match=r"big.yaml:3: support 'counts summing to 40' has more than 500 count vectors"):
        load_family(str(path))


def test_counts_need_a_fixed_size_vector(tmp_path):
    path = tmp_path / "scalar.yaml"
    path.write_text("name: scalar\nvariable: x\nsupport: counts summing to 4\nparameters:\n  a: {domain: real}\n"
                    "sufficient_statistics: [x]\nnatural_parameters: [a]\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r"scalar.yaml:3: support 'counts summing to 4' needs a vector variable"):
        load_family(str(path))


def test_a_user_family_on_counts_derives_its_log_partition_by_summation(tmp_path):
    """Counts of 3 classes adding up to 3 with h = 1 (not the multinomial's h): A = log Σ_c exp(<λ, c_{1:2}>),
    derived by the engine's finite summation, against a direct numpy sum."""
    path = tmp_path / "flat.yaml"
    path.write_text("name: flat\nvariable: {name: x, shape: vector, size: 3}\nsupport: counts summing to 3\n"
                    "parameters:\n  a: {domain: real}\n  b: {domain: real}\n"
                    "sufficient_statistics: [x1, x2]\nnatural_parameters: [a, b]\n", encoding="utf-8")
    fam = load_family(str(path))
    lam = (0.3, -0.7)
    A = float(fam.A.subs(dict(zip(fam.lam, lam))))
    C = np.array(counts(3, 3), dtype=float)
    assert A == pytest.approx(special.logsumexp(C[:, :2] @ np.array(lam)), rel=1e-14)
    assert isinstance(fam.A, sp.Basic)


def test_random_support_points_gives_the_number_asked_for():
    """n random count vectors adding up to the family's total (the total is not the number of points)."""
    from blr_derive.families.statistics import random_support_points
    fam = load_family({"name": "multinomial", "K": 3, "n": 2})
    pts = random_support_points(fam, np.random.default_rng(0), 9)
    assert len(pts) == 9
    assert all(sum(int(v) for v in pt.values()) == 2 for pt in pts)
