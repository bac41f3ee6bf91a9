"""The per-row program of a plate evaluated on all rows at once (factorized recipes, blr_derive/ir/product.py).

Rows are the leading axis: a per-row scalar is an (N,) array and a per-row vector an (N, P) array.  Scalar
arithmetic and elementwise functions broadcast as they are; a 1×1 product such as ``tr(m₁ᵀ L₁ y)`` and a
plate sum such as ``Σ_n z_n y_n y_nᵀ`` become one ``numpy.einsum`` whose subscripts follow the matrix
chain (the row axis ``n`` kept for a per-row value, summed for a plate statistic).  Anything else raises
:class:`~blr_derive.core.errors.CodegenError`, and the template falls back to a loop over the rows.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import CodegenError
from blr_derive.codegen.inert import identifier
from blr_derive.core.matexpr import is_mat

from blr_derive.codegen.arrays.printer import ArrayPrinter

_LETTERS = "abcdefghijklm"


def _factors(e):
    """(scalar coefficient, [matrix factors]) of a product, nested products flattened."""
    if not isinstance(e, sp.MatMul):
        return sp.Integer(1), [e]
    coeff = sp.Integer(1)
    mats: list[sp.Basic] = []
    for a in e.args:
        if is_mat(a):
            c, m = _factors(a)
            coeff, mats = coeff * c, mats + m
        else:
            coeff = coeff * a
    return coeff, mats


class RowBatchPrinter(ArrayPrinter):
    def __init__(self, row_vectors, row_scalars, settings=None, optimize=False):
        super().__init__(settings)
        self.row_vectors = set(row_vectors)
        self.row_scalars = set(row_scalars)
        self.optimize = optimize          # einsum contracts in the best order (BLAS products for long chains)

    def _row_dependent(self, e):
        return bool(e.free_symbols & (self.row_vectors | self.row_scalars))

    def _print_MatrixSymbol(self, expr):
        if expr in self.row_vectors:
            raise CodegenError(f"a per-row vector outside a 1×1 product or a plate sum: {expr}")
        return identifier(expr.name)

    def _chain(self, mats):
        """einsum operands and subscripts of the product of ``mats`` (each a matrix symbol or its transpose),
        and the letters of its outer row and column index."""
        idx = list(_LETTERS[:len(mats) + 1])
        if len(idx) <= len(mats):
            raise CodegenError("matrix chain too long for the row-batched printer")
        ops, subs = [], []
        for j, f in enumerate(mats):
            base, transposed = (f.arg, True) if isinstance(f, sp.Transpose) else (f, False)
            if not isinstance(base, sp.MatrixSymbol):
                raise CodegenError(f"the row-batched printer takes products of matrix symbols, got {f}")
            r, c = f.shape
            sub = (idx[j] if r != 1 else "") + (idx[j + 1] if c != 1 else "")
            if transposed and r != 1 and c != 1:
                sub = sub[::-1]                       # the array is the base matrix: its own index order
            if base in self.row_vectors:
                sub = "n" + sub
            ops.append(identifier(base.name))
            subs.append(sub)
        return ops, subs, idx[0], idx[-1]

    def _einsum(self, coeff, mats, out):
        ops, subs, first, last = self._chain(mats)
        rows = any("n" in s for s in subs) or self._row_dependent(coeff)
        prefix = ""
        if self._row_dependent(coeff):
            ops.insert(0, f"numpy.broadcast_to({self._print(coeff)}, (n_rows,))")
            subs.insert(0, "n")
        elif coeff != 1:
            prefix = f"{self.parenthesize(coeff, 50)}*"
        opt = ", optimize=True" if self.optimize else ""
        return rows, prefix + f"numpy.einsum('{','.join(subs)}->{out}', {', '.join(ops)}{opt})", first, last

    def _print_Trace(self, expr):
        arg = expr.arg
        if arg.shape != (1, 1):
            raise CodegenError(f"the row-batched printer takes 1×1 traces, got {expr}")
        if isinstance(arg, sp.MatAdd):
            return "(" + " + ".join(self._print(sp.Trace(a)) for a in arg.args) + ")"
        c, mats = _factors(arg)
        ops, subs, _, _ = self._chain(mats)
        rows = any("n" in s for s in subs)
        text = self._einsum(c, mats, "n" if rows or self._row_dependent(c) else "")[1]
        return text

    def plate_sum(self, e):
        """Σ_n e(row n) as numpy code (n summed out of one einsum for matrix-valued statistics)."""
        if not is_mat(e):
            return f"numpy.sum(numpy.broadcast_to({self._print(e)}, (n_rows,)))"
        c, mats = _factors(e)
        out = ""
        _, _, first, last = self._chain(mats)
        if e.shape[0] != 1:
            out += first
        if e.shape[1] != 1:
            out += last
        rows, text, _, _ = self._einsum(c, mats, out)
        if not rows:
            raise CodegenError(f"a plate statistic without per-row factors: {e}")
        return text
