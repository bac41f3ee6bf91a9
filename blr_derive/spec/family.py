"""Family declarations (``families/*.yaml``, or inline in a recipe) read into a :class:`FamilyDecl`: the variable and
its support, the parameters and their domains, T(θ), h(θ), λ(params), and what the file may add (a log-partition,
expectation parameters to check, Gaussian moments, a sampler).  The symbols of the variable, the parameters and
the natural and expectation parameters are made here; ``blr_derive/families/build.py`` derives the rest."""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_at
from blr_derive.core.matexpr import is_mat, scalarize, simplify_mat
from blr_derive.core.names import check_name_at
from blr_derive.core.sizes import declared_sizes, instantiate, resolve_sizes
from blr_derive.core.text import did_you_mean, quote
from blr_derive.core.yamlio import LDict, check_keys, text_field, where
from blr_derive.spec.sampler import parse_sampler
from blr_derive.spec.variable import parse_support as _parse_support, parse_variable as _parse_variable
from blr_derive.spec.vocabulary import DOMAINS, FAMILY_KEYS, PARAM_KEYS, SHAPES


@dataclass
class Param:
    name: str
    symbol: object
    shape: str
    domain: str
    fixed: bool = False
    description: object = ""     # Prose (family text)
    greater_than: object = None      # lower bound (an expression in the dimension) for scalar parameters


def _err(msg, container, key=None):
    f, l = where(container, key)
    return SpecError(msg, f, l)


@dataclass
class FamilyDecl:
    """A family as declared (parsed, not yet derived)."""
    name: str
    description: object          # Prose: family text, which outputs escape (blr_derive/core/text.py)
    reference: object            # Prose
    theta: object
    dim: object
    support: object
    params: dict
    T: list
    h: object
    eta: list
    lam: list
    mu: list
    A: object                    # the declared log-partition, or None (derived)
    elementwise: bool
    symmetric: frozenset
    file: str | None
    variable_kind: str
    vname: str
    components: list
    component_supports: list
    joint_support: str | None
    sizes: tuple
    mu_decl: list | None         # [(expression, text, (file, line))] declared expectation parameters
    gaussian_mean: object
    gaussian_cov: object
    sampler: object
    sampler_accept: object       # the acceptance condition of a rejection sampler, or None
    expected_log_h: object       # a declared E_q[log h] in ordinary parameters (checked by `check`), or None
    spec: object                 # the located mapping (for errors found while deriving)


def _expr(text, container, key, allowed, what, file):
    return parse_at(text, allowed, container, key, file, what=what)


def _statistic(text, T_list, i, tsyms, params, file):
    """Sufficient statistic i + 1, an expression of the variable alone; one that reads a parameter (a known shape,
    `log(1 - theta**a)`) is refused with a message that says how to write a known constant there."""
    what = f"sufficient statistic {i + 1}"
    try:
        return _expr(text, T_list, i, tsyms, what, file)
    except SpecError as original:
        psyms = {p.name: p.symbol for p in params.values()}
        try:
            e = _expr(text, T_list, i, {**tsyms, **psyms}, what, file)
        except SpecError:
            raise original from None
        used = sorted(n for n, sym in psyms.items() if e.has(sym))
        raise _err(f"{what} reads the parameter '{quote(used[0] if used else '?')}': a sufficient statistic is a "
                   "function of the variable alone (a fixed parameter may enter base_measure only); a known "
                   "constant in T is a number, or a size ('sizes: {a: {default: 2, min: 1, max: 8}}' and "
                   "'theta**{a}', as the weibull family writes its known shape)", T_list, i) from None


def _parse_param(pname, pdecl, pspec, dim, file, symmetric) -> Param:
    """One entry of ``parameters``: shape, domain, an optional lower bound, fixed or free."""
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
        raise _err(f"parameter '{pname}': unknown domain '{quote(domain)}'{did_you_mean(domain, DOMAINS)} "
                   f"(known: {', '.join(DOMAINS)})", pdecl, "domain")
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
        bound = _expr(pdecl["greater_than"], pdecl, "greater_than", {str(dim): dim} if dim is not None else {},
                      f"parameter '{pname}' greater_than", file)
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
    return Param(pname, sym, shape, domain, fixed, text_field(pdecl, "description"), bound)


def _parse_parameters(spec, symbols, dim, file, symmetric) -> dict:
    pspec = spec["parameters"]
    if not isinstance(pspec, dict) or not pspec:
        raise _err("parameters must be a non-empty mapping", spec, "parameters")
    params = {}
    for pname, pdecl in pspec.items():
        check_name_at(pname, "parameter", pspec, pname)
        if pname in symbols:
            raise _err(f"parameter '{pname}' clashes with another name", pspec, pname)
        params[pname] = _parse_param(pname, pdecl, pspec, dim, file, symmetric)
        symbols[pname] = params[pname].symbol
    return params


def _natural_symbols(T, eta, T_list, eta_list, depends, vname, symmetric):
    """The symbols λ_i, μ_i of each statistic (matrix symbols shaped like T_i; symmetric when T_i is)."""
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
    return lam, mu


def _parse_log_partition(spec, kind, lam, dim, fixed_syms, file):
    if "log_partition" in spec:
        lsyms = {f"lambda{i + 1}": l for i, l in enumerate(lam)}
        lsyms.update({str(dim): dim} if dim is not None else {})
        lsyms.update(fixed_syms)
        A = scalarize(_expr(spec["log_partition"], spec, "log_partition", lsyms, "log_partition", file))
        if is_mat(A):
            raise _err("log_partition must be a scalar", spec, "log_partition")
        return A
    if kind in ("vector", "matrix", "mixed"):
        what = "components with shapes" if kind == "mixed" else f"{kind} families"
        raise _err(f"log_partition must be given for {what} (A is integrated or summed for scalar "
                   "variables, components and fixed-size vectors only)", spec, "sufficient_statistics")
    return None


def _parse_gaussian(spec, kind, theta, psyms, file):
    """The Gaussian moments (mean, covariance) in the parameters: they enable Bonnet / Price / exact rules."""
    if "gaussian" not in spec:
        return None, None
    g = spec["gaussian"]
    if not isinstance(g, dict):
        raise _err("gaussian must be a mapping {mean, covariance}", spec, "gaussian")
    check_keys(g, {"mean", "covariance"}, ("mean", "covariance"), "gaussian")
    if kind not in ("scalar", "vector"):
        raise _err("a gaussian section needs a scalar or vector variable", spec, "gaussian")
    mean = _expr(g["mean"], g, "mean", psyms, "gaussian mean", file)
    cov = _expr(g["covariance"], g, "covariance", psyms, "gaussian covariance", file)
    ms = mean.shape if is_mat(mean) else None
    if ms != (theta.shape if is_mat(theta) else None):
        raise _err("gaussian mean must have the shape of the variable", g, "mean")
    cs = cov.shape if is_mat(cov) else None
    if cs != ((theta.shape[0], theta.shape[0]) if is_mat(theta) else None):
        raise _err("gaussian covariance must be a scalar for a scalar variable and a square matrix for a vector",
                   g, "covariance")
    return mean, cov


def parse_family(spec, file=None, sizes: tuple | None = None) -> FamilyDecl:
    """Read a family declaration (a YAML mapping) into a :class:`FamilyDecl`; a declaration with a ``sizes`` section
    is first instantiated at ``sizes`` (a tuple from :func:`blr_derive.core.sizes.resolve_sizes`; its defaults
    when None).  Every problem is a located SpecError."""
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
    symmetric = {theta} if kind == "matrix" else set()
    if kind == "mixed":
        symmetric = {c for c in components if is_mat(c) and c.shape[1] != 1}
    params = _parse_parameters(spec, symbols, dim, file, symmetric)
    T_list, eta_list = spec["sufficient_statistics"], spec["natural_parameters"]
    if not isinstance(T_list, list) or not T_list:
        raise _err("sufficient_statistics must be a non-empty list", spec, "sufficient_statistics")
    if not isinstance(eta_list, list) or len(eta_list) != len(T_list):
        raise _err("natural_parameters must be a list aligned with sufficient_statistics", spec, "natural_parameters")
    tsyms = {**tsyms, **({str(dim): dim} if dim is not None else {})}
    fixed_syms = {p.name: p.symbol for p in params.values() if p.fixed}
    psyms = {k: v for k, v in symbols.items() if k not in tsyms or (dim is not None and k == str(dim))}
    # a 1 x 1 product (theta.T*Lambda*theta) is a scalar statistic, with a scalar natural parameter
    T = [scalarize(_statistic(t, T_list, i, tsyms, params, file)) for i, t in enumerate(T_list)]
    eta = [scalarize(_expr(e, eta_list, i, psyms, f"natural parameter {i + 1}", file)) for i, e in enumerate(eta_list)]

    def depends(e):
        return any(e.has(c) for c in components) if components else e.has(theta)
    lam, mu = _natural_symbols(T, eta, T_list, eta_list, depends, vname, symmetric)
    h = _expr(spec.get("base_measure", 1), spec, "base_measure", {**tsyms, **fixed_syms}, "base_measure", file)
    if is_mat(h):
        raise _err("base_measure must be a scalar", spec, "base_measure")
    if bool(spec.get("elementwise", False)) and kind != "scalar":
        raise _err("elementwise (mean-field) families are declared for one scalar coordinate", spec, "elementwise")
    if not any(not p.fixed for p in params.values()):
        raise _err("at least one parameter must be free (not fixed)", spec, "parameters")
    A = _parse_log_partition(spec, kind, lam, dim, fixed_syms, file)
    mu_decl = None
    if "expectation_parameters" in spec:
        decl = spec["expectation_parameters"]
        if not isinstance(decl, list) or len(decl) != len(T):
            raise _err("expectation_parameters must be a list aligned with sufficient_statistics", spec,
                       "expectation_parameters")
        mu_decl = [(_expr(d, decl, i, psyms, f"expectation parameter {i + 1}", file), str(d), where(decl, i))
                   for i, d in enumerate(decl)]
    gauss_mean, gauss_cov = _parse_gaussian(spec, kind, theta, psyms, file)
    e_logh = None
    if "expected_log_base_measure" in spec:
        e_logh = _expr(spec["expected_log_base_measure"], spec, "expected_log_base_measure", psyms,
                       "expected_log_base_measure", file)
        if is_mat(e_logh):
            raise _err("expected_log_base_measure must be a scalar", spec, "expected_log_base_measure")
    sampler, accept = parse_sampler(spec, kind, theta, psyms, file, components)
    return FamilyDecl(
        name=name, description=text_field(spec, "description"), reference=text_field(spec, "reference"),
        theta=theta, dim=dim, support=support, params=params, T=T, h=h, eta=eta, lam=lam, mu=mu, A=A,
        elementwise=bool(spec.get("elementwise", False)), symmetric=frozenset(symmetric), file=file,
        variable_kind=kind, vname=vname, components=components, component_supports=comp_supports,
        joint_support=joint, sizes=tuple(sizes or ()), mu_decl=mu_decl, gaussian_mean=gauss_mean,
        gaussian_cov=gauss_cov, sampler=sampler, sampler_accept=accept, expected_log_h=e_logh, spec=spec)
