"""The ``posterior_correction`` section of a recipe: the old posterior q_old and its sites (Khan 2025, *Knowledge
Adaptation as Posterior Correction*; the Bayes-duality slides, "Speeding up training with memories").  Derived in
``blr_derive/rules/posterior_correction.py``::

    posterior_correction:
      old: {m: m_old, s: s_old}     # q_old: the data names of its parameters (default <p>_old)
      sites: gradient               # the sum of q_old's sites: 'gradient' (the full-data gradient, and Hessian,
                                    # at q_old: data grad_full, hess_full) or 'posterior' (q_old itself: −log q_old)
      estimates: [grad, hess]       # the estimates the correction replaces (default both); [grad]: E_q[∇ℓ] only,
                                    # the Hessian estimate the batch's own (no hess_full)
      description: text             # the source, shown by explain

A recipe that names the approximation ``posterior_correction`` without the section gets the default section
({p: p_old} for every free parameter, sites: gradient): the data a corrected step received before the section
existed (``svrg``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.matexpr import is_mat
from blr_derive.core.names import check_name_at
from blr_derive.core.text import Prose
from blr_derive.core.yamlio import LDict, check_keys, text_field, where
from blr_derive.spec.hyper import DataVar

CORRECTION_KEYS = {"old", "sites", "estimates", "description"}
#: the estimates a correction may replace
ESTIMATES = ("grad", "hess")
SITES = ("gradient", "posterior")
#: the approximations that read the section
READERS = ("posterior_correction",)


@dataclass
class Posterior:
    """The stored posterior q_old: family parameter name -> its DataVar."""
    params: dict


@dataclass
class Correction:
    posteriors: list                       # [Posterior]: the one stored posterior q_old
    sites: str = "gradient"                # what stands for the sum of q_old's sites (SITES)
    full: dict = field(default_factory=dict)   # sites == 'gradient': {'grad': DataVar, 'hess': DataVar (if any)}
    description: object = field(default_factory=lambda: Prose(""))   # Prose: the source, shown by explain
    line: int | None = None                # the section's line (or the approximation's, for the default section)
    estimates: tuple = ESTIMATES           # the estimates replaced: both, or ('grad',) (E_q[∇ℓ] only)

    @property
    def single(self):
        """The stored posterior q_old (a correction evaluates its batch at q_old)."""
        return self.posteriors[0]


def uses_hessian(fam):
    """Whether the family's natural gradient needs E_q[∇²ℓ] (its covariance depends on its parameters)."""
    return fam.is_gaussian and bool(sp.sympify(fam.gaussian_cov).free_symbols
                                    & {p.symbol for p in fam.params.values() if not p.fixed})


def _data(name, like, what, symmetric=False):
    if is_mat(like):
        shape = tuple(like.shape) if like.shape[1] != 1 else (like.shape[0],)
        return DataVar(name, sp.MatrixSymbol(name, *like.shape), shape, what, symmetric)
    # a positive parameter's snapshot (IVON's s_old) is a positive datum: its square root stays real
    return DataVar(name, sp.Symbol(name, positive=True) if getattr(like, "is_positive", False) else
                   sp.Symbol(name, real=True), (), what)


def parse_correction(spec, fam, hyper, data, taken, approxs, file=None) -> Correction | None:
    """The section (or the default one) when the recipe names ``posterior_correction``; its data join ``data``
    (the stored posterior's parameters, then the full-data gradient and Hessian).  None when no approximation
    reads it."""
    named = [a for a in approxs if a.name in READERS]
    section = spec.get("posterior_correction") if "posterior_correction" in spec else None
    if not named:
        if "posterior_correction" in spec:
            raise SpecError("the posterior_correction section is read by the approximation 'posterior_correction' "
                            "(a corrected step): name it in approximations", *where(spec, "posterior_correction"))
        return None
    first = named[0]
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

    if section is None:
        section = LDict()
        section.file, section.line = file, first.line
    elif not isinstance(section, dict):
        raise fail("posterior_correction must be a mapping (old, sites, description)", spec, "posterior_correction")
    check_keys(section, CORRECTION_KEYS, (), "posterior_correction")
    entry = section.get("old")
    if entry is None:
        entry = LDict()
        entry.file, entry.line = where(section, "old" if "old" in section else None)
    if not isinstance(entry, dict):
        raise fail("posterior_correction.old: the stored posterior is a mapping from the family's parameters to "
                   "data names, e.g. {m: m_old}", section, "old")
    check_keys(entry, {p.name for p in free}, (), "the stored posterior of posterior_correction.old")
    params = {}
    for p in free:
        name = entry.get(p.name, f"{p.name}_old")
        check_name_at(name, f"posterior_correction.old: data name of {p.name}", entry,
                      p.name if p.name in entry else None)
        where_ = (entry, p.name) if p.name in entry else (None, None)
        params[p.name] = add(name, p.symbol, f"{p.name} of the snapshot q_old",
                             is_mat(p.symbol) and p.symbol in fam.symmetric, *where_)
    sites = section.get("sites", "gradient")
    if sites not in SITES:
        raise fail(f"posterior_correction.sites must be one of {', '.join(SITES)}", section, "sites")
    estimates = section.get("estimates", list(ESTIMATES))
    if not (isinstance(estimates, list) and estimates and all(isinstance(e, str) for e in estimates)
            and len(set(estimates)) == len(estimates) and set(estimates) <= set(ESTIMATES) and "grad" in estimates):
        raise fail("posterior_correction.estimates is a list of the estimates the correction replaces: [grad, hess] "
                   "(the default) or [grad] (E_q[∇ℓ] only)", section, "estimates")
    if "hess" not in estimates and sites != "gradient":
        raise fail("posterior_correction.estimates: [grad] corrects E_q[∇ℓ] by the stored full-data gradient; it needs "
                   "sites: gradient", section, "estimates")
    full = {}
    if sites == "gradient":
        at = ("at the snapshot's mean" if any(a.name == "delta" for a in approxs)
              else "averaged over the snapshot q_old")
        full["grad"] = add("grad_full", fam.gaussian_mean, f"full-data gradient {at}")
        if uses_hessian(fam) and "hess" in estimates:
            full["hess"] = add("hess_full", fam.gaussian_cov, f"full-data Hessian {at}", is_mat(fam.gaussian_cov))
    return Correction([Posterior(params)], sites, full, text_field(section, "description", ""),
                      section.line if "posterior_correction" in spec else first.line,
                      tuple(e for e in ESTIMATES if e in estimates))
