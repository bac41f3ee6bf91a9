"""Bernoulli candidates (Sec. 4.5): exact finite-sum natural gradients, STE (Eq. 48) and BayesBiNN (Eq. 52).

References are written here from the paper's equations; the engine never sees them."""
import math

import numpy as np
import pytest
import sympy as sp
import torch

from blr_derive.derive.driver import derive
from blr_derive.core.errors import SpecError
from blr_derive.candidates.load import load_recipe
from conftest import load_generated


def recipe_file(tmp_path, text, name="r.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return load_recipe(p)


# ----------------------------------------------------------------------- exact: a finite sum over {-1, +1}

def loss_np(theta, a, y):
    return np.exp(a * theta) + np.log1p(np.exp(-y * theta)) + theta ** 3


EXPLICIT = """
name: explicit_{fam}
family: {fam}
loss:
  expression: exp(a*theta) + log(1 + exp(-y*theta)) + theta**3
  data:
    y: {{}}
hyperparameters:
  a: {{default: 0.5}}
  rho: {{default: 0.3}}
approximations:
  - exact
"""


@pytest.mark.parametrize("fam", ["bernoulli", "bernoulli_logit"])
def test_exact_natural_gradient_of_a_nonlinear_loss_is_a_finite_sum(tmp_path, fam):
    """E_q[ℓ] = q(+1)ℓ(+1) + q(-1)ℓ(-1) for a loss that is not linear in T; ∇_μ against central differences."""
    r = recipe_file(tmp_path, EXPLICIT.format(fam=fam))
    D = derive(r)
    (g,) = [D.expand_defs(g) for g in D.natural_gradient.grads]      # the sums over the support written out
    (param,) = [p.symbol for p in r.family.params.values()]
    a_s, y_s = r.hyper_symbol("a"), r.data[0].symbol
    f = sp.lambdify((param, a_s, y_s, r.family.mu[0]), g,
                    [{"logsumexp": lambda *xs: np.logaddexp.reduce(np.broadcast_arrays(*xs)),
                      "softplus": lambda x: np.logaddexp(0.0, x)}, "numpy"])     # the loss's log(1 + e^u)
    a, y = 0.7, -1.3
    for mu in (-0.8, -0.1, 0.35, 0.9):
        E = lambda m: (1 + m) / 2 * loss_np(1.0, a, y) + (1 - m) / 2 * loss_np(-1.0, a, y)
        h = 1e-6
        fd = (E(mu + h) - E(mu - h)) / (2 * h)
        state = (1 + mu) / 2 if fam == "bernoulli" else math.atanh(mu)
        got = float(f(state, a, y, mu))
        assert abs(got - fd) < 1e-8 * max(1.0, abs(fd))
    # the generated step is Eq. 6 with that gradient
    mod = load_module(D, r)
    state_name = str(param)
    s0 = 0.3 if fam == "bernoulli" else -0.4
    lam0 = 0.5 * math.log(s0 / (1 - s0)) if fam == "bernoulli" else s0
    mu0 = math.tanh(lam0)
    nat = (loss_np(1.0, a, y) - loss_np(-1.0, a, y)) / 2
    out = mod.step({state_name: np.array(s0)}, data={"y": y}, a=a, rho=0.3)
    lam1 = (1 - 0.3) * lam0 - 0.3 * nat
    want = 1 / (1 + math.exp(-2 * lam1)) if fam == "bernoulli" else lam1
    np.testing.assert_allclose(out[state_name], want, rtol=1e-12)
    assert abs(mu0) < 1


def load_module(D, r):
    import types

    from blr_derive.ir.build import build_ir
    from blr_derive.codegen.registry import emit
    mod = types.ModuleType(f"_gen_{r.name}")
    exec(compile(emit(build_ir(D, r.name), "numpy"), r.name, "exec"), mod.__dict__)
    return mod


# ----------------------------------------------------------------------- STE, Eq. 48

def grad_np(theta):
    """The gradient of a fixed nonlinear loss ℓ(θ) = Σ (tanh(Wθ) - c)² / 2 (any oracle would do)."""
    W = np.array([[0.5, -1.0, 0.3, 0.8], [0.2, 0.4, -0.6, 1.1], [-0.7, 0.1, 0.9, -0.2]])
    c = np.array([0.3, -0.5, 0.8])
    z = np.tanh(W @ theta)
    return W.T @ ((z - c) * (1 - z ** 2))


def test_ste_numpy_equals_eq_48():
    mod = load_generated("ste")
    lat = np.array([0.3, -0.2, 0.05, -1.0])
    ref = lat.copy()
    state = mod.init(lam=lat)
    alpha = 0.07
    for _ in range(30):
        ref = ref - alpha * grad_np(np.sign(ref))                     # Eq. 48
        state = mod.step(state, oracles={"grad": grad_np}, lr=alpha)
        np.testing.assert_array_equal(state["lam"], ref)
        np.testing.assert_array_equal(mod.parameter(state), np.sign(ref))   # the binary weights (recipe 'parameter')


def test_ste_torch_equals_eq_48():
    mod = load_generated("ste", "torch")
    torch.manual_seed(0)
    X = torch.randn(32, 6, dtype=torch.float64)
    y = torch.randn(32, 2, dtype=torch.float64)
    lin = torch.nn.Linear(6, 2, bias=False).to(torch.float64)
    latent = lin.weight.detach().clone()
    opt = mod.STE(lin.parameters(), lr=0.05)
    assert torch.equal(lin.weight.detach(), torch.sign(latent))      # the parameter holds sign(λ) from the start
    for _ in range(25):
        opt.zero_grad()
        ((lin(X) - y) ** 2).mean().backward()
        w = torch.sign(latent).requires_grad_(True)
        ((X @ w.T - y) ** 2).mean().backward()
        latent = torch.add(latent, w.grad, alpha=-0.05)                # Eq. 48 (θ̃ - αg, one rounding as _foreach_add)
        opt.step()
        assert torch.equal(opt.state[lin.weight]["lam"], latent)
        assert torch.equal(lin.weight.detach(), torch.sign(latent))


# ----------------------------------------------------------------------- BayesBiNN, Eq. 52

def eq52_numpy(lam, draws, grad, rho, tau, N=1.0, lam0=0.0, beta=0.0, m=None, S=1):
    """Eq. 52 (with the prior λ₀, the N scaling of Eq. 34 and EMA momentum of Eq. 77 as options)."""
    acc = np.zeros_like(lam)
    for k in range(S):
        u = draws.random(lam.shape)
        delta = 0.5 * np.log(u / (1 - u))                              # δ(ε), Eq. 50
        theta = np.tanh((lam + delta) / tau)                           # relaxed sample, Eq. 52
        s = (1 - theta ** 2) / (tau * (1 - np.tanh(lam) ** 2))         # s_t below Eq. 52
        acc += (s * grad(theta) - acc) / (k + 1)
    m = (1 - beta) * N * acc if m is None else beta * m + (1 - beta) * N * acc
    return (1 - rho) * lam - rho * m + rho * lam0, m


@pytest.mark.parametrize("kw", [dict(), dict(N=5.0, lam0=0.4), dict(N=4.0, beta=0.9, S=3, tau=0.5)],
                         ids=["eq52", "prior_N", "momentum_samples"])
def test_bayesbinn_numpy_equals_eq_52(kw):
    """|λ| stays below ~4 here: the reference's 1 - tanh²(λ) (the paper's form) cancels for larger |λ|, where
    the generated sech²(λ) is the accurate one (see the float32 test below)."""
    mod = load_generated("bayesbinn")
    rho, tau = 0.1, kw.get("tau", 1.0)
    lam = np.array([0.3, -0.2, 0.05, -1.0])
    state = mod.init(lam=lam)
    ref, m = lam.copy(), None
    rng_gen, rng_ref = np.random.default_rng(7), np.random.default_rng(7)
    for _ in range(20):
        ref, m = eq52_numpy(ref, rng_ref, grad_np, rho, tau, kw.get("N", 1.0), kw.get("lam0", 0.0),
                            kw.get("beta", 0.0), m, kw.get("S", 1))
        state = mod.step(state, oracles={"grad": grad_np}, rng=rng_gen, lr=rho, temperature=tau, eps=0.0,
                         train_set_size=kw.get("N", 1.0), prior_p=1 / (1 + math.exp(-2 * kw.get("lam0", 0.0))),
                         momentum=kw.get("beta", 0.0), mc_samples=kw.get("S", 1))
        np.testing.assert_allclose(state["lam"], ref, rtol=1e-12, atol=1e-14)


def test_bayesbinn_torch_equals_eq_52():
    mod = load_generated("bayesbinn", "torch")
    torch.manual_seed(0)
    X = torch.randn(32, 5, dtype=torch.float64)
    y = (X[:, 0] - X[:, 1] > 0).long()
    lin = torch.nn.Linear(5, 2, bias=False).to(torch.float64)
    lam = lin.weight.detach().clone()
    rho, tau, N, prior_p = 0.05, 0.7, 32.0, 0.3
    lam0 = 0.5 * math.log(prior_p / (1 - prior_p))                    # the prior's natural parameter (negative)
    opt = mod.BayesBiNN(lin.parameters(), lr=rho, temperature=tau, train_set_size=N, prior_p=prior_p, eps=0.0)
    for step in range(15):
        torch.manual_seed(100 + step)
        with opt.sampled_params(train=True):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(lin(X), y).backward()
        opt.step()
        # reference: the same uniform draw (one flat torch.rand per group), Eq. 52
        torch.manual_seed(100 + step)
        u = torch.rand(lam.numel(), dtype=torch.float64).view_as(lam)
        theta = torch.tanh((lam + 0.5 * torch.log(u / (1 - u))) / tau).requires_grad_(True)
        torch.nn.functional.cross_entropy(X @ theta.T, y).backward()
        s = (1 - theta.detach() ** 2) / (tau * (1 - torch.tanh(lam) ** 2))
        lam = (1 - rho) * lam - rho * N * s * theta.grad + rho * lam0
        torch.testing.assert_close(opt.state[lin.weight]["lam"], lam, rtol=1e-12, atol=1e-13)
        assert torch.equal(lin.weight.detach(), torch.sign(opt.state[lin.weight]["lam"]))


def test_bayesbinn_trains_a_binary_mlp():
    """A 16-64-2 MLP whose weights are all binary at prediction learns a separable problem (Sec. 4.5)."""
    mod = load_generated("bayesbinn", "torch")
    dt = torch.float64
    g = torch.Generator().manual_seed(0)
    D, H, n = 16, 64, 2000
    w_star = torch.sign(torch.randn(D, generator=g, dtype=dt))
    X = torch.randn(n + 1000, D, generator=g, dtype=dt)
    y = (X @ w_star > 0).long()
    Xtr, ytr, Xte, yte = X[:n], y[:n], X[n:], y[n:]
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(D, H, bias=False), torch.nn.BatchNorm1d(H, affine=False),
                              torch.nn.Hardtanh(), torch.nn.Linear(H, 2, bias=False)).to(dt)
    opt = mod.BayesBiNN(net.parameters(), lr=1e-3, temperature=1.0, train_set_size=n)
    for epoch in range(4):
        perm = torch.randperm(n)
        for i in range(0, n, 100):
            b = perm[i:i + 100]
            with opt.sampled_params(train=True):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(Xtr[b]) / 2, ytr[b]).backward()
            opt.step()
    net.eval()
    weights = torch.cat([p.detach().flatten() for p in net.parameters()])
    assert set(weights.tolist()) == {-1.0, 1.0}
    with torch.no_grad():
        acc = (net(Xte).argmax(1) == yte).double().mean().item()
    assert acc >= 0.95


# ----------------------------------------------------------------------- the relaxation itself

class Fixed:
    def __init__(self, u):
        self.u = u

    def random(self, shape):
        return np.broadcast_to(self.u, shape).copy()


def relaxed_loss(theta):
    return np.sin(2 * theta) + 0.5 * theta ** 2


def relaxed_grad(theta):
    return 2 * np.cos(2 * theta) + theta


@pytest.mark.parametrize("tau", [1.0, 0.3])
def test_relaxed_natural_gradient_is_the_derivative_in_mu_of_the_relaxed_loss(tau):
    """For a fixed draw u, s∘∇ℓ(θ̂) (Eq. 51) = d/dμ ℓ(θ̂(u; λ(μ))), λ(μ) = atanh(μ): central differences."""
    mod = load_generated("bayesbinn")
    u = np.array([0.1, 0.45, 0.8, 0.97])
    lam = np.array([0.4, -0.3, 1.2, -0.9])
    out = mod.step(mod.init(lam=lam), oracles={"grad": relaxed_grad}, rng=Fixed(u), lr=1.0, temperature=tau,
                   eps=0.0)
    nat = -out["lam"]                                                  # ρ = 1: λ' = -∇_μ
    f = lambda mu: relaxed_loss(np.tanh((np.arctanh(mu) + 0.5 * np.log(u / (1 - u))) / tau))
    mu, h = np.tanh(lam), 1e-6
    fd = (f(mu + h) - f(mu - h)) / (2 * h)
    np.testing.assert_allclose(nat, fd, rtol=1e-7, atol=1e-9)


def test_relaxation_derived_for_the_p_parameterized_family_matches_autograd():
    """On `bernoulli` (state p) the engine derives s = (θ̂² - 1)/(4τp(p - 1)); torch autograd of θ̂(u; p(μ))."""
    from blr_derive.candidates.load import recipe_from_spec
    from blr_derive.core.yamlio import load_yaml_text
    spec = load_yaml_text("name: r\nfamily: bernoulli\nloss: abstract\n"
                          "approximations:\n  - concrete_relaxation: {temperature: tau}\n"
                          "hyperparameters:\n  tau: {default: 0.6}\n")
    r = recipe_from_spec(spec)
    D = derive(r)
    rel = D.relaxation
    p = r.family.params["p"].symbol
    # s at the sample θ̂(u; p, τ), and the sample itself, as the derivation records them for check
    s_fn = sp.lambdify((rel.u, p, rel.temperature), rel.scale_evaluated, "math")
    th_fn = sp.lambdify((rel.u, p, rel.temperature), rel.sample, "math")
    for uu, pp in [(0.2, 0.3), (0.6, 0.85), (0.93, 0.1)]:
        mu = torch.tensor(2 * pp - 1, dtype=torch.float64, requires_grad=True)
        P = (1 + mu) / 2
        theta = torch.tanh((0.5 * torch.log(P / (1 - P)) + 0.5 * math.log(uu / (1 - uu))) / 0.6)
        theta.backward()
        t = th_fn(uu, pp, 0.6)
        assert abs(t - theta.item()) < 1e-14
        assert abs(s_fn(uu, pp, 0.6) - mu.grad.item()) < 1e-12 * max(1.0, abs(mu.grad.item()))
        # the closed form the docstring states, at the same sample
        assert abs(s_fn(uu, pp, 0.6) - (t * t - 1) / (4 * 0.6 * pp * (pp - 1))) < 1e-12 * max(1.0, abs(mu.grad.item()))


def test_zero_noise_small_temperature_limit_is_the_ste_sample():
    """θ̂ at u = 1/2 (δ = 0) tends to sign(λ) as τ → 0 (Eq. 50); STE's oracle is asked exactly there, at the binary
    value binary(λ) (= sign(λ) for λ ≠ 0, and +1, a sample of q, at λ = 0)."""
    lam = np.array([0.3, -0.02, 1.5, -2.0])
    for tau in (1e-2, 1e-3):
        theta = np.tanh((lam + 0.5 * np.log(0.5 / 0.5)) / tau)
        assert np.max(np.abs(theta - np.sign(lam))) < 2 * math.exp(-2 * 0.02 / tau) + 1e-15
    r = load_recipe(__import__("conftest").CATALOG / "ste.yaml")
    D = derive(r)
    from blr_derive.core.specialfns import binary
    assert D.oracle_calls[0][2] == binary(r.family.params["lam"].symbol)


def test_relaxation_rules_need_a_hard_threshold_sampler(tmp_path):
    bad = recipe_file(tmp_path, "name: r\nfamily: exponential\nloss: abstract\n"
                      "approximations:\n  - concrete_relaxation: {temperature: 1}\n")
    with pytest.raises(SpecError, match="relaxes a hard threshold"):
        derive(bad)
    bad = recipe_file(tmp_path, "name: r\nfamily: bernoulli_logit\nloss: abstract\n"
                      "approximations:\n  - reparameterization\n", "b.yaml")
    with pytest.raises(SpecError, match="differentiable sampler"):
        derive(bad)


def test_bayesbinn_float32_scale_stays_finite_where_tanh_saturates():
    """s is evaluated with sech² (no 1 - tanh² cancellation): at |λ| ≥ 9, where float32 tanh(λ)² rounds to 1,
    the float32 step still equals the float64 one (Eq. 51 computed with sech² in float64)."""
    mod = load_generated("bayesbinn", "torch")
    lam0 = torch.tensor([12.0, -15.0, 9.5, 0.3, 40.0, -60.0], dtype=torch.float64)
    X = torch.linspace(-1, 1, 6, dtype=torch.float64)
    w = torch.nn.Parameter(lam0.to(torch.float32).clone())
    opt = mod.BayesBiNN([w], lr=0.5, temperature=2.0)
    torch.manual_seed(3)
    with opt.sampled_params(train=True):
        ((w * X.to(torch.float32)).sum() ** 2).backward()
    opt.step()
    torch.manual_seed(3)
    u = torch.rand(6, dtype=torch.float32).to(torch.float64)
    y = (lam0 + 0.5 * torch.log(u / (1 - u))) / 2.0
    theta = torch.tanh(y).to(torch.float32).to(torch.float64)
    g = 2 * (theta * X).sum() * X
    s = (1 / torch.cosh(y) ** 2 / 2.0 + 1e-10) / (1 / torch.cosh(lam0) ** 2 + 1e-10)
    want = 0.5 * lam0 - 0.5 * s * g
    got = opt.state[w]["lam"].to(torch.float64)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, rtol=2e-5, atol=1e-5)
    assert torch.equal(w.detach(), torch.sign(opt.state[w]["lam"]))


def test_bayesbinn_fused_kernel_equals_foreach():
    """fused=True (one torch.compile'd kernel writing λ, the momentum and sign(λ)) equals the _foreach path."""
    mod = load_generated("bayesbinn", "torch")
    torch.manual_seed(0)
    X, y = torch.randn(32, 5), (torch.randn(32) > 0).long()
    nets = [torch.nn.Linear(5, 2, bias=False) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    opts = [mod.BayesBiNN(n.parameters(), lr=0.05, train_set_size=32.0, momentum=0.5, fused=f)
            for n, f in zip(nets, (False, True))]
    for step in range(5):
        for n, o in zip(nets, opts):
            torch.manual_seed(step)
            with o.sampled_params(train=True):
                o.zero_grad()
                torch.nn.functional.cross_entropy(n(X), y).backward()
            o.step()
    a, b = (o.state[n.weight] for n, o in zip(nets, opts))
    torch.testing.assert_close(b["lam"], a["lam"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b["grad_avg"], a["grad_avg"], rtol=1e-5, atol=1e-6)
    assert torch.equal(nets[1].weight, torch.sign(b["lam"]))


def test_exact_finite_sum_on_the_categorical_family(tmp_path):
    """The same finite sum over the K = 3 one-hot points; the coupled λ_k = log(p_k/p_3) are inverted by the
    family's closed-form softmax.  Reference: Eq. 6 with ∇_μ E_q[ℓ] = (ℓ(e_k) - ℓ(e_3))_k."""
    r = recipe_file(tmp_path, "name: catx\nfamily: categorical\nloss:\n"
                    "  expression: exp(c*theta1) + log(1 + theta2 + 2*theta3)*w\n  data:\n    w: {}\n"
                    "hyperparameters:\n  c: {default: 0.7}\n  rho: {default: 0.5}\napproximations:\n  - exact\n")
    D = derive(r)
    mod = load_module(D, r)
    c, w, rho, p = 0.7, 1.3, 0.4, np.array([0.2, 0.5, 0.3])
    ell = np.array([math.exp(c), 1 + w * math.log(2), 1 + w * math.log(3)])
    lam = np.log(p[:2] / p[2])
    lam1 = (1 - rho) * lam - rho * (ell[:2] - ell[2])
    want = np.exp(lam1) / (1 + np.exp(lam1).sum())
    out = mod.step({"p1": np.array(p[0]), "p2": np.array(p[1])}, data={"w": w}, c=c, rho=rho)
    np.testing.assert_allclose([out["p1"], out["p2"]], want, rtol=1e-12)


@pytest.mark.parametrize("fam", ["bernoulli", "bernoulli_logit"])
def test_hard_threshold_sampler_has_the_bernoulli_law(fam):
    """θ = sign(λ + ½ log(u/(1-u))) is +1 exactly when u > 1 - p: on a midpoint grid of u the frequency of +1
    is p to within the grid step."""
    from blr_derive.families.library import load_family
    f = load_family(fam)
    (param,) = [p.symbol for p in f.params.values()]
    u = sp.Symbol("u", positive=True)
    draw = sp.lambdify((u, param), f.sampler, "numpy")
    n = 100_000
    grid = (np.arange(n) + 0.5) / n
    for p in (0.1, 0.5, 0.73):
        arg = p if fam == "bernoulli" else 0.5 * math.log(p / (1 - p))
        assert abs(np.mean(draw(grid, arg) == 1) - p) <= 1.0 / n


def test_score_function_on_the_bernoulli_matches_the_exact_natural_gradient(tmp_path):
    """The sampler also enables the score-function rule; its estimate of ∇_μ E_q[ℓ] is unbiased for the exact
    finite-sum value (ℓ(+1) - ℓ(-1))/2."""
    r = recipe_file(tmp_path, "name: sfb\nfamily: bernoulli_logit\nloss: abstract\nhyperparameters:\n"
                    "  S: {default: 100, type: int}\napproximations:\n  - score_function: {samples: S}\n")
    mod = load_module(derive(r), r)
    loss = lambda t: np.exp(0.8 * t) + 0.3 * t ** 3
    lam, S = np.array(0.35), 50_000
    out = mod.step({"lam": lam}, oracles={"loss": loss}, rng=np.random.default_rng(11), rho=1.0, S=S)
    exact = (loss(1.0) - loss(-1.0)) / 2
    mu = math.tanh(lam)
    theta = np.where(np.random.default_rng(12).random(S) < (1 + mu) / 2, 1.0, -1.0)
    se = np.std(loss(theta) * (theta - mu)) / (1 - mu ** 2) / math.sqrt(S)
    assert abs(-out["lam"] - exact) < 5 * se


def test_check_verifies_the_relaxation_scale_numerically():
    """`blr-derive check` on bayesbinn compares the derived s = ∇_μ θ̂ with central differences of θ̂(u; μ)."""
    from blr_derive.verify.check import check_recipe_updates
    checks = {c.name: c for c in check_recipe_updates(load_recipe(__import__("conftest").CATALOG / "bayesbinn.yaml"))}
    c = checks["relaxation scale vs finite differences"]
    assert c.passed and c.value < 1e-8
    assert checks["generated update vs symbolic update"].passed


def test_check_on_a_categorical_recipe_draws_points_inside_the_simplex(tmp_path):
    """`blr-derive check` draws the coupled simplex coordinates jointly (p1 + p2 < 1), so the generated update,
    the symbolic update and the finite-difference natural gradient are compared at valid points."""
    from blr_derive.verify.check import check_file
    r = tmp_path / "catx.yaml"
    r.write_text("name: catx\nfamily: categorical\nloss:\n"
                 "  expression: exp(c*theta1) + log(1 + theta2 + 2*theta3)*w\n  data:\n    w: {}\n"
                 "hyperparameters:\n  c: {default: 0.7}\n  rho: {default: 0.5}\napproximations:\n  - exact\n")
    for seed in range(4):
        rep = check_file(r, seed=seed)
        assert all(c.passed for c in rep.checks), [(c.name, c.value) for c in rep.checks if not c.passed]
        assert any(c.name == "natural gradient vs finite differences" for c in rep.checks)
