"""The BLR's objective as an entry point of the generated module (issue 42, item 1).

The BLR minimizes L(q) = E_q[ℓ(θ)] − H(q) over the candidate family (Eq. 2 of Khan & Rue 2023; the Bayesian
posterior is its minimizer when ℓ is the negative log joint, Eq. 26).  Where the derivation holds E_q[ℓ] in closed
form (``Derivation.expected_loss``: the exact rule and the rules that set it, written in μ) and the family's entropy
H(q) = A(λ) − ⟨λ, μ⟩ − E_q[log h] has a closed form (``Family.entropy``, App. B), both are written in the state
(the family's ordinary parameters, through μ(ordinary)) and become ``objective(state, *, oracles=None, data=None,
rng=None, **hyperparameters)``, which takes what ``step`` takes and returns {'objective': L, 'expected_loss':
E_q[ℓ], 'entropy': H}, summed over the coordinates of a mean-field (elementwise) state.  Nothing here is
transcribed: both terms are the engine's derivations, printed by the targets' entry-point printers."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.matexpr import is_mat, simplify_mat
from blr_derive.core.types import Text
from blr_derive.ir.model import Constant, EntryPoint, EntryPoints, HyperVar, ObjectiveParts, Read, Var
from blr_derive.rules.base import Derivation
from blr_derive.rules.federated import _small_traces
from blr_derive.rules.program import scalar_expr

#: the keys of the mapping ``objective`` returns
KEYS = ("objective", "expected_loss", "entropy")
#: the keys of the mapping an estimated objective returns (Monte Carlo, quadrature or delta method; every target)
ESTIMATE_KEYS = ("objective", "expected_loss", "entropy", "standard_error", "estimate", "samples")


def objective_terms(D: Derivation):
    """(E_q[ℓ], H(q)) in the family's ordinary parameters, the data and the hyperparameters, or None where the
    derivation does not hold E_q[ℓ] in closed form, the entropy is not closed (a numeric E_q[log h]), or the
    recipe samples, calls oracles or stores more than the family's parameters in what E_q[ℓ] reads.

    A loss that is −log h plus a linear combination of the statistics (the full negative log-joint of a conjugate
    model, ``rules/exact.py``) has E_q[ℓ + log h] from the derivation; E_q[ℓ] is that minus the family's E_q[log h]
    (App. B), written where the family closes it (a series or a numeric integral: no objective)."""
    r = D.recipe
    fam = r.family
    expected, log_h = D.expected_loss, sp.Integer(0)
    if expected is None and D.expected_loss_plus_log_h is not None:
        try:
            log_h = fam.expect_log_h()
        except Exception:               # noqa: BLE001 - E_q[log h] not derived: no objective
            return None
        if not isinstance(log_h, sp.Basic) or log_h.has(sp.Integral, sp.Sum):
            return None
        expected = D.expected_loss_plus_log_h
    if expected is None or D.sampling is not None or D.oracle_calls or D.component_axis is not None:
        return None
    if getattr(D, "federated", None) is not None or D.renamed:
        return None
    if r.own_parameters():
        return None                     # the loss reads q's own parameters (a prior at the state the step starts
        #                                 from): E_q[ℓ] − H(q) of a loss that moves with q is no objective of q
    try:
        H = fam.entropy()
    except Exception:                   # noqa: BLE001 - a family whose entropy does not close: no objective
        return None
    if not isinstance(H, sp.Basic) or H.has(sp.Integral) or is_mat(H):
        return None
    if _reads_verbatim(D, expected):
        # a deeply nested loss at the points of a finite support, kept as named definitions (rules/finite_support.py):
        # written out, its nested functions of numbers are evaluated again at every level (minutes at depth 12)
        return None
    E = D.expand_defs(expected)
    if not isinstance(E, sp.Basic):
        return None
    E = E.xreplace(dict(zip(fam.mu, fam.mu_ord))) - log_h
    E = _scalar(E, {p.symbol for p in fam.params.values()} | set(fam.symmetric)
                | {d.symbol for d in r.data if d.symmetric})
    if E is None:
        return None
    params = {p.symbol for p in fam.params.values()}
    allowed = params | {d.symbol for d in r.data} | set(r.hyper_symbols().values()) | _dimensions(r, params)
    if not (E.free_symbols | H.free_symbols) <= allowed or E.has(sp.zoo, sp.nan) or H.has(sp.zoo, sp.nan):
        return None
    return E, H


def _scalar(E, symmetric):
    """E_q[ℓ] of a vector or matrix family as a scalar expression: traces of products rotated to 1×1 products
    (tr(X m yᵀ) = yᵀX m), a trace of a sum split, a 1×1 matrix read as its number; a scalar expression unchanged;
    None where it stays a matrix.  A numeric rule's node (Gauss–Hermite of a linear predictor summed over the
    data, ``rules/datasum.py``) stays as it is: the array printers print it at the expanded projection."""
    if not isinstance(E, sp.Basic):
        return None
    if E.has(sp.Trace) or is_mat(E):
        sym = {s for s in symmetric if is_mat(s) and s.shape[0] == s.shape[1]}
        try:
            E = _small_traces(simplify_mat(E, sym))
            if is_mat(E):
                E = scalar_expr(E)
        except (AttributeError, TypeError, ValueError):
            # sympy's matrix algebra refuses the expression (a loss over data the derivation scalarized, whose
            # symbol is a number inside a matrix product): no objective is written, the update is unaffected
            return None
    return None if not isinstance(E, sp.Basic) or is_mat(E) else E


def _dimensions(r, params) -> set:
    """The dimension symbols of the family's parameters and the data (P, N: read from the arrays' shapes)."""
    out = set()
    for s in list(params) + [d.symbol for d in r.data]:
        if is_mat(s):
            out |= {x for x in s.shape if isinstance(x, sp.Symbol)}
    return out


def objective_entry_points(D: Derivation, state: list[Var], hyper: list[HyperVar], data: list[Var],
                           elementwise: bool, dims: list | None = None, bound=None) -> EntryPoints | None:
    """The ``objective`` entry point of an :class:`~blr_derive.ir.model.UpdateIR`, or None (see
    :func:`objective_terms`); ``bound``: (E, H, doc, notes, constants) of a bound in place of the derivation's exact
    terms and their text (blr_derive/ir/mixture_objective.py)."""
    terms = objective_terms(D) if bound is None else bound[:2]
    if terms is None:
        return None
    E, H = terms
    used = E.free_symbols | H.free_symbols
    arrays = {v.name: v.symbol for v in state if v.family} | {v.name: v.symbol for v in data}
    first: dict = {}                    # a dimension read from the first array (state, then data) whose axis it is
    for d in dims or ():
        if d.axis == 0 and d.var in arrays and d.symbol in used:
            first.setdefault(d.symbol, (d.symbol, arrays[d.var]))
    dim = list(first.values())
    if not {x for x in used if x not in arrays.values()} <= set(D.recipe.hyper_symbols().values()) | {d for d, _ in dim}:
        return None                     # a dimension no array of the state or the data gives
    read = used | {s for _, s in dim}   # the dimensions are read from the arrays' shapes
    reads = [Read(v.symbol, "state", v.name) for v in state if v.family and v.symbol in read]
    reads += [Read(v.symbol, "data", v.name) for v in data if v.symbol in read]
    if elementwise and any(v.kind not in ("scalar", "elementwise") for v in data if v.symbol in read):
        return None
    hsyms = D.recipe.hyper_symbols()
    hyper_names = [h.name for h in hyper if h.kind in ("float", "int") and h.symbols[0] in used]
    if any(s in used for s in hsyms.values()) and \
            not {s for s in hsyms.values() if s in used} <= {h.symbols[0] for h in hyper if h.name in hyper_names}:
        return None                     # a hyperparameter the module does not declare (the update never reads it)
    e_sym, h_sym = sp.Symbol("_expected_loss", real=True), sp.Symbol("_entropy", real=True)
    total = "summed over the coordinates of the (mean-field) state; " if elementwise else ""
    doc = ("The BLR's objective L(q) = E_q[ℓ(θ)] − H(q) at the state (Khan & Rue 2023, Eq. 2), which the update "
           "minimizes over the family: E_q[ℓ] as the derivation's expectation rule derived it (the natural gradient "
           "of the update is its gradient in μ, Eq. 6) and the entropy H(q) = A(λ) − ⟨λ, μ⟩ − E_q[log h] (App. B), "
           f"both in the state's ordinary parameters; {total}every constant of the loss as written is kept (the "
           "loss's additive constants are part of L; none is added).  Takes what step() takes (oracles and rng are "
           "accepted and unused) and returns {'objective': L, 'expected_loss': E_q[ℓ], 'entropy': H}.")
    fn = EntryPoint("objective", doc, ["state"], hyper_names, reads, keywords=["oracles", "data", "rng"], dims=dim,
                    assignments=[(e_sym, E), (h_sym, H)],
                    returns=[("objective", e_sym - h_sym), ("expected_loss", e_sym), ("entropy", h_sym)])
    notes: list[Text] = ["The objective the BLR minimizes (Eq. 2): L(q) = E_q[loss] - H(q), with E_q[loss] and H(q) as the",
                         "engine derived them; it decreases along steps with a small enough learning rate."]
    constants: list[tuple[str, Constant]] = [("OBJECTIVE_KEYS", KEYS)]
    if bound is not None:
        fn.doc, notes, constants = bound[2], bound[3], constants + bound[4]
    return EntryPoints("the BLR objective L(q) = E_q[loss] - H(q)", notes, constants, [fn])


def _reads_verbatim(D: Derivation, e) -> bool:
    """Whether ``e`` reads, through the named definitions, one that the derivation keeps verbatim."""
    if not D.verbatim or not isinstance(e, sp.Basic):
        return False
    defs = dict(D.defs)
    seen, todo = set(), list(e.free_symbols)
    while todo:
        s = todo.pop()
        if s in seen:
            continue
        seen.add(s)
        if s in D.verbatim:
            return True
        if s in defs and isinstance(defs[s], sp.Basic):
            todo.extend(defs[s].free_symbols)
    return False


def objective_parts(D: Derivation, state: list[Var], hyper: list[HyperVar],
                    data: list[Var] | None = None, dims: list | None = None) -> ObjectiveParts | None:
    """The objective's parts for the optimizer targets (torch, Triton), or None.  H(q) is the family's entropy
    (App. B) written in the state (a family parameter a rule replaced by another state, ``change_variable``,
    through its value).  The loss ℓ of Eq. 1 is what the rules recorded (``Derivation.loss_model``): scale·ℓ_o +
    R(θ) − log p₀(θ), ℓ_o the loss the oracles evaluate (a mini-batch mean under ``minibatch``: scale N), R a prior
    a rule added (``weight_decay``, ``prior_site``) and p₀ a prior in the candidate family (``family_prior``).
    How E_q[ℓ] is had (``kind``): ``exact`` where :func:`objective_terms` closes it and no rule changed the loss
    (the optimizers keep no data outside their per-parameter state); ``quadrature`` where the update integrates
    over q by a deterministic rule (the tanh-sinh nodes of the ``quadrature`` rule): scale × the same weighted sum
    of ℓ_o at the same nodes (the recipe's loss written at the node θ_k where it is explicit, the ``loss`` oracle
    there where it is abstract) + E_q[R − log p₀] in closed form; ``monte_carlo`` where the recipe samples q
    (scale × the mean of ℓ_o at the samples, as the caller gives them, + E_q[R − log p₀] in closed form);
    ``delta`` where the update calls oracles at one point and samples nothing (E_q[ℓ] ≈ ℓ(point), the delta
    method, Sec. 4.2, R and p₀ included), or where the delta rule differentiates an explicit loss at the Gaussian
    mean (``node_loss``: the recipe's loss at the mean, no oracle).  A recipe that drops the entropy (``no_entropy``, Sec. 4.5) minimizes
    E_q[ℓ] alone: its entropy term is 0.  Scalar families only; mixtures, federated recipes, families whose
    entropy does not close and losses changed in a way the rules did not record (``followed``): None.  A vector
    or matrix family (its entropy one number, its log-determinant as the family derives it; the dimensions read
    from the arrays) has the delta kind only, without a prior in the family (``family_prior``)."""
    r = D.recipe
    fam = r.family
    lm = D.loss_model
    if D.component_axis is not None or getattr(D, "federated", None) is not None or not lm.followed:
        return None
    matrix = any(is_mat(p.symbol) for p in fam.params.values()) or is_mat(fam.theta)
    # sub-batches at a point mass (the samples are θ_k = the point, no draw): the delta method at that point
    point_mass = D.sampling is not None and D.sampling.draw == "point"
    sampled = D.sampling is not None and not point_mass
    note = lm.relaxed or ""
    # a vector family whose program was scalarized (one coordinate at a time, ``scalarize_elementwise``): its
    # coordinates are alike and independent, so H(q) = P·h with h one coordinate's entropy, summed over the
    # coordinates as an elementwise objective sums its terms
    per_coordinate = (matrix and D.elementwise and not any(is_mat(e) for _, _, e in D.updates)
                      and not any(is_mat(p.symbol) and p.symbol.shape[1] != 1 for p in fam.params.values()))
    # the delta method over an explicit loss (its derivatives at the Gaussian mean, Eq. 13; no oracle is called):
    # E_q[ℓ] ≈ ℓ(m), the recipe's own loss at the mean
    explicit_delta = (D.sampling is None and not D.oracle_calls and r.loss_kind == "explicit"
                      and isinstance(r.loss, sp.Basic) and any(a.name == "delta" for a in r.approximations)
                      and getattr(fam, "gaussian_mean", None) is not None)
    if matrix and (lm.family_prior is not None or (D.sampling is None and not D.oracle_calls and not explicit_delta)
                   or (sampled and lm.prior != 0)):
        return None                     # vector and matrix families: the delta method, Monte Carlo without priors
    try:
        H = fam.entropy()
    except Exception:                   # noqa: BLE001 - a family whose entropy does not close: no objective
        return None
    if not isinstance(H, sp.Basic) or H.has(sp.Integral, sp.zoo, sp.nan) or is_mat(H):
        return None
    if per_coordinate:
        P = fam.dim
        h = sp.simplify(H / P) if isinstance(P, sp.Symbol) else None
        if h is None or h.has(P) or h.atoms(sp.MatrixSymbol):
            return None
        H, matrix = h, False
    held = {v.symbol for v in state if v.family}
    kinds = ("scalar", "elementwise", "vector", "matrix") if matrix else ("scalar", "elementwise")
    allowed = held | {s for h in hyper for s in h.symbols} | {v.symbol for v in data or () if v.kind in kinds}
    if matrix:
        allowed |= {d.symbol for d in dims or ()}
    if per_coordinate:                  # the scalarized program names a coordinate of a vector state by its name
        allowed |= {sp.Symbol(str(s), real=True) for s in held if is_mat(s)}
    to_state = {fam.params[k].symbol: v.value for k, v in D.renamed.items() if k in fam.params}

    def in_state(e, scalar=True):
        e = e.xreplace(to_state)
        if matrix and scalar:           # a 1×1 product (a prior θᵀθ at the point) as its number
            e = _scalar(e, held | set(fam.symmetric))
            if e is None:
                return None
        return e if isinstance(e, sp.Basic) and e.free_symbols <= allowed and not e.has(sp.zoo, sp.nan) else None

    if explicit_delta:
        point = fam.gaussian_mean
        extra = _added_terms(fam, lm, point)
        node = in_state(r.loss.xreplace({fam.theta: point}))
        H, extra = in_state(H), None if extra is None else in_state(extra)
        if H is None or extra is None or node is None:
            return None
        dropped = any(a.name == "no_entropy" for a in r.approximations)
        return ObjectiveParts("delta", sp.Integer(0) if dropped else H, point=str(point), scale=lm.scale,
                              extra=extra, loss=_loss_text(fam, lm), no_entropy=dropped,
                              point_value=in_state(sp.sympify(point), scalar=False), node_loss=node)
    if D.sampling is not None or D.oracle_calls:
        points = {c.argument for c in D.oracle_calls} - _anchors(r)
        if point_mass and D.sampling is not None:
            points |= {D.sampling.theta_expr}
        if not sampled and len(points) != 1:
            return None                 # oracles at several points: no one delta value
        point = next(iter(points)) if not sampled else None
        extra = _added_terms(fam, lm, point)
        if extra is None:
            return None
        H, extra = in_state(H), in_state(extra)
        if H is None or extra is None:
            return None
        dropped = any(a.name == "no_entropy" for a in r.approximations)
        sm = D.sampling
        if sm is not None and sm.draw == "tanh_sinh" and not matrix:
            # a deterministic rule (the quadrature rule's tanh-sinh nodes in u = F(θ)): E_q[ℓ_o] is the same
            # weighted sum of ℓ_o at the same nodes, the module's own loss where it is explicit (no draws, no values)
            node = None
            if r.loss_kind == "explicit" and isinstance(r.loss, sp.Basic):
                node = r.loss.xreplace({fam.theta: sm.theta})
                if not node.free_symbols <= allowed | {sm.theta} or node.has(sp.zoo, sp.nan):
                    return None
            return ObjectiveParts("quadrature", sp.Integer(0) if dropped else H, scale=lm.scale, extra=extra,
                                  loss=_loss_text(fam, lm), no_entropy=dropped, node_loss=node, note=note)
        return ObjectiveParts("monte_carlo" if point is None else "delta", sp.Integer(0) if dropped else H,
                              point="" if point is None else str(point), scale=lm.scale, extra=extra,
                              loss=_loss_text(fam, lm), no_entropy=dropped,
                              point_value=None if point is None else in_state(sp.sympify(point), scalar=False),
                              note=note)
    terms = objective_terms(D)
    if terms is None or D.renamed or not lm.trivial() or any(a.name == "no_entropy" for a in r.approximations):
        return None
    E, H0 = terms
    if not (E.free_symbols | H0.free_symbols) <= held | {s for h in hyper for s in h.symbols}:
        return None                     # E_q[ℓ] reads data: the optimizers keep none outside their state
    return ObjectiveParts("exact", H0, expected_loss=E)


def _anchors(r) -> set:
    """The points at which a posterior correction with the full-data gradient as q_old's sites reads its oracles
    at the stored q_old (its mean there, ``posterior_correction``): a control variate whose expectation over the
    batches is zero, so the delta method's point is the other one (the candidate's own)."""
    corr = getattr(r, "correction", None)
    fam = r.family
    if corr is None or corr.sites != "gradient" or getattr(fam, "gaussian_mean", None) is None:
        return set()
    old = {fam.params[n].symbol: dv.symbol for n, dv in corr.single.params.items()}
    return {fam.gaussian_mean.xreplace(old)}


def _loss_text(fam, lm) -> str:
    """ℓ(θ) of the loss model as text: scale·ℓ_o(θ) + R(θ) − log p₀(θ)."""
    theta = str(fam.theta)
    out = ("" if lm.scale == 1 else f"({sp.sstr(lm.scale)})·") + f"ℓ_o({theta})"
    if lm.prior != 0:
        prior = lm.prior.xreplace({sp.Trace(fam.theta.T * fam.theta): sp.Symbol(f"‖{theta}‖²")}) \
            if is_mat(fam.theta) else lm.prior
        pieces = prior.args if isinstance(prior, sp.Add) else (prior,)
        for p in pieces:
            if isinstance(p, sp.Piecewise) and len(p.args) == 2 and p.args[1] == (0, True):
                out += f" + {sp.sstr(p.args[0][0])} (when {sp.sstr(p.args[0][1])})"
            else:
                out += f" + {sp.sstr(p)}"
    if lm.family_prior is not None:
        out += f" − log p₀({theta}), p₀ of the family at λ₀ = ({', '.join(sp.sstr(l) for l in lm.family_prior)})"
    return out


def _added_terms(fam, lm, point):
    """E_q[R(θ) − log p₀(θ)] of the loss model's added terms in the ordinary parameters (``point`` None), or their
    value at ``point`` (the delta method); None where an expectation does not close (R not linear in T(θ))."""
    theta = fam.theta
    if point is not None:
        prior = lm.prior
        if is_mat(theta) and not is_mat(point):
            # the program was scalarized (one coordinate at a time): θᵀθ of a prior recorded on the vector is the
            # coordinate's square, summed over the coordinates as the elementwise objective sums its terms
            prior = prior.xreplace({sp.Trace(theta.T * theta): point ** 2})
            if prior.has(theta) or lm.family_prior is not None:
                return None
        out = prior.xreplace({theta: point})
        if lm.family_prior is not None:
            lam0 = dict(zip(fam.lam, lm.family_prior))
            out += -sp.log(fam.h).xreplace({theta: point}) - sum(l0 * t.xreplace({theta: point})
                                                                 for l0, t in zip(lm.family_prior, fam.T)) \
                + fam.A.xreplace(lam0)
        return out
    out = _expectation(fam, lm.prior)
    if out is None:
        return None
    if lm.family_prior is not None:
        try:
            log_h = fam.expect_log_h()
        except Exception:               # noqa: BLE001 - E_q[log h] does not close: no objective
            return None
        lam0 = dict(zip(fam.lam, lm.family_prior))
        out += -log_h - sum(l0 * mu for l0, mu in zip(lm.family_prior, fam.mu_ord)) + fam.A.xreplace(lam0)
    return out


def _expectation(fam, R):
    """E_q[R(θ)] in the ordinary parameters where R is a constant plus a combination of the statistics T(θ)
    (through conditions: a Piecewise's pieces one by one), else None."""
    theta = fam.theta
    if not R.has(theta):
        return R
    if isinstance(R, sp.Add):
        parts = [_expectation(fam, a) for a in R.args]
        return None if any(p is None for p in parts) else sp.Add(*parts)
    if isinstance(R, sp.Piecewise):
        pieces = [(_expectation(fam, e), c) for e, c in R.args]
        return None if any(e is None for e, _ in pieces) else sp.Piecewise(*pieces)
    cs = sp.symbols(f"_c0:{len(fam.T) + 1}")
    rest = sp.expand(R - cs[-1] - sum(c * t for c, t in zip(cs, fam.T)))
    try:
        eqs = sp.Poly(rest, theta).all_coeffs()
    except sp.PolynomialError:
        return None
    sol = sp.solve(eqs, cs, dict=True)
    if not sol:
        return None
    sol = sol[0]
    if any(c not in sol for c in cs[:-1]) and any(c in sp.Add(*[sol.get(x, 0) for x in cs]).free_symbols for c in cs):
        return None
    coeff = [sol.get(c, sp.Integer(0)).xreplace({x: 0 for x in cs}) for c in cs]
    return coeff[-1] + sum(c * mu for c, mu in zip(coeff, fam.mu_ord))
