"""``blr-derive suggest`` and ``blr_derive.api.suggest`` (issue 42, item 3): every suggested command derives, and
the module it generates takes one step with ρ = 1 to the posterior exp(−ℓ) normalized (closed forms written here:
Beta, Gamma, Gaussian); a loss whose statistics are not in the library gets a family built from its terms, written
to the file named and passing ``blr-derive check``; a loss nothing fits and bad input are one located line."""
from __future__ import annotations

import shlex

import numpy as np
import pytest

import blr_derive.api as api
from blr_derive.cli import main
from blr_derive.core.errors import SpecError
from test_cli import load_module, run_cli


def _v(x):
    return float(np.ravel(x)[0])


def _generate(words, tmp_path, name):
    """Run a suggested command (in this process) to a file and load the module."""
    assert words[0] == "blr-derive"
    out = tmp_path / f"{name}.py"
    assert main([*shlex.split(" ".join(words[1:])), "-o", str(out)]) == 0
    return load_module(out)


def test_every_suggested_command_derives_the_posterior_in_one_step(tmp_path):
    """Binomial likelihood in p: beta first; its module's one step with ρ = 1 is Beta(k + 1, n − k + 1) (the flat
    base measure: λ = (a − 1, b − 1) = −c)."""
    res = api.suggest("-k*log(p) - (n - k)*log(1 - p)", variable="p")
    assert [s.family for s in res.suggestions][:1] == ["beta"]
    mod = _generate(res.suggestions[0].command, tmp_path, "beta")
    state = mod.step({"a": np.array([2.0]), "b": np.array([5.0])}, data={"k": 7.0, "n": 10.0})
    np.testing.assert_allclose([_v(state["a"]), _v(state["b"])], [8.0, 4.0], rtol=1e-12)


def test_poisson_loss_gamma_posterior_and_the_ranked_alternatives(tmp_path):
    """ℓ = nλ − s log λ: gamma (Gamma(s + 1, n)) before the generalized inverse Gaussian (one statistic unused);
    both commands derive (suggest derives each before it lists it)."""
    res = api.suggest("n*lam - s*log(lam)", variable="lam")
    names = [s.family for s in res.suggestions]
    assert names[:2] == ["gamma", "generalized_inverse_gaussian"]
    assert "--loss=n*theta - s*log(theta)" in " ".join(res.suggestions[0].command)   # renamed to the family's
    text = res.to_text()
    assert "1. gamma: T = (log(lam), lam)" in text and "1 statistic unused" in text
    gamma = _generate(res.suggestions[0].command, tmp_path, "gamma")
    st = gamma.step({"alpha": np.array([3.0]), "beta": np.array([1.0])}, data={"n": 4.0, "s": 9.0})
    np.testing.assert_allclose([_v(st["alpha"]), _v(st["beta"])], [10.0, 4.0], rtol=1e-12)
    # the GIG's posterior (1/λ coefficient 0) is on its domain's boundary (a gamma): derived, not stepped here


def test_gaussian_mean_and_dirichlet_commands_derive(tmp_path):
    """Known-variance Gaussian likelihood of the mean: gaussian_diag, posterior precision n/σ² and mean S1/n;
    categorical counts over the simplex: dirichlet over a run-time axis, a = c + 1."""
    res = api.suggest("(S2 - 2*theta*S1 + n*theta**2)/(2*sigma2)")
    assert res.suggestions[0].family == "gaussian_diag"
    mod = _generate(res.suggestions[0].command, tmp_path, "gauss")
    state0 = {k: np.array([1.0]) for k in mod.STATE}
    st = mod.step(state0, data={"S2": 30.0, "S1": 12.0, "n": 6.0, "sigma2": 2.0})
    keys = sorted(st)
    assert keys == sorted(state0)
    precision = [v for k, v in st.items() if k != "m"][0]
    np.testing.assert_allclose([_v(st["m"]), _v(precision)], [2.0, 3.0], rtol=1e-12)
    res = api.suggest("-c*log(theta)", support="simplex")
    assert [s.family for s in res.suggestions] == ["dirichlet"]
    mod = _generate(res.suggestions[0].command, tmp_path, "dir")
    st = mod.step({"a": np.ones(4)}, data={"c": np.array([3.0, 0.0, 1.0, 5.0])})
    np.testing.assert_allclose(st["a"], [4.0, 1.0, 2.0, 6.0], rtol=1e-12)


@pytest.mark.slow
def test_a_loss_outside_the_library_builds_a_family_that_passes_check(tmp_path, capsys):
    fam = tmp_path / "cubic.yaml"
    assert main(["suggest", "--loss", "a*theta**3 - c*log(theta)", "--write-family", str(fam)]) == 0
    out = capsys.readouterr().out
    assert "no built-in family makes the loss linear in its statistics" in out and str(fam) in out
    assert "support: positive" in fam.read_text()
    assert main(["check", str(fam)]) == 0
    assert "checks passed" in capsys.readouterr().out
    words = [l for l in out.splitlines() if l.strip().startswith("blr-derive")][0].split()
    mod = _generate(words, tmp_path, "cubic_rule")
    # posterior ∝ exp(−aθ³ + c log θ): λ = (−a, c), i.e. lam1 = a and lam2 − 1 = c
    st = mod.step({k: np.array([1.0]) for k in mod.STATE}, data={"a": 2.0, "c": 1.5})
    np.testing.assert_allclose([_v(st["lam1"]), _v(st["lam2"])], [2.0, 2.5], rtol=1e-12)


@pytest.mark.slow           # 5-11 s: about 24 derivations
def test_without_a_conjugate_family_the_expectation_rules_that_derive(tmp_path, capsys, monkeypatch):
    """θ³ is no statistic of a built-in family of the positive half-line: no family is conjugate (issue 42 item 3:
    "where none is conjugate, the families and expectation rules that apply").  The families of the loss's domain
    that share its statistic log θ come first, with the rules under which their recipe derives; the gamma's command
    derives a module whose exact objective equals quadrature of ∫ q (ℓ + log q) (scipy, the gamma's own density)."""
    import importlib.util
    import shlex
    from scipy import integrate, stats
    assert main(["suggest", "--loss", "a*theta**3 - c*log(theta)"]) == 0
    out = capsys.readouterr().out
    assert "no family makes the loss conjugate" in out and "--write-family" in out
    entries = [line.strip() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert entries and all(": exact" in e for e in entries[:3]), entries          # exact expectations first
    assert any(e.startswith(tuple(f"{i}. gamma: exact" for i in range(1, 4))) for e in entries), entries
    cmd = next(line.split() for line in out.splitlines() if line.strip().startswith("blr-derive gamma "))
    monkeypatch.chdir(tmp_path)
    assert main([shlex.split(" ".join(cmd))[1], *shlex.split(" ".join(cmd))[2:], "-o", "g.py"]) == 0
    spec = importlib.util.spec_from_file_location("_suggested_gamma", tmp_path / "g.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    alpha, beta, a, c = 2.5, 1.5, 0.7, 1.3
    got = float(mod.objective(mod.init(alpha=alpha, beta=beta), data={"a": a, "c": c})["objective"])
    q = stats.gamma(alpha, scale=1 / beta)
    want = integrate.quad(lambda t: q.pdf(t) * (a * t ** 3 - c * np.log(t) + q.logpdf(t)), 0, np.inf,
                          epsabs=1e-13, epsrel=1e-13)[0]
    assert abs(got - want) < 1e-9 * max(1.0, abs(want)), (got, want)


def test_when_nothing_fits_a_located_line(tmp_path, capsys):
    target = tmp_path / "f.yaml"
    assert main(["suggest", "--loss", "exp(theta)*sin(theta)", "--write-family", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no family fits" in err and "not normalizable" in err
    assert not target.exists()                          # nothing written


@pytest.mark.parametrize("argv,needle", [
    (["--loss", "theta**"], "syntax error"),
    (["--loss", "theta", "--support", "moon"], "unknown support"),
    (["--loss", "a*x"], "does not depend on theta"),
    (["--loss", "open('x')"], "--loss"),
    ([], "--loss"),
])
def test_bad_input_is_one_located_line_exit_2(argv, needle, capsys):
    assert main(["suggest", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and needle in captured.err
    assert "<command line>" in captured.err


@pytest.mark.parametrize("name, problem", [
    ("os", "'os' is a module name the generated code may never mention"),
    ("state", "'state' is reserved by the generated code"),
    ("lambda1", "'lambda1' is reserved for the derivation's own symbols"),
    ("print", "'print' is a Python builtin"),
])
def test_a_data_name_no_recipe_may_declare_is_named(name, problem, capsys):
    """``os*theta - s*log(theta)`` tried all 37 families (14 s) and answered that none makes the loss conjugate: each
    command declared the data ``os``, which the name policy refuses; the name is refused first, with the reason."""
    assert main(["suggest", "--loss", f"{name}*theta - s*log(theta)"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"blr-derive: error: <command line>: --loss: data '{name}': {problem}; "
                            "choose another name\n")


@pytest.mark.slow
def test_through_the_real_command_line(tmp_path):
    res = run_cli("suggest", "--loss", "lam*S - n*log(lam)", "--variable", "lam", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "1. gamma" in res.stdout
    res = run_cli("suggest", "--loss=-", cwd=tmp_path)
    assert res.returncode == 2 and len(res.stderr.splitlines()) == 1 and "Traceback" not in res.stderr


def test_api_errors_are_spec_errors():
    with pytest.raises(SpecError):
        api.suggest("theta +")


@pytest.mark.slow
def test_data_named_like_the_family_s_parameters_are_renamed_not_a_reason_to_miss_it(tmp_path, capsys):
    """A beta–Bernoulli loss written with counts named a and b (the beta's own parameters): the recipe refuses
    data that clash with the family's names, and suggest used to answer "no family makes the loss conjugate".
    The beta is found, its command renames the data (a → a_data, b → b_data) and says so, and the command's module
    takes one step with ρ = 1 to Beta(a + 1, b + 1) (the flat base measure)."""
    res = api.suggest("-a*log(theta) - b*log(1 - theta)")
    first = res.suggestions[0]
    assert first.family == "beta" and first.renamed == {"a": "a_data", "b": "b_data"}
    assert "--data a_data --data b_data" in " ".join(first.command)
    assert "[data a, b renamed a_data, b_data: beta uses those names]" in res.to_text()
    mod = _generate(first.command, tmp_path, "beta_renamed")
    state = mod.step({"a": np.array([2.0]), "b": np.array([5.0])}, data={"a_data": 7.0, "b_data": 3.0})
    np.testing.assert_allclose([_v(state["a"]), _v(state["b"])], [8.0, 4.0], rtol=1e-12)
    # not conjugate (a θ term too): the beta is still tried, renamed, and its exact rule derives
    res = api.suggest("a*theta - b*log(theta) + c*log(1 - theta)")
    beta = next(x for x in res.approximate if x.family == "beta")
    assert beta.rules[0] == "exact" and beta.renamed == {"a": "a_data", "b": "b_data"}
    mod = _generate(beta.command, tmp_path, "beta_approx")
    assert "a_data" in mod.DATA and "c" in mod.DATA
    # a name already taken by the loss is not reused
    res = api.suggest("-a*log(theta) - b*log(1 - theta) + 0*a_data")
    assert res.suggestions[0].renamed["a"] not in ("a", "a_data", "b")
