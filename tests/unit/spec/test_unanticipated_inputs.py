"""Families and recipes written independently of the catalog (a fuzzing pass over user-written files) that the
engine once accepted with wrong or broken output, or answered with an internal error.  Each is now either derived
correctly or one located line ``FILE:LINE: problem`` with exit status 2."""
import math

import numpy as np
import pytest

from blr_derive import api
from blr_derive.cli import main
from blr_derive.core.errors import CodegenError, SpecError
from blr_derive.families.partition import _log_integral_at
from conftest import OPTIMIZER_TARGETS

GDIAG = """
name: {name}
family: gaussian_diag
loss: abstract
learning_rate: lr
hyperparameters:
  lr: 0.1
{hyper}
state_init: {{s: {s_init}}}
approximations:
  - delta
  - squared_gradient_hessian
{extra}
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    err = capsys.readouterr().err.strip()
    return code, err


# ------------------------------------------------------------------------------------------------ families

QUARTIC = """name: quartic
variable: theta
support: real
parameters:
  a: {domain: real}
  b: {domain: positive}
sufficient_statistics:
  - theta**2
  - theta**4
natural_parameters:
  - a
  - -b
"""


def test_an_integrated_log_partition_that_holds_on_part_of_the_domain_is_refused(tmp_path, capsys):
    """exp(aθ² − bθ⁴) is normalizable for every real a, but sympy's closed form (Bessel functions of √a) holds for
    a > 0 only: the generated step was NaN for every input.  Refused, located at the sufficient statistics, and not
    as "not normalizable" (it said so): the integral is finite where the closed form is not real, and the message
    gives its value by quadrature."""
    fam = write(tmp_path, "quartic.yaml", QUARTIC)
    out = tmp_path / "out.py"
    code, err = run_cli([fam, "--target", "numpy", "--loss", "theta", "--approx", "exact", "-o", out], capsys)
    assert code == 2 and not out.exists()
    assert err.startswith(f"blr-derive: error: {fam}:7: no closed form of the log-partition:")
    assert "not normalizable" not in err and "is finite at" in err
    assert "not a real number" in err and "declare log_partition" in err and "\n" not in err


def test_a_gamma_kernel_with_a_real_shape_is_refused(tmp_path):
    """θ^(a−1)e^(−bθ) with a declared real (the default domain): the integral diverges for a ≤ 0, where the
    closed form logΓ(a) − a log b is complex; a positive shape derives the gamma family."""
    text = """name: g
variable: theta
support: positive
parameters:
  a: {description: shape}
  b: {domain: positive}
sufficient_statistics: [log(theta), theta]
natural_parameters: [a - 1, -b]
"""
    with pytest.raises(SpecError, match="not normalizable") as e:
        api.family(text)
    assert e.value.line == 7
    fam = api.family(text.replace("{description: shape}", "{domain: positive}"))
    vals = {p.symbol: v for p, v in zip(fam.params.values(), (2.5, 1.5))}
    lam = [fam.evaluate(e_, vals) for e_ in fam.eta]
    A = fam.evaluate(fam.A, dict(zip(fam.lam, lam)))
    assert A == pytest.approx(math.lgamma(2.5) - 2.5 * math.log(1.5), rel=1e-12)


def test_a_complex_family_is_a_located_error_not_an_internal_error(tmp_path, capsys):
    """log θ on the support {−1, 1}: the Fisher information is complex (was exit 3, 'Cannot convert complex')."""
    fam = write(tmp_path, "binlog.yaml", """name: binlog
variable: theta
support: binary_pm1
parameters:
  r: {domain: positive}
sufficient_statistics:
  - log(theta)
natural_parameters:
  - -r
""")
    code, err = run_cli([fam, "--target", "numpy", "--loss", "theta", "--approx", "exact"], capsys)
    assert code == 2
    assert err == (f"blr-derive: error: {fam}:6: not a real family: the log-partition or its derivatives are not "
                   "real numbers at valid parameters (at r = 1 the derived A is complex; check the support against the "
                   "sufficient statistics and the "
                   "base measure)")


def test_a_time_limit_while_a_family_file_derives_names_the_family_file(tmp_path, capsys):
    """The message named the value of --time-limit or the -o path; it names the family file now."""
    fam = write(tmp_path, "slow.yaml", """name: slow
variable: theta
support: positive
parameters:
  a: {domain: positive}
  b: {domain: positive}
sufficient_statistics: [log(theta), theta]
natural_parameters: [a - 1, -b]
base_measure: exp(-theta**3)*(1 + theta**2)**(1/3)
""")
    out = tmp_path / "o.py"
    code, err = run_cli(["check", fam, "--time-limit", "0.2"], capsys)
    assert code == 2 and err.startswith(f"blr-derive: error: {fam}:1: the derivation did not finish")
    code, err = run_cli([fam, "--target", "numpy", "--loss", "theta", "--approx", "exact", "--time-limit", "0.2",
                         "-o", out], capsys)
    assert code == 2 and err.startswith(f"blr-derive: error: {fam}:1: the derivation did not finish")
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ recipes

def test_a_flag_used_as_a_number_is_refused():
    """'wd: {default: yes}' (YAML 1.1 for true) as a weight-decay coefficient: the code read it with bool(...),
    so wd=0.5 became 1."""
    text = GDIAG.format(name="r", hyper="  wd: {default: yes}", s_init="1.0",
                        extra="  - weight_decay: {coefficient: wd}")
    with pytest.raises(SpecError, match="argument 'coefficient': hyperparameter 'wd' is a flag") as e:
        api.derive(text)
    assert e.value.line == text.splitlines().index("  - weight_decay: {coefficient: wd}") + 1


@pytest.mark.parametrize("field, extra", [("state_init.s", ""), ("argument 's'", "  - separate_learning_rates: {s: eye(3)}")])
def test_a_matrix_where_a_number_belongs_is_refused(field, extra):
    """eye(3) as a diagonal state's initial value or learning rate: the torch/jax/Triton code printed 'I'."""
    text = GDIAG.format(name="r", hyper="", s_init="eye(3)" if not extra else "1.0", extra=extra)
    with pytest.raises(SpecError, match=f"{field}: a number or an expression of hyperparameters, not a matrix"):
        api.derive(text).compile("numpy")


@pytest.mark.parametrize("name", ["jax", "jnp", "optax"])
def test_the_jax_modules_names_are_refused_by_the_jax_target(name, tmp_path):
    """A hyperparameter named jnp shadowed the optax transformation's module (AttributeError at run time); the jax
    target refuses it where it is declared, and numpy, which binds no such name, writes it."""
    from blr_derive.core.errors import UnsupportedTarget
    text = GDIAG.format(name="r", hyper=f"  {name}: 0.5", s_init="1.0",
                        extra=f"  - weight_decay: {{coefficient: {name}}}")
    path = write(tmp_path, "r.yaml", text)
    assert f'{name} = hp["{name}"]' in api.generate(path, "numpy")
    line = text.splitlines().index("hyperparameters:") + 1
    with pytest.raises(UnsupportedTarget, match=rf"r\.yaml:{line}: recipe 'r': the jax target needs names other than "
                                                rf"{name}"):
        api.generate(path, "jax")


def test_a_recipe_named_like_a_jax_module_is_refused_by_the_jax_target_only():
    text = GDIAG.format(name="jax", hyper="", s_init="1.0", extra="")
    d = api.derive(text)
    assert d.compile("numpy").RECIPE == "jax"
    with pytest.raises(CodegenError, match="the jax target names its optax factory after the recipe: 'jax' is a "
                                           "module the jax target imports; rename the recipe"):
        d.compile("jax")


@pytest.mark.slow
def test_factorial_of_a_hyperparameter_on_the_torch_host_is_the_gamma_function():
    """torch printed math.factorial(b), which refuses b = 0.9; it is Γ(b + 1), as numpy's scipy factorial."""
    import torch
    text = GDIAG.format(name="r", hyper="  b: 0.9", s_init="1.0",
                        extra="  - separate_learning_rates: {s: factorial(b)/10}")
    d = api.derive(text)
    nm, tm = d.compile("numpy"), d.compile("torch")
    cls = [v for v in vars(tm).values() if isinstance(v, type) and issubclass(v, torch.optim.Optimizer)
           and v is not torch.optim.Optimizer][0]
    x0 = np.array([0.5, -1.5])
    p = torch.nn.Parameter(torch.tensor(x0))
    opt = cls([p])
    for _ in range(3):
        opt.zero_grad()
        (p ** 4).sum().backward()
        opt.step()
    st = nm.init(m=x0, s=np.ones(2))
    for _ in range(3):
        st = nm.step(st, oracles={"grad": lambda v: 4 * v ** 3})
    np.testing.assert_allclose(p.detach().numpy(), st["m"], rtol=1e-13)
    np.testing.assert_allclose(opt.state[p]["s"].numpy(), st["s"], rtol=1e-13)
    assert not np.allclose(st["s"], 1.0)


def test_a_special_function_the_torch_host_lacks_is_a_located_error(tmp_path, capsys):
    rec = write(tmp_path, "r.yaml", GDIAG.format(name="r", hyper="  b: 0.9", s_init="1.0",
                                                 extra="  - separate_learning_rates: {s: digamma(b)**2}"))
    for target in OPTIMIZER_TARGETS:
        code, err = run_cli([rec, "--target", target], capsys)
        assert code == 2 and err.startswith(f"blr-derive: error: {rec}:")
        assert "Python's math module, which has no 'polygamma'; use the numpy or jax target" in err
    code, _ = run_cli([rec, "--target", "numpy", "-o", tmp_path / "ok.py"], capsys)
    assert code == 0


@pytest.mark.parametrize("key, value", [("title", "[a, b]"), ("description", "{x: 1}"), ("paper", "null"),
                                        ("checked_against", "yes"), ("title", "2024-01-01")])
def test_free_text_must_be_text(tmp_path, capsys, key, value):
    """A list, mapping, null, flag or date was rendered with str() into the generated module's comments."""
    rec = write(tmp_path, "r.yaml", f"name: r\n{key}: {value}\nfamily: gaussian_diag\nloss: abstract\n"
                                    "approximations: [delta]\n")
    code, err = run_cli([rec, "-o", tmp_path / "o.py"], capsys)
    assert (code, err) == (2, f"blr-derive: error: {rec}:2: '{key}' must be text")
    assert not (tmp_path / "o.py").exists()
    ok = write(tmp_path, "ok.yaml", f"name: r\n{key}: 2024\nfamily: gaussian_diag\nloss: abstract\n"
                                    "approximations: [delta]\n")
    assert run_cli([ok, "-o", tmp_path / "o.py"], capsys)[0] == 0


def test_output_onto_the_input_file_is_refused(tmp_path, capsys):
    """'-o' naming the recipe itself overwrote the recipe with the generated code."""
    rec = write(tmp_path, "adam.yaml", (api.catalog_dir() / "adam.yaml").read_text())
    before = rec.read_bytes()
    code, err = run_cli([rec, "--target", "numpy", "-o", rec], capsys)
    assert (code, err) == (2, f"blr-derive: error: {rec}: -o names the input file itself; write the generated code "
                              "to another file")
    assert rec.read_bytes() == before


def test_the_header_quotes_a_file_name_as_one_shell_word(tmp_path, capsys):
    """The 'regenerate with' header is a command a user copies: a name with quotes and $(...) is quoted."""
    import shlex
    name = "we\"ird'$(id) x.yaml"
    rec = write(tmp_path, name, (api.catalog_dir() / "adam.yaml").read_text())
    out = tmp_path / "o.py"
    assert run_cli([rec, "-o", out], capsys)[0] == 0
    header = out.read_text().splitlines()[1]
    command = header.split("`")[1]
    assert shlex.split(command) == ["blr-derive", str(rec), "--target", "numpy"]   # as the command named it


@pytest.mark.slow
def test_an_update_that_is_undefined_is_a_located_error(tmp_path, capsys):
    """λ₁ = exp(exp(α)) on a gamma kernel: sympy reduced α's update to ∞/0 and the numpy printer raised KeyError
    (exit 3)."""
    fam = write(tmp_path, "f.yaml", """name: myfam
variable: theta
support: positive
parameters:
  alpha: {domain: positive}
  beta: {domain: positive}
sufficient_statistics: [log(theta), theta]
natural_parameters: [exp(exp(alpha)), -beta]
""")
    code, err = run_cli([fam, "--loss", "n*theta", "--data", "n", "--approx", "exact", "--approx",
                         "unit_learning_rate", "-o", tmp_path / "o.py"], capsys)
    assert code == 2 and "the derived update of 'alpha_new' is undefined (it contains ∞/0 or NaN)" in err
    assert err.startswith("blr-derive: error: <command line>: --approx:")


def test_explain_writes_no_control_bytes_and_no_live_html_in_markdown(tmp_path, capsys):
    """explain -o wrote a title's ESC and BEL bytes into the report file, and Markdown passed '<script>' through."""
    rec = write(tmp_path, "r.yaml", 'name: r\ntitle: "x\\e[31m\\a <script>alert(1)</script> & y"\n'
                                    "family: gaussian_diag\nloss: abstract\napproximations: [delta]\n")
    out = tmp_path / "r.md"
    assert run_cli(["explain", rec, "-o", out], capsys)[0] == 0
    text = out.read_text()
    assert "\x1b" not in text and "\x07" not in text and "\\x1b\\[31m" in text     # Markdown's [ escaped too
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; y" in text


def test_a_family_parameter_named_like_the_default_learning_rate_gets_a_message_that_says_what_to_write(
        tmp_path, capsys):
    """A user's exponential family with its rate named rho: the message said 'learning_rate must be a numeric
    hyperparameter' although the recipe declared none; it says which name to set, and that name derives."""
    fam = write(tmp_path, "fam_rho.yaml", (api.families_dir() / "exponential.yaml").read_text()
                .replace("  r: {", "  rho: {").replace("  - -r", "  - -rho").replace("/r ", "/rho "))
    code, err = run_cli([fam, "--loss", "theta", "--approx", "exact"], capsys)
    assert code == 2 and err == ("blr-derive: error: <command line>: the learning rate's name 'rho' is already a name "
                                 "of the family or the data; set 'learning_rate' to another name (e.g. learning_rate: "
                                 "lr, or --set learning_rate=lr)")
    out = tmp_path / "o.py"
    assert run_cli([fam, "--loss", "theta", "--approx", "exact", "--set", "learning_rate=lr", "-o", out], capsys)[0] == 0
    import importlib.util
    spec = importlib.util.spec_from_file_location("fam_rho_mod", out)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # exact conjugate step with ℓ = θ: λ ← (1−lr)λ − lr·1, λ = −rate, so rate ← (1−lr)·rate + lr
    assert mod.step(mod.init(rho=np.array(2.0)), lr=0.25)["rho"] == pytest.approx(0.75 * 2.0 + 0.25, rel=1e-14)


def test_a_family_without_a_mean_is_told_how_to_name_the_torch_parameter(tmp_path, capsys):
    """A half-normal written from the docs, derived from the command line for torch: the refusal says what to write,
    and what it says works."""
    from blr_derive import cli
    fam = write(tmp_path, "hn.yaml", "name: half_normal\nvariable: theta\nsupport: positive\nparameters:\n"
                "  s: {domain: positive}\nsufficient_statistics: [theta**2]\nnatural_parameters: [-s/2]\n"
                "sampler: ndtri((1 + u)/2)/sqrt(s)\n")
    out = tmp_path / "hn_torch.py"
    args = [str(fam), "--loss", "abstract", "--approx", "score_function", "--target", "torch", "-o", str(out)]
    assert cli.main(args) == 2 and not out.exists()
    assert "in the recipe parameter: s, on the command line --set 'parameter=s'" in capsys.readouterr().err
    assert cli.main(args + ["--set", "parameter=s"]) == 0
    assert "class HalfNormal(torch.optim.Optimizer)" in out.read_text()


KUMMER = """name: beta_exp
variable: theta
support: unit_interval
parameters:
  a: {domain: positive}
  c: {domain: real}
sufficient_statistics: [log(theta), theta]
natural_parameters: [a - 1, c]
"""


def test_a_finite_integral_without_a_real_closed_form_is_not_called_divergent():
    """θ^(a−1)e^(cθ) on (0, 1) is normalizable for every a > 0 and real c (a lower incomplete gamma, which the
    grammar has no function for); sympy's closed form is complex for c < 0.  The refusal said "not normalizable";
    it names the closed form as what is missing, with the integral's value by quadrature."""
    with pytest.raises(SpecError) as e:
        api.family(KUMMER)
    msg = str(e.value)
    assert e.value.line == 7
    assert "no closed form of the log-partition:" in msg and "not normalizable" not in msg
    assert "is finite at" in msg and "by quadrature" in msg


def test_the_quadrature_of_the_message_equals_the_closed_form():
    """_log_integral_at, the value the message above prints, against log Γ(α) − α log β of the gamma family."""
    fam = api.family("gamma")
    vals = dict(zip([p.symbol for p in fam.params.values()], (2.5, 1.5)))
    got = _log_integral_at(fam, vals)
    assert got == pytest.approx(math.lgamma(2.5) - 2.5 * math.log(1.5), rel=1e-9, abs=1e-9)
    fam = api.family("continuous_bernoulli")
    p = next(iter(fam.params.values())).symbol
    lam = math.log(0.9 / 0.1)                   # ∫₀¹ e^{λθ} dθ = (e^λ − 1)/λ
    assert _log_integral_at(fam, {p: 0.9}) == pytest.approx(math.log(math.expm1(lam) / lam), rel=1e-9)
