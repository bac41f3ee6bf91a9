"""A recipe that names an expectation rule for the other kind of loss gets one located line that says which kind
the rule takes and which rules take its loss over its family (read from the rule registry, each rule's own
applicability check): a user with an explicit loss and a family whose sampler is not an inverse CDF went round in
circles ('exact' said "use a sampling rule ('score_function')", 'score_function' said "add 'exact'", then "name one
of: delta, exact, gauss_hermite, quadrature", none of which applies to a non-Gaussian family without an
inverse-CDF sampler).  Every rule a message names is followed here and derives."""
from __future__ import annotations

import contextlib
import io

from blr_derive import cli
from blr_derive.rules import RULES

FAMILY = """\
name: maxwell_scale
description: Maxwell-Boltzmann with scale a (T = theta^2, h = theta^2), not in the library
variable: theta
support: positive
parameters:
  a: {domain: positive, description: scale}
sufficient_statistics:
  - theta**2
base_measure: theta**2
natural_parameters:
  - -1/(2*a**2)
sampler: a*sqrt(z**2 + z2**2 + z3**2)
"""


def _run(tmp_path, loss, approx):
    (tmp_path / "maxwell.yaml").write_text(FAMILY, encoding="utf-8")
    return _run_in(tmp_path, loss, approx)


def _run_in(tmp_path, loss, approx):
    """The command line on rec.yaml with the family file as it is in ``tmp_path``."""
    (tmp_path / "rec.yaml").write_text(f"name: fit\nfamily: maxwell.yaml\nloss: {loss}\nlearning_rate: rho\n"
                                       f"hyperparameters: {{rho: 0.1}}\napproximations: [{approx}]\n",
                                       encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main([str(tmp_path / "rec.yaml"), "--target", "numpy", "-o", str(tmp_path / "out.py")])
    return rc, err.getvalue()


def _takes(kind):
    return sorted(n for n, r in RULES.items() if r.kind == "expectation" and kind in r.losses)


def _named(msg, after):
    return msg.rstrip().split(after, 1)[1].split(", ")


def test_a_sampling_rule_with_an_explicit_loss_no_explicit_rule_fits(tmp_path):
    """Nothing for an explicit loss applies to this family (no Gaussian moments, its sampler is no inverse CDF,
    the loss is not linear in T): the message says so and names the rules that take the abstract loss here."""
    rc, msg = _run(tmp_path, "{expression: theta + theta**2/2 - 2*log(theta)}", "score_function")
    assert rc == 2 and msg.count("\n") == 1 and not (tmp_path / "out.py").exists()
    assert "rec.yaml:6: approximation 'score_function' takes an abstract loss (`loss: abstract`" in msg
    assert ("none of the rules for an explicit loss (" + ", ".join(_takes("explicit"))
            + ") applies to family 'maxwell_scale'") in msg
    named = _named(msg, "with an abstract loss these apply: ")
    assert named == ["reparameterization", "score_function"]
    for rule in named:                  # each one derives with the abstract loss
        out = tmp_path / "out.py"
        rc, err = _run(tmp_path, "abstract", rule)
        assert rc == 0, err
        assert "def step" in out.read_text(encoding="utf-8")
        out.unlink()
    assert {"exact", "quadrature", "delta"} <= set(_takes("explicit")) and "score_function" not in _takes("explicit")


def test_an_explicit_rule_named_for_an_abstract_loss_names_the_abstract_rules_that_fit(tmp_path):
    """'exact' (or 'gauss_hermite') with `loss: abstract` used to say "use 'delta'", which needs a Gaussian."""
    for rule in ("exact", "gauss_hermite"):
        rc, msg = _run(tmp_path, "abstract", rule)
        assert rc == 2 and msg.count("\n") == 1
        assert f"rec.yaml:6: approximation '{rule}' takes an explicit loss, not an abstract loss; for this loss " \
               "over family 'maxwell_scale' name one of: reparameterization, score_function" in msg
        assert "delta" not in msg


def test_with_an_inverse_cdf_sampler_the_explicit_rule_that_fits_is_named(tmp_path):
    """A Rayleigh family written here, with an inverse-CDF sampler: of the explicit-loss rules only 'quadrature'
    applies, and it derives; without the sampler nothing applies either way, and the message says why."""
    fam = FAMILY.replace("maxwell_scale", "rayleigh_scale").replace("base_measure: theta**2", "base_measure: theta")
    (tmp_path / "maxwell.yaml").write_text(fam.replace("a*sqrt(z**2 + z2**2 + z3**2)", "a*sqrt(-2*log(u))"),
                                           encoding="utf-8")
    loss = "{expression: (theta - 2)**4/4 + exp(-theta)}"
    rc, msg = _run_in(tmp_path, loss, "score_function")
    assert rc == 2 and msg.rstrip().endswith("for this loss over family 'rayleigh_scale' name one of: quadrature")
    rc, err = _run_in(tmp_path, loss, "quadrature")
    assert rc == 0, err
    (tmp_path / "maxwell.yaml").write_text(fam.split("sampler:")[0], encoding="utf-8")
    rc, msg = _run_in(tmp_path, loss, "score_function")
    assert rc == 2 and msg.count("\n") == 1
    assert msg.rstrip().endswith("nor does 'score_function' with an abstract loss (approximation 'score_function' "
                                 "needs samples of q: family 'rayleigh_scale' declares no 'sampler')")


def test_the_rule_it_names_derives_with_that_loss(tmp_path):
    """Following the message: the abstract loss with the sampling rule derives (exit 0, a module)."""
    rc, msg = _run(tmp_path, "abstract", "score_function")
    assert rc == 0, msg
    assert "def step" in (tmp_path / "out.py").read_text(encoding="utf-8")


def test_a_loss_beyond_the_rule_is_located_at_the_rule_and_names_what_applies(tmp_path):
    """A loss the named rule cannot integrate (exp(exp(θ)) under a Gaussian, 'exact'): one line at the rule's own
    line (it used to point at the recipe's first line as "derivation failed"), with the rules that apply to the
    family, each of which derives."""
    rec = tmp_path / "rec.yaml"
    rec.write_text("name: fit\nfamily: gaussian_diag\nloss: {expression: exp(exp(theta))}\n"
                   "approximations: [exact]\n", encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main([str(rec), "-o", str(tmp_path / "out.py")])
    msg = err.getvalue()
    assert rc == 2 and msg.count("\n") == 1 and not (tmp_path / "out.py").exists()
    assert "rec.yaml:4: approximation 'exact' cannot derive E_q[loss] over family 'gaussian_diag': exact Gaussian " \
           "expectation needs exp(a*theta + b) with a linear exponent, got exp(exp(theta))" in msg
    # the delta method and Gauss-Hermite quadrature take this loss of one coordinate (rules/delta.py scalar_delta,
    # rules/gauss_hermite.py scalar_gauss_hermite): they are named, and derive
    named = _named(msg, "rules that apply to this loss and family: ")
    assert named == ["delta", "gauss_hermite"]
    for rule in named:
        written = "{gauss_hermite: {nodes: 16}}" if rule == "gauss_hermite" else rule
        rec.write_text(f"name: fit\nfamily: gaussian_diag\nloss: {{expression: exp(exp(theta))}}\n"
                       f"approximations: [{written}]\n", encoding="utf-8")
        with contextlib.redirect_stderr(io.StringIO()) as e2, contextlib.redirect_stdout(io.StringIO()):
            rc = cli.main([str(rec), "-o", str(tmp_path / "out.py")])
        assert rc == 0, e2.getvalue()


def test_exact_is_named_only_for_losses_it_derives(tmp_path):
    """'monte_carlo' with an explicit loss over gaussian_diag used to answer "name one of: exact", and 'exact' then
    failed on the same loss (a log term): 'exact' now tests the loss's form when it is checked, so the refusal names
    only what derives; a polynomial times exp(aθ + b) is still taken by 'exact', and named for it."""
    rec = tmp_path / "rec.yaml"

    def run(loss, rule):
        rec.write_text(f"name: fit\nfamily: gaussian_diag\nloss: {{expression: {loss}}}\n"
                       f"hyperparameters: {{nu: 3.0}}\napproximations: [{rule}]\n", encoding="utf-8")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = cli.main([str(rec), "-o", str(tmp_path / "out.py")])
        return rc, err.getvalue()

    rc, msg = run("log(1 + theta**2/nu) + theta**4/4", "monte_carlo")
    assert rc == 2 and msg.count("\n") == 1 and not (tmp_path / "out.py").exists()
    # of the rules for an explicit loss the delta method and Gauss-Hermite quadrature derive it over gaussian_diag
    # (one coordinate), 'exact' does not
    assert msg.rstrip().endswith("for this loss over family 'gaussian_diag' name one of: delta, gauss_hermite"), msg
    assert run("log(1 + theta**2/nu) + theta**4/4", "delta")[0] == 0
    assert run("log(1 + theta**2/nu) + theta**4/4", "{gauss_hermite: {nodes: 16}}")[0] == 0
    rc, msg = run("log(1 + theta**2/nu) + theta**4/4", "exact")
    assert rc == 2 and msg.count("\n") == 1
    assert "rec.yaml:5: approximation 'exact' cannot derive E_q[loss] over family 'gaussian_diag': exact Gaussian " \
           "expectation needs a polynomial in theta, got log(1 + theta**2/nu)" in msg
    rc, msg = run("theta**4/4 + theta*exp(2*theta - 1)", "monte_carlo")
    assert rc == 2 and msg.rstrip().endswith("for this loss over family 'gaussian_diag' name one of: delta, exact, gauss_hermite")
    rc, msg = run("theta**4/4 + theta*exp(2*theta - 1)", "exact")
    assert rc == 0, msg


def test_scalar_form_error_mirrors_the_scalar_gaussian_expectation():
    """The structural test 'exact' runs at check time refuses exactly what the derivation of E[f(θ)] refuses."""
    import sympy as sp
    from blr_derive.core.errors import DerivationError
    from blr_derive.core.expect import gaussian_expectation, scalar_form_error
    th, y = sp.Symbol("theta", real=True), sp.Symbol("y", real=True)
    m, v = sp.Symbol("m", real=True), sp.Symbol("v", positive=True)
    cases = [th**4 + y * th, (th - y)**2 * sp.exp(3 * th + y), sp.exp(-th) + 7, y,
             sp.log(1 + th**2), sp.exp(th**2), sp.Abs(th), th * sp.sin(th), sp.sqrt(th), th**sp.Rational(1, 2) + th]
    for f in cases:
        why = scalar_form_error(f, th)
        try:
            gaussian_expectation(f, th, m, v + m**2)
            derived = None
        except DerivationError as exc:
            derived = str(exc)
        assert (why is None) == (derived is None), (f, why, derived)
    assert scalar_form_error(th**4 + y * th, th) is None
    assert scalar_form_error(sp.exp(th**2), th).startswith("exact Gaussian expectation needs exp(a*theta + b)")
