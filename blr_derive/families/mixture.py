"""Finite mixtures with fixed weights as candidates (Sec. 3.2, Eq. 27; App. E): q(θ) = Σ_k π_k q_k(θ) with
the components q_k in one exponential family.

The joint q(θ, z = k) = π_k q_k(θ) is a minimal conditional exponential family (Eq. 27): its natural
parameters λ_k are those of q_k and its expectation parameters are μ_k = π_k E_{q_k}[T(θ)].  A
:class:`MixtureFamily` holds the component family, the free components' renamed parameters and the fixed
components' values; the mixture BLR (Eq. 28) is derived in ``blr_derive/candidates/mixture.py``.

A fixed component gives every free parameter of the component family and may override the family's own
fixed parameters (``gaussian_diag_fixed_precision``: the slab shares the known precision ``s``, the spike
takes ``s0``; SGD with dropout, Eq. 40).

``components: K`` with K a size name makes the components an array axis: ``K`` is a symbol (the length of the
state arrays at run time), there is no list of components, the weights are 1/K, and the state keeps the component
family's parameter names (``m`` of shape (K, P), ``S`` of shape (K, P, P)); the update is derived once for a generic
component (``blr_derive/candidates/mixture_axis.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.matexpr import is_mat
from blr_derive.core.yamlio import where
from blr_derive.families.model import Family
from blr_derive.spec.family import Param
from blr_derive.spec.mixture import MixtureDecl


@dataclass
class MixtureComponent:
    index: int                       # 1-based
    fixed: bool
    subs: dict                       # base parameter symbol -> this component's symbol or (fixed) value
    params: list = field(default_factory=list)   # [Param] of a free component (renamed)
    weight: object = None            # π_k (set by bind)
    decl: object = None              # the declared values of a fixed component


@dataclass
class MixtureFamily:
    """q(θ) = Σ_k π_k q_k(θ), components in ``base``, fixed weights (Sec. 3.2)."""
    base: Family
    K: int
    components: list
    params: dict                     # name -> Param: the free components' parameters (and base-fixed ones)
    spec: object
    file: str | None = None
    mu_inverse: str = "symbolic"
    sampler: object = None
    lam: list = field(default_factory=list)
    axis: bool = False               # the components as an array axis of run-time length K (a symbol)

    @property
    def name(self):
        return f"mixture_{self.K}_{self.base.name}"

    @property
    def description(self):
        if self.axis:
            return (f"finite mixture of {self.K} `{self.base.name}` components with equal weights, the components "
                    f"as an array axis of length {self.K} known at run time (T, h, λ, μ and A are those of one "
                    "component)")
        fixed = [c.index for c in self.components if c.fixed]
        extra = f"; component(s) {', '.join(map(str, fixed))} fixed" if fixed else ""
        return (f"finite mixture of {self.K} `{self.base.name}` components with fixed weights{extra} "
                f"(T, h, λ, μ and A are those of one component)")

    reference = "Sec. 3.2, Eq. 27; App. E"

    @property
    def theta(self):
        return self.base.theta

    @property
    def dim(self):
        return self.base.dim

    @property
    def elementwise(self):
        return self.base.elementwise

    @property
    def is_gaussian(self):
        return False

    @property
    def sampler_accept(self):
        """A mixture's sampler draws the component and then from it: no rejection step."""
        return None

    @property
    def ord_from_nat(self) -> dict:
        """No closed-form ordinary(λ) of the mixture as a whole (each component has its own)."""
        return {}

    @property
    def symmetric(self):
        out = set(self.base.symmetric)
        for c in self.components:
            for k, v in c.subs.items():
                if k in self.base.symmetric and isinstance(v, sp.MatrixSymbol):
                    out.add(v)
        return frozenset(out)

    @property
    def variable_symbols(self):
        return self.base.variable_symbols

    def depends_on_variable(self, expr):
        return self.base.depends_on_variable(expr)

    @property
    def free_params(self):
        return [p for p in self.params.values() if not p.fixed]

    @property
    def fixed_params(self):
        return [p for p in self.params.values() if p.fixed]

    @property
    def free_components(self):
        return [c for c in self.components if not c.fixed]

    @property
    def gaussian_mean(self):
        """The mean parameter of the one free component (passes and targets use it), else None."""
        free = self.free_components
        if len(free) != 1 or self.base.gaussian_mean is None:
            return None
        return free[0].subs.get(self.base.gaussian_mean, self.base.gaussian_mean)

    @property
    def gaussian_cov(self):
        free = self.free_components
        if len(free) != 1 or self.base.gaussian_cov is None:
            return None
        return self.base.gaussian_cov.xreplace(free[0].subs)

    # the component family's declaration (reports show it as the family of the mixture's components)
    @property
    def T(self):
        return self.base.T

    @property
    def h(self):
        return self.base.h

    @property
    def eta(self):
        return self.base.eta

    @property
    def mu_ord(self):
        return self.base.mu_ord

    @property
    def A(self):
        return self.base.A

    @property
    def A_given(self):
        return self.base.A_given

    def sample_params(self, rng, dim: int = 2):
        if self.axis:        # one component's parameters (the arrays stack K of them)
            return self.base.sample_params(rng, dim)
        vals = {}
        for c in self.free_components:
            v = self.base.sample_params(rng, dim)
            for p in self.base.params.values():
                vals[c.subs.get(p.symbol, p.symbol)] = v[p.symbol]
        return vals

    def evaluate(self, expr, values, dim=None):
        return self.base.evaluate(expr, values, dim)

    # ------------------------------------------------------------------ weights and fixed values
    def bind(self, hyper_symbols: dict, defaults: dict | None = None):
        """Parse the weights and the fixed components' values (expressions in the recipe's hyperparameters); with
        the hyperparameters' ``defaults`` ({symbol: number}), weights that are not in (0, 1) there, or whose last
        one (1 minus the others) is not, are a located error (the step was NaN for every input)."""
        spec = self.spec
        syms = dict(hyper_symbols)
        if self.base.dim is not None:
            syms[str(self.base.dim)] = self.base.dim
        weights = spec.get("weights")
        if self.axis:
            return self
        if weights is None:
            ws = [sp.Rational(1, self.K)] * self.K
        else:
            if not isinstance(weights, list) or len(weights) != self.K - 1:
                f, l = where(spec, "weights")
                raise SpecError(f"mixture weights: give a list of K - 1 = {self.K - 1} weights "
                                "(the last one is 1 minus their sum, Sec. 3.2)", f, l)
            ws = []
            for i, w in enumerate(weights):
                ws.append(_parse(w, syms, f"weight {i + 1}", weights, i))
            ws.append(1 - sp.Add(*ws))
            for k, w in enumerate(ws):
                at = w.xreplace(defaults or {})
                if at.is_number and not (0 < float(at) < 1):
                    f, l = where(spec, "weights")
                    how = "" if w.is_number else (f" (at the hyperparameters' defaults weight {k + 1} is "
                                                  f"{float(at):g})")
                    raise SpecError(f"mixture weights must lie in (0, 1) and sum to 1{how}", f, l)
        for c, w in zip(self.components, ws):
            c.weight = w
        for c in self.components:
            if not c.fixed:
                continue
            decl = c.decl
            # its free parameters, and any of the family's fixed parameters it overrides (a spike's own
            # precision s0 while the free components share the family's fixed s, Eq. 41)
            for p in self.base.params.values():
                if p.name not in decl:
                    continue
                v = _parse(decl[p.name], syms, f"component {c.index}: {p.name}", decl, p.name)
                c.subs[p.symbol] = v
        return self


def _parse(text, syms, what, container, key):
    try:
        return parse_expression(text, syms, what=what)
    except SpecError as exc:
        f, l = where(container, key)
        raise exc.located(f, l) from None


def build_mixture(decl: MixtureDecl, base: Family) -> MixtureFamily:
    """The mixture of ``decl`` over the loaded component family ``base`` (its weights are bound later)."""
    spec = decl.spec
    if not base.is_gaussian:
        raise SpecError(f"mixture components must have Gaussian moments (a 'gaussian' section): '{base.name}' has "
                        "none (the mixture rules of App. E use Bonnet's and Price's theorems)", *where(spec, "mixture"))
    if not (sp.sympify(base.gaussian_mean).free_symbols & {p.symbol for p in base.free_params}):
        raise SpecError(f"mixture components need a Gaussian mean that depends on the parameters of '{base.name}' "
                        f"(its mean is {base.gaussian_mean})", *where(spec, "mixture"))
    names = {p.name for p in base.free_params}
    known = names | {p.name for p in base.fixed_params}     # a family-fixed parameter may be overridden
    for k, (d, key) in decl.fixed.items():
        for n in d:
            if n not in known:
                raise SpecError(f"fixed component {k}: '{n}' is not a parameter of '{base.name}'", *where(d, n))
        for n in sorted(names - set(d)):
            raise SpecError(f"fixed component {k}: missing a value for '{n}'", *where(spec["fixed"], key))
        for p in base.params.values():
            if p.name in d and p.shape != "scalar":
                raise SpecError(f"fixed component {k}: only scalar parameters can be fixed ('{p.name}' is a {p.shape})",
                                *where(d, p.name))
    if decl.axis:
        # the state keeps the component family's names, with a leading component axis of length K at run time
        K = sp.Symbol(decl.K, integer=True, positive=True)
        params = {p.name: Param(p.name, p.symbol, p.shape, p.domain, p.fixed,
                                (p.description + f" of each component (leading axis of length {decl.K})").strip()
                                if not p.fixed else p.description, p.greater_than)
                  for p in base.free_params + base.fixed_params}
        return MixtureFamily(base, K, [], params, spec, getattr(spec, "file", None), axis=True)
    free_idx = [k for k in range(1, decl.K + 1) if k not in decl.fixed]
    comps, params = [], {}
    for k in range(1, decl.K + 1):
        if k in decl.fixed:
            comps.append(MixtureComponent(k, True, {}, decl=decl.fixed[k][0]))
            continue
        subs, ps = {}, []
        for p in base.free_params:
            if len(free_idx) == 1:
                s = p.symbol
            elif is_mat(p.symbol):
                s = sp.MatrixSymbol(f"{p.name}{k}", *p.symbol.shape)
            else:
                s = sp.Symbol(f"{p.name}{k}", **p.symbol.assumptions0)
            subs[p.symbol] = s
            q = Param(str(s), s, p.shape, p.domain, False, (p.description + f" of component {k}").strip(),
                      p.greater_than)
            ps.append(q)
            params[q.name] = q
        comps.append(MixtureComponent(k, False, subs, ps))
    # the family's fixed parameters after the free ones, as in the component family (the generated code takes
    # the shape of its draws from the first state variable: the mean, not a fixed precision given as a scalar)
    for p in base.fixed_params:
        params[p.name] = p
    return MixtureFamily(base, decl.K, comps, params, spec, getattr(spec, "file", None))
