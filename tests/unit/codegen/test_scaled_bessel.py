"""The printers' lowering of modified Bessel functions to their exponentially scaled functions (codegen/scaled.py):
the rewritten expression has the value of the original (30 digits), the factors e^{s} leave ratios, sums and
logarithms, and the family modules that print Bessel functions (von Mises in numpy, jax and torch; the generalized
inverse Gaussian's K in numpy) are finite and right where I₀ overflows and K underflows in double precision, against
closed forms in mpmath (40 digits), and equal to the unscaled functions' values (scipy's iv) at moderate arguments."""
import math
import types

import jax
import mpmath
import numpy as np
import pytest
import scipy.special
import sympy as sp
import torch

from blr_derive.codegen.registry import emit
from blr_derive.codegen.scaled import besselie, dbesselke, scaled_bessel
from blr_derive.codegen.torch_elementwise import ElementwisePrinter
from blr_derive.core.errors import UnsupportedTarget
from blr_derive.core.specialfns import dbesselk, dbesselk_numpy
from blr_derive.families.library import load_family
from blr_derive.ir.build import family_ir

x = sp.Symbol("x", positive=True)
y = sp.Symbol("y", real=True)
nu = sp.Symbol("nu", real=True)
I0, I1 = sp.besseli(0, x), sp.besseli(1, x)

LARGE_KAPPA = (1e3, 1e4, 1e6)
MODERATE_KAPPA = (1e-3, 0.5, 3.0, 50.0, 300.0)


@pytest.mark.parametrize("expr", [I1 / I0, sp.log(2 * sp.pi * I0), (I0 ** 2 - I1 ** 2) / I0 ** 2,
                                  sp.besseli(0, y) + 1, sp.log(sp.besseli(1, y) ** 2 / y), sp.sin(I0) / I1,
                                  dbesselk(1, nu, x) / dbesselk(0, nu, x), sp.log(sp.besselk(nu, x)),
                                  sp.besseli(2, x) * dbesselk(0, 2, x)])
def test_the_rewrite_keeps_the_value(expr):
    got = scaled_bessel(expr)
    assert not got.has(sp.besseli, sp.besselk, dbesselk)
    for xv, yv, nv in ((0.7, -1.3, 0.4), (12.0, 3.5, 2.25)):
        at = {x: sp.Float(xv, 40), y: sp.Float(yv, 40), nu: sp.Float(nv, 40)}
        want, have = expr.xreplace(at).evalf(30), got.xreplace(at).evalf(30)
        assert abs(have - want) <= 1e-25 * abs(want), (expr, got)


def test_the_exponentials_leave_ratios_sums_and_logarithms():
    assert scaled_bessel(I1 / I0) == besselie(1, x) / besselie(0, x)
    assert scaled_bessel(sp.log(2 * sp.pi * I0)) == x + sp.log(2 * sp.pi * besselie(0, x))
    assert scaled_bessel((I0 ** 2 - I1 ** 2) / I0 ** 2) == \
        (besselie(0, x) ** 2 - besselie(1, x) ** 2) / besselie(0, x) ** 2
    assert scaled_bessel(dbesselk(1, nu, x) / dbesselk(0, nu, x)) == dbesselke(1, nu, x) / dbesselke(0, nu, x)
    assert scaled_bessel(sp.log(sp.besselk(nu, x))) == -x + sp.log(dbesselke(0, nu, x))
    # e^{|y|} where sympy cannot tell the sign; taken out of a sum (the rest is bounded), kept inside a function
    assert scaled_bessel(sp.besseli(0, y) + 1) == sp.exp(sp.Abs(y)) * (besselie(0, y) + sp.exp(-sp.Abs(y)))
    assert scaled_bessel(sp.sin(I0)) == sp.sin(besselie(0, x) * sp.exp(x))
    assert scaled_bessel(x + 1) == x + 1


def _module(name, target):
    fam = load_family(name)
    source = emit(family_ir(fam, fam.name), target)
    mod = types.ModuleType(f"_scaled_{name}_{target}")
    exec(compile(source, f"<{name} {target}>", "exec"), mod.__dict__)
    return fam, source, mod


def _von_mises_reference(kappa, a=0.3):
    """A, μ and F of the von Mises family at λ = κ(cos a, sin a), 40 digits: A = log(2π I₀(κ)), μ = R u with
    R = I₁/I₀ and u = (cos a, sin a), F = R' u uᵀ + (R/κ)(1 − u uᵀ) with R' = 1 − R/κ − R² (DLMF 10.29.2)."""
    with mpmath.workdps(40):
        k = mpmath.mpf(kappa)
        R = mpmath.besseli(1, k) / mpmath.besseli(0, k)
        u = np.array([float(mpmath.cos(a)), float(mpmath.sin(a))])
        dR = 1 - R / k - R ** 2
        A = float(mpmath.log(2 * mpmath.pi * mpmath.besseli(0, k)))
        F = float(dR) * np.outer(u, u) + float(R / k) * (np.eye(2) - np.outer(u, u))
        return A, float(R) * u, F


def _rel(got, want):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def _unscaled(fam):
    """A, μ and F of the family as the printers wrote them before the rewrite: sympy's forms with scipy's iv."""
    F = list(fam.fisher_matrix())
    return (sp.lambdify(fam.lam, fam.A, "scipy"), sp.lambdify(fam.lam, list(fam.mu_of_lam), "scipy"),
            sp.lambdify(fam.lam, F, "scipy"))


def _check_moderate_fisher(got, before, kappa):
    """F = ∇²A is a difference of products of I₀ and I₁ that cancels to ~1/κ: any printed form of it carries
    ~κ·1e-16 relative rounding error.  Equal to the unscaled form within 1e-13 up to κ = 50; at every moderate κ
    within the cancellation bound of mpmath's value, as the unscaled form is."""
    want = np.ravel(_von_mises_reference(kappa)[2])
    if kappa <= 50:
        assert _rel(got, before) < 1e-13
    assert _rel(got, want) < 1e-14 + 1e-15 * kappa
    assert _rel(before, want) < 1e-14 + 1e-15 * kappa


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_von_mises_module_is_finite_and_right_at_large_kappa(target):
    if target == "jax":
        old = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", True)
    try:
        fam, source, m = _module("von_mises", target)
        assert "special.i0e(" in source and "special.iv(" not in source and "special.ive(" not in source
        for kappa in LARGE_KAPPA:
            lam = np.asarray(m.natural_parameters(0.3, kappa), dtype=float)
            A, mu, F = _von_mises_reference(kappa)
            assert _rel(m.log_partition(lam), A) < 1e-14
            assert _rel(m.expectation_parameters(lam), mu) < 1e-14
            # F = 1 − R/κ − R² loses log10(κ) digits to cancellation in double precision whichever form is printed
            assert _rel(m.fisher_information(lam), F) < 1e-15 * kappa
            back = m.ordinary_from_natural(lam)
            assert float(back["kappa"]) == pytest.approx(kappa, rel=1e-15)
        A0, mu0, F0 = _unscaled(fam)
        for kappa in MODERATE_KAPPA:
            lam = np.asarray(m.natural_parameters(0.3, kappa), dtype=float)
            assert _rel(m.log_partition(lam), A0(*lam)) < 1e-13
            assert _rel(m.expectation_parameters(lam), mu0(*lam)) < 1e-13
            _check_moderate_fisher(np.ravel(m.fisher_information(lam)), F0(*lam), kappa)
    finally:
        if target == "jax":
            jax.config.update("jax_enable_x64", old)


def test_von_mises_forms_printed_for_torch():
    """torch's elementwise printer (the fused path and the objective) prints the scaled I₀, I₁ as
    torch.special.i0e/i1e: the von Mises μ and F as torch code, evaluated on float64 tensors."""
    fam = load_family("von_mises")
    F = list(fam.fisher_matrix())
    pr = ElementwisePrinter()
    texts = [pr.doprint(e) for e in [fam.A, *fam.mu_of_lam, *F]]
    assert all("besseli" not in t and "torch.exp" not in t for t in texts[1:])

    def run(kappa):
        l1, l2 = torch.tensor([kappa * math.cos(0.3)], dtype=torch.float64), \
            torch.tensor([kappa * math.sin(0.3)], dtype=torch.float64)
        env = {"torch": torch, "math": math, "lambda1": l1, "lambda2": l2}
        return [float(eval(t, env)[0]) for t in texts]            # noqa: S307 -- the printer's own output
    for kappa in LARGE_KAPPA:
        A, mu, Fw = _von_mises_reference(kappa)
        got = run(kappa)
        assert _rel(got[0], A) < 1e-14 and _rel(got[1:3], mu) < 1e-14
        assert _rel(got[3:], np.ravel(Fw)) < 1e-15 * kappa
    A0, mu0, F0 = _unscaled(fam)
    for kappa in MODERATE_KAPPA:
        lam = (kappa * math.cos(0.3), kappa * math.sin(0.3))
        got = run(kappa)
        assert _rel(got[0], A0(*lam)) < 1e-13 and _rel(got[1:3], mu0(*lam)) < 1e-13
        _check_moderate_fisher(got[3:], F0(*lam), kappa)
    with pytest.raises(UnsupportedTarget, match="I_0 and I_1 only"):
        ElementwisePrinter().doprint(sp.besseli(2, x))


def test_torch_scaled_k0_k1():
    pr = ElementwisePrinter()
    xs = torch.tensor([0.01, 0.7, 30.0, 800.0, 1e5], dtype=torch.float64)
    for order in (0, 1):
        text = pr.doprint(sp.log(dbesselk(0, order, x)) + x)          # log(K_ν(x) e^x): finite where K underflows
        assert "scaled_modified_bessel_k" in text
        got = eval(text, {"torch": torch, "x": xs}).numpy()         # noqa: S307 -- the printer's own output
        np.testing.assert_allclose(got, np.log(scipy.special.kve(order, xs.numpy())), rtol=1e-13)


@pytest.mark.parametrize("n", [0, 1, 2])
@pytest.mark.parametrize("order, arg", [(0.3, 2.0), (1.7, 50.0), (0.3, 300.0), (0.3, 1e3), (2.5, 1e5), (3.0, 1e-3)])
def test_scaled_order_derivative_of_k(n, order, arg):
    """The module's _dbesselk(n, ν, x, True) (core.specialfns.dbesselk_numpy) is e^x ∂ⁿK_ν(x)/∂νⁿ to 1e-14, where
    K itself underflows (x ≥ 705) and where the trapezoidal rule needs a step below 1/32 (x > 256)."""
    with mpmath.workdps(30):
        want = float(mpmath.diff(lambda v: mpmath.besselk(v, arg), order, n) * mpmath.exp(arg))
    assert dbesselk_numpy(n, order, arg, True) == pytest.approx(want, rel=1e-14)
    if arg < 600:
        assert dbesselk_numpy(n, order, arg) == pytest.approx(want * math.exp(-arg), rel=1e-13)


def test_generalized_inverse_gaussian_module_where_k_underflows():
    """GIG(p, a, b) with √(ab) = 1225 (K_p underflows in double precision): the numpy module's A and μ against
    log(2 K_p(w)) + (p/2) log(b/a), E[log θ] = ½ log(b/a) + ∂_p log K_p(w), E[θ] = √(b/a) K_{p+1}(w)/K_p(w),
    E[1/θ] = √(a/b) K_{p+1}(w)/K_p(w) − 2p/b (mpmath, 30 digits)."""
    _, source, m = _module("generalized_inverse_gaussian", "numpy")
    assert "kve" in source and "special.kv(" not in source
    for p, a, b in ((0.3, 1e6, 1.5), (-1.2, 1.5, 1e6), (2.0, 4e4, 4e4)):
        lam = np.asarray(m.natural_parameters(p, a, b), dtype=float)
        with mpmath.workdps(30):
            P, Am, Bm = mpmath.mpf(p), mpmath.mpf(a), mpmath.mpf(b)
            w = mpmath.sqrt(Am * Bm)
            K = mpmath.besselk(P, w)
            Kp1 = mpmath.besselk(P + 1, w)
            A = mpmath.log(2 * K) + P / 2 * mpmath.log(Bm / Am)
            mu = [mpmath.log(Bm / Am) / 2 + mpmath.diff(lambda v: mpmath.log(mpmath.besselk(v, w)), P),
                  mpmath.sqrt(Bm / Am) * Kp1 / K, mpmath.sqrt(Am / Bm) * Kp1 / K - 2 * P / Bm]
        assert m.log_partition(lam) == pytest.approx(float(A), rel=1e-13)
        np.testing.assert_allclose(m.expectation_parameters(lam), [float(v) for v in mu], rtol=1e-10)
        assert np.all(np.isfinite(m.fisher_information(lam)))
