"""``blr-derive check`` for the objective of a product (factorized) candidate: the bound its step returns (rules
em_bound and mean_field_bound, blr_derive/rules/product.py) and its module's ``objective`` = −bound.

The reference is computed from the recipe's blocks and factors alone, not from the derivation's expectations, its
messages or its entropy formulas: L(q) = E_q[ℓ] − H(q) (Khan & Rue 2023, Eq. 2) under q = Π_b q_b with

* each global block with a family (``exact``) integrated by the family quadrature of ``verify/quadrature.py``
  (nodes of its density h·exp(⟨λ, T⟩) at λ of the state, normalized numerically: log q_b = log h + ⟨λ, T⟩ − log Z
  with Z the quadrature's own sum, not the derived log-partition), the blocks' nodes taken as a tensor product;
* each point block (``delta``) at its state (q = N(θ_t, I): the delta method, its constant entropy dropped);
* a local block over a finite support (one per plate row, with no state: the step sets it) at the q(z_n) that
  minimizes L given the rest, min over q(z_n) of E_q[ℓ_n] − H(q(z_n)) = −log Σ_z exp(−E_{q_global}[ℓ_n(z, ·)]) (Gibbs'
  inequality), the sum taken over the family's support points (one-hot vectors for a categorical over the
  components);
* the factors written as in the recipe (a factor over the components summed over them), evaluated with the sympy
  evaluator where they hold matrices (no quadrature then), compiled to numpy over the quadrature grid where they
  are scalar.

Two checks: ``objective vs summation and quadrature`` at random states, data and hyperparameters, and
``objective never increases over rounds``: where every block's step lowers L given the others (a point block's
and the local E-step with ρ = 1: they minimize it, Sec. 5.2; a global exact block with a constant ρ in (0, 1]: its
step λ ← (1 − ρ)λ + ρλ* moves toward the block's minimizer λ*, along which KL(q_λ ‖ q_λ*), L up to a constant, falls,
Sec. 5.3) L must not rise along a few rounds of ``step`` from those states."""
from __future__ import annotations

import warnings

import numpy as np
import sympy as sp
from scipy import special

from blr_derive.core.matexpr import is_mat
from blr_derive.families.numeric import MODULES
from blr_derive.families.partition import support_points
from blr_derive.families.symbolic import evaluate
from blr_derive.verify.product import _component_state, _rest, random_inputs
from blr_derive.verify.quadrature import FamilyModel, Quadrature
from blr_derive.verify.results import Check

#: relative tolerance of the objective against the reference (quadrature by the double-exponential rule, or exact sums)
TOLERANCE = 1e-9
#: how far L may rise along a round, relative to max(1, |L|): rounding only
RISE = 1e-10
#: rounds of ``step`` per random state in the monotonicity check
ROUNDS = 5
#: quadrature nodes of q_b below this fraction of the largest are left out (their mass is below double precision)
PRUNE = 1e-17
#: the most nodes of the tensor-product grid
MAX_GRID = 400_000
#: support points of a local block, at most
MAX_SUPPORT = 64
#: the dimension, plate rows and components of the random inputs
P, ROWS, K = 2, 12, 3

NAME = "objective vs summation and quadrature"
MONOTONE = "objective never increases over rounds"


class NotCheckable(Exception):
    """The reference cannot be computed for this recipe (the message says why)."""


def product_objective_checks(recipe, D, mod, points: int = 3) -> list:
    """The two checks of the module docstring; a 'na' line with the reason where the reference does not apply."""
    try:
        ref = Reference(recipe, D)
    except NotCheckable as exc:
        return [Check(NAME, float("nan"), TOLERANCE, kind="na", group="codegen", note=str(exc))]
    worst, rise, done, climbed, skipped = 0.0, 0.0, 0, 0, 0
    for seed in range(points * 10):
        if done == points:
            break
        try:
            state, data, hp = ref.inputs(seed)
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = ref.objective(state, data, hp)
                got = float(mod.objective(mod.init(**state), data=data or None, **hp)["objective"])
        except (TypeError, ValueError, ZeroDivisionError, OverflowError, FloatingPointError, ArithmeticError,
                np.linalg.LinAlgError):
            skipped += 1
            continue
        if not (np.isfinite(want) and np.isfinite(got)):
            skipped += 1
            continue
        worst = max(worst, abs(got - want) / max(1.0, abs(want)))
        done += 1
        if ref.monotone is not None:
            continue
        r = _rounds(mod, state, data, hp)
        if r is not None:
            rise, climbed = max(rise, r), climbed + 1
    if not done:
        return [Check(NAME, float("nan"), TOLERANCE, kind="na", group="codegen",
                      note=f"no random input of {skipped} gave a finite objective and reference")]
    checks = [Check(NAME, worst, TOLERANCE, group="codegen",
                    note=f"{recipe.file}: objective() against {ref.how}; {done} random states, data and "
                         "hyperparameters")]
    if ref.monotone is not None:
        checks.append(Check(MONOTONE, float("nan"), RISE, kind="na", group="codegen", note=ref.monotone))
    elif climbed:
        checks.append(Check(MONOTONE, rise, RISE, group="codegen",
                            note=f"{recipe.file}: the largest rise of objective() over {ROUNDS} rounds of step() "
                                 f"from {climbed} random states, relative to max(1, |L|)"))
    else:
        checks.append(Check(MONOTONE, float("nan"), RISE, kind="na", group="codegen",
                            note="no random state stayed finite along the rounds"))
    return checks


def _rounds(mod, state, data, hp):
    """The largest rise of L over ``ROUNDS`` steps, relative to max(1, |L|); None where a round is not finite."""
    values, st = [], mod.init(**state)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(ROUNDS + 1):
                values.append(float(mod.objective(st, data=data or None, **hp)["objective"]))
                out = mod.step(st, data=data or None, **hp)
                st = {k: out[k] for k in mod.STATE}
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, FloatingPointError, ArithmeticError,
            np.linalg.LinAlgError):
        return None
    if not np.all(np.isfinite(values)):
        return None
    return max(0.0, float(np.max(np.diff(values)))) / max(1.0, abs(values[0]))


class Reference:
    """L(q) of a product recipe computed from its blocks and factors (see the module docstring)."""

    def __init__(self, R, D):
        self.R, self.D = R, D
        if getattr(D, "message_state", None):
            raise NotCheckable("the blocks keep one natural parameter per factor (messages): the reference takes "
                               "the blocks' parameters as state")
        if R.plate is not None and R.plate.get("minibatch") is not None:
            raise NotCheckable("a minibatch step has no objective of the whole data set to compare")
        self.exact = [b for b in R.blocks if not b.local and b.approximation == "exact"]
        self.local = [b for b in R.blocks if b.local]
        if any(b.family is None for b in self.exact):
            raise NotCheckable("a global block over the components has a built-in family (no quadrature of it here)")
        if len(self.local) > 1 or any(b.approximation != "exact" for b in self.local):
            raise NotCheckable("the reference takes at most one local block, with the exact rule")
        if R.components is not None and self.exact:
            raise NotCheckable("a component axis with global distribution blocks: not integrated here")
        if any(len(b.variables) != 1 or is_mat(b.variables[0]) or self._discrete(b.family) for b in self.exact):
            raise NotCheckable("the quadrature takes global blocks of one continuous scalar variable")
        self.support = self._support() if self.local else [{}]
        self.rows = [f for f in R.factors if f.plate]
        self.glob = [f for f in R.factors if not f.plate]
        if self.exact and any(f.expr.atoms(sp.MatrixSymbol) for f in R.factors):
            raise NotCheckable("factors with matrices are not integrated over distribution blocks here")
        self.models = {b.name: FamilyModel(b.family, 1, gaussian_components=False) for b in self.exact}
        self.compiled = {}
        parts = []
        if self.exact:
            parts.append("tensor-product quadrature of " + ", ".join(
                f"q({b.name}) ({b.family.name}, line {b.line})" for b in self.exact)
                + " from the family's density normalized numerically")
        if self.local:
            b = self.local[0]
            parts.append(f"−log Σ_z exp(−E[ℓ_n(z)]) over the {len(self.support)} support points of block "
                         f"'{b.name}' (line {b.line}) per row")
        points = [b.name for b in R.blocks if b.approximation == "delta"]
        if points:
            parts.append("the point blocks " + ", ".join(points) + " at their state")
        self.how = "; ".join(parts) + " (the recipe's factors as written)"
        # an exact block's step λ ← (1 − ρ)λ + ρλ* toward its minimizer λ* lowers L for 0 < ρ ≤ 1 (L over the block
        # is KL(q_λ ‖ q_λ*) + const, the Bregman divergence of A, which falls along the segment); a point block's
        # step and the local E-step minimize L only at ρ = 1
        def lowers(b):
            rho = sp.sympify(b.rho)
            if b.approximation == "exact" and not b.local:
                return rho.is_number and 0 < rho <= 1
            return rho == 1
        wrong = [b.name for b in R.blocks if not lowers(b)]
        self.monotone = None if not wrong else (
            f"block(s) {', '.join(wrong)} step with a ρ not known to lower L (a number in (0, 1] for a global "
            "exact block, 1 for a point or local block)")

    @staticmethod
    def _discrete(fam):
        d = getattr(fam, "is_discrete", False)
        return d() if callable(d) else bool(d)

    # -- inputs -------------------------------------------------------------------------------------------------
    def inputs(self, seed):
        rng = np.random.default_rng(900 + seed)
        if self.R.components is not None:
            env, state = _component_state(self.R, self.D, rng, P, K)
            _, state, data, hp = _rest(self.R, self.D, rng, P, ROWS, env, state, {})
        else:
            _, state, data, hp = random_inputs(self.R, self.D, rng, P, ROWS)
        if self.R.plate is not None:     # rows of data around a few centres (EM needs clusters to stay finite)
            for d in self.R.plate["data"]:
                centres = rng.normal(scale=2.0, size=(3,) + np.shape(data[d.name])[1:])
                data[d.name] = centres[np.arange(ROWS) % 3] + rng.normal(size=np.shape(data[d.name]))
        return state, data, hp

    def _support(self):
        b = self.local[0]
        if b.one_hot:
            return ["one_hot"]
        fam = b.family
        if fam is None:
            raise NotCheckable(f"local block '{b.name}' has no family to sum over")
        pts = support_points(fam, limit=MAX_SUPPORT)
        if not pts or len(pts) > MAX_SUPPORT:
            raise NotCheckable(f"local block '{b.name}': the reference sums over a finite support of at most "
                               f"{MAX_SUPPORT} points")
        back = {c: v for v, c in b.to_family.items()}
        out = []
        for pt in pts:
            vals = {back[c]: sp.Integer(int(pt[c])) if float(pt[c]).is_integer() else sp.Float(float(pt[c]))
                    for c in fam.components if c in back}
            vals.update({v: e.xreplace(vals) for v, e in b.constraint.items() if v not in vals})
            if any(v not in vals for v in b.variables):
                raise NotCheckable(f"local block '{b.name}': a variable is not fixed by the family's support")
            out.append(vals)
        return out

    # -- the value ----------------------------------------------------------------------------------------------
    def objective(self, state, data, hp):
        R = self.R
        env = {h.symbol: hp[h.name] for h in R.hyper if h.name in hp}
        env.update({d.symbol: data[d.name] for d in R.data if d.name in data})
        percomp = {}
        for b in R.blocks:
            if b.approximation != "delta":
                continue
            for v in b.variables:
                val = state[str(v)]
                if b.per_component:
                    percomp[v] = np.asarray(val)
                else:
                    env[v] = val
        grid = self._grid(state)
        total = 0.0
        if R.plate is not None:
            for n in range(len(next(iter(data[d.name] for d in R.plate["data"])))):
                renv = dict(env)
                renv.update({d.symbol: data[d.name][n] for d in R.plate["data"]})
                total += self._row(renv, percomp, grid)
        total += sum(self._expect(f, {}, env, percomp, grid) for f in self.glob)
        if grid is not None:
            total += float(np.sum(grid["w"] * grid["logq"]))
        return total

    def _row(self, renv, percomp, grid):
        if not self.local:
            return sum(self._expect(f, {}, renv, percomp, grid) for f in self.rows)
        b = self.local[0]
        if b.one_hot:                           # z_k = [k = j]: ℓ_n(e_j) = Σ_k f_k(0) + f_j(1) − f_j(0)
            z = b.variables[0]
            base = sum(self._expect(f, {z: 0}, renv, percomp, grid) for f in self.rows if not f.components)
            if any(not f.components and f.expr.has(z) for f in self.rows):
                raise NotCheckable("a factor reads the component indicator outside a sum over the components")
            at = {0: 0.0, 1: 0.0}
            for f in self.rows:
                if f.components:
                    for v in (0, 1):
                        at[v] = at[v] + self._per_component(f.expr.xreplace({z: v}), renv, percomp, grid)
            values = base + np.sum(at[0]) + (np.asarray(at[1]) - np.asarray(at[0]))
        else:
            values = np.array([sum(self._expect(f, s, renv, percomp, grid) for f in self.rows)
                               for s in self.support])
        return float(-special.logsumexp(-np.asarray(values, dtype=float)))

    def _per_component(self, expr, env, percomp, grid):
        """The values of one component's term for each component (the per-component blocks at their k-th value)."""
        n = len(next(iter(percomp.values())))
        return np.array([self._value(expr, {**env, **{v: val[k] for v, val in percomp.items()}}, grid)
                         for k in range(n)])

    def _expect(self, f, subs, env, percomp, grid):
        expr = f.expr.xreplace(subs)
        if f.components:
            return float(np.sum(self._per_component(expr, env, percomp, grid)))
        return self._value(expr, env, grid)

    def _value(self, expr, env, grid):
        """E over the grid of ``expr`` (its value where no block is integrated)."""
        if grid is None:
            v = evaluate(expr, env, {d: P for d in self.R.dims.values()})
            return float(v)
        syms = grid["symbols"]
        rest = sorted((s for s in expr.free_symbols if s not in syms), key=str)
        key = (expr, tuple(rest))
        if key not in self.compiled:
            self.compiled[key] = sp.lambdify(list(syms) + rest, expr, MODULES)
        vals = self.compiled[key](*grid["nodes"], *[float(env[s]) for s in rest])
        vals = np.broadcast_to(np.asarray(vals, dtype=float), grid["w"].shape)
        w = grid["w"]
        return float(np.sum(np.where(w > 0, w * vals, 0.0)))

    def _grid(self, state):
        """The tensor product of the exact blocks' quadrature nodes: symbols, nodes, weights, Σ_b log q_b."""
        if not self.exact:
            return None
        nodes, weights, logqs = [], [], []
        for b in self.exact:
            fam, model = b.family, self.models[b.name]
            vals = {p: state[name] for name, _, p in b.state}
            lam = {l: fam.evaluate(e, vals, model.nf.dim) for l, e in zip(fam.lam, fam.eta)}
            c = model.nf.coords_of(lam)
            with np.errstate(all="ignore"):       # overflow far in the quadrature's tails: weight 0 there
                quad = Quadrature(model, c, {}, float(model.nf.A(c, {})))  # A only names the normalization
            keep = quad.p > PRUNE * quad.p.max()
            theta = np.asarray(quad.entries[0], dtype=float)[keep]
            p = quad.p[keep]
            nodes.append(theta)
            weights.append(p / p.sum())
            logqs.append(quad.g[keep] - quad.logZ)
        if np.prod([len(n) for n in nodes]) > MAX_GRID:
            raise NotCheckable(f"the tensor-product grid would have more than {MAX_GRID} nodes")
        d = len(nodes)
        shape = lambda i: tuple(-1 if j == i else 1 for j in range(d))        # noqa: E731
        w = np.ones((1,) * d)
        logq = np.zeros((1,) * d)
        for i in range(d):
            w = w * weights[i].reshape(shape(i))
            logq = logq + logqs[i].reshape(shape(i))
        w = np.broadcast_to(w, tuple(len(n) for n in nodes))
        logq = np.broadcast_to(logq, w.shape)
        return {"symbols": [b.variables[0] for b in self.exact],
                "nodes": [nodes[i].reshape(shape(i)) for i in range(d)], "w": w, "logq": np.where(w > 0, logq, 0.0)}
