"""``blr-derive check`` hunts (issue 37): the hard points of a family, the references there, and planted faults that
random points never see.

The planted faults are honest: each family below is correct (its A normalizes h·exp(<λ, T>)) wherever its form has a
value, and the random-point checks pass it; the form is wrong only where the issue found derived forms wrong:

* a Gamma whose log-partition is declared in the reflection form Γ(1 + x) = −π/(Γ(−x) sin(πx)) (what integration
  returned for the issue's family): NaN at every integer shape;
* a truncated exponential whose log-partition log((e^λ − 1)/λ) is 0/0 at λ = 0 (rate b = 0) and cancels near it;
* a correct family whose generated module reads a name it does not bind (the ``math.erf`` class), planted by
  rewriting the rendered module after the audit.

A correct quartic family exp(−cθ⁴) (flat at its mode: no curvature there) passes every check.
"""
from __future__ import annotations

import re
from pathlib import Path
import textwrap

import numpy as np
import pytest
import scipy.special as sps
import sympy as sp

from blr_derive import cli
from blr_derive.families.library import load_family
from blr_derive.verify import hunt
from blr_derive.verify.family import check_family
from blr_derive.verify.quadrature import FamilyModel, Quadrature
from blr_derive.verify.results import HUNT_TOLERANCES

GAMMA_REFLECTION = """
    name: gamma_reflection
    description: the Gamma family with its log-partition in a reflection form (NaN at every integer shape)
    variable: theta
    support: positive
    parameters:
      alpha: {domain: positive, description: shape}
      beta: {domain: positive, description: rate}
    sufficient_statistics:
      - log(theta)
      - theta
    natural_parameters:
      - alpha - 1
      - -beta
    log_partition: log(-pi/(gamma(-lambda1)*sin(pi*lambda1))) - (lambda1 + 1)*log(-lambda2)
"""

TRUNCATED_EXPONENTIAL = """
    name: truncated_exponential_declared
    description: exponential with any real rate b truncated to (0, 1), A declared with its 0/0 at b = 0
    variable: theta
    support: unit_interval
    parameters:
      b: {domain: real, description: rate}
    sufficient_statistics:
      - theta
    natural_parameters:
      - -b
    log_partition: log((exp(lambda1) - 1)/lambda1)
"""

QUARTIC = """
    name: quartic
    description: density proportional to exp(-c theta^4), flat at its mode
    variable: theta
    support: real
    parameters:
      c: {domain: positive, description: rate}
    sufficient_statistics:
      - theta**4
    natural_parameters:
      - -c
"""


def write(tmp_path, name, text):
    p = tmp_path / f"{name}.yaml"
    p.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return p


def hunt_of(fam, targets=("numpy",)):
    """{check: (worst value, its note)} of the hunt alone."""
    model = FamilyModel(fam, 2)
    try:
        H = fam.entropy()
    except Exception:                                                  # noqa: BLE001
        H = None
    worst = {}

    def record(name, value, note=""):
        value = float(value) if np.isfinite(value) else float("inf")
        if name not in worst or value > worst[name][0] or value == float("inf"):
            worst[name] = (value, note)
    hunt.hunt_family(fam, model, 2, H, record, np.random.default_rng(0), targets=targets)
    return worst


def failed(worst):
    return {k: v for k, v in worst.items() if not v[0] <= HUNT_TOLERANCES[k]}


# ---------------------------------------------------------------------------------------------- hard points


def test_hard_points_of_the_gamma():
    fam = load_family("gamma")
    pts = hunt.hard_points(fam, 2, np.random.default_rng(0))
    vals = [(float(p.vals[fam.params["alpha"].symbol]), float(p.vals[fam.params["beta"].symbol])) for p in pts]
    # integers and half-integers of each parameter, and all at once
    for a in (1.0, 2.0, 3.0, 0.5, 1.5, 2.5):
        assert (a, 1.0) in vals and (1.0, a) in vals
    assert (2.0, 2.0) in vals and (0.5, 0.5) in vals
    # very small and large scales, the neighbourhood of an integer
    assert (1e-3, 1.0) in vals and (1e3, 1.0) in vals and (1.0, 1e3) in vals and (1 + 1e-8, 1.0) in vals
    # the pole of log Γ(λ1 + 1) at λ1 = −1 (α = 0, outside Ω) is found, and its neighbour inside Ω taken
    assert any("a pole of loggamma lambda1 + 1" in p.why and abs(v[0] - 1e-6) < 1e-12 for p, v in zip(pts, vals))
    assert len(vals) == len(set(vals))


def test_singular_arguments_of_special_functions():
    x, y = sp.symbols("x y")
    found = {(sp.sstr(a), t) for a, t, _ in hunt.singular_arguments(
        [sp.loggamma(x + 1) + sp.log(y) + 1 / (x - y) + sp.sqrt(x) + sp.polygamma(1, 2 * x)])}
    assert ("x + 1", hunt.POLES) in found and ("2*x", hunt.POLES) in found
    assert ("y", (0.0,)) in found and ("x - y", (0.0,)) in found and ("x", (0.0,)) in found


def test_natural_parameters_at_integers_and_half_integers():
    fam = load_family("beta")
    pts = hunt.hard_points(fam, 2, np.random.default_rng(0))
    lam = [(float(fam.evaluate(fam.eta[0], p.vals)), float(fam.evaluate(fam.eta[1], p.vals))) for p in pts]
    assert (0.0, 0.0) in lam and (1.0, 1.0) in lam and (0.5, 0.5) in lam and (-0.5, -0.5) in lam


# ---------------------------------------------------------------------------------------------- references


@pytest.mark.parametrize("a", [1e-6, 1e-3, 0.1, 3.0])
def test_the_30_digit_reference_at_scales_double_precision_cannot_hold(a):
    """A Gamma(α, 1) with α = 1e-3 has its mass at θ = e^-1000 (below double precision): the quadrature says so
    (``truncated``) and the 30-digit reference gives log Γ(α), ψ(α), ψ'(α) and the entropy (scipy)."""
    fam = load_family("gamma")
    model = FamilyModel(fam, 2)
    c = np.array([a - 1, -1.0])
    q = Quadrature(model, c, {}, 0.0)
    assert q.truncated == (a < 0.01)
    r = hunt.MpReference(fam)(c, {}, q)
    H = sps.gammaln(a) + (1 - a) * sps.digamma(a) + a
    assert r.logZ == pytest.approx(sps.gammaln(a), rel=1e-10, abs=1e-12)
    assert r.mean[0] == pytest.approx(sps.digamma(a), rel=1e-10)
    assert r.cov[0, 0] == pytest.approx(sps.polygamma(1, a), rel=1e-9)
    assert r.entropy == pytest.approx(H, rel=1e-9, abs=1e-9)


def test_quadrature_scaled_by_the_spread_integrates_a_density_flat_at_its_mode(tmp_path):
    """exp(−cθ⁴): zero curvature at the mode (the check scaled by it failed normalization at 113)."""
    fam = load_family(str(write(tmp_path, "quartic", QUARTIC)))
    model = FamilyModel(fam, 2)
    for c in (0.3, 1.0, 40.0):
        q = Quadrature(model, np.array([-c]), {}, 0.0)
        assert q.logZ == pytest.approx(np.log(2 * sps.gamma(1.25)) - 0.25 * np.log(c), rel=1e-13)
        assert q.mean[0] == pytest.approx(1 / (4 * c), rel=1e-12)          # E[θ⁴] = 1/(4c)
        assert q.cov[0, 0] == pytest.approx(1 / (4 * c * c), rel=1e-11)   # Var[θ⁴] = d² log Z/dc² = 1/(4c²)


def test_quadrature_at_a_kink():
    """Laplace: |θ| has a kink at the mode, an endpoint of the split rule (it was an O(h²) error of 4e-4)."""
    fam = load_family("laplace")
    model = FamilyModel(fam, 2)
    for b in (0.3, 1.7):
        q = Quadrature(model, np.array([-1 / b]), {}, 0.0)
        assert q.logZ == pytest.approx(np.log(2 * b), rel=1e-14)
        assert q.mean[0] == pytest.approx(b, rel=1e-13) and q.cov[0, 0] == pytest.approx(b * b, rel=1e-12)


# ---------------------------------------------------------------------------------------------- planted faults


@pytest.mark.slow
def test_reflection_form_passes_random_points_and_fails_at_integers(tmp_path):
    fam = load_family(str(write(tmp_path, "gamma_reflection", GAMMA_REFLECTION)))
    plain = check_family(fam, mc_samples=2000)
    assert all(c.passed for c in plain)                                # random points never land on integers
    bad = failed(hunt_of(fam))
    assert {"hard_log_partition", "hard_mu", "hard_fisher", "hard_entropy"} <= set(bad)
    value, note = bad["hard_log_partition"]
    assert value == float("inf")
    # the point is named: an integer shape, where Γ(−λ1) has a pole and sin(πλ1) a zero
    alpha = float(re.search(r"at alpha = ([0-9.e+-]+)", note).group(1))
    assert alpha in (1.0, 2.0, 3.0) and "not finite" in note or "raised" in note
    # the generated module gives NaN there too
    assert bad["generated_numpy"][0] == float("inf") and "alpha = " in bad["generated_numpy"][1]


@pytest.mark.slow
def test_removable_singularity_is_found_at_zero_and_next_to_it(tmp_path):
    fam = load_family(str(write(tmp_path, "te", TRUNCATED_EXPONENTIAL)))
    # the closed form log((e^λ − 1)/λ) is 0/0 at b = 0 and cancels next to it; the derivation replaces it there by its
    # Taylor polynomial (blr_derive/families/singular.py), says so, and the hunt at b = 0 and next to it then finds nothing
    assert any(what == "removable singularity" and "lambda1 = 0" in how for what, how in fam.steps), fam.steps
    assert failed(hunt_of(fam)) == {}


#: log_partition's return in the numpy module of a family, and the same with a call of math, which it never imports
#: (the old printer's math.erf, planted)
RETURN_A = "    return float("
UNBOUND = "    return math.fsum([0.0]) + float("


@pytest.mark.slow
def test_a_module_that_reads_an_unbound_name_fails_at_every_point(monkeypatch):
    """The old printer's fault, planted after the audit: log_partition calls math.fsum, which the module never
    imports; the module imports fine, the NameError comes when the function runs, at the first hard point."""
    real = hunt.emit
    monkeypatch.setattr(hunt, "emit", lambda ir, target: real(ir, target).replace(RETURN_A, UNBOUND, 1))
    fam = load_family("exponential")
    worst = hunt_of(fam)
    value, note = worst["generated_numpy"]
    assert value == float("inf") and "raised NameError: name 'math' is not defined" in note
    assert note.startswith("at r = ")
    assert all(v[0] <= HUNT_TOLERANCES[k] for k, v in worst.items() if k != "generated_numpy")


def test_a_module_the_audit_refuses_fails_the_check(monkeypatch):
    """A printer fault the audit catches when the module is rendered (a name nothing binds) fails generated_numpy
    with the audit's message, before anything runs."""
    from blr_derive.codegen import registry
    real = registry.emit

    def render(ir, target):
        t = registry.get_target(target)
        return registry.audit(t.render(ir).replace(RETURN_A, UNBOUND, 1), target, t.config.modules)
    monkeypatch.setattr(hunt, "emit", render)
    worst = hunt_of(load_family("exponential"))
    assert worst["generated_numpy"][0] == float("inf")
    assert "reads 'math'" in worst["generated_numpy"][1] and "nothing in it binds" in worst["generated_numpy"][1]
    assert real is registry.emit


# ---------------------------------------------------------------------------------------------- correct families


@pytest.mark.slow
def test_a_correct_quartic_family_passes_check(tmp_path, capsys):
    p = write(tmp_path, "quartic", QUARTIC)
    assert cli.main(["check", str(p)]) == 0
    out = capsys.readouterr().out
    assert "hard points" in out and "hard_log_partition" in out and "generated_numpy" in out
    assert re.search(r"all \d+ checks passed", out)


@pytest.mark.slow
def test_cli_names_the_point_and_the_quantity(tmp_path, capsys):
    p = write(tmp_path, "gamma_reflection", GAMMA_REFLECTION)
    assert cli.main(["check", str(p), "--points", "1"]) == 1
    out, err = capsys.readouterr()
    row = re.search(r"(?m)^  hard_log_partition\s+inf\s+<= 1e-07\s+FAIL\s+.*\[at alpha = (\S+), beta = (\S+) ", out)
    assert row, out
    assert float(row.group(1)) in (1.0, 2.0, 3.0)
    assert "hard_log_partition" in err


ZT_POISSON = Path(__file__).resolve().parents[2] / "corpus" / "families" / "zt_poisson.yaml"


@pytest.mark.parametrize("r, settle", [(1e-300, False), (1e-300, True), (1e-20, True), (1e-9, False), (0.5, True)])
def test_the_symbolic_record_computes_a_cancelling_form_at_the_precision_it_needs(r, settle):
    """A zero-truncated Poisson's A = log(e^r − 1) − λ, μ and F (all r/2 + O(r²) for r = e^λ → 0) lose every digit of
    30 at r = 1e-20 (A = −2.5e-12) and are log(0), 0/0 at r = 1e-300: the record computes them again at more digits
    where the 30-digit value is not finite, and always with ``settle`` (tests/unit/verify/test_beyond_hunt.py)."""
    fam = load_family(str(ZT_POISSON))
    rec = hunt.SymbolicRecord(fam, None, settle=settle)
    lam = dict(zip(fam.lam, rec("eta", {p.symbol: r for p in fam.free_params})))
    u = float(np.exp(lam[fam.lam[0]]))                   # the rate the float λ stands for
    want = {"A": u / 2 + u ** 2 / 24, "mu": u / 2 + u ** 2 / 12, "F": u / 2 + u ** 2 / 6} if u < 1e-6 else None
    for key in ("A", "mu", "F"):
        got = float(rec(key, lam)[0])
        if want is None:       # at r = 0.5 the 30-digit value settles at once: the closed form in double precision
            with np.errstate(all="ignore"):
                assert got == pytest.approx({"A": np.log(np.expm1(u) / u), "mu": u / -np.expm1(-u) - 1,
                                             "F": u * (np.expm1(u) - u) * np.exp(-u) / np.expm1(-u) ** 2}[key],
                                            rel=1e-14)
        else:
            assert got == pytest.approx(want[key], rel=1e-14), (key, r, got)


def test_a_fisher_information_is_compared_on_its_own_scale():
    """hunt.fisher_rel: F's error over sqrt(F_ii F_jj) of the reference as well as over max(1, |F|).  A lattice of 121
    counts tilted by e^(30k) has Cov_q[k] = 9.357623e-14; its generated module printed E[k²] − E[k]², −3.709e-12
    (`blr-derive check` passed it at 4e-12 before); a variance of 1.93e-22 computed as 0 is wrong by all of it; a
    correct matrix whose small entries round at 1e-16 of the large ones passes."""
    from blr_derive.verify.hunt import fisher_rel, rel
    assert rel([[-3.7090331e-12]], [[9.357623e-14]]) < 1e-11
    assert abs(fisher_rel([[-3.7090331e-12]], [[9.357623e-14]]) - (3.7090331e-12 + 9.357623e-14) / 9.357623e-14) < 1e-9
    assert fisher_rel([[0.0]], [[1.93e-22]]) == 1.0
    want = np.array([[4.0, 1e-3], [1e-3, 1e-6]])
    assert fisher_rel(want * (1 + 1e-16), want) < 1e-15
    # an off-diagonal entry off by 1e-9 where sqrt(F_11 F_22) = 2e-3: 5e-7 on F's scale, 1e-9 on max(1, |F|)'s
    got = want + np.array([[0, 1e-9], [1e-9, 0]])
    assert abs(fisher_rel(got, want) - 5e-7) < 1e-12 and abs(rel(got, want) - 1e-9) < 1e-15
    # a reference without a positive diagonal (a degenerate direction): max(1, |F|) alone
    assert fisher_rel([[1e-9]], [[0.0]]) == 1e-9


def test_the_summed_covariance_takes_out_the_rounding_of_the_mean():
    """Quadrature.cov, the corrected two-pass sum: two coupled ±1 spins with fields (0, 30) and no coupling have
    Var(s2) = 4/(e^60 + 1) = 3.5026044e-26; the plain two-pass sum gave 3.5029198e-26 (9e-5 off: the weights sum
    to 1 + 1.8e-15, and the mean's deviation at the likely states, squared, adds 3.2e-30)."""
    from blr_derive.verify.quadrature import FamilyModel, Quadrature
    fam = load_family(str(Path(__file__).resolve().parents[2] / "corpus" / "families" / "ising_pair.yaml"))
    q = Quadrature(FamilyModel(fam, 2), np.array([0.0, 30.0, 0.0]), {}, 0.0)
    want = 4 / (np.exp(60.0) + 1)
    assert abs(q.cov[1, 1] - want) / want < 1e-12
    assert abs(q.cov[0, 0] - 1) < 1e-14 and abs(q.cov[0, 2] - np.tanh(30.0)) < 1e-14
