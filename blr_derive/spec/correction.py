"""The ``posterior_correction`` section of a recipe: the old posterior q_old and its sites (Khan 2025, *Knowledge
Adaptation as Posterior Correction*; the Bayes-duality slides, "Speeding up training with memories" and the
posterior-correction map).  Derived in ``blr_derive/rules/posterior_correction.py`` (the corrected step) and
``blr_derive/rules/posterior_sites.py`` (a loss known only through q_old's sites: merging)::

    posterior_correction:
      old: {m: m_old, s: s_old}     # q_old: the data names of its parameters (default <p>_old)
      sites: gradient               # the sum of q_old's sites: 'gradient' (the full-data gradient, and Hessian,
                                    # at q_old: data grad_full, hess_full) or 'posterior' (q_old itself: −log q_old)
      description: text             # the source, shown by explain

``old`` may also be a list of stored posteriors, ``[{m: m0, weight: 1 - alpha}, {m: m1, weight: alpha}]``: q_old is
then their product Π_i q_i^{w_i} (merging: its natural parameter is Σ_i w_i λ_i).

A recipe that names the approximation ``posterior_correction`` without the section gets the default section
({p: p_old} for every free parameter, sites: gradient): the data a corrected step received before the section
existed (``svrg``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprparse import parse_expression
from blr_derive.core.matexpr import is_mat
from blr_derive.core.names import check_name_at
from blr_derive.core.text import Prose
from blr_derive.core.yamlio import LDict, check_keys, text_field, where
from blr_derive.spec.hyper import DataVar, scalar_symbols

CORRECTION_KEYS = {"old", "sites", "description"}
SITES = ("gradient", "posterior")
#: the approximations that read the section: the corrected step, and a loss known through q_old's sites
READERS = ("posterior_correction", "posterior_sites")


@dataclass
class Posterior:
    """One stored posterior q_i: family parameter name -> its DataVar, and its weight w_i in Π_i q_i^{w_i}."""
    params: dict
    weight: object = sp.Integer(1)


@dataclass
class Correction:
    posteriors: list                       # [Posterior]: q_old = Π_i q_i^{w_i}
    sites: str = "gradient"                # what stands for the sum of q_old's sites (SITES)
    full: dict = field(default_factory=dict)   # sites == 'gradient': {'grad': DataVar, 'hess': DataVar (if any)}
    description: object = field(default_factory=lambda: Prose(""))   # Prose: the source, shown by explain
    line: int | None = None                # the section's line (or the approximation's, for the default section)

    @property
    def single(self):
        """The one stored posterior (a correction evaluates its batch at q_old), or None for a product."""
        return self.posteriors[0] if len(self.posteriors) == 1 else None


def uses_hessian(fam):
    """Whether the family's natural gradient needs E_q[∇²ℓ] (its covariance depends on its parameters)."""
    return fam.is_gaussian and bool(sp.sympify(fam.gaussian_cov).free_symbols
                                    & {p.symbol for p in fam.params.values() if not p.fixed})


def _data(name, like, what, symmetric=False):
    if is_mat(like):
        shape = tuple(like.shape) if like.shape[1] != 1 else (like.shape[0],)
        return DataVar(name, sp.MatrixSymbol(name, *like.shape), shape, what, symmetric)
    return DataVar(name, sp.Symbol(name, real=True), (), what)


def parse_correction(spec, fam, hyper, data, taken, approxs, file=None) -> Correction | None:
    """The section (or the default one) when the recipe names an approximation that reads it; its data join
    ``data`` (the stored posteriors' parameters, then the full-data gradient and Hessian).  None when no
    approximation reads it."""
    named = [a for a in approxs if a.name in READERS]
    section = spec.get("posterior_correction") if "posterior_correction" in spec else None
    if not named:
        if "posterior_correction" in spec:
            raise SpecError("the posterior_correction section is read by the approximation 'posterior_correction' "
                            "(a corrected step) or 'posterior_sites' (a loss known through q_old's sites): name one "
                            "of them in approximations", *where(spec, "posterior_correction"))
        return None
    first = named[0]
    corrects = any(a.name == "posterior_correction" for a in named)
    names = {d.name for d in data} | set(taken)
    free = [p for p in fam.params.values() if not p.fixed]

    def fail(msg, container=None, key=None):
        if container is None:
            return SpecError(msg, file, first.line)
        return SpecError(msg, *where(container, key))

    def add(name, like, what, symmetric=False, container=None, key=None):
        if name in names:
            raise fail(f"posterior_correction: the name '{name}' is taken", container, key)
        names.add(name)
        dv = _data(name, like, what, symmetric)
        data.append(dv)
        return dv

    def posterior(entry, index, container, key):
        """One stored posterior: {param: data name, ..., weight: expr}; unnamed parameters get <p>_old (one
        posterior) or <p>_<index> (a product)."""
        if entry is None:
            entry = LDict()
            entry.file, entry.line = where(container, key)
        if not isinstance(entry, dict):
            raise fail("posterior_correction.old: a stored posterior is a mapping from the family's parameters to "
                       "data names (and a weight)", container, key)
        check_keys(entry, {p.name for p in free} | {"weight"}, (), "a stored posterior of posterior_correction.old")
        weight = sp.Integer(1)
        if "weight" in entry:
            w = entry["weight"]
            if isinstance(w, bool) or not isinstance(w, (int, float, str)):
                raise fail("posterior_correction.old: weight must be a number or an expression of hyperparameters",
                           entry, "weight")
            try:
                weight = parse_expression(str(w), scalar_symbols(hyper), what="posterior_correction weight")
            except SpecError as exc:
                raise exc.located(*where(entry, "weight")) from None
        params = {}
        for p in free:
            default = f"{p.name}_old" if index is None else f"{p.name}_{index}"
            name = entry.get(p.name, default)
            check_name_at(name, f"posterior_correction.old: data name of {p.name}", entry,
                          p.name if p.name in entry else None)
            where_ = (entry, p.name) if p.name in entry else (None, None)
            what = f"{p.name} of the snapshot q_old" if index is None else f"{p.name} of stored posterior {index}"
            params[p.name] = add(name, p.symbol, what, is_mat(p.symbol) and p.symbol in fam.symmetric, *where_)
        return Posterior(params, weight)

    if section is None:
        section = LDict()
        section.file, section.line = file, first.line
    elif not isinstance(section, dict):
        raise fail("posterior_correction must be a mapping (old, sites, description)", spec, "posterior_correction")
    check_keys(section, CORRECTION_KEYS, (), "posterior_correction")
    old = section.get("old")
    if isinstance(old, list):
        if not old:
            raise fail("posterior_correction.old: the list of stored posteriors is empty", section, "old")
        posteriors = [posterior(e, i, old, i) for i, e in enumerate(old)]
    else:
        posteriors = [posterior(old, None, section, "old" if "old" in section else None)]
    sites = section.get("sites", "gradient")
    if sites not in SITES:
        raise fail(f"posterior_correction.sites must be one of {', '.join(SITES)}", section, "sites")
    if corrects and len(posteriors) != 1:
        raise fail("posterior_correction evaluates the batch at q_old: 'old' must be one stored posterior (a "
                   "product of posteriors is for 'posterior_sites')", section, "old")
    if not corrects and "sites" in section:
        raise fail("posterior_correction.sites says what completes a corrected step (approximation "
                   "'posterior_correction'); 'posterior_sites' reads q_old itself", section, "sites")
    full = {}
    if corrects and sites == "gradient":
        at = ("at the snapshot's mean" if any(a.name == "delta" for a in approxs)
              else "averaged over the snapshot q_old")
        full["grad"] = add("grad_full", fam.gaussian_mean, f"full-data gradient {at}")
        if uses_hessian(fam):
            full["hess"] = add("hess_full", fam.gaussian_cov, f"full-data Hessian {at}", is_mat(fam.gaussian_cov))
    return Correction(posteriors, sites, full, text_field(section, "description", ""),
                      section.line if "posterior_correction" in spec else first.line)
