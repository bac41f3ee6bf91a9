"""``blr-derive check`` of the generated ``objective`` for a Gaussian over a vector θ (issue 42, item 2): the full
Gaussian and its fixed-covariance or fixed-precision relatives, whose objective the scalar checks of
``verify/recipe.py`` cannot integrate.  The reference is a tensor-product Gauss–Hermite cubature of
∫ q(θ) (ℓ(θ) + log q(θ)) dθ over θ = m + L z (C = L Lᵀ, m and C the family's own Gaussian mean and covariance maps,
log q scipy's multivariate normal log-density): neither the derived entropy nor the derived E_q[ℓ] enters it.
The loss is the recipe's (explicit: printed once by the shared array printer and confirmed against the symbolic
evaluator at two nodes) or, for an estimated objective, check's test loss Σᵢ ℓ_t(θᵢ) as ``oracles['loss']``.  At
P = VECTOR_P dimensions and VECTOR_N data rows, random parameters, data and hyperparameters."""
from __future__ import annotations

import numpy as np
import sympy as sp
from scipy import stats

from blr_derive.codegen.arrays.printer import ArrayPrinter
from blr_derive.codegen.inert import identifier
from blr_derive.core.matexpr import is_mat
from blr_derive.core.nodes import GaussHermite
from blr_derive.families.symbolic import evaluate
from blr_derive.verify import descent
from blr_derive.verify.results import Check

#: the dimension of θ, the number of data rows and the Gauss–Hermite nodes per dimension of the reference cubature
VECTOR_P, VECTOR_N, CUBATURE_NODES = 2, 4, 48
#: the Gauss–Hermite nodes check gives the objective where their number is a hyperparameter
RAISED_NODES = 128
#: random inputs drawn per point wanted, at most
MAX_TRIES = 10


def vector_gaussian(fam) -> bool:
    """Whether the family is a Gaussian over a vector θ with its mean and covariance maps (the cubature's q)."""
    return (is_mat(fam.theta) and fam.theta.shape[1] == 1 and getattr(fam, "gaussian_mean", None) is not None
            and getattr(fam, "gaussian_cov", None) is not None and len(fam.components) <= 1)


def _test_loss(theta):
    """check's test loss per coordinate (verify/recipe.py's), summed over θ's coordinates."""
    theta = np.asarray(theta, dtype=float)
    return float(np.sum(0.7 * (theta - 0.3) ** 2 + np.sin(2 * theta)))


def _cubature(m, C, k=CUBATURE_NODES):
    """Nodes θ_j = m + L z_j and weights of the k^P-point Gauss–Hermite rule for N(m, C)."""
    z, w = np.polynomial.hermite_e.hermegauss(k)
    w = w / w.sum()
    P = len(m)
    Z = np.stack([g.ravel() for g in np.meshgrid(*([z] * P), indexing="ij")], axis=1)
    W = np.prod(np.stack([g.ravel() for g in np.meshgrid(*([w] * P), indexing="ij")], axis=1), axis=1)
    return m + Z @ np.linalg.cholesky(C).T, W


def _inputs(recipe, mod, seed):
    """(symbolic environment, dims, the module's state, data and hyperparameters) at random values."""
    fam = recipe.family
    rng = np.random.default_rng(600 + seed)
    P, N = VECTOR_P, VECTOR_N
    vals = fam.sample_params(rng, P)
    env = {p.symbol: vals[p.symbol] for p in fam.params.values()}
    dims = {fam.dim: P} if fam.dim is not None else {}
    data = {}
    for d in recipe.data:
        shape = tuple(P if s == fam.dim else N for s in d.shape)
        v = rng.normal(size=shape) if shape else float(rng.uniform(0.5, 3.0))
        if d.symmetric:
            v = v @ v.T + shape[0] * np.eye(shape[0])
        env[d.symbol] = v
        data[d.name] = v
        dims.update({s: N for s in d.shape if s != fam.dim})
    hyper = {}
    for h in recipe.hyper:
        if h.symbol is None or h.name not in getattr(mod, "HYPERPARAMETERS", {}):
            continue
        if h.kind == "float":
            hyper[h.name] = float(h.default) if isinstance(h.default, (int, float)) else float(rng.uniform(0.5, 2.0))
        elif h.default is not None:
            hyper[h.name] = h.default
        else:
            continue
        env[h.symbol] = hyper[h.name]
    state = {}
    for p in fam.params.values():
        v = np.asarray(vals[p.symbol], dtype=float)
        state[p.name] = v.reshape(-1) if v.ndim == 2 and v.shape[1] == 1 else v      # a vector as a 1-D array
    return env, dims, state, data, hyper


def _column(v):
    return np.asarray(v, dtype=float).reshape(-1)


def _number(v) -> float:
    """A value of the symbolic evaluator as a float (a 1×1 matrix read as its number)."""
    (x,) = _column(v)
    return float(x)


def _explicit_loss(recipe):
    """The recipe's explicit loss as a numpy function of (θ, environment), printed by the shared array printer
    (vectors as 1-D arrays); None where it needs a helper of the generated modules."""
    fam = recipe.family
    pr = ArrayPrinter()
    code = pr.doprint(recipe.loss)
    if pr.helpers:
        return None
    names = sorted((s for s in recipe.loss.free_symbols if s != fam.theta), key=str)
    args = [identifier(str(fam.theta))] + [identifier(str(s)) for s in names]
    namespace: dict = {}
    imports = "".join(f"import {m}\n" for m in sorted({"numpy"} | set(pr.imports)))
    exec(compile(f"{imports}def _loss({', '.join(args)}):\n    return {code}\n", "<check's loss>", "exec"), namespace)
    fn = namespace["_loss"]

    def loss(theta, env):
        vals = [np.squeeze(np.asarray(env[s], dtype=float)) if is_mat(s) and s.shape[1] == 1 else env[s]
                for s in names]
        return float(fn(_column(theta), *vals))
    return loss


def vector_objective_checks(recipe, D, mod, kind: str, parts=None, points: int = 3) -> list:
    """The generated objective of a vector Gaussian against the cubature (see the module docstring).  ``kind``:
    'exact' (the module's ``objective(state, data=...)``, relative error 1e-7, and a step with ρ = 0.01 must not
    raise it), 'delta' (the test loss at the point, relative 1e-9) or 'monte_carlo' (4,000 fresh draws within 5
    of their standard errors)."""
    fam = recipe.family
    name = "objective vs quadrature" if kind == "exact" else f"objective ({kind}) vs quadrature"
    tol = {"exact": 1e-7, "delta": 1e-9, "monte_carlo": 5.0}.get(kind, 1e-7)
    why = None
    if kind not in ("exact", "delta", "monte_carlo"):
        why = f"the {kind} objective is checked for one scalar variable"
    elif D.renamed:
        why = "the state holds a changed variable, not the family's parameters"
    elif kind == "exact" and recipe.loss_kind != "explicit":
        why = "no explicit loss to integrate"
    own = kind == "exact" or (parts is not None and parts.node_loss is not None)     # the recipe's own loss
    loss = _explicit_loss(recipe) if own and not why else None
    if own and not why and loss is None:
        why = "the loss needs a helper of the generated module"
    if why:
        return [Check(name, float("nan"), tol, kind="na", group="codegen", note=why)]
    lm = D.loss_model
    worst, rise, done, confirmed = 0.0, 0.0, 0, 0.0
    # a Gauss–Hermite node count of E_q[ℓ] that is a hyperparameter is raised to RAISED_NODES, so that the
    # comparison measures the objective's formula and not the rule's error at the recipe's count
    counts = {n.args[3] for n in sp.preorder_traversal(D.expected_loss)
              if isinstance(n, GaussHermite)} if isinstance(D.expected_loss, sp.Basic) else set()
    raised = [h.name for h in recipe.hyper if h.symbol is not None and h.symbol in counts
              and h.name in getattr(mod, "HYPERPARAMETERS", {})]
    for seed in range(points * MAX_TRIES):
        if done == points:
            break
        try:
            env, dims, state, data, hyper = _inputs(recipe, mod, seed)
            hyper.update({h: RAISED_NODES for h in raised})
            m = _column(evaluate(fam.gaussian_mean, env, dims))
            C = np.asarray(evaluate(fam.gaussian_cov, env, dims), dtype=float)
            C = (C + C.T) / 2
            nodes, W = _cubature(m, C)
            logq = stats.multivariate_normal(m, C).logpdf(nodes)
            dropped = any(a.name == "no_entropy" for a in recipe.approximations)
            minus_h = 0.0 if dropped else float(W @ logq)
            with np.errstate(all="ignore"):
                if kind == "exact":
                    for j in (0, len(W) // 2):      # the printed loss is the symbolic one
                        sym = _number(evaluate(recipe.loss, {**env, fam.theta: nodes[j].reshape(-1, 1)}, dims))
                        confirmed = max(confirmed, abs(loss(nodes[j], env) - sym) / max(1.0, abs(sym)))
                    want = float(W @ np.array([loss(t, env) for t in nodes])) + minus_h
                    got = float(mod.objective(state, data=data, **hyper)["objective"])
                    err = abs(got - want) / max(1.0, abs(want))
                    rise = max(rise, descent.rise(mod, state, got, data=data, hyper=hyper))
                else:
                    scale = _number(evaluate(sp.sympify(lm.scale), env, dims))
                    if kind == "delta":
                        # a scalarized program names a coordinate of a vector state by the state's name
                        coords = {sp.Symbol(str(k), real=True): k for k in env if is_mat(k)}
                        at = _column(evaluate(sp.sympify(parts.point_value).xreplace(coords), env, dims))
                        prior = _number(evaluate(lm.prior, {**env, fam.theta: at.reshape(-1, 1)}, dims)) \
                            if lm.prior != 0 else 0.0
                        if loss is not None:        # the recipe's own loss at the point (no oracle)
                            sym = _number(evaluate(recipe.loss, {**env, fam.theta: at.reshape(-1, 1)}, dims))
                            confirmed = max(confirmed, abs(loss(at, env) - sym) / max(1.0, abs(sym)))
                        want = scale * (loss(at, env) if loss is not None else _test_loss(at)) + prior + minus_h
                        got = float(mod.objective(state, oracles={"loss": _test_loss}, data=data,
                                                  **hyper)["objective"])
                        err = abs(got - want) / max(1.0, abs(want))
                    else:
                        if lm.prior != 0:
                            return [Check(name, float("nan"), tol, kind="na", group="codegen",
                                          note="a prior term in the Monte Carlo objective of a vector family")]
                        want = scale * float(W @ np.array([_test_loss(t) for t in nodes])) + minus_h
                        out = mod.objective(state, oracles={"loss": _test_loss}, data=data,
                                            rng=np.random.default_rng(700 + seed), samples=4000, **hyper)
                        got = float(out["objective"])
                        err = abs(got - want) / float(out["standard_error"])
        except (TypeError, ValueError, ZeroDivisionError, OverflowError, np.linalg.LinAlgError):
            continue
        if not (np.isfinite(want) and np.isfinite(got) and np.isfinite(err)):
            continue
        worst = max(worst, err)
        done += 1
    if not done:
        return [Check(name, float("nan"), tol, kind="na", group="codegen",
                      note="no random input gave a finite objective and reference")]
    where = (f"P = {VECTOR_P}, {CUBATURE_NODES}^{VECTOR_P}-point Gauss-Hermite cubature of q (l + log q) with "
             f"scipy's log-density, {done} random inputs")
    if confirmed > 1e-10:
        return [Check(name, confirmed, 1e-10, group="codegen",
                      note="the printed loss differs from the symbolic loss at a cubature node")]
    if kind == "exact":
        nodes = f" ({', '.join(raised)} = {RAISED_NODES})" if raised else ""
        literal = sorted(int(c) for c in counts if isinstance(c, sp.Integer))
        if literal and worst > tol:
            # the recipe's own node count is the objective's: the rule's error, not the formula's, may be what fails
            nodes += (f" (E_q[l] by the recipe's {', '.join(map(str, literal))}-node Gauss-Hermite rule: more "
                      f"nodes, or nodes as an int hyperparameter, which check raises to {RAISED_NODES}, tell the "
                      "rule's error from the formula's)")
        return [Check(name, worst, tol, group="codegen", note=f"generated objective(state){nodes} against a {where}"),
                descent.descent_check(rise)]
    if kind == "delta":
        return [Check(name, worst, tol, group="codegen",
                      note=f"generated objective with {'the recipe' + chr(39) + 's own loss' if loss else 'a test loss as oracles[loss]'}: "
                           f"l(point) - H(q) against l(point) + a {where}")]
    return [Check(name, worst, tol, group="codegen",
                  note=f"|Monte Carlo estimate (4000 samples) - {where}| in standard errors, a test loss")]


