"""Engine features behind the family library, on inline declarations.

New supports (discrete sums, several components, fixed-size vectors), new parameter domains,
the special functions of the expression grammar, E_q[log h] for non-constant base measures,
Piecewise results of sympy, the numeric μ → ordinary inverse and located errors.  Every
derived quantity is compared with an independent numerical value (scipy, sums, quadrature).
"""
from __future__ import annotations

import textwrap

import numpy as np
import pytest
import sympy as sp
from scipy import integrate, special, stats

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.families.library import family_from_spec
from blr_derive.core.yamlio import load_yaml_text


def build(text, file="inline.yaml"):
    return family_from_spec(load_yaml_text(textwrap.dedent(text).lstrip("\n"), file), file)


def line_of(text, needle):
    lines = textwrap.dedent(text).lstrip("\n").splitlines()
    hits = [i + 1 for i, l in enumerate(lines) if needle in l]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


# ---------------------------------------------------------------------------
# Special functions in the restricted grammar
# ---------------------------------------------------------------------------

x = sp.Symbol("x", positive=True)
Pdim = sp.Symbol("P", integer=True, positive=True)
SYMS = {"x": x, "P": Pdim}


@pytest.mark.parametrize("text,ref", [
    ("lgamma(x)", special.gammaln),
    ("digamma(x)", special.digamma),
    ("polygamma(1, x)", lambda v: special.polygamma(1, v)),
    ("polygamma(2, x)", lambda v: special.polygamma(2, v)),
    ("gamma(x)", special.gamma),
    ("factorial(x)", lambda v: special.gamma(v + 1)),
    ("log1p(x)", np.log1p),
    ("lmvgamma(x, 3)", lambda v: special.multigammaln(v, 3)),
    ("mvdigamma(x, 2)", lambda v: special.digamma(v) + special.digamma(v - 0.5)),
])
def test_special_functions_match_scipy(text, ref):
    e = parse_expression(text, SYMS)
    for v in (1.7, 3.25):
        assert float(sp.N(e.xreplace({x: sp.Float(v, 30)}).doit(), 20)) == pytest.approx(float(ref(v)), rel=1e-12)


def test_lmvgamma_with_a_dimension_symbol_and_its_derivative():
    e = parse_expression("lmvgamma(x, P)", SYMS)
    d = sp.diff(e, x)                       # = mvdigamma(x, P)
    for P in (1, 2, 4):
        val = float(sp.N(e.xreplace({x: sp.Float(3.5, 30), Pdim: P}).doit()))
        assert val == pytest.approx(special.multigammaln(3.5, P), rel=1e-12)
        dval = float(sp.N(d.xreplace({x: sp.Float(3.5, 30), Pdim: P}).doit()))
        assert dval == pytest.approx(sum(special.digamma(3.5 - j / 2) for j in range(P)), rel=1e-12)


@pytest.mark.parametrize("text,msg", [
    ("polygamma(x, x)", "integer order"),
    ("polygamma(-1, x)", "integer order"),
    ("polygamma(1)", "2 arguments"),
    ("lmvgamma(x, x)", "positive integer or a dimension"),
    ("lmvgamma(x, 0)", "positive integer or a dimension"),
    ("factorial(x, 2)", "exactly one argument"),
])
def test_special_function_errors(text, msg):
    with pytest.raises(SpecError, match=msg):
        parse_expression(text, SYMS)


# ---------------------------------------------------------------------------
# Discrete supports: A by summation
# ---------------------------------------------------------------------------

GEOMETRIC = """
    name: geometric
    variable: k
    support: nonnegative_integers
    parameters:
      p: {domain: unit_interval, description: success probability}
    sufficient_statistics: [k]
    natural_parameters: [log(1 - p)]
"""


def test_geometric_sum_resolves_sympys_piecewise():
    """Σ (1-p)^k is a Piecewise (|1-p| < 1) in sympy: the branch valid on the domain is kept."""
    f = build(GEOMETRIC)
    assert not f.A_given and not f.A.has(sp.Piecewise)
    (l,), p = f.lam, f.params["p"].symbol
    for pv in (0.2, 0.65):
        lam = np.log(1 - pv)
        assert f.evaluate(f.A, {l: lam}) == pytest.approx(-np.log(pv), rel=1e-12)
        assert f.evaluate(f.mu_ord[0], {p: pv}) == pytest.approx(stats.geom(pv, loc=-1).mean(), rel=1e-12)
        assert f.evaluate(f.entropy(), {p: pv}) == pytest.approx(stats.geom(pv, loc=-1).entropy(), rel=1e-10)
        assert f.evaluate(f.ord_from_mu[p], {f.mu[0]: (1 - pv) / pv}) == pytest.approx(pv, rel=1e-12)
    assert f.mu_inverse == "symbolic"


ISING = """
    name: ising_pair
    variable: {name: s, shape: vector, size: 2}
    support: binary_pm1
    parameters:
      a: {domain: real}
      b: {domain: real}
      c: {domain: real}
    sufficient_statistics: [s1, s2, s1*s2]
    natural_parameters: [a, b, c]
"""


def test_product_of_binary_supports_by_enumeration():
    f = build(ISING)
    assert f.components and f.component_supports == ["binary_pm1"] * 2 and f.is_discrete
    # no closed-form inverse is attempted for a transcendental μ: Newton's method instead
    assert f.mu_inverse == "numeric"
    vals = {f.params[k].symbol: v for k, v in {"a": 0.3, "b": -0.7, "c": 0.45}.items()}
    states = [(s1, s2) for s1 in (-1, 1) for s2 in (-1, 1)]
    w = np.array([np.exp(0.3 * s1 - 0.7 * s2 + 0.45 * s1 * s2) for s1, s2 in states])
    q = w / w.sum()
    want_mu = [sum(qi * s1 for qi, (s1, s2) in zip(q, states)), sum(qi * s2 for qi, (s1, s2) in zip(q, states)),
               sum(qi * s1 * s2 for qi, (s1, s2) in zip(q, states))]
    np.testing.assert_allclose([f.evaluate(m, vals) for m in f.mu_ord], want_mu, rtol=1e-12)
    assert f.evaluate(f.entropy(), vals) == pytest.approx(-np.sum(q * np.log(q)), rel=1e-12)
    back = f.numeric_ord_from_mu(dict(zip(f.mu, want_mu)))
    np.testing.assert_allclose([back[s] for s in vals], list(vals.values()), rtol=1e-9, atol=1e-10)


def test_poisson_entropy_is_a_numeric_sum():
    """log h = -log θ! is not linear in T: E[log h] is an (unevaluated) series, summed numerically."""
    f = build("""
        name: pois
        variable: k
        support: nonnegative_integers
        parameters:
          r: {domain: positive}
        sufficient_statistics: [k]
        base_measure: 1/factorial(k)
        natural_parameters: [log(r)]
    """)
    H = f.entropy()
    assert H.has(sp.Sum)
    r = f.params["r"].symbol
    for rv in (0.4, 7.5, 60.0):
        assert f.evaluate(H, {r: rv}) == pytest.approx(stats.poisson(rv).entropy(), rel=1e-10)


# ---------------------------------------------------------------------------
# E_q[log h] for a non-constant base measure, and when it has no closed form
# ---------------------------------------------------------------------------

GAMMA_WITH_H = """
    name: gamma_h
    variable: theta
    support: positive
    parameters:
      alpha: {domain: positive}
      beta: {domain: positive}
    sufficient_statistics: [log(theta), theta]
    base_measure: 1/theta
    natural_parameters: [alpha, -beta]
"""


def test_log_h_linear_in_the_statistics():
    """Gamma with h = 1/θ: log h = -T_1, so E[log h] = -μ_1 and ∇_μ E[log h] = (-1, 0) (App. B)."""
    f = build(GAMMA_WITH_H)
    c0, cs = f.log_h_linear()
    assert c0 == 0 and cs == [-1, 0]
    a, b = f.params["alpha"].symbol, f.params["beta"].symbol
    for av, bv in ((0.6, 1.3), (3.2, 0.4)):
        H = f.evaluate(f.entropy(), {a: av, b: bv})
        assert H == pytest.approx(stats.gamma(av, scale=1 / bv).entropy(), rel=1e-12)


def test_entropy_through_the_tilted_log_partition():
    """log h = θ² is not in the span of T = θ; E_q[log h] = d/ds log ∫ h^{1+s} e^{aθ} at s = 0 has a closed form
    (erfi), and the entropy it gives equals −∫ q log q by quadrature."""
    f = build("""
        name: tilted
        variable: theta
        support: unit_interval
        parameters:
          a: {domain: real}
        sufficient_statistics: [theta]
        base_measure: exp(theta**2)
        natural_parameters: [a]
    """)
    lam = f.lam[0]
    Z, _ = integrate.quad(lambda t: np.exp(t * t + 0.8 * t), 0, 1, epsabs=0, epsrel=1e-13)
    assert np.exp(f.evaluate(f.A, {lam: 0.8})) == pytest.approx(Z, rel=1e-10)
    H = f.entropy()
    q = lambda t: np.exp(t * t + 0.8 * t) / Z                                  # noqa: E731
    want, _ = integrate.quad(lambda t: -q(t) * np.log(q(t)), 0, 1, epsabs=0, epsrel=1e-13)
    assert float(f.evaluate(H, {f.params["a"].symbol: 0.8})) == pytest.approx(want, rel=1e-10)


# ---------------------------------------------------------------------------
# Several components: iterated integration
# ---------------------------------------------------------------------------

def test_two_component_family_by_iterated_integration():
    """Independent exponential × gamma on (0,∞)²: A is integrated component by component."""
    f = build("""
        name: pair
        variable: {components: [x, y]}
        support: positive
        parameters:
          r: {domain: positive}
          k: {domain: positive}
          b: {domain: positive}
        sufficient_statistics: [x, log(y), y]
        natural_parameters: [-r, k - 1, -b]
    """)
    assert f.component_supports == ["positive", "positive"] and not f.A_given
    r, k, b = (f.params[n].symbol for n in "rkb")
    for rv, kv, bv in ((0.7, 1.9, 0.8), (2.2, 0.5, 3.1)):
        o = {r: rv, k: kv, b: bv}
        lam = {l: f.evaluate(e, o) for l, e in zip(f.lam, f.eta)}
        want = -np.log(rv) + special.gammaln(kv) - kv * np.log(bv)
        assert f.evaluate(f.A, lam) == pytest.approx(want, rel=1e-12)
        H = stats.expon(scale=1 / rv).entropy() + stats.gamma(kv, scale=1 / bv).entropy()
        assert f.evaluate(f.entropy(), o) == pytest.approx(H, rel=1e-12)
        back = f.numeric_ord_from_mu({u: f.evaluate(m, o) for u, m in zip(f.mu, f.mu_ord)})
        np.testing.assert_allclose([back[s] for s in (r, k, b)], [rv, kv, bv], rtol=1e-9)


# ---------------------------------------------------------------------------
# Domains
# ---------------------------------------------------------------------------

def test_domains_sampling_and_validity():
    f = build("""
        name: dom
        variable: {name: theta, shape: vector, size: 3}
        support: categorical
        parameters:
          p1: {domain: simplex}
          p2: {domain: simplex}
        sufficient_statistics: [theta1, theta2]
        natural_parameters: [log(p1/(1 - p1 - p2)), log(p2/(1 - p1 - p2))]
    """)
    rng = np.random.default_rng(0)
    p1, p2 = f.params["p1"].symbol, f.params["p2"].symbol
    for _ in range(20):
        v = f.sample_params(rng)
        assert v[p1] > 0 and v[p2] > 0 and v[p1] + v[p2] < 1 and f.params_valid(v)
    assert not f.params_valid({p1: 0.7, p2: 0.4})
    assert not f.params_valid({p1: -0.1, p2: 0.4})
    d = f.default_params()
    assert d[p1] == d[p2] == pytest.approx(1 / 3)


def test_greater_than_domain():
    f = build("""
        name: chi2ish
        variable: theta
        support: positive
        parameters:
          n: {domain: real, greater_than: 2}
        sufficient_statistics: [log(theta)]
        base_measure: exp(-theta)
        natural_parameters: [n - 3]
    """)
    n = f.params["n"].symbol
    assert n.is_positive
    rng = np.random.default_rng(1)
    assert all(f.sample_params(rng)[n] > 2 for _ in range(20))
    assert not f.params_valid({n: 1.5}) and f.params_valid({n: 2.5})
    # Gamma(n - 2, 1): A = log Γ(n - 2)
    assert f.evaluate(f.A, {f.lam[0]: 0.7}) == pytest.approx(special.gammaln(1.7), rel=1e-12)


# ---------------------------------------------------------------------------
# Numeric inverse (Newton) versus closed forms
# ---------------------------------------------------------------------------

def test_numeric_inverse_agrees_with_closed_form_for_gaussians():
    from blr_derive.families.library import load_family
    f = load_family("gaussian_full")
    rng = np.random.default_rng(3)
    vals = f.sample_params(rng, 3)
    mu = {u: f.evaluate(m, vals, 3) for u, m in zip(f.mu, f.mu_ord)}
    back = f.numeric_ord_from_mu(mu)
    for p in f.free_params:
        np.testing.assert_allclose(np.asarray(back[p.symbol]).reshape(np.shape(vals[p.symbol])), vals[p.symbol],
                                   rtol=1e-9, atol=1e-10)


def test_numeric_inverse_with_a_fixed_parameter():
    from blr_derive.families.library import load_family
    f = load_family("gaussian_fixed_precision")
    rng = np.random.default_rng(4)
    vals = f.sample_params(rng, 2)
    S = f.params["S"].symbol
    mu = {u: f.evaluate(m, vals, 2) for u, m in zip(f.mu, f.mu_ord)}
    back = f.numeric_ord_from_mu({**mu, S: vals[S]})
    np.testing.assert_allclose(back[f.params["m"].symbol], vals[f.params["m"].symbol], rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------
# Located declaration errors for the new keys
# ---------------------------------------------------------------------------

BASE = """
    name: b
    variable: theta
    support: positive
    parameters:
      r: {domain: positive}
    sufficient_statistics: [theta]
    natural_parameters: [-r]
"""

BAD = [
    ("unknown support", BASE.replace("support: positive", "support: integers"), "support: integers",
     "unsupported support 'integers'"),
    ("categorical on a scalar", BASE.replace("support: positive", "support: categorical"), "support: categorical",
     "fixed size"),
    ("pd support on a scalar", BASE.replace("support: positive", "support: positive_definite"),
     "support: positive_definite", "matrix variables"),
    ("size on a scalar", BASE.replace("variable: theta", "variable: {name: theta, size: 3}"), "size: 3",
     "'size' is for vector variables"),
    ("size too large", BASE.replace("variable: theta", "variable: {name: theta, shape: vector, size: 99}"),
     "size: 99", "size must be an integer"),
    ("duplicate components", BASE.replace("variable: theta", "variable: {components: [a, a]}"),
     "components", "distinct names"),
    ("support list misaligned", BASE.replace("variable: theta", "variable: {components: [theta, u]}").replace(
        "support: positive", "support: [positive]"), "support: [positive]", "aligned"),
    ("mixed discrete and continuous", BASE.replace("variable: theta", "variable: {components: [theta, u]}").replace(
        "support: positive", "support: [positive, binary_pm1]"), "support: [positive", "mixing discrete"),
    ("simplex domain on a vector", BASE.replace("r: {domain: positive}", "r: {domain: simplex, shape: vector}"),
     "domain: simplex", "scalar parameters"),
    ("greater_than on positive", BASE.replace("r: {domain: positive}", "r: {domain: positive, greater_than: 1}"),
     "greater_than", "domain real"),
    ("greater_than with a symbol", BASE.replace("r: {domain: positive}", "r: {domain: real, greater_than: theta}"),
     "greater_than", "unknown symbol 'theta'"),
    ("matrix variable needs dimension", BASE.replace("variable: theta", "variable: {name: X, shape: matrix}"),
     "variable:", "needs a 'dimension'"),
]


@pytest.mark.parametrize("what,text,needle,msg", BAD, ids=[b[0] for b in BAD])
def test_new_keys_give_located_errors(what, text, needle, msg):
    with pytest.raises(SpecError, match=msg) as ei:
        build(text, "bad.yaml")
    assert ei.value.file == "bad.yaml" and ei.value.line == line_of(text, needle)


def test_simplex_support_needs_a_declared_log_partition():
    text = """
        name: dir2
        variable: {name: t, shape: vector, size: 3}
        support: simplex
        parameters:
          a: {domain: positive}
        sufficient_statistics: [log(t1)]
        natural_parameters: [a - 1]
    """
    with pytest.raises(SpecError, match="log_partition must be given for the simplex") as ei:
        build(text, "d.yaml")
    assert ei.value.line == line_of(text, "sufficient_statistics")


def test_matrix_variable_needs_a_declared_log_partition():
    text = """
        name: wish
        variable: {name: X, shape: matrix}
        dimension: P
        parameters:
          V: {shape: matrix, domain: positive_definite}
        sufficient_statistics: [X]
        natural_parameters: [-inv(V)/2]
    """
    with pytest.raises(SpecError, match="log_partition must be given for matrix"):
        build(text)


def test_divergent_discrete_sum_is_not_normalizable():
    text = """
        name: divergent
        variable: k
        support: nonnegative_integers
        parameters:
          r: {domain: positive}
        sufficient_statistics: [k]
        natural_parameters: [log(r)]
    """
    with pytest.raises(SpecError, match="not normalizable") as ei:      # Σ r^k diverges for r >= 1
        build(text, "div.yaml")
    assert ei.value.line == line_of(text, "sufficient_statistics")


def test_entropy_by_summation_when_log_h_is_not_linear_in_T():
    """Two ±1 spins with a fixed coupling in h: log h = s1*s2 is not in span(T), E[log h] is a finite sum."""
    f = build("""
        name: coupled
        variable: {name: s, shape: vector, size: 2}
        support: binary_pm1
        parameters:
          a: {domain: real}
          b: {domain: real}
        sufficient_statistics: [s1, s2]
        base_measure: exp(s1*s2/2)
        natural_parameters: [a, b]
    """)
    assert f.log_h_linear() is None
    a, b = f.params["a"].symbol, f.params["b"].symbol
    states = [(s1, s2) for s1 in (-1, 1) for s2 in (-1, 1)]
    for av, bv in ((0.3, -1.1), (-0.8, 0.25)):
        logw = np.array([av * s1 + bv * s2 + s1 * s2 / 2 for s1, s2 in states])
        q = np.exp(logw - np.logaddexp.reduce(logw))
        assert f.evaluate(f.entropy(), {a: av, b: bv}) == pytest.approx(-np.sum(q * np.log(q)), rel=1e-12)


def test_step_limits_interrupt_long_sympy_steps_and_nest():
    import time
    from blr_derive.core.budget import StepTimeout, step_limit
    t0 = time.perf_counter()
    with pytest.raises(StepTimeout, match="timed out"):
        with step_limit(0.2):
            while True:
                sum(range(1000))
    assert time.perf_counter() - t0 < 5
    t0 = time.perf_counter()
    with step_limit(5):             # an inner limit fires inside an outer one, and the outer one stays armed
        with pytest.raises(StepTimeout):
            with step_limit(0.05):
                time.sleep(1)
        assert time.perf_counter() - t0 < 0.5
        with pytest.raises(StepTimeout):
            with step_limit(0.05):
                while True:
                    sum(range(1000))
    assert time.perf_counter() - t0 < 2
