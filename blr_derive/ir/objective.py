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

from blr_derive.core.matexpr import is_mat
from blr_derive.core.types import Text
from blr_derive.ir.model import Constant, EntryPoint, EntryPoints, HyperVar, Read, Var
from blr_derive.rules.base import Derivation

#: the keys of the mapping ``objective`` returns
KEYS = ("objective", "expected_loss", "entropy")


def objective_terms(D: Derivation):
    """(E_q[ℓ], H(q)) in the family's ordinary parameters, the data and the hyperparameters, or None where the
    derivation does not hold E_q[ℓ] in closed form, the entropy is not closed (a numeric E_q[log h]), or the
    recipe samples, calls oracles or stores more than the family's parameters in what E_q[ℓ] reads."""
    r = D.recipe
    fam = r.family
    if D.expected_loss is None or D.sampling is not None or D.oracle_calls or D.component_axis is not None:
        return None
    if getattr(D, "federated", None) is not None or D.renamed:
        return None
    if any(is_mat(p.symbol) for p in fam.params.values()) or is_mat(fam.theta):
        return None                     # vector and matrix families: left for later (traces, log-determinants)
    try:
        H = fam.entropy()
    except Exception:                   # noqa: BLE001 - a family whose entropy does not close: no objective
        return None
    if not isinstance(H, sp.Basic) or H.has(sp.Integral):
        return None
    if _reads_verbatim(D, D.expected_loss):
        # a deeply nested loss at the points of a finite support, kept as named definitions (rules/finite_support.py):
        # written out, its nested functions of numbers are evaluated again at every level (minutes at depth 12)
        return None
    E = D.expand_defs(D.expected_loss)
    if not isinstance(E, sp.Basic) or is_mat(E):
        return None
    E = E.xreplace(dict(zip(fam.mu, fam.mu_ord)))
    params = {p.symbol for p in fam.params.values()}
    allowed = params | {d.symbol for d in r.data} | set(r.hyper_symbols().values())
    if not (E.free_symbols | H.free_symbols) <= allowed or E.has(sp.zoo, sp.nan) or H.has(sp.zoo, sp.nan):
        return None
    return E, H


def objective_entry_points(D: Derivation, state: list[Var], hyper: list[HyperVar], data: list[Var],
                           elementwise: bool) -> EntryPoints | None:
    """The ``objective`` entry point of an :class:`~blr_derive.ir.model.UpdateIR`, or None (see
    :func:`objective_terms`)."""
    terms = objective_terms(D)
    if terms is None:
        return None
    E, H = terms
    used = E.free_symbols | H.free_symbols
    reads = [Read(v.symbol, "state", v.name) for v in state if v.family and v.symbol in used]
    reads += [Read(v.symbol, "data", v.name) for v in data if v.symbol in used]
    if any(v.kind not in ("scalar", "elementwise") for v in data if v.symbol in used):
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
    fn = EntryPoint("objective", doc, ["state"], hyper_names, reads, keywords=["oracles", "data", "rng"],
                    assignments=[(e_sym, E), (h_sym, H)],
                    returns=[("objective", e_sym - h_sym), ("expected_loss", e_sym), ("entropy", h_sym)])
    notes: list[Text] = ["The objective the BLR minimizes (Eq. 2): L(q) = E_q[loss] - H(q), with E_q[loss] and H(q) as the",
                         "engine derived them; it decreases along steps with a small enough learning rate."]
    constants: list[tuple[str, Constant]] = [("OBJECTIVE_KEYS", KEYS)]
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
