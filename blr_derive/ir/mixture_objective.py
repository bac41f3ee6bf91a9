"""The bound on the BLR's objective for a mixture candidate (issue 42: "for mixtures ... the corresponding bound").

For q = Σ_k π_k q_k (Sec. 3.2, Eq. 27) the objective L(q) = E_q[ℓ] − H(q) (Eq. 2) has an exact first term,
E_q[ℓ] = Σ_k π_k E_{q_k}[ℓ] (each component's expectation as the ``exact`` rule takes it, from the Gaussian moments
of the loss), but no closed entropy: H(q) = −E_q[log Σ_j π_j q_j].  The pairwise-distance bound of Kolchinsky &
Tracey (2017, "Estimating mixture entropy with pairwise distances", Entropy 19: 361; any Chernoff α-divergence
gives a lower bound, α = ½ here) with the Bhattacharyya distance BD_kj = −log ∫ √(q_k q_j) is a lower bound,

    H(q) ≥ H_B(q) = Σ_k π_k H(q_k) − Σ_k π_k log Σ_j π_j exp(−BD_kj),
    −BD_kj = A((λ_k + λ_j)/2) − ½ A(λ_k) − ½ A(λ_j)     (exponential family, any base measure h),

H(q_k) the component family's entropy and A its log-partition (App. B).  It is exact for identical components
(H(q_k)) and for components that do not overlap (Σ_k π_k H(q_k) + H(π)), where Jensen's bound
−Σ_k π_k log Σ_j π_j ∫ q_k q_j stays ½ log(e/2) per coordinate below a Gaussian's entropy.  So
L_B(q) = E_q[ℓ] − H_B(q) ≥ L(q): an upper bound on the objective (a lower bound on the ELBO −L).  A mean-field
(elementwise) state is a product of scalar mixtures, one per coordinate, and the bound is summed over them.  Scalar
Gaussian components with an explicit loss and K fixed (one state variable per component); the other mixtures say
why they have none (blr_derive/ir/objective_notes.py)."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.matexpr import is_mat
from blr_derive.core.specialfns import logsumexp
from blr_derive.core.types import Text
from blr_derive.families.mixture import MixtureFamily
from blr_derive.ir.model import EntryPoints, HyperVar, Var
from blr_derive.ir.objective import objective_entry_points
from blr_derive.rules.base import Derivation

#: what the module's objective returns is a bound on (its OBJECTIVE_BOUND constant)
BOUND = {"objective": "an upper bound on L(q)",
         "entropy": "a lower bound on H(q): pairwise, with the Bhattacharyya distance (Kolchinsky & Tracey 2017)"}

DOC = ("An upper bound on the BLR's objective L(q) = E_q[ℓ(θ)] − H(q) (Khan & Rue 2023, Eq. 2) of the mixture "
       "q = Σ_k π_k q_k (Sec. 3.2, Eq. 27) at the state: E_q[ℓ] = Σ_k π_k E_{q_k}[ℓ] is exact (each component's "
       "expectation from the Gaussian moments of the loss, the exact rule), and the mixture's entropy, which has no "
       "closed form, is replaced by the lower bound H_B = Σ_k π_k H(q_k) − Σ_k π_k log Σ_j π_j exp(−BD_kj) ≤ H(q) "
       "(Kolchinsky & Tracey 2017), BD_kj = −log ∫ √(q_k q_j) the Bhattacharyya distance, written with the "
       "component family's log-partition as ½ A(λ_k) + ½ A(λ_j) − A((λ_k + λ_j)/2); H_B is exact for identical and "
       "for non-overlapping components.  So 'objective' = E_q[ℓ] − H_B ≥ L(q) and 'entropy' is H_B; {total}every "
       "constant of the loss as written is kept.  Takes what step() takes (oracles and rng are accepted and unused) "
       "and returns {'objective': E_q[ℓ] − H_B, 'expected_loss': E_q[ℓ], 'entropy': H_B} (OBJECTIVE_KEYS; "
       "OBJECTIVE_BOUND says what each is a bound on).")
NOTES: list[Text] = [
    "An upper bound on the objective the BLR minimizes (Eq. 2): E_q[loss] exact, the mixture's entropy replaced",
    "by the pairwise lower bound sum_k pi_k H(q_k) - sum_k pi_k log sum_j pi_j exp(-BD_kj) (OBJECTIVE_BOUND)."]


def mixture_bound_terms(D: Derivation):
    """(E_q[ℓ], H_B(q)) of a mixture of scalar Gaussian components with fixed K, fixed weights and an explicit loss
    the ``exact`` rule takes, in the components' parameters (a fixed component's values in place), or None."""
    r = D.recipe
    fam = r.family
    if not isinstance(fam, MixtureFamily) or fam.axis or D.component_axis is not None or D.oracle_calls:
        return None
    if not any(a.name == "exact" for a in r.approximations) or not isinstance(r.loss, sp.Basic):
        return None
    base = fam.base
    theta = base.theta
    mean, cov = base.gaussian_mean, base.gaussian_cov
    if (not isinstance(mean, sp.Basic) or not isinstance(cov, sp.Basic) or is_mat(theta)
            or any(is_mat(p.symbol) for p in base.params.values())):
        return None
    if r.loss.free_symbols & {p.symbol for p in base.params.values()}:
        return None
    comps = [(c.weight, c.subs) for c in fam.components]
    if any(w is None for w, _ in comps):
        return None
    try:
        E = sp.Add(*[w * base.expect_gaussian(r.loss, mean=mean.xreplace(s), cov=cov.xreplace(s))
                     for w, s in comps])
    except Exception:                   # noqa: BLE001 - no closed Gaussian expectation: no bound
        return None
    lams = [[sp.sympify(e).xreplace(s) for e in base.eta] for _, s in comps]
    A_base = sp.sympify(base.A)

    def A(lam):
        return A_base.xreplace(dict(zip(base.lam, lam)))

    try:
        H_k = base.entropy()
    except Exception:                   # noqa: BLE001 - a component entropy that does not close: no bound
        return None
    if not isinstance(H_k, sp.Basic) or H_k.has(sp.Integral):
        return None
    H = sp.Integer(0)
    for (wk, sk), lk in zip(comps, lams):
        # log Σ_j π_j exp(−BD_kj) as a log-sum-exp (far-apart components: exp(−BD) underflows, −BD does not)
        H += wk * (H_k.xreplace(sk) - logsumexp(*[
            sp.log(wj) + _tidy(A([(a + b) / 2 for a, b in zip(lk, lj)]) - A(lk) / 2 - A(lj) / 2)
            for (wj, _), lj in zip(comps, lams)]))
    if E.has(sp.zoo, sp.nan, sp.Integral) or H.has(sp.zoo, sp.nan):
        return None
    return E, H


def _tidy(e):
    """−BD_kj with its logarithms expanded and the rest over one denominator, factored: for Gaussians
    −s_k s_j (m_k − m_j)²/(4(s_k + s_j)) + ½ log(...), not a difference of large terms that cancel."""
    try:
        e = sp.expand_log(sp.expand(e), force=True)
        rest = sp.Add(*[a for a in sp.Add.make_args(e) if not a.has(sp.log)])
        logs = sp.Add(*[a for a in sp.Add.make_args(e) if a.has(sp.log)])
        return sp.factor(sp.together(rest)) + logs
    except (sp.PolynomialError, TypeError, ValueError):
        return e


def mixture_objective_entry_points(D: Derivation, state: list[Var], hyper: list[HyperVar], data: list[Var],
                                   elementwise: bool, dims: list | None = None) -> EntryPoints | None:
    """The ``objective`` entry point of a mixture candidate's module: the bound E_q[ℓ] − H_B(q) ≥ L(q), or None
    (see :func:`mixture_bound_terms`)."""
    terms = mixture_bound_terms(D)
    if terms is None:
        return None
    total = "summed over the coordinates of the (mean-field) state, each a mixture of its own; " if elementwise else ""
    return objective_entry_points(D, state, hyper, data, elementwise, dims,
                                  bound=(*terms, DOC.replace("{total}", total), NOTES, [("OBJECTIVE_BOUND", BOUND)]))
