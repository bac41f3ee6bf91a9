"""``exact`` with a loss written as the full negative log-joint of a conjugate model: ℓ = −log p₀(θ) − log p(D|θ),
where the prior's −log p₀ = −log h(θ) − <λ₀, T(θ)> + A(λ₀) brings −log h.  ℓ + log h is linear in T, so
∇_μ E_q[ℓ] = c − ∇_μ E_q[log h] and the base-measure term of Eq. 6 cancels (App. B; Sec. 5.1): the update must be
the one of the same model written with the prior as ``family_prior: {λ₀}`` — for families whose E_q[log h] has no
closed form (Poisson: E[log θ!], negative binomial), has one only through the tilted log-partition (Rayleigh, a
user-written inverse Gaussian), and for a base measure already linear in T (a gamma written with h = 1/θ; a beta
with a Bernoulli likelihood, h = 1).

Both recipes go through the command line (``blr-derive R --target numpy -o F``); the two generated steps are
compared at random states, data and hyperparameters to 1e-12, and the ρ = 1 step against the conjugate posterior
written here by hand."""
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from blr_derive.cli import main

CLI = [sys.executable, "-m", "blr_derive"]
USER_IG = Path(__file__).parents[1] / "families" / "entropy_families" / "inverse_gaussian.yaml"


def generate(tmp_path, name, text, subprocess_cli=False):
    """The numpy module of a recipe, written by the command line (``main``, in this process unless
    ``subprocess_cli``: a real ``python -m blr_derive`` costs seconds of start-up per recipe)."""
    src = tmp_path / f"{name}.yaml"
    src.write_text(textwrap.dedent(text), encoding="utf-8")
    out = tmp_path / f"{name}_gen.py"
    argv = [str(src), "--target", "numpy", "-o", str(out)]
    if subprocess_cli:
        r = subprocess.run(CLI + argv, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    else:
        assert main(argv) == 0
    spec = importlib.util.spec_from_file_location(f"gen_{name}", str(out))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# name: (family, loss with −log p₀, loss without, family_prior λ₀, hyperparameters, data {name: sampler},
#        states {name: sampler}, hyperparameter samplers)
MODELS = {
    "poisson": (
        "poisson", "lgamma(theta + 1) - theta*log(r0) + r0 + c*theta", "c*theta", {"lambda1": "log(r0)"},
        {"r0": 2.0, "rho": 0.4}, {"c": lambda g: g.uniform(-1, 1)}, {"r": lambda g: g.uniform(0.2, 9)},
        {"r0": lambda g: g.uniform(0.1, 10)}),
    "negative_binomial": (
        "negative_binomial", "-log((theta + 1)*(theta + 2)/2) - theta*log(1 - p0) - 3*log(p0) + c*theta", "c*theta",
        {"lambda1": "log(1 - p0)"}, {"p0": 0.4, "rho": 0.3}, {"c": lambda g: g.uniform(0, 1)},
        {"p": lambda g: g.uniform(0.05, 0.95)}, {"p0": lambda g: g.uniform(0.05, 0.95)}),
    "rayleigh": (
        "rayleigh", "-log(theta) + 2*log(s0) + theta**2/(2*s0**2) + n*theta**2/2", "n*theta**2/2",
        {"lambda1": "-1/(2*s0**2)"}, {"s0": 1.5, "rho": 0.6}, {"n": lambda g: g.uniform(0, 3)},
        {"sigma": lambda g: g.uniform(0.2, 4)}, {"s0": lambda g: g.uniform(0.2, 5)}),
    "user_inverse_gaussian": (
        str(USER_IG),
        "3*log(theta)/2 + log(2*pi)/2 - log(l0)/2 + l0*(theta - m0)**2/(2*m0**2*theta) + a*theta + b/theta",
        "a*theta + b/theta", {"lambda1": "-l0/(2*m0**2)", "lambda2": "-l0/2"},
        {"m0": 1.5, "l0": 2.0, "rho": 0.5}, {"a": lambda g: g.uniform(0, 2), "b": lambda g: g.uniform(0, 2)},
        {"mu": lambda g: g.uniform(0.2, 5), "lam": lambda g: g.uniform(0.2, 5)},
        {"m0": lambda g: g.uniform(0.3, 4), "l0": lambda g: g.uniform(0.3, 4)}),
    "beta_bernoulli": (
        "beta", "-(a0 - 1)*log(theta) - (b0 - 1)*log(1 - theta) + lgamma(a0) + lgamma(b0) - lgamma(a0 + b0)"
        " - y*log(theta) - (1 - y)*log(1 - theta)", "-y*log(theta) - (1 - y)*log(1 - theta)",
        {"lambda1": "a0 - 1", "lambda2": "b0 - 1"}, {"a0": 2.0, "b0": 3.0, "rho": 0.5},
        {"y": lambda g: float(g.integers(0, 2))}, {"a": lambda g: g.uniform(0.3, 6), "b": lambda g: g.uniform(0.3, 6)},
        {"a0": lambda g: g.uniform(0.3, 5), "b0": lambda g: g.uniform(0.3, 5)}),
}

GAMMA_H = """
name: gamma_h_over_theta
variable: theta
support: positive
parameters:
  alpha: {domain: positive}
  beta: {domain: positive}
sufficient_statistics: [log(theta), theta]
base_measure: 1/theta
natural_parameters: [alpha, -beta]
"""


def recipe(name, family, loss, data, hyper, approx):
    data_yaml = "{" + ", ".join(f"{d}: {{}}" for d in data) + "}"
    hyper_yaml = "{" + ", ".join(f"{k}: {v}" for k, v in hyper.items()) + "}"
    return (f"name: {name}\nfamily: {family}\nloss:\n  expression: {loss}\n  data: {data_yaml}\n"
            f"hyperparameters: {hyper_yaml}\napproximations: {approx}\n")


def compare(joint, prior, data, states, hypers, seed=0):
    rng = np.random.default_rng(seed)
    assert joint.STATE == prior.STATE
    for _ in range(8):
        st = {k: np.array([f(rng) for _ in range(3)]) for k, f in states.items()}
        d = {k: f(rng) for k, f in data.items()}
        hp = {k: f(rng) for k, f in hypers.items()}
        hp["rho"] = rng.uniform(0.05, 1.0)
        a = joint.step(joint.init(**st), data=d, **hp)
        b = prior.step(prior.init(**st), data=d, **hp)
        for k in joint.STATE:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=0)
    return a


#: the models whose two derivations take more than a few seconds (sympy's integrals of a user family, sized families)
SLOW_MODELS = {"user_inverse_gaussian", "negative_binomial"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW_MODELS else [])
                                  for n in MODELS])
def test_loss_with_minus_log_h_derives_the_family_prior_update(tmp_path, name):
    family, joint_loss, loss, lam0, hyper, data, states, hypers = MODELS[name]
    joint = generate(tmp_path, "joint", recipe("joint", family, joint_loss, data, hyper, "[exact]"))
    prior_approx = "[exact, {family_prior: {" + ", ".join(f"{k}: {v}" for k, v in lam0.items()) + "}}]"
    prior = generate(tmp_path, "prior", recipe("prior", family, loss, data, hyper, prior_approx))
    compare(joint, prior, data, states, hypers)


@pytest.mark.slow
def test_through_the_installed_command(tmp_path):
    """The same comparison with ``python -m blr_derive`` run as a program (Rayleigh: E_q[log θ] only through the
    tilted log-partition)."""
    family, joint_loss, loss, lam0, hyper, data, states, hypers = MODELS["rayleigh"]
    joint = generate(tmp_path, "joint", recipe("joint", family, joint_loss, data, hyper, "[exact]"), True)
    prior_approx = "[exact, {family_prior: {" + ", ".join(f"{k}: {v}" for k, v in lam0.items()) + "}}]"
    prior = generate(tmp_path, "prior", recipe("prior", family, loss, data, hyper, prior_approx), True)
    compare(joint, prior, data, states, hypers, seed=5)


def test_poisson_joint_step_is_the_conjugate_posterior(tmp_path):
    """ρ = 1 with the Poisson prior q(θ; r₀) and likelihood-like tilt e^{−cθ}: the posterior is Poisson(r₀e^{−c}).
    E_q[log θ!] has no closed form, and the loss carries log θ! itself."""
    family, joint_loss, _, _, hyper, data, _, _ = MODELS["poisson"]
    mod = generate(tmp_path, "joint", recipe("joint", family, joint_loss, data, hyper, "[exact]"))
    r = np.array([0.5, 3.0, 40.0])
    out = mod.step(mod.init(r=r), data={"c": 0.7}, r0=2.5, rho=1.0)
    np.testing.assert_allclose(out["r"], 2.5 * np.exp(-0.7) * np.ones(3), rtol=1e-14)
    out = mod.step(mod.init(r=r), data={"c": 0.7}, r0=2.5, rho=0.3)            # Eq. 6 on λ = log r
    np.testing.assert_allclose(out["r"], np.exp(0.7 * np.log(r) + 0.3 * (np.log(2.5) - 0.7)), rtol=1e-14)


def test_a_base_measure_linear_in_t_takes_the_conjugate_path(tmp_path):
    """Gamma with h = 1/θ: log h = −log θ is linear in T, so a loss with −log h is itself linear (the conjugate
    path, unchanged).  Prior Gamma(α₀, β₀), likelihood θ^k e^{−yθ}: ρ = 1 gives the posterior Gamma(α₀ + k, β₀ + y)."""
    (tmp_path / "fam.yaml").write_text(textwrap.dedent(GAMMA_H), encoding="utf-8")
    fam = str(tmp_path / "fam.yaml")
    joint_loss = "-a0*log(b0) + lgamma(a0) - (a0 - 1)*log(theta) + b0*theta - k*log(theta) + y*theta"
    hyper = {"a0": 2.0, "b0": 1.0, "k": 3.0, "rho": 0.5}
    data = {"y": lambda g: g.uniform(0, 3)}
    joint = generate(tmp_path, "joint", recipe("joint", fam, joint_loss, data, hyper, "[exact]"))
    prior = generate(tmp_path, "prior", recipe("prior", fam, "-k*log(theta) + y*theta", data, hyper,
                                               "[exact, {family_prior: {lambda1: a0, lambda2: -b0}}]"))
    compare(joint, prior, data, {"alpha": lambda g: g.uniform(0.3, 5), "beta": lambda g: g.uniform(0.3, 5)},
            {"a0": lambda g: g.uniform(0.3, 5), "b0": lambda g: g.uniform(0.3, 5), "k": lambda g: g.uniform(0, 4)})
    out = joint.step(joint.init(alpha=np.array([1.3]), beta=np.array([0.8])), data={"y": 1.7}, a0=2.0, b0=1.0,
                     k=3.0, rho=1.0)
    np.testing.assert_allclose([out["alpha"][0], out["beta"][0]], [2.0 + 3.0, 1.0 + 1.7], rtol=1e-14)


@pytest.mark.parametrize("extra,words", [
    ("no_entropy", "no_entropy"),
    ("{family_prior: {lambda1: log(r0)}}", "not both"),
])
def test_refusals_name_what_to_write(tmp_path, extra, words, capsys):
    src = tmp_path / "r.yaml"
    family, joint_loss, _, _, hyper, data, _, _ = MODELS["poisson"]
    src.write_text(recipe("r", family, joint_loss, data, hyper, f"[exact, {extra}]"), encoding="utf-8")
    assert main([str(src), "--target", "numpy"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"{src}:7:" in err and words in err and "−log h" in err


# a non-conjugate joint: ℓ + log h = c·θ² − k·θ is tilted (E_q[θ²] = r + r² under the Poisson), ℓ alone is not (it
# holds lgamma(θ + 1)), and E_q[log θ!] has no closed form: only ∇_μE_q[ℓ + log h] = c(1 + 2r) − k enters Eq. 6
POISSON_SQUARE = """\
name: poisson_square
family: poisson
loss: c*theta**2 + lgamma(theta + 1) - k*theta
approximations: [exact{extra}]
hyperparameters:
  rho: {{default: 0.5}}
  c: {{default: 0.1}}
  k: {{default: 0.0}}
"""


def test_a_tilted_loss_with_minus_log_h_cancels_the_base_measure_term(tmp_path):
    """λ ← (1 − ρ) log r − ρ(c(1 + 2r) − k) (Eq. 6 with the base-measure terms cancelled), at rates from 0.01 to 200
    and random c, k, ρ: before, the engine refused the recipe ('exact' does not apply: the loss is not tilted)."""
    mod = generate(tmp_path, "poisson_square", POISSON_SQUARE.format(extra=""))
    g = np.random.default_rng(7)
    for _ in range(5):
        r = np.array([0.01, 0.7, 3.0, 40.0, 200.0])
        c, k, rho = g.uniform(0.01, 0.3), g.uniform(-2, 2), g.uniform(0.05, 1.0)
        out = mod.step(mod.init(r=r.copy()), c=c, k=k, rho=rho)
        want = np.exp((1 - rho) * np.log(r) - rho * (c * (1 + 2 * r) - k))
        np.testing.assert_allclose(out["r"], want, rtol=1e-13)


def test_a_tilted_loss_with_minus_log_h_refuses_no_entropy(tmp_path, capsys):
    src = tmp_path / "r.yaml"
    src.write_text(POISSON_SQUARE.format(extra=", no_entropy"), encoding="utf-8")
    assert main([str(src), "--target", "numpy"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"{src}:4:" in err and "no_entropy" in err and "−log h" in err
