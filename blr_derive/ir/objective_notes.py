"""Why a generated module has no ``objective`` (issue 42), where the reason is the candidate's structure, stated in
the module's docstring so that a user who looks for the objective finds why it is not there (docs/targets.md).

These structures have no generated L(q) = E_q[ℓ] − H(q) (Eq. 2):

* a **mixture** candidate q = Σ_k π_k q_k (Sec. 3.2, Eq. 27): H(q) = −E_q[log Σ_k π_k q_k] has no closed form (the
  logarithm of a sum), so L(q) is no expression of the state; its bound (E_q[ℓ] minus a lower bound on H,
  blr_derive/ir/mixture_objective.py) is generated for scalar Gaussian components with K fixed and an explicit
  loss, not yet for components along a run-time axis, full covariances or a loss read through oracles.  Where the
  update reads the loss at randomly masked points (``dropout_masks``, App. G, Eq. 84), its E_q[ℓ] is not one point's
  value either;
* a family whose statistics are indexed by an axis of **run-time length** (``components: K`` next to a family
  with an ``axis`` section): its entropy and E_q[ℓ] couple the axis's coordinates through sums over it, which the
  objective's entry point does not write yet (the unrolled recipe, K fixed, has its objective);
* a **product** candidate (factorized recipe, Sec. 5.3) that neither rule em_bound (point global blocks, the
  exact local E-step) nor rule mean_field_bound (global blocks only, each exact in a family or a point, the whole
  data set) gives a bound: local blocks next to global distributions, a component axis or a minibatch (a step
  then sees B of the N rows only; the local blocks q(z_n) of the other rows are not in its state).  The others
  have ``objective`` = −bound (blr_derive/ir/product.py);
* a loss that reads **q's own parameters** (a prior or a predictive at the state the step starts from): E_q[ℓ] − H(q)
  of a loss that moves with q is no objective of q;
* a loss a rule changed in a way the **loss model does not follow** (``LossModel.unfollow``: the rule says how,
  e.g. a gradient at an adversarial point, a correction at a stored anchor, a prior in rotated coordinates);
* a family whose **entropy** the engine does not derive in its state (e.g. a state of Kronecker factors);
* oracles read at **several points** without samples of q: no one point for the delta method;
* otherwise, a structure the objective's entry point does not cover (stated as such).

The optimizer targets add their own reason where the array targets have the objective and theirs does not
(:func:`target_note`).  Nothing here names an algorithm: the reasons follow from the family, the rules applied
and the blocks."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.types import Text
from blr_derive.families.mixture import MixtureFamily

AXIS = ("the family's statistics are indexed by an axis whose length is known at run time only (components: K, "
        "blr_derive/candidates/sized_axis.py), and the terms of L(q) = E_q[ℓ] − H(q) (Eq. 2) couple the "
        "coordinates of that axis through sums over it (e.g. a Dirichlet's log B(α) = Σ_k log Γ(α_k) − "
        "log Γ(Σ_k α_k)), which the "
        "objective's entry point does not write yet; the same recipe with K fixed (one state variable per "
        "coordinate, e.g. dirichlet_categorical_unrolled) has its objective")
MIXTURE = ("the candidate is a mixture q = Σ_k π_k q_k (Khan & Rue 2023, Sec. 3.2, Eq. 27), whose entropy "
           "H(q) = −E_q[log Σ_k π_k q_k] has no closed form (the logarithm of a sum), so the BLR's objective "
           "L(q) = E_q[ℓ] − H(q) (Eq. 2) is no expression of the state; its bound E_q[ℓ] − H_B(q) (H_B a pairwise "
           "lower bound on H(q), blr_derive/ir/mixture_objective.py) is generated for scalar Gaussian components, "
           "K fixed and an explicit loss with exact expectations, not yet for components along a run-time axis, "
           "full-covariance components or a loss read through oracles")
MASKS = ("; moreover the update reads the loss at randomly masked points (dropout_masks, App. G, Eq. 84), not at "
         "one point of q, so the delta method gives no E_q[ℓ] either")
PRODUCT = ("the candidate is a product (mean-field) of blocks, some of them distributions (Sec. 5.3), and its "
           "mean-field bound L(q) = Σ_f E_q[ℓ_f] − Σ_b H(q_b) (Eq. 2 over the product: every factor's expectation "
           "under all blocks, minus the blocks' entropies) is not generated for this structure yet (rule em_bound "
           "gives it for point global blocks with the exact local E-step, rule mean_field_bound for global blocks "
           "only, each exact in a family or a point, over the whole data set)")
MINIBATCH = ("; moreover a step sees a minibatch of B of the N rows, and the local blocks q(z_n) of the other "
             "rows, which the bound needs, are not in the state")


OWN_PARAMETERS = ("the loss reads q's own parameters ({names}: e.g. a prior or a predictive at the state the step "
                  "starts from), so the loss moves with q and E_q[ℓ] − H(q) (Eq. 2) of it is no objective of q: the "
                  "step with ρ = 1 fits q to a target that is itself a function of the state it starts from "
                  "(the objective of one step is that of a loss with those parameters frozen as data)")
UNFOLLOWED = ("the BLR's objective L(q) = E_q[ℓ] − H(q) (Eq. 2) needs the loss ℓ of Eq. 1 the steps minimize, and "
              "{why}")
NO_ENTROPY = ("the candidate family '{family}' has no entropy H(q) derived in the state it keeps ({state}; App. B "
              "gives H(q) = A(λ) − ⟨λ, μ⟩ − E_q[log h] for a family written in λ), so L(q) = E_q[ℓ] − H(q) (Eq. 2) "
              "is no expression of the state")
SEVERAL_POINTS = ("the update reads the loss through oracles at several points ({points}) and samples nothing, so "
                  "there is no one point at which the delta method gives E_q[ℓ] (Sec. 4.2) of L(q) = E_q[ℓ] − "
                  "H(q) (Eq. 2)")
UNCOVERED = ("E_q[ℓ] of L(q) = E_q[ℓ] − H(q) (Eq. 2) is neither closed by the derivation (the exact rule, written in "
             "the state) nor one of the estimates the objective's entry point writes (Monte Carlo at samples of q, "
             "the quadrature rule's nodes, the delta method at one point), for this combination of family and rules")


def update_note(D) -> Text | None:
    """The reason a module has no objective (called where the derivation gives none): a mixture candidate, a sized
    family over a run-time axis, a loss that reads q's parameters or that a rule changed unfollowed, a family
    without an entropy in its state, oracles at several points, or a structure not covered."""
    r = D.recipe
    fam = r.family
    if getattr(D, "federated", None) is not None:
        return None                     # federated recipes report global_objective (ir/federated.py)
    if isinstance(fam, MixtureFamily):
        masked = any(a.name == "dropout_masks" for a in r.approximations)
        return MIXTURE + (MASKS if masked else "") + "."
    if D.component_axis is not None:
        return AXIS + "."
    own = sorted(str(s) for s in r.own_parameters())
    if own:
        return OWN_PARAMETERS.format(names=", ".join(own)) + "."
    lm = getattr(D, "loss_model", None)
    if lm is not None and not lm.followed:
        return UNFOLLOWED.format(why=lm.why or "a rule changed it in a way the loss model does not record") + "."
    if not _entropy_closes(fam):
        return NO_ENTROPY.format(family=fam.name, state=", ".join(fam.params)) + "."
    points = list(dict.fromkeys(str(c.argument) for c in D.oracle_calls))
    if D.sampling is None and len(points) > 1:
        return SEVERAL_POINTS.format(points=", ".join(points)) + "."
    return UNCOVERED + "."


def _entropy_closes(fam) -> bool:
    """Whether the family's entropy is a closed expression of its state (App. B)."""
    entropy = getattr(fam, "entropy", None)
    if entropy is None:
        return False
    try:
        H = entropy()
    except Exception:                   # noqa: BLE001 - a family whose entropy does not close
        return False
    return isinstance(H, sp.Basic) and not H.has(sp.Integral, sp.zoo, sp.nan)


def product_note(D, has_bound: bool) -> Text | None:
    """The reason a factorized recipe's module has no objective, or None where it has one (the EM bound)."""
    if has_bound:
        return None
    minibatch = D.recipe.plate is not None and D.recipe.plate.get("minibatch") is not None
    return PRODUCT + (MINIBATCH if minibatch else "") + "."
