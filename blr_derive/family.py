"""Exponential families q(θ) = h(θ) exp(<λ, T(θ)> - A(λ))  (Sec. 1.2, Table 2).

A :class:`Family` is built from a declaration (YAML data, see ``families/``).  The
engine *derives*, or *verifies when given*:

* the map ordinary → natural parameters λ (declared) and its inverse (solved);
* the log-partition A(λ), by symbolic integration over the support when absent
  (scalar families), otherwise the declared one is used and checked by ``verify``;
* the expectation parameters μ = ∇A(λ) (Eq. 4), by matrix differential calculus;
* the map μ → ordinary parameters (solved), hence μ ↔ λ ↔ ordinary;
* the Fisher information F(λ) = ∇²A(λ), the entropy H(q) = A - <λ, μ> - E[log h],
  and the domain Ω (the image of the parameter domains).

Declarations that are not normalizable (the integral diverges) or not minimal
(the Fisher information is singular) are rejected with a located SpecError.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import sympy as sp

from . import matcalc
from .errors import DerivationError, SpecError
from .expect import gaussian_expectation
from .exprparse import parse_expression
from .matcalc import is_mat, scalarize, simplify_mat
from .yamlio import LDict, check_keys, load_yaml_file, where

SHAPES = ("scalar", "vector", "matrix")
DOMAINS = {
    "real": "a real number (vector)",
    "positive": "positive (elementwise)",
    "positive_definite": "a symmetric positive-definite matrix",
    "symmetric": "a symmetric matrix",
}
SUPPORTS = {
    "real": (-sp.oo, sp.oo),
    "positive": (0, sp.oo),
    "unit_interval": (0, 1),
}
FAMILY_KEYS = {
    "name", "description", "reference", "variable", "dimension", "support", "parameters",
    "sufficient_statistics", "base_measure", "natural_parameters", "log_partition",
    "expectation_parameters", "gaussian", "elementwise",
}
PARAM_KEYS = {"shape", "domain", "fixed", "description"}


@dataclass
class Param:
    name: str
    symbol: object
    shape: str
    domain: str
    fixed: bool = False
    description: str = ""


@dataclass
class Family:
    name: str
    description: str
    reference: str
    theta: object
    dim: object                      # dimension symbol P (None for scalar families)
    support: str
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
    ord_from_mu: dict = field(default_factory=dict)     # param symbol -> expr(μ)
    gaussian_mean: object = None
    gaussian_cov: object = None
    elementwise: bool = False
    symmetric: frozenset = frozenset()
    file: str | None = None
    steps: list = field(default_factory=list)           # (what, how) notes of the family derivation

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
        return sp.expand_log(sp.log(self.h), force=True)

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

    def entropy(self):
        """H(q) = A(λ) - <λ, μ> - E_q[log h(θ)] in ordinary parameters (App. B)."""
        A_ord = _subs(self.A, dict(zip(self.lam, self.eta)))
        e_logh = self.expect_gaussian(self.log_h) if self.log_h.has(self.theta) else self.log_h
        H = A_ord - self.inner(self.eta, self.mu_ord) - e_logh
        return _tidy(self.simp(H))

    def fisher_operator(self):
        """dμ as a linear function of dλ: the Fisher information F(λ) = ∇²A(λ) applied to dλ."""
        dl = [sp.MatrixSymbol(f"d_{l.name}", *l.shape) if is_mat(l) else sp.Symbol(f"d_{l.name}") for l in self.lam]
        return dl, [self.simp(matcalc.differential(m, dict(zip(self.lam, dl)))) for m in self.mu_of_lam]

    def fisher_matrix(self):
        """For scalar families: the symbolic Hessian ∇²A(λ)."""
        if any(is_mat(l) for l in self.lam):
            raise DerivationError("fisher_matrix is symbolic only for scalar families; use fisher_operator")
        return sp.Matrix([[sp.simplify(sp.diff(m, l)) for l in self.lam] for m in self.mu_of_lam])

    def domain_conditions(self):
        """Ω as conditions on λ: each free parameter, written in λ, lies in its domain."""
        out = []
        for p in self.free_params:
            if p.domain != "real":
                out.append((p.name, self.ord_from_nat[p.symbol], p.domain))
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
        for p in self.params.values():
            n = dim
            if p.shape == "scalar":
                vals[p.symbol] = float(rng.normal()) if p.domain == "real" else float(np.exp(0.5 * rng.normal()))
            elif p.shape == "vector":
                v = rng.normal(size=n)
                vals[p.symbol] = v if p.domain == "real" else np.exp(0.5 * v)
            else:
                B = rng.normal(size=(n, n))
                vals[p.symbol] = B @ B.T / n + 0.5 * np.eye(n)
        return vals

    def evaluate(self, expr, values: dict, dim: int | None = None):
        """Evaluate a symbolic expression numerically (independent of any code printer)."""
        return evaluate(expr, values, {self.dim: dim} if self.dim is not None and dim is not None else {})


def _subs(e, mapping):
    return e.xreplace(mapping) if mapping else e


def _tidy(e):
    if is_mat(e):
        return e
    e = sp.expand_log(e, force=True) if e.has(sp.log) else e
    return sp.simplify(e) if sp.count_ops(e) < 80 and not e.has(sp.Trace) else sp.expand(e)


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
    e = e.doit()
    if isinstance(e, sp.MatrixBase) or is_mat(e):
        e = sp.Matrix(e).evalf(30)
        arr = np.array(e.tolist(), dtype=float)
        return arr
    return float(sp.N(e, 30))


# ---------------------------------------------------------------------- loading

def load_family(ref, base_dir: Path | None = None) -> Family:
    """Load a family by built-in name, by path, or from an inline mapping."""
    from .resources import families_dir

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
        if c.is_file():
            spec = load_yaml_file(c)
            return family_from_spec(spec, str(c))
    if len(candidates) > 1 or ref.endswith((".yaml", ".yml")):
        raise SpecError(f"family file '{ref}' not found")
    raise SpecError(f"unknown family '{ref}' (built-in: {', '.join(builtin_family_names())})")


def builtin_family_names():
    from .resources import families_dir
    return sorted(p.stem for p in families_dir().glob("*.yaml"))


def _err(msg, container, key=None):
    f, l = where(container, key)
    return SpecError(msg, f, l)


def family_from_spec(spec, file=None) -> Family:
    if not isinstance(spec, dict):
        raise SpecError("a family declaration must be a mapping", file, getattr(spec, "line", None))
    check_keys(spec, FAMILY_KEYS, ("name", "variable", "parameters", "sufficient_statistics", "natural_parameters"), "family")
    name = spec["name"]
    if not isinstance(name, str) or not name.isidentifier():
        raise _err("family name must be an identifier", spec, "name")

    dim = None
    if "dimension" in spec:
        if not isinstance(spec["dimension"], str) or not spec["dimension"].isidentifier():
            raise _err("dimension must be a symbol name such as P", spec, "dimension")
        dim = sp.Symbol(spec["dimension"], integer=True, positive=True)

    var = spec["variable"]
    if isinstance(var, str):
        var = {"name": var, "shape": "scalar"}
    if not isinstance(var, dict):
        raise _err("variable must be a name or a mapping {name, shape}", spec, "variable")
    check_keys(var, {"name", "shape"}, ("name",), "variable")
    vshape = var.get("shape", "scalar")
    if vshape not in ("scalar", "vector"):
        raise _err("variable shape must be scalar or vector", var, "shape")
    if vshape == "vector" and dim is None:
        raise _err("a vector variable needs a 'dimension' symbol", spec, "variable")
    vname = var["name"]
    if not isinstance(vname, str) or not vname.isidentifier():
        raise _err("variable name must be an identifier", var, "name")
    theta = sp.MatrixSymbol(vname, dim, 1) if vshape == "vector" else sp.Symbol(vname, real=True)

    support = spec.get("support", "real")
    if support not in SUPPORTS:
        raise _err(f"unsupported support '{support}' (known: {', '.join(SUPPORTS)})", spec, "support")

    symbols = {vname: theta}
    if dim is not None:
        symbols[str(dim)] = dim
    params = {}
    pspec = spec["parameters"]
    if not isinstance(pspec, dict) or not pspec:
        raise _err("parameters must be a non-empty mapping", spec, "parameters")
    symmetric = set()
    for pname, pdecl in pspec.items():
        if not pname.isidentifier() or pname in symbols:
            raise _err(f"bad or duplicate parameter name '{pname}'", pspec, pname)
        if pdecl is None:
            pdecl = LDict()
        check_keys(pdecl, PARAM_KEYS, (), f"parameter '{pname}'")
        shape = pdecl.get("shape", "scalar")
        domain = pdecl.get("domain", "real")
        if shape not in SHAPES:
            raise _err(f"parameter '{pname}': shape must be one of {', '.join(SHAPES)}", pdecl, "shape")
        if domain not in DOMAINS:
            raise _err(f"parameter '{pname}': unknown domain '{domain}' (known: {', '.join(DOMAINS)})", pdecl, "domain")
        if shape != "scalar" and dim is None:
            raise _err(f"parameter '{pname}': non-scalar parameters need a 'dimension'", pspec, pname)
        if shape == "matrix" and domain not in ("positive_definite", "symmetric"):
            raise _err(f"parameter '{pname}': matrix parameters must be positive_definite or symmetric", pdecl, "domain")
        if shape == "scalar":
            sym = sp.Symbol(pname, positive=True) if domain == "positive" else sp.Symbol(pname, real=True)
        elif shape == "vector":
            sym = sp.MatrixSymbol(pname, dim, 1)
        else:
            sym = sp.MatrixSymbol(pname, dim, dim)
            symmetric.add(sym)
        fixed = pdecl.get("fixed", False)
        if not isinstance(fixed, bool):
            raise _err("'fixed' must be true or false", pdecl, "fixed")
        params[pname] = Param(pname, sym, shape, domain, fixed, str(pdecl.get("description", "")))
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
    tsyms = {vname: theta, **({str(dim): dim} if dim is not None else {})}
    fixed_syms = {p.name: p.symbol for p in params.values() if p.fixed}
    T = [parse(t, T_list, i, tsyms, f"sufficient statistic {i + 1}") for i, t in enumerate(T_list)]
    eta = [parse(e, eta_list, i, {k: v for k, v in symbols.items() if k != vname}, f"natural parameter {i + 1}")
           for i, e in enumerate(eta_list)]
    lam, mu = [], []
    for i, (t, e) in enumerate(zip(T, eta)):
        tshape = t.shape if is_mat(t) else None
        eshape = e.shape if is_mat(e) else None
        if tshape != eshape:
            raise _err(f"natural parameter {i + 1} has shape {eshape or 'scalar'} but T_{i + 1} has {tshape or 'scalar'}",
                       eta_list, i)
        if not t.has(theta):
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

    fam = Family(
        name=name, description=str(spec.get("description", "")), reference=str(spec.get("reference", "")),
        theta=theta, dim=dim, support=support, params=params, T=T, h=h, eta=eta, lam=lam, mu=mu,
        A=None, A_given="log_partition" in spec, elementwise=bool(spec.get("elementwise", False)),
        symmetric=symmetric, file=file,
    )
    if fam.elementwise and (dim is not None or vshape != "scalar"):
        raise _err("elementwise (mean-field) families are declared for one scalar coordinate", spec, "elementwise")

    # 1. ordinary <- natural (solve λ = η(params))
    try:
        fam.ord_from_nat = _solve(eta, lam, fam.free_params, symmetric)
    except DerivationError as exc:
        raise _err(f"cannot invert the natural parameters: {exc}", spec, "natural_parameters") from None
    fam.steps.append(("ordinary from natural", "solved λ = η(params) block by block"))

    # 2. log-partition
    if fam.A_given:
        lsyms = {f"lambda{i + 1}": l for i, l in enumerate(lam)}
        lsyms.update({str(dim): dim} if dim is not None else {})
        lsyms.update(fixed_syms)
        fam.A = scalarize(parse(spec["log_partition"], spec, "log_partition", lsyms, "log_partition"))
        fam.steps.append(("log-partition", "declared; checked numerically by verify()"))
    else:
        if is_mat(theta):
            raise _err("log_partition must be given for vector families (integration is done for scalar families only)",
                       spec, "sufficient_statistics")
        fam.A = _integrate_log_partition(fam, spec)
        fam.steps.append(("log-partition", f"A = log ∫ h exp(<λ,T>) d{vname} over the support (symbolic integration)"))

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
        psyms = {k: v for k, v in symbols.items() if k != vname}
        for i, d in enumerate(decl):
            dexpr = parse(d, decl, i, psyms, f"expectation parameter {i + 1}")
            if not _equal_numeric(fam, dexpr, fam.mu_ord[i]):
                raise _err(f"declared expectation parameter {i + 1} ({d}) differs from the derived ∇A = {fam.mu_ord[i]}",
                           decl, i)
            fam.mu_ord[i] = fam.simp(dexpr)

    # 4. minimality: the Fisher information must be non-singular
    _check_minimal(fam, spec)

    # 5. ordinary <- expectation
    try:
        fam.ord_from_mu = _solve(fam.mu_ord, mu, fam.free_params, symmetric)
    except DerivationError as exc:
        raise _err(f"cannot invert the expectation parameters: {exc}", spec, "sufficient_statistics") from None

    # 6. Gaussian moments (enable Bonnet / Price / exact rules)
    if "gaussian" in spec:
        g = spec["gaussian"]
        check_keys(g, {"mean", "covariance"}, ("mean", "covariance"), "gaussian")
        psyms = {k: v for k, v in symbols.items() if k != vname}
        fam.gaussian_mean = parse(g["mean"], g, "mean", psyms, "gaussian mean")
        fam.gaussian_cov = parse(g["covariance"], g, "covariance", psyms, "gaussian covariance")
        ms = fam.gaussian_mean.shape if is_mat(fam.gaussian_mean) else None
        if ms != (theta.shape if is_mat(theta) else None):
            raise _err("gaussian mean must have the shape of the variable", g, "mean")

    return fam


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


def _integrate_log_partition(fam: Family, spec):
    lo, hi = SUPPORTS[fam.support]
    th = fam.theta
    integrand = fam.h * sp.exp(sum((e * t for e, t in zip(fam.eta, fam.T)), sp.Integer(0)))
    try:
        Z = sp.integrate(integrand, (th, lo, hi), conds="none")
    except Exception as exc:  # pragma: no cover - sympy internals
        raise _err(f"cannot integrate the density ({type(exc).__name__})", spec, "sufficient_statistics") from None
    if Z.has(sp.Integral) or Z.has(sp.oo, -sp.oo, sp.zoo, sp.nan) or Z == 0:
        raise _err(f"not normalizable: ∫ h exp(<λ,T>) d{th} over the {fam.support} support diverges or has no closed form",
                   spec, "sufficient_statistics")
    A_ord = sp.expand_log(sp.log(sp.simplify(Z)), force=True)
    return sp.simplify(A_ord.xreplace(fam.ord_from_nat))


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
    shape = tuple(int(s.subs({s: dim}) if not isinstance(s, int) and s.free_symbols else s) for s in l.shape)
    shape = tuple(dim if (not isinstance(s, int)) else s for s in shape) if False else shape
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
                vals[d] = E if j == bi else (np.zeros_like(E) if is_mat(d) else 0.0) if j != bi else E
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

def _solve(exprs, targets, unknown_params, symmetric):
    """Solve exprs[i](params) = targets[i] for the unknown parameters, block by block."""
    try:
        return _solve_blocks(exprs, targets, unknown_params, symmetric)
    except DerivationError:
        raise
    except Exception as exc:  # sympy's solvers raise NotImplementedError and friends
        raise DerivationError(f"the solver failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") from None


def _solve_blocks(exprs, targets, unknown_params, symmetric):
    unknown = [p.symbol for p in unknown_params]
    if all(not is_mat(u) for u in unknown) and all(not is_mat(e) for e in exprs):
        eqs = [sp.Eq(e, t) for e, t in zip(exprs, targets)]
        sols = sp.solve(eqs, unknown, dict=True)
        sols = [s for s in sols if all(u in s for u in unknown)]
        if not sols:
            raise DerivationError("no solution found")
        # prefer the solution compatible with positivity assumptions
        sol = sols[0]
        return {u: sp.simplify(sol[u]) for u in unknown}
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
