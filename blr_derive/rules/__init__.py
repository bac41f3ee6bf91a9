"""The rules of the engine: one module per rule a recipe can name (expectation, step, pass, convention and
mixture rules), the identities grouped by the stage that applies them (``blr``, ``gaussian``, ``mixture``,
``product``, ``federated``), and what they share (``base``: the Rule class, the registry and the derivation
record; ``args``: reading a rule's arguments; ``context``: what a rule sees; ``program``: rewriting the update
program; ``datasum``, ``sampling``: derivations several rules use).

Adding a rule is adding one module here that defines a :class:`~blr_derive.rules.base.Rule` subclass and
registers it: :func:`load_all` imports every module of the package, so the registry knows every rule.
"""
from __future__ import annotations

import importlib
import pkgutil

from blr_derive.rules.base import RULES, Rule, register  # noqa: F401


def load_all() -> dict:
    """Import every rule module (once); returns the registry."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{info.name}")
    return RULES


load_all()
