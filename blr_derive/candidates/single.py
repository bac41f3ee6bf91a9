"""The single-family candidate: the BLR step (Eq. 6) over one exponential family, producing a
:class:`~blr_derive.rules.base.Derivation`.

Stages, each applied by the rules the recipe names (``blr_derive/rules``), in this order::

    check              every named rule's applicability (Rule.check), at most one expectation rule
    λ_{t+1} = (1-ρ) λ_t - ρ ∇_μ E_q[ℓ + log h]            (blr, Eq. 6; step rules: on_blr)
    ∇_μ E_q[log h]     from the family                       (base_measure, App. B)
    ∇_μ E_q[ℓ]         the expectation rule: exact (Eq. 14), the delta method (App. C) after Bonnet/Price
                       (Eqs. 10-11), Monte Carlo, quadrature, samplers and relaxations
    adjust             step rules on the natural gradient and on λ_{t+1} (priors, corrections, momentum, ρ = 1)
    ordinary params    solved block by block from λ_{t+1} (Eq. 9), the increment form where shorter (Eq. 12)
    rewrite            pass and convention rules on the update program, in recipe order
    finish             steps after the update (the server step of federated ADMM)
"""
from __future__ import annotations

import dataclasses

from blr_derive.candidates.base import Candidate, check_structure, located_family, register
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.sizes import instantiate_recipe
from blr_derive.core.yamlio import check_keys
from blr_derive.families.library import load_family
from blr_derive.families.loss_domain import loss_off_support
from blr_derive.rules.base import RULES, Derivation, recipe_rule_kinds, refuse_arguments
from blr_derive.rules.blr import assemble, base_measure, introduce, solve_ordinary
from blr_derive.rules.context import BLRContext
from blr_derive.rules.delta import needs_gaussian_moments
from blr_derive.rules.federated import IMPLIED
from blr_derive.rules.program import apply_program_rules
from blr_derive.spec.hyper import Approx
from blr_derive.spec.recipe import RECIPE_KEYS, check_recipe_keys, parse_recipe


def parse_single(spec, file, base_dir, load):
    """Read a recipe whose family ``load(spec['family'])`` returns (a family or a mixture of one)."""
    check_keys(spec, RECIPE_KEYS, ("name", "family", "loss"), "recipe")
    spec = instantiate_recipe(spec, file)      # a sized recipe at its default sizes
    check_recipe_keys(spec, file)
    fam = located_family(lambda: load(spec["family"]), spec)
    recipe = parse_recipe(spec, fam, recipe_rule_kinds(), file)
    refuse_arguments(recipe)
    return recipe


def expectation_rules(ctx):
    return ctx.rules("expectation")


def check(ctx):
    """The named rules apply to this recipe; an explicit loss needs an expectation rule that handles it and an
    abstract loss one for E_q[∇ℓ], E_q[∇²ℓ]."""
    recipe = ctx.recipe
    check_structure(ctx)
    check_loss_on_support(recipe)
    expectation = expectation_rules(ctx)
    if len(expectation) > 1:
        raise ctx.fail("at most one expectation rule may be named (got "
                       + ", ".join(a.name for _, a in expectation) + ")", expectation[1][1])
    named = [r for r, _ in expectation if recipe.loss_kind in r.losses]
    if named or not expectation:
        for a in recipe.approximations:
            try:
                RULES[a.name].check(ctx)
            except DerivationError as exc:      # the loss is beyond the expectation rule, known before deriving
                if RULES[a.name].kind != "expectation":
                    raise
                raise beyond_rule(ctx, a, exc) from None
    if named:
        return
    if expectation:
        # the rule named takes the other kind of loss: say which, and which rules take this one over this family
        # (from the registry, each rule's own applicability check)
        rule, where_ = expectation[0]
        takes = taking(recipe.loss_kind)
        other = ("an abstract loss (`loss: abstract`: the step receives ℓ or its derivatives at the points it "
                 "names, from your code)" if "abstract" in rule.losses else "an explicit loss")
        fits = applicable(recipe, takes, recipe.loss_kind, where_.line)
        if fits:
            raise ctx.fail(f"approximation '{rule.name}' takes {other}, not an {recipe.loss_kind} loss; for this "
                           f"loss over family '{recipe.family.name}' name one of: {', '.join(fits)}", where_)
        kind = other_kind(recipe.loss_kind)
        others = taking(kind)
        why: list = []
        there = applicable(recipe, others, kind, where_.line, why if rule.name in others else None, rule.name)
        if there:
            tail = f"; with an {kind} loss these apply: {', '.join(there)}"
        else:
            tail = f"; nor does '{rule.name}' with an {kind} loss" + (f" ({why[0]})" if why else "")
        raise ctx.fail(f"approximation '{rule.name}' takes {other}, not an {recipe.loss_kind} loss, and none of the "
                       f"rules for an {recipe.loss_kind} loss ({', '.join(takes)}) applies to family "
                       f"'{recipe.family.name}'" + tail, where_)
    if recipe.loss_kind == "explicit":
        raise ctx.fail("an explicit loss needs an expectation rule: add 'exact' (or 'delta', "
                       "'gauss_hermite' for sums over data)")
    needs_gaussian_moments(ctx, None)
    raise ctx.fail("an abstract loss needs an expectation approximation for E_q[∇ℓ], E_q[∇²ℓ]: "
                   "add 'delta' or 'monte_carlo'")


def check_loss_on_support(recipe):
    """An explicit loss must be a finite real number on the family's support (E_q[ℓ] of Eq. 2 is over all of it):
    `log(-theta)` under the gamma or `log(theta)` under the Bernoulli on {-1, +1} is refused at the loss's line
    (blr_derive/families/loss_domain.py), instead of deriving an update of log θ + iπ."""
    if recipe.loss_kind != "explicit" or recipe.loss is None:
        return
    defaults = {h.symbol: h.default for h in recipe.hyper
                if h.symbol is not None and isinstance(h.default, (int, float)) and not isinstance(h.default, bool)}
    problem = loss_off_support(recipe.family, recipe.loss, defaults)
    if problem is None:
        return
    spec = recipe.spec
    loss = spec.get("loss") if spec is not None else None
    line = (loss.line_of("expression") if isinstance(loss, dict) and hasattr(loss, "line_of") and "expression" in loss
            else spec.line_of("loss") if spec is not None and "loss" in spec else None)
    raise SpecError(f"the loss is {problem}: E_q[loss] (Eq. 2) is an expectation over all of the support, so the "
                    "loss must be real and finite there (a logarithm of a negative number, a pole at a support "
                    "point); write it for the family's support, or choose a family whose support it is defined on",
                    recipe.file, line)


def taking(loss_kind: str, but: str = "") -> list:
    """The names of the expectation rules that take a loss of ``loss_kind`` (the registry's), except ``but``."""
    return sorted(n for n, r in RULES.items() if r.kind == "expectation" and loss_kind in r.losses and n != but)


def other_kind(loss_kind: str) -> str:
    return "abstract" if loss_kind == "explicit" else "explicit"


def applicable(recipe, names, loss_kind, line, why: list | None = None, named: str = "") -> list:
    """The expectation rules among ``names`` whose applicability check passes for ``recipe`` with a loss of
    ``loss_kind`` in place of its own expectation rule (to name, in a refusal, only rules that would derive);
    ``why`` receives the first line of rule ``named``'s refusal."""
    kept = [a for a in recipe.approximations if RULES[a.name].kind != "expectation"]
    out = []
    for n in names:
        trial = dataclasses.replace(recipe, loss_kind=loss_kind, approximations=[Approx(n, {}, line)] + kept,
                                    loss=recipe.loss if loss_kind == "explicit" else None)
        try:
            RULES[n].check(BLRContext(trial, Derivation(trial), candidate="single"))
        except Exception as exc:        # noqa: BLE001 - any refusal (located or not) means: does not apply here
            if n == named and why is not None:
                why.append(str(getattr(exc, "message", None) or exc).splitlines()[0])
            continue
        out.append(n)
    return out


def beyond_rule(ctx, approx, exc):
    """The located error for a loss beyond the expectation rule ``approx`` names (``exc`` says why), with the rules
    that apply to this loss and family instead, or those that would with the other kind of loss."""
    recipe = ctx.recipe
    fits = applicable(recipe, taking(recipe.loss_kind, approx.name), recipe.loss_kind, approx.line)
    if fits:
        tail = f"; rules that apply to this loss and family: {', '.join(fits)}"
    else:
        kind = other_kind(recipe.loss_kind)
        there = applicable(recipe, taking(kind), kind, approx.line)
        tail = f"; with an {kind} loss these apply to the family: {', '.join(there)}" if there else ""
    return ctx.fail(f"approximation '{approx.name}' cannot derive E_q[loss] over family "
                    f"'{recipe.family.name}': {exc}" + tail, approx)


def step_rules(ctx):
    """The step rules the recipe names, then those its sections imply (federated ADMM), in the order they act."""
    named = [r for r, _ in ctx.rules("step")]
    implied = [RULES[n] for n in IMPLIED] if ctx.recipe.federated is not None else []
    return named + implied


def derive_single(recipe) -> Derivation:
    D = Derivation(recipe)
    ctx = BLRContext(recipe, D, candidate="single")
    check(ctx)
    introduce(ctx)
    steps = step_rules(ctx)
    for r in steps:
        r.on_blr(ctx)
    base_measure(ctx)
    (expectation, approx), = expectation_rules(ctx)
    try:
        grads = expectation.natural_gradient(ctx)
    except DerivationError as exc:      # the loss is beyond the rule: located at the rule the recipe names
        raise beyond_rule(ctx, approx, exc) from None
    for r in steps:
        grads = r.adjust_gradient(ctx, grads)
    lam_new = assemble(ctx, grads)
    for r in steps:
        lam_new = r.adjust_lambda(ctx, lam_new)
    solve_ordinary(recipe, D, lam_new, ctx.sym)
    D.updates.extend(ctx.prev_updates)
    apply_program_rules(recipe, D, ctx.fail)
    for r in steps:
        r.finish(ctx)
    return D


class Single(Candidate):
    name = "single"
    noun = "a single exponential family"
    declared_as = "family: NAME"
    priority = 100              # the fallback: every recipe that no other structure claims

    def claims(self, spec) -> bool:
        return True

    def parse(self, spec, file, base_dir):
        return parse_single(spec, file, base_dir, lambda ref: load_family(ref, base_dir))

    def owns(self, recipe) -> bool:
        return True

    def derive(self, recipe):
        return derive_single(recipe)


register(Single())
