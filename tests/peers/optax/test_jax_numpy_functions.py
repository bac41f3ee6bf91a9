"""The jax target's function modules (plain jax.numpy ``init``/``step`` and the rest of the numpy target's module)
against the numpy target's modules of the same recipes: the same step on random valid inputs, to 1e-12 in float64,
called directly and under ``jax.jit`` (state, data, numeric hyperparameters, the key and the oracles' coefficients
traced; the hyperparameters in STATIC_HYPERPARAMETERS static), with the entry points and the family's parameter
maps.  Monte Carlo recipes are fed the same draws: the numpy module gets a generator (:class:`Replay`) that hands
it the jax module's draws in the order its ``step`` documents.  Two user recipes cover what the catalog lacks: a
rejection sampler with a recipe ``parameter`` and two draws of two laws per sample."""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import yaml

from blr_derive import api
from blr_derive.api import derive_record, generate
from blr_derive.core.errors import UnsupportedTarget
from blr_derive.ir.build import build_ir
from conftest import CATALOG, GENERATED, load_generated

# jax is in the test extra (the jax target's peers): imported, never skipped


def _function_module(text):
    """A jax module of plain functions for one family (not an optax transformation, not a factorized recipe)."""
    return "\ndef step(" in text and "GradientTransformation" not in text and "\nBLOCKS = (" not in text


#: the catalog recipes the jax target writes as functions
#: recipes over the Kronecker eigenbasis candidate (an `eigenbasis` section: the state is matrices with their
#: bases, which the generic elementwise inputs below do not draw) are compared jax against numpy in their own peer
#: tests with inputs of their shapes: tests/peers/soap/test_soap_generated.py, tests/peers/evon/test_evon.py
EIGENBASIS = {p.stem for p in CATALOG.glob("*.yaml") if "\neigenbasis:" in p.read_text(encoding="utf-8")}
FUNCTION_RECIPES = sorted(p.stem for p in (GENERATED / "jax").glob("*.py")
                          if p.stem != "__init__" and p.stem not in EIGENBASIS
                          and _function_module(p.read_text(encoding="utf-8")))
DIMS = {"P": 3, "N": 5, "K": 2}
#: coordinates of an elementwise update
SIZE = 4
#: hyperparameters a recipe needs (no default) or that are smaller here (sample and node counts)
HYPER = {"snes": {"popsize": 6, "lr_std": 0.2}, "reparameterization_exponential": {"mc_samples": 7},
         "score_function_exponential": {"mc_samples": 7}, "fed_ivon_admm": {"mc_samples": 3},
         "quadrature_gamma": {"nodes": 33}, "bsam": {"ess": 50.0, "msharpness": 3}, "sam": {"msharpness": 3},
         "xnes": {"popsize": 6, "lr_A": 0.2}, "xnes_evosax": {"popsize": 6, "lr_A": 0.2},
         "ivon_continual": {"lr": 0.3, "ess": 20.0, "mc_samples": 2},
         "ivon_poco": {"lr": 0.3, "ess": 20.0, "mc_samples": 2}}
#: max |jax - numpy| / max(1, max |numpy|) over the outputs, per recipe (printed by the tests with -s)
ERRORS = {}
TOL = 1e-12


#: jax in float64 for every test (tests/conftest.py's x64)
pytestmark = pytest.mark.usefixtures("x64")


# ----------------------------------------------------------------------------------------------- inputs
def _spd(rng, n):
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def _value(rng, shape, symmetric):
    """A valid value of the shape a module's SHAPES declares: elementwise values (means, precisions, rates,
    counts, shapes of gamma and beta families) in (0.5, 2); a scalar (counts, degrees of freedom) above the
    dimension; a symmetric matrix positive definite; any other vector or matrix standard normal."""
    if shape in ("*", "?"):
        return rng.uniform(0.5, 2.0, SIZE)
    dims = tuple(DIMS.get(d, 3) if isinstance(d, str) else d for d in shape)
    if not dims:
        return float(rng.uniform(DIMS["P"] + 2, DIMS["P"] + 6))
    if symmetric:          # a stack of them with a leading component axis (multimodal: S of shape (K, P, P))
        return _spd(rng, dims[0]) if len(dims) == 2 else np.stack([_spd(rng, dims[-1]) for _ in range(dims[0])])
    return rng.standard_normal(dims)


def _inputs(mod, seed, hyper=None):
    """Random state, data, oracle coefficients and hyperparameters (floats in (0, 1] drawn in (0.2, 0.9))."""
    rng = np.random.default_rng(seed)
    shapes, sym = mod.SHAPES, set(mod.SYMMETRIC)
    state = {n: _value(rng, shapes[n], n in sym) for n in mod.STATE if n != "step"}
    data = {n: _value(rng, shapes[n], n in sym) for n in mod.DATA}
    P = DIMS["P"]
    coef = {"A": _spd(rng, P) / P, "b": rng.standard_normal(P), "H0": _spd(rng, P),
            "c": float(rng.uniform(0.5, 1.5)), "d": float(rng.uniform(-0.5, 0.5)),
            "act": rng.standard_normal((DIMS["N"], P)), "out": rng.standard_normal((DIMS["N"], P))}
    hp = {k: (float(rng.uniform(0.2, 0.9)) if isinstance(v, float) and 0 < v <= 1 else v)
          for k, v in mod.HYPERPARAMETERS.items()}
    hp.update(hyper or {})
    return state, data, coef, hp


def _oracles(xp, coef, names, elementwise):
    """Smooth oracles: elementwise (a gradient, a positive Hessian, a loss per coordinate), or for vectors a
    linear gradient and a Hessian that varies a little."""
    c, d = coef["c"], coef["d"]
    if elementwise:
        table = {"grad": lambda x: c * x + d + 0.1 * xp.sin(x), "hess": lambda x: c + 0.1 * x ** 2,
                 "loss": lambda x: 0.5 * c * x ** 2 + d * x + 0.1 * xp.cos(3 * x)}
    else:
        table = {"grad": lambda x: xp.asarray(coef["A"]) @ x + xp.asarray(coef["b"]),
                 "hess": lambda x: xp.asarray(coef["H0"]) + 0.01 * x[:, None] * x[None, :],
                 "loss": lambda x: 0.5 * x @ xp.asarray(coef["A"]) @ x + xp.asarray(coef["b"]) @ x + c,
                 # a layer's input activations and output gradients (N x d_in, N x d_out) at the weights x
                 "activations": lambda x: xp.asarray(coef["act"]) * (1 + 0.01 * xp.sum(x)),
                 "output_grads": lambda x: xp.asarray(coef["out"]) + 0.01 * xp.sum(x ** 2)}
    return {n: table[n] for n in names} or None


def _elementwise(mod):
    return any(s in ("*", "?") for s in mod.SHAPES.values())


class Replay:
    """A numpy.random.Generator stand-in that hands the numpy module the jax module's draws in the order the jax
    module's ``step`` documents: ``jax.random.split(key, n_samples)``, one key per sample; with several draws per
    sample, that key split into one per draw (in the order ``laws``); a rejection sampler's round r uses
    ``jax.random.fold_in(sample key, r)`` in place of the sample's key (:meth:`next_sample` starts the next
    sample: the numpy module calls the oracle once per sample, after its rejection loop)."""

    def __init__(self, key, n_samples, laws, rejection=False):
        self.keys, self.laws, self.rejection = jax.random.split(key, n_samples), laws, rejection
        self.k = self.r = self.i = 0

    def _draw(self, law, shape):
        assert law == self.laws[self.i], (law, self.laws, self.i)
        base = self.keys[self.k]
        if self.rejection:
            base = jax.random.fold_in(base, self.r)
        if len(self.laws) > 1:
            base = jax.random.split(base, len(self.laws))[self.i]
        x = (jax.random.normal if law == "normal" else jax.random.uniform)(base, shape, dtype=float)
        self.i = (self.i + 1) % len(self.laws)
        if self.i == 0:
            if self.rejection:
                self.r += 1
            else:
                self.k += 1
        return np.asarray(x)

    def standard_normal(self, shape):
        return self._draw("normal", shape)

    def random(self, shape):
        return self._draw("uniform", shape)

    def next_sample(self):
        self.k, self.r, self.i = self.k + 1, 0, 0


def _sampling(ir):
    """(laws of a sample's draws, rejection sampler?) of a Monte Carlo recipe; None without random draws."""
    sm = ir.sampling
    if sm is None or sm.draw == "tanh_sinh":
        return None
    return [sm.draw] + [law for _, law in sm.more_draws], sm.accept is not None


def _catalog_ir(name):
    _, D = derive_record(CATALOG / f"{name}.yaml")
    return build_ir(D, f"catalog/{name}.yaml")


def _max_error(ours, ref):
    assert set(ours) == set(ref)
    err = 0.0
    for k in ref:
        r, o = np.asarray(ref[k], dtype=float), np.asarray(ours[k], dtype=float)
        assert o.shape == r.shape, k
        assert np.all(np.isfinite(r)), k
        err = max(err, float(np.max(np.abs(o - r), initial=0.0) / max(1.0, float(np.max(np.abs(r), initial=0.0)))))
    return err


def _compare_steps(ref, ours, ir, label, seeds, hyper=None):
    """The numpy and jax steps on the same inputs (and draws), direct and jitted (one jit for all seeds)."""
    for name in ("STATE", "HYPERPARAMETERS", "ORACLES", "DATA", "EQUATIONS", "SHAPES", "SYMMETRIC"):
        assert getattr(ours, name) == getattr(ref, name), name
    ew, draws = _elementwise(ref), _sampling(ir)
    static_names = set(ours.STATIC_HYPERPARAMETERS)
    assert static_names == {h.name for h in ir.hyperparameters if h.kind in ("bool", "choice", "int")}
    err = 0.0
    jitted = None
    for seed in seeds:
        state, data, coef, hp = _inputs(ref, seed, hyper)
        static = {k: hp.pop(k) for k in list(hp) if k in static_names}
        key = jax.random.key(seed)
        rng = None
        np_oracles = _oracles(np, coef, ref.ORACLES, ew)
        if draws is not None:
            n = int(static.get(str(ir.sampling.samples), ir.sampling.samples))
            rng = Replay(key, n, *draws)
            if draws[1]:                             # a rejection sampler: the oracle call ends a sample
                np_oracles = {o: (lambda f: lambda x: (rng.next_sample(), f(x))[1])(f) for o, f in np_oracles.items()}
        want = ref.step(ref.init(**state), oracles=np_oracles, data=data or None, rng=rng, **hp, **static)
        s = ours.init(**state)
        assert all(isinstance(v, jax.Array) for v in s.values())
        assert all(v.dtype == jnp.float64 for k, v in s.items() if k != "step")
        if jitted is None:                          # called directly once (a scan of samples compiles per call)
            got = ours.step(s, oracles=_oracles(jnp, coef, ours.ORACLES, ew), data=data or None, key=key, **hp,
                            **static)
            err = max(err, _max_error(got, want))
            # the oracles' coefficients, the state, the data, the key and the numeric hyperparameters are traced
            jitted = jax.jit(lambda st, d, h, k, co: ours.step(st, oracles=_oracles(jnp, co, ours.ORACLES, ew),
                                                                data=d, key=k, **h, **static))
        err = max(err, _max_error(jitted(s, data or None, hp, key, coef), want))
        assert all(np.array_equal(np.asarray(s[k]), state[k]) for k in state)      # the input is not mutated
    ERRORS[label] = err
    print(f"{label}: max error {err:.2e}")
    assert err < TOL
    return err


# ----------------------------------------------------------------------------------------------- the catalog
def test_the_function_modules_cover_the_single_family_recipes():
    """Every single-family catalog recipe that is not an optax transformation is written as functions (dropout_sgd:
    its fixed precision s has no initial value, which an optax transformation's state needs)."""
    assert {"newton", "laplace", "ridge", "bayesian_linear_regression", "beta_bernoulli", "dirichlet_categorical",
            "dirichlet_categorical_unrolled",
            "dropout", "dropout_sgd", "fed_admm_full", "fed_admm_isotropic", "fed_ivon_admm", "gamma_poisson", "gd",
            "multimodal", "multimodal_exact", "multimodal_unrolled", "multimodal_exact_unrolled", "ncvi", "ncvmp",
            "normal_gamma", "normal_normal", "online_newton_diag",
            "online_newton_momentum", "quadrature_gamma", "reparameterization_exponential",
            "score_function_exponential", "snes", "svrg"} <= set(FUNCTION_RECIPES)


@pytest.mark.parametrize("recipe", FUNCTION_RECIPES)
def test_jax_step_equals_numpy_step(recipe, monkeypatch):
    ref, ours = load_generated(recipe, "numpy"), load_generated(recipe, "jax")
    # the algebra of the two steps at random inputs (data of either sign: a conjugate step may leave the family
    # there), so both modules' run-time domain checks are off; the checks have their tests (test_domain_checks.py)
    for mod in (ref, ours):
        if hasattr(mod, "CHECK_DOMAINS"):
            monkeypatch.setattr(mod, "CHECK_DOMAINS", False)
    _compare_steps(ref, ours, _catalog_ir(recipe), recipe, range(2), HYPER.get(recipe))


ENTRY_RECIPES = [r for r in FUNCTION_RECIPES if "\ndef dual_step(" in (GENERATED / "jax" / f"{r}.py").read_text()]


def _entry_functions(mod):
    maps = {"natural_parameters", "log_partition", "expectation_parameters", "fisher_information",
            "ordinary_from_natural", "ordinary_from_expectation"}
    return sorted(n for n, f in vars(mod).items() if inspect.isfunction(f) and not n.startswith("_")
                  and n not in {"init", "step", "parameter"} | maps)


@pytest.mark.parametrize("recipe", ENTRY_RECIPES)
def test_entry_points_equal_numpy(recipe):
    """Federated ADMM's client_data, init_dual, dual_step, client_message, server_step and global_objective: a round
    of two clients with duals near zero, each function against the numpy module's (eagerly and under jax.jit)."""
    ref, ours = load_generated(recipe, "numpy"), load_generated(recipe, "jax")
    names = _entry_functions(ref)
    assert names == _entry_functions(ours) and {"dual_step", "server_step"} <= set(names)
    for name in ("FEDERATED_GLOBALS", "FEDERATED_DUALS", "FEDERATED_MESSAGES", "FEDERATED_EQUATIONS"):
        assert getattr(ours, name) == getattr(ref, name)
    rng = np.random.default_rng(7)
    clients = [_inputs(ref, seed)[0] for seed in range(2)]
    glob, hp = _inputs(ref, 5)[0], _inputs(ref, 5)[3]
    hp = {k: v for k, v in hp.items() if k not in ours.STATIC_HYPERPARAMETERS}

    def small(v):
        v = 0.05 * rng.standard_normal(np.shape(v))
        return (v + v.T) / 2 if v.ndim == 2 else v
    duals = [{k: small(v) for k, v in ref.init_dual(c).items()} for c in clients]
    messages = [ref.client_message(c, d, **hp) for c, d in zip(clients, duals)]
    total = {k: sum(m[k] for m in messages) for k in messages[0]}
    args = {"state": clients[0], "global_state": glob, "dual": duals[0], "message_sum": total,
            "clients": len(clients), "client_loss_sum": 3.7}
    err = 0.0
    for name in names:
        params = list(inspect.signature(getattr(ref, name)).parameters)
        call = [args[p] for p in params if p != "hyperparameters"]
        kw = hp if "hyperparameters" in params else {}
        want, got = getattr(ref, name)(*call, **kw), getattr(ours, name)(*call, **kw)
        err = max(err, _max_error(got, want))
        jitted = jax.jit(lambda *a, _f=getattr(ours, name), **k: _f(*a, **k), static_argnums=(
            params.index("clients"),) if "clients" in params else ())
        err = max(err, _max_error(jitted(*call, **kw), want))
    print(f"{recipe} entry points: max error {err:.2e}")
    assert err < TOL


MAP_RECIPES = [r for r in FUNCTION_RECIPES
               if "\ndef natural_parameters(" in (GENERATED / "jax" / f"{r}.py").read_text()]


@pytest.mark.parametrize("recipe", MAP_RECIPES)
def test_family_maps_equal_numpy(recipe):
    """natural_parameters, log_partition, expectation_parameters (= jax.grad of log_partition), fisher_information
    and ordinary_from_natural equal the numpy module's; ordinary_from_expectation (the engine's Newton solver on
    the host) takes the expectation parameters back to the ordinary parameters."""
    ref, ours = load_generated(recipe, "numpy"), load_generated(recipe, "jax")
    assert ours.LAMBDA == ref.LAMBDA
    names = list(inspect.signature(ref.natural_parameters).parameters)
    assert names == list(inspect.signature(ours.natural_parameters).parameters)
    rng = np.random.default_rng(3)
    for _ in range(2):
        params = {n: float(rng.uniform(0.5, 2.0)) for n in names}
        lam = ref.natural_parameters(**params)
        np.testing.assert_allclose(ours.natural_parameters(**params), lam, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(float(ours.log_partition(lam)), ref.log_partition(lam), rtol=1e-12, atol=1e-12)
        mu = ref.expectation_parameters(lam)
        np.testing.assert_allclose(ours.expectation_parameters(lam), mu, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(jax.grad(ours.log_partition)(jnp.asarray(lam)), mu, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(ours.fisher_information(lam), ref.fisher_information(lam), rtol=1e-12, atol=1e-12)
        want = ref.ordinary_from_natural(lam)
        got = ours.ordinary_from_natural(lam)
        assert set(got) == set(want) == set(params)
        for n in params:
            np.testing.assert_allclose(float(got[n]), want[n], rtol=1e-13, atol=1e-13)
        back, back_ref = ours.ordinary_from_expectation(mu), ref.ordinary_from_expectation(mu)
        for n in params:
            np.testing.assert_allclose(float(back[n]), params[n], rtol=1e-8, atol=1e-8)
            np.testing.assert_allclose(float(back[n]), back_ref[n], rtol=1e-9, atol=1e-9)


def test_step_rejects_unknown_hyperparameters_and_missing_inputs():
    mod = load_generated("ridge", "jax")
    s = mod.init(m=np.zeros(3), S=np.eye(3))
    with pytest.raises(TypeError, match="unknown hyperparameters"):
        mod.step(s, data={"X": np.ones((4, 3)), "y": np.ones(4)}, lr=1.0)
    with pytest.raises(TypeError, match="the data"):
        mod.step(s)
    with pytest.raises(ValueError, match=r"y has shape \(5,\), but N = 4"):
        mod.step(s, data={"X": np.ones((4, 3)), "y": np.ones(5)})
    with pytest.raises(ValueError, match="S must be symmetric"):
        mod.init(m=np.zeros(3), S=np.triu(np.ones((3, 3))))
    # under jit the symmetry of a traced value is not checked (no Python branch on it); the shapes are
    jitted = jax.jit(lambda st, d: mod.step(st, data=d))
    assert jitted(s, {"X": np.ones((4, 3)), "y": np.ones(4)})["m"].shape == (3,)
    with pytest.raises(ValueError, match="y has shape"):
        jitted(s, {"X": np.ones((4, 3)), "y": np.ones(5)})
    mc = load_generated("reparameterization_exponential", "jax")
    with pytest.raises(TypeError, match="pass key"):
        mc.step(mc.init(r=np.ones(3)), oracles={"grad": lambda x: x})
    with pytest.raises(ValueError, match="g_k has shape"):
        mc.step(mc.init(r=np.ones(3)), oracles={"grad": lambda x: x[:2]}, key=jax.random.key(0))


# ----------------------------------------------------------------------------------------------- user recipes
#: an exponential family sampled by rejection: -log(u)/r, kept where u2 < 1/2 (half the rounds accept, whatever u)
EXP_REJECTION = {"name": "exp_rejection", "description": "Exponential with rate r, by rejection",
                 "variable": "theta", "support": "positive", "parameters": {"r": {"domain": "positive"}},
                 "sufficient_statistics": ["theta"], "base_measure": 1, "natural_parameters": ["-r"],
                 "log_partition": "-log(-lambda1)", "expectation_parameters": ["1/r"],
                 "sampler": {"value": "-log(u)/r", "accept": "u2 < 1/2"}}
#: N(m, 1/s) sampled from a uniform and a normal draw: m + sign(u - 1/2) z/sqrt(s)
FLIP_NORMAL = {"name": "flip_normal", "description": "N(m, 1/s) sampled as m + sign(u - 1/2) z/sqrt(s)",
               "variable": "theta", "support": "real",
               "parameters": {"m": {"domain": "real"}, "s": {"domain": "positive"}},
               "sufficient_statistics": ["theta", "theta**2"], "base_measure": "(2*pi)**(-1/2)",
               "natural_parameters": ["s*m", "-s/2"],
               "log_partition": "-lambda1**2/(4*lambda2) - log(-2*lambda2)/2",
               "expectation_parameters": ["m", "m**2 + 1/s"],
               "sampler": "m + sign(u - 1/2)*z/sqrt(s)"}


def _user(recipe):
    view = api.derive(yaml.safe_dump(recipe))
    return view.compile("numpy"), view.compile("jax"), build_ir(view.record, recipe["name"])


def test_rejection_sampler_with_a_parameter_equals_numpy():
    """A rejection sampler (two uniform draws a round, a jax.lax.while_loop in the jax module; most coordinates
    need several rounds) under the score-function estimator, with the recipe's 'parameter' 1/r."""
    ref, ours, ir = _user({"name": "er", "family": EXP_REJECTION, "loss": "abstract", "parameter": "1/r",
                           "hyperparameters": {"rho": 0.1, "S": {"default": 4, "type": "int"}},
                           "approximations": [{"score_function": {"samples": "S"}}]})
    assert ir.sampling.accept is not None and len(ir.sampling.more_draws) == 1
    assert "jax.lax.while_loop" in ours.SOURCE and "jax.random.fold_in(_keys[_k], _r)" in ours.SOURCE
    _compare_steps(ref, ours, ir, "rejection sampler (user family)", range(2))
    state = ref.init(r=np.array([0.5, 1.0, 4.0]))
    np.testing.assert_allclose(ours.parameter(ours.init(**state)), ref.parameter(state), rtol=1e-15)


def test_bessel_functions_of_order_0_and_1_print_as_jax_i0e_i1e():
    """The von Mises family's I_0 and I_1, printed exponentially scaled by every target (codegen/scaled.py:
    scipy.special.ive(0, .), ive(1, .) in the numpy target), are jax.scipy.special.i0e/i1e; another order has no jax
    counterpart and is refused."""
    import scipy.special
    import sympy as sp

    from blr_derive.codegen.backends.jax.functions import JnpPrinter
    x = sp.Symbol("x", positive=True)
    pr = JnpPrinter()
    assert pr.doprint(sp.besseli(0, x) / sp.besseli(1, x)) == "jax.scipy.special.i0e(x)/jax.scipy.special.i1e(x)"
    assert pr.special
    xs = np.array([0.01, 0.5, 3.0, 40.0, 1e3, 1e5])
    for order, fn in ((0, jax.scipy.special.i0e), (1, jax.scipy.special.i1e)):
        np.testing.assert_allclose(fn(jnp.asarray(xs)), scipy.special.ive(order, xs), rtol=1e-14)
    with pytest.raises(UnsupportedTarget, match=r"jax.scipy.special.ive \(scipy.special.ive\)"):
        JnpPrinter().doprint(sp.besseli(2, x))


def test_two_draws_of_two_laws_equal_numpy():
    """A sampler of a uniform u and a normal z per sample: the sample's key is split into one key per draw."""
    ref, ours, ir = _user({"name": "flip", "family": FLIP_NORMAL, "loss": "abstract",
                           "hyperparameters": {"rho": 0.1, "S": {"default": 3, "type": "int"}},
                           "approximations": [{"score_function": {"samples": "S"}}]})
    assert [law for _, law in ir.sampling.more_draws] == ["normal"] and ir.sampling.draw == "uniform"
    assert "jax.random.split(_keys[_k], 2)" in ours.SOURCE
    _compare_steps(ref, ours, ir, "two draws (uniform, normal)", range(2))


def test_a_name_the_module_binds_is_refused_where_it_is_declared(tmp_path):
    """A hyperparameter called ``key`` (the random key of step) or ``jnp`` (the module's jax.numpy) cannot be a
    variable of the jax module: a located refusal at the recipe's hyperparameters (the numpy target writes it)."""
    text = (CATALOG / "beta_bernoulli.yaml").read_text(encoding="utf-8")
    line = text.splitlines().index("hyperparameters:") + 1
    for name in ("key", "jnp"):
        path = tmp_path / f"bb_{name}.yaml"
        path.write_text(text.replace("a0", name), encoding="utf-8")
        assert f'{name} = hp["{name}"]' in generate(path, "numpy")
        with pytest.raises(UnsupportedTarget, match=rf"bb_{name}\.yaml:{line}: recipe 'beta_bernoulli': the jax "
                                                    rf"target needs names other than {name}"):
            generate(path, "jax")


# ----------------------------------------------------------------------------------------------- Heaviside
def test_dropout_adam_transformation_equals_numpy_with_the_same_masks():
    """Heaviside (the dropout mask m*Heaviside(pi1 - u, 0)) prints as jnp.heaviside in the optax transformation,
    as numpy.heaviside in the numpy module: three steps fed the same uniform noise agree."""
    ref, tx_mod = load_generated("dropout_adam", "numpy"), load_generated("dropout_adam", "jax")
    assert "jnp.heaviside(pi1 - u_mask, 0)" in (GENERATED / "jax" / "dropout_adam.py").read_text()
    rng = np.random.default_rng(0)
    m0 = rng.standard_normal(6)
    grad = lambda x: 1.3 * x - 0.2 + 0.1 * np.sin(x)        # noqa: E731
    tx = tx_mod.dropout_adam(lr=0.05, pi1=0.6)
    params, state = jnp.asarray(m0), tx.init(jnp.asarray(m0))
    ref_state = ref.init(m=m0)
    for i in range(3):
        sample, noise = tx.sample_parameters(jax.random.key(i), params, state)
        state = tx.accumulate(jnp.asarray(grad(np.asarray(sample))), state, noise, params)
        updates, state = tx.update(None, state, params)
        params = optax.apply_updates(params, updates)
        replay = Replay(jax.random.key(0), 1, ["uniform"])
        replay.keys = None
        replay._draw = lambda law, shape, _n=np.asarray(noise): _n                  # the transformation's noise
        ref_state = ref.step(ref_state, oracles={"grad": grad}, rng=replay, lr=0.05, pi1=0.6)
        np.testing.assert_allclose(np.asarray(params), ref_state["m"], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(state.s), ref_state["s"], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(state.u), ref_state["u"], rtol=1e-12, atol=1e-12)
