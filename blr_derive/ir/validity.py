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
the server step is corrected; the check is then never met).  Under an explicit loss the new value reads the loss's derived curvature and is checked unless it is proved valid
(:func:`_explicit_loss_check`: sympy's assumptions for scalars, a sum of positive semi-definite terms for matrices).
A scalar parameter of another bounded domain (``greater_than`` a bound, ``unit_interval``, ``simplex``) is checked
under the same triggers as positive checks of the quantities ``Family.domain_conditions`` writes (its excess over
the bound; p and 1 − p; each coordinate and the remainder 1 − Σ p_k): :func:`_bounded_reason`.

Every other parameter the step updates (a ``real`` mean, a natural parameter, a bounded one whose bound is proved) is
checked to be a finite number (domain ``finite``, source ``finite``: the numpy and jax targets raise where the
arithmetic gave NaN or ±inf, e.g. a 0/0 at a removable singularity, instead of returning it; torch and Triton, which
never synchronize with the host in a step, generate it unchecked and are not refused for it)."""
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
    simplex = []                                   # (name, new symbol, hint, source) of the checked simplex states
    for name, sym, e in D.updates:
        p, component = owners.get(name, (None, None))
        if p is not None and p.domain not in CHECKED and p.name not in D.corrected and component is None:
            reason = _bounded_reason(D, owners, fam, e, p, _reads(e, defs, cache), sources)
            if reason is not None:
                out.extend(_bounded_checks(name, sym, p, *reason))
                if p.domain == "simplex":
                    simplex.append((name, sym) + reason)
            else:
                out.append(_finite_check(name, sym, component))
            continue
        if p is not None and p.domain not in CHECKED:
            out.append(_finite_check(name, sym, component))
            continue
        if p is None or p.name in D.corrected:
            continue
        reads = _reads(e, defs, cache)
        if reads & sources:
            out.append(DomainCheck(name, sym, p.domain, component, _hint(p.name, p.domain)))
        elif (reads & D.unsigned or D.unsigned_gradient) and not _positive_whatever_the_estimate(e, p, fam):
            out.append(DomainCheck(name, sym, p.domain, component, _unsigned_hint(p, fam, exact=not (reads & D.unsigned)),
                                   _unsigned_source(D, reads)))
        elif getattr(D.recipe, "loss_kind", None) == "explicit":
            check = _explicit_loss_check(D, owners, e, p)
            if check is not None:
                out.append(DomainCheck(name, sym, p.domain, component, *check))
    if simplex:
        out.append(_simplex_remainder(D, fam, simplex))
    return out


def _finite_check(name, sym, component):
    """The check that a new value the derivation keeps in its domain came out a finite number (see the module's
    docstring): NaN or ±inf is what the arithmetic did (0/0, an overflow), not a step out of the domain."""
    return DomainCheck(name, sym, "finite", component,
                       "the formula is right but float64 cannot evaluate it here (a 0/0 at a removable singularity, "
                       "an overflow at an extreme state); start from a less extreme state or take a smaller step",
                       "finite")


def _bounded_conditions(sym, p) -> list:
    """(what, expression) pairs that are positive exactly where the new value ``sym`` of ``p`` is in its domain:
    a parameter ``greater_than`` a bound by its excess over it (as ``Family.domain_conditions`` writes Ω), a
    probability of the ``unit_interval`` by itself and by 1 − itself, a coordinate of a ``simplex`` by itself (the
    remainder 1 − Σ is :func:`_simplex_remainder`'s)."""
    if getattr(p, "greater_than", None) is not None:     # a sized axis's parameters have no bound
        bound = p.greater_than
        if bound.is_Number and bound < 0:
            shown = f"{p.name} + {sp.sstr(-bound)}"                      # "l1 + 1", not "l1 - -1"
        else:
            shown = f"{p.name} - {bound if bound.is_Atom else f'({bound})'}"
        return [(shown, sym - bound)]

    if p.domain == "unit_interval":
        return [(p.name, sym), (f"1 - {p.name}", 1 - sym)]
    if p.domain == "simplex":
        return [(p.name, sym)]
    return []


def _bounded_reason(D, owners, fam, e, p, reads, sources):
    """(hint, source) of the check of a scalar state whose domain is not ``positive`` but bounded all the same (a
    probability, a coordinate of a simplex, a parameter greater than a bound: Family.domain_conditions), or None where
    its new value ``e`` needs none: the triggers of the positive states' checks (a Hessian estimate of any sign, a
    natural-gradient estimate or the exact rule's coefficients of either sign, an explicit loss's derivatives) unless
    sympy proves every condition of :func:`_bounded_conditions` positive for every real value of the estimate, the
    family's positive parameters positive.  Without them a Dirichlet by its mean p and concentration c returned
    p₁ = −0.29 from a negative count, and a Wishart by (n, W) n = 0 ≤ P − 1."""
    conditions = _bounded_conditions(e, p)
    if not conditions or not isinstance(e, sp.Expr) or e.has(sp.MatrixSymbol):
        return None
    if _inside_for_every_lambda(fam, p):
        # every λ the step reaches is valid; only float64 can put the value on the boundary (p = 1.0 past λ ≈ 18.4,
        # a point mass whose next λ = log(p/(1 − p)) is inf): checked where the step can raise (numpy, jax), and no
        # reason for the torch and Triton targets to refuse the recipe ("estimate": unchecked there)
        return (f"{p.name} lies in its domain for every natural parameter, but float64 rounded it onto the boundary "
                f"(a point mass, from which the next step's λ is infinite): parameterize the family by its natural "
                f"parameters, or keep λ smaller (a smaller "
                f"{D.recipe.learning_rate}, a weaker loss)"), "estimate"
    explicit = getattr(D.recipe, "loss_kind", None) == "explicit"
    if not (reads & sources or reads & D.unsigned or D.unsigned_gradient or explicit):
        return None
    positive = _positive_parameters(fam)
    if all(_proved_positive(c, positive) for _, c in conditions):
        return None
    if reads & sources:
        return (f"its update reads a Hessian estimate of any sign, which may move it out of its domain (take smaller "
                f"steps)"), "hessian"
    if reads & D.unsigned or D.unsigned_gradient:
        return _unsigned_hint(p, fam, exact=not (reads & D.unsigned)), _unsigned_source(D, reads)
    return _unsigned_hint(p, fam, exact=True), "hessian"


def _unsigned_source(D, reads) -> str:
    """The source of a check on a value that reads a natural gradient of either sign: ``"estimate"`` (the torch and
    Triton targets generate it unchecked) for a sampled or quadrature estimate, and for the exact rule's constant
    gradient of a conjugate loss (λ ← (1 − ρ)λ + ρλ*, a fixed target λ* = −c: inside Ω while λ* is, for 0 < ρ ≤ 1);
    ``"hessian"`` (they refuse the recipe) for the exact rule's gradient that reads the state (a tilted E_q[ℓ], e.g.
    θ² under a beta: its target moves with q, and a beta's step was seen at a = −0.80 where numpy raises)."""
    if reads & D.unsigned or not D.gradient_reads_state:
        return "estimate"
    return "hessian"


def _inside_for_every_lambda(fam, p) -> bool:
    """Whether ``p``, written in λ (``Family.ord_from_nat``), lies in its domain for every real λ -- a Bernoulli's
    p = e^{2λ}/(e^{2λ} + 1) and 1 − p = 1/(e^{2λ} + 1), a categorical's softmax and its remainder: then no λ the
    step can reach leaves Ω through ``p``, and the only way its new value fails the test is rounding (p = 1.0 from
    λ ≈ 18.4, a valid λ), which the check names as such.  A Dirichlet by its mean (p₁ = (λ₁ + 1)/(λ₁ + λ₂ + λ₃ +
    3)) or a Wishart's n is not proved: λ itself may leave Ω."""
    ord_from_nat = getattr(fam, "ord_from_nat", None) or {}
    if not isinstance(ord_from_nat, dict) or p.symbol not in ord_from_nat:
        return False
    lam = set(getattr(fam, "lam", ()) or ())
    positive = _positive_parameters(fam)
    value = ord_from_nat[p.symbol]
    if not isinstance(value, sp.Expr) or value.free_symbols - lam - positive:
        return False
    conditions = [c for _, c in _bounded_conditions(value, p)]
    if p.domain == "simplex":
        coords = [q.symbol for q in fam.params.values() if q.domain == "simplex"]
        if not all(q in ord_from_nat for q in coords):
            return False
        conditions.append(1 - sum((ord_from_nat[q] for q in coords), sp.S.Zero))
    return all(_proved_positive(c, positive) for c in conditions)


def _positive_parameters(fam) -> set:
    return {q.symbol for q in fam.params.values() if q.domain == "positive" and isinstance(q.symbol, sp.Symbol)}


def _proved_positive(c, positive) -> bool:
    """sympy's proof that ``c`` > 0 with the symbols in ``positive`` positive and every other symbol real."""
    sub = {s: sp.Dummy(s.name, positive=True) if s in positive else sp.Dummy(s.name, real=True)
           for s in c.free_symbols if isinstance(s, sp.Symbol) and not isinstance(s, sp.Dummy)}
    return _sign(c.xreplace(sub), "is_positive")


def _bounded_checks(name, sym, p, hint, source) -> list:
    """The positive checks of :func:`_bounded_conditions`, each run after ``sym`` is assigned."""
    return [DomainCheck(what if what != p.name else name, value, "positive", None, hint, source,
                        None if value == sym else sym)
            for what, value in _bounded_conditions(sym, p)]


def _simplex_remainder(D, fam, simplex):
    """The check that the last coordinate of a simplex, 1 − Σ of the others (new values where the step updates them),
    stays positive: run after the last of them is assigned."""
    new = {name: sym for name, sym, _, _ in simplex}
    coords = [q for q in fam.params.values() if q.domain == "simplex"]
    value = 1 - sum((new.get(q.name, q.symbol) for q in coords), sp.S.Zero)
    order = [sym for _, sym, _ in D.updates if sym in new.values()]
    _, _, hint, source = simplex[0]
    return DomainCheck("1 - " + " - ".join(q.name for q in coords), value, "positive", None, hint, source, order[-1])


#: the largest update, its named quantities written out, whose sign :func:`_explicit_loss_check` tries to prove:
#: sympy's assumptions over a larger one take minutes (a finite sum over a lattice of 7 points whose natural
#: gradient is written by Cauchy–Binet over its 21 pairs: 170 s) and the value is then checked at run time
PROOF_MAX_OPS = 4000


def _explicit_loss_check(D, owners, e, p):
    """(hint, source) of the check of a positive (definite) parameter's new value ``e`` under an explicit loss, or
    None where it is proved valid.  The update reads the loss's derived derivatives (the delta method's Hessian at
    the mean, Eqs. 65–66; the exact rule's moments of ∇²ℓ, Eq. 11), whose sign the derivation does not otherwise
    track: a non-convex loss (θ⁴ − 3θ² at θ = 0) makes a precision that is the curvature's expectation negative, and any step with
    ρ > 1 may overshoot.  The new value is proved valid (sympy's assumptions for a scalar, the structure of a sum of
    positive semi-definite terms for a matrix: :func:`_definite`) with the family's positive parameters positive,
    the hyperparameters not negative (what the generated constructors' default checks enforce) and data real:

    * proved for every ρ ≥ 0: no check;
    * proved only for 0 < ρ ≤ 1 (the BLR's own range, Eq. 6): checked where the targets can (``"estimate"``: the
      torch and Triton steps, which never synchronize with the host, stay unchecked);
    * not proved even then: checked, and the torch and Triton targets refuse the recipe (``"hessian"``).

    A value proved valid for every real value of the derivation's named quantities (r = exp(λ₁_next)) is proved
    without writing them out: written out, a finite sum's λ_{t+1} inside exp(...) sends sympy's assumptions into
    expanding it and finding the real roots of polynomials in it (a truncated Poisson on 0..5: 55 s)."""
    if isinstance(e, sp.Basic) and e.free_symbols & {s for s, _ in D.defs} and _valid(D, owners, e, p, unit_rho=False):
        return None
    if _expanded_ops(D, e) > PROOF_MAX_OPS:
        pass                            # too large to prove anything of in reasonable time: checked at run time
    elif _valid(D, owners, (e := D.expand_defs(e)), p, unit_rho=False):
        return None
    elif _valid(D, owners, e, p, unit_rho=True):
        return (f"its update moves λ by {D.recipe.learning_rate} toward the loss's curvature (Eq. 6), which keeps it "
                f"{_what(p)} for {D.recipe.learning_rate} <= 1 only: take {D.recipe.learning_rate} <= 1"), "estimate"
    base = getattr(D.recipe.family, "base", D.recipe.family)
    if not getattr(base, "is_gaussian", False):        # the loss's coefficients in the statistics, not a curvature
        return _unsigned_hint(p, D.recipe.family, exact=True), "hessian"
    text = ("its update reads the loss's second derivatives, which are not proved positive (a non-convex loss, data "
            "of either sign, or a step that overshoots): check the loss's convexity or take a smaller "
            f"{D.recipe.learning_rate}")
    if _correctable(p, base):
        text += f", or the rule riemannian_correction: {{param: {p.name}}} keeps it {_what(p)}"
    return text, "hessian"


def _expanded_ops(D, e) -> int:
    """The operation count of ``e`` with the named quantities of the derivation written out (``D.expand_defs``),
    counted without writing them out: each quantity's own count, memoized, times its occurrences; stops growing
    past :data:`PROOF_MAX_OPS` (a quantity read by many others is a tree exponentially larger than its program)."""
    defs = dict(D.defs)
    memo: dict = {}

    def ops(x) -> int:
        if not isinstance(x, sp.Basic):
            return 0
        total = sp.count_ops(x)
        for s_ in x.free_symbols & defs.keys():
            if s_ not in memo:
                memo[s_] = PROOF_MAX_OPS + 1        # a cycle cannot occur; this bounds the recursion's work anyway
                memo[s_] = ops(defs[s_])
            total += x.count(s_) * memo[s_]
            if total > PROOF_MAX_OPS:
                return PROOF_MAX_OPS + 1
        return total
    return ops(e)


def _correctable(p, base) -> bool:
    """Whether riemannian_correction applies to the parameter ``p`` of the family ``base``: λ affine in it."""
    try:
        return all(sp.diff(l, p.symbol, 2) == 0 for l in base.eta)
    except (TypeError, ValueError, AttributeError):
        return False


def _what(p):
    return "positive definite" if p.domain == "positive_definite" else "positive"


def _assumed(D, owners, e, unit_rho):
    """Replacements of the symbols of ``e`` by assumption-carrying dummies: the positive (definite) states positive,
    the hyperparameters not negative (real where the recipe's peer declares its own checks or the default is negative), the learning rate in
    (0, 1] where ``unit_rho`` (ρ = 1/(1 + k), k ≥ 0), everything else real."""
    recipe = D.recipe
    validated = getattr(getattr(recipe, "peer", None), "validate", None)
    hyper = set()                   # the hyperparameters the constructors' default checks keep not negative
    for h in getattr(recipe, "hyper", ()):
        if h.symbol is not None and h.kind in ("float", "int") and not _negative(h.default):
            hyper.add(h.symbol)
        if h.kind == "tuple":
            defaults = h.default if isinstance(h.default, (list, tuple)) else ()
            hyper.update(s for i, (_, s) in enumerate(h.elements) if not (i < len(defaults) and _negative(defaults[i])))
    rho = recipe.hyper_symbol(recipe.learning_rate) if unit_rho else None
    sub = {}
    for s in e.free_symbols:
        if not isinstance(s, sp.Symbol) or isinstance(s, sp.Dummy):     # a Dummy carries its assumptions already
            continue
        q = owners.get(s.name, (None, None))[0]
        if unit_rho and s == rho:
            sub[s] = 1 / (1 + sp.Dummy("k", nonnegative=True))
        elif q is not None and q.domain == "positive":
            sub[s] = sp.Dummy(s.name, positive=True)
        elif s in hyper and not validated:
            sub[s] = sp.Dummy(s.name, nonnegative=True)
        else:
            sub[s] = sp.Dummy(s.name, real=True)
    return sub


def _negative(value) -> bool:
    """Whether a declared default is a negative number: such a hyperparameter may be negative (the constructors'
    default checks let it be, codegen/validation.py), so no proof assumes it is not."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0


def _valid(D, owners, e, p, unit_rho):
    if p.domain == "positive":
        if not isinstance(e, sp.Expr) or e.has(sp.MatrixSymbol):
            return False
        return _sign(e.xreplace(_assumed(D, owners, e, unit_rho)), "is_positive")
    return _definite(e, D, owners, unit_rho) == "pd"


def _sign(e, attribute):
    """sympy's proof of ``attribute`` (is_positive, is_nonnegative) for ``e`` as written or over a common
    denominator (1 − 1/(1 + k) is proved not negative only as k/(1 + k)); the second form for moderate sizes only."""
    if getattr(e, attribute):
        return True
    return sp.count_ops(e) <= 400 and bool(getattr(sp.together(e), attribute))


def _definite(e, D, owners, unit_rho):
    """"pd" or "psd" where the matrix ``e`` is proved positive (semi-)definite from its structure, else None: a sum of
    terms each proved semi-definite, one of them definite; a product c·M with a scalar c proved positive (not
    negative) and M proved so; Gram forms AᵀA and AᵀBA with B semi-definite; the identity, the inverse of a definite
    matrix, and the old values of the family's positive-definite parameters (the state is in the family)."""
    if isinstance(e, sp.MatAdd):
        kinds = [_definite(a, D, owners, unit_rho) for a in e.args]
        if None in kinds:
            return None
        return "pd" if "pd" in kinds else "psd"
    if isinstance(e, sp.MatMul):
        c, rest = e.as_coeff_mmul()
        factors = list(rest.args) if isinstance(rest, sp.MatMul) else [rest]
        if c != 1 or any(not getattr(f, "is_Matrix", False) for f in factors):
            scalars = sp.Mul(c, *[f for f in factors if not getattr(f, "is_Matrix", False)])
            factors = [f for f in factors if getattr(f, "is_Matrix", False)]
            inner = _definite(sp.MatMul(*factors) if len(factors) > 1 else factors[0], D, owners, unit_rho) \
                if factors else None
            if inner is None:
                return None
            s = scalars.xreplace(_assumed(D, owners, scalars, unit_rho))
            return inner if _sign(s, "is_positive") else "psd" if _sign(s, "is_nonnegative") else None
        if len(factors) == 2 and factors[0] == factors[1].T:
            return "psd"
        if len(factors) == 3 and factors[0] == factors[2].T and _definite(factors[1], D, owners, unit_rho):
            return "psd"
        return None
    if isinstance(e, sp.Identity):
        return "pd"
    if isinstance(e, sp.Inverse):
        return "pd" if _definite(e.arg, D, owners, unit_rho) == "pd" else None
    if isinstance(e, sp.MatrixSymbol):
        q = owners.get(e.name, (None, None))[0]
        return "pd" if q is not None and q.domain == "positive_definite" else None
    return None


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
    if not exact and _correctable(p, base):
        text += f", or the rule riemannian_correction: {{param: {p.name}}} keeps it {_what(p)}"
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


def product_checks(D) -> list:
    """The DomainChecks of a factorized recipe's global blocks (Sec. 5.3): each block's new parameters come from the
    natural-gradient messages of the factors (Eqs. 58–60), minus their coefficients averaged over the other blocks,
    which have no sign the derivation tracks (a factor ``-c*theta**2`` makes q(θ)'s precision negative, a data sum
    of either sign a rate).  A positive (definite) parameter is checked unless its new value, written out through
    the global program, is proved valid (:func:`_valid`: the blocks' positive parameters positive, the
    hyperparameters not negative, the plate sums of terms proved not negative (Σ 1, Σ y²) not negative, the data
    real).  Every other global state (a point block's M-step, a real parameter) is checked to be a finite number, as
    :func:`state_checks` checks a single family's (an empty component's M-step is 0/0: NaN, returned silently before;
    the hunt's Poisson mixture with a0 = 1, b0 = 0 and a rate 1e4 far from the counts)."""
    R = D.recipe
    outputs = dict(D.outputs)
    defs = dict(D.prelude)
    defs.update(D.assignments)
    owners = {}
    points = {}                  # the other global states (point blocks, real parameters): checked to be finite
    for b in R.blocks:
        if b.local or b.name in D.message_state:
            continue
        component = "axis" if getattr(b, "per_component", False) else None
        for name, _, p in b.state:
            q = b.family.params.get(str(p)) if b.family is not None and p is not None else None
            if q is not None:
                owners[name] = (q, component)
            else:
                points[name] = (component, b.approximation == "delta")
    signs = {}
    for s, e in D.stats:
        assumed = e.xreplace(_assumed(D, {}, e, False)) if isinstance(e, sp.Expr) and not e.has(sp.MatrixSymbol) else None
        if assumed is not None and _sign(assumed, "is_nonnegative"):
            signs[s] = sp.Dummy(str(s), nonnegative=True)
    out = []
    for name, (q, component) in list(owners.items()) + [(name, (None, c)) for name, (c, _) in points.items()]:
        if name not in outputs:
            continue
        if q is None or q.domain not in CHECKED:
            # a point's M-step (Sec. 5.2) or a real parameter: NaN or ±inf is what the arithmetic did (a 0/0 where a
            # component's responsibilities all underflowed to 0, a prior-free M-step of an empty component)
            check = _finite_check(name, outputs[name], component)
            if q is None and points[name][1]:
                check = DomainCheck(check.name, check.symbol, check.domain, check.component,
                                    "a point block's M-step (Sec. 5.2) is the stationary point of the factors' expected "
                                    "loss; a 0/0 there is a component that no row reads (all its responsibilities "
                                    "underflowed to 0) or a sum of the data that overflowed: start the components "
                                    "nearer the data, or add a prior factor on the block", check.source)
            out.append(check)
            continue
        sym = outputs[name]
        e = defs.get(sym, sym)
        for _ in range(len(defs) + 1):
            if not isinstance(e, sp.Basic) or not (e.free_symbols & defs.keys()) or sp.count_ops(e) > 400:
                break
            e = e.xreplace(defs)
        e = e.xreplace(signs) if isinstance(e, sp.Basic) else e
        if isinstance(e, sp.Basic) and not (e.free_symbols & defs.keys()) and _valid(D, owners, e, q, False):
            continue
        what = _what(q)
        out.append(DomainCheck(name, sym, q.domain, component,
                               f"the factors' messages to its block (Eqs. 58–60) are not proved to keep it {what}: "
                               "check the signs of the factors that read this block (each must be a normalizable "
                               "term of a log density, e.g. +c*theta**2 with c > 0) and the data"))
    return out
