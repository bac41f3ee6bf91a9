"""Exponential families q(θ) = h(θ) exp(<λ, T(θ)> - A(λ))  (Sec. 1.2, Table 2).

A :class:`Family` is built from a declaration (YAML data, see ``families/``).  The
engine *derives*, or *verifies when given*:

* the map ordinary → natural parameters λ (declared) and its inverse (solved);
* the log-partition A(λ), when absent, by symbolic integration over a continuous
  support (``real``, ``positive``, ``unit_interval``; several scalar variables are
  integrated one after the other) or by summation over a discrete support
  (``binary_pm1``, ``nonnegative_integers``, one-hot ``categorical``); a declared one
  is used as given and checked numerically by ``blr-derive check``;
* the expectation parameters μ = ∇A(λ) (Eq. 4), by matrix differential calculus;
* the map μ → ordinary parameters: solved symbolically when a closed form exists,
  otherwise recorded as *numeric* (``mu_inverse == "numeric"``, e.g. digamma in the
  gamma, beta and Dirichlet families) and computed by :meth:`Family.numeric_ord_from_mu`
  (Newton's method on the convex dual problem, like efax's expectation-to-natural map);
* the Fisher information F(λ) = ∇²A(λ), the entropy H(q) = A - <λ, μ> - E[log h]
  (App. B), and the domain Ω (the image of the parameter domains).

Declarations that are not normalizable (the integral diverges) or not minimal
(the Fisher information is singular) are rejected with a located SpecError.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import sympy as sp

from blr_derive.core import matcalc
from blr_derive.core.budget import StepTimeout, step_limit
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.expect import gaussian_expectation
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.matcalc import is_mat, scalarize, simplify_mat
from blr_derive.core.names import check_name_at
from blr_derive.core.sizes import declared_sizes, instantiate, resolve_sizes
from blr_derive.core.yamlio import LDict, check_keys, load_yaml_text, read_text_file, where

SHAPES = ("scalar", "vector", "matrix")
DOMAINS = {
    "real": "a real number (vector)",
    "positive": "positive (elementwise)",
    "unit_interval": "a number in (0, 1)",
    "simplex": "the scalar parameters with this domain are together the first K-1 coordinates of a "
               "probability vector: each positive, their sum below 1",
    "positive_definite": "a symmetric positive-definite matrix",
    "symmetric": "a symmetric matrix",
}
#: continuous scalar supports: integration limits
CONTINUOUS_SUPPORTS = {
    "real": (-sp.oo, sp.oo),
    "positive": (0, sp.oo),
    "unit_interval": (0, 1),
}
#: discrete scalar supports
DISCRETE_SUPPORTS = {
    "binary_pm1": "{-1, +1}",
    "nonnegative_integers": "{0, 1, 2, ...}",
}
#: supports of a fixed-size vector variable taken as a whole
JOINT_SUPPORTS = {
    "categorical": "one-hot vectors of length K (exactly one component is 1, the others 0)",
    "simplex": "the open probability simplex: components positive and summing to 1 "
               "(the last component is 1 minus the others)",
}
SUPPORTS = {
    **{k: f"({lo}, {hi})" for k, (lo, hi) in CONTINUOUS_SUPPORTS.items()},
    **DISCRETE_SUPPORTS,
    **JOINT_SUPPORTS,
    "positive_definite": "symmetric positive-definite matrices (matrix variables)",
}
SCALAR_SUPPORTS = tuple(CONTINUOUS_SUPPORTS) + tuple(DISCRETE_SUPPORTS)
FAMILY_KEYS = {
    "name", "description", "reference", "variable", "dimension", "support", "parameters",
    "sufficient_statistics", "base_measure", "natural_parameters", "log_partition",
    "expectation_parameters", "gaussian", "elementwise", "sampler", "sizes",
}
PARAM_KEYS = {"shape", "domain", "fixed", "description", "greater_than"}
VARIABLE_KEYS = {"name", "shape", "size", "components"}
MAX_SIZE = 16
#: functions whose presence in μ(ordinary) means sympy will not find a closed-form inverse
_TRANSCENDENTAL = (sp.polygamma, sp.loggamma, sp.gamma, sp.Sum, sp.LambertW, sp.erf, sp.erfc, sp.erfi, sp.hyper,
                   sp.meijerg, sp.besseli, sp.besselk, sp.zeta, sp.Piecewise, sp.uppergamma, sp.lowergamma,
                   sp.Ei, sp.expint)
#: wall-clock limits (seconds) for sympy steps that can run away on unusual declarations
SOLVE_SECONDS = 20
INTEGRATE_SECONDS = 60


@dataclass
class Param:
    name: str
    symbol: object
    shape: str
    domain: str
    fixed: bool = False
    description: str = ""
    greater_than: object = None      # lower bound (an expression in the dimension) for scalar parameters


@dataclass
class Family:
    name: str
    description: str
    reference: str
    theta: object                    # the variable: Symbol, MatrixSymbol, or a column of component symbols
    dim: object                      # dimension symbol P (None for scalar families)
    support: object                  # the declared support (a name, or a list for several components)
    params: dict                     # name -> Param
    T: list                          # sufficient statistics
    h: object                        # base measure h(θ)
    eta: list                        # λ as functions of ordinary parameters
    lam: list                        # λ block symbols
    mu: list                         # μ block symbols
    A: object                        # A(λ)
    A_given: bool
    mu_ord: list = field(default_factory=list)          # μ(ordinary)
    mu_of_lam: list = field(default_factory=list)       # μ(λ) = ∇A(λ)
    ord_from_nat: dict = field(default_factory=dict)    # param symbol -> expr(λ)
    ord_from_mu: dict = field(default_factory=dict)     # param symbol -> expr(μ); empty when numeric
    mu_inverse: str = "symbolic"                        # "symbolic" | "numeric" (see numeric_ord_from_mu)
    gaussian_mean: object = None
    gaussian_cov: object = None
    sampler: object = None          # θ as an expression of the parameters and a uniform draw u
    elementwise: bool = False
    symmetric: frozenset = frozenset()
    file: str | None = None
    steps: list = field(default_factory=list)           # (what, how) notes of the family derivation
    variable_kind: str = "scalar"                       # scalar | vector | matrix | sized | components
    components: list = field(default_factory=list)      # scalar variable symbols (empty for vector/matrix)
    component_supports: list = field(default_factory=list)   # one scalar support per component
    joint_support: str | None = None                    # categorical | simplex for a sized vector
    sizes: tuple = ()                                   # ((name, value), ...) a sized family was instantiated at
    _numeric: dict = field(default_factory=dict, repr=False)
    _log_h_linear: object = field(default=None, repr=False)

    # ------------------------------------------------------------------ helpers
    @property
    def free_params(self):
        return [p for p in self.params.values() if not p.fixed]

    @property
    def fixed_params(self):
        return [p for p in self.params.values() if p.fixed]

    @property
    def is_gaussian(self) -> bool:
        return self.gaussian_mean is not None

    @property
    def is_discrete(self) -> bool:
        return self.joint_support == "categorical" or (
            bool(self.component_supports) and all(s in DISCRETE_SUPPORTS for s in self.component_supports))

    @property
    def variable_symbols(self) -> dict:
        """The names usable for the variable in expressions (name -> sympy symbol)."""
        if self.components and self.variable_kind != "scalar":
            return {str(c): c for c in self.components}
        return {str(self.theta): self.theta}

    def depends_on_variable(self, expr) -> bool:
        """Whether ``expr`` depends on θ (on any component of a multi-component variable)."""
        if self.components and self.variable_kind != "scalar":
            return any(expr.has(c) for c in self.components)
        return expr.has(self.theta)

    def inner(self, a_blocks, b_blocks):
        """<a, b> = Σ tr(a_iᵀ b_i) over blocks."""
        total = sp.Integer(0)
        for a, b in zip(a_blocks, b_blocks):
            total += sp.Trace(a.T * b) if is_mat(a) else a * b
        return total

    def simp(self, e):
        return simplify_mat(e, self.symmetric)

    @property
    def log_h(self):
        return _loggamma_form(sp.expand_log(sp.log(self.h), force=True))

    def mean_of_mu(self):
        return self.simp(_subs(self.gaussian_mean, self.ord_from_mu))

    def cov_of_mu(self):
        return self.simp(_subs(self.gaussian_cov, self.ord_from_mu))

    def second_moment(self, mean, cov):
        if is_mat(mean):
            return self.simp(cov + mean * mean.T)
        return cov + mean**2

    def expect_gaussian(self, f, mean=None, cov=None):
        """E_q[f(θ)] in closed form for a Gaussian family (ordinary parameters by default)."""
        if not self.is_gaussian:
            raise DerivationError(f"family '{self.name}' declares no Gaussian moments")
        mean = self.gaussian_mean if mean is None else mean
        cov = self.gaussian_cov if cov is None else cov
        return self.simp(gaussian_expectation(f, self.theta, mean, self.second_moment(mean, cov), self.symmetric))

    def log_h_linear(self):
        """log h(θ) = c0 + Σ c_i T_i(θ) with θ-free c_i, as ``(c0, [c_i])``; None if it is not of that form.

        Then E_q[log h] = c0 + Σ c_i μ_i and ∇_μ E_q[log h] = (c_i) (App. B, Eq. 64).
        Only for families whose sufficient statistics are all scalars.
        """
        if self._log_h_linear is None:
            self._log_h_linear = _log_h_linear(self) or False
        return self._log_h_linear or None

    def expect_log_h(self):
        """E_q[log h(θ)] in ordinary parameters.

        * constant log h: itself;
        * Gaussian families: closed-form Gaussian moments of a polynomial log h;
        * log h = c0 + Σ c_i T_i(θ): c0 + Σ c_i μ_i;
        * discrete supports: the sum Σ_θ q(θ) log h(θ) (an unevaluated ``Sum`` for infinite supports).
        """
        lh = self.log_h
        if not self.depends_on_variable(lh):
            return lh
        if self.is_gaussian:
            try:
                return self.expect_gaussian(lh)
            except DerivationError:
                pass
        lin = self.log_h_linear()
        if lin is not None:
            c0, cs = lin
            return c0 + sum((c * m for c, m in zip(cs, self.mu_ord)), sp.Integer(0))
        if self.is_discrete:
            return _discrete_expectation(self, lh)
        raise DerivationError(
            f"family '{self.name}': E_q[log h] has no closed form here: log h = {sp.sstr(lh)} is neither constant, "
            "nor a linear combination of the sufficient statistics, nor on a discrete support")

    def entropy(self):
        """H(q) = A(λ) - <λ, μ> - E_q[log h(θ)] in ordinary parameters (App. B)."""
        A_ord = _subs(self.A, dict(zip(self.lam, self.eta)))
        H = A_ord - self.inner(self.eta, self.mu_ord) - self.expect_log_h()
        return _tidy(self.simp(H))

    def log_density(self):
        """log q(θ) = log h(θ) + <λ(ordinary), T(θ)> - A(λ(ordinary)), in θ and ordinary parameters."""
        A_ord = _subs(self.A, dict(zip(self.lam, self.eta)))
        return self.log_h + scalarize(self.inner(self.eta, self.T)) - A_ord

    def fisher_operator(self):
        """dμ as a linear function of dλ: the Fisher information F(λ) = ∇²A(λ) applied to dλ."""
        dl = [sp.MatrixSymbol(f"d_{l.name}", *l.shape) if is_mat(l) else sp.Symbol(f"d_{l.name}") for l in self.lam]
        return dl, [self.simp(matcalc.differential(m, dict(zip(self.lam, dl)))) for m in self.mu_of_lam]

    def fisher_matrix(self):
        """For scalar families: the symbolic Hessian ∇²A(λ)."""
        if any(is_mat(l) for l in self.lam):
            raise DerivationError("fisher_matrix is symbolic only for scalar families; use fisher_operator")
        return sp.Matrix([[sp.simplify(sp.diff(m, l)) for l in self.lam] for m in self.mu_of_lam])

    def fisher_at(self, lam_vals: dict, dim: int | None = None):
        """F(λ) as a dense matrix: the symbolic Hessian for scalar blocks, numeric_fisher for matrix blocks."""
        if not any(is_mat(l) for l in self.lam):
            if "fisher" not in self._numeric:      # the Hessian of A, unsimplified (only evaluated)
                self._numeric["fisher"] = sp.Matrix([[sp.diff(m, l) for l in self.lam] for m in self.mu_of_lam])
            F = self._numeric["fisher"]
            vals = {k: v for k, v in lam_vals.items()}
            return np.array(self.evaluate(F, vals, dim), dtype=float).reshape(len(self.lam), len(self.lam))
        return numeric_fisher(self, lam_vals, dim or 2)

    def domain_conditions(self):
        """Ω as conditions on λ: each free parameter, written in λ, lies in its domain."""
        out = []
        for p in self.free_params:
            if p.domain != "real" or p.greater_than is not None:
                out.append((p.name, self.ord_from_nat[p.symbol], p.domain if p.greater_than is None
                            else f"greater than {p.greater_than}"))
        return out

    def summary(self) -> dict:
        return {
            "name": self.name,
            "T": [str(t) for t in self.T],
            "h": str(self.h),
            "lambda": [str(e) for e in self.eta],
            "mu": [str(e) for e in self.mu_ord],
            "A": str(self.A),
        }

    # ------------------------------------------------------------------ numerics
    def sample_params(self, rng, dim: int = 2):
        """Random valid ordinary parameters (numpy values keyed by symbol)."""
        vals = {}
        simplex = []
        for p in self.params.values():
            n = dim
            if p.domain == "simplex":
                simplex.append(p)
                continue
            if p.shape == "scalar":
                if p.greater_than is not None:
                    lo = float(self.evaluate(p.greater_than, {}, dim))
                    vals[p.symbol] = lo + float(np.exp(0.5 * rng.normal()))
                elif p.domain == "real":
                    vals[p.symbol] = float(rng.normal())
                elif p.domain == "unit_interval":
                    vals[p.symbol] = float(1.0 / (1.0 + np.exp(-rng.normal())))
                else:
                    vals[p.symbol] = float(np.exp(0.5 * rng.normal()))
            elif p.shape == "vector":
                v = rng.normal(size=n)
                vals[p.symbol] = v if p.domain == "real" else np.exp(0.5 * v)
            else:
                B = rng.normal(size=(n, n))
                vals[p.symbol] = B @ B.T / n + 0.5 * np.eye(n)
        if simplex:
            w = rng.dirichlet(np.full(len(simplex) + 1, 2.0))
            for p, v in zip(simplex, w):
                vals[p.symbol] = float(v)
        return vals

    def default_params(self, dim: int = 2):
        """A central valid point of the parameter domains (zero, one, ½, uniform, identity)."""
        vals = {}
        simplex = [p for p in self.params.values() if p.domain == "simplex"]
        for p in self.params.values():
            if p.domain == "simplex":
                vals[p.symbol] = 1.0 / (len(simplex) + 1)
            elif p.shape == "scalar":
                if p.greater_than is not None:
                    vals[p.symbol] = float(self.evaluate(p.greater_than, {}, dim)) + 1.0
                else:
                    vals[p.symbol] = {"real": 0.0, "unit_interval": 0.5}.get(p.domain, 1.0)
            elif p.shape == "vector":
                vals[p.symbol] = np.zeros(dim) if p.domain == "real" else np.ones(dim)
            else:
                vals[p.symbol] = np.eye(dim) if p.domain == "positive_definite" else np.zeros((dim, dim))
        return vals

    def params_valid(self, vals: dict, dim: int | None = None) -> bool:
        """Whether numeric ordinary parameters lie in their declared domains."""
        simplex_sum = 0.0
        for p in self.free_params:
            v = np.asarray(vals[p.symbol], dtype=float)
            if not np.all(np.isfinite(v)):
                return False
            if p.greater_than is not None and not float(v) > float(self.evaluate(p.greater_than, {}, dim)):
                return False
            if p.domain in ("positive", "unit_interval", "simplex") and not np.all(v > 0):
                return False
            if p.domain == "unit_interval" and not np.all(v < 1):
                return False
            if p.domain == "simplex":
                simplex_sum += float(v)
            if p.domain in ("positive_definite", "symmetric"):
                if v.ndim != 2 or not np.allclose(v, v.T, rtol=1e-10, atol=1e-12):
                    return False
                if p.domain == "positive_definite" and np.linalg.eigvalsh(0.5 * (v + v.T)).min() <= 0:
                    return False
        return simplex_sum < 1

    def evaluate(self, expr, values: dict, dim: int | None = None):
        """Evaluate a symbolic expression numerically (independent of any code printer)."""
        return evaluate(expr, values, {self.dim: dim} if self.dim is not None and dim is not None else {})

    def numeric(self, dim: int | None = None) -> "NumericFamily":
        """Compiled (numpy) evaluation of A, μ, F and the maps at a numeric dimension (default 2)."""
        d = (dim or 2) if self.dim is not None else None
        if d not in self._numeric:
            self._numeric[d] = NumericFamily(self, d)
        return self._numeric[d]

    def numeric_ord_from_mu(self, values: dict, dim: int | None = None, *, tol: float = 1e-12, max_iter: int = 200):
        """Ordinary parameters from expectation parameters by Newton's method (numeric μ → λ → ordinary).

        ``values`` maps the μ block symbols (or their names ``mu1``, ``mu2``, ...) to numbers or
        arrays, plus the values of fixed parameters.  λ is found as the minimizer of the convex
        function A(λ) - <λ, μ> (its gradient is ∇A(λ) - μ, its Hessian the Fisher information),
        with a backtracking line search that keeps λ in Ω.  Returns {parameter symbol: value}
        for the free parameters, like ``ord_from_mu``.  Works for every family, also those with a
        closed-form inverse (which the tests use to cross-check it).
        """
        vals = {}
        names = {str(s): s for s in self.mu + [p.symbol for p in self.fixed_params]}
        for k, v in values.items():
            vals[names.get(k, k) if isinstance(k, str) else k] = v
        if dim is None and self.dim is not None:
            dim = next((np.asarray(v).shape[0] for v in vals.values() if np.ndim(v) >= 1), 2)
        return self.numeric(dim).ord_from_mu(vals, tol=tol, max_iter=max_iter)


def _subs(e, mapping):
    return e.xreplace(mapping) if mapping else e


def _safe_expand_log(e):
    """Expand logarithms only where it is valid: each log's argument is first cancelled
    (log(x/y) with x, y < 0 must not become log(x) - log(y)), then split by assumptions."""
    if not isinstance(e, sp.Basic) or not e.has(sp.log):
        return e
    reps = {}
    for lg in e.atoms(sp.log):
        a = lg.args[0]
        if a.has(sp.Trace, sp.Determinant) or a.is_Atom:
            continue
        c = sp.factor(sp.cancel(a))
        if c != a:
            reps[lg] = sp.log(c)
    e = e.xreplace(reps) if reps else e
    return sp.expand_log(e, force=False)


def _tidy(e):
    if is_mat(e):
        return e
    e = _safe_expand_log(e) if e.has(sp.log) else e
    if e.has(sp.Sum):
        return e
    return sp.simplify(e) if sp.count_ops(e) < 80 and not e.has(sp.Trace) else sp.expand(e)


def _loggamma_form(e):
    """log Γ(x) → loggamma(x), log x! → loggamma(x + 1) (numerically stable, differentiable)."""
    if not isinstance(e, sp.Basic) or not e.has(sp.log):
        return e
    reps = {}
    for lg in e.atoms(sp.log):
        a = lg.args[0]
        if isinstance(a, sp.gamma):
            reps[lg] = sp.loggamma(a.args[0])
        elif isinstance(a, sp.factorial):
            reps[lg] = sp.loggamma(a.args[0] + 1)
    return e.xreplace(reps) if reps else e


def evaluate(expr, values: dict, dims: dict | None = None):
    """Numerically evaluate ``expr`` with ``values`` (numpy arrays for matrix symbols)."""
    reps = {}
    for k, v in values.items():
        if is_mat(k):
            arr = np.asarray(v, dtype=float)
            if arr.ndim == 1:
                arr = arr.reshape(-1, 1)
            reps[k] = sp.ImmutableMatrix(arr.tolist())
        else:
            reps[k] = sp.Float(float(v), 30)
    for k, v in (dims or {}).items():
        reps[k] = sp.Integer(v)
    e = expr.xreplace(reps)
    e = _numeric_infinite_sums(e)
    e = e.doit()
    if isinstance(e, sp.MatrixBase) or is_mat(e):
        e = sp.Matrix(e).evalf(30)
        arr = np.array(e.tolist(), dtype=float)
        return arr
    return float(sp.N(e, 30))


def _numeric_infinite_sums(e):
    """Replace Σ_{k=a}^{∞} f(k) with numeric f by its value (terms summed until negligible)."""
    if not isinstance(e, sp.Basic) or not e.has(sp.Sum):
        return e
    reps = {}
    for s in e.atoms(sp.Sum):
        if len(s.limits) != 1:
            continue
        k, lo, hi = s.limits[0]
        if hi != sp.oo or not lo.is_Integer or (s.function.free_symbols - {k}):
            continue
        f = sp.lambdify([k], _loggamma_form(s.function), modules=["scipy", "numpy"])
        total, start, block = 0.0, int(lo), 256
        for _ in range(400):
            ks = np.arange(start, start + block, dtype=float)
            with np.errstate(all="ignore"):
                vals = np.asarray(f(ks), dtype=float) * np.ones_like(ks)
            vals = np.where(np.isfinite(vals), vals, 0.0)
            total += float(vals.sum())
            if np.all(np.abs(vals[-16:]) <= 1e-18 * max(1.0, abs(total))) and abs(vals[-1]) <= abs(vals[0]) + 1e-300:
                break
            start += block
            block *= 2
        reps[s] = sp.Float(total, 30)
    return e.xreplace(reps)


# ---------------------------------------------------------------------- loading

def load_family(ref, base_dir: Path | None = None) -> Family:
    """Load a family by built-in name, by path, or from an inline mapping."""
    from blr_derive.core.resources import families_dir

    if isinstance(ref, Family):          # already loaded (the notebook API passes Family objects)
        return ref
    given = None
    if isinstance(ref, dict) and "name" in ref and not set(ref) & (FAMILY_KEYS - {"name"}):
        # a reference with sizes: {name: categorical, K: 5} (blr_derive/sizes.py)
        given = LDict({k: v for k, v in ref.items() if k != "name"})
        given.file, given.line = getattr(ref, "file", None), getattr(ref, "line", None)
        given.lines = {k: ref.line_of(k) for k in given} if isinstance(ref, LDict) else {}
        ref = ref["name"]
        if not isinstance(ref, str) or not ref:
            raise SpecError("family name must be a built-in name or a path", given.file, given.line)
    if isinstance(ref, dict):
        return family_from_spec(ref, getattr(ref, "file", None))
    if not isinstance(ref, str) or not ref:
        raise SpecError("family must be a built-in name, a path or a mapping")
    candidates = []
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        p = Path(ref)
        if not p.is_absolute() and base_dir is not None:
            candidates.append(base_dir / p)
        candidates.append(p)
    else:
        candidates.append(families_dir() / f"{ref}.yaml")
    for c in candidates:
        try:
            found = c.exists()                         # special files are refused when read (read_text_file)
        except (OSError, ValueError):                  # e.g. a name too long for the file system, a NUL byte
            found = False
        if found:
            return _load_family_file(c, given)
    if len(candidates) > 1 or ref.endswith((".yaml", ".yml")):
        raise SpecError(f"family file '{ref}' not found")
    raise SpecError(f"unknown family '{ref}' (built-in: {', '.join(builtin_family_names())})")


_FAMILY_CACHE: dict = {}


def _load_family_file(path: Path, given=None) -> Family:
    """Derive a family from its file once per process (keyed by path, content and the sizes it is
    instantiated at): deriving A, μ and the inverse maps is the costly part of loading a recipe, and catalog
    recipes share families.  Derivations only read a Family, never modify it."""
    text = read_text_file(path, "family file")
    asked = tuple(sorted((k, v if isinstance(v, int) else repr(v)) for k, v in (given or {}).items()))
    key = (str(path.resolve()), text, asked)
    if key in _FAMILY_CACHE:
        return _FAMILY_CACHE[key]
    spec = load_yaml_text(text, str(path))
    if not isinstance(spec, dict) or not {"sufficient_statistics", "natural_parameters"} & set(spec):
        # never quote a file that is not a family declaration: it may be anything the recipe pointed at
        raise SpecError("not a family declaration (a family file declares name, variable, parameters, "
                        "sufficient_statistics and natural_parameters)", str(path), getattr(spec, "line", None) or 1)
    resolved = None
    if isinstance(spec, dict) and "sizes" in spec:
        resolved = resolve_sizes(declared_sizes(spec), given, (given, where(spec, "sizes")),
                                 f"family '{path.stem}'")
        rkey = (str(path.resolve()), text, "resolved", resolved)
        if rkey in _FAMILY_CACHE:
            _FAMILY_CACHE[key] = _FAMILY_CACHE[rkey]
            return _FAMILY_CACHE[key]
    elif given:
        name = next(iter(given))
        raise SpecError(f"'{name}' is not a size of the family '{path.stem}' (it declares no sizes)",
                        getattr(given, "file", None) or str(path),
                        given.line_of(name) if isinstance(given, LDict) else None)
    fam = family_from_spec(spec, str(path), resolved)
    _FAMILY_CACHE[key] = fam
    if resolved is not None:
        _FAMILY_CACHE[(str(path.resolve()), text, "resolved", resolved)] = fam
    return fam


def builtin_family_names():
    from blr_derive.core.resources import families_dir
    return sorted(p.stem for p in families_dir().glob("*.yaml"))


def _err(msg, container, key=None):
    f, l = where(container, key)
    return SpecError(msg, f, l)


def _parse_variable(spec, dim):
    """The variable declaration → (kind, name, theta, components, names)."""
    var = spec["variable"]
    if isinstance(var, str):
        var = LDict(name=var, shape="scalar")           # the shorthand names the line of 'variable'
        var.file, var.line = where(spec, "variable")
    if not isinstance(var, dict):
        raise _err("variable must be a name or a mapping {name, shape}", spec, "variable")
    check_keys(var, VARIABLE_KEYS, (), "variable")
    if "components" in var:
        if "name" in var or "shape" in var or "size" in var:
            raise _err("a variable with 'components' takes no name, shape or size", var, "components")
        comps = var["components"]
        if (not isinstance(comps, list) or len(comps) < 2 or len(comps) > MAX_SIZE
                or not all(isinstance(c, str) and c.isidentifier() for c in comps) or len(set(comps)) != len(comps)):
            raise _err(f"components must be a list of 2 to {MAX_SIZE} distinct names", var, "components")
        for c in comps:
            check_name_at(c, "variable component", var, "components")
        syms = [sp.Symbol(c, real=True) for c in comps]
        return "components", "(" + ", ".join(comps) + ")", sp.ImmutableMatrix(syms), syms
    if "name" not in var:
        raise _err("missing required key 'name' in variable", var, None)
    vname = check_name_at(var["name"], "variable name", var, "name", scope="prefix")
    vshape = var.get("shape", "scalar")
    if vshape not in SHAPES:
        raise _err("variable shape must be scalar, vector or matrix", var, "shape")
    if "size" in var:
        size = var["size"]
        if vshape != "vector":
            raise _err("'size' is for vector variables", var, "size")
        if isinstance(size, bool) or not isinstance(size, int) or not 2 <= size <= MAX_SIZE:
            raise _err(f"size must be an integer from 2 to {MAX_SIZE}", var, "size")
        syms = [sp.Symbol(f"{vname}{i + 1}", real=True) for i in range(size)]
        return "sized", vname, sp.ImmutableMatrix(syms), syms
    if vshape != "scalar" and dim is None:
        raise _err(f"a {vshape} variable needs a 'dimension' symbol (or a fixed 'size')", spec, "variable")
    if vshape == "vector":
        return "vector", vname, sp.MatrixSymbol(vname, dim, 1), []
    if vshape == "matrix":
        return "matrix", vname, sp.MatrixSymbol(vname, dim, dim), []
    sym = sp.Symbol(vname, real=True)
    return "scalar", vname, sym, [sym]


def _parse_support(spec, kind, components):
    """→ (declared support, per-component supports, joint support)."""
    default = "positive_definite" if kind == "matrix" else "real"
    support = spec.get("support", default)
    known = ", ".join(SUPPORTS)
    if isinstance(support, list):
        if kind != "components" or len(support) != len(components):
            raise _err("a list of supports must be aligned with the variable's components", spec, "support")
        for s in support:
            if s not in SCALAR_SUPPORTS:
                raise _err(f"unsupported component support '{s}' (known: {', '.join(SCALAR_SUPPORTS)})", spec, "support")
        if len({s in DISCRETE_SUPPORTS for s in support}) > 1:
            raise _err("mixing discrete and continuous components is not supported", spec, "support")
        return tuple(support), list(support), None
    if not isinstance(support, str) or support not in SUPPORTS:
        raise _err(f"unsupported support '{support}' (known: {known})", spec, "support")
    if kind == "vector" and support != "real":
        raise _err("a vector variable with a symbolic dimension has support 'real' (use a fixed 'size' for "
                   "categorical or simplex supports)", spec, "support")
    if kind == "matrix" and support != "positive_definite":
        raise _err("a matrix variable has support 'positive_definite'", spec, "support")
    if support == "positive_definite" and kind != "matrix":
        raise _err("support 'positive_definite' is for matrix variables", spec, "support")
    if support in JOINT_SUPPORTS:
        if kind != "sized":
            raise _err(f"support '{support}' needs a vector variable with a fixed size "
                       "(variable: {name: theta, shape: vector, size: K})", spec, "support")
        return support, [], support
    return support, [support] * len(components), None


def family_from_spec(spec, file=None, sizes: tuple | None = None) -> Family:
    """Derive a family from its declaration; a declaration with a ``sizes`` section is first instantiated at
    ``sizes`` (a tuple from :func:`blr_derive.sizes.resolve_sizes`; its defaults when None)."""
    if not isinstance(spec, dict):
        raise SpecError("a family declaration must be a mapping", file, getattr(spec, "line", None) or 1)
    if "sizes" in spec:
        if sizes is None:
            sizes = resolve_sizes(declared_sizes(spec), None)
        spec = instantiate(spec, sizes, file)
    check_keys(spec, FAMILY_KEYS, ("name", "variable", "parameters", "sufficient_statistics", "natural_parameters"), "family")
    name = check_name_at(spec["name"], "family name", spec, "name", scope="label")

    dim = None
    if "dimension" in spec:
        check_name_at(spec["dimension"], "dimension (a symbol name such as P)", spec, "dimension")
        dim = sp.Symbol(spec["dimension"], integer=True, positive=True)

    kind, vname, theta, components = _parse_variable(spec, dim)
    support, comp_supports, joint = _parse_support(spec, kind, components)

    tsyms = {str(c): c for c in components} if components else {vname: theta}
    symbols = dict(tsyms)
    if dim is not None:
        if str(dim) in symbols:
            raise _err(f"the dimension '{dim}' clashes with the variable", spec, "dimension")
        symbols[str(dim)] = dim
    symmetric = set()
    if kind == "matrix":
        symmetric.add(theta)
    params = {}
    pspec = spec["parameters"]
    if not isinstance(pspec, dict) or not pspec:
        raise _err("parameters must be a non-empty mapping", spec, "parameters")
    for pname, pdecl in pspec.items():
        check_name_at(pname, "parameter", pspec, pname)
        if pname in symbols:
            raise _err(f"parameter '{pname}' clashes with another name", pspec, pname)
        if pdecl is None:
            pdecl = LDict()
            pdecl.file, pdecl.line = where(pspec, pname)
        if not isinstance(pdecl, dict):
            raise _err(f"parameter '{pname}' must be a mapping (domain, shape, ...)", pspec, pname)
        check_keys(pdecl, PARAM_KEYS, (), f"parameter '{pname}'")
        shape = pdecl.get("shape", "scalar")
        domain = pdecl.get("domain", "real")
        if shape not in SHAPES:
            raise _err(f"parameter '{pname}': shape must be one of {', '.join(SHAPES)}", pdecl, "shape")
        if not isinstance(domain, str) or domain not in DOMAINS:
            raise _err(f"parameter '{pname}': unknown domain '{domain}' (known: {', '.join(DOMAINS)})", pdecl, "domain")
        if shape != "scalar" and dim is None:
            raise _err(f"parameter '{pname}': non-scalar parameters need a 'dimension'", pspec, pname)
        if shape == "matrix" and domain not in ("positive_definite", "symmetric"):
            raise _err(f"parameter '{pname}': matrix parameters must be positive_definite or symmetric", pdecl, "domain")
        if shape != "matrix" and domain in ("positive_definite", "symmetric"):
            raise _err(f"parameter '{pname}': domain '{domain}' is for matrix parameters", pdecl, "domain")
        if shape != "scalar" and domain in ("unit_interval", "simplex"):
            raise _err(f"parameter '{pname}': domain '{domain}' is for scalar parameters", pdecl, "domain")
        bound = None
        if "greater_than" in pdecl:
            if shape != "scalar" or domain != "real":
                raise _err(f"parameter '{pname}': 'greater_than' needs a scalar parameter with domain real", pdecl,
                           "greater_than")
            try:
                bound = parse_expression(pdecl["greater_than"], {str(dim): dim} if dim is not None else {},
                                         what=f"parameter '{pname}' greater_than")
            except SpecError as exc:
                f, l = where(pdecl, "greater_than")
                raise exc.located(f or file, l) from None
            if is_mat(bound) or bound.free_symbols - ({dim} if dim is not None else set()):
                raise _err(f"parameter '{pname}': 'greater_than' must be a number or an expression in the dimension",
                           pdecl, "greater_than")
        if shape == "scalar":
            if domain in ("positive", "unit_interval", "simplex") or (bound is not None and bound.is_nonnegative):
                sym = sp.Symbol(pname, positive=True)
            else:
                sym = sp.Symbol(pname, real=True)
        elif shape == "vector":
            sym = sp.MatrixSymbol(pname, dim, 1)
        else:
            sym = sp.MatrixSymbol(pname, dim, dim)
            symmetric.add(sym)
        fixed = pdecl.get("fixed", False)
        if not isinstance(fixed, bool):
            raise _err("'fixed' must be true or false", pdecl, "fixed")
        if fixed and domain == "simplex":
            raise _err(f"parameter '{pname}': simplex parameters cannot be fixed", pdecl, "fixed")
        params[pname] = Param(pname, sym, shape, domain, fixed, str(pdecl.get("description", "")), bound)
        symbols[pname] = sym

    def parse(text, container, key, allowed, what):
        try:
            return parse_expression(text, allowed, what=what)
        except SpecError as exc:
            f, l = where(container, key)
            raise exc.located(f or file, l) from None

    T_list = spec["sufficient_statistics"]
    eta_list = spec["natural_parameters"]
    if not isinstance(T_list, list) or not T_list:
        raise _err("sufficient_statistics must be a non-empty list", spec, "sufficient_statistics")
    if not isinstance(eta_list, list) or len(eta_list) != len(T_list):
        raise _err("natural_parameters must be a list aligned with sufficient_statistics", spec, "natural_parameters")
    tsyms = {**tsyms, **({str(dim): dim} if dim is not None else {})}
    fixed_syms = {p.name: p.symbol for p in params.values() if p.fixed}
    psyms = {k: v for k, v in symbols.items() if k not in tsyms or (dim is not None and k == str(dim))}
    T = [parse(t, T_list, i, tsyms, f"sufficient statistic {i + 1}") for i, t in enumerate(T_list)]
    eta = [parse(e, eta_list, i, psyms, f"natural parameter {i + 1}") for i, e in enumerate(eta_list)]

    def depends(e):
        return any(e.has(c) for c in components) if components else e.has(theta)

    lam, mu = [], []
    for i, (t, e) in enumerate(zip(T, eta)):
        tshape = t.shape if is_mat(t) else None
        eshape = e.shape if is_mat(e) else None
        if tshape != eshape:
            raise _err(f"natural parameter {i + 1} has shape {eshape or 'scalar'} but T_{i + 1} has {tshape or 'scalar'}",
                       eta_list, i)
        if not depends(t):
            raise _err(f"sufficient statistic {i + 1} does not depend on {vname}", T_list, i)
        if tshape:
            l = sp.MatrixSymbol(f"lambda{i + 1}", *tshape)
            u = sp.MatrixSymbol(f"mu{i + 1}", *tshape)
            if tshape[0] == tshape[1] and tshape[0] != 1:
                if simplify_mat(t.T, symmetric) == simplify_mat(t, symmetric):
                    symmetric.update({l, u})
        else:
            l, u = sp.Symbol(f"lambda{i + 1}", real=True), sp.Symbol(f"mu{i + 1}", real=True)
        lam.append(l)
        mu.append(u)
    symmetric = frozenset(symmetric)
    hsyms = {**tsyms, **fixed_syms}
    h = parse(spec.get("base_measure", 1), spec, "base_measure", hsyms, "base_measure")
    if is_mat(h):
        raise _err("base_measure must be a scalar", spec, "base_measure")

    fam = Family(
        name=name, description=str(spec.get("description", "")), reference=str(spec.get("reference", "")),
        theta=theta, dim=dim, support=support, params=params, T=T, h=h, eta=eta, lam=lam, mu=mu,
        A=None, A_given="log_partition" in spec, elementwise=bool(spec.get("elementwise", False)),
        symmetric=symmetric, file=file, variable_kind=kind, components=components,
        component_supports=comp_supports, joint_support=joint, sizes=tuple(sizes or ()),
    )
    if fam.elementwise and kind != "scalar":
        raise _err("elementwise (mean-field) families are declared for one scalar coordinate", spec, "elementwise")
    if not fam.free_params:
        raise _err("at least one parameter must be free (not fixed)", spec, "parameters")

    # 1. ordinary <- natural (solve λ = η(params))
    try:
        fam.ord_from_nat = _solve(eta, lam, fam.free_params, symmetric, fam, "nat")
    except DerivationError as exc:
        raise _err(f"cannot invert the natural parameters: {exc}", spec, "natural_parameters") from None
    fam.steps.append(("ordinary from natural", "solved λ = η(params) block by block"))

    # 2. log-partition
    if fam.A_given:
        lsyms = {f"lambda{i + 1}": l for i, l in enumerate(lam)}
        lsyms.update({str(dim): dim} if dim is not None else {})
        lsyms.update(fixed_syms)
        fam.A = scalarize(parse(spec["log_partition"], spec, "log_partition", lsyms, "log_partition"))
        if is_mat(fam.A):
            raise _err("log_partition must be a scalar", spec, "log_partition")
        fam.steps.append(("log-partition", "declared; checked numerically by `blr-derive check`"))
    else:
        if kind in ("vector", "matrix"):
            raise _err(f"log_partition must be given for {kind} families (A is integrated or summed for scalar "
                       "variables, components and fixed-size vectors only)", spec, "sufficient_statistics")
        if fam.is_discrete:
            fam.A = _sum_log_partition(fam, spec)
            fam.steps.append(("log-partition", f"A = log Σ h exp(<λ,T>) over the {_support_words(fam)} support "
                                               "(symbolic summation)"))
        else:
            fam.A = _integrate_log_partition(fam, spec)
            fam.steps.append(("log-partition", f"A = log ∫ h exp(<λ,T>) d{vname} over the {_support_words(fam)} "
                                               "support (symbolic integration)"))

    # 3. μ = ∇A(λ)  (Eq. 4)
    try:
        fam.mu_of_lam = matcalc.gradient(fam.A, lam, symmetric)
    except DerivationError as exc:
        raise _err(f"cannot differentiate the log-partition: {exc}", spec, "log_partition" if fam.A_given else "name") from None
    sub = dict(zip(lam, eta))
    fam.mu_ord = [_clean(fam.simp(m.xreplace(sub).doit())) for m in fam.mu_of_lam]
    fam.steps.append(("expectation parameters", "μ = ∇_λ A(λ) by matrix differential calculus (Eq. 4)"))

    if "expectation_parameters" in spec:
        decl = spec["expectation_parameters"]
        if not isinstance(decl, list) or len(decl) != len(T):
            raise _err("expectation_parameters must be a list aligned with sufficient_statistics", spec,
                       "expectation_parameters")
        for i, d in enumerate(decl):
            dexpr = parse(d, decl, i, psyms, f"expectation parameter {i + 1}")
            if not _equal_numeric(fam, dexpr, fam.mu_ord[i]):
                raise _err(f"declared expectation parameter {i + 1} ({d}) differs from the derived ∇A = {fam.mu_ord[i]}",
                           decl, i)
            fam.mu_ord[i] = fam.simp(dexpr)

    # 4. minimality: the Fisher information must be non-singular
    _check_minimal(fam, spec)

    # 5. ordinary <- expectation: closed form when sympy finds one, else Newton's method (numeric_ord_from_mu)
    reason = None
    free_syms = [p.symbol for p in fam.free_params if not is_mat(p.symbol)]
    if any(m.has(*_TRANSCENDENTAL) for m in fam.mu_ord if not is_mat(m)) or any(
            is_mat(m) and m.has(sp.Sum) for m in fam.mu_ord):
        reason = "μ(ordinary) involves special functions (e.g. digamma)"
    elif any(not is_mat(m) and not m.is_rational_function(*free_syms) for m in fam.mu_ord):
        # closed forms are only sought for rational maps: sympy's solve can run for very long on
        # transcendental systems (e.g. μ = tanh-like functions of an Ising pair)
        reason = "μ(ordinary) is not a rational function of the parameters"
    else:
        try:
            fam.ord_from_mu = _solve(fam.mu_ord, mu, fam.free_params, symmetric, fam, "mu")
        except DerivationError as exc:
            reason = str(exc)
    if reason is None:
        fam.steps.append(("ordinary from expectation", "solved μ = ∇A(λ(params)) block by block"))
    else:
        fam.ord_from_mu = {}
        fam.mu_inverse = "numeric"
        fam.steps.append(("ordinary from expectation",
                          f"no closed form ({reason}): numeric, by Newton's method on A(λ) - <λ, μ> "
                          "(Family.numeric_ord_from_mu)"))

    # 6. Gaussian moments (enable Bonnet / Price / exact rules)
    if "gaussian" in spec:
        g = spec["gaussian"]
        if not isinstance(g, dict):
            raise _err("gaussian must be a mapping {mean, covariance}", spec, "gaussian")
        check_keys(g, {"mean", "covariance"}, ("mean", "covariance"), "gaussian")
        if kind not in ("scalar", "vector"):
            raise _err("a gaussian section needs a scalar or vector variable", spec, "gaussian")
        fam.gaussian_mean = parse(g["mean"], g, "mean", psyms, "gaussian mean")
        fam.gaussian_cov = parse(g["covariance"], g, "covariance", psyms, "gaussian covariance")
        ms = fam.gaussian_mean.shape if is_mat(fam.gaussian_mean) else None
        if ms != (theta.shape if is_mat(theta) else None):
            raise _err("gaussian mean must have the shape of the variable", g, "mean")
        cs = fam.gaussian_cov.shape if is_mat(fam.gaussian_cov) else None
        if cs != ((theta.shape[0], theta.shape[0]) if is_mat(theta) else None):
            raise _err("gaussian covariance must be a scalar for a scalar variable and a square matrix for a vector",
                       g, "covariance")

    # 7. a sampler: θ as a function of the parameters and u ~ Uniform(0, 1) (inverse CDF); it is
    #    checked against μ by Monte Carlo in tests and enables the score-function estimator
    if "sampler" in spec:
        if kind != "scalar" or is_mat(theta):
            raise _err("samplers are supported for scalar variables", spec, "sampler")
        u = sp.Symbol("u", positive=True)
        try:
            fam.sampler = parse_expression(spec["sampler"], {**psyms, "u": u}, what="sampler", logic=True)
        except SpecError as exc:
            f, l = where(spec, "sampler")
            raise exc.located(f or file, l) from None

    return fam


def _support_words(fam):
    if fam.joint_support:
        return fam.joint_support
    s = sorted(set(fam.component_supports))
    return s[0] if len(s) == 1 else "×".join(fam.component_supports)


def _clean(e):
    if is_mat(e):
        return e
    e2 = sp.simplify(e) if sp.count_ops(e) < 60 else e
    return e2


def _equal_numeric(fam, a, b, trials=3):
    rng = np.random.default_rng(1234)
    for _ in range(trials):
        vals = fam.sample_params(rng, 2)
        x = np.atleast_1d(fam.evaluate(a, vals, 2))
        y = np.atleast_1d(fam.evaluate(b, vals, 2))
        if x.shape != y.shape or not np.allclose(x, y, rtol=1e-9, atol=1e-9):
            return False
    return True


# ------------------------------------------------------------ log-partition

def _power_form(e, variables):
    """Rewrite exp(c·log g) → g**c and exp(c·loggamma(g)) → Γ(g)**c inside a product.

    ``sympy.integrate`` recognises Gamma and Beta kernels (θ^(a-1) e^(-bθ), θ^(a-1)(1-θ)^(b-1))
    in power form but not as exp(...) of logarithms; ``summation`` needs r**k/k! for the Poisson sum.
    """
    out = sp.Integer(1)
    for f in sp.Mul.make_args(sp.powsimp(e)):
        if not isinstance(f, sp.exp):
            out *= f
            continue
        keep = sp.Integer(0)
        for term in sp.Add.make_args(sp.expand(f.args[0])):
            logs = [a for a in sp.Mul.make_args(term) if isinstance(a, (sp.log, sp.loggamma))]
            if len(logs) == 1 and any(term.has(v) for v in variables):
                c = term / logs[0]
                g = logs[0].args[0]
                out *= (sp.gamma(g) if isinstance(logs[0], sp.loggamma) else g) ** c
            else:
                keep += term
        out *= sp.exp(keep)
    return out


def _positive_dummies(fam):
    """Integration/summation variables with the assumptions of their supports."""
    reps = {}
    for c, s in zip(fam.components, fam.component_supports):
        if s in ("positive", "unit_interval"):
            reps[c] = sp.Dummy(c.name, positive=True)
        elif s == "nonnegative_integers":
            reps[c] = sp.Dummy(c.name, integer=True, nonnegative=True)
        else:
            reps[c] = sp.Dummy(c.name, real=True)
    return reps


def _definite_integral(f, x, lo, hi):
    """∫_lo^hi f dx with sympy: Meijer-G first (fast for Gamma/Beta kernels), then the default algorithm."""
    tried = []
    for kw in ({"meijerg": True}, {}):
        try:
            with step_limit(INTEGRATE_SECONDS):
                r = sp.integrate(f, (x, lo, hi), conds="none", **kw)
                if r.has(sp.hyper, sp.meijerg):
                    r = sp.hyperexpand(r)
        except Exception as exc:  # sympy internals, or StepTimeout
            tried.append(type(exc).__name__)
            continue
        if not r.has(sp.Integral, sp.hyper, sp.meijerg):
            return r
        tried.append("no closed form")
    return None


def _resolve_piecewise(fam, e):
    """Pick, for each Piecewise in a result, the branch that holds at random valid parameters."""
    if not isinstance(e, sp.Basic) or not e.has(sp.Piecewise):
        return e
    rng = np.random.default_rng(11)
    samples = [fam.sample_params(rng, 2) for _ in range(5)]
    reps = {}
    for pw in e.atoms(sp.Piecewise):
        chosen = None
        for expr, cond in pw.args:
            ok = True
            for vals in samples:
                c = cond.xreplace({k: sp.Float(float(v), 30) for k, v in vals.items() if not is_mat(k)})
                if c not in (sp.true, True):
                    ok = False
                    break
            if ok:
                chosen = expr
                break
        if chosen is None:
            return None
        reps[pw] = chosen
    return e.xreplace(reps)


def _finish_log_partition(fam, Z, spec, what):
    if Z is not None:
        Z = _resolve_piecewise(fam, Z)
    if Z is None or Z.has(sp.Integral, sp.Sum) or Z.has(sp.oo, -sp.oo, sp.zoo, sp.nan) or Z == 0:
        raise _err(f"not normalizable: {what} over the {_support_words(fam)} support diverges or has no closed form "
                   "(declare log_partition)", spec, "sufficient_statistics")
    Z = sp.simplify(Z)
    A_ord = _loggamma_form(sp.expand_log(sp.log(Z), force=True))
    A = sp.simplify(A_ord.xreplace(fam.ord_from_nat))
    return _loggamma_form(sp.expand_log(A, force=True)) if A.has(sp.gamma) else A


def _integrate_log_partition(fam: Family, spec):
    if fam.joint_support == "simplex":
        raise _err("log_partition must be given for the simplex support (the engine integrates over products of "
                   "real, positive and unit_interval components only)", spec, "sufficient_statistics")
    reps = _positive_dummies(fam)
    xs = [reps[c] for c in fam.components]
    kernel = fam.h * sp.exp(sum((e * t for e, t in zip(fam.eta, fam.T)), sp.Integer(0)))
    integrand = _power_form(kernel.xreplace(reps), xs)
    what = f"∫ h exp(<λ,T>) d{fam.theta}"
    Z = integrand
    for x, s in zip(xs, fam.component_supports):
        lo, hi = CONTINUOUS_SUPPORTS[s]
        try:
            Z = _definite_integral(Z, x, lo, hi)
        except Exception:  # pragma: no cover - sympy internals
            Z = None
        if Z is None:
            break
        Z = _resolve_piecewise(fam, Z)
        if Z is None:
            break
        if len(xs) > 1:
            Z = _power_form(sp.simplify(Z), xs)
    return _finish_log_partition(fam, Z, spec, what)


def support_points(fam, limit: int | None = None):
    """The points of a finite discrete support as dicts {component symbol: value} (None if infinite)."""
    if fam.joint_support == "categorical":
        K = len(fam.components)
        return [{c: int(i == k) for i, c in enumerate(fam.components)} for k in range(K)]
    sets = []
    for s in fam.component_supports:
        if s == "binary_pm1":
            sets.append((-1, 1))
        elif s == "nonnegative_integers":
            if limit is None:
                return None
            sets.append(tuple(range(limit)))
        else:
            return None
    return [dict(zip(fam.components, pt)) for pt in itertools.product(*sets)]


def _sum_log_partition(fam: Family, spec):
    pts = support_points(fam)
    if pts is not None:
        # finite support: Z(λ) = Σ_θ h(θ) exp(<λ, T(θ)>) directly in λ
        Z = sp.Integer(0)
        for pt in pts:
            Z += fam.h.xreplace(pt) * sp.exp(sum((l * t.xreplace(pt) for l, t in zip(fam.lam, fam.T)), sp.Integer(0)))
        if Z == 0:
            raise _err("not normalizable: h vanishes on the whole support", spec, "base_measure")
        return sp.log(Z)
    reps = _positive_dummies(fam)
    xs = [reps[c] for c in fam.components]
    kernel = fam.h * sp.exp(sum((e * t for e, t in zip(fam.eta, fam.T)), sp.Integer(0)))
    Z = _power_form(kernel.xreplace(reps), xs)
    Z = Z.rewrite(sp.factorial) if Z.has(sp.gamma) else Z
    for x in xs:
        try:
            with step_limit(INTEGRATE_SECONDS):
                Z = sp.summation(Z, (x, 0, sp.oo))
        except Exception:  # sympy internals, or StepTimeout
            Z = None
            break
    return _finish_log_partition(fam, Z, spec, f"Σ h exp(<λ,T>) over {fam.theta}")


def _discrete_expectation(fam, f):
    """E_q[f(θ)] by summation over a discrete support, in ordinary parameters."""
    logq = fam.log_density()
    pts = support_points(fam)
    if pts is not None:
        return sum((sp.exp(logq.xreplace(pt)) * f.xreplace(pt) for pt in pts), sp.Integer(0))
    if len(fam.components) != 1:
        raise DerivationError("E_q[log h] by summation is implemented for one discrete component")
    k = sp.Dummy("k", integer=True, nonnegative=True)
    (c,) = fam.components
    q = _power_form(sp.exp(sp.expand(logq.xreplace({c: k}))), [k])
    return sp.Sum(q * f.xreplace({c: k}), (k, 0, sp.oo))


def linear_in_statistics(fam, expr):
    """(c0, [c_i]) with expr = c0 + Σ c_i T_i(θ) and θ-free c_i, or None.

    Terms of the expanded expression are matched to sufficient statistics by their θ-dependent
    factor (so data and hyperparameters may appear in the coefficients); this is how a conjugate
    loss is recognised (Sec. 5.1: E_q[ℓ] is then linear in μ and its natural gradient is c)."""
    if any(is_mat(t) for t in fam.T):
        return None
    if not fam.depends_on_variable(expr):
        return expr, [sp.Integer(0)] * len(fam.T)
    targets = [sp.expand(t) for t in fam.T]
    cs = [sp.Integer(0)] * len(fam.T)
    c0 = sp.Integer(0)
    for term in sp.Add.make_args(sp.expand(sp.expand_log(expr, force=True))):
        dep = sp.Mul(*[f for f in sp.Mul.make_args(term) if fam.depends_on_variable(f)])
        coeff = sp.Mul(*[f for f in sp.Mul.make_args(term) if not fam.depends_on_variable(f)])
        if dep == 1:
            c0 += coeff
            continue
        for i, t in enumerate(targets):
            ratio = sp.simplify(dep / t) if t != 0 else None
            if ratio is not None and not fam.depends_on_variable(ratio):
                cs[i] += coeff * ratio
                break
        else:
            return None
    return c0, [sp.expand(c) for c in cs]


def _log_h_linear(fam):
    """(c0, [c_i]) with log h = c0 + Σ c_i T_i, or None."""
    lh = fam.log_h
    if any(is_mat(t) for t in fam.T) or not fam.components:
        return None
    if not fam.depends_on_variable(lh):
        return lh, [sp.Integer(0)] * len(fam.T)
    direct = linear_in_statistics(fam, lh)
    if direct is not None:
        return direct
    ts = [sp.Dummy(f"t{i}") for i in range(len(fam.T))]
    cand = sp.expand(lh.subs({t: s for t, s in zip(fam.T, ts)}, simultaneous=True))
    if not fam.depends_on_variable(cand):
        try:
            poly = sp.Poly(cand, *ts)
        except sp.PolynomialError:
            poly = None
        if poly is not None and poly.total_degree() <= 1:
            cs = [poly.coeff_monomial(s) for s in ts]
            c0 = poly.coeff_monomial(1)
            if not any(fam.depends_on_variable(c) for c in cs + [c0]):
                return c0, cs
    # numeric least squares at random support points, rationalized and then verified symbolically
    rng = np.random.default_rng(5)
    pts = _random_support_points(fam, rng, len(fam.T) + 6)
    if pts is None:
        return None
    rows, rhs = [], []
    for pt in pts:
        try:
            rows.append([1.0] + [float(sp.N(t.xreplace(pt))) for t in fam.T])
            rhs.append(float(sp.N(lh.xreplace(pt))))
        except (TypeError, ValueError):
            return None
    coef, *_ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
    cs = [sp.nsimplify(c, rational=True, tolerance=1e-9) for c in coef]
    resid = sp.simplify(lh - cs[0] - sum((c * t for c, t in zip(cs[1:], fam.T)), sp.Integer(0)))
    if fam.depends_on_variable(resid):
        return None
    return cs[0] + resid, cs[1:]


def _random_support_points(fam, rng, n):
    if fam.joint_support == "simplex":
        return [dict(zip(fam.components, [sp.Rational(int(v * 10**6), 10**6) or sp.Rational(1, 10**6)
                                          for v in rng.dirichlet(np.ones(len(fam.components)))])) for _ in range(n)]
    if fam.joint_support == "categorical" or not fam.component_supports:
        return None
    out = []
    for _ in range(n):
        pt = {}
        for c, s in zip(fam.components, fam.component_supports):
            if s == "real":
                v = sp.Rational(int(rng.normal() * 1000), 1000)
            elif s == "positive":
                v = sp.Rational(int(np.exp(rng.normal()) * 1000) + 1, 1000)
            elif s == "unit_interval":
                v = sp.Rational(int(rng.uniform(0.05, 0.95) * 1000), 1000)
            elif s == "binary_pm1":
                v = sp.Integer(int(rng.choice([-1, 1])))
            else:
                v = sp.Integer(int(rng.integers(0, 20)))
            pt[c] = v
        out.append(pt)
    return out


def _check_minimal(fam: Family, spec):
    rng = np.random.default_rng(7)
    vals = fam.sample_params(rng, 2)
    lam_vals = {}
    for l, e in zip(fam.lam, fam.eta):
        lam_vals[l] = fam.evaluate(e, vals, 2)
    lam_vals.update({p.symbol: vals[p.symbol] for p in fam.fixed_params})
    F = numeric_fisher(fam, lam_vals, 2)
    ev = np.linalg.eigvalsh(0.5 * (F + F.T))
    if not np.all(np.isfinite(ev)) or ev.min() <= 1e-9 * max(1.0, abs(ev).max()):
        raise _err("not minimal: the Fisher information ∇²A(λ) is singular (sufficient statistics are linearly dependent)",
                   spec, "sufficient_statistics")


def _basis(l, dim, symmetric):
    """Basis of the tangent space of a λ block (symmetric matrices for symmetric blocks)."""
    if not is_mat(l):
        return [1.0]
    n, m = (int(sp.sympify(s).subs({sym: dim for sym in sp.sympify(s).free_symbols})) for s in l.shape)
    out = []
    if l in symmetric:
        for i in range(n):
            for j in range(i, n):
                E = np.zeros((n, m))
                E[i, j] = E[j, i] = 1.0 if i == j else np.sqrt(0.5)
                out.append(E)
    else:
        for i in range(n):
            for j in range(m):
                E = np.zeros((n, m))
                E[i, j] = 1.0
                out.append(E)
    return out


def numeric_fisher(fam: Family, lam_vals: dict, dim: int):
    """The Fisher information ∇²A at λ as a dense matrix in an orthonormal basis of Ω's tangent space."""
    dl, dmu = fam.fisher_operator()
    bases = [_basis(l, dim, fam.symmetric) for l in fam.lam]
    cols = []
    for bi, basis in enumerate(bases):
        for E in basis:
            vals = dict(lam_vals)
            for j, d in enumerate(dl):
                if j != bi:
                    vals[d] = np.zeros_like(bases[j][0]) if is_mat(d) else 0.0
            vals[dl[bi]] = E if is_mat(dl[bi]) else float(E)
            col = []
            for k, (dm, basis_k) in enumerate(zip(dmu, bases)):
                v = np.atleast_2d(fam.evaluate(dm, vals, dim)) if is_mat(dm) else fam.evaluate(dm, vals, dim)
                for Ek in basis_k:
                    col.append(float(np.sum(np.asarray(v) * Ek)) if is_mat(dm) else float(v) * float(Ek))
            cols.append(col)
    return np.array(cols).T


# ------------------------------------------------------------------- solving

def _solve(exprs, targets, unknown_params, symmetric, fam=None, what=None):
    """Solve exprs[i](params) = targets[i] for the unknown parameters, block by block."""
    try:
        with step_limit(SOLVE_SECONDS):
            sol = _solve_blocks(exprs, targets, unknown_params, symmetric, fam, what)
    except DerivationError:
        raise
    except StepTimeout as exc:
        raise DerivationError(f"the solver {exc}") from None
    except Exception as exc:  # sympy's solvers raise NotImplementedError and friends
        raise DerivationError(f"the solver failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") from None
    if fam is not None and not _round_trips(fam, exprs, targets, sol):
        raise DerivationError("the symbolic solution does not reproduce the parameters numerically")
    return sol


def _round_trips(fam, exprs, targets, sol, trials=3):
    """params → exprs(params) = targets → sol(targets) gives back params, at random valid parameters."""
    rng = np.random.default_rng(99)
    try:
        for _ in range(trials):
            vals = fam.sample_params(rng, 2)
            tv = {t: fam.evaluate(e, vals, 2) for t, e in zip(targets, exprs)}
            tv.update({p.symbol: vals[p.symbol] for p in fam.fixed_params})
            for s, e in sol.items():
                got = np.asarray(fam.evaluate(e, tv, 2), dtype=float)
                want = np.asarray(vals[s], dtype=float).reshape(got.shape)
                if not np.allclose(got, want, rtol=1e-8, atol=1e-10):
                    return False
    except (TypeError, ValueError, ZeroDivisionError):
        return False
    return True


def _solve_blocks(exprs, targets, unknown_params, symmetric, fam=None, what=None):
    unknown = [p.symbol for p in unknown_params]
    if all(not is_mat(u) for u in unknown) and all(not is_mat(e) for e in exprs):
        eqs = [sp.Eq(e, t) for e, t in zip(exprs, targets)]
        sols = sp.solve(eqs, unknown, dict=True)
        sols = [s for s in sols if all(u in s for u in unknown)]
        if not sols:
            raise DerivationError("no solution found")
        sols = [{u: sp.simplify(s[u]) for u in unknown} for s in sols]
        if fam is not None and len(sols) > 1:
            # several branches: keep the one that reproduces valid parameters
            for s in sols:
                if _round_trips(fam, exprs, targets, s):
                    return s
        return sols[0]
    solved: dict = {}
    remaining = list(range(len(exprs)))
    progress = True
    while remaining and progress:
        progress = False
        for i in list(remaining):
            e = simplify_mat(exprs[i].xreplace(solved), symmetric) if solved else exprs[i]
            unk = [u for u in unknown if u not in solved and e.has(u)]
            if len(unk) == 0:
                remaining.remove(i)
                progress = True
                continue
            if len(unk) == 1:
                solved[unk[0]] = _isolate(e, targets[i], unk[0], symmetric)
                remaining.remove(i)
                progress = True
    missing = [u for u in unknown if u not in solved]
    if missing:
        raise DerivationError(f"could not solve for {', '.join(map(str, missing))}")
    return solved


def _isolate(e, target, p, symmetric):
    """Solve e(p) = target for p when e = c*p + r, c*M*p + r or c*inv(p) + r."""
    if not is_mat(e):
        sol = sp.solve(sp.Eq(e, target), p)
        if len(sol) != 1:
            raise DerivationError(f"cannot isolate {p} in {e}")
        return sol[0]
    terms = e.args if isinstance(e, sp.MatAdd) else (e,)
    with_p = [t for t in terms if t.has(p)]
    rest = [t for t in terms if not t.has(p)]
    if len(with_p) != 1:
        raise DerivationError(f"{p} appears in more than one term of {e}")
    t = with_p[0]
    c, mats = matcalc._split_coeff(t.args) if isinstance(t, sp.MatMul) else (sp.Integer(1), [t])
    rhs = target - sp.MatAdd(*rest) if rest else target
    rhs = simplify_mat(rhs * (1 / c) if c != 1 else rhs, symmetric)
    if mats == [p]:
        return rhs
    if len(mats) == 1 and mats[0] == sp.Inverse(p):
        return simplify_mat(sp.Inverse(rhs), symmetric)
    if mats[-1] == p and all(not m.has(p) for m in mats[:-1]):
        M = sp.MatMul(*mats[:-1]) if len(mats) > 2 else mats[0]
        return simplify_mat(sp.Inverse(M) * rhs, symmetric)
    raise DerivationError(f"cannot isolate {p} in {e}")


# ------------------------------------------------------------ numeric backend

_MODULES = ["scipy", "numpy"]


class NumericFamily:
    """A family's symbolic objects compiled to numpy at a fixed numeric dimension.

    Every (matrix) symbol is replaced by an explicit matrix of scalar symbols (symmetric ones
    share their off-diagonal entries) and the result is lambdified.  The λ blocks are given
    coordinates in an orthonormal basis of their tangent space (as in :func:`numeric_fisher`),
    so that A is a function of a flat vector c and its gradient and Hessian are μ and F in the
    same coordinates.  Used by :meth:`Family.numeric_ord_from_mu` and ``blr-derive check``.
    """

    def __init__(self, fam: Family, dim: int | None):
        self.fam, self.dim = fam, dim
        self._explicit: dict = {}
        self.bases = [_basis(l, dim or 1, fam.symmetric) for l in fam.lam]
        self.ncoord = sum(len(b) for b in self.bases)
        self.coords = [sp.Dummy(f"c{i}", real=True) for i in range(self.ncoord)]
        self.lam_explicit = {}
        k = 0
        for l, basis in zip(fam.lam, self.bases):
            cs = self.coords[k:k + len(basis)]
            k += len(basis)
            if is_mat(l):
                M = sp.zeros(*basis[0].shape)
                for c, E in zip(cs, basis):
                    M += c * sp.Matrix(_exact_basis(E))
                self.lam_explicit[l] = sp.ImmutableMatrix(M)
            else:
                self.lam_explicit[l] = cs[0]
        self.fixed = [p.symbol for p in fam.fixed_params]
        A = self._explicit_expr(fam.A, self.lam_explicit, self.fixed)
        grad = [sp.diff(A, c) for c in self.coords]
        hess = [[sp.diff(g, c) for c in self.coords] for g in grad]
        args = self.coords + self._entry_args(self.fixed)
        self._A = sp.lambdify(args, A, modules=_MODULES)
        self._grad = sp.lambdify(args, grad, modules=_MODULES)
        self._hess = sp.lambdify(args, hess, modules=_MODULES)
        self._ord = {}
        for s, e in fam.ord_from_nat.items():
            self._ord[s] = self.compile(_subs(e, self.lam_explicit), self.coords, self.fixed)

    # -- explicit entries -------------------------------------------------
    def explicit(self, sym):
        """(explicit matrix or scalar, [entry symbols]) standing for ``sym``."""
        if sym not in self._explicit:
            if is_mat(sym):
                n, m = (int(sp.sympify(s).xreplace({self.fam.dim: self.dim})) if self.fam.dim is not None
                        else int(s) for s in sym.shape)
                M = sp.zeros(n, m)
                ents = []
                for i in range(n):
                    for j in range(m):
                        if sym in self.fam.symmetric and j < i:
                            M[i, j] = M[j, i]
                            continue
                        s = sp.Dummy(f"{sym.name}_{i}{j}", real=True)
                        M[i, j] = s
                        ents.append(s)
                self._explicit[sym] = (sp.ImmutableMatrix(M), ents)
            else:
                s = sp.Dummy(str(sym), real=True)
                self._explicit[sym] = (s, [s])
        return self._explicit[sym]

    def _entry_args(self, syms):
        out = []
        for s in syms:
            out.extend(self.explicit(s)[1])
        return out

    def flatten(self, sym, value):
        """Numeric value of ``sym`` → the list of its entry values (in the order of ``explicit``)."""
        if not is_mat(sym):
            return [value]
        E, ents = self.explicit(sym)
        arr = np.asarray(value, dtype=float)
        n, m = E.shape
        arr = arr.reshape(n, m) if arr.ndim < 2 else arr
        out = []
        for i in range(n):
            for j in range(m):
                if sym in self.fam.symmetric and j < i:
                    continue
                out.append(arr[i, j])
        return out

    def _explicit_expr(self, expr, extra=None, syms=()):
        reps = dict(extra or {})
        for s in syms:
            reps[s] = self.explicit(s)[0]
        if self.fam.dim is not None and self.dim is not None:
            reps[self.fam.dim] = sp.Integer(self.dim)
        e = expr.xreplace(reps).doit()
        if isinstance(e, sp.MatrixBase):
            return sp.ImmutableMatrix(e)
        return scalarize(e)

    def compile(self, expr, scalar_args, syms=(), extra=None, post=None):
        """A numpy function of (scalar_args..., entries of syms...) returning an array of expr's shape.

        ``extra`` are further replacements made together with the explicit entries (e.g. θ by
        an explicit parametrization); ``post`` rewrites the explicit expression before lambdify.
        """
        e = self._explicit_expr(expr, extra, syms)
        if post is not None:
            e = e.applyfunc(post) if isinstance(e, sp.MatrixBase) else post(e)
        args = list(scalar_args) + self._entry_args(syms)
        if isinstance(e, sp.MatrixBase):
            shape, entries = e.shape, list(e)
        else:
            shape, entries = (), [e]
        entries = [_loggamma_form(x) for x in entries]
        free = set().union(*(x.free_symbols for x in entries)) - set(args)
        if free:
            raise DerivationError(f"cannot evaluate numerically: unknown symbols {sorted(map(str, free))}")
        fn = sp.lambdify(args, entries, modules=_MODULES)

        def call(*vals):
            with np.errstate(all="ignore"):
                outs = fn(*vals)
            bshape = np.broadcast_shapes(*[np.shape(v) for v in vals])
            arr = np.stack([np.broadcast_to(np.asarray(o, dtype=float), bshape) for o in outs])
            return arr.reshape(shape + bshape)
        return call

    # -- λ coordinates ------------------------------------------------------
    def fixed_args(self, fixed_vals: dict):
        out = []
        for s in self.fixed:
            out.extend(self.flatten(s, fixed_vals[s]))
        return out

    def coords_of(self, blocks: dict):
        """Block values {λ_i or μ_i: value} → flat coordinates <E_k, value>."""
        out = []
        for l, u, basis in zip(self.fam.lam, self.fam.mu, self.bases):
            v = blocks[l] if l in blocks else blocks[u]
            for E in basis:
                out.append(float(np.sum(np.asarray(v, dtype=float).reshape(np.shape(E)) * E)) if is_mat(l)
                           else float(v) * float(E))
        return np.array(out)

    def blocks_of(self, c):
        """Flat coordinates → λ block values."""
        out, k = {}, 0
        for l, basis in zip(self.fam.lam, self.bases):
            if is_mat(l):
                out[l] = sum(ci * E for ci, E in zip(c[k:k + len(basis)], basis))
            else:
                out[l] = float(c[k])
            k += len(basis)
        return out

    def A(self, c, fixed_vals=None):
        with np.errstate(all="ignore"):
            return float(self._A(*c, *self.fixed_args(fixed_vals or {})))

    def grad(self, c, fixed_vals=None):
        with np.errstate(all="ignore"):
            return np.array(self._grad(*c, *self.fixed_args(fixed_vals or {})), dtype=float)

    def hess(self, c, fixed_vals=None):
        with np.errstate(all="ignore"):
            return np.array(self._hess(*c, *self.fixed_args(fixed_vals or {})), dtype=float)

    def ordinary(self, c, fixed_vals=None):
        """Ordinary parameters (free ones) at coordinates c."""
        fa = self.fixed_args(fixed_vals or {})
        out = {}
        for s, f in self._ord.items():
            v = f(*c, *fa)
            out[s] = float(v) if np.ndim(v) == 0 else (v.reshape(-1) if v.shape[1:] == (1,) else v)
        return out

    def valid(self, c, fixed_vals=None):
        try:
            A = self.A(c, fixed_vals)
            if not np.isfinite(A):
                return False
            return self.fam.params_valid(self.ordinary(c, fixed_vals), self.dim)
        except (ValueError, ZeroDivisionError, np.linalg.LinAlgError):
            return False

    def ord_from_mu(self, values: dict, tol: float = 1e-12, max_iter: int = 200):
        fam = self.fam
        fixed_vals = {p.symbol: values[p.symbol] for p in fam.fixed_params}
        m = self.coords_of({u: values[u] for u in fam.mu})
        start = fam.default_params(self.dim or 2)
        start.update(fixed_vals)
        c = self.coords_of({l: fam.evaluate(e, start, self.dim) for l, e in zip(fam.lam, fam.eta)})
        if not self.valid(c, fixed_vals):
            raise DerivationError("numeric μ → λ: the starting point is not in the domain")

        def phi(x):
            return self.A(x, fixed_vals) - float(x @ m)

        f = phi(c)
        scale = 1.0 + float(np.max(np.abs(m)))
        for _ in range(max_iter):
            g = self.grad(c, fixed_vals) - m
            if np.max(np.abs(g)) <= tol * scale:
                break
            H = self.hess(c, fixed_vals)
            try:
                step = np.linalg.solve(H, g)
            except np.linalg.LinAlgError:
                step = np.linalg.lstsq(H, g, rcond=None)[0]
            if not np.all(np.isfinite(step)) or float(g @ step) <= 0:
                step = g / max(1.0, float(np.max(np.abs(np.diag(H)))))
            t = 1.0
            while t > 1e-14:
                cn = c - t * step
                if self.valid(cn, fixed_vals):
                    fn = phi(cn)
                    if fn <= f - 1e-4 * t * float(g @ step) or np.max(np.abs(t * step)) <= 1e-15 * (1 + np.max(np.abs(c))):
                        break
                t *= 0.5
            else:
                break
            if np.max(np.abs(cn - c)) <= 1e-16 * (1 + np.max(np.abs(c))):
                c = cn
                break
            c, f = cn, fn
        g = self.grad(c, fixed_vals) - m
        if not np.max(np.abs(g)) <= max(1e3 * tol, 1e-9) * scale:
            raise DerivationError(f"numeric μ → λ did not converge (|∇A(λ) - μ| = {np.max(np.abs(g)):.3g}); "
                                  "is μ inside the interior of the expectation-parameter space?")
        return self.ordinary(c, fixed_vals)


def _exact_basis(E):
    """A numeric basis matrix with entries 0, 1 or √½ as an exact sympy matrix."""
    out = []
    for row in E:
        r = []
        for v in row:
            if v == 0:
                r.append(sp.Integer(0))
            elif v == 1:
                r.append(sp.Integer(1))
            else:
                r.append(sp.sqrt(sp.Rational(1, 2)))
        out.append(r)
    return out


def _family_markdown(self) -> str:
    """Notebook view: T(θ), h(θ), λ, μ and A(λ) in LaTeX."""
    lx = lambda e: sp.latex(e, mat_symbol_style="bold")
    rows = [("T(θ)", ", ".join(f"${lx(t)}$" for t in self.T)),
            ("h(θ)", f"${lx(self.h)}$"),
            ("λ", ", ".join(f"${lx(e)}$" for e in self.eta)),
            ("μ = ∇A(λ)", ", ".join(f"${lx(e)}$" for e in self.mu_ord)),
            ("A(λ)", f"${lx(self.A)}$" + ("" if self.A_given else " (derived)"))]
    params = ", ".join(f"`{p.name}` ({p.shape}, {p.domain}{', fixed' if p.fixed else ''})" for p in self.params.values())
    out = [f"**Family `{self.name}`** — {self.description}", "", f"parameters: {params}", "",
           "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(out) + "\n"


Family._repr_markdown_ = _family_markdown


def _family_html(self) -> str:
    """Notebook HTML view (math typeset by the notebook; see blr_derive/report_html.py)."""
    from blr_derive.report.html import family_fragment
    return family_fragment(self)


def _family_latex(self) -> str:
    from blr_derive.report.html import family_latex
    return family_latex(self)


Family._repr_html_ = _family_html
Family._repr_latex_ = _family_latex
