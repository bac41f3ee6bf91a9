"""Exponential families q(θ) = h(θ) exp(<λ, T(θ)> - A(λ))  (Sec. 1.2, Table 2): the derived model.

A :class:`Family` is built by ``blr_derive/families/build.py`` from a declaration (``blr_derive/spec/family.py``)
and only read afterwards.  It knows its natural and expectation parameters in both directions, the Fisher
information F(λ) = ∇²A(λ), the entropy H(q) = A - <λ, μ> - E[log h] (App. B), the log density, Gaussian
moments where declared, and its numeric counterpart (``numeric.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from blr_derive.core import matcalc
from blr_derive.core.errors import DerivationError
from blr_derive.core.expect import gaussian_expectation
from blr_derive.core.matexpr import is_mat, scalarize, simplify_mat
from blr_derive.families.numeric import NumericFamily, numeric_fisher
from blr_derive.families.numint import expectation_integral
from blr_derive.families.partition import (centred_covariance, centred_fisher, discrete_expectation,
                                          hessian_loses_digits, support_points, tilted_expectation)
from blr_derive.families.statistics import log_h_linear as log_h_linear_coefficients
from blr_derive.families.symbolic import evaluate, loggamma_form, factor_repeated_denominator, simplify_bounded, subs, tidy
from blr_derive.spec.vocabulary import count_total, is_discrete


@dataclass
class Family:
    name: str
    description: object              # Prose read from the family file (an engine-made family: str)
    reference: object                # Prose
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
    sampler: object = None          # θ as an expression of the parameters and draws u, u2, …, z, z2, …
    sampler_accept: object = None   # a rejection sampler's acceptance condition on the same draws, or None
    expected_log_h: object = None   # a declared E_q[log h] in ordinary parameters (`expected_log_base_measure`)
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
    log_h_linear_coefficients: object = field(default=None, repr=False)
    _expect_log_h: object = field(default=None, repr=False, compare=False)   # (E_q[log h], how) or the error

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
        return self.joint_support == "categorical" or count_total(self.joint_support) is not None or (
            bool(self.component_supports) and all(is_discrete(s) for s in self.component_supports))

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
        return loggamma_form(sp.expand_log(sp.log(self.h), force=True))

    def mean_of_mu(self):
        return self.simp(subs(self.gaussian_mean, self.ord_from_mu))

    def cov_of_mu(self):
        return self.simp(subs(self.gaussian_cov, self.ord_from_mu))

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
        if self.log_h_linear_coefficients is None:
            self.log_h_linear_coefficients = log_h_linear_coefficients(self) or False
        return self.log_h_linear_coefficients or None

    def expect_log_h(self):
        """E_q[log h(θ)] in ordinary parameters (derived once; :attr:`expect_log_h_method` says how).

        * a declared ``expected_log_base_measure``: as declared (``check`` tests it against quadrature);
        * constant log h: itself;
        * Gaussian families: closed-form Gaussian moments of a polynomial log h;
        * log h = c0 + Σ c_i T_i(θ): c0 + Σ c_i μ_i;
        * discrete supports: the sum Σ_θ q(θ) log h(θ) (an unevaluated ``Sum`` for infinite supports);
        * one continuous variable: the tilted log-partition d/ds log ∫ h^{1+s} exp(<λ, T>) dθ at s = 0 where sympy
          integrates it (derivatives of K_ν in its order included: ``partition.bessel_order_derivatives``), else the
          unevaluated ``Integral(q log h, θ)`` that ``evaluate`` integrates numerically (``numint.py``).
        """
        if self._expect_log_h is None:
            try:
                self._expect_log_h = self._derive_expect_log_h()
            except DerivationError as exc:
                self._expect_log_h = exc
        if isinstance(self._expect_log_h, DerivationError):
            raise self._expect_log_h
        return self._expect_log_h[0]

    @property
    def expect_log_h_method(self) -> str:
        """How E_q[log h] is obtained, in words (``check`` prints it); the error's first line when it is not."""
        try:
            self.expect_log_h()
        except DerivationError as exc:
            return f"not derived ({str(exc).splitlines()[0]})"
        return self._expect_log_h[1]

    def _derive_expect_log_h(self):
        """(E_q[log h], how) — see :meth:`expect_log_h`."""
        lh = self.log_h
        if not self.depends_on_variable(lh):
            return lh, "constant (h does not depend on the variable)"
        if self.expected_log_h is not None:
            return self.expected_log_h, "declared (expected_log_base_measure)"
        if self.is_gaussian:
            try:
                return self.expect_gaussian(lh), "closed form (Gaussian moments)"
            except DerivationError:
                pass
        lin = self.log_h_linear()
        if lin is not None:
            c0, cs = lin
            return (c0 + sum((c * m for c, m in zip(cs, self.mu_ord)), sp.Integer(0)),
                    "closed form (log h linear in T)")
        if self.is_discrete:
            e = discrete_expectation(self, lh)
            return e, ("a series summed numerically when evaluated" if e.has(sp.Sum) else "a sum over the support")
        tilted = tilted_expectation(self, lh)
        if tilted is not None:
            return tilted, "closed form (tilted log-partition)"
        numeric = expectation_integral(self, lh)
        if numeric is not None:
            return numeric, "numerical integration (no closed form)"
        raise DerivationError(
            f"family '{self.name}': E_q[log h] has no closed form here: log h = {sp.sstr(lh)} is neither constant, "
            "nor a linear combination of the sufficient statistics, nor on a discrete support")

    def entropy(self):
        """H(q) = A(λ) - <λ, μ> - E_q[log h(θ)] in ordinary parameters (App. B)."""
        A_ord = subs(self.A, dict(zip(self.lam, self.eta)))
        e_logh = self.expect_log_h()
        if isinstance(e_logh, sp.Basic) and e_logh.has(sp.Integral):
            # a numeric integral is kept apart from simplification (sympy would try to integrate it again)
            return tidy(self.simp(A_ord - self.inner(self.eta, self.mu_ord))) - e_logh
        H = A_ord - self.inner(self.eta, self.mu_ord) - e_logh
        return tidy(self.simp(H))

    def log_density(self):
        """log q(θ) = log h(θ) + <λ(ordinary), T(θ)> - A(λ(ordinary)), in θ and ordinary parameters."""
        A_ord = subs(self.A, dict(zip(self.lam, self.eta)))
        return self.log_h + scalarize(self.inner(self.eta, self.T)) - A_ord

    def fisher_operator(self, simplified: bool = True):
        """dμ as a linear function of dλ: the Fisher information F(λ) = ∇²A(λ) applied to dλ.  ``simplified=False``
        gives the differential as matrix calculus writes it (for numeric evaluation only: the canonical form costs
        seconds for a normal–Wishart)."""
        key = "fisher_operator" if simplified else "fisher_operator_raw"
        if key not in self._numeric:        # a function of the family only: derived once
            dl = [sp.MatrixSymbol(f"d_{l.name}", *l.shape) if is_mat(l) else sp.Symbol(f"d_{l.name}") for l in self.lam]
            raw = [matcalc.differential(m, dict(zip(self.lam, dl))) for m in self.mu_of_lam]
            self._numeric[key] = (dl, [self.simp(d) for d in raw] if simplified else raw)
        return self._numeric[key]

    def centred_fisher(self):
        """F(λ) = Σ_i p_i (T_i − μ)(T_i − μ)ᵀ − s sᵀ over a finite support of more than two points
        (:func:`~blr_derive.families.partition.centred_fisher`: accurate on F's own scale where q is concentrated),
        or None; derived once."""
        if "fisher_centred" not in self._numeric:
            self._numeric["fisher_centred"] = centred_fisher(self)
        return self._numeric["fisher_centred"]

    def centred_covariance(self):
        """Cov_q[T] as the corrected two-pass sum over any finite support, whatever the form of A
        (:func:`~blr_derive.families.partition.centred_covariance`), or None; derived once."""
        if "covariance_centred" not in self._numeric:
            self._numeric["covariance_centred"] = centred_covariance(self)
        return self._numeric["covariance_centred"]

    #: the most terms (support points times entries of F) of the centred sum that :meth:`fisher_form` evaluates for a
    #: closed-form A over a finite support (a binomial's 65 points, a multinomial's 15 count vectors × 3 entries)
    FORM_MAX_TERMS = 1000

    def fisher_matrix(self):
        """For scalar families: the symbolic Hessian ∇²A(λ), simplified; over a finite support of more than two
        points Cov_q[T] as a corrected two-pass sum (:meth:`centred_fisher`), which is not simplified (simplify
        would bring back E[T Tᵀ] − μμᵀ); the same sum over a finite support whose A is a closed form (declared, or
        two points) where the simplified ∇²A loses digits where q is concentrated
        (:func:`~blr_derive.families.partition.hessian_loses_digits`: a declared truncated geometric's did)."""
        if any(is_mat(l) for l in self.lam):
            raise DerivationError("fisher_matrix is symbolic only for scalar families; use fisher_operator")
        if self.centred_fisher() is not None:
            return self.centred_fisher()
        if "fisher_matrix" not in self._numeric:
            H = sp.Matrix([[factor_repeated_denominator(simplify_bounded(sp.diff(m, l))) for l in self.lam]
                           for m in self.mu_of_lam])
            if support_points(self) is not None and hessian_loses_digits(self, H) and \
                    self.centred_covariance() is not None:
                H = self.centred_covariance()
            self._numeric["fisher_matrix"] = H
        return self._numeric["fisher_matrix"]

    def fisher_form(self):
        """F(λ) as it is evaluated numerically (scalar natural parameters): over a finite support Cov_q[T] as a
        corrected two-pass sum (:meth:`centred_fisher`; for a closed-form A, :meth:`centred_covariance` where it
        has at most FORM_MAX_TERMS terms: the Bernoulli's unsimplified ∂μ/∂λ = 1 − tanh²λ was 0 in 30 digits at
        λ = 40 for 7.2e-35), else ∇²A unsimplified (simplify costs seconds and is not needed for a value: 7 s for
        a multinomial's over 462 count vectors, whose sum would be 6,930 terms)."""
        if "fisher" not in self._numeric:
            centred = self.centred_fisher()
            pts = support_points(self) if centred is None and not any(is_mat(l) for l in self.lam) else None
            if pts is not None and len(pts) * len(self.lam) * (len(self.lam) + 1) // 2 <= self.FORM_MAX_TERMS:
                centred = self.centred_covariance()
            self._numeric["fisher"] = centred if centred is not None else sp.Matrix(
                [[sp.diff(m, l) for l in self.lam] for m in self.mu_of_lam])
        return self._numeric["fisher"]

    def fisher_at(self, lam_vals: dict, dim: int | None = None):
        """F(λ) as a dense matrix: :meth:`fisher_form` for scalar blocks, numeric_fisher for matrix blocks."""
        if not any(is_mat(l) for l in self.lam):
            F = self.fisher_form()
            vals = {k: v for k, v in lam_vals.items()}
            return np.array(self.evaluate(F, vals, dim), dtype=float).reshape(len(self.lam), len(self.lam))
        return numeric_fisher(self, lam_vals, dim or 2)

    def domain_conditions(self):
        """Ω as conditions on λ: each free parameter, written in λ, lies in its domain; a parameter greater than a
        bound as its excess over the bound, which is positive (the generated modules' Ω tested ``l > 0`` for a
        natural parameter ``l`` declared greater than -1, refusing the arcsine law's λ = -1/2)."""
        out = []
        for p in self.free_params:
            if p.greater_than is not None:
                out.append((p.name, self.ord_from_nat[p.symbol] - p.greater_than, "positive"))
            elif p.domain != "real":
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
        """Random valid ordinary parameters (numpy values keyed by symbol); ``rng`` a numpy Generator or a seed."""
        if not isinstance(rng, np.random.Generator):
            rng = np.random.default_rng(rng)
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
            if str(k) not in names:
                raise KeyError(f"numeric_ord_from_mu(): '{k}' is not an expectation parameter or a fixed parameter "
                               f"of {self.name} (expected: {', '.join(names)})")
            vals[names[str(k)]] = v
        missing = [str(m) for m in self.mu if m not in vals]
        if missing:
            raise KeyError(f"numeric_ord_from_mu(): missing {', '.join(missing)}")
        if dim is None and self.dim is not None:
            dim = next((np.asarray(v).shape[0] for v in vals.values() if np.ndim(v) >= 1), 2)
        return self.numeric(dim).ord_from_mu(vals, tol=tol, max_iter=max_iter)


# ---------------------------------------------------------------------- loading


# ------------------------------------------------------------ log-partition
