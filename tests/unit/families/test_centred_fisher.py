"""The Fisher information of a log-partition summed over a finite support, F = Σ_i p_i e_i e_iᵀ − s sᵀ with
e_i = T_i − μ and s = Σ_i p_i e_i (blr_derive/families/partition.py centred_fisher): right on its own
scale, |ΔF_jk|/sqrt(F_jj F_kk), where q is concentrated on one point and E[T Tᵀ] − μμᵀ cancelled
(tests/hunt_findings.py listed the first two): in the generated numpy module and in the engine's form evaluated in
30 digits (the check's SymbolicRecord), against Cov_q[T] summed in mpmath at 50 digits over the support."""
import functools
import types
from pathlib import Path

import mpmath
import numpy as np
import pytest
import sympy as sp

from blr_derive.codegen.registry import emit
from blr_derive.families.library import load_family
from blr_derive.families.partition import hessian_loses_digits, support_points
from blr_derive.ir.build import family_ir
from blr_derive.verify.hunt import SymbolicRecord, fisher_rel

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "families"


def _reference(fam, lam):
    """Cov_q[T] over the support at 50 digits, q_i ∝ h(θ_i) e^{<λ, T(θ_i)>}."""
    with mpmath.workdps(50):
        logw, stats = [], []
        for pt in support_points(fam):
            h = fam.h.xreplace(pt)
            if h == 0:
                continue
            T = [mpmath.mpf(str(sp.N(sp.sympify(t).xreplace(pt), 60))) for t in fam.T]
            logh = mpmath.log(mpmath.mpf(str(sp.N(h, 60))))
            logw.append(logh + mpmath.fsum(mpmath.mpf(x) * t for x, t in zip(lam, T)))
            stats.append(T)
        top = max(logw)
        w = [mpmath.exp(x - top) for x in logw]
        Z = mpmath.fsum(w)
        p = [x / Z for x in w]
        n = len(stats[0])
        mu = [mpmath.fsum(q * T[j] for q, T in zip(p, stats)) for j in range(n)]
        return np.array([[float(mpmath.fsum(q * (T[j] - mu[j]) * (T[k] - mu[k]) for q, T in zip(p, stats)))
                          for k in range(n)] for j in range(n)])


@functools.lru_cache(maxsize=None)
def _family(name):
    return load_family(str(CORPUS / f"{name}.yaml"))


@functools.lru_cache(maxsize=None)
def _module_of(name):
    """The family's numpy module, emitted once per family for every point (emitting tilted_zipf20's takes seconds)."""
    return _module(_family(name))


def _module(fam):
    mod = types.ModuleType(f"_test_{fam.name}")
    exec(compile(emit(family_ir(fam, fam.name), "numpy"), fam.name, "exec"), mod.__dict__)
    return mod


#: (family, λ, the simplified ∇²A's error in the numpy module before centred_fisher, measured)
CASES = [
    ("tilted_zipf20", (30.0, 0.0), 13.4),        # Var = 1.137e-13 for 9.358e-14 (hunt_findings.py)
    ("tilted_zipf20", (50.0, 0.0), 4.5e7),       # Var(k) = 1.9e-22
    ("tilted_zipf20", (0.3, -1.2), 3.6e-15),
    ("tilted_zipf20", (-30.0, -2.0), 4.1e-16),
    ("ising_pair", (30.0, -20.0, 5.0), 1.2e-16),  # Var(s1) = 7.7e-22 (1.6e-11 without the correction s sᵀ)
    ("ising_pair", (0.5, -0.3, 0.8), 5.6e-16),
    ("poisson_0_30", (30.0,), 0.063),            # Var = 2.8e-12 at the end of 0..30
    ("truncated_poisson12", (30.0,), 0.024),
    # a closed-form A declared over 0..20, log((1 − e^{21λ})/(1 − e^λ)): its simplified ∇²A cancelled
    # (partition.hessian_loses_digits), now the centred sum (Family.fisher_matrix)
    ("truncated_geometric20", (40.0,), 8.4e3),    # Var = 4.2e-18
    ("truncated_geometric20", (20.0,), 4.6e-5),   # Var = 2.1e-9
    ("truncated_geometric20", (5.0,), 3.4e-12),
    ("truncated_geometric20", (0.5,), 2.6e-14),
    ("truncated_geometric20", (-20.0,), 0.0),
]


@pytest.mark.parametrize("name,lam,before", CASES)
def test_the_module_fisher_information_is_right_on_its_own_scale(name, lam, before):
    fam = _family(name)
    want = _reference(fam, lam)
    got = np.asarray(_module_of(name).fisher_information(np.array(lam)), dtype=float).reshape(want.shape)
    assert fisher_rel(got, want) < 1e-13, (name, lam, got, want)


@pytest.mark.parametrize("name,lam", [("ising_pair", (30.0, 0.0, 0.0)), ("ising_pair", (30.0, -20.0, 5.0)),
                                      ("tilted_zipf20", (50.0, 0.0)), ("truncated_geometric20", (40.0,)),
                                      ("bernoulli_logit", (40.0,)), ("bernoulli_logit", (-40.0,)),
                                      ("binomial", (40.0,))])
def test_the_engine_fisher_information_in_30_digits(name, lam):
    """The check's hard_fisher evaluates the engine's F in 30 digits: the ising pair's ∇² log Σ e^{λ·T} lost 2.2e-6 of
    Var(s1) = 3.5e-26 at a field of 30 (hunt_findings.py), the tilted Zipf law's 2e-6 of 1.9e-22 at r = 50; over a
    closed-form A (Family.fisher_form: the centred sum over the support) the Bernoulli's unsimplified ∂μ/∂λ lost
    all of 7.2e-35 at λ = 40 (0.5 of it in the record, 1.0 in Family.fisher_at), the truncated geometric's 7.7e-12
    of 4.2e-18, the binomial's 2.5e-14 of 4.2e-17."""
    fam = _family(name) if (CORPUS / f"{name}.yaml").exists() else load_family(name)
    want = _reference(fam, lam)
    got = SymbolicRecord(fam, None)("F", dict(zip(fam.lam, lam))).reshape(want.shape)
    assert fisher_rel(got, want) < 1e-13, (name, lam, got, want)
    assert fisher_rel(fam.fisher_at(dict(zip(fam.lam, lam))), want) < 1e-13, (name, lam)


def test_a_closed_form_hessian_that_cancels_is_replaced_and_one_that_does_not_is_kept():
    """hessian_loses_digits measures the simplified ∇²A of a closed-form A over a finite support in float64 against
    Cov_q[T] in 30 digits where q is concentrated: the truncated geometric's loses (its F becomes the centred sum),
    the binomial's n e^λ/(e^λ + 1)², the multinomial's and the Bernoulli's 1/cosh²λ do not (kept: compact code)."""
    fam = _family("truncated_geometric20")
    lam = fam.lam[0]
    H = sp.Matrix([[sp.simplify(sp.diff(fam.A, lam, 2))]])
    assert hessian_loses_digits(fam, H)
    assert fam.fisher_matrix() == fam.centred_covariance()
    for ref, want in [("binomial", lambda l: 10 * sp.exp(l[0]) / (sp.exp(l[0]) + 1) ** 2),
                      ("bernoulli_logit", lambda l: 1 / sp.cosh(l[0]) ** 2),
                      ({"name": "multinomial", "K": 3, "n": 4},
                       lambda l: 4 * sp.exp(l[0]) * (1 + sp.exp(l[1])) / (1 + sp.exp(l[0]) + sp.exp(l[1])) ** 2)]:
        fam = load_family(ref)
        F = fam.fisher_matrix()
        assert not hessian_loses_digits(fam, F)
        assert sp.simplify(F[0, 0] - want(fam.lam)) == 0, (ref, F)


def test_a_two_point_support_keeps_the_simplified_hessian():
    """Two points: F = w_1 w_2 ΔT ΔTᵀ/Z² is one product, which simplify writes (the Bernoulli's), unchanged."""
    fam = load_family("bernoulli_logit")
    assert fam.centred_fisher() is None
    lam = fam.lam[0]
    assert sp.simplify(fam.fisher_matrix()[0, 0] - 4 * sp.exp(2 * lam) / (sp.exp(2 * lam) + 1) ** 2) == 0
