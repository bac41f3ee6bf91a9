"""A sized family written once for a generic coordinate k of a run-time K (the ``axis`` section of a family file).

A sized family (``sizes: {K: ...}``, ``blr_derive/core/sizes.py``) is otherwise instantiated at a concrete K and
derived there, with one parameter, statistic and natural parameter per coordinate.  When its statistics are
elementwise in k and its log-partition couples the coordinates only through one sum,

    T_k(θ) = t(θ_k),   λ_k = η(ω_k) (``lam`` in the declaration),   A(λ) = Σ_k each(λ_k) + of_total(S),   S = Σ_k total(λ_k)     (Sec. 1.2, Eq. 3)

the family is declared once for coordinate k (ω_k its ordinary parameter) and K is only the length of the arrays::

    axis:
      parameter: {name: a, domain: positive, description: concentrations}
      statistic: log(theta)                                  # t(θ_k), in the family's variable
      natural_parameter: a - 1                               # η(ω_k)
      log_partition: {each: lgamma(lam + 1), total: lam + 1, of_total: -lgamma(total)}

(``mean: true`` on the parameter: ω_k is the expectation parameter μ_k itself, e.g. the categorical's
probabilities in its overcomplete form.)  Everything else is derived here, on the indexed form of A, for a
generic k and a generic other coordinate j (nothing grows with K):

* μ_k = ∂A/∂λ_k = each'(λ_k) + of_total'(S) total'(λ_k), the sums over the coordinates as sums over j (the
  caller's node ``sum_j``); a sum Σ_j exp(x_j) is written exp(log Σ_j exp x_j) (the caller's ``lse_j``), so a
  softmax is exp(λ_k − log Σ_j exp λ_j), every coordinate from λ directly (none implied by the others);
* the Fisher matrix F = ∇²A(λ) = diag(d_k) + c u uᵀ, u_k = total'(λ_k), c = of_total''(S): a diagonal plus a
  rank-one coupling;
* the ordinary parameter from λ: η solved for ω (or, with ``mean: true``, ω_k = μ_k(λ)).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_at
from blr_derive.core.names import check_name_at
from blr_derive.core.yamlio import check_keys, text_field, where

AXIS_KEYS = {"parameter", "statistic", "natural_parameter", "log_partition", "description"}
AXIS_PARAM_KEYS = {"name", "domain", "description", "mean"}
LOG_PARTITION_KEYS = {"each", "total", "of_total"}
DOMAINS = {"positive": {"positive": True}, "real": {"real": True}, "simplex": {"positive": True}}


@dataclass
class AxisParam:
    """The ordinary parameter of coordinate k (what the generated code holds as an array of length K)."""
    name: str
    symbol: sp.Symbol
    domain: str
    description: object          # Prose (family text)
    mean: bool = False
    fixed: bool = False
    shape: str = "array (K,)"


class AxisFamily:
    """A sized family for a generic coordinate k of a run-time K (see the module docstring).  It answers what the
    recipe reader and the IR read of a family (``name``, ``theta``, ``params``, ``variable_symbols`` ...)."""
    elementwise = False
    is_gaussian = False
    gaussian_mean = None
    gaussian_cov = None
    sampler_accept = None
    dim = None
    components = None
    symmetric = frozenset()
    mu_inverse = "axis"          # no Newton maps in the generated module: λ ↔ ω is solved per coordinate here
    fixed = ()

    @property
    def ord_from_nat(self) -> dict:
        """No closed-form ordinary(λ) of the whole family: λ ↔ ω is solved per coordinate."""
        return {}

    def __init__(self, name, description, theta, param, statistic, eta, parts, size, file=None):
        self.name, self.description, self.theta, self.param = name, description, theta, param
        self.statistic, self.eta, self.parts, self.K, self.file = statistic, eta, parts, size, file
        self.lam = sp.Symbol("lambda", real=True)

    # ------------------------------------------------------------------ what readers of a family use
    @property
    def params(self):
        return {self.param.name: self.param}

    @property
    def free_params(self):
        return [self.param]

    @property
    def variable_symbols(self):
        return {str(self.theta): self.theta}

    def depends_on_variable(self, e) -> bool:
        return isinstance(e, sp.Basic) and e.has(self.theta)

    # ------------------------------------------------------------------ derived on the indexed form
    def _indexed(self):
        j, k = sp.symbols("j k", integer=True, positive=True)
        L = sp.IndexedBase("lambda")
        each, total, of_total = self.parts
        at = lambda e, i: e.xreplace({self.lam: L[i]})          # noqa: E731
        S = sp.Sum(at(total, j), (j, 1, self.K))
        A = (sp.Sum(at(each, j), (j, 1, self.K)) if each != 0 else 0) + of_total.xreplace({TOTAL: S})
        return A, L, j, k

    def _generic(self, e, L, k, lam_k, lam_j, nodes):
        """An expression in the indexed λ as one in the generic λ_k and sums over a generic other j; ``nodes`` =
        (sum_j, lse_j): the constructors of Σ_j x_j and log Σ_j exp x_j."""
        sum_j, lse_j = nodes
        e = e.replace(lambda x: isinstance(x, sp.Piecewise), lambda x: x.args[0][0])   # k is a coordinate

        def over_j(s):
            (idx, _, _), = s.limits
            body = s.function.xreplace({L[idx]: lam_j})
            if isinstance(body, sp.exp):                      # Σ_j exp x_j = exp(log Σ_j exp x_j): no overflow
                return sp.exp(lse_j(body.args[0]))
            return sum_j(body)
        e = e.replace(lambda x: isinstance(x, sp.Sum), over_j)
        return sp.powsimp(e.xreplace({L[k]: lam_k}))

    def log_partition(self):
        """A(λ) on the indexed form (for reports)."""
        return self._indexed()[0]

    def report_rows(self) -> list:
        """(label, LaTeX) rows of the reports: the statistic and natural parameter of coordinate k, and A(λ)."""
        return [(r"T_k(\theta)", sp.latex(self.statistic)), (r"\lambda_k", sp.latex(self.eta)),
                (r"A(\lambda)", sp.latex(self.log_partition()))]

    def mean(self, lam_k, lam_j, nodes):
        """μ_k = ∂A/∂λ_k for coordinate k, with λ_k = ``lam_k`` and the other coordinates' λ_j = ``lam_j``."""
        A, L, j, k = self._indexed()
        return self._generic(sp.diff(A, L[k]).doit(), L, k, lam_k, lam_j, nodes)

    def fisher(self, lam_k, lam_j, nodes):
        """F = ∇²A(λ) = diag(d_k) + c u uᵀ: (d_k, c, u_k), derived from ∂²A/∂λ_k∂λ_l (l ≠ k: c u_k u_l)."""
        A, L, j, k = self._indexed()
        l_ = sp.Symbol("l", integer=True, positive=True)
        dA = sp.diff(A, L[k]).doit()
        dA = dA.replace(lambda x: isinstance(x, sp.Piecewise), lambda x: x.args[0][0])
        off = sp.diff(dA, L[l_]).doit().replace(lambda x: isinstance(x, sp.Piecewise), lambda x: x.args[0][0])
        off = off.xreplace({sp.KroneckerDelta(k, l_): 0, sp.KroneckerDelta(l_, k): 0})
        diag = sp.diff(dA, L[k]).doit().replace(lambda x: isinstance(x, sp.Piecewise), lambda x: x.args[0][0])
        u = sp.diff(self.parts[1], self.lam)
        c = sp.simplify(off / (u.xreplace({self.lam: L[k]}) * u.xreplace({self.lam: L[l_]})))
        d = sp.simplify(diag - c * u.xreplace({self.lam: L[k]}) ** 2)
        return (self._generic(d, L, k, lam_k, lam_j, nodes), self._generic(c, L, k, lam_k, lam_j, nodes),
                u.xreplace({self.lam: lam_k}))

    def ordinary(self, lam_k, lam_j, nodes):
        """The ordinary parameter of coordinate k from λ (η solved for ω; ω = μ_k(λ) for an expectation parameter)."""
        if self.param.mean:
            return self.mean(lam_k, lam_j, nodes)
        sols = sp.solve(sp.Eq(self.eta, self.lam), self.param.symbol, dict=True)
        if len(sols) != 1:
            raise SpecError(f"family '{self.name}': axis natural_parameter {self.eta} has {len(sols)} solutions for "
                            f"{self.param.name}; declare one with a unique inverse", self.file, None)
        return sols[0][self.param.symbol].xreplace({self.lam: lam_k})


#: the sum S = Σ_k total(λ_k) in ``of_total``
TOTAL = sp.Symbol("total", real=True)


def has_axis(spec) -> bool:
    return isinstance(spec, dict) and isinstance(spec.get("axis"), dict)


def axis_family(spec, size, file=None) -> AxisFamily:
    """The family declared by ``spec`` (a family file's mapping) for a generic coordinate of ``size`` coordinates
    (a size symbol, known at run time).  Problems are located SpecErrors."""
    name = str(spec.get("name", "family"))
    if not has_axis(spec):
        raise SpecError(f"family '{name}' declares no 'axis' section: it cannot be written for a generic coordinate "
                        "of a run-time size (give the recipe a fixed size instead of components)",
                        *where(spec, "name"))
    ax = spec["axis"]
    check_keys(ax, AXIS_KEYS, ("parameter", "statistic", "natural_parameter", "log_partition"), "axis")
    pdecl = ax["parameter"]
    if not isinstance(pdecl, dict):
        raise SpecError("axis parameter must be a mapping {name: ..., domain: ...}", *where(ax, "parameter"))
    check_keys(pdecl, AXIS_PARAM_KEYS, ("name", "domain"), "axis parameter")
    pname = check_name_at(pdecl["name"], "axis parameter", pdecl, "name")
    domain = pdecl["domain"]
    if domain not in DOMAINS:
        raise SpecError(f"axis parameter domain must be one of {', '.join(sorted(DOMAINS))}", *where(pdecl, "domain"))
    mean = pdecl.get("mean", False)
    if not isinstance(mean, bool):
        raise SpecError("axis parameter 'mean' must be true or false", *where(pdecl, "mean"))
    psym = sp.Symbol(pname, **DOMAINS[domain])
    var = spec.get("variable")
    vname = str(var.get("name", "theta")) if isinstance(var, dict) else "theta"
    theta = sp.Symbol(check_name_at(vname, "variable", var if isinstance(var, dict) else spec, "name"), real=True)
    lam = sp.Symbol("lambda", real=True)
    T = parse_at(str(ax["statistic"]), {vname: theta}, ax, "statistic", file, what="axis statistic")
    if not T.has(theta):
        raise SpecError(f"axis statistic must depend on {vname}", *where(ax, "statistic"))
    eta = parse_at(str(ax["natural_parameter"]), {pname: psym}, ax, "natural_parameter", file,
                   what="axis natural parameter")
    lp = ax["log_partition"]
    if not isinstance(lp, dict):
        raise SpecError("axis log_partition must be a mapping {each: ..., total: ..., of_total: ...}",
                        *where(ax, "log_partition"))
    check_keys(lp, LOG_PARTITION_KEYS, ("each", "total", "of_total"), "axis log_partition")
    each = parse_at(str(lp["each"]), {"lam": lam}, lp, "each", file, what="axis log_partition each")
    total = parse_at(str(lp["total"]), {"lam": lam}, lp, "total", file, what="axis log_partition total")
    of_total = parse_at(str(lp["of_total"]), {"total": TOTAL}, lp, "of_total", file,
                        what="axis log_partition of_total")
    described = text_field(ax, "description") if "description" in ax else text_field(spec, "description")
    fam = AxisFamily(name, described, theta,
                     AxisParam(pname, psym, domain, text_field(pdecl, "description"), mean), T, eta,
                     (each, total, of_total), size, file)
    return fam

