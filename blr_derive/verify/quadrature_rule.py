"""The Gauss–Hermite rule's own error where a recipe's expectations are computed by it (``gauss_hermite``: E[f(x)] and
Stein's E[f(x)(x − m)]/s² for x = aᵀθ + b ~ N(m, s²), Sec. 5.4, Eqs. 10-11): ``check`` compares the derivation with
the same rule, so the rule's error never shows in its table.  It grows with the spread s of the projection, which
grows with the scale of the inputs: a 64-node rule on f = expit (logistic regression, ncvi) is right to 2e-16 at
s = 1 and wrong by 3e-3 at s = 10 and 4e-2 at s = 30 (m = 5; 30-digit adaptive quadrature), because its nodes are
spaced ~s·π/√(2n) apart and f changes over a width of 1.  :func:`gauss_hermite_notes` measures it for the recipe's
own functions at its default node count over a range of s and reports it as a note (a warning, not a failure: the
error is the approximation the recipe chose, and s is a property of the data)."""
from __future__ import annotations

import mpmath
import numpy as np
import sympy as sp

from blr_derive.core.nodes import U, GaussHermite, GaussHermiteStein, gauss_hermite_rule
from blr_derive.derive.driver import derive

#: the standard deviations s of the projection at which the rule is measured, and the means m (m = 5 puts the
#: kink of a softplus-like f in the tail, where the rule's error is largest)
SPREADS = (1.0, 3.0, 10.0, 30.0, 100.0)
MEANS = (0.3, 5.0)
#: the relative error above which a spread is named in the note
RULE_TOLERANCE = 1e-6

_MP = {"expit": lambda x: 1 / (1 + mpmath.exp(-x)),
       "softplus": lambda x: mpmath.log1p(mpmath.exp(x)) if x < 30 else x + mpmath.log1p(mpmath.exp(-x))}
_NP = {"expit": lambda x: 0.5 * (1 + np.tanh(np.asarray(x) / 2)), "softplus": lambda x: np.logaddexp(0, x)}


def _atoms(D):
    out = set()
    for item in list(D.defs) + list(D.updates):
        e = item[-1]
        if isinstance(e, sp.Basic):
            out |= e.atoms(GaussHermite)
    return out


def rule_error(f, stein: bool, nodes: int, m: float, s: float) -> float:
    """|GH_nodes − reference| / |reference| for E[f(x)] (``stein``: E[f(x)(x − m)]/s²), x ~ N(m, s²), the reference
    by mpmath's adaptive quadrature at 30 digits, split at the mean, at 0 and far out."""
    fn = sp.lambdify([U], f, modules=[_NP, "scipy", "numpy"])
    fm = sp.lambdify([U], f, modules=[_MP, "mpmath"])
    z, w = gauss_hermite_rule(nodes)
    fx = np.asarray(fn(m + s * z), dtype=float) * np.ones_like(z)
    got = float(np.dot(fx, w * z)) / s if stein else float(np.dot(fx, w))
    with mpmath.workdps(30):
        g = (lambda t: fm(m + s * t) * t * mpmath.npdf(t) / s) if stein else (lambda t: fm(m + s * t) * mpmath.npdf(t))
        # the mean, 0 (where a softplus-like f bends), and far out, where an exponential f puts its mass (E[e^x]:
        # at t = s)
        cuts = sorted({mpmath.mpf(c) for c in (0, -m / s, -10, -5, -2, 2, 5, 10, s, -s)})
        want = mpmath.quad(g, [-mpmath.inf, *cuts, mpmath.inf])
    return abs(got - float(want)) / max(abs(float(want)), 1e-300)


def gauss_hermite_notes(recipe, D=None) -> list[str]:
    """One note per function the ``gauss_hermite`` rule integrates in the derivation ``D``: the rule's relative
    error at the recipe's default node count (``D`` derived here where not given) at each spread of SPREADS (the worst over MEANS and over E[f], E[f']),
    naming where it exceeds RULE_TOLERANCE.  No note for other recipes (nothing computed), for a node count that
    is not a number at its default, or for a function of more than the projection."""
    if not any(a.name == "gauss_hermite" for a in recipe.approximations):
        return []
    if D is None:
        D = derive(recipe)
    defaults = {h.symbol: h.default for h in recipe.hyper if h.symbol is not None}
    by_f = {}
    for a in _atoms(D):
        f, _, _, n = a.args
        n = sp.sympify(defaults.get(n, n))
        expr = f.expr if isinstance(f, sp.Lambda) else None
        if expr is None or not n.is_Integer or expr.free_symbols - {U}:
            continue
        by_f.setdefault((expr, int(n)), set()).add(isinstance(a, GaussHermiteStein))
    notes = []
    for (expr, n), kinds in sorted(by_f.items(), key=lambda kv: str(kv[0])):
        try:
            errs = [max(rule_error(expr, stein, n, m, s) for stein in kinds for m in MEANS) for s in SPREADS]
        except (TypeError, ValueError, ZeroDivisionError, OverflowError, NameError):
            continue
        bad = [(s, e) for s, e in zip(SPREADS, errs) if not e <= RULE_TOLERANCE]
        where = ", ".join(f"{e:.1e} at s = {s:g}" for s, e in bad) if bad else \
            f"at most {max(errs):.1e} up to s = {SPREADS[-1]:g}"
        notes.append(f"gauss_hermite: the {n}-node rule's own relative error in E[f(x)]"
                     + (" and E[f'(x)]" if len(kinds) > 1 else "") + f" for f(u) = {sp.sstr(expr)}, x ~ N(m, s²) "
                     f"(s: the spread of the projection under q, which grows with the inputs' scale), against 30-digit "
                     f"adaptive quadrature: {where}"
                     + (f" (WARNING: above {RULE_TOLERANCE:g}; raise 'nodes' for inputs of that scale)" if bad else ""))
    return notes
