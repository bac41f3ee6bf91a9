"""A product recipe's component axis (``components: {index: k, size: K}``) and its per-component blocks
(``components: true``): the factors name the copy of one generic component k and are summed over the components;
the engine derives once for that component and the generated code holds the K copies as arrays (see
``blr_derive/rules/components.py``)."""
from __future__ import annotations

from typing import TypedDict

import sympy as sp

from blr_derive.core.names import check_name_at
from blr_derive.core.yamlio import LDict, check_keys, text_field
from blr_derive.spec.blocks import Block
from blr_derive.spec.hyper import err

COMPONENTS_KEYS = {"index", "size", "description"}


class ComponentsSpec(TypedDict):
    """A product recipe's ``components``: the component axis."""
    index: str                     # the generic component's index (k)
    size: sp.Symbol                # K, a size known at run time
    description: str


def component_block(bname, bdecl, approx, local, rho, rho_text, schedule, line, dims, family_block):
    """A block with one copy per component (``components: true``): the factors name the copy of one component k,
    the generated code holds all K copies as an array with a leading component axis.  With ``exact``: the
    categorical over the components (``family: categorical``, local: a one-hot z with E[z_k] = its probability),
    the Dirichlet over the components (``family: dirichlet``, global: weights w on the simplex with E[log w_k] =
    ψ(a_k) − ψ(Σ_j a_j)), or a copy per component of a scalar family (``family: gaussian_diag``, ...; made by
    ``family_block``).  With ``delta``: a point estimate of a scalar, vector or matrix per component, or of a point
    on the simplex over the components (``variable: {simplex: true}``: Σ_k θ_k = 1)."""
    if approx == "exact":
        fam = bdecl.get("family")
        if "variable" in bdecl:
            raise err(f"block '{bname}': an exact block declares 'family', not 'variable'", bdecl, "variable")
        if fam == "categorical":
            if not local:
                raise err(f"block '{bname}': the categorical over the components is a local block (local: true)",
                          bdecl, "local")
            z = sp.Symbol(bname, real=True)
            p = sp.Symbol(f"{bname}_p", positive=True)
            return Block(bname, None, True, "exact", rho, rho_text, [z], {}, {}, [(f"{bname}_p", p, None)],
                         text_field(bdecl, "description"), line=line, per_component=True, one_hot=True)
        if fam == "dirichlet":
            if local:
                raise err(f"block '{bname}': the Dirichlet over the components is a global block", bdecl, "local")
            w = sp.Symbol(bname, positive=True)
            a = sp.Symbol(f"{bname}_a", positive=True)
            return Block(bname, None, False, "exact", rho, rho_text, [w], {}, {}, [(f"{bname}_a", a, None)],
                         text_field(bdecl, "description"), line=line, schedule=schedule, per_component=True,
                         simplex=True)
        b = family_block()
        if len(b.variables) != 1 or b.family.variable_kind != "scalar" or b.constraint:
            raise err(f"block '{bname}': a per-component family block needs a family of one scalar variable "
                      f"('{b.family.name}' is not); over the components write family: categorical or dirichlet",
                      bdecl, "family")
        b.per_component = True
        return b
    if rho != 1:
        raise err(f"block '{bname}': a per-component delta block needs learning_rate 1", bdecl, "learning_rate")
    if local:
        raise err(f"block '{bname}': delta blocks are global parameters", bdecl, "local")
    if "family" in bdecl:
        raise err(f"block '{bname}': a delta block is a point estimate and declares 'variable', not 'family'",
                  bdecl, "family")
    var = bdecl.get("variable", LDict())
    if not isinstance(var, dict) or set(var) - {"shape", "symmetric", "simplex"}:
        raise err(f"block '{bname}': the variable of a per-component block is {{shape: scalar|vector|matrix, "
                  "symmetric: true}} or {simplex: true}", bdecl, "variable")
    simplex = var.get("simplex", False)
    if not isinstance(simplex, bool) or (simplex and "shape" in var):
        raise err(f"block '{bname}': simplex must be true or false (a scalar per component)", var, "simplex")
    shape = var.get("shape", "scalar")
    sym = False
    if simplex or shape == "scalar":
        v = sp.Symbol(bname, positive=True) if simplex else sp.Symbol(bname, real=True)
    elif shape in ("vector", "matrix"):
        if len(dims) != 1:
            raise err(f"block '{bname}': vector and matrix blocks need the recipe's 'dimension'", var, "shape")
        P = next(iter(dims.values()))
        v = sp.MatrixSymbol(bname, P, 1 if shape == "vector" else P)
        sym = bool(var.get("symmetric", False)) and shape == "matrix"
    else:
        raise err(f"block '{bname}': shape must be scalar, vector or matrix", var, "shape")
    return Block(bname, None, False, "delta", rho, rho_text, [v], {}, {}, [(bname, v, None)],
                 text_field(bdecl, "description"), symmetric=sym, line=line, per_component=True, simplex=simplex)


def parse_components(spec, taken) -> ComponentsSpec:
    """The recipe's component axis: ``components: {index: k, size: K}`` (K a size known at run time, read from
    the state's leading axis)."""
    cspec = spec["components"]
    if not isinstance(cspec, dict):
        raise err("components must be a mapping {index: k, size: K}", spec, "components")
    check_keys(cspec, COMPONENTS_KEYS, ("size",), "components")
    index = check_name_at(cspec.get("index", "k"), "component index", cspec, "index")
    size = check_name_at(cspec["size"], "component size", cspec, "size")
    for key, name in (("index", index), ("size", size)):
        if name in taken or (key == "size" and name == index):
            raise err(f"components: the {key} '{name}' clashes with another name", cspec, key)
        taken.add(name)
    return {"index": index, "size": sp.Symbol(size, integer=True, positive=True),
            "description": text_field(cspec, "description")}
