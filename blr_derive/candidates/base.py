"""The candidate protocol: one structure of q over which the BLR (Eq. 6) is derived.

A candidate structure is one module of ``blr_derive/candidates`` that registers a :class:`Candidate`:

* :meth:`Candidate.claims` — whether a recipe mapping declares this structure (a ``blocks`` section, a
  ``family: {mixture: ...}``; the single family is the fallback);
* :meth:`Candidate.parse` — read the recipe (the spec layer does the reading; the candidate supplies the
  family loader);
* :meth:`Candidate.owns` / :meth:`Candidate.derive` — derive the update of a parsed recipe, applying the rules
  the recipe names at their stages (``blr_derive/rules``).

The driver (``blr_derive/derive``) and the recipe loader pick the candidate from the registry; nothing tests a
structure's name elsewhere.
"""
from __future__ import annotations

from blr_derive.core.errors import SpecError
from blr_derive.core.yamlio import where
from blr_derive.rules.base import PROGRAM_KINDS, RULES


class Candidate:
    name: str = ""
    noun: str = ""              # "a mixture": what a recipe's candidate is, in messages
    declared_as: str = ""       # how a recipe declares this structure, in messages
    priority: int = 0           # the order in which structures claim a recipe (the fallback last)

    def claims(self, spec) -> bool:
        raise NotImplementedError

    def parse(self, spec, file, base_dir):
        raise NotImplementedError

    def owns(self, recipe) -> bool:
        raise NotImplementedError

    def derive(self, recipe):
        raise NotImplementedError


CANDIDATES: dict[str, Candidate] = {}


def register(c: Candidate) -> Candidate:
    if c.name in CANDIDATES:
        raise ValueError(f"candidate '{c.name}' registered twice")
    CANDIDATES[c.name] = c
    return c


def ordered() -> list:
    return sorted(CANDIDATES.values(), key=lambda c: (c.priority, c.name))


def for_spec(spec) -> Candidate:
    return next(c for c in ordered() if c.claims(spec))


def for_recipe(recipe) -> Candidate:
    return next(c for c in ordered() if c.owns(recipe))


def check_structure(ctx, fallback: str = "single"):
    """Every named rule must apply to the candidate structure being derived (``Rule.structures``)."""
    here = ctx.candidate
    for a in ctx.recipe.approximations:
        rule = RULES[a.name]
        if rule.applies_to(here):
            continue
        if here == fallback and rule.structures:
            home = CANDIDATES[rule.structures[0]]
            raise ctx.fail(f"approximation '{a.name}' applies to {' and '.join(rule.structures)} candidates "
                           f"({home.declared_as}); '{ctx.family.name}' is not {home.noun}", a)
        supported = sorted(n for n, r in RULES.items() if r.named_by_recipes and r.kind not in PROGRAM_KINDS
                           and r.applies_to(here))
        raise ctx.fail(f"approximation '{a.name}' does not apply to {CANDIDATES[here].noun} candidate (supported: "
                       f"{', '.join(supported)} and the update passes)", a)


def located_family(load, spec, key="family"):
    """Load a recipe's family, locating its errors at the recipe's ``family`` key."""
    try:
        return load()
    except SpecError as exc:
        raise exc.located(*where(spec, key)) from None
