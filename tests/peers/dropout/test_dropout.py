"""Dropout from the BLR (Sec. 4.3, App. G): the spike-and-slab candidate (Eq. 41) with masks (Eq. 84) and
separated components (Eqs. 85-86) gives Newton's method with dropout (Eqs. 42-43); with RMSprop's passes
(Eqs. 36-38) RMSprop with dropout.  The generated modules are compared with references written here from
those equations, under the same masks (injected through the generated code's ``rng``)."""
import numpy as np
import pytest

from blr_derive.api import derive_file
from conftest import CATALOG, load_generated

N_OUT, N_IN, N = 3, 5, 40


def problem(seed=0):
    """Multi-output logistic regression ℓ(W) = Σ_n Σ_i log(1 + exp(−y_ni (x_n·W_i))) over W (N_OUT × N_IN),
    flattened; dropout drops input units, i.e. whole columns of W (Eq. 39)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, N_IN))
    Y = np.sign(X @ rng.normal(size=(N_IN, N_OUT)) + 0.3 * rng.normal(size=(N, N_OUT)))

    def loss(w):
        A = X @ w.reshape(N_OUT, N_IN).T
        return float(np.sum(np.logaddexp(0, -Y * A)))

    def grad(w):                              # ∇ℓ at the (masked) weights the network uses
        A = X @ w.reshape(N_OUT, N_IN).T
        return (-(Y / (1 + np.exp(Y * A))).T @ X).ravel()

    def hess(w):                              # the diagonal of ∇²ℓ
        A = X @ w.reshape(N_OUT, N_IN).T
        p = 1 / (1 + np.exp(-A))
        return ((p * (1 - p)).T @ X**2).ravel()
    return loss, grad, hess


def unit_masks(rng, pi1, steps):
    """z_jl per input unit, shared by the unit's outgoing weights (a column of W), flattened like W."""
    return [np.repeat((rng.random(N_IN) < pi1)[None, :], N_OUT, axis=0).ravel().astype(float) for _ in range(steps)]


class MaskRng:
    """Hands the generated code uniform draws that reproduce given masks: u < pi1 exactly where z = 1."""

    def __init__(self, masks, pi1):
        self.masks, self.pi1, self.calls = list(masks), pi1, 0

    def random(self, shape):
        z = self.masks[self.calls]
        self.calls += 1
        assert z.shape == tuple(shape)
        return np.where(z > 0, 0.5 * self.pi1, 0.5 * (1 + self.pi1))


def newton_dropout_reference(m, s, masks, grad, hess, rho, pi1):
    """Eqs. 42-43 with a diagonal precision: gradients and Hessians with respect to θ at θ̃ = z∘m."""
    for z in masks:
        theta = z * m
        g = z * grad(theta)                   # ∇_θ ℓ(θ̃) = z ∘ ∇ℓ(θ̃)
        h = z * hess(theta)                   # z² = z
        s = (1 - rho) * s + rho * h / pi1
        m = m - rho * g / (pi1 * s)
    return m, s


def rmsprop_dropout_reference(m, s, masks, grad, lr, alpha, eps, pi1):
    """RMSprop (Eq. 38) with dropout: Eq. 43 with the squared masked gradient, rate 1 − alpha, √s + eps."""
    for z in masks:
        g = z * grad(z * m)
        s = alpha * s + (1 - alpha) * g**2 / pi1
        m = m - lr * g / (pi1 * (np.sqrt(s) + eps))
    return m, s


def adam_dropout_reference(m, masks, grad, lr, beta1, beta2, eps, pi1):
    """Adam with dropout: Eq. 43 with the squared masked gradient (Eq. 38), EMA momentum (Eq. 77), Adam's bias
    corrections, √s + eps, and the 1/π₁ of Eqs. 42-43."""
    u, s = np.zeros_like(m), np.zeros_like(m)
    for t, z in enumerate(masks, 1):
        g = z * grad(z * m)
        u = beta1 * u + (1 - beta1) * g
        s = beta2 * s + (1 - beta2) * g**2 / pi1
        m = m - lr * (u / (1 - beta1**t)) / (pi1 * (np.sqrt(s / (1 - beta2**t)) + eps))
    return m, u, s


@pytest.mark.parametrize("pi1, rho", [(0.5, 0.1), (0.8, 0.3)])
def test_dropout_equals_newton_with_dropout_under_the_same_masks(pi1, rho):
    mod = load_generated("dropout")
    loss, grad, hess = problem()
    masks = unit_masks(np.random.default_rng(1), pi1, 25)
    m0, s0 = 0.1 * np.random.default_rng(2).normal(size=N_OUT * N_IN), np.full(N_OUT * N_IN, 50.0)
    state = mod.init(m=m0, s=s0)
    rng = MaskRng(masks, pi1)
    for _ in masks:
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, rng=rng, rho=rho, pi1=pi1)
    m_ref, s_ref = newton_dropout_reference(m0, s0, masks, grad, hess, rho, pi1)
    np.testing.assert_allclose(state["m"], m_ref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(state["s"], s_ref, rtol=1e-12, atol=1e-13)
    assert loss(state["m"]) < loss(m0)          # and it learns


def test_dropout_rmsprop_equals_rmsprop_with_dropout_under_the_same_masks():
    mod = load_generated("dropout_rmsprop")
    _, grad, _ = problem(1)
    pi1, lr, alpha, eps = 0.7, 0.05, 0.9, 1e-8
    masks = unit_masks(np.random.default_rng(4), pi1, 30)
    m0 = 0.1 * np.random.default_rng(5).normal(size=N_OUT * N_IN)
    state = mod.init(m=m0)                                   # s starts at 0 (state_init)
    rng = MaskRng(masks, pi1)
    for _ in masks:
        state = mod.step(state, oracles={"grad": grad}, rng=rng, lr=lr, alpha=alpha, eps=eps, pi1=pi1)
    m_ref, s_ref = rmsprop_dropout_reference(m0, np.zeros_like(m0), masks, grad, lr, alpha, eps, pi1)
    np.testing.assert_allclose(state["m"], m_ref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(state["s"], s_ref, rtol=1e-12, atol=1e-14)
    assert mod.ORACLES == ("grad",)


def test_dropout_adam_equals_adam_with_dropout_under_the_same_masks():
    mod = load_generated("dropout_adam")
    _, grad, _ = problem(2)
    pi1, lr, betas, eps = 0.6, 0.02, (0.8, 0.95), 1e-8
    masks = unit_masks(np.random.default_rng(6), pi1, 30)
    m0 = 0.1 * np.random.default_rng(7).normal(size=N_OUT * N_IN)
    state = mod.init(m=m0)
    rng = MaskRng(masks, pi1)
    for _ in masks:
        state = mod.step(state, oracles={"grad": grad}, rng=rng, lr=lr, betas=betas, eps=eps, pi1=pi1)
    m_ref, u_ref, s_ref = adam_dropout_reference(m0, masks, grad, lr, *betas, eps, pi1)
    np.testing.assert_allclose(state["m"], m_ref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(state["u"], u_ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(state["s"], s_ref, rtol=1e-12, atol=1e-14)


def sgd_dropout_reference(theta, masks, grad, alpha):
    """SGD with dropout, Eq. 40: θ ← θ − α ∇_θ ℓ̄(θ̃) with θ̃ = z∘θ, so ∇_θ ℓ̄(θ̃) = z ∘ ∇ℓ̄(z∘θ)."""
    for z in masks:
        theta = theta - alpha * z * grad(z * theta)
    return theta


@pytest.mark.parametrize("pi1, rho, alpha", [(0.5, 0.1, 0.05), (0.8, 0.3, 0.02)])
def test_dropout_sgd_equals_sgd_with_dropout_under_the_same_masks(pi1, rho, alpha):
    """Fixed slab precision s (gaussian_diag_fixed_precision): the derived step is m ← m − ρ ĝ/(π₁ s), i.e. Eq. 40
    with α = ρ/(π₁ s); s = ρ/(π₁ α) gives plain SGD with dropout at learning rate α."""
    mod = load_generated("dropout_sgd")
    loss, grad, _ = problem(3)
    masks = unit_masks(np.random.default_rng(8), pi1, 30)
    m0 = 0.1 * np.random.default_rng(9).normal(size=N_OUT * N_IN)
    s = rho / (pi1 * alpha)                  # one known precision for every weight (a scalar state)
    state = mod.init(m=m0, s=s)
    rng = MaskRng(masks, pi1)
    for _ in masks:
        state = mod.step(state, oracles={"grad": grad}, rng=rng, rho=rho, pi1=pi1)
    assert rng.calls == len(masks) and mod.ORACLES == ("grad",)        # no Hessian: the covariance is fixed
    np.testing.assert_allclose(state["m"], sgd_dropout_reference(m0, masks, grad, alpha), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(state["s"], s)                       # the precision is known, not learned
    assert loss(state["m"]) < loss(m0)


def test_dropout_sgd_per_coordinate_precision_is_a_per_coordinate_learning_rate():
    """A different fixed precision per weight: Eq. 40 with the elementwise rate α = ρ/(π₁ s)."""
    mod = load_generated("dropout_sgd")
    _, grad, _ = problem(4)
    pi1, rho = 0.6, 0.2
    masks = unit_masks(np.random.default_rng(10), pi1, 20)
    m0 = 0.1 * np.random.default_rng(11).normal(size=N_OUT * N_IN)
    s = np.random.default_rng(12).uniform(5.0, 50.0, size=N_OUT * N_IN)
    state = mod.init(m=m0, s=s)
    rng = MaskRng(masks, pi1)
    for _ in masks:
        state = mod.step(state, oracles={"grad": grad}, rng=rng, rho=rho, pi1=pi1)
    ref = sgd_dropout_reference(m0, masks, grad, rho / (pi1 * s))
    np.testing.assert_allclose(state["m"], ref, rtol=1e-12, atol=1e-13)


def test_dropout_sgd_derivation_and_the_spike_precision_override(tmp_path):
    """The spike overrides the family's fixed precision (s0 instead of s): with separated components it drops out
    (Eq. 85: the slab's own score vanishes at its mean); through the responsibilities (Eqs. 69-71) it enters."""
    _, D = derive_file(CATALOG / "dropout_sgd.yaml")
    md = D.to_markdown()
    for rule, eq in [("mixture_chain_rule", "Eqs. 67-68"), ("dropout_masks", "Eq. 84"),
                     ("separated_components", "Eqs. 85-86"), ("instantiate", "Eq. 40")]:
        assert f"*rule* `{rule}` — *" in md and eq in md, rule
    assert "m = 0, s = s0" in md
    assert {name: str(e) for name, _, e in D.updates} == {"m": "-g*rho/(pi1*s) + m"}
    assert [o for _, o in D.sampling.calls] == ["grad"]
    text = (CATALOG / "dropout_sgd.yaml").read_text().replace("  - separated_components\n", "")
    (tmp_path / "unseparated.yaml").write_text(text)
    _, D2 = derive_file(tmp_path / "unseparated.yaml")
    spike = [e for s, e in D2.defs if str(s) == "a_2_1"]
    assert spike and "s0" in str(spike[0]) and "s0" not in str([e for s, e in D2.defs if str(s) == "a_1_1"])


def test_masks_are_bernoulli_draws_with_the_keep_probability():
    mod = load_generated("dropout")
    n, pi1 = 20000, 0.3
    seen = []

    def grad(theta):
        seen.append(theta.copy())
        return np.ones_like(theta)
    state = mod.init(m=np.ones(n), s=np.ones(n))
    new = mod.step(state, oracles={"grad": grad, "hess": np.ones_like}, rng=np.random.default_rng(0), pi1=pi1)
    kept = seen[0] != 0
    assert abs(kept.mean() - pi1) < 4 * np.sqrt(pi1 * (1 - pi1) / n)
    # dropped weights get no gradient and keep their mean; their precision decays as (1 - rho) s (Eq. 43)
    np.testing.assert_array_equal(new["m"][~kept], 1.0)
    np.testing.assert_allclose(new["s"][~kept], 1 - mod.HYPERPARAMETERS["rho"])


def test_explain_shows_the_dropout_derivation_with_equation_numbers():
    _, D = derive_file(CATALOG / "dropout.yaml")
    md = D.to_markdown()
    for rule, eq in [("mixture_blr", "Eq. 28"), ("mixture_chain_rule", "Eqs. 67-68"), ("dropout_masks", "Eq. 84"),
                     ("separated_components", "Eqs. 85-86"), ("instantiate", "Eqs. 42-43")]:
        assert f"*rule* `{rule}` — *" in md and eq in md, rule
    upd = {name: str(e) for name, _, e in D.updates}
    assert upd == {"s": "h*rho/pi1 + s*(1 - rho)", "m": "-g*rho/(pi1*s_new) + m"}     # Eqs. 42-43
    assert "s0" not in str(D.sampling.theta_expr)            # the spike's mean is 0: θ̃ = z m


def test_blr_derive_check_on_a_mixture_recipe_checks_the_component_family_and_the_update():
    from blr_derive.verify.check import check_file
    rep = check_file(CATALOG / "dropout.yaml", points=1)
    assert rep.passed and "mixture_2_gaussian_diag" in rep.title
    names = [c.name for c in rep.checks]
    assert "normalization" in names and "generated update vs symbolic update" in names


def test_masked_gradients_are_unbiased_for_the_mixture_gradients():
    """Eq. 84: for ℓ = Σ a θ²/2 the spike-and-slab gives ∇_m E_q[ℓ] = π₁ a m and 2∇_{1/s} E_q[ℓ] = π₁ a exactly
    (mixture Bonnet/Price, App. E); the masked estimates z·a·(z m) and z·a average to them over the mask draws.
    One step with ρ = ½ from s = 1 exposes them: h = π₁(2 s_new − 1), g = 2π₁ s_new (m − m_new)."""
    mod = load_generated("dropout")
    n, pi1, a, m = 40000, 0.35, 3.0, 0.7
    state = mod.init(m=np.full(n, m), s=np.ones(n))
    new = mod.step(state, oracles={"grad": lambda t: a * t, "hess": lambda t: np.full_like(t, a)},
                   rng=np.random.default_rng(5), rho=0.5, pi1=pi1)
    h = pi1 * (2 * new["s"] - 1)
    g = 2 * pi1 * new["s"] * (m - new["m"])
    sd = np.sqrt(pi1 * (1 - pi1) / n)
    assert abs(h.mean() - pi1 * a) < 4 * a * sd
    assert abs(g.mean() - pi1 * a * m) < 4 * a * m * sd


@pytest.mark.parametrize("fixed, message", [
    ("{2: {s: s0}}", "missing a value for 'm'"),
    ("{2: {m: 0, s: s0, t: 1}}", "'t' is not a parameter of 'gaussian_diag_fixed_precision'"),
])
def test_bad_spike_overrides_are_one_line_errors(tmp_path, fixed, message):
    from blr_derive.core.errors import SpecError
    p = tmp_path / "bad.yaml"
    p.write_text("name: bad\nfamily: {mixture: gaussian_diag_fixed_precision, components: 2, weights: [pi1],\n"
                 f"         fixed: {fixed}}}\nloss: abstract\napproximations: [delta, dropout_masks]\n"
                 "hyperparameters: {pi1: {default: 0.5}, s0: {default: 1.0e+6}}\n")
    with pytest.raises(SpecError) as exc:
        derive_file(p)
    assert message in str(exc.value) and str(exc.value).startswith(str(p)) and exc.value.line is not None

