"""The variable of a family declaration and its support: a scalar, a vector or matrix of the family's dimension, a
vector of fixed size, named scalar components, or components of different shapes (a vector and a matrix: the
normal–Wishart's mean and precision).  Every problem is a located SpecError."""
from __future__ import annotations

import math

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.matexpr import is_mat
from blr_derive.core.names import check_name_at
from blr_derive.core.text import did_you_mean, quote
from blr_derive.core.yamlio import LDict, check_keys, where
from blr_derive.spec.vocabulary import (JOINT_SUPPORTS, MAX_JOINT_POINTS, MAX_SIZE, SCALAR_SUPPORTS, SHAPES, SUPPORTS,
                                        VARIABLE_KEYS, count_total, is_discrete, is_scalar_support)


def _err(msg, container, key=None):
    f, l = where(container, key)
    return SpecError(msg, f, l)


def parse_variable(spec, dim):
    """The variable declaration → (kind, name, theta, components, names)."""
    var = spec["variable"]
    if isinstance(var, str):
        var = LDict(name=var, shape="scalar")           # the shorthand names the line of 'variable'
        var.file, var.line = where(spec, "variable")
    if not isinstance(var, dict):
        raise _err("variable must be a name or a mapping {name, shape}", spec, "variable")
    check_keys(var, VARIABLE_KEYS, (), "variable")
    if "components" in var:
        if "name" in var or "shape" in var or "size" in var:
            raise _err("a variable with 'components' takes no name, shape or size", var, "components")
        comps = var["components"]
        if isinstance(comps, list) and any(isinstance(c, dict) for c in comps):
            return _shaped_components(var, comps, dim)
        if (not isinstance(comps, list) or len(comps) < 2 or len(comps) > MAX_SIZE
                or not all(isinstance(c, str) and c.isidentifier() for c in comps) or len(set(comps)) != len(comps)):
            raise _err(f"components must be a list of 2 to {MAX_SIZE} distinct names", var, "components")
        for c in comps:
            check_name_at(c, "variable component", var, "components")
        syms = [sp.Symbol(c, real=True) for c in comps]
        return "components", "(" + ", ".join(comps) + ")", sp.ImmutableMatrix(syms), syms
    if "name" not in var:
        raise _err("missing required key 'name' in variable", var, None)
    vname = check_name_at(var["name"], "variable name", var, "name", scope="prefix")
    vshape = var.get("shape", "scalar")
    if vshape not in SHAPES:
        raise _err("variable shape must be scalar, vector or matrix", var, "shape")
    if "size" in var:
        size = var["size"]
        if vshape != "vector":
            raise _err("'size' is for vector variables", var, "size")
        if isinstance(size, bool) or not isinstance(size, int) or not 2 <= size <= MAX_SIZE:
            raise _err(f"size must be an integer from 2 to {MAX_SIZE}", var, "size")
        syms = [sp.Symbol(f"{vname}{i + 1}", real=True) for i in range(size)]
        return "sized", vname, sp.ImmutableMatrix(syms), syms
    if vshape != "scalar" and dim is None:
        raise _err(f"a {vshape} variable needs a 'dimension' symbol (or a fixed 'size')", spec, "variable")
    if vshape == "vector":
        return "vector", vname, sp.MatrixSymbol(vname, dim, 1), []
    if vshape == "matrix":
        return "matrix", vname, sp.MatrixSymbol(vname, dim, dim), []
    sym = sp.Symbol(vname, real=True)
    return "scalar", vname, sym, [sym]


def _shaped_components(var, comps, dim):
    """Components of different shapes (``- {name: theta, shape: vector}``, ``- {name: Lambda, shape: matrix}``): a
    vector of the family's dimension and/or a P x P matrix next to scalars (the normal–Wishart's mean and
    precision).  → kind 'mixed', the components as a tuple of symbols."""
    if len(comps) < 2 or len(comps) > 4:
        raise _err("components with shapes must be a list of 2 to 4 entries {name, shape}", var, "components")
    syms, names = [], []
    for i, c in enumerate(comps):
        if isinstance(c, str):
            c = {"name": c, "shape": "scalar"}
        if not isinstance(c, dict) or set(c) - {"name", "shape"} or "name" not in c:
            raise _err("each component is a name or a mapping {name, shape}", comps, i)
        name = check_name_at(c["name"], "variable component", comps, i)
        shape = c.get("shape", "scalar")
        if shape not in SHAPES:
            raise _err("component shape must be scalar, vector or matrix", comps, i)
        if shape != "scalar" and dim is None:
            raise _err(f"a {shape} component needs a 'dimension' symbol for the family", comps, i)
        if name in names:
            raise _err(f"component '{name}' is declared twice", comps, i)
        names.append(name)
        syms.append(sp.Symbol(name, real=True) if shape == "scalar" else
                    sp.MatrixSymbol(name, dim, 1) if shape == "vector" else sp.MatrixSymbol(name, dim, dim))
    if all(not is_mat(s) for s in syms):
        raise _err("components of shape scalar are a list of names (components: [a, b])", var, "components")
    return "mixed", "(" + ", ".join(names) + ")", sp.Tuple(*syms), syms


#: the support of each shape of a component of a 'mixed' variable
MIXED_SUPPORTS = {"vector": ("real",), "matrix": ("positive_definite",)}


def parse_support(spec, kind, components):
    """→ (declared support, per-component supports, joint support)."""
    default = "positive_definite" if kind == "matrix" else "real"
    support = spec.get("support", default)
    known = ", ".join(SUPPORTS)
    if kind == "mixed":
        if not isinstance(support, list) or len(support) != len(components):
            raise _err("a list of supports must be aligned with the variable's components", spec, "support")
        for s, c in zip(support, components):
            if is_mat(c):
                shape = "vector" if c.shape[1] == 1 else "matrix"
                if s not in MIXED_SUPPORTS[shape]:
                    raise _err(f"component '{c}' ({shape}) has support "
                               f"{' or '.join(MIXED_SUPPORTS[shape])}, not '{s}'", spec, "support")
            elif s not in ("real", "positive"):
                raise _err(f"unsupported support '{s}' for the scalar component '{c}' next to vector or matrix "
                           "components (real or positive)", spec, "support")
        return tuple(support), list(support), None
    if isinstance(support, list):
        if kind != "components" or len(support) != len(components):
            raise _err("a list of supports must be aligned with the variable's components", spec, "support")
        for s in support:
            if not is_scalar_support(s):
                raise _err(f"unsupported component support '{s}' (known: {', '.join(SCALAR_SUPPORTS)})", spec, "support")
        if len({is_discrete(s) for s in support}) > 1:
            raise _err("mixing discrete and continuous components is not supported", spec, "support")
        return tuple(support), list(support), None
    if not isinstance(support, str) or not (support in SUPPORTS or is_scalar_support(support)
                                            or count_total(support) is not None):
        raise _err(f"unsupported support '{quote(support)}'{did_you_mean(support, SUPPORTS)} "
                   f"(known: {known}, integers LO..HI)", spec, "support")
    if kind == "vector" and support != "real":
        raise _err("a vector variable with a symbolic dimension has support 'real' (use a fixed 'size' for "
                   "categorical or simplex supports)", spec, "support")
    if kind == "matrix" and support != "positive_definite":
        raise _err("a matrix variable has support 'positive_definite'", spec, "support")
    if support == "positive_definite" and kind != "matrix":
        raise _err("support 'positive_definite' is for matrix variables", spec, "support")
    if support in JOINT_SUPPORTS or count_total(support) is not None:
        if kind != "sized":
            raise _err(f"support '{support}' needs a vector variable with a fixed size "
                       "(variable: {name: theta, shape: vector, size: K})", spec, "support")
        if count_total(support) is not None and math.comb(count_total(support) + len(components) - 1,
                                                          len(components) - 1) > MAX_JOINT_POINTS:
            raise _err(f"support '{support}' has more than {MAX_JOINT_POINTS} count vectors of size {len(components)} "
                       "(they are enumerated); use a smaller total or size", spec, "support")
        return support, [], support
    return support, [support] * len(components), None
