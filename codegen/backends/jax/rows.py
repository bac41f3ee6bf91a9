"""The per-row program of a plate on all rows at once, in ``jax.numpy`` (factorized recipes of the jax target).

The shared :class:`~blr_derive.codegen.arrays.rows.RowBatchPrinter` (rows as the leading axis,
1×1 products and plate sums as one einsum) with the names of
:class:`~blr_derive.codegen.backends.jax.functions.JnpPrinter`: every ``numpy.f`` it prints is ``jnp.f`` and every
``scipy.special.f`` is ``jax.scipy.special.f``.  A plate sum
is printed through ``doprint`` (as a :class:`PlateSum` node), so it takes the same renaming.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.codegen.backends.jax.functions import JnpPrinter
from blr_derive.codegen.arrays.rows import RowBatchPrinter


class PlateSum(sp.Basic):
    """Σ_n e(row n): a node that only :class:`JnpRowBatchPrinter` prints (its ``plate_sum``)."""


class JnpRowBatchPrinter(RowBatchPrinter, JnpPrinter):
    """RowBatchPrinter with jax.numpy names (``Piecewise`` as ``jnp.where``, as JnpPrinter prints it)."""

    def plate_sum(self, e):
        return self.doprint(PlateSum(e))

    def _print_PlateSum(self, expr):
        return RowBatchPrinter.plate_sum(self, expr.args[0])
