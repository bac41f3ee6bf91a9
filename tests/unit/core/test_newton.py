"""The one μ → λ solver (blr_derive/core/newton.py): against closed forms, and embedded verbatim in the generated
modules that need it (the engine and the generated code cannot disagree)."""
import inspect

import numpy as np
import pytest
from scipy import special

from blr_derive.core import newton
from conftest import GENERATED, load_generated


def _beta():
    """Beta(a, b) in natural parameters λ = (a − 1, b − 1): A = lnB(a, b), μ = (ψ(a) − ψ(a+b), ψ(b) − ψ(a+b))."""
    def A(lam):
        a, b = lam + 1
        return special.betaln(a, b)

    def grad(lam):
        a, b = lam + 1
        return np.array([special.digamma(a) - special.digamma(a + b), special.digamma(b) - special.digamma(a + b)])

    def hess(lam):
        a, b = lam + 1
        t = special.polygamma(1, a + b)
        return np.array([[special.polygamma(1, a) - t, -t], [-t, special.polygamma(1, b) - t]])
    return A, grad, hess, lambda lam: bool(np.all(lam > -1))


@pytest.mark.parametrize("a,b", [(0.3, 0.7), (2.0, 5.0), (40.0, 0.9), (1e3, 2e3)])
def test_newton_dual_recovers_beta_parameters_from_their_mean_statistics(a, b):
    A, grad, hess, ok = _beta()
    mu = grad(np.array([a - 1, b - 1]))
    lam = newton.newton_dual(mu, np.zeros(2), A, grad, hess, ok)
    np.testing.assert_allclose(lam + 1, [a, b], rtol=1e-9)      # Newton converges quadratically: 1e-9 is loose


def test_newton_dual_refuses_an_expectation_outside_the_space():
    A, grad, hess, ok = _beta()
    with pytest.raises(ArithmeticError, match="did not converge|expectation-parameter space"):
        newton.newton_dual(np.array([0.5, 0.5]), np.zeros(2), A, grad, hess, ok)   # E[log θ] must be < 0


def test_generated_modules_embed_the_engine_solver():
    source = inspect.getsource(newton.newton_dual).replace("def newton_dual(", "def _newton_dual(", 1)
    polish = inspect.getsource(newton._newton_polish)
    users = [p for p in sorted((GENERATED / "numpy").glob("*.py")) if "def ordinary_from_expectation" in p.read_text()]
    assert {p.stem for p in users} >= {"beta_bernoulli", "gamma_poisson", "dirichlet_categorical_unrolled"}
    for p in users:
        assert source in p.read_text(encoding="utf-8") and polish in p.read_text(encoding="utf-8"), p.name
    mod = load_generated("beta_bernoulli")
    a, b = 3.5, 0.4
    mu = [special.digamma(a) - special.digamma(a + b), special.digamma(b) - special.digamma(a + b)]
    out = mod.ordinary_from_expectation(mu)
    assert abs(out["a"] - a) < 1e-9 and abs(out["b"] - b) < 1e-9


def _tilted_zipf():
    """A tilted Zipf law on k = 1..20, q(k) ∝ exp(λ1 k + λ2 log k): A = log Σ exp(<λ, T(k)>) (computed stably), μ =
    E[T], F = Cov[T].  At λ = (1, −1) all mass is near k = 20 and F is nearly singular (cond 7e4); at λ2 ≪ 0 it is
    a point mass at k = 1 (F ~ 1e-13): Newton's full step from (1, −1) lands there."""
    k = np.arange(1.0, 21.0)
    T = np.stack([k, np.log(k)], axis=1)

    def probs(lam):
        e = T @ lam
        w = np.exp(e - e.max())
        return w / w.sum()

    def A(lam):
        e = T @ lam
        return float(e.max() + np.log(np.sum(np.exp(e - e.max()))))

    def grad(lam):
        return probs(lam) @ T

    def hess(lam):
        p = probs(lam)
        c = T - p @ T
        return (c * p[:, None]).T @ c
    return A, grad, hess, lambda lam: True


@pytest.mark.parametrize("lam_star", [(-1.0, 0.0), (-2.0, -1.0), (0.5, -3.0), (-0.5, 1.0), (0.0, 0.0)])
def test_newton_dual_converges_from_a_nearly_singular_start(lam_star):
    """The dual φ = A − <λ, μ> is strictly convex but F at the start is nearly singular: Newton's full step overshoots
    to a point mass where no backtracked Newton step decreases φ (the solver before Levenberg–Marquardt damping and
    the step cap stopped with |∇A − μ| = 0.58 at λ* = (−1, 0) and 0.076 at (−2, −1))."""
    A, grad, hess, ok = _tilted_zipf()
    start = np.array([1.0, -1.0])
    assert np.linalg.cond(hess(start)) > 5e4
    lam_star = np.array(lam_star)
    lam = newton.newton_dual(grad(lam_star), start, A, grad, hess, ok)
    np.testing.assert_allclose(lam, lam_star, rtol=0, atol=1e-9)


@pytest.mark.parametrize("p,a,b", [(0.0, 2e-6, 1.0), (0.0, 1.0, 2e-6)])
def test_generated_gig_module_solves_next_to_a_zero(p, a, b):
    """The generalized inverse Gaussian's numpy module (blr_derive/ir/build.py: family_ir) next to the boundary a = 0
    or b = 0 of Ω, where F is badly conditioned: its solve stalled at |∇A − μ| = 7.5e4 at both points before the
    damping (tests/hunt_findings.py), at the second also with one ν for all coordinates (the boundary λ3 → 0 held
    λ1 at steps of 1e-5)."""
    import types

    from blr_derive.codegen.registry import emit
    from blr_derive.families.library import load_family
    from blr_derive.ir.build import family_ir
    fam = load_family("generalized_inverse_gaussian")
    mod = types.ModuleType("gig_maps")
    exec(compile(emit(family_ir(fam, fam.name), "numpy"), "<gig maps>", "exec"), mod.__dict__)
    mu = np.asarray(mod.expectation_parameters(np.asarray(mod.natural_parameters(p, a, b), dtype=float)))
    out = mod.ordinary_from_expectation(mu)
    assert abs(out["p"] - p) < 1e-9
    assert out["a"] == pytest.approx(a, rel=1e-9) and out["b"] == pytest.approx(b, rel=1e-9)


@pytest.mark.parametrize("lam_star", [(3.0, 1.0), (2.0, -1.0), (0.5, -3.0)])
def test_newton_dual_ends_at_the_rounding_of_mu(lam_star):
    """Past the stopping test (|∇A − μ| ≤ 1e-12 of μ's scale) up to three full Newton steps are taken while they
    lower the residual (_newton_polish): where F is ill-conditioned (cond 6e2 to 2e6 here) λ is off by up to
    κ·1e-12 at the test, far more than μ's rounding determines; after them the residual is at μ's rounding (it
    was 5.7e-14, 7.1e-15, 9.6e-14 here) and λ within the move μ's rounding makes, |F⁻¹|·ε|μ|."""
    A, grad, hess, ok = _tilted_zipf()
    lam_star = np.array(lam_star)
    mu = grad(lam_star)
    assert np.linalg.cond(hess(lam_star)) > 500
    lam = newton.newton_dual(mu, np.array([1.0, -1.0]), A, grad, hess, ok)
    eps = np.finfo(float).eps
    assert np.max(np.abs(grad(lam) - mu)) <= eps * (1 + np.max(np.abs(mu)))
    moves = np.abs(np.linalg.inv(hess(lam_star))) @ (eps * np.abs(mu))
    assert np.all(np.abs(lam - lam_star) <= moves), (lam - lam_star, moves)


@pytest.mark.parametrize("mu", [1e3, 1e9, 1e15])
def test_newton_dual_does_not_stall_where_the_solution_is_tiny(mu):
    """A = −log(−λ) (T = θ^(−3) of a Fréchet with shape 3, scale s: λ = −s³, μ = s^(−3)) from the start λ = −1: at
    μ = 1e9 (s = 1e-3, a hard point of `blr-derive check`) the solve reached λ = −9.99999996e-10 and stopped there
    with |∇A − μ| = 3.93, an ArithmeticError, because a step of 3.9e-18 was taken for "no move" (below 1e-16·(1 +
    |λ|)) although it moves λ by 4e-9 of itself; "no move" is now that λ − step equals λ.  Reference: λ = −1/μ."""
    def A(lam):
        return -np.log(-lam[0])

    def grad(lam):
        return np.array([-1 / lam[0]])

    def hess(lam):
        return np.array([[lam[0] ** -2.0]])
    lam = newton.newton_dual(np.array([mu]), np.array([-1.0]), A, grad, hess, lambda lam: bool(lam[0] < 0))
    assert lam[0] * mu == pytest.approx(-1.0, rel=1e-12)


@pytest.mark.parametrize("mu", [1e-9, 1e-15])
def test_newton_dual_reaches_a_solution_far_below_its_absolute_test(mu):
    """The stopping test |∇A − μ| ≤ 1e-12·(1 + |μ|) is absolute: for T = θ⁻³ of a Fréchet (λ = −s³, μ = 1/s³ =
    −1/λ) at μ = 1e-15 it held at λ = −1e12, 99.9 % off the solution −1e15 (at μ = 1e-9, 1.9e-4 off); the
    Newton steps taken past it while they lower the residual (_newton_polish) reach λ·μ = −1 to rounding."""
    def A(lam):
        return -np.log(-lam[0])

    def grad(lam):
        return np.array([-1 / lam[0]])

    def hess(lam):
        return np.array([[lam[0] ** -2.0]])
    lam = newton.newton_dual(np.array([mu]), np.array([-1.0]), A, grad, hess, lambda lam: bool(lam[0] < 0))
    assert lam[0] * mu == pytest.approx(-1.0, rel=1e-15)
