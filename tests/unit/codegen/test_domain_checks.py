"""Run-time domain checks (blr_derive/ir/validity.py): where the derivation cannot guarantee that a positive
(definite) parameter stays in its domain, the generated step raises FloatingPointError naming the value, the mixture
component and the step instead of returning NaN; the numpy and jax targets check, torch and Triton refuse such a
recipe with a located message; an update that riemannian_correction keeps valid, or that reads no Hessian
estimate, is not checked."""
import functools

import numpy as np
import pytest

from blr_derive import api
from blr_derive.api import derive_record
from blr_derive.core.errors import UnsupportedTarget
from blr_derive.ir.build import build_ir
from conftest import CATALOG, FUNCTION_TARGETS, OPTIMIZER_TARGETS, load_generated


@functools.lru_cache(maxsize=None)
def compiled(text, target="numpy"):
    return api.derive(text).compile(target)


PRICE = """\
name: price_plain
family: gaussian_diag
loss: abstract
learning_rate: lr
approximations:
  - monte_carlo: {{samples: 1}}
  - ema_momentum: {{rate: beta1, state: u}}
  - debias: {{param: u, rate: beta1}}
  - price_estimator
  - minibatch: {{size: ess}}
{extra}state_init: {{s: 1.0}}
hyperparameters:
  lr: {{default: 0.5}}
  ess: {{default: 10.0}}
  beta1: {{default: 0.9}}
"""
MULTIMODAL = (CATALOG / "multimodal.yaml").read_text()
PLAIN_MULTIMODAL = MULTIMODAL.replace("  - riemannian_correction: {param: S}\n", "").replace(
    "name: multimodal", "name: multimodal_plain")


def checks(name_or_text, finite=False):
    """The run-time checks of a recipe's step: (name, domain, component); those that a value is a finite number
    (domain 'finite', every updated parameter no other check covers) only with ``finite``."""
    if "\n" in name_or_text:
        D = api.derive(name_or_text).record
    else:
        _, D = derive_record(CATALOG / f"{name_or_text}.yaml")
    return [(c.name, c.domain, c.component) for c in build_ir(D, "x.yaml").checks if finite or c.domain != "finite"]


def test_which_updates_are_checked():
    assert checks("newton") == [("S", "positive_definite", None)]          # the Hessian oracle, any sign
    assert checks("online_newton_diag") == [("s", "positive", None)]
    assert checks("ivon") == checks("multimodal") == checks("vogn") == checks("adam") == []   # corrected / PSD
    assert checks(PLAIN_MULTIMODAL) == [("S", "positive_definite", "axis")]   # ∇² log q of the mixture
    assert checks(PRICE.format(extra="")) == [("s", "positive", None)]        # Price's estimator
    assert checks(PRICE.format(extra="  - riemannian_correction: {param: s}\n")) == []


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_a_full_precision_that_leaves_the_cone_is_named(target):
    mod = load_generated("newton", target)
    st = mod.init(m=np.zeros(2), S=np.eye(2))
    with pytest.raises(FloatingPointError, match=r"^step\(\): the new S is not positive definite \(smallest "
                                                 r"eigenvalue -1\): the update left the family; .*riemannian_correction"):
        mod.step(st, oracles={"grad": lambda x: np.ones(2), "hess": lambda x: np.diag([1.0, -3.0])}, rho=0.5)
    ok = mod.step(st, oracles={"grad": lambda x: np.ones(2), "hess": lambda x: np.diag([1.0, 3.0])}, rho=0.5)
    np.testing.assert_allclose(ok["S"], np.diag([1.0, 2.0]))
    # the module's switch: unchecked, an elementwise step returns the negative precision (as before the checks)
    diag = load_generated("online_newton_diag", target)
    st = diag.init(m=np.zeros(3), s=np.ones(3))
    oracles = {"grad": lambda x: np.ones(3), "hess": lambda x: np.array([1.0, -30.0, 1.0])}
    with pytest.raises(FloatingPointError, match=r"the new s is not positive \(value -2.1 at index \(1,\)\)"):
        diag.step(st, oracles=oracles)
    assert diag.CHECK_DOMAINS is True
    diag.CHECK_DOMAINS = False
    try:
        bad = diag.step(st, oracles=oracles)
    finally:
        diag.CHECK_DOMAINS = True
    np.testing.assert_allclose(np.asarray(bad["s"]), [1.0, -2.1, 1.0])          # s + ρ(h − s), ρ = 0.1


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_the_mixture_component_and_the_step_are_named(target):
    mod = compiled(PLAIN_MULTIMODAL, target)
    H = lambda x: np.diag([2.0, 2.0]) if x[0] < 0 else np.diag([2.0, -40.0])     # noqa: E731
    st = mod.init(m=np.array([[-3.0, 0.0], [0.5, 0.0], [3.0, 1.0]]), S=np.stack([np.eye(2)] * 3))
    with pytest.raises(FloatingPointError, match=r"the new S of component 2 \(of 3\) is not positive definite"):
        mod.step(st, oracles={"grad": lambda x: x, "hess": H})
    # an elementwise state: the step counter and the coordinate
    price = compiled(PRICE.format(extra=""), target)
    st = price.init(m=np.zeros(3), s=np.ones(3))
    grad = lambda x: np.array([1.0, -30.0, 1.0]) * x                               # noqa: E731
    kw = {"rng": np.random.default_rng(0)} if target == "numpy" else {"key": __import__("jax").random.PRNGKey(0)}
    with pytest.raises(FloatingPointError, match=r"the new s is not positive \(value -[0-9.e+]+ at index \(1,\)\) "
                                                 r"at step 1"):
        price.step(st, oracles={"grad": grad}, **kw)


def test_jax_checks_eager_calls_only():
    """A jitted step cannot raise on its values: under jax.jit the same step returns (the documented limit)."""
    import jax
    mod = load_generated("newton", "jax")
    st = mod.init(m=np.zeros(2), S=np.eye(2))
    step = jax.jit(lambda s: mod.step(s, oracles={"grad": lambda x: x + 1.0, "hess": lambda x: -3.0 * jax.numpy.eye(2)},
                                      rho=0.5))
    out = step(st)
    assert float(np.linalg.eigvalsh(np.asarray(out["S"]))[0]) < 0


@pytest.mark.parametrize("target", OPTIMIZER_TARGETS)
def test_optimizer_targets_refuse_an_update_they_would_not_check(target):
    with pytest.raises(UnsupportedTarget, match=rf"the {target} target does not check at run time that 's' stays "
                                                r"positive.*riemannian_correction: \{param: s\}"):
        api.derive(PRICE.format(extra="")).code(target)
    assert "class" in api.derive(PRICE.format(extra="  - riemannian_correction: {param: s}\n")).code(target)


# ------------------------------------------------------------------ natural-gradient estimates of either sign
#: a family written as a user would (docs/family-format.md): the half-normal, λ = −1/(2σ²), T = θ²; sampler by ndtri
HALF_NORMAL = """\
name: half_normal_user
variable: theta
support: positive
parameters:
  sigma: {domain: positive, description: scale}
sufficient_statistics: [theta**2]
base_measure: "1"
natural_parameters: [-1/(2*sigma**2)]
expectation_parameters: [sigma**2]
sampler: sigma*ndtri((1 + u)/2)
"""


@functools.lru_cache(maxsize=None)
def half_normal_recipe(tmp_root):
    from pathlib import Path
    root = Path(tmp_root)
    (root / "half_normal_user.yaml").write_text(HALF_NORMAL)
    (root / "r.yaml").write_text("name: hn_quadrature\nfamily: half_normal_user.yaml\n"
                                 "loss: theta**2 - 3*log(theta)\napproximations: [quadrature]\n")
    return api.derive(root / "r.yaml")


def test_an_estimate_of_either_sign_is_checked_unless_the_new_value_is_positive_anyway():
    """Score-function, reparameterization and quadrature estimates of ∇_λE_q[ℓ] have either sign: the exponential's
    rate r ← (1 − ρ)r + ρ∇̂ is checked; SNES's σ ← σ·exp(·) is positive whatever the estimate (not checked)."""
    assert checks("score_function_exponential") == [("r", "positive", None)]
    assert checks("reparameterization_exponential") == [("r", "positive", None)]
    assert checks("quadrature_gamma") != []
    assert checks("snes") == []


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_a_quadrature_step_that_leaves_a_user_family_is_named(tmp_path_factory, target):
    """The exact (quadrature) BLR step λ ← (1 − ρ)λ − ρ(1 − 3/(2σ²)) over the half-normal leaves Ω = (−∞, 0) at σ = ½
    with ρ = ½ (λ = −2 + ... = 1.5): the step raises naming σ instead of returning NaN; with ρ = 0.1 it reaches the
    fixed point λ = −∇_μE_q[ℓ], i.e. σ² = 2 (E_q[log θ] = ½ log σ² + const)."""
    mod = half_normal_recipe(str(tmp_path_factory.getbasetemp())).compile(target)
    st = mod.init(sigma=np.array([0.5, 1.2]))
    with pytest.raises(FloatingPointError, match=r"step\(\): the new sigma is not a number .*the update left the "
                                                 r"family; .*outside the natural-parameter space.*take a smaller rho$"):
        with np.errstate(invalid="ignore"):
            mod.step(st, rho=0.5)
    if target == "numpy":
        for _ in range(300):
            st = mod.step(st, rho=0.1)
        np.testing.assert_allclose(np.asarray(st["sigma"]), np.sqrt(2.0), rtol=1e-10)
    else:                               # eager jax is slow per step: 5 steps against numpy's (float32: 65 nodes)
        ref = half_normal_recipe(str(tmp_path_factory.getbasetemp())).compile("numpy")
        want = ref.init(sigma=np.array([0.5, 1.2]))
        for _ in range(5):
            st, want = mod.step(st, rho=0.1), ref.step(want, rho=0.1)
        np.testing.assert_allclose(np.asarray(st["sigma"]), want["sigma"], rtol=5e-5)


@pytest.mark.parametrize("target", OPTIMIZER_TARGETS)
def test_optimizer_targets_generate_an_estimate_of_either_sign_unchecked(target):
    """torch and Triton never synchronize with the host in a step: an update that reads a sampled natural gradient
    is generated unchecked there (as before), the Hessian estimates above are refused."""
    text = ("name: score_plain\nfamily: gaussian_diag\nloss: abstract\nhyperparameters:\n  rho: {default: 0.1}\n"
            "approximations:\n  - score_function: {samples: 4}\nstate_init: {s: 1}\n")
    assert checks(text) == [("s", "positive", None)]
    assert checks(text, finite=True) == [("s", "positive", None), ("m", "finite", None)]
    assert "class" in api.derive(text).code(target)


@pytest.mark.parametrize("target", OPTIMIZER_TARGETS)
def test_a_value_only_float64_can_break_is_checked_to_be_a_number(target):
    """A parameter the derivation keeps in its domain whatever the step (a real mean) is still checked to come out a
    finite number in numpy and jax: a NaN gradient (an oracle's 0/0, a loss that overflowed) made the step return
    m = NaN without a word.  torch and Triton never synchronize in a step: they generate it unchecked, not refused."""
    text = ("name: fixed_prec\nfamily: gaussian_diag_fixed_precision\nloss: abstract\n"
            "hyperparameters:\n  rho: {default: 0.1}\napproximations: [delta]\nstate_init: {s: 2.0}\n")
    assert checks(text, finite=True) == [("m", "finite", None)]
    mod = compiled(text)
    st = mod.init(m=np.array([0.5, -1.0]), s=np.array([2.0, 2.0]))
    ok = mod.step(st, oracles={"grad": lambda m: 2 * m}, rho=0.1)
    np.testing.assert_allclose(ok["m"], np.array([0.5, -1.0]) * (1 - 0.1 * 2 / 2.0), rtol=1e-15)
    for bad, what in ((np.nan, "a number"), (np.inf, "finite")):
        with pytest.raises(FloatingPointError, match=rf"the new m is not {what} \(value (nan|-?inf) at index \(1,\)\)"):
            mod.step(st, oracles={"grad": lambda m, bad=bad: np.array([1.0, bad])}, rho=0.1)
    assert "class" in api.derive(text).code(target)


def test_a_conjugate_loss_with_no_posterior_in_the_family_is_named():
    """The exact rule's natural gradient over a non-Gaussian family is of either sign too: under the gamma,
    ℓ = 3 log θ + θ is linear in T = (log θ, θ) with c = (3, 1), and Eq. 6 at ρ = 1 lands on λ* = −c, i.e. α = 1 − 3
    = −2, outside Ω (θ^(−3)e^(−θ) is not normalizable): the step raises naming α; the conjugate catalog recipes are
    checked the same way and step as before inside Ω."""
    assert checks("gamma_poisson") == [("alpha", "positive", None), ("beta", "positive", None)]
    assert checks("wishart_gaussian") == [("V", "positive_definite", None), ("n - (P - 1)", "positive", None)]
    mod = compiled("name: improper_gamma\nfamily: gamma\nloss: 3*log(theta) + theta\napproximations: [exact]\n")
    st = mod.init(alpha=np.array([0.5, 2.0]), beta=np.array([1.0, 1.0]))
    with pytest.raises(FloatingPointError, match=r"the new alpha is not positive \(value -2 at index \(0,\)\).*"
                                                 r"may lie outside the family"):
        mod.step(st, rho=1.0)
    half = mod.step(st, rho=0.1)        # inside: α ← (1 − ρ)(α − 1) + 1 − 3ρ, β ← (1 − ρ)β + ρ
    np.testing.assert_allclose(half["alpha"], 0.9 * np.array([0.5, 2.0]) - 0.2, rtol=1e-14)
    np.testing.assert_allclose(half["beta"], 0.9 * np.array([1.0, 1.0]) + 0.1, rtol=1e-14)


BETA_SQUARE = """\
name: beta_square
family: beta
parameter: a
loss: c*theta**2 - k*log(theta) - j*log(1 - theta)
approximations: [exact]
hyperparameters:
  rho: {default: 0.4}
  c: {default: 50.0}
  k: {default: 0.0}
  j: {default: 0.0}
"""


def test_a_tilted_exact_gradient_is_checked_and_the_optimizer_targets_refuse_it():
    """The exact rule's gradient of a loss that is not linear in T (θ² under a beta: E_q[θ²] = a(a + 1)/((a + b)(a + b
    + 1)), a tilted closed form) reads the state, so its target moves with q: numpy checks the new a and b and raises
    where the step leaves Ω (from a = 0.3, b = 0.2 with c = 50, ρ = 0.4 the torch target used to return a = −0.80
    unchecked: helper-69's finding); torch and Triton, which check nothing at run time, refuse the recipe at the
    line of its approximations, while a conjugate loss's constant gradient stays generated there (the gamma recipes
    of test_user_written_targets.py)."""
    assert checks(BETA_SQUARE) == [("a", "positive", None), ("b", "positive", None)]
    sources = [c.source for c in build_ir(api.derive(BETA_SQUARE).record, "x.yaml").checks]
    assert sources == ["hessian", "hessian"]
    assert [c.source for c in build_ir(derive_record(CATALOG / "gamma_poisson.yaml")[1], "x.yaml").checks] == [
        "estimate", "estimate"]
    mod = compiled(BETA_SQUARE)
    st = mod.init(a=np.array([0.3]), b=np.array([0.2]))
    with pytest.raises(FloatingPointError, match=r"the new a is not positive .*may lie outside the family"):
        mod.step(st)
    for target in OPTIMIZER_TARGETS:
        with pytest.raises(UnsupportedTarget, match=rf"the {target} target does not check at run time that 'a' stays "
                                                    r"positive.*\(the numpy and jax targets check it\)"):
            api.derive(BETA_SQUARE).code(target)


# --------------------------------------------------------------------------------------- explicit losses
# An explicit loss's derived curvature (the exact rule's E_q[∇²ℓ], Eq. 11) has no sign the derivation tracks: the new
# precision is checked unless sympy proves it positive (scalars) or its structure is a sum of positive semi-definite
# terms with one definite (matrices), with the hyperparameters not negative and the data real.
DOUBLE_WELL = """\
name: double_well
family: gaussian_diag
loss:
  expression: theta**4 - 3*theta**2
approximations: [exact{extra}]
state_init: {{s: 1.0}}
"""
CONVEX = DOUBLE_WELL.replace("theta**4 - 3*theta**2", "(theta - 2)**2 + exp(theta)").replace("double_well", "convex")
VECTOR_DOUBLE_WELL = """\
name: vector_double_well
family: gaussian_full
loss:
  expression: (theta.T*theta)**2 - 3*theta.T*theta
approximations: [exact]
"""
VECTOR_RIDGE = """\
name: vector_ridge
family: gaussian_full
loss:
  expression: 0.5*beta*(y - X*theta).T*(y - X*theta) + 0.5*theta.T*theta
  data:
    X: {shape: [N, P]}
    y: {shape: [N]}
hyperparameters:
  beta: {default: 1.0}
approximations: [exact]
"""


def sources(text):
    return [(c.name, c.source) for c in build_ir(api.derive(text).record, "x.yaml").checks if c.domain != "finite"]


def test_which_explicit_loss_updates_are_checked():
    assert sources(DOUBLE_WELL.format(extra="")) == [("s", "hessian")]            # non-convex: any ρ
    assert sources(DOUBLE_WELL.format(extra=", {riemannian_correction: {param: s}}")) == []
    assert sources(CONVEX.format(extra="")) == [("s", "estimate")]                # convex: only ρ > 1 overshoots
    assert sources(VECTOR_DOUBLE_WELL) == [("S", "hessian")]
    assert sources(VECTOR_RIDGE) == [("S", "estimate")]       # ρI + ρβXᵀX + (1 − ρ)S: definite for ρ ≤ 1
    assert checks("ridge") == [("S", "positive_definite", None)]       # δI + XᵀX with δ = 0 may be singular
    assert checks("multimodal_exact") == []                             # riemannian_correction


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_a_non_convex_explicit_loss_that_leaves_the_family_is_named(target):
    mod = compiled(DOUBLE_WELL.format(extra=""), target)
    m, s = np.array([0.0, 1.0]), np.array([10.0, 10.0])
    # within the family, the step is the exact rule's: s ← ρE[ℓ''] + (1 − ρ)s with E[ℓ''] = 12(m² + 1/s) − 6
    out = mod.step({"m": m, "s": s}, rho=0.1)
    tol = 1e-14 if target == "numpy" else 1e-6          # jax computes in float32 unless x64 is enabled
    np.testing.assert_allclose(np.asarray(out["s"]), 0.1 * (12 * (m**2 + 1 / s) - 6) + 0.9 * s, rtol=tol)
    with pytest.raises(FloatingPointError, match=r"the new s is not positive \(value -4\.8 at index \(0,\)\).*"
                                                 r"riemannian_correction: \{param: s\}"):
        mod.step({"m": m, "s": s}, rho=1.0)


def test_a_convex_explicit_loss_is_checked_for_overshooting_steps():
    # (the jax target makes this elementwise recipe an optax transformation, unchecked as torch's optimizers are)
    target = "numpy"
    mod = compiled(CONVEX.format(extra=""), target)
    m, s = np.array([0.5]), np.array([10.0])
    e2 = 2 + np.exp(m + 1 / (2 * s))                       # E[ℓ''] under N(m, 1/s)
    tol = 1e-14 if target == "numpy" else 1e-6
    np.testing.assert_allclose(np.asarray(mod.step({"m": m, "s": s}, rho=1.0)["s"]), e2, rtol=tol)
    with pytest.raises(FloatingPointError, match=r"the new s is not positive.*take rho <= 1"):
        mod.step({"m": m, "s": s}, rho=3.0)                # 3E[ℓ''] − 2s < 0


def test_a_vector_precision_that_the_loss_makes_indefinite_is_named():
    mod = compiled(VECTOR_DOUBLE_WELL)
    m, S = np.zeros(2), 10.0 * np.eye(2)
    # E[∇²ℓ] at m = 0 is (4 tr(S⁻¹) − 6)I + 8S⁻¹ = (0.8 − 6 + 0.8)I: the new precision is −4.4 I at ρ = 1
    with pytest.raises(FloatingPointError, match=r"the new S is not positive definite \(smallest eigenvalue -4\.4\)"):
        mod.step({"m": m, "S": S}, rho=1.0)
    out = mod.step({"m": m, "S": S}, rho=0.1)
    np.testing.assert_allclose(out["S"], 0.1 * -4.4 * np.eye(2) + 0.9 * S, rtol=1e-14)


@pytest.mark.parametrize("target", OPTIMIZER_TARGETS)
def test_optimizer_targets_refuse_a_non_convex_explicit_loss_and_take_a_convex_one(target):
    with pytest.raises(UnsupportedTarget, match="does not check at run time that 's' stays positive.*non-convex"):
        api.derive(DOUBLE_WELL.format(extra="")).code(target)
    assert "class " in api.derive(CONVEX.format(extra="")).code(target)


# ------------------------------------------------------------------------------------- factorized recipes
# A factor's message to a block (Eqs. 58–60) has no sign the derivation tracks: '-c*theta**2' turns q(θ)'s
# precision negative.  The global blocks' positive parameters are checked unless proved positive.
BAD_FACTOR = """\
name: vmp_bad
plate:
  index: n
  data:
    y: {description: observations}
hyperparameters:
  c: {default: 1.0}
blocks:
  theta: {family: gaussian_diag, approximations: [exact]}
  tau: {family: gamma, approximations: [exact]}
factors:
  likelihood: {plate: true, expression: "tau*(y - theta)**2/2 - log(tau)/2"}
  bad: {expression: "-c*theta**2 + tau"}
"""


def test_which_factorized_updates_are_checked():
    def names(text_or_name):
        D = api.derive(text_or_name).record if "\n" in text_or_name else derive_record(CATALOG / f"{text_or_name}.yaml")[1]
        return [(c.name, c.component) for c in build_ir(D, "x.yaml").checks]
    # α ← Σ 1/2 + 1 is proved positive (a plate sum of a positive term); the precision and the rate are not; the
    # real mean, the Dirichlet's concentrations and the point blocks (no family domain) are checked to be finite
    assert names(BAD_FACTOR) == [("theta_m", None), ("theta_s", None), ("tau_beta", None)]
    assert names("vmp") == [("theta_m", None), ("theta_s", None), ("tau_beta", None)]  # (κ₀ + N)α/β, κ₀ ≥ 0: not strict
    assert names("svi") == [("mu_m", "axis"), ("mu_s", "axis"), ("w_a", "axis")]
    assert names("em_gmm") == [("pi", "axis"), ("m", "axis"), ("L", "axis")]
    assert {c.domain for c in build_ir(derive_record(CATALOG / "em_gmm.yaml")[1], "x.yaml").checks} == {"finite"}


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_a_factor_that_makes_a_precision_negative_is_named(target):
    mod = compiled(BAD_FACTOR, target)
    state = {"theta_m": 0.0, "theta_s": 1.0, "tau_alpha": 2.0, "tau_beta": 1.0}
    y = np.array([0.1])
    # within the family: the precision is N·E[τ] − 2c = α/β − 2c (one row), the mean its message's ratio
    out = mod.step(state, data={"y": y}, c=0.1)
    tol = 1e-14 if target == "numpy" else 1e-6
    np.testing.assert_allclose(float(out["theta_s"]), 2.0 - 0.2, rtol=tol)
    np.testing.assert_allclose(float(out["theta_m"]), 0.1 * 2.0 / 1.8, rtol=tol)
    with pytest.raises(FloatingPointError, match=r"the new theta_s is not positive \(value -8\).*signs of the factors"):
        mod.step(state, data={"y": y}, c=5.0)


OVERFLOW = """\
name: overflow_exp_{target}
family: gaussian_diag
loss: exp(50*theta) - 3*theta
approximations: [exact]
hyperparameters:
  rho: {{default: 0.5}}
"""


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_a_precision_that_overflows_is_named_not_returned(target):
    """E_q[e^{50θ}] = e^{50m + 1250/s} overflows at m = 20, s = 1: the step returned s = inf and m = NaN (inf/inf)
    because the positivity check let inf through.  Where it is finite the step is Eq. 6 with the log-normal moments
    E[∇ℓ] = 50e^{50m + 1250/s} − 3, E[∇²ℓ] = 2500e^{50m + 1250/s}: s ← (1 − ρ)s + ρE[∇²ℓ], m ← m − ρE[∇ℓ]/s_new."""
    mod = compiled(OVERFLOW.format(target=target), target)
    m, s, rho = np.array([0.0, -0.1]), np.array([100.0, 40.0]), 0.5
    e = np.exp(50 * m + 1250 / s)
    s_new = (1 - rho) * s + rho * 2500 * e
    m_new = m - rho * (50 * e - 3) / s_new
    out = mod.step(mod.init(m=m, s=s), rho=rho)
    tol = 1e-12 if target == "numpy" else 1e-5          # jax computes in float32 unless x64 is enabled
    assert np.max(np.abs(np.asarray(out["s"]) - s_new) / s_new) < tol
    assert np.max(np.abs(np.asarray(out["m"]) - m_new) / np.abs(m_new)) < tol
    with pytest.raises(FloatingPointError, match=r"the new s is not finite \(value inf at index \(1,\)\).*overflowed"):
        mod.step(mod.init(m=np.array([0.0, 20.0]), s=np.array([100.0, 1.0])), rho=rho)


def test_a_hyperparameter_with_a_negative_default_is_not_assumed_non_negative():
    """s ← (1 − ρ)s + ρ(2c + 1) with c ≥ 0 is positive for ρ ≤ 1; a declared default c = −1 says c may be negative
    (the constructors accept it), so no proof assumes it is not, and the step raises where s turns negative."""
    text = ("name: shifted\nfamily: gaussian_diag\nloss:\n  expression: c*theta**2 + theta**2/2\n"
            "hyperparameters:\n  c: {default: %s}\napproximations: [exact]\nstate_init: {s: 1.0}\n")
    assert sources(text % "1.0") == [("s", "estimate")]
    assert sources(text % "-1.0") == [("s", "hessian")]
    mod = compiled(text % "-1.0")
    with pytest.raises(FloatingPointError, match=r"the new s is not positive \(value -1 at index \(0,\)\)"):
        mod.step({"m": np.array([0.0]), "s": np.array([0.5])}, rho=1.0)      # ρ(2c + 1) = -1


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_a_matrix_with_nan_or_inf_entries_is_named_for_its_arithmetic(target, x64):
    """A new precision with NaN (or inf) entries is not 'indefinite' (which sent the reader to the loss's convexity,
    when an overflow on the way -- e^{-u}·expit(u) = inf·0 of a logistic loss written log(1 + exp(-u)) -- made it):
    the message says 'not a number' (or 'not finite'), names the entry and gives the NaN causes before the hint;
    an indefinite finite matrix keeps its smallest eigenvalue."""
    import importlib
    runtime = importlib.import_module(f"blr_derive.codegen.backends.{target}.runtime")
    S = np.eye(2)
    S[1, 0] = np.nan
    with pytest.raises(FloatingPointError, match=r"step\(\): the new S is not a number \(entry \(1, 0\) is nan\) at "
                                                 r"step 3: the update left the family; its arithmetic gave NaN .*HINT"):
        runtime._check_domain("S", S, "positive_definite", None, 3, "HINT")
    S = np.eye(2)
    S[0, 0] = np.inf
    with pytest.raises(FloatingPointError, match=r"the new S is not finite \(entry \(0, 0\) is inf\).*overflowed"):
        runtime._check_domain("S", S, "positive_definite", None, None, "HINT")
    with pytest.raises(FloatingPointError, match=r"the new S is not positive definite \(smallest eigenvalue -1\).*HINT"):
        runtime._check_domain("S", np.diag([1.0, -1.0]), "positive_definite", None, None, "HINT")


DIRICHLET_MEAN = """\
name: dirichlet_mean_counts
family:
  name: dirichlet_mean
  variable: {name: theta, shape: vector, size: 3}
  support: simplex
  parameters:
    p1: {domain: simplex}
    p2: {domain: simplex}
    c: {domain: positive}
  sufficient_statistics: [log(theta1), log(theta2), log(theta3)]
  natural_parameters: [c*p1 - 1, c*p2 - 1, c*(1 - p1 - p2) - 1]
  log_partition: lgamma(lambda1 + 1) + lgamma(lambda2 + 1) + lgamma(lambda3 + 1) - lgamma(lambda1 + lambda2 + lambda3 + 3)
loss:
  expression: -n1*log(theta1) - n2*log(theta2) - n3*log(theta3)
  data: {n1: {}, n2: {}, n3: {}}
approximations: [exact]
hyperparameters:
  rho: 1.0
"""


def test_simplex_and_bounded_parameters_are_checked():
    """Parameters that are not ``positive`` but bounded all the same (Family.domain_conditions): a simplex's
    coordinates and their remainder, a degrees-of-freedom parameter greater than P − 1.  Unchecked, a Dirichlet by
    its mean p and concentration c returned p₁ = −2/7 from the count n₁ = −3, and a Wishart n = 0."""
    assert checks(DIRICHLET_MEAN) == [("p1", "positive", None), ("p2", "positive", None), ("c", "positive", None),
                                      ("1 - p1 - p2", "positive", None)]
    assert checks("wishart_gaussian") == [("V", "positive_definite", None), ("n - (P - 1)", "positive", None)]
    assert checks("inverse_wishart_gaussian")[-1] == ("n - (P + 1)", "positive", None)


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_a_dirichlet_mean_or_a_wishart_degree_that_leaves_its_range_is_named(target):
    mod = compiled(DIRICHLET_MEAN, target)
    st = mod.init(p1=np.array([0.2]), p2=np.array([0.3]), c=np.array([4.0]))
    # λ ← −∇_μE_q[ℓ] = (n1, n2, n3) (ρ = 1): α = (4, 1, 8), p = α/13 (the posterior of a flat Dirichlet)
    new = mod.step(st, data={"n1": 3.0, "n2": 0.0, "n3": 7.0})
    np.testing.assert_allclose([new["p1"][0], new["p2"][0], new["c"][0]], [4 / 13, 1 / 13, 13.0], rtol=1e-6)
    with pytest.raises(FloatingPointError, match=r"the new p1 is not positive \(value -0.28571"):
        mod.step(st, data={"n1": -3.0, "n2": 0.0, "n3": 7.0})
    with pytest.raises(FloatingPointError, match=r"the new 1 - p1 - p2 is not positive \(value -2 "):
        mod.step(st, data={"n1": 1.0, "n2": 0.0, "n3": -3.0})     # α = (2, 1, −2): c = 1, p = (2, 1), remainder −2
    wish = load_generated("wishart_gaussian", target)
    P = 2
    state = wish.init(V=np.eye(P), n=np.array(4.0))
    data = {"S": np.eye(P), "W0": np.eye(P), "N_obs": np.array(5.0)}
    np.testing.assert_allclose(wish.step(state, data=data)["n"], 8.0)          # n ← N_obs + n0 (n0 = 3)
    with pytest.raises(FloatingPointError, match=r"the new n - \(P - 1\) is not positive \(value -0.5\)"):
        wish.step(state, data={**data, "N_obs": np.array(-2.5)})             # n = 0.5 < P − 1 = 1
