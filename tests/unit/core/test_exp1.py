"""The grammar's exponential integral exp1(x) = E₁(x) (blr_derive/core/specialfns.py): its value (evalf and
lambdify with scipy) and its derivative -e^{-x}/x against scipy.special.exp1 and central differences."""
import numpy as np
import pytest
import scipy.special as sps
import sympy as sp

from blr_derive.codegen.backends.numpy.printer import BLRNumPyPrinter
from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression

x = sp.Symbol("x", positive=True)


@pytest.mark.parametrize("v", [0.01, 0.7, 2.0, 35.0])
def test_value_and_derivative_match_scipy(v):
    e = parse_expression("exp1(x)", {"x": x})
    assert float(e.subs(x, v).evalf(30)) == pytest.approx(sps.exp1(v), rel=1e-14)
    assert float(sp.lambdify([x], e, modules=["scipy", "numpy"])(v)) == pytest.approx(sps.exp1(v), rel=1e-14)
    d = float(sp.diff(e, x).subs(x, v).evalf(30))
    h = 1e-6 * v
    assert d == pytest.approx((sps.exp1(v + h) - sps.exp1(v - h)) / (2 * h), rel=1e-7)


def test_numpy_target_prints_the_scaled_exp1():
    """e^x E1(x) is printed as the module's _exp1e (codegen/scaled.py), E1(x) alone as _exp1e(x) e^(-x); both
    equal scipy's values where those are finite, and e^x E1(x) stays finite at x = 800 (scipy's product: inf*0)."""
    from blr_derive.codegen.backends.numpy.printer import HELPERS
    pr = BLRNumPyPrinter()
    code = pr.doprint(parse_expression("exp(x)*exp1(x)", {"x": x}))
    alone = pr.doprint(parse_expression("exp1(x)", {"x": x}))
    assert code == "_exp1e(x)" and "_exp1e(x)" in alone and "_exp1e" in pr.helpers
    ns = {"numpy": np, "scipy": __import__("scipy.special"), "x": np.array([0.3, 4.0, 60.0])}
    exec(HELPERS["_exp1e"], ns)
    np.testing.assert_allclose(eval(code, ns), np.exp([0.3, 4.0, 60.0]) * sps.exp1([0.3, 4.0, 60.0]), rtol=1e-14)
    np.testing.assert_allclose(eval(alone, ns), sps.exp1([0.3, 4.0, 60.0]), rtol=1e-14)
    ns["x"] = np.array([800.0])
    assert np.isfinite(eval(code, ns)).all() and abs(eval(code, ns)[0] * 800 - 1) < 2e-3


def test_takes_one_scalar_argument():
    with pytest.raises(SpecError, match="exactly one argument"):
        parse_expression("exp1(x, 1)", {"x": x})


def test_a_concentrated_inverse_gaussians_step_is_finite_and_equals_eq6_in_50_digits(tmp_path):
    """e^{x}E₁(x) (E[log θ] of the inverse Gaussian, x = 2λ/m) is printed as one scaled function (_exp1e), taken
    together before the update's common subexpressions split e^{x} from E₁(x) (core/specialfns.py scaled_exp1): at
    m = 0.01, λ = 10 (x = 2000) the step was NaN (e^{2000} = inf times E₁ = 0) and raised 'the new lam is not
    positive'.  Reference: Eq. 6, λ' = (1 − ρ)λ − ρ(c + ∇_μE_q[log h]), with ∇_μ by mpmath's differentiation of
    E_q[log h] = −½log 2π − (3/2)(log m − e^{x}E₁(x)) in the expectation parameters μ = (m, 1/m + 1/λ), 50 digits."""
    import mpmath as mp
    import blr_derive.api as api
    from blr_derive.candidates.options import recipe_from_options
    from conftest import load_module_from_path
    r = recipe_from_options("inverse_gaussian", loss="p*theta + q/theta", approximations=["exact"], data=["p", "q"])
    path = tmp_path / "ig.py"
    path.write_text(api.generate(r, "numpy"), encoding="utf-8")
    assert "_exp1e(" in path.read_text(encoding="utf-8")
    mod = load_module_from_path(path)
    mp.mp.dps = 50
    for m, lam, p, q, rho in [(0.01, 10.0, 0.8, 1e-4, 0.1), (1.3, 2.2, 0.5, 0.7, 0.4), (1e-3, 2.0, 3.0, 1e-6, 0.05)]:
        new = mod.step({"mu": np.array([m]), "lam": np.array([lam])}, data={"p": np.array(p), "q": np.array(q)},
                       rho=rho)

        def elogh(mu1, mu2):
            mm, ll = mu1, 1 / (mu2 - 1 / mu1)
            x = 2 * ll / mm
            return -mp.log(2 * mp.pi) / 2 - mp.mpf(3) / 2 * (mp.log(mm) - mp.exp(x) * mp.e1(x))
        mu1, mu2 = mp.mpf(m), 1 / mp.mpf(m) + 1 / mp.mpf(lam)
        g1 = mp.diff(lambda a: elogh(a, mu2), mu1)
        g2 = mp.diff(lambda b: elogh(mu1, b), mu2)
        l1 = (1 - rho) * (-mp.mpf(lam) / (2 * mu1**2)) - rho * (p + g1)
        l2 = (1 - rho) * (-mp.mpf(lam) / 2) - rho * (q + g2)
        lam_ref, m_ref = -2 * l2, mp.sqrt(l2 / l1)
        assert np.isfinite(new["mu"]).all() and np.isfinite(new["lam"]).all()
        assert abs(new["lam"][0] / float(lam_ref) - 1) < 1e-12 and abs(new["mu"][0] / float(m_ref) - 1) < 1e-12


@pytest.mark.parametrize("v", [1e-8, 0.3, 49.999, 50.0, 60.0, 709.0, 800.0, 1e6])
def test_the_scaled_exp1_helpers_match_mpmath(v, x64):
    """_exp1e of the numpy and jax runtimes (e^x·exp1 below 50, the asymptotic series above) against mpmath."""
    from blr_derive.codegen.backends.numpy import runtime as nr
    from blr_derive.codegen.backends.jax import runtime as jr
    import mpmath as mp
    mp.mp.dps = 40
    want = float(mp.exp(v) * mp.e1(v))
    assert float(nr._exp1e(np.array([v]))[0]) == pytest.approx(want, rel=1e-14)
    assert float(jr._exp1e(np.array([v]))[0]) == pytest.approx(want, rel=1e-13)


_JAX_EXP1_PROBE = """
import json, sys, jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, numpy as np
from blr_derive.codegen.backends.jax import runtime as jr
x = np.array([1e-300, 1e-200, 1e-10, 1e-3, 0.5, 1.0, 1.0000001, 2.0, 30.0, 700.0])
print(json.dumps(np.asarray(jr._exp1(jnp.asarray(x))).tolist()))
print(json.dumps(np.asarray(jax.jit(jax.vmap(jr._exp1e))(jnp.asarray(x))).tolist()))
print(json.dumps(np.asarray(jr._exp1(jnp.asarray([0.0, -1.0]))).tolist()))
"""


def test_the_jax_exp1_helper_returns_at_small_arguments_and_matches_mpmath():
    """jax.scipy.special.exp1 on an array holding 1e-10 did not return (its jnp.piecewise runs the continued fraction
    meant for x > 1 on every element; jax 0.10.2): the jax module of a family with exp1 in A (or _exp1e) hung, and
    `blr-derive check` with it. The module's _exp1 takes jax's exp1 above 1 and the power series (DLMF 6.6.2) below;
    run in a subprocess with a timeout, so that a hang fails instead of stalling the suite."""
    import json
    import subprocess
    import sys
    import mpmath as mp
    out = subprocess.run([sys.executable, "-c", _JAX_EXP1_PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    e1, e1e, edge = (json.loads(line) for line in out.stdout.strip().splitlines())
    mp.mp.dps = 40
    x = [1e-300, 1e-200, 1e-10, 1e-3, 0.5, 1.0, 1.0000001, 2.0, 30.0, 700.0]
    for v, got, got_e in zip(x, e1, e1e):
        assert got == pytest.approx(float(mp.e1(v)), rel=2e-15, abs=0), v
        assert got_e == pytest.approx(float(mp.exp(v) * mp.e1(v)), rel=2e-15), v
    assert edge[0] == float("inf") and edge[1] != edge[1]       # E1(0) = inf, a negative argument NaN (as scipy)
