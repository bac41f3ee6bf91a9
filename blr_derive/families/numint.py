"""Expectations with no closed form, by numerical integration over one continuous variable (App. B: the entropy's
E_q[log h] when neither the statistics nor the tilted log-partition give it).

:func:`expectation_integral` writes E_q[g(θ)] as the unevaluated ``Integral(g·q, (θ, lo, hi))`` over the support,
in the ordinary parameters (as an infinite discrete support gives an unevaluated ``Sum``); :func:`integral_value`
evaluates such an integral once every parameter is a number (``blr_derive.families.symbolic.evaluate`` calls it):

* the variable is mapped to an unconstrained u (θ = e^u on (0, ∞), θ = a + (b − a)σ(u) on (a, b), θ = u on ℝ), with
  every logarithm of θ, θ − a and b − θ written in u exactly (log θ = u, log θ = −softplus(−u)), so that mass at
  θ = e^{−5000} (a gamma of shape 0.01) is integrated, not lost to underflow;
* the integrand's factors are split into a weight w(u) (numbers, exponentials and powers, handled in log space) and
  the rest g(u); the mass of w·J is located on a grid of 4001 points (sinh-spaced: several modes are seen), its mode
  refined, and each side's spread taken as the distance at which log w·J first falls by 1 — the density's own
  spread, never the curvature at the mode (a flat mode has none);
* panels of growing width (×1.25 from half that spread) out to where log w·J has fallen by 70 and past every grid
  point above that level, each integrated by 20-point Gauss–Legendre; the panels are halved until two successive
  values agree to 1e-10 of ∫|w g J| (at most 6 times; 1e-8 after the last, where the integrand's own rounding
  is the limit; a value that never settles is an error, not a number).
"""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.core.errors import DerivationError
from blr_derive.core.specialfns import dbesselk_numpy, softplus
from blr_derive.spec.vocabulary import CONTINUOUS_SUPPORTS

#: numpy implementations of the engine's own functions for the integrands
_MODULES = [{"softplus": lambda x: np.logaddexp(0.0, x), "dbesselk": dbesselk_numpy}, "scipy", "numpy"]

#: how far (in e-folds of the weight below its maximum) the panels reach
DROP = 70.0
#: the agreement required of two successive refinements, relative to ∫|w g| (the integrand's own rounding in
#: floating point, e.g. 1e5·u − 1e-5·e^u − 2.2e6 for a gamma of shape 1e5, is ~1e-11 of it)
RTOL = 1e-10
#: accepted after the last refinement: an integrand whose log is itself rounded at ~1e-7 (a normal of standard
#: deviation 1e-3 at mean 1e6: (θ − m)² loses digits) gives values that wander at ~1e-9, not a wrong number
FLOOR = 1e-8
GL_NODES, GL_WEIGHTS = np.polynomial.legendre.leggauss(20)


def expectation_integral(fam, g):
    """E_q[g(θ)] as ``Integral(g(θ)·q(θ), (θ, lo, hi))`` in the ordinary parameters for a family of one continuous
    scalar variable, or None (several variables, a discrete support)."""
    if len(fam.components) != 1 or fam.component_supports[0] not in CONTINUOUS_SUPPORTS:
        return None
    theta = fam.components[0]
    lo, hi = CONTINUOUS_SUPPORTS[fam.component_supports[0]]
    return sp.Integral(g * sp.exp(fam.log_density()), (theta, lo, hi))


def _coordinates(x, lo, hi, u):
    """(θ(u), {log-argument: its log in u}, log J(u)) for the support (lo, hi)."""
    if lo == -sp.oo and hi == sp.oo:
        return u, {}, sp.Integer(0)
    if hi == sp.oo:                                      # θ = lo + e^u
        return lo + sp.exp(u), {x - lo: u}, u
    if lo == -sp.oo:                                     # θ = hi − e^u
        return hi - sp.exp(u), {hi - x: u}, u
    width = hi - lo                                      # θ = lo + (hi − lo)σ(u)
    lx, lb = sp.log(width) - softplus(-u), sp.log(width) - softplus(u)
    return lo + width / (1 + sp.exp(-u)), {x - lo: lx, hi - x: lb}, lx + lb - sp.log(width)


def _in_u(e, x, x_u, logs):
    """e(θ) written in u: logarithms of θ − lo and hi − θ (after expanding every log) by their exact forms."""
    e = sp.expand_log(e, force=True)

    def log_of(n):
        arg = n.args[0]
        inner = sp.expand(arg.args[0] if isinstance(arg, sp.Abs) else arg)
        for k, v in logs.items():
            if sp.expand(inner - k) == 0 or (isinstance(arg, sp.Abs) and sp.expand(inner + k) == 0):
                return v
        return n
    e = e.replace(lambda n: isinstance(n, sp.log) and n.has(x), log_of)
    return e.xreplace({x: x_u})


def _split(f, x):
    """f = weight · rest: the weight's log as a sum (constants, exponents of exponentials, c·log|base| of powers with
    a θ-free exponent), the rest the other factors (g, which may change sign)."""
    logw, rest = [], sp.Integer(1)
    for fac in sp.Mul.make_args(f):
        if not fac.has(x):
            if fac.is_number and fac.is_positive:
                logw.append(sp.log(fac))
            else:
                rest *= fac
        elif isinstance(fac, sp.exp):
            logw.append(fac.args[0])
        elif isinstance(fac, sp.Pow) and not fac.exp.has(x):
            # a base under a non-integer power is positive on the support (else the density were not real); under
            # an odd power its sign stays with the rest
            logw.append(fac.exp * sp.log(sp.Abs(fac.base) if fac.exp.is_integer else fac.base))
            if fac.exp.is_integer and fac.exp.is_odd:
                rest *= sp.sign(fac.base)
        else:
            rest *= fac
    return sp.Add(*logw), rest


def _grid(lo, hi):
    """The scan grid in u: sinh-spaced, wide enough for the coordinates of (lo, hi)."""
    v = np.linspace(-1.0, 1.0, 4001)
    if lo == -sp.oo and hi == sp.oo:
        return np.sinh(40.0 * v)                         # |θ| up to 1e17
    return np.sinh(8.0 * v)                              # |u| up to 1490: θ from e^{-1490} to e^{1490} (log forms)


def integral_value(node) -> float:
    """The value of ``Integral(f(θ), (θ, lo, hi))`` with numbers for every parameter (see the module docstring)."""
    (x, lo, hi), = node.limits
    u = sp.Dummy("u", real=True)
    x_u, logs, logJ = _coordinates(x, lo, hi, u)
    logw, rest = _split(node.function, x)
    Lf = sp.lambdify([u], _in_u(logw, x, x_u, logs) + logJ, modules=_MODULES)
    gf = sp.lambdify([u], _in_u(rest, x, x_u, logs), modules=_MODULES)

    def L(t):
        t = np.asarray(t, dtype=float)
        with np.errstate(all="ignore"):
            v = np.asarray(Lf(t), dtype=float) * np.ones_like(t)
        return np.where(np.isnan(v), -np.inf, v)

    def g(t):
        t = np.asarray(t, dtype=float)
        with np.errstate(all="ignore"):
            return np.asarray(gf(t), dtype=float) * np.ones_like(t)

    grid = _grid(lo, hi)
    Lg = L(grid)
    i = int(np.argmax(Lg))
    if not np.isfinite(Lg[i]) or Lg[i] == np.inf:
        raise DerivationError(f"the integral {sp.sstr(node)} has no finite mass to integrate numerically")
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    from scipy import optimize                 # lazy: scipy.optimize costs ~0.5 s of every process start

    r = optimize.minimize_scalar(lambda t: -float(L(t)), bounds=(a, b), method="bounded",
                                 options={"xatol": 1e-12 * max(1.0, abs(grid[i]))})
    u0, M = (float(r.x), -float(r.fun)) if -float(r.fun) > Lg[i] else (float(grid[i]), float(Lg[i]))
    above = grid[Lg > M - DROP]            # empty for a peak narrower than the grid's spacing
    reach = (u0 - float(above.min()), float(above.max()) - u0) if above.size else (0.0, 0.0)
    sides = []
    for sign, far in ((-1.0, reach[0]), (1.0, reach[1])):
        step = 1e-10 * max(1.0, abs(u0))
        while step < 1e18 and float(L(u0 + sign * step)) > M - 1.0:
            step *= 2.0
        sides.append((sign, step, far))

    def value(split):
        total, worst = 0.0, 0.0
        for sign, spread, far in sides:
            width, edge, n = spread / 2.0 / split, 0.0, 0
            edges = [0.0]
            while n < 100_000:
                edge += width
                edges.append(edge)
                n += 1
                if edge >= far and float(L(u0 + sign * edge)) < M - DROP:
                    break
                width *= 1.25 ** (1.0 / split)
            else:
                raise DerivationError(f"the integral {sp.sstr(node)} does not decay: not integrable numerically")
            e = np.array(edges)
            mid, half = (e[1:] + e[:-1]) / 2, (e[1:] - e[:-1]) / 2
            t = u0 + sign * (mid[:, None] + half[:, None] * GL_NODES[None, :])
            w = np.exp(L(t) - M)
            gv = g(t)
            contrib = np.where(w > 0, w * gv, 0.0)
            total += float(np.sum(half[:, None] * GL_WEIGHTS[None, :] * contrib))
            worst += float(np.sum(half[:, None] * GL_WEIGHTS[None, :] * np.abs(contrib)))
        return total, worst

    prev, diff = None, np.inf
    for k in range(7):
        cur, scale = value(2 ** k)
        if not (np.isfinite(cur) and np.isfinite(scale)):
            raise DerivationError(f"the integral {sp.sstr(node)} is not finite at these parameters")
        if prev is not None:
            diff = abs(cur - prev) / max(scale, 1e-300)
            if diff <= RTOL:
                return float(cur * np.exp(M))
        prev = cur
    if diff <= FLOOR:                # settled at the integrand's own rounding (see FLOOR)
        return float(cur * np.exp(M))
    raise DerivationError(f"the integral {sp.sstr(node)} did not settle under numerical integration "
                          f"(the last two refinements differ by {diff:.1e} of ∫|integrand|)")


def numeric_integrals(e):
    """Every ``Integral`` over one variable whose integrand has no other free symbol replaced by its value."""
    if not isinstance(e, sp.Basic) or not e.has(sp.Integral):
        return e
    reps = {}
    for n in e.atoms(sp.Integral):
        if len(n.limits) == 1 and len(n.limits[0]) == 3 and not n.free_symbols:
            reps[n] = sp.Float(integral_value(n), 30)
    return e.xreplace(reps) if reps else e
