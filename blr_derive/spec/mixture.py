"""The mixture form of a recipe's ``family`` (Sec. 3.2): ``{mixture: F, components: K, weights, fixed}``.

.. code-block:: yaml

    family: {mixture: gaussian_full, components: 3}                  # equal weights 1/K
    family: {mixture: gaussian_diag, components: 2, weights: [pi1],  # pi_K = 1 - the others
             fixed: {2: {m: 0, s: s0}}}                              # a component with known parameters
    family: {mixture: gaussian_full, components: K}                  # K a size name: the components are an
                                                                     # array axis, K known at run time only

Read here into a :class:`MixtureDecl`; the component family is loaded and the mixture built in
``blr_derive/families/mixture.py`` (weights and fixed values are expressions of the recipe's hyperparameters,
bound once those are read)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from blr_derive.core.errors import SpecError
from blr_derive.core.yamlio import LDict, check_keys, where

MIXTURE_KEYS = {"mixture", "components", "weights", "fixed", "description"}
MAX_COMPONENTS = 9
#: ``components: K``: a size name, the number of components at run time (the components as an array axis)
SIZE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


@dataclass(frozen=True)
class MixtureDecl:
    family: object            # the component family: a built-in name, a file or an inline mapping
    K: int
    weights: object           # the YAML list of K - 1 weights, or None (equal weights)
    fixed: dict               # component number (1-based) -> the mapping of its parameter values
    spec: object              # the section (for locating errors)
    axis: bool = False        # ``components: K`` with K a size name: K is the length of the state arrays at run
                              # time (then K is that name, the weights are equal and no component is fixed)


def is_mixture_ref(ref) -> bool:
    return isinstance(ref, dict) and "mixture" in ref


def parse_mixture(spec) -> MixtureDecl:
    check_keys(spec, MIXTURE_KEYS, ("mixture", "components"), "mixture family")
    if is_mixture_ref(spec["mixture"]):
        raise SpecError("a mixture's components cannot be mixtures", *where(spec, "mixture"))
    K = spec["components"]
    if isinstance(K, str) and SIZE_NAME.match(K):
        for key in ("weights", "fixed"):
            if key in spec:
                raise SpecError(f"a mixture with the components as an array axis (components: {K}) has equal "
                                f"weights 1/{K} and no fixed component: remove '{key}' or give an integer number "
                                "of components", *where(spec, key))
        return MixtureDecl(spec["mixture"], K, None, {}, spec, axis=True)
    if isinstance(K, bool) or not isinstance(K, int) or not 2 <= K <= MAX_COMPONENTS:
        raise SpecError(f"components must be an integer from 2 to {MAX_COMPONENTS}, or a size name (K: the number "
                        "of components at run time)", *where(spec, "components"))
    fixed = spec.get("fixed") or LDict()
    if not isinstance(fixed, dict):
        raise SpecError("fixed must map component numbers to parameter values", *where(spec, "fixed"))
    fixed_idx = {}
    for key, decl in fixed.items():
        k = int(key) if isinstance(key, str) and key.isdigit() else key
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= K:
            raise SpecError(f"fixed: '{key}' is not a component number 1..{K}", *where(fixed, key))
        if not isinstance(decl, dict):
            raise SpecError(f"fixed component {k}: give a mapping parameter -> value", *where(fixed, key))
        fixed_idx[k] = (decl, key)
    if len(fixed_idx) == K:
        raise SpecError("every component is fixed: nothing to learn", *where(spec, "fixed"))
    return MixtureDecl(spec["mixture"], K, spec.get("weights"), fixed_idx, spec)
