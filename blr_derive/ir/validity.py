"""Run-time validity checks: where the derivation cannot guarantee that a new value stays in its parameter's domain,
the generated function checks it and raises an error naming the value, the mixture component and the step, instead
of returning a state that is no longer a distribution of the family (NaN downstream: log|S| of an indefinite S,
√s of a negative s).

A positive (domain ``positive``) or positive-definite (``positive_definite``) state is checked when its update reads
a quantity that may be an indefinite estimate of a Hessian and no rule keeps it valid:

* an oracle value named ``hess`` (the delta method's Hessian at the mean, any symmetric matrix);
* a quantity a rule declared indefinite (``Derivation.indefinite``: Price's estimator, a mixture's ∇² log q);
* a client's dual natural parameters (federated Bayesian ADMM: differences of natural parameters, of any sign);

read directly or through the program's definitions; ``riemannian_correction`` on the parameter keeps it valid
(``Derivation.corrected``).  The federated server's parameters are always checked (a sum of sites, of any sign, unless
the server step is corrected; the check is then never met).  An explicit loss's Hessian is derived symbolically and
its sign is not tracked: such updates are not checked (a known limit).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.families.mixture import MixtureFamily
from blr_derive.ir.model import DomainCheck

#: the parameter domains a check keeps
CHECKED = ("positive", "positive_definite")


def _reads(e, defs, cache):
    """Every symbol ``e`` reads, through the definitions ``defs`` (symbol -> expression)."""
    out = set()
    todo = list(getattr(e, "free_symbols", ()))
    while todo:
        s = todo.pop()
        if s in out:
            continue
        out.add(s)
        if s in defs:
            if s not in cache:
                cache[s] = set(getattr(defs[s], "free_symbols", ()))
            todo.extend(cache[s])
    return out


def _owners(D, fam):
    """state name -> (the family parameter it stands for, the component's number or "axis" or None)."""
    if not isinstance(fam, MixtureFamily):
        out = {p.name: (p, None) for p in fam.params.values()}
        for p_name, (new, _, _) in D.renamed.items():
            out[new] = (None, None)           # a renamed state: its domain is the new variable's, not checked
        return out
    base = fam.base
    if fam.axis:
        return {p.name: (p, "axis") for p in base.params.values()}
    out = {}
    for c in fam.free_components:
        for p in base.params.values():
            v = c.subs.get(p.symbol)
            if isinstance(v, (sp.Symbol, sp.MatrixSymbol)):
                out[v.name] = (p, c.index)
    return out


def _hint(pname, domain):
    what = "positive definite" if domain == "positive_definite" else "positive"
    return (f"its update reads a Hessian estimate of any sign; the rule riemannian_correction: {{param: {pname}}} "
            f"keeps it {what} (or take smaller steps)")


def state_checks(D, fam) -> list:
    """The DomainChecks of the step's new state values."""
    sources = {c[0] for c in D.oracle_calls if c[1] == "hess"} | set(D.indefinite)
    if D.sampling is not None:
        sources |= {s for s, o in D.sampling.calls if o == "hess"}
    fed = getattr(D.recipe, "federated", None)
    if fed is not None:
        sources |= {dv.symbol for dv in fed.duals}
    defs = dict(D.defs)
    defs.update({sym: e for _, sym, e in D.updates})
    if D.sampling is not None:
        defs.update(dict(D.sampling.stats))
    owners = _owners(D, fam)
    cache: dict[sp.Basic, set[sp.Basic]] = {}      # symbol -> the symbols its definition reads
    out = []
    for name, sym, e in D.updates:
        p, component = owners.get(name, (None, None))
        if p is None or p.domain not in CHECKED or p.name in D.corrected:
            continue
        reads = _reads(e, defs, cache)
        if reads & sources:
            out.append(DomainCheck(name, sym, p.domain, component, _hint(p.name, p.domain)))
        elif (reads & D.unsigned or D.unsigned_gradient) and not _positive_whatever_the_estimate(e, p, fam):
            out.append(DomainCheck(name, sym, p.domain, component, _unsigned_hint(p, fam, exact=not (reads & D.unsigned)), "estimate"))
    return out


def _positive_whatever_the_estimate(e, p, fam) -> bool:
    """Whether the new value ``e`` of the positive parameter ``p`` is positive for every real value of the symbols it
    reads besides the family's positive parameters (the estimate, the hyperparameters, the named quantities): sympy's
    assumptions prove it (e.g. σ·exp(ρĝ/2)); a positive-definite matrix is never proved."""
    if p.domain != "positive" or not isinstance(e, sp.Expr) or e.has(sp.MatrixSymbol):
        return False
    positive = {q.symbol for q in fam.params.values() if q.domain == "positive" and isinstance(q.symbol, sp.Symbol)}
    sub = {s: sp.Dummy(s.name, positive=True) if s in positive else sp.Dummy(s.name, real=True)
           for s in e.free_symbols if isinstance(s, sp.Symbol)}
    return bool(e.xreplace(sub).is_positive)


def _unsigned_hint(p, fam, exact=False):
    """Take a smaller ρ (or, for the exact rule, check the loss: its target may be outside the family);
    riemannian_correction is named only where it applies (λ affine in the parameter)."""
    base = getattr(fam, "base", fam)
    text = ("its update moves λ by rho toward −∇_μE_q[loss] (Eq. 6), which may lie outside the family (the loss has "
            "no normalizable posterior in it: check its signs and terms) or be overshot: take a smaller rho" if exact
            else "its update reads a natural-gradient estimate of either sign, and a large step leaves the family: "
            "take a smaller rho")
    try:
        affine = all(sp.diff(l, p.symbol, 2) == 0 for l in base.eta)
    except (TypeError, ValueError, AttributeError):
        affine = False
    if affine and not exact:
        what = "positive definite" if p.domain == "positive_definite" else "positive"
        text += f", or the rule riemannian_correction: {{param: {p.name}}} keeps it {what}"
    return text


def server_checks(D, fam, symbols) -> list:
    """The DomainChecks of the federated server step's new global parameters (``symbols``: name -> the symbol
    server_step assigns)."""
    out = []
    for name, _ in D.federated.server:
        p = fam.params.get(name)
        if p is None or p.domain not in CHECKED:
            continue
        cond = D.corrected.get(name)
        flag = isinstance(cond, sp.Symbol) and cond.name in {h.name for h in D.recipe.hyper if h.kind == "bool"}
        hint = (f"pass {cond}=True (riemannian_correction's server condition) to keep it valid" if flag else
                f"the server step keeps it valid where {cond} (riemannian_correction's server condition)"
                if cond is not None else
                f"a sum of the clients' sites is of any sign; riemannian_correction: {{param: {name}, server: "
                "<condition>}} keeps it valid")
        out.append(DomainCheck(name, symbols[name], p.domain, None, hint))
    return out
