"""Recipes written from the docs by people who had not seen the catalog (a second fuzzing pass): forms the docs
promise that the engine refused, and refusals whose message did not say what to write instead."""
import numpy as np
import pytest

from blr_derive import api
from blr_derive.cli import main
from conftest import FUNCTION_TARGETS

CONJUGATE = """name: {name}
family: gaussian_diag
loss: {loss}
approximations:
  - exact
hyperparameters:
  rho: 0.5
"""


def test_a_loss_written_as_a_bare_expression_derives_as_the_mapping_form():
    """docs/recipes.md: ``loss`` is 'abstract', an expression of the family's variable, or a mapping.  The bare
    expression was refused ("must be ... a mapping").  It now derives the same update as ``{expression: ...}``:
    for ℓ(θ) = (θ − 2)²/2 and exact expectations the conjugate step with ρ = 1/2 halves the distance of m to 2
    and moves the precision halfway to 1 (Eqs. 22-26 with ∇ℓ = θ − 2, ∇²ℓ = 1)."""
    short = api.derive(CONJUGATE.format(name="short", loss="(theta - 2)**2/2")).compile("numpy")
    long_ = api.derive(CONJUGATE.format(name="long", loss="{expression: (theta - 2)**2/2}")).compile("numpy")
    assert short.EQUATIONS == long_.EQUATIONS
    st = short.init(m=np.array([0.0, 4.0]), s=np.array([3.0, 0.5]))
    nxt = short.step(st)
    np.testing.assert_allclose(nxt["s"], [2.0, 0.75], rtol=1e-14)
    # m ← m − ρ S⁻¹ ∇ (new precision): 0 − 0.5·(−2)/2 = 0.5, 4 − 0.5·2/0.75 = 2.666…
    np.testing.assert_allclose(nxt["m"], [0.5, 4 - 1 / 0.75], rtol=1e-14)


def test_a_bare_loss_expression_that_does_not_parse_is_located_at_the_loss_line(tmp_path, capsys):
    p = tmp_path / "r.yaml"
    p.write_text(CONJUGATE.format(name="r", loss="(theta - 2)**/2"))
    assert main([str(p), "--target", "numpy"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"blr-derive: error: {p}:3: ") and "\n" not in err


def test_a_misspelt_approximation_suggests_the_rule_it_resembles(tmp_path, capsys):
    """'exact_expectations' listed all 60 rules (cut at the terminal's width) and not the one meant."""
    p = tmp_path / "r.yaml"
    p.write_text(CONJUGATE.format(name="r", loss="theta**2").replace("  - exact", "  - exact_expectations"))
    assert main([str(p), "--target", "numpy"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{p}:5: unknown approximation 'exact_expectations'; did you mean 'exact'?" in err
    p.write_text(CONJUGATE.format(name="r", loss="theta**2").replace("  - exact", "  - squared_gradient_hesian"))
    assert main([str(p), "--target", "numpy"]) == 2
    assert "did you mean 'squared_gradient_hessian'" in capsys.readouterr().err


def test_misspelt_keys_families_and_targets_suggest_the_name_meant(tmp_path, capsys):
    p = tmp_path / "r.yaml"
    p.write_text(CONJUGATE.format(name="r", loss="theta**2").replace("hyperparameters:", "hyperparameter:"))
    assert main([str(p), "--target", "numpy"]) == 2
    assert f"{p}:6: unknown key 'hyperparameter' in recipe; did you mean 'hyperparameters'?" in capsys.readouterr().err
    p.write_text(CONJUGATE.format(name="r", loss="theta**2").replace("gaussian_diag", "gausian_diag"))
    assert main([str(p), "--target", "numpy"]) == 2
    assert "unknown family 'gausian_diag'; did you mean 'gaussian_diag'" in capsys.readouterr().err
    p.write_text(CONJUGATE.format(name="r", loss="theta**2"))
    assert main([str(p), "--target", "pytorch"]) == 2
    assert "unknown target 'pytorch'; did you mean 'torch'?" in capsys.readouterr().err


def test_a_time_limit_that_is_not_a_positive_number_is_refused_and_leaves_no_deadline_behind():
    """``api.derive(time_limit=nan)`` raised a raw ValueError from the timer and left its deadline on the stack:
    every later derivation in the notebook failed.  inf (a natural "no limit") overflowed the timer."""
    import math


    from blr_derive.core import budget
    text = CONJUGATE.format(name="t", loss="(theta - 2)**2/2")
    for bad in (math.nan, -1.0, 0, "10", True):
        with pytest.raises(ValueError, match="a time limit must be a positive number of seconds, or None"):
            api.derive(text, time_limit=bad)
        assert budget._stack == []
    for fine in (math.inf, 1e300, 60):
        nm = api.derive(text, time_limit=fine).compile("numpy")
        np.testing.assert_allclose(nm.step(nm.init(m=np.array([0.0]), s=np.array([3.0])))["s"], [2.0], rtol=1e-14)
        assert budget._stack == []


def test_notebook_misuse_of_the_api_says_what_to_pass():
    """Raw RepresenterError, 'dictionary update sequence element', pathlib's TypeError and a KeyError of an
    internal name were what a notebook user saw; a single approximation given as text was split into letters."""
    import sympy as sp
    theta = sp.Symbol("theta")
    # a sympy expression is taken as its text (parsed by the restricted grammar) and one rule needs no list
    r = api.recipe(family="gaussian_diag", loss={"expression": (theta - 2) ** 2 / 2}, approximations="exact",
                   hyperparameters={"rho": 0.5})
    nm = api.derive(r).compile("numpy")
    np.testing.assert_allclose(nm.step(nm.init(m=np.array([4.0]), s=np.array([0.5])))["m"], [4 - 1 / 0.75],
                               rtol=1e-14)
    with pytest.raises(TypeError, match="hyperparameters must be a mapping"):
        api.recipe(family="gaussian_diag", hyperparameters=["rho"])
    with pytest.raises(TypeError, match=r"expected a catalog name, a path, a mapping or YAML text, got a int"):
        api.recipe(42)
    with pytest.raises(TypeError, match=r"got a Family \(pass a family as recipe\(family=\.\.\.\)\)"):
        api.derive(api.family("gamma"))
    with pytest.raises(TypeError, match="compare\\(\\): expected a catalog name or a path"):
        api.compare(api.family("gamma"), "adam")
    with pytest.raises(TypeError, match="a object cannot be written in a declaration"):
        api.recipe(family="gaussian_diag", loss={"expression": object()})
    gamma = api.family("gamma")
    assert set(map(str, gamma.sample_params(0))) == {"alpha", "beta"}       # a seed for the generator
    with pytest.raises(KeyError, match="'nu1' is not an expectation parameter .* \\(expected: mu1, mu2\\)"):
        gamma.numeric_ord_from_mu({"nu1": 0.3})
    with pytest.raises(KeyError, match="missing mu2"):
        gamma.numeric_ord_from_mu({"mu1": 0.3})
    # E[log θ] = ψ(α) − log β, E[θ] = α/β: the inverse at α = 2, β = 4
    from scipy.special import digamma
    out = {str(k): v for k, v in gamma.numeric_ord_from_mu({"mu1": digamma(2.0) - np.log(4.0), "mu2": 0.5}).items()}
    np.testing.assert_allclose([out["alpha"], out["beta"]], [2.0, 4.0], rtol=1e-10)


def test_a_pass_after_straight_through_derives():
    """``[straight_through, {minibatch: {size: nn}}]``: scalarizing the oracle call read ``.name`` of its
    argument, binary(λ), an expression: internal error.  Now λ ← (1 − ρ)λ − ρ·nn·∇ℓ(binary(λ))."""
    text = ("name: ste_pass\nfamily: bernoulli_logit\nloss: abstract\nhyperparameters: {nn: 2.0, rho: 0.25}\n"
            "approximations: [straight_through, {minibatch: {size: nn}}]\n")
    nm = api.derive(text).compile("numpy")
    lam = np.array([0.3, -1.2, 0.0])
    seen = []

    def grad(theta):
        seen.append(np.array(theta))
        return 3.0 * theta

    out = nm.step(nm.init(lam=lam), oracles={"grad": grad})
    np.testing.assert_array_equal(seen[0], [1.0, -1.0, 1.0])           # binary(λ) = sign, +1 at 0
    np.testing.assert_allclose(out["lam"], 0.75 * lam - 0.25 * 2.0 * 3.0 * seen[0], rtol=1e-15)


def test_state_names_that_swap_two_states_are_refused(tmp_path, capsys):
    """``state_names: {u: s, s: u}`` generated, and a checkpoint saved under the states' own names (renamed on
    load, as the README promises) loaded each state into the other: NaN parameters."""
    p = tmp_path / "sn.yaml"
    p.write_text("""name: sn
family: gaussian_diag
loss: abstract
learning_rate: lr
hyperparameters: {lr: 0.01, b1: 0.9}
state_init: {s: 0}
peer:
  state_names: {u: s, s: u}
approximations:
  - delta
  - squared_gradient_hessian
  - ema_momentum: {rate: b1, state: u}
""")
    assert main([str(p), "--target", "torch"]) == 2
    assert (f"{p}:8: peer: state_names stores 'u' under 's', the name of another state of this update"
            in capsys.readouterr().err)
    p.write_text(p.read_text().replace("{u: s, s: u}", "{u: exp_avg, s: exp_avg_sq}"))
    assert main([str(p), "--target", "torch", "-o", str(tmp_path / "ok.py")]) == 0
    assert '_RENAMED = {"s": "exp_avg_sq", "u": "exp_avg"}' in (tmp_path / "ok.py").read_text()


LOGISTIC = """name: {name}
family: gaussian_full
loss:
  expression: {loss}
  data:
    X: {{shape: [N, P]}}
    y: {{shape: [N]}}
approximations:
  - {rule}
hyperparameters:
  rho: 0.5
"""


def test_logistic_regression_without_a_prior_term_derives():
    """A loss made of data sums alone (no polynomial part, e.g. logistic regression without a prior) was an
    internal error ('int' object has no attribute 'has').  The delta method's step equals Newton's on
    ℓ(θ) = Σ softplus(xᵢᵀθ) − yᵀXθ (Eqs. 8-13): g = Xᵀ(σ(Xm) − y), H = Xᵀ diag(σ(1 − σ)) X."""
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(40, 3)), (rng.random(40) < 0.5).astype(float)
    m, S = rng.normal(size=3), np.eye(3) * 2.0
    sig = 1 / (1 + np.exp(-X @ m))
    H = X.T @ ((sig * (1 - sig))[:, None] * X)
    S_new = 0.5 * H + 0.5 * S
    m_new = m - 0.5 * np.linalg.solve(S_new, X.T @ (sig - y))
    nm = api.derive(LOGISTIC.format(name="logreg", loss="sum(softplus(X*theta)) - y.T*X*theta", rule="delta")
                    ).compile("numpy")
    out = nm.step(nm.init(m=m, S=S), data={"X": X, "y": y})
    np.testing.assert_allclose(out["S"], S_new, rtol=1e-13)
    np.testing.assert_allclose(out["m"], m_new, rtol=1e-12)
    # the same without the linear term, and by Gauss-Hermite: both derive, and the latter is close to the delta
    # method's step when X S⁻¹ Xᵀ is small
    for rule in ("delta", "gauss_hermite: {nodes: 20}"):
        mod = api.derive(LOGISTIC.format(name="logreg2", loss="sum(softplus(X*theta))", rule=rule)).compile("numpy")
        out = mod.step(mod.init(m=m, S=np.eye(3) * 1e6), data={"X": X, "y": y})
        assert np.all(np.isfinite(out["m"]))
        np.testing.assert_allclose(out["S"] - 0.5e6 * np.eye(3), 0.5 * H, atol=1e-4)


@pytest.mark.parametrize("family, loss", [("gamma", "theta**2"), ("bernoulli", "softplus(theta)"),
                                          ("inverse_gamma", "theta"), ("beta", "theta")])
@pytest.mark.slow
def test_check_of_exact_expectations_over_non_gaussian_families(family, loss):
    """``blr-derive check`` on correct derivations: the finite-difference check moved μ while E_q[ℓ] was written
    in the ordinary parameters (error 1: a false FAIL); softplus had no numeric value (internal error); E[θ] under
    an inverse gamma is finite only for α > 1, and random points beyond it were an internal error.  Now μ moves
    the ordinary parameters through the numeric inverse, and points where the update is not finite are drawn
    again."""
    from blr_derive.verify.recipe import check_recipe_updates
    rec = api.recipe(f"name: c\nfamily: {family}\nloss: {loss}\nhyperparameters: {{rho: 0.5}}\n"
                     "approximations: [exact]\n")
    checks = {c.name: c for c in check_recipe_updates(rec)}
    assert checks["natural gradient vs finite differences"].value < 1e-6
    assert checks["generated update vs symbolic update"].value < 1e-10
    assert "3 random inputs" in checks["generated update vs symbolic update"].note


ORDERS = """name: order
family: gaussian_diag
loss: abstract
hyperparameters: {{rho: 0.1, wd: 0.01, gam: 0.5}}
state_init: {{s: 1.0}}
approximations:
  - delta
{rules}
"""


def test_a_damping_after_the_squared_gradient_damps_it_and_before_it_is_refused(tmp_path, capsys):
    """[delta, hessian_damping, squared_gradient_hessian] derived s ← ρg² + (1 − ρ)s: γ silently dropped (and
    with it the constructor argument).  The reverse order was refused ("no Hessian to damp").  Now the estimate
    is a Hessian a later rule may extend, and an estimate after a damping is refused with what to write."""
    nm = api.derive(ORDERS.format(rules="  - squared_gradient_hessian\n  - hessian_damping: {value: gam}")).compile(
        "numpy")
    g = np.array([0.5, -2.0])
    out = nm.step(nm.init(m=np.zeros(2), s=np.ones(2)), oracles={"grad": lambda m: g})
    np.testing.assert_allclose(out["s"], 0.1 * (g ** 2 + 0.5) + 0.9, rtol=1e-15)
    np.testing.assert_allclose(out["m"], -0.1 * g / out["s"], rtol=1e-15)
    for rule in ("squared_gradient_hessian", "gauss_newton_hessian"):
        p = tmp_path / "r.yaml"
        p.write_text(ORDERS.format(rules=f"  - hessian_damping: {{value: gam}}\n  - {rule}"))
        assert main([str(p), "--target", "numpy"]) == 2
        err = capsys.readouterr().err
        assert f"{p}:9: approximation '{rule}': hessian_damping comes before this rule" in err
        assert f"list hessian_damping after {rule}" in err
    # a prior after the estimate adds its precision δ to it, in the order the recipe gives: H ≈ g² + δ with the
    # loss's gradient g, and the mean moves along g + δm
    nm = api.derive(ORDERS.format(rules="  - squared_gradient_hessian\n  - weight_decay: {coefficient: wd}")
                    ).compile("numpy")
    m = np.array([1.0, 2.0])
    out = nm.step(nm.init(m=m, s=np.ones(2)), oracles={"grad": lambda m: g})
    np.testing.assert_allclose(out["s"], 0.1 * (g ** 2 + 0.01) + 0.9, rtol=1e-15)
    np.testing.assert_allclose(out["m"], m - 0.1 * (g + 0.01 * m) / out["s"], rtol=1e-15)


WALD = """name: wald_fixed_shape
variable: theta
support: positive
parameters:
  nu: {domain: positive}
  lam0: {domain: positive, fixed: true}
sufficient_statistics: [theta]
base_measure: sqrt(lam0/(2*pi*theta**3))*exp(-lam0/(2*theta))
natural_parameters: [-lam0/(2*nu**2)]
"""

TWO_RAYLEIGHS = """name: two_rayleighs
variable: {components: [x, y]}
support: positive
parameters:
  s1: {domain: positive}
  s2: {domain: positive}
sufficient_statistics: [x**2, y**2]
base_measure: x*y
natural_parameters: [-1/(2*s1**2), -1/(2*s2**2)]
log_partition: -log(-2*lambda1) - log(-2*lambda2)
"""


@pytest.mark.slow
def test_check_derives_and_checks_the_entropy_of_an_inverse_gaussian_with_known_shape():
    """An inverse Gaussian with known shape (log θ and 1/θ in log h): ``check`` said 'n/a' for its entropy, then
    'inf FAIL'.  E_q[log h] now comes from the tilted log-partition (a Bessel K whose derivative in the order at ½
    is e^{x}E₁(2x)), the entropy is checked against quadrature and equals scipy's."""
    from scipy import stats

    from blr_derive.verify.family import check_family, describe
    fam = api.family(WALD)
    checks = {c.name: c for c in check_family(fam)}
    ent = checks["entropy_vs_quadrature"]
    assert ent.kind == "max" and ent.passed and ent.value < 1e-9
    assert all(c.passed for c in checks.values()) and len(checks) >= 9
    assert "E_q[log h] (entropy): closed form (tilted log-partition)" in describe(fam)
    H = fam.entropy()
    for nu, lam0 in ((1.0, 1.0), (0.3, 7.0), (5.0, 0.2)):
        got = fam.evaluate(H, {fam.params["nu"].symbol: nu, fam.params["lam0"].symbol: lam0})
        assert got == pytest.approx(stats.invgauss(nu / lam0, scale=lam0).entropy(), rel=1e-12)


def test_check_says_not_applicable_where_the_entropy_is_not_derived():
    """Two scalar components with log h = log x + log y (not linear in T = (x², y²)): the engine integrates
    E_q[log h] over one continuous variable only, so the entropy is 'n/a' with the reason; every other check still
    runs and passes."""
    from blr_derive.verify.family import check_family
    from blr_derive.verify.results import Report, format_report
    checks = {c.name: c for c in check_family(api.family(TWO_RAYLEIGHS))}
    ent = checks.pop("entropy_vs_quadrature")
    assert ent.kind == "na" and ent.passed and "declare expected_log_base_measure" in ent.note
    assert "one continuous variable" in ent.note
    assert checks["mu_vs_quadrature"].value < 1e-7 and checks["normalization"].value < 1e-7
    assert all(c.passed for c in checks.values()) and len(checks) >= 7
    text = format_report(Report("two", None, [ent, *checks.values()]))
    assert "n/a" in text and f"all {len(checks)} checks passed (1 not applicable)" in text


def test_a_hyperparameter_named_like_a_derived_quantity_gets_its_own_name():
    """A hyperparameter 'g_wd' (the weight decay's gradient) merged with the derived quantity of that name: an
    unlocated 'dependency cycle'.  Derived quantities now avoid the recipe's names (g_wd2).  With the squared
    gradient before a minibatch scale N and a prior δ, in that order: H ≈ N g² + δ, ∇ = N g + δ m."""
    text = ("name: clash\nfamily: gaussian_diag\nloss: abstract\nhyperparameters: {g_wd: 4.0, rho: 0.1}\n"
            "state_init: {s: 1.0}\napproximations: [delta, squared_gradient_hessian, {minibatch: {size: g_wd}}, "
            "{weight_decay: {coefficient: 0.5}}]\n")
    nm = api.derive(text).compile("numpy")
    g, m = np.array([0.5, -2.0]), np.array([1.0, 3.0])
    out = nm.step(nm.init(m=m, s=np.ones(2)), oracles={"grad": lambda x: g})
    s_new = 0.1 * (4.0 * g ** 2 + 0.5) + 0.9
    np.testing.assert_allclose(out["s"], s_new, rtol=1e-15)
    np.testing.assert_allclose(out["m"], m - 0.1 * (4.0 * g + 0.5 * m) / s_new, rtol=1e-15)


def test_a_learning_rate_named_like_the_categorical_updates_quantities():
    """A sized categorical recipe whose learning rate is called lambda1_next2 (a name the update gives its
    quantities): an unlocated 'dependency cycle'.  It now derives the same step as with the name 'lr'."""
    text = """name: cat_{n}
sizes:
  K: {{default: 3, min: 2, max: 6}}
family: {{name: categorical, K: "{{K}}"}}
loss:
  expression: "{{+ k in 1..K: w{{k}}*theta{{k}}}}"
  data:
    "w{{k}} for k in 1..K": {{}}
learning_rate: {lr}
hyperparameters:
  {lr}: {{default: 0.3}}
approximations: [exact]
"""
    mods = [api.derive(text.format(n=i, lr=lr)).compile("numpy") for i, lr in enumerate(("lr", "lambda1_next2"))]
    data = {"w1": 1.0, "w2": -0.5, "w3": 2.0}
    outs = [m.step(m.init(p1=np.array(0.2), p2=np.array(0.5)), data=data) for m in mods]
    for k in ("p1", "p2"):
        np.testing.assert_allclose(outs[1][k], outs[0][k], rtol=1e-15)
    assert not np.isclose(outs[0]["p1"], 0.2)


def test_markdown_syntax_in_a_description_is_shown_not_interpreted(tmp_path):
    """A description line of ``` opened a code block that swallowed the rest of the report (no '## Step'
    heading survived); '# ...' became a heading, '$$...$$' math and '- ...' a list."""
    p = tmp_path / "r.yaml"
    p.write_text(CONJUGATE.format(name="md", loss="(theta - 2)**2/2").replace(
        "family:", 'description: "```\\n# not a heading\\n$$x$$ and a*b_c\\n- not an item\\n    not code\\n```"\nfamily:'))
    out = tmp_path / "r.md"
    assert main(["explain", str(p), "-o", str(out)]) == 0
    text = out.read_text()
    lines = text.splitlines()
    assert not any(line.startswith("```") for line in lines)
    headings = [line for line in lines if line.startswith("#")]
    assert headings[0].startswith("# Derivation of `md`") and all(h.startswith(("# ", "## ")) for h in headings)
    assert "not a heading" not in "".join(headings) and sum(h.startswith("## Step") for h in headings) >= 2
    assert "\\`\\`\\`  \n\\# not a heading  \n\\$\\$x\\$\\$ and a\\*b\\_c  \n\\- not an item  \nnot code" in text


@pytest.mark.slow
@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_an_expectation_finite_on_part_of_the_parameter_space_is_nan_outside_it(target):
    """E[θ] under an inverse gamma is β/(α − 1) for α > 1 and infinite otherwise; the generated step returned
    α = −29.9, β = −85.9 at α = 0.8 (exp(loggamma(α − 1) − loggamma(α)) is 1/|α − 1|).  Now NaN there, and the
    same value as before where the expectation is finite; and the step's domain check (blr_derive/ir/validity.py:
    the exact rule's natural gradient over a non-Gaussian family) raises naming α instead of returning the NaN."""
    text = "name: ig_{t}\nfamily: inverse_gamma\nloss: theta\nhyperparameters: {{rho: 0.5}}\napproximations: [exact]\n"
    d = api.derive(text.format(t=target))
    mod = d.compile(target)
    start = mod.init(alpha=np.array([0.8, 1.0, 3.0]), beta=np.array([2.0, 1.0, 2.0]))
    with np.errstate(invalid="ignore"), pytest.raises(FloatingPointError, match=r"the new alpha is not a number "
                                                                                r"\(value nan at index \(0,\)\)"):
        mod.step(start, rho=0.5)
    mod.CHECK_DOMAINS = False
    with np.errstate(invalid="ignore"):
        out = mod.step(start, rho=0.5)
    a, b = np.asarray(out["alpha"], dtype=float), np.asarray(out["beta"], dtype=float)
    assert np.isnan(a[:2]).all() and np.isnan(b[:2]).all() and np.isfinite([a[2], b[2]]).all()
    # where it is finite: the natural-gradient step of E[θ] = β/(α − 1) (Eq. 5), by central differences in μ
    from blr_derive.verify.recipe import check_recipe_updates
    if target == "numpy":
        checks = {c.name: c for c in check_recipe_updates(d.record.recipe)}
        assert checks["natural gradient vs finite differences"].value < 1e-6
        assert checks["generated update vs symbolic update"].value < 1e-10
        np.testing.assert_allclose([a[2], b[2]], [2.3527977440915695, 1.568531829394379], rtol=1e-12)


def test_a_negative_base_measure_and_dependent_statistics_are_named_as_such(tmp_path, capsys):
    """h = θ − 2 on 0..6 was reported as 'not minimal: the Fisher information is singular'; statistics
    (log θ, log θ², θ) with two parameters as 'cannot invert the natural parameters: no solution found'."""
    p = tmp_path / "f.yaml"
    p.write_text("name: neg_h\nvariable: theta\nsupport: integers 0..6\nparameters:\n  a: {domain: real}\n"
                 "sufficient_statistics: [theta]\nbase_measure: theta - 2\nnatural_parameters: [a]\n")
    assert main(["check", str(p)]) == 2
    assert (f"{p}:7: the base measure is negative at theta = 0 (h = -2.00000); h(θ) must be ≥ 0 on the support"
            in capsys.readouterr().err)
    p.write_text("name: dep\nvariable: theta\nsupport: positive\nparameters:\n  a: {domain: positive}\n"
                 "  b: {domain: positive}\nsufficient_statistics: [log(theta), log(theta**2), theta]\n"
                 "natural_parameters: [a - 1, a, -b]\n")
    assert main(["check", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"{p}:8: cannot invert the natural parameters: 3 natural parameters from 2 free parameters (a, b)" in err
    # h ≥ 0 with zeros is fine: a binomial-like h = θ(6 − θ) on 0..6 vanishes at both ends
    p.write_text("name: ok\nvariable: theta\nsupport: integers 0..6\nparameters:\n  a: {domain: real}\n"
                 "sufficient_statistics: [theta]\nbase_measure: theta*(6 - theta)\nnatural_parameters: [a]\n")
    fam = api.family(str(p))
    assert float(fam.evaluate(fam.mu_ord[0], {fam.params["a"].symbol: 0.0})) == pytest.approx(3.0, rel=1e-12)


ZIPF = """name: zipf5
variable: theta
support: integers 1..5
parameters:
  s: {domain: real}
sufficient_statistics: [log(theta)]
natural_parameters: [-s]
"""


@pytest.mark.slow
def test_exact_on_a_finite_support_without_a_closed_form_inverse_derives_quickly(tmp_path):
    """A truncated Zipf on 1..5 (T = log θ, no closed-form μ → s) with exact expectations ran into the time limit
    (minutes of simplify on the differentiated closed form).  Now the sums over the support are named quantities:
    ∇_μ E_q[ℓ] = Cov_q(T, ℓ)/Var_q(T) (Eq. 4), λ = −s ← (1 − ρ)λ − ρ ∇_μ E_q[ℓ]."""
    import time
    fam = tmp_path / "zipf.yaml"
    fam.write_text(ZIPF)
    rec = tmp_path / "r.yaml"
    rec.write_text(f"name: rz\nfamily: {fam}\nloss: (theta - 3)**2\nhyperparameters: {{rho: 0.1}}\n"
                   "approximations: [exact]\n")
    t0 = time.perf_counter()
    d = api.derive(str(rec), time_limit=60)
    assert time.perf_counter() - t0 < 30
    nm = d.compile("numpy")
    s = np.array([0.5, 1.5, -1.0])
    out = nm.step(nm.init(s=s), rho=0.1)
    k = np.arange(1, 6)[:, None]
    q = k ** -s / (k ** -s).sum(axis=0)
    T, ell = np.log(k), (k - 3.0) ** 2
    mu = (q * T).sum(axis=0)
    grad = (q * (T - mu) * ell).sum(axis=0) / (q * (T - mu) ** 2).sum(axis=0)
    np.testing.assert_allclose(-out["s"], 0.9 * -s - 0.1 * grad, rtol=1e-13)
    # far from 0 the log-partition is a logsumexp: finite, the mass on θ = 1 (s = 40) or θ = 5 (s = −40)
    s = np.array([40.0, -40.0])
    logq = -s * np.log(k)
    q = np.exp(logq - np.logaddexp.reduce(logq, axis=0))
    mu = (q * T).sum(axis=0)
    grad = (q * (T - mu) * ell).sum(axis=0) / (q * (T - mu) ** 2).sum(axis=0)
    out = nm.step(nm.init(s=s), rho=0.1)
    np.testing.assert_allclose(-out["s"], 0.9 * -s - 0.1 * grad, rtol=1e-9)
    from blr_derive.verify.recipe import check_recipe_updates
    checks = {c.name: c.value for c in check_recipe_updates(d.record.recipe)}
    assert checks["natural gradient vs finite differences"] < 1e-6


def test_refusals_that_say_what_to_write(tmp_path, capsys):
    """Three refusals whose message named the problem but not the way out."""
    p = tmp_path / "r.yaml"
    # a function of an elementwise product of two vectors
    p.write_text("name: lr2\nfamily: gaussian_full\nloss:\n  expression: sum(softplus(-y*(X*theta))) + theta.T*theta/2\n"
                 "  data:\n    X: {shape: [N, P]}\n    y: {shape: [N]}\napproximations: [delta]\n")
    assert main([str(p), "--target", "numpy"]) == 2
    assert "give the rows pre-multiplied as data (Z = diag(y)*X)" in capsys.readouterr().err
    # the jax target's running sum of the sampled gradient (acc_g) and a recipe state of that name (the precision
    # kept positive by riemannian_correction: without it the update is checked at run time, by the plain-function
    # module, which has no such sum)
    p.write_text("name: hx\nfamily: gaussian_diag\nloss: abstract\nlearning_rate: lr\n"
                 "hyperparameters: {lr: 0.1, ess: 50.0, beta: 0.9}\nstate_init: {s: ess}\napproximations:\n"
                 "  - monte_carlo: {samples: 2}\n  - price_estimator\n  - minibatch: {size: ess}\n"
                 "  - ema_momentum: {rate: beta, state: acc_g}\n  - riemannian_correction: {param: s}\n")
    assert main([str(p), "--target", "jax"]) == 2
    err = capsys.readouterr().err
    assert f"{p}:7: " in err and "two states named acc_g" in err and "give the recipe's state another name" in err


def test_a_state_copied_from_another_says_how_to_start_it_on_torch(tmp_path, capsys):
    p = tmp_path / "r.yaml"
    p.write_text("name: nm\nfamily: gaussian_diag\nloss: abstract\nlearning_rate: lr\n"
                 "hyperparameters: {lr: 0.01, beta2: 0.999, gamma: 0.5}\nstate_init: {s: 1.0}\napproximations:\n"
                 "  - delta\n  - natural_momentum: {momentum: gamma}\n  - squared_gradient_hessian\n"
                 "  - separate_learning_rates: {s: 1 - beta2}\n")
    assert main([str(p), "--target", "torch"]) == 2
    assert "give it a value of its own in state_init (e.g. state_init: {s_prev: 1.0})" in capsys.readouterr().err
    p.write_text(p.read_text().replace("state_init: {s: 1.0}", "state_init: {s: 1.0, s_prev: 1.0}"))
    assert main([str(p), "--target", "torch", "-o", str(tmp_path / "ok.py")]) == 0


def test_command_line_outputs_respect_the_users_files(tmp_path, capsys):
    """1e-8 was text to YAML 1.1 ('a string default needs choices'); explain -o INPUT replaced the recipe; -o onto
    a private 0600 file made it 0644 and a read-only file was replaced; a no-break space in a title was written to
    a report file as the text '\\xa0'."""
    import os
    import stat
    p = tmp_path / "e.yaml"
    p.write_text("name: e\ntitle: \"a\u00a0b\"\nfamily: gaussian_diag\nloss: abstract\nlearning_rate: lr\n"
                 "hyperparameters:\n  lr: 0.1\n  eps: {default: 1e-8}\nstate_init: {s: 1.0}\n"
                 "approximations: [delta, squared_gradient_hessian, {square_root_scaling: {param: s, eps: eps}}]\n")
    out = tmp_path / "e.py"
    out.write_text("private\n")
    os.chmod(out, 0o600)
    assert main([str(p), "-o", str(out)]) == 0
    assert '"eps": 1e-08,' in out.read_text() and stat.S_IMODE(os.stat(out).st_mode) == 0o600
    os.chmod(out, 0o444)
    before = out.read_text()
    assert main([str(p), "-o", str(out)]) == 2
    assert f"{out}: is read-only; make it writable or write to another file" in capsys.readouterr().err
    assert out.read_text() == before
    recipe = p.read_text()
    assert main(["explain", str(p), "-o", str(p)]) == 2
    assert "-o names the input file itself" in capsys.readouterr().err and p.read_text() == recipe
    report = tmp_path / "e.md"
    assert main(["explain", str(p), "-o", str(report)]) == 0
    assert "a\u00a0b" in report.read_text()


@pytest.mark.slow
def test_check_refuses_what_its_quadrature_cannot_integrate_accurately(capsys):
    """A correct 4-D family failed normalization (6e-7) and fisher_vs_covariance (3e-5) on the 4-D grid, with the
    hint 'check log_partition and base_measure'; a Dirichlet at K = 6 got an unlocated message that named --dim."""
    assert main(["check", "gaussian_fixed_cov", "--dim", "4", "--points", "1"]) == 2
    err = capsys.readouterr().err
    assert "gaussian_fixed_cov.yaml: the numeric checks integrate over at most 3 coordinates accurately" in err
    assert "use a smaller --dim" in err
    assert main(["check", "dirichlet", "--size", "K=6", "--points", "1"]) == 2
    err = capsys.readouterr().err
    assert "dirichlet.yaml: " in err and "at size K = 6 has 5 (use a smaller --size)" in err
    assert main(["check", "gaussian_fixed_cov", "--dim", "3", "--points", "1"]) == 0


COV2 = """name: gaussian_fixed_cov
variable: {name: theta, shape: vector}
dimension: P
support: real
parameters:
  m: {shape: vector, domain: real}
sufficient_statistics: [theta]
base_measure: (4*pi)**(-P/2)*exp(-theta.T*theta/4)
natural_parameters: [m/2]
log_partition: lambda1.T*lambda1
gaussian: {mean: m, covariance: 2*eye(P)}
"""


def test_compare_names_what_separates_recipes_with_the_same_rules(tmp_path, capsys):
    """Two recipes with the same rules in another order, or over two families of one name, were reported as
    'nothing: the recipes derive the same update' above two different updates."""
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    body = ("family: {fam}\nloss: abstract\nhyperparameters: {{rho: 0.1, wd: 0.01}}\nstate_init: {{s: 1.0}}\n"
            "approximations: [delta, {rules}]\n")
    a.write_text("name: a\n" + body.format(fam="gaussian_diag", rules="{weight_decay: {coefficient: wd}}, squared_gradient_hessian"))
    b.write_text("name: b\n" + body.format(fam="gaussian_diag", rules="squared_gradient_hessian, {weight_decay: {coefficient: wd}}"))
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "reorder the approximations (delta, weight_decay, squared_gradient_hessian -> delta, " in out
    assert "nothing" not in out
    a.write_text("name: a\nfamily: gaussian_fixed_cov\nloss: abstract\napproximations: [delta]\n")
    b.write_text(f"name: b\nfamily: {tmp_path / 'cov2.yaml'}\nloss: abstract\napproximations: [delta]\n")
    (tmp_path / "cov2.yaml").write_text(COV2)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "change the declaration of family gaussian_fixed_cov (built-in -> cov2.yaml" in out or \
        "change the declaration of family gaussian_fixed_cov (gaussian_fixed_cov.yaml -> cov2.yaml" in out
    assert "nothing" not in out


def test_mixture_weights_given_as_hyperparameters_are_checked_at_their_defaults(tmp_path, capsys):
    """Weights w1 = 0.7, w2 = 0.6 (the third, 1 − w1 − w2, negative) generated a step that was NaN for every input;
    literal weights were already checked."""
    p = tmp_path / "m.yaml"
    text = ("name: m\nfamily: {mixture: gaussian_diag, components: 3, weights: [w1, w2]}\nloss: abstract\n"
            "approximations: [delta]\nhyperparameters:\n  w1: {default: 0.7}\n  w2: {default: W2}\n")
    p.write_text(text.replace("W2", "0.6"))
    assert main([str(p), "--target", "numpy"]) == 2
    assert (f"{p}:2: mixture weights must lie in (0, 1) and sum to 1 (at the hyperparameters' defaults weight 3 is "
            "-0.3)") in capsys.readouterr().err
    p.write_text(text.replace("W2", "0.2"))
    assert main([str(p), "--target", "numpy", "-o", str(tmp_path / "ok.py")]) == 0


FED_LINREG = """name: fed_linreg
family: gaussian_full
loss:
  expression: 0.5*tau*(y - X*theta).T*(y - X*theta)
  data:
    X: {shape: [N, P]}
    y: {shape: [N]}
learning_rate: lr
approximations: [exact]
federated:
  penalty: rho
  server_penalty: 0
  prior: 0.5*delta*theta.T*theta
hyperparameters: {lr: 1.0, rho: 1.0, delta: 1.0, tau: 2.0}
"""


def test_the_federated_runner_passes_each_clients_data():
    """fedrun.simulate could not run a federated recipe with an explicit loss ('step() needs the data X, y').
    With each client's rows, one round of conjugate linear regression is the centralized posterior:
    S = δI + τ Σ XₖᵀXₖ, m = S⁻¹ τ Σ Xₖᵀyₖ."""
    from blr_derive.runtime.fedrun import simulate
    mod = api.derive(FED_LINREG).compile("numpy")
    rng = np.random.default_rng(0)
    Xs = [rng.normal(size=(n, 3)) for n in (5, 8, 4)]
    ys = [rng.normal(size=X.shape[0]) for X in Xs]
    g, _, _ = simulate(mod, [{}] * 3, {"m": np.zeros(3), "S": np.eye(3)}, rounds=1,
                       client_data=[{"X": X, "y": y} for X, y in zip(Xs, ys)])
    S = np.eye(3) + 2.0 * sum(X.T @ X for X in Xs)
    np.testing.assert_allclose(g["S"], S, rtol=1e-12)
    np.testing.assert_allclose(g["m"], np.linalg.solve(S, 2.0 * sum(X.T @ y for X, y in zip(Xs, ys))), rtol=1e-10)


@pytest.mark.parametrize("text, value", [("1.5e3", 1500.0), ("1.0e308", 1.0e308), (".5e3", 500.0), ("1.e3", 1000.0),
                                         ("-2.5E2", -250.0), ("1e3", 1000.0), ("1.5e+3", 1500.0)])
def test_a_number_with_a_dot_and_an_unsigned_exponent_is_a_number(text, value):
    """YAML 1.1 (PyYAML) reads 1.5e3 as text (its float needs the exponent's sign): ``lr: {default: 1.5e3}`` was
    refused as 'a string default needs choices'; it is the number every reader sees, as 1e3 already was."""
    from blr_derive.core.yamlio import load_yaml_text
    doc = load_yaml_text(f"a: {text}\nb: '{text}'\n", "x.yaml")
    assert doc["a"] == value and isinstance(doc["a"], float) and doc["b"] == text


@pytest.mark.parametrize("decl, line, problem", [
    ("{default: a, choices: [a, 'b c']}", 6, "hyperparameter 'mode': choice: 'b c' is not a name: ASCII letters, "
     "digits and underscores, starting with a letter (e.g. weight_decay); choose another name"),
    ("{default: a, choices: [a, 1]}", 6, "hyperparameter 'mode': choice: a name must be a string, got a number; "
     "choose another name"),
    ("{default: a, choices: [a, a]}", 6, "hyperparameter 'mode': choice 'a' is listed twice"),
    ("{default: c, choices: [a, b]}", 6, "hyperparameter 'mode': the default 'c' is not one of its choices (a, b)"),
    ("{default: a, choices: a}", 6, "hyperparameter 'mode': a string default needs 'choices', a list of names "
     "containing it (e.g. choices: [a, b])"),
    ("{default: '0.5'}", 6, "hyperparameter 'mode': the default '0.5' is a string; write a number without quotes "
     "(default: 0.5)"),
])
def test_a_bad_choice_declaration_names_what_is_wrong(tmp_path, capsys, decl, line, problem):
    """Every one of these was 'a string default needs 'choices' (identifiers) containing it', whatever was wrong
    (a choice that is no name, a choice listed twice, a default outside the choices, a quoted number)."""
    p = tmp_path / "r.yaml"
    p.write_text("name: r\nfamily: gaussian_diag\nloss: abstract\nhyperparameters:\n  lr: 0.1\n"
                 f"  mode: {decl}\napproximations: [delta]\n", encoding="utf-8")
    assert main([str(p)]) == 2
    assert capsys.readouterr().err == f"blr-derive: error: {p}:{line}: {problem}\n"
