"""The numpy target's printer: the shared array printer (:mod:`blr_derive.codegen.arrays.printer`) with its numpy
and scipy names as they are, and the sources of the helpers a module defines when its code calls them."""
from __future__ import annotations

from blr_derive.codegen.arrays.printer import HELPERS, ArrayPrinter

__all__ = ["HELPERS", "BLRNumPyPrinter"]


class BLRNumPyPrinter(ArrayPrinter):
    """numpy and scipy expressions of the update IR (vectors as 1-D arrays, solves as Cholesky solves)."""
