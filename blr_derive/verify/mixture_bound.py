"""``blr-derive check`` for a mixture candidate's objective, a bound (blr_derive/ir/mixture_objective.py): the generated
``objective`` at random states against quadrature of the mixture density Σ_k π_k q_k written from the component
family's log-density (not from the derived expectation or the bound's formula): E_q[ℓ] equal to ∫ q ℓ, and the
entropy it returns at most −∫ q log q (a lower bound on H, so 'objective' an upper bound on L(q) = E_q[ℓ] − H(q))."""
from __future__ import annotations

import warnings

import numpy as np
import sympy as sp

from blr_derive.families.numeric import MODULES
from blr_derive.verify.results import Check

#: how far past its bound the returned entropy may be (rounding of the quadrature), relative to max(1, |H|)
SLACK = 1e-9


def mixture_bound_checks(recipe, mod, points: int = 3) -> list:
    """'objective expected loss vs quadrature' and 'objective entropy bound holds' (see the module docstring);
    one 'na' line where the components are not scalar or the recipe reads data."""
    from scipy import integrate
    fam = recipe.family
    base = getattr(fam, "base", None)
    theta = getattr(base, "theta", None)
    if base is None or not isinstance(theta, sp.Symbol) or any(d.shape for d in recipe.data) or recipe.data:
        return [Check("objective bound vs quadrature", float("nan"), 1e-7, kind="na", group="codegen",
                      note="quadrature of a mixture's bound is checked for scalar components without data")]
    density = sp.Add(*[c.weight * sp.exp(base.log_density().xreplace(c.subs)) for c in fam.components])
    params = [p.symbol for p in fam.params.values()]
    hyper = [h for h in recipe.hyper if h.kind == "float" and h.symbol is not None]
    args = [theta] + params + [h.symbol for h in hyper]
    f_q = sp.lambdify(args, density, MODULES)
    f_loss = sp.lambdify(args, recipe.loss, MODULES)
    means = [c.subs.get(base.gaussian_mean, base.gaussian_mean) for c in fam.components]
    scales = [sp.sqrt(c.subs.get(base.gaussian_cov, base.gaussian_cov).xreplace(c.subs)) for c in fam.components]
    f_where = sp.lambdify(params + [h.symbol for h in hyper], [sp.Tuple(m, s) for m, s in zip(means, scales)],
                          MODULES)
    worst_e, worst_h, done = 0.0, 0.0, 0
    for seed in range(10 * points):
        if done == points:
            break
        rng = np.random.default_rng(700 + seed)
        vals = fam.sample_params(rng, 1)
        pv = [float(np.ravel(vals[p])[0]) for p in params]
        hv = [float(h.default) if isinstance(h.default, (int, float)) else float(rng.uniform(0.5, 2.0)) for h in hyper]
        state = {p.name: np.array([v]) for p, v in zip(fam.params.values(), pv)}
        known = {h.name: v for h, v in zip(hyper, hv) if h.name in getattr(mod, "HYPERPARAMETERS", {})}
        try:
            where = [(float(m), float(s)) for m, s in f_where(*pv, *hv)]
            centers = sorted(m for m, _ in where)
            width = 40 * max(s for _, s in where)
            lo, hi = centers[0] - width, centers[-1] + width
            q = lambda t: float(f_q(t, *pv, *hv))                       # noqa: E731
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", integrate.IntegrationWarning)
                kw = dict(points=centers, limit=500, epsabs=1e-13, epsrel=1e-12)
                E = integrate.quad(lambda t: q(t) * float(f_loss(t, *pv, *hv)), lo, hi, **kw)[0]
                H = -integrate.quad(lambda t: q(t) * np.log(max(q(t), 1e-300)), lo, hi, **kw)[0]
            out = mod.objective(state, **known)
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            continue
        if not all(np.isfinite(x) for x in (E, H, out["expected_loss"], out["entropy"])):
            continue
        worst_e = max(worst_e, abs(out["expected_loss"] - E) / max(1.0, abs(E)))
        worst_h = max(worst_h, (out["entropy"] - H) / max(1.0, abs(H)))
        done += 1
    if not done:
        return [Check("objective bound vs quadrature", float("nan"), 1e-7, kind="na", group="codegen",
                      note="no random state gave a finite objective and quadrature")]
    return [Check("objective expected loss vs quadrature", worst_e, 1e-7, group="codegen",
                  note=f"E_q[loss] of the mixture against quadrature of q·loss, {done} random states"),
            Check("objective entropy is a lower bound", max(worst_h, 0.0), SLACK, group="codegen",
                  note="(returned entropy − quadrature of −q log q)⁺, relative: 0 where the bound holds, so "
                       "'objective' ≥ L(q)")]
