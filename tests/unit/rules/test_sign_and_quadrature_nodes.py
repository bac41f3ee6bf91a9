"""``sign`` in the expression grammar (derivative 0 almost everywhere, printed by every target) and quadrature that
never evaluates a sampler at a 0/0 point: the Laplace family's inverse CDF, once written with the idiom
(u − ½)/|u − ½|, was 0/0 at u = ½, the middle node of the odd tanh-sinh rule, so a `quadrature` BLR over it was
NaN from the first step.  References: numpy.sign, the closed-form BLR step of the Laplace family (Eq. 6 with
E_q[(θ − 1)²] = 2b² + 1, μ = b, λ = −1/b), and the sign and idiom forms against each other."""
import importlib.util
import os

import numpy as np
import pytest
import sympy as sp
import torch
import yaml

from blr_derive import api
from blr_derive.codegen.backends.jax.printer import JaxPrinter
from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
from blr_derive.codegen.backends.torch.printer import ElementwisePrinter, ForeachCompiler
from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.specialfns import limit_safe, sign
from blr_derive.families.library import load_family
from blr_derive.rules.sampling import hard_thresholds

x, b, u = sp.Symbol("x", real=True), sp.Symbol("b", positive=True), sp.Symbol("u", positive=True)
XS = np.array([-3.0, -1e-30, -0.0, 0.0, 1e-30, 0.25, 7.0])      # float32-representable (jax, Triton)


def test_sign_parses_to_a_step_with_zero_derivative():
    e = parse_expression("b*sign(x - 1)", {"x": x, "b": b})
    (s,) = e.atoms(sp.sign)
    assert isinstance(s, sign)
    assert sp.diff(e, x) == 0 and sp.diff(e, b) == sign(x - 1)
    assert not sp.diff(e, x, 2).has(sp.DiracDelta)
    assert sign(sp.Integer(-2)) == -1 and sign(sp.Integer(0)) == 0 and sign(-x) == -sign(x)


@pytest.mark.parametrize("printer", ["numpy", "torch", "torch_foreach", "jax"])
def test_every_printer_prints_sign(printer):
    e = sign(x) * 2 + sign(x - sp.Rational(1, 4))
    want = 2 * np.sign(XS) + np.sign(XS - 0.25)
    if printer == "numpy":
        got = eval(BLRNumPyPrinter().doprint(e), {"numpy": np, "x": XS})
    elif printer == "torch":
        got = eval(ElementwisePrinter().doprint(e), {"torch": torch, "x": torch.tensor(XS)}).numpy()
    elif printer == "torch_foreach":
        comp = ForeachCompiler({x}, indent="")
        comp.assign(sp.Symbol("out"), e)
        ns = {"torch": torch, "x": [torch.tensor(XS[:3]), torch.tensor(XS[3:])], "math": __import__("math")}
        exec("\n".join(comp.lines), ns)
        got = torch.cat(list(ns["out"])).numpy()
    else:
        import jax.numpy as jnp
        got = np.asarray(eval(JaxPrinter().doprint(e), {"jnp": jnp, "x": jnp.asarray(XS)}))
    np.testing.assert_array_equal(got, want)


def test_triton_prints_sign(tmp_path):
    os.environ["TRITON_INTERPRET"] = "1"
    from blr_derive.codegen.backends.triton.printer import HELPERS, TritonPrinter
    p = TritonPrinter()
    body = p.doprint(sign(x) * 2 + sign(x - sp.Rational(1, 4)))
    src = ["import triton", "import triton.language as tl", ""] + [HELPERS[h] for h in sorted(p.helpers)]
    src += ["@triton.jit", "def kernel(X, OUT, N: tl.constexpr):", "    offs = tl.arange(0, N)",
            "    x = tl.load(X + offs)", f"    tl.store(OUT + offs, {body})", ""]
    path = tmp_path / "_sign_kernel.py"
    path.write_text("\n".join(src))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    xs = torch.tensor(np.r_[XS, np.zeros(1)], dtype=torch.float32)
    out = torch.empty_like(xs)
    mod.kernel[(1,)](xs, out, N=8)
    np.testing.assert_array_equal(out.numpy()[:7], (2 * np.sign(XS.astype(np.float32))
                                                    + np.sign(XS.astype(np.float32) - np.float32(0.25))))


def test_limit_safe_reads_the_sign_idiom_as_sign():
    idiom = parse_expression("-b*(u - 1/2)/abs(u - 1/2)*log(1 - 2*abs(u - 1/2))", {"u": u, "b": b})
    assert idiom.xreplace({u: sp.Rational(1, 2)}) is sp.nan
    safe = limit_safe(idiom)
    assert safe.xreplace({u: sp.Rational(1, 2)}) == 0
    assert safe == -b * sign(u - sp.Rational(1, 2)) * sp.log(1 - 2 * sp.Abs(u - sp.Rational(1, 2)))
    assert limit_safe(sp.Abs(x) / x * 3) == 3 * sign(x)
    assert limit_safe((1 - x) / sp.Abs(x - 1)) == -sign(x - 1)
    assert limit_safe(x / sp.Abs(x + 1)) == x / sp.Abs(x + 1)          # not the idiom: unchanged


def test_only_a_threshold_that_depends_on_the_parameters_is_hard():
    assert len(hard_thresholds(load_family("bernoulli"))) == 1
    assert len(hard_thresholds(load_family("bernoulli_logit"))) == 1
    assert hard_thresholds(load_family("laplace")) == []


def _step_module(family, nodes, approx="quadrature"):
    recipe = {"name": "laplace_quad", "family": family, "loss": {"expression": "(theta - 1)**2"},
              "hyperparameters": {"rho": 0.5}, "approximations": [{approx: {"nodes": nodes}}]}
    return api.derive(yaml.safe_dump(recipe)).compile("numpy")


def _exact_step(b0, rho=0.5):
    """Eq. 6 with h = 1: λ ← (1 − ρ)λ − ρ ∇_μ E_q[ℓ], λ = −1/b, μ = E|θ| = b, E_q[(θ − 1)²] = 2b² + 1."""
    lam = (1 - rho) * (-1 / b0) - rho * 4 * b0
    return -1 / lam


def test_quadrature_blr_over_the_builtin_laplace_is_finite_and_converges():
    b0 = np.array([1.0, 0.3, 2.0])
    errors = []
    for nodes in (33, 65, 129):
        mod = _step_module("laplace", nodes)
        got = mod.step({"b": b0}, rho=0.5)["b"]
        assert np.all(np.isfinite(got))
        errors.append(np.max(np.abs(got / _exact_step(b0) - 1)))
    # the sampler has a kink at u = 1/2 (|θ|): the rule converges at O(h²) there, 4× per doubling of the nodes
    assert errors[2] < 5e-4 and errors[0] / errors[1] > 3.5 and errors[1] / errors[2] > 3.5
    st = {"b": b0}
    for _ in range(60):
        st = mod.step(st, rho=0.5)
    np.testing.assert_allclose(st["b"], 0.5, rtol=5e-4)        # the minimizer of 2b² + 1 − (1 + log 2b), up to
                                                               # the O(h²) bias of 129 nodes


def test_the_old_idiom_gives_the_same_steps(tmp_path):
    text = open(load_family("laplace").file).read()
    old = text.replace("sampler: -b*sign(u - 1/2)*log(1 - 2*abs(u - 1/2))",
                       "sampler: -b*(u - 1/2)/abs(u - 1/2)*log(1 - 2*abs(u - 1/2))")
    assert old != text
    path = tmp_path / "laplace_idiom.yaml"
    path.write_text(old)
    b0 = np.array([1.0, 0.3])
    a = _step_module("laplace", 33).step({"b": b0}, rho=0.5)["b"]
    c = _step_module(str(path), 33).step({"b": b0}, rho=0.5)["b"]
    np.testing.assert_array_equal(a, c)


def test_a_sampler_still_undefined_at_the_middle_node_is_refused(tmp_path):
    text = open(load_family("laplace").file).read().replace(
        "sampler: -b*sign(u - 1/2)*log(1 - 2*abs(u - 1/2))",
        "sampler: -2*b*(u - 1/2)/abs(2*u - 1)*log(1 - 2*abs(u - 1/2))")
    path = tmp_path / "laplace_other_idiom.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        _step_module(str(path), 33)
    assert "u = 1/2" in str(err.value) and "middle node" in str(err.value)


def test_reparameterization_through_a_sign_of_the_draw(tmp_path):
    """sign(u − ½) does not depend on b: the Laplace sampler is differentiable in b for every u, so the
    reparameterization rule applies (it refused the family while any sign marked a binary threshold), and the
    relaxations, which need a threshold in the parameters, refuse it."""
    recipe = {"name": "laplace_rep", "family": "laplace", "loss": "abstract", "hyperparameters": {"rho": 0.5},
              "approximations": [{"reparameterization": {"samples": 20000}}]}
    mod = api.derive(yaml.safe_dump(recipe)).compile("numpy")
    b0 = np.array([1.0, 0.3])
    out = mod.step({"b": b0}, oracles={"grad": lambda t: 2 * (t - 1)}, rho=0.5, rng=np.random.default_rng(0))["b"]
    # E[∇ℓ(θ) ∂θ/∂b] = E[2(θ − 1) θ/b] = 4b = ∇_μ E_q[(θ − 1)²]: the exact step up to Monte Carlo error
    np.testing.assert_allclose(out, _exact_step(b0), rtol=3e-2)
    recipe["approximations"] = [{"concrete_relaxation": {"temperature": 1.0}}]
    with pytest.raises(SpecError) as err:
        api.derive(yaml.safe_dump(recipe))
    assert "has none" in str(err.value)
