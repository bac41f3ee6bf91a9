"""Family declarations given as inline YAML: located errors, and derivation of A by integration."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest
import sympy as sp
from scipy import integrate

from blr_derive.core.errors import SpecError
from blr_derive.families.model import Family
from blr_derive.families.library import family_from_spec
from blr_derive.families.numeric import numeric_fisher
from blr_derive.core.yamlio import load_yaml_text


def build(text, file="inline.yaml"):
    return family_from_spec(load_yaml_text(textwrap.dedent(text).lstrip("\n"), file), file)


def line_of(text, needle):
    """1-based line of the first line of the (dedented) text containing needle."""
    lines = textwrap.dedent(text).lstrip("\n").splitlines()
    hits = [i + 1 for i, l in enumerate(lines) if needle in l]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


EXPONENTIAL = """
    name: exponential
    variable: theta
    support: positive
    parameters:
      r: {domain: positive, description: rate}
    sufficient_statistics:
      - theta
    natural_parameters:
      - -r
"""


# ---------------------------------------------------------------------------
# Normalizability and minimality
# ---------------------------------------------------------------------------

NOT_NORMALIZABLE = """
    name: flat
    variable: theta
    support: real
    parameters:
      a: {domain: real}
    sufficient_statistics:
      - theta
    base_measure: 1
    natural_parameters:
      - a
"""


def test_not_normalizable():
    with pytest.raises(SpecError, match="not normalizable") as ei:
        build(NOT_NORMALIZABLE, "flat.yaml")
    assert ei.value.file == "flat.yaml"
    assert ei.value.line == line_of(NOT_NORMALIZABLE, "sufficient_statistics")


NOT_MINIMAL = """
    name: redundant
    variable: theta
    support: real
    parameters:
      a: {domain: real}
      b: {domain: real}
    sufficient_statistics:
      - theta
      - 2*theta
    base_measure: exp(-theta**2/2)
    natural_parameters:
      - a
      - b
"""


@pytest.mark.slow
def test_not_minimal():
    with pytest.raises(SpecError, match="not minimal") as ei:
        build(NOT_MINIMAL, "redundant.yaml")
    assert ei.value.file == "redundant.yaml"
    assert ei.value.line == line_of(NOT_MINIMAL, "sufficient_statistics")


# ---------------------------------------------------------------------------
# Located declaration errors
# ---------------------------------------------------------------------------

def test_unknown_key():
    text = EXPONENTIAL + "    colour: red\n"
    with pytest.raises(SpecError, match="unknown key 'colour'") as ei:
        build(text, "k.yaml")
    assert ei.value.line == line_of(text, "colour") and ei.value.file == "k.yaml"


def test_unknown_key_in_parameter():
    text = EXPONENTIAL.replace("description: rate", "descripton: rate")
    with pytest.raises(SpecError, match="unknown key 'descripton'") as ei:
        build(text)
    assert ei.value.line == line_of(text, "descripton")


def test_missing_required_key():
    text = EXPONENTIAL.replace("    variable: theta\n", "")
    with pytest.raises(SpecError, match="missing required key 'variable'") as ei:
        build(text)
    assert ei.value.line == 1


UNKNOWN_SYMBOL = """
    name: twostat
    variable: theta
    support: real
    parameters:
      m: {domain: real}
      s: {domain: positive}
    sufficient_statistics:
      - theta
      - theta**2
    natural_parameters:
      - s*m
      - -q/2
"""


def test_unknown_symbol_in_natural_parameters_points_at_the_item():
    with pytest.raises(SpecError, match="unknown symbol 'q'") as ei:
        build(UNKNOWN_SYMBOL, "u.yaml")
    assert ei.value.line == line_of(UNKNOWN_SYMBOL, "-q/2")
    assert ei.value.file == "u.yaml"
    assert "natural parameter 2" in ei.value.message


def test_theta_not_allowed_in_natural_parameters():
    text = UNKNOWN_SYMBOL.replace("-q/2", "-s/2 + theta")
    with pytest.raises(SpecError, match="unknown symbol 'theta'") as ei:
        build(text)
    assert ei.value.line == line_of(text, "-s/2 + theta")


def test_parameter_in_sufficient_statistic_rejected():
    """It said `unknown symbol 'm'` of a declared parameter; it now says what a statistic may read and how a known
    constant is written there (the test below follows it)."""
    text = UNKNOWN_SYMBOL.replace("- theta**2", "- m*theta**2")
    with pytest.raises(SpecError, match="sufficient statistic 2 reads the parameter 'm': a sufficient statistic is "
                                        "a function of the variable alone") as ei:
        build(text)
    assert ei.value.line == line_of(text, "m*theta**2")
    with pytest.raises(SpecError, match="unknown symbol 'q'"):          # an undeclared name: as before
        build(UNKNOWN_SYMBOL.replace("- theta**2", "- q*theta**2"))


def test_a_known_shape_in_a_statistic_written_as_the_message_says_is_a_kumaraswamy(tmp_path):
    """Kumaraswamy(a, b) with a known: T = log(1 − θ^a), h = aθ^(a−1), λ = b − 1, written with a size as the message
    above says; ∫ aθ^(a−1)(1 − θ^a)^(b−1) dθ = 1/b, so A(λ) = −log(λ + 1), and μ = E[log(1 − θ^a)] = −H_b (the
    harmonic number ψ(b + 1) + γ), here by quadrature."""
    from blr_derive.families.library import load_family
    text = textwrap.dedent("""
        name: kumaraswamy_known_a
        sizes: {a: {default: 2, min: 1, max: 8}}
        variable: theta
        support: unit_interval
        parameters:
          b: {domain: positive}
        sufficient_statistics: ["log(1 - theta**{a})"]
        base_measure: "{a}*theta**({a} - 1)"
        natural_parameters: [b - 1]
    """).lstrip("\n")
    path = tmp_path / "kumaraswamy_known_a.yaml"
    path.write_text(text, encoding="utf-8")
    fam = load_family({"name": str(path), "a": 3})
    lam1 = fam.lam[0]
    for b in (0.5, 1.0, 2.5):
        assert abs(float(fam.A.subs(lam1, b - 1)) + np.log(b)) < 1e-13
        want = integrate.quad(lambda t: np.log1p(-t**3) * 3 * b * t**2 * (1 - t**3)**(b - 1), 0, 1,
                              epsabs=1e-13, epsrel=1e-13, limit=200)[0]
        assert abs(float(fam.mu_of_lam[0].subs(lam1, b - 1)) - want) < 1e-9


def test_misaligned_natural_parameters():
    text = UNKNOWN_SYMBOL.replace("      - -q/2\n", "")
    with pytest.raises(SpecError, match="aligned") as ei:
        build(text, "m.yaml")
    assert ei.value.line == line_of(text, "natural_parameters")


def test_shape_mismatch_between_eta_and_T():
    text = """
        name: v
        variable: {name: theta, shape: vector}
        dimension: P
        parameters:
          m: {shape: vector}
          S: {shape: matrix, domain: positive_definite}
        sufficient_statistics: [theta]
        natural_parameters: [S]
        log_partition: lambda1.T*lambda1/2
    """
    with pytest.raises(SpecError, match="shape") as ei:
        build(text)
    assert ei.value.line == line_of(text, "natural_parameters")


def test_bad_parameter_shape_is_located():
    text = EXPONENTIAL.replace("{domain: positive, description: rate}", "{domain: positive, shape: blob}")
    with pytest.raises(SpecError, match="shape") as ei:
        build(text)
    assert ei.value.line == line_of(text, "shape: blob")


def test_vector_family_needs_log_partition():
    text = """
        name: v
        variable: {name: theta, shape: vector}
        dimension: P
        parameters:
          m: {shape: vector}
        sufficient_statistics: [theta]
        base_measure: exp(-theta.T*theta/2)
        natural_parameters: [m]
    """
    with pytest.raises(SpecError, match="log_partition must be given"):
        build(text)


def test_malicious_expression_in_family_is_located():
    text = UNKNOWN_SYMBOL.replace("-q/2", "__import__('os').system('echo pwned')")
    with pytest.raises(SpecError) as ei:
        build(text)
    assert ei.value.line == line_of(text, "__import__")


# ---------------------------------------------------------------------------
# Declared expectation parameters are checked
# ---------------------------------------------------------------------------

def test_wrong_expectation_parameters_rejected():
    text = EXPONENTIAL + "    expectation_parameters:\n      - 2/r\n"
    with pytest.raises(SpecError, match="differs") as ei:
        build(text, "e.yaml")
    assert ei.value.line == line_of(text, "- 2/r")


def test_right_expectation_parameters_accepted():
    f = build(EXPONENTIAL + "    expectation_parameters:\n      - 1/r\n")
    r = f.params["r"].symbol
    assert sp.simplify(f.mu_ord[0] - 1 / r) == 0


def test_misaligned_expectation_parameters_rejected():
    text = EXPONENTIAL + "    expectation_parameters:\n      - 1/r\n      - r\n"
    with pytest.raises(SpecError, match="aligned"):
        build(text)


# ---------------------------------------------------------------------------
# Log-partition derived by symbolic integration (scalar families)
# ---------------------------------------------------------------------------

def test_exponential_family_log_partition_by_integration():
    f = build(EXPONENTIAL)
    assert isinstance(f, Family) and not f.A_given
    r = f.params["r"].symbol
    (lam,) = f.lam
    # A(λ) = -log(-λ), μ = ∇A = -1/λ = 1/r
    for rv in (0.3, 1.0, 2.7):
        lv = -rv
        assert f.evaluate(f.A, {lam: lv}) == pytest.approx(-np.log(rv), rel=1e-12, abs=1e-12)
        assert f.evaluate(f.mu_of_lam[0], {lam: lv}) == pytest.approx(1 / rv, rel=1e-12)
        assert f.evaluate(f.mu_ord[0], {r: rv}) == pytest.approx(1 / rv, rel=1e-12)
        # exp(A) = ∫_0^∞ exp(λ θ) dθ
        Z, _ = integrate.quad(lambda t: np.exp(lv * t), 0, np.inf, epsabs=0, epsrel=1e-12)
        assert np.exp(f.evaluate(f.A, {lam: lv})) == pytest.approx(Z, rel=1e-10)
        # Fisher = Var[θ] = 1/r²
        assert numeric_fisher(f, {lam: lv}, 1)[0, 0] == pytest.approx(1 / rv**2, rel=1e-12)
        # round trips
        assert f.evaluate(f.ord_from_nat[r], {lam: lv}) == pytest.approx(rv, rel=1e-12)
        assert f.evaluate(f.ord_from_mu[r], {f.mu[0]: 1 / rv}) == pytest.approx(rv, rel=1e-12)
    assert sp.simplify(f.mu_ord[0] - 1 / r) == 0


@pytest.mark.slow
def test_gaussian_log_partition_by_integration_matches_builtin():
    """A scalar Gaussian declared without log_partition: the integrated A is the textbook one."""
    f = build("""
        name: gauss
        variable: theta
        support: real
        parameters:
          m: {domain: real}
          s: {domain: positive}
        sufficient_statistics: [theta, theta**2]
        base_measure: 1/sqrt(2*pi)
        natural_parameters: [s*m, -s/2]
    """)
    assert not f.A_given
    m, s = f.params["m"].symbol, f.params["s"].symbol
    rng = np.random.default_rng(3)
    for _ in range(3):
        mv, sv = float(rng.normal()), float(np.exp(rng.normal()))
        lam = {f.lam[0]: sv * mv, f.lam[1]: -sv / 2}
        assert f.evaluate(f.A, lam) == pytest.approx(0.5 * sv * mv**2 - 0.5 * np.log(sv), rel=1e-12, abs=1e-12)
        mus = [f.evaluate(e, {m: mv, s: sv}) for e in f.mu_ord]
        np.testing.assert_allclose(mus, [mv, mv**2 + 1 / sv], rtol=1e-12)
        Z, _ = integrate.quad(lambda t: np.exp(lam[f.lam[0]] * t + lam[f.lam[1]] * t * t) / np.sqrt(2 * np.pi),
                              -np.inf, np.inf, epsabs=0, epsrel=1e-12)
        assert np.exp(f.evaluate(f.A, lam)) == pytest.approx(Z, rel=1e-9)
    H = f.evaluate(f.entropy(), {m: 0.3, s: 2.0})
    assert H == pytest.approx(0.5 * np.log(2 * np.pi * np.e / 2.0), rel=1e-12)


def test_exponential_entropy():
    f = build(EXPONENTIAL)
    r = f.params["r"].symbol
    for rv in (0.5, 3.0):
        assert f.evaluate(f.entropy(), {r: rv}) == pytest.approx(1 - np.log(rv), rel=1e-12, abs=1e-12)


@pytest.mark.slow
def test_unsupported_inversion_is_a_spec_error_or_a_correct_family():
    """Continuous Bernoulli on (0,1): μ(λ) has no closed-form inverse.

    The engine may either derive the family or reject it, but untrusted input must
    never escape as a bare Python exception.
    """
    text = """
        name: cbern
        variable: theta
        support: unit_interval
        parameters:
          a: {domain: real}
        sufficient_statistics: [theta]
        natural_parameters: [a]
    """
    try:
        f = build(text, "cb.yaml")
    except SpecError as exc:
        assert exc.file == "cb.yaml" and exc.line is not None
        return
    lam = f.lam[0]
    for av in (-1.3, 0.7):
        Z, _ = integrate.quad(lambda t: np.exp(av * t), 0, 1)
        assert np.exp(f.evaluate(f.A, {lam: av})) == pytest.approx(Z, rel=1e-10)
