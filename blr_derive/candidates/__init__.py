"""Candidate structures: one module per structure of q over which the BLR is derived (``single`` families,
``mixture`` candidates, mean-field ``product`` candidates), each registering a
:class:`~blr_derive.candidates.base.Candidate`; ``load`` reads a recipe into the structure that claims it.

Adding a structure is adding one module here: :func:`load_all` imports every module of the package.
"""
from __future__ import annotations

import importlib
import pkgutil

from blr_derive.candidates.base import CANDIDATES


def load_all() -> dict:
    """Import every candidate module (once); returns the registry."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{info.name}")
    return CANDIDATES


load_all()
