"""``blr-derive check``: numeric verification of a family declaration.

Everything the engine derives (or takes as declared) for a family is compared, at a few
random valid parameter points (seeded), with an independent numerical computation:

====================================  =====================================================
check                                 compared with
====================================  =====================================================
``normalization``                     ∫ h exp(<λ,T> - A) = 1 (quadrature / summation)
``mu_vs_quadrature``                  μ = ∇A(λ) against E_q[T] by quadrature / summation
``mu_vs_monte_carlo``                 μ against the mean of T over exact samples of q
                                      (rejection sampling; value: the largest z-score)
``mu_vs_finite_differences``          μ against central differences of A(λ)
``mu_ordinary``                       μ(ordinary) (declared or derived) against ∇A(λ(ordinary))
``fisher_positive_definite``          F = ∇²A(λ): smallest / largest eigenvalue
``fisher_vs_covariance``              F against Cov_q[T] by quadrature / summation
``entropy_vs_quadrature``             H(q) = A - <λ,μ> - E[log h] against -∫ q log q
``round_trip_natural``                ordinary → λ → ordinary
``round_trip_expectation``            ordinary → μ → ordinary (closed form, or Newton's
                                      method when the inverse is numeric)
``hard_log_partition``, ``hard_mu``,  A, μ, F and the entropy at the family's *hard points*
``hard_fisher``, ``hard_entropy``     (blr_derive/verify/hunt.py: integer and half-integer
                                      parameters, boundaries, scales, the poles and zeros
                                      of the special functions in A, μ, F) against
                                      quadrature / summation (30 digits where double
                                      precision is not enough); not finite always fails
``hard_maps``                         λ(ordinary), ordinary(λ), μ(ordinary) there
``generated_numpy``, ``generated_jax``  the family's generated module in each target
                                      (natural_parameters, log_partition,
                                      expectation_parameters, fisher_information,
                                      ordinary_from_natural / _expectation, init, step) at
                                      the same points
====================================  =====================================================

Errors are ``|got - want| / max(1, |want|)`` (absolute below 1, relative above), the maximum
over the parameter points and the components; a Fisher information at the hard points also over
``sqrt(F_ii F_jj)`` of the reference (``hunt.fisher_rel``).  Matrix families are checked at ``dim`` = 2.

Quadrature works in unconstrained coordinates u: θ = u on the real line, θ = e^u on the
positive half-line, θ = σ(u) (with 1 - θ = σ(-u) computed separately) on the unit interval,
stick-breaking on the simplex and Cholesky factors with log-diagonals for positive-definite
matrices.  It is centred at the mode of the density in u and scaled by the density's own
spread (a coarse search of where its mass lies, then the covariance of u from two coarse
passes: not the curvature at the mode, which is zero for exp(−cθ⁴)), and uses the
double-exponential trapezoidal rule in every coordinate (one coordinate: an exp-sinh rule on
each side of the mode, so that a kink there is an endpoint), which also handles the
integrable endpoint singularities of, e.g., Gamma and Beta densities.
Discrete supports are summed exactly (the Poisson-like sums until the terms are negligible).
Monte Carlo samples are exact for discrete supports (drawn from the enumerated
probabilities); for continuous ones they are drawn from the density tabulated on the
quadrature grid (a cell by inverse CDF, then uniformly within the cell), so that
funnel-shaped densities such as the normal-gamma need no envelope.
"""
from __future__ import annotations

from blr_derive.candidates.load import load_recipe
from blr_derive.core.sizes import instantiate_recipe
from blr_derive.core.yamlio import load_yaml_file
from blr_derive.families.axis import AxisFamily
from blr_derive.families.library import load_family
from blr_derive.families.mixture import MixtureFamily
from blr_derive.spec.product import is_product_spec
from blr_derive.verify.family import check_family, describe
from blr_derive.verify.quadrature_rule import gauss_hermite_notes
from blr_derive.verify.recipe import check_recipe_updates
from blr_derive.verify.results import Report


# --------------------------------------------------------------------------- model


# --------------------------------------------------------------------------- checks


# --------------------------------------------------------------------------- files


def check_file(path, *, points: int = 3, seed: int = 0, dim: int = 2, sizes: dict | None = None,
               hunt: bool = True) -> Report:
    """Check a family file, or the family of a recipe file (plus ``check_recipe_updates``), at random points and
    (``hunt``) at its hard points; ``sizes`` instantiates a sized family or recipe (blr_derive/core/sizes.py) at those
    sizes."""
    spec = load_yaml_file(path)
    recipe = None
    if is_product_spec(spec):                     # one family per block: the step and the objective are checked
        return _check_product(path, spec, points, sizes)
    if isinstance(spec, dict) and "family" in spec and "sufficient_statistics" not in spec:
        recipe = load_recipe(path, sizes)
        fam = recipe.family
        if isinstance(fam, MixtureFamily):           # a mixture candidate: check its component family
            fam = fam.base
        if isinstance(fam, AxisFamily):              # a sized family over a run-time axis: its file at a size
            fam = load_family({"name": fam.file, **sizes} if sizes else fam.file)
            rep = Report(f"recipe '{recipe.name}' ({path}), family '{fam.name}' at {fam.sizes} (the axis declaration "
                         "is checked against it by tests/unit/candidates/test_sized_axis.py)", fam)
            checks = check_family(fam, points=points, seed=seed, dim=dim, hunt=hunt)
            rep.checks = list(checks)
            rep.notes = describe(fam) + [f"{points} random parameter points (seed {seed})"] + checks.notes
            return rep
        rep = Report(f"recipe '{recipe.name}' ({path}), family '{recipe.family.name}'", fam)
        checks = check_family(fam, points=points, seed=seed, dim=dim, hunt=hunt)
        rep.checks = list(checks) + list(check_recipe_updates(recipe))
    else:
        fam = load_family({"name": str(path), **sizes} if sizes else str(path))
        rep = Report(f"family '{fam.name}' ({path}" + "".join(f", {k} = {v}" for k, v in fam.sizes if sizes) + ")",
                     fam)
        checks = check_family(fam, points=points, seed=seed, dim=dim, hunt=hunt)
        rep.checks = list(checks)
    rep.notes = describe(fam) + [f"{points} random parameter points (seed {seed})"
                                  + (f", dimension {dim}" if fam.dim is not None else "")] + checks.notes
    if recipe is not None:               # the Gauss-Hermite rule's own error, which the checks share with the update
        rep.notes += gauss_hermite_notes(recipe)
    return rep


def _check_product(path, spec, points, sizes) -> Report:
    """A factorized recipe: its generated step against the derivation's program (blr_derive/verify/product.py) and
    its objective, where the module has one, against a reference computed from the blocks and factors
    (blr_derive/verify/product_objective.py); the blocks' families are named, to be checked one by one."""
    inst = instantiate_recipe(spec, str(path), sizes)
    blocks = [b for b in inst["blocks"].values() if isinstance(b, dict) and "family" in b]
    # the categorical and the Dirichlet over a recipe's components are built into the engine (rules
    # component_softmax and component_dirichlet), not family files
    over = sorted({f"the {b['family']} over the components" for b in blocks if b.get("components") is True
                   and b["family"] in ("categorical", "dirichlet")})
    fams = sorted({str(b["family"]["name"] if isinstance(b["family"], dict) and "name" in b["family"]
                       and "variable" not in b["family"] else b["family"])
                   for b in blocks if not (b.get("components") is True
                                           and b["family"] in ("categorical", "dirichlet"))})
    recipe = load_recipe(path, sizes)
    rep = Report(f"recipe '{recipe.name}' ({path}), a factorized recipe", None)
    rep.checks = list(check_recipe_updates(recipe, points))
    rep.notes = ["the blocks' families are checked one by one (blr-derive check FAMILY): "
                 + (", ".join(fams) or "none (no family file)")
                 + (f" ({' and '.join(over)}: built in, no family file)" if over else ""),
                 f"{points} random states, data and hyperparameters"]
    return rep
