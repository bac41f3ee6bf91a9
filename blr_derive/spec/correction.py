"""What a recipe with ``posterior_correction`` receives as data (derived in
``blr_derive/rules/posterior_correction.py``): the snapshot's parameters ``<p>_old`` and the full-data gradient
(and Hessian) at the snapshot's mean."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.matexpr import is_mat
from blr_derive.spec.hyper import DataVar


def uses_hessian(fam):
    """Whether the family's natural gradient needs E_q[∇²ℓ] (its covariance depends on its parameters)."""
    return fam.is_gaussian and bool(sp.sympify(fam.gaussian_cov).free_symbols
                                    & {p.symbol for p in fam.params.values() if not p.fixed})


def correction_data(fam, data, taken):
    """The data a corrected step needs: the snapshot's parameters (<p>_old) and the full-data gradient
    (and Hessian) at the snapshot's mean."""
    names = {d.name for d in data} | set(taken)

    def add(name, like, what, symmetric=False):
        if name in names:
            raise SpecError(f"posterior_correction: the name '{name}' is taken", None, None)
        names.add(name)
        if is_mat(like):
            shape = tuple(like.shape) if like.shape[1] != 1 else (like.shape[0],)
            data.append(DataVar(name, sp.MatrixSymbol(name, *like.shape), shape, what, symmetric))
        else:
            data.append(DataVar(name, sp.Symbol(name, real=True), (), what))
    for p in fam.params.values():
        if not p.fixed:
            add(f"{p.name}_old", p.symbol, f"{p.name} of the snapshot q_old",
                is_mat(p.symbol) and p.symbol in fam.symmetric)
    mean = fam.gaussian_mean
    add("grad_full", mean, "full-data gradient at the snapshot's mean")
    if uses_hessian(fam):
        cov = fam.gaussian_cov
        add("hess_full", cov, "full-data Hessian at the snapshot's mean", is_mat(cov))
