"""Recipes written from the docs by people who had not seen the catalog (a second fuzzing pass), run through the
torch, Triton (interpreted on CPU) and JAX targets against the numpy module of the same recipe."""
import inspect
import os

os.environ["TRITON_INTERPRET"] = "1"        # before any generated module imports triton (see test_triton.py)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from blr_derive import api  # noqa: E402
from blr_derive.core.errors import UnsupportedTarget  # noqa: E402
from conftest import FUNCTION_TARGETS, OPTIMIZER_TARGETS

pytestmark = pytest.mark.filterwarnings("ignore:(divide by zero|invalid value):RuntimeWarning")

# a ±1 Bernoulli in its mean-like parameter p: the update returns p = exp(2λ − logsumexp(0, 2λ))
BERNOULLI_P = """name: {name}
class_name: Bp
family:
  name: bern_p
  variable: theta
  support: binary_pm1
  parameters:
    p: {{domain: unit_interval}}
  sufficient_statistics: [theta]
  natural_parameters: [log(p/(1 - p))/2]
  sampler: sign(log(p/(1 - p))/2 + log(u/(1 - u))/2)
loss: abstract
learning_rate: lr
parameter: binary(log(p/(1 - p)))
hyperparameters:
  lr: {{default: 0.1}}
state_init: {{p: 0.5}}
approximations: [straight_through]
"""


def _optimizer(mod):
    return next(v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, torch.optim.Optimizer)
                and v.__module__ == mod.__name__)


@pytest.mark.parametrize("target", OPTIMIZER_TARGETS)
def test_logsumexp_with_a_number_among_its_arguments(target):
    """torch: torch.broadcast_tensors(0, x) raised TypeError at step(); Triton printed max + log(Σ) without
    parentheses, so x − logsumexp(0, x) flipped the sign of the log: p = 1.49 where numpy has 0.45."""
    d = api.derive(BERNOULLI_P.format(name=f"bp_{target}"))
    nm, tm = d.compile("numpy"), d.compile(target)
    grads = np.array([1.0, -1.0, 0.5, 0.0])
    st = nm.init(p=np.full(4, 0.5))
    w = torch.nn.Parameter(torch.zeros(4, dtype=torch.float32))
    opt = _optimizer(tm)([w])
    for _ in range(3):
        st = nm.step(st, oracles={"grad": lambda th: grads})
        w.grad = torch.tensor(grads, dtype=torch.float32)
        opt.step()
    # one step from p = 1/2: λ = 0 − 0.1·g/… gives p = σ(−0.2 g) exactly (σ(−0.2) = 0.4502)
    assert abs(float(nm.step(nm.init(p=np.full(4, 0.5)), oracles={"grad": lambda th: grads})["p"][0])
               - 1 / (1 + np.exp(0.2))) < 1e-15
    np.testing.assert_allclose(opt.state[w]["p"].numpy(), st["p"], rtol=2e-6)
    assert np.all((st["p"] > 0) & (st["p"] < 1)) and not np.allclose(st["p"], 0.5)


SAMPLED = """name: {name}
class_name: Sampled
family: gaussian_diag
loss: abstract
learning_rate: lr
hyperparameters:
  lr: 0.1
  ess: 100.0
  beta2: 0.999
state_init: {{h: 1.0}}
approximations:
  - monte_carlo: {{samples: {samples}}}
  - price_estimator
  - minibatch: {{size: ess}}
  - riemannian_correction: {{param: s}}
  - separate_learning_rates: {{s: 1 - beta2}}
  - change_variable: {{param: s, to: h, value: ess*h}}
"""


@pytest.mark.parametrize("target", OPTIMIZER_TARGETS)
def test_step_with_a_closure_draws_a_literal_number_of_samples(target):
    """``monte_carlo: {samples: 2}`` (a number, not a hyperparameter): step(closure) read
    ``self.param_groups[0]["2"]`` and raised KeyError.  It calls the closure twice and returns the mean loss."""
    tm = api.derive(SAMPLED.format(name=f"sampled_{target}", samples=2)).compile(target)
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
    opt = _optimizer(tm)([p])
    calls = []

    def closure():              # the README's closure: the loss at a sample, inside sampled_params
        opt.zero_grad()
        with opt.sampled_params(train=True):
            loss = (p ** 2).sum()
            loss.backward()
        calls.append(float(loss.detach()))
        return loss

    before = p.detach().clone()
    loss = opt.step(closure)
    assert len(calls) == 2 and float(loss) == pytest.approx(sum(calls) / 2, rel=1e-6)
    assert not torch.equal(p.detach(), before) and torch.isfinite(p).all()


def test_a_state_missing_from_a_checkpoint_that_holds_other_keys_starts_at_its_initial_value():
    """_state() skipped its per-key checks when the state held as many entries as the optimizer keeps, counting
    keys of another optimizer: switching amsgrad on after loading such a checkpoint gave a TypeError in
    _foreach_maximum_.  Now the running maximum starts at 0, as for a fresh state."""
    from conftest import load_generated
    Adam = load_generated("adam", "torch").Adam

    def run(extra):
        torch.manual_seed(0)
        p = torch.nn.Parameter(torch.randn(5, dtype=torch.float64))
        ref = torch.optim.Adam([p], lr=0.1)
        for _ in range(3):
            p.grad = torch.randn(5, dtype=torch.float64)
            ref.step()
        sd = ref.state_dict()
        sd["state"][0].update(extra)
        opt = Adam([p], lr=0.1)
        opt.load_state_dict(sd)
        opt.param_groups[0]["amsgrad"] = True                           # switched on after loading
        for _ in range(3):
            p.grad = torch.randn(5, dtype=torch.float64)
            opt.step()
        return p.detach().clone(), opt.state[p]["max_exp_avg_sq"].clone()

    p_foreign, m_foreign = run({"note": torch.tensor(1.0)})          # a key this optimizer does not keep
    p_zero2, m_zero2 = run({})
    torch.testing.assert_close(p_foreign, p_zero2, rtol=0, atol=0)
    torch.testing.assert_close(m_foreign, m_zero2, rtol=0, atol=0)
    assert float(m_foreign.min()) > 0


def test_tuple_hyperparameters_are_validated_at_construction_and_the_docstring_names_only_the_switches_taken():
    """``betas=(-0.5, 0.9)``, ``(nan, 0.9)`` and ``(0.9,)`` were accepted (the last failed at step() unpacking);
    a recipe whose ``peer: switches`` leaves out capturable/differentiable said in its docstring that it
    accepted them."""
    text = """name: tup
class_name: Tup
family: gaussian_diag
loss: abstract
learning_rate: lr
hyperparameters:
  lr: 0.01
  betas: {default: [0.9, 0.999], names: [beta1, beta2]}
state_init: {s: 0.0}
approximations:
  - delta
  - squared_gradient_hessian
  - ema_momentum: {rate: beta1}
  - separate_learning_rates: {s: 1 - beta2}
peer:
  switches: {keyword: [maximize, foreach]}
"""
    d = api.derive(text)
    for target in OPTIMIZER_TARGETS:
        cls = _optimizer(d.compile(target))
        p = [torch.nn.Parameter(torch.zeros(2))]
        for bad, msg in (((-0.5, 0.9), "index 0"), ((float("nan"), 0.9), "index 0"), ((0.9,), "expected 2 values")):
            with pytest.raises(ValueError, match=msg):
                cls(p, betas=bad)
        cls(p, betas=(0.0, 0.5))
    cls = _optimizer(d.compile("torch"))
    assert list(inspect.signature(cls).parameters)[-3:] == ["maximize", "foreach", "fused"]    # fused: always
    doc = " ".join(cls.__doc__.split())
    assert "Besides torch.optim's ``maximize`` (ascend), ``foreach`` (False: one tensor at a time) and ``fused``" in doc
    assert "capturable" not in doc and "differentiable" not in doc


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_init_when_every_state_has_a_default(target):
    """``state_init`` for the only state: init() read the state it was creating (KeyError 'lam').  Given no
    state, init() cannot know the shape and says so; given the state, it keeps it."""
    text = "name: f5_{t}\nfamily: bernoulli_logit\nloss: abstract\nstate_init: {{lam: 0.5}}\napproximations: [straight_through]\n"
    mod = api.derive(text.format(t=target)).compile(target)
    with pytest.raises(TypeError, match="init\\(\\) needs a state of the shape of lam"):
        mod.init()
    np.testing.assert_array_equal(np.asarray(mod.init(lam=np.array([1.0, -2.0]))["lam"]), [1.0, -2.0])


@pytest.mark.parametrize("name, hyper, line", [("f2", "FxState", 6), ("FxState", "beta", 1),
                                              ("f3", "FxTransformation", 6)])
def test_jax_names_that_would_shadow_the_optax_modules_classes_are_refused(tmp_path, capsys, name, hyper, line):
    """A hyperparameter named like the generated state class shadowed it inside the factory ('float' object is
    not callable at init); a recipe named so replaced the class.  Both generated with exit status 0."""
    from blr_derive.cli import main
    p = tmp_path / "r.yaml"
    p.write_text(f"name: {name}\nclass_name: Fx\nfamily: gaussian_diag\nloss: abstract\nlearning_rate: lr\n"
                 f"hyperparameters: {{lr: 0.1, {hyper}: 0.9}}\nstate_init: {{s: 1.0}}\n"
                 f"approximations: [delta, squared_gradient_hessian, {{ema_momentum: {{rate: {hyper}}}}}]\n")
    assert main([str(p), "--target", "jax", "-o", str(tmp_path / "out.py")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"blr-derive: error: {p}:{line}: ") and "the jax target defines the classes FxState" in err
    assert not (tmp_path / "out.py").exists()


def test_an_update_that_reads_no_gradient_moves_every_parameter_and_refuses_maximize():
    """An explicit loss with exact expectations: the torch step skipped parameters whose .grad was None (all of
    them, since nothing computes one) and ignored maximize=True.  Now every parameter moves, as the numpy step
    does, and maximize is refused (the recipe's loss is what to negate).  The quartic is convex (a ≥ 0), so its
    precision stays positive for ρ ≤ 1 and torch generates it (a non-convex one is refused: test_domain_checks.py)."""
    text = """name: quartic_exact
class_name: Quartic
family: gaussian_diag
loss: 0.25*(theta**2 + a)**2 + b*theta
hyperparameters: {rho: 0.2, a: 1.0, b: 0.1}
state_init: {s: 1.0}
approximations: [exact]
"""
    d = api.derive(text)
    nm, cls = d.compile("numpy"), _optimizer(d.compile("torch"))
    p = torch.nn.Parameter(torch.tensor([0.5, -1.0], dtype=torch.float64))
    q = torch.nn.Parameter(torch.tensor([2.0], dtype=torch.float64))
    opt = cls([p, q])
    st = nm.init(m=np.array([0.5, -1.0, 2.0]), s=np.ones(3))
    for _ in range(3):
        opt.step()
        st = nm.step(st)
    np.testing.assert_allclose(torch.cat([p.detach(), q.detach()]).numpy(), st["m"], rtol=1e-14)
    assert not np.allclose(st["m"], [0.5, -1.0, 2.0])
    with pytest.raises(ValueError, match="maximize=True has no effect: the update reads no gradient"):
        cls([p], maximize=True)


# the Gamma by its shape k and mean mu (docs/tutorial-own-family.md) under natural_momentum, the torch parameter
# holding mu: the previous mean mu_prev starts as a copy of mu, which starts as the tensor given
GAMMA_MEAN_MOMENTUM = """name: {name}
family:
  name: gamma_mean
  variable: theta
  support: positive
  parameters:
    k: {{domain: positive}}
    mu: {{domain: positive}}
  sufficient_statistics: [log(theta), theta]
  natural_parameters: [k - 1, -k/mu]
loss: (n + b0)*theta - (c + a0 - 1)*log(theta)
parameter: mu
state_init: {{k: 1.0, k_prev: 1.0}}
approximations:
  - exact
  - natural_momentum: {{momentum: gam}}
hyperparameters:
  rho: {{default: 0.3}}
  gam: {{default: 0.5}}
  a0: {{default: 2.0}}
  b0: {{default: 1.0}}
  n: {{default: 10.0}}
  c: {{default: 37.0}}
"""


@pytest.mark.parametrize("target", OPTIMIZER_TARGETS)
def test_a_state_copying_the_state_the_parameter_holds_starts_as_the_tensor_given(target):
    """`state 'mu_prev' starts as a copy of 'mu'; the torch target can only copy the parameters themselves`: mu is
    what the parameter holds (`parameter: mu`), so mu_prev starts as the tensor too.  Six steps against Eq. 80
    iterated by hand in λ = (k − 1, −k/μ): λ ← (1 − ρ)λ + ρλ* + γ(λ − λ_prev), λ* = (c + a0 − 1, −(n + b0))."""
    rho, gam, a0, b0, n, c = 0.3, 0.5, 2.0, 1.0, 10.0, 37.0
    mu0 = np.array([2.5, 0.4, 7.0])
    lam = prev = np.stack([np.ones(3) - 1, -1 / mu0])
    star = np.array([[c + a0 - 1], [-(n + b0)]])
    for _ in range(6):
        lam, prev = (1 - rho) * lam + rho * star + gam * (lam - prev), lam
    k_want, mu_want = lam[0] + 1, -(lam[0] + 1) / lam[1]
    tm = api.derive(GAMMA_MEAN_MOMENTUM.format(name=f"gm_momentum_{target}")).compile(target)
    dtype, tol = (torch.float64, 1e-12) if target == "torch" else (torch.float32, 1e-5)     # Triton: float32 only
    w = torch.nn.Parameter(torch.tensor(mu0, dtype=dtype))
    opt = _optimizer(tm)([w])
    for _ in range(6):
        w.grad = torch.zeros_like(w)
        opt.step()
    assert np.max(np.abs(w.detach().double().numpy() - mu_want) / mu_want) < tol
    assert np.max(np.abs(opt.state[w]["k"].double().numpy() - k_want) / k_want) < tol


# an exponential rate with a prior Exp(rate 2) in the family: λ0 = −2 is the prior's natural parameter
EXPONENTIAL_PRIOR = """name: {name}
family: exponential
loss: c*theta
parameter: r
approximations:
  - exact
  - family_prior: {{lambda1: lam0}}
hyperparameters:
  rho: {{default: 0.4}}
  lam0: {{default: -2.0}}
  c: {{default: 3.0}}
"""


@pytest.mark.parametrize("target", OPTIMIZER_TARGETS)
def test_a_hyperparameter_with_a_negative_default_is_accepted_by_the_constructor(target):
    """Without `peer: validate` every number had to be non-negative, so the optimizer refused its own default
    (`ValueError: Invalid lam0: -2.0`); a negative default says a negative value means something.  The step is the
    conjugate one, r ← (1 − ρ)r + ρ(c − λ0) (Eq. 6 with ∇_μE[cθ] = c, λ = −r, the prior's −λ0 from Eq. 1), and the
    other hyperparameters are still checked."""
    tm = api.derive(EXPONENTIAL_PRIOR.format(name=f"exp_prior_{target}")).compile(target)
    cls = _optimizer(tm)
    r0 = np.array([0.5, 1.0, 4.0])
    for kw, (rho, lam0, c) in (({}, (0.4, -2.0, 3.0)), ({"lam0": -0.25, "rho": 0.9}, (0.9, -0.25, 3.0))):
        w = torch.nn.Parameter(torch.tensor(r0, dtype=torch.float32))
        opt = cls([w], **kw)
        w.grad = torch.zeros_like(w)
        opt.step()
        want = (1 - rho) * r0 + rho * (c - lam0)
        assert np.max(np.abs(w.detach().double().numpy() - want) / want) < 1e-6
    with pytest.raises(ValueError, match="Invalid rho: -0.5"):
        cls([torch.nn.Parameter(torch.ones(2))], rho=-0.5)


@pytest.mark.parametrize("target", OPTIMIZER_TARGETS)
def test_the_refusal_of_an_explicit_losss_data_names_what_works(target):
    """It said `data 'c' needs a default`, and a default on an explicit loss's data is refused (`a default is for
    the data of an abstract loss`); it now names the hyperparameter that the test above shows to work."""
    from blr_derive.core.errors import UnsupportedTarget
    text = EXPONENTIAL_PRIOR.format(name=f"exp_data_{target}").replace(
        "loss: c*theta", "loss: {expression: c*theta, data: {c: {}}}").replace("  c: {default: 3.0}\n", "")
    with pytest.raises(UnsupportedTarget) as err:
        api.derive(text).compile(target)
    assert "data 'c' has none" in str(err.value) and "({c: {default: 1.0}} under hyperparameters)" in str(err.value)


# binary weights in {−1, +1} whose parameters hold the Bernoulli's mean 2p − 1, under a per-coordinate loss in θ
BERNOULLI_MEAN = """name: {name}
class_name: BinaryMean
family: bernoulli
loss: 0.5*tau*(theta - y)**2 + c*theta
parameter: 2*p - 1
{init}approximations: [exact]
hyperparameters: {{rho: 0.3, tau: 1.5, c: 0.2, y: 0.4}}
"""


@pytest.mark.parametrize("target", OPTIMIZER_TARGETS)
def test_a_positive_state_the_parameter_does_not_hold_needs_a_start_of_its_own(target):
    """`parameter: 2*p - 1` without a start for p: p started as a copy of the tensor given, which holds 2p − 1, so
    weights 0 and −0.5 gave p = 0 and −0.5, the parameters −1 and −2 at construction and NaN after one step, with
    no message.  Now the target refuses it (the command line names the `parameter` line) and asks for `state_init`; with p = ½ given,
    five steps (no parameter has a .grad: the update reads none, and the Triton step skipped every parameter
    without one, so p stayed ½) are Eq. 6 in λ = ½ log(p/(1 − p)): ∇_μ E_q[ℓ] = (ℓ(1) − ℓ(−1))/2 = c − τy, λ ← (1 − ρ)λ − ρ(c − τy)."""
    with pytest.raises(UnsupportedTarget, match=r"state 'p' would start as a copy of the tensor given, but the "
                                        r"parameters hold 2\*p - 1.*state_init: \{p: 0\.5\}"):
        api.derive(BERNOULLI_MEAN.format(name=f"bm_{target}", init="")).code(target)
    tm = api.derive(BERNOULLI_MEAN.format(name=f"bm_{target}_init", init="state_init: {p: 0.5}\n")).compile(target)
    dtype, tol = (torch.float64, 1e-13) if target == "torch" else (torch.float32, 1e-6)
    w = torch.nn.Parameter(torch.tensor([0.0, 0.3, -0.5], dtype=dtype))
    opt = _optimizer(tm)([w])
    assert torch.all(w.detach() == 0)                   # p = ½: the mean 0
    lam = 0.0
    for _ in range(5):
        opt.step()
        lam = 0.7 * lam - 0.3 * (0.2 - 1.5 * 0.4)
    p = 1 / (1 + np.exp(-2 * lam))
    np.testing.assert_allclose(opt.state[w]["p"].double().numpy(), p, rtol=tol)
    np.testing.assert_allclose(w.detach().double().numpy(), 2 * p - 1, rtol=tol)
