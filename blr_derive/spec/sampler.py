"""A family's sampler declaration: θ from independent draws u, u2, …, u16 ~ Uniform(0, 1) and z, z2, …, z16 ~ N(0, 1)
(an expression, a list per component, or a mapping with named definitions and an acceptance condition for a
rejection sampler).  Parsed into sympy expressions; every problem is a located SpecError."""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.exprfuncs import CONSTANTS, FUNCTIONS
from blr_derive.core.exprparse import parse_at
from blr_derive.core.matexpr import is_mat
from blr_derive.core.nodes import BartlettDraw, Cholesky, NormalVectorDraw
from blr_derive.core.names import check_name_at
from blr_derive.core.yamlio import check_keys, where


def _err(msg, container, key=None):
    f, l = where(container, key)
    return SpecError(msg, f, l)


#: the random draws a sampler may use: independent uniforms on (0, 1) and standard normals
UNIFORM_DRAWS = ("u",) + tuple(f"u{i}" for i in range(2, 17))
NORMAL_DRAWS = ("z",) + tuple(f"z{i}" for i in range(2, 17))


def sampler_draws(sampler, accept=None):
    """The draws a sampler uses (with a rejection sampler's ``accept`` condition, those of both), in declaration
    order (u, u2, …, z, z2, …), each with its law."""
    used = sampler.free_symbols | (accept.free_symbols if accept is not None else set())
    by_name = {s.name: s for s in used}
    return ([(by_name[n], "uniform") for n in UNIFORM_DRAWS if n in by_name]
            + [(by_name[n], "normal") for n in NORMAL_DRAWS if n in by_name])


SAMPLER_KEYS = {"value", "accept", "define"}
MAX_SAMPLER_DEFINITIONS = 16
#: the most operations a sampler's value, acceptance condition or definition may have with the definitions it
#: uses written in (counted as a tree: a definition used three times counts three times).  The generalized inverse
#: Gaussian's acceptance condition, the largest bundled one, has 17 917; 16 definitions that each use the one
#: before three times are 3**15 = 14 million, which ran to the time limit at 2 GB.
MAX_SAMPLER_NODES = 100_000


def _tree_size(e, memo):
    """The number of nodes of ``e`` as a tree (shared subexpressions counted each time), without walking it as
    one: each distinct subexpression is counted once and its count reused."""
    n = memo.get(e)
    if n is None:
        n = 1 + sum(_tree_size(a, memo) for a in e.args if isinstance(a, sp.Basic))
        memo[e] = n
    return n


def _bounded(e, container, key, what):
    """``e`` (with the definitions written in), refused with a located error when it is larger than
    :data:`MAX_SAMPLER_NODES`."""
    n = _tree_size(e, {})
    if n > MAX_SAMPLER_NODES:
        raise _err(f"sampler: {what} has {n} operations with the definitions it uses written in, more than "
                   f"{MAX_SAMPLER_NODES}: use each definition fewer times (a definition is copied where it is "
                   "used)", container, key)
    return e


def parse_sampler(spec, kind, theta, psyms, file, components=()):
    """θ as a function of the parameters and independent draws u, u2, … ~ Uniform(0, 1) (inverse CDFs) and z,
    z2, … ~ N(0, 1); `check` compares its moments and law with the density's, and it enables the score-function
    and reparameterization estimators.  → (value, accept), both None without a sampler.  ``sampler`` is the
    expression of θ, or a mapping with

    * ``value``: θ (required);
    * ``accept``: a condition on the same draws and parameters (``u2 <= c*exp(1 - c)``), which makes a rejection
      sampler: every draw is made again until the condition holds (Best & Fisher's von Mises sampler); None for a
      direct sampler;
    * ``define``: named intermediate expressions, in order, each usable by the later ones, by ``value`` and by
      ``accept``; they are substituted (names are identifiers that are neither parameters, draws nor θ)."""
    if "sampler" not in spec:
        return None, None
    several = kind in ("sized", "components", "mixed")
    matrix = is_mat(theta) and theta.shape[0] == theta.shape[1] and theta.shape[0] != 1
    mixed = kind == "mixed"
    if not several and not matrix and (kind != "scalar" or is_mat(theta)):
        raise _err("samplers are supported for scalar variables, variables of named scalar components (a fixed size, "
                   "or components) and square matrices; a vector of symbolic dimension has none (a gaussian "
                   "declaration samples it)", spec, "sampler")
    functions = matrix_draw_functions(theta.shape[0]) if matrix else None
    if mixed:
        functions = matrix_draw_functions(next(c.shape[0] for c in components if is_mat(c)), vectors=True)
    draws = {**{n: sp.Symbol(n, positive=True) for n in UNIFORM_DRAWS},
             **{n: sp.Symbol(n, real=True) for n in NORMAL_DRAWS}}
    f, l = where(spec, "sampler")
    clash = sorted(set(draws) & set(psyms))
    if clash:
        raise SpecError(f"sampler: the parameter '{clash[0]}' has the name of a random draw (draws: "
                        f"{', '.join(draws)}); rename it", f or file, l)
    raw = spec["sampler"]
    known = {**psyms, **draws}
    accept = None
    if isinstance(raw, dict):
        check_keys(raw, SAMPLER_KEYS, required=("value",), what="sampler")
        subs = _definitions(raw, known, theta, file, functions)

        def inline(e):
            return e.xreplace(dict(subs))
        expr = _bounded(_sampler_value(raw["value"], several, components, known, raw, file, inline,
                                       functions=functions), raw, "value", "the value")
        if "accept" in raw:
            accept = _bounded(inline(parse_at(raw["accept"], known, raw, "accept", file, what="sampler acceptance",
                                              logic=True)), raw, "accept", "the acceptance condition")
            if not isinstance(accept, (sp.core.relational.Relational, sp.logic.boolalg.BooleanFunction)):
                raise _err("sampler: 'accept' must be a condition (a comparison such as u2 <= exp(-x), combined "
                           "with 'and'/'or')", raw, "accept")
            if not any(accept.has(d) for d in draws.values()):
                raise _err("sampler: 'accept' must depend on a random draw (a condition of the parameters alone "
                           "accepts all draws or none)", raw, "accept")
        fl = where(raw, "value")
    else:
        expr = _sampler_value(raw, several, components, known, spec, file, lambda e: e, key="sampler",
                              functions=functions)
        fl = (f, l)
    if matrix:
        return _matrix_sampler(expr, accept, theta, raw, fl, file), None
    if mixed:
        return _mixed_sampler(expr, accept, components, raw, fl, file), None
    used = [d for d in draws.values() if expr.has(d)]
    if not used:
        raise SpecError("sampler: write theta as a function of the parameters and independent draws u, u2, ..., u16 "
                        "~ Uniform(0, 1) (an inverse CDF) and z, z2, ..., z16 ~ N(0, 1)", fl[0] or file, fl[1])
    return expr, accept


def _matrix_sampler(expr, accept, theta, raw, fl, file):
    """A square-matrix variable's sampled value: a matrix of its shape made from Bartlett draws, no rejection."""
    if accept is not None:
        raise _err("sampler: a matrix sampler has no acceptance condition", raw, "accept")
    if not is_mat(expr) or expr.shape != theta.shape:
        raise SpecError(f"sampler: the sampled value must be a {theta.shape[0]} x {theta.shape[1]} matrix like "
                        f"{theta}", fl[0] or file, fl[1])
    if not expr.atoms(BartlettDraw):
        raise SpecError("sampler: a matrix sampler draws with bartlett(n) (A with A Aᵀ ~ Wishart(n, I))",
                        fl[0] or file, fl[1])
    return expr


def _definitions(raw, known, theta, file, functions):
    """The sampler's ``define`` entries, each parsed on its own (the grammar's size limits apply to each) and added
    to ``known``; → [(symbol, expression in the draws and parameters)] for inlining."""
    defs = raw.get("define", {})
    if not isinstance(defs, dict):
        raise _err("sampler: 'define' must be a mapping of names to expressions", raw, "define")
    if len(defs) > MAX_SAMPLER_DEFINITIONS:
        raise _err(f"sampler: at most {MAX_SAMPLER_DEFINITIONS} definitions", raw, "define")
    subs = []
    for name, text in defs.items():
        check_name_at(name, "sampler definition", defs, name)
        if name in known or name == str(theta):
            raise _err(f"sampler: '{name}' is already a parameter, a draw or the variable; pick another name",
                       defs, name)
        if name in FUNCTIONS or name in CONSTANTS or name == "sum":
            raise _err(f"sampler: '{name}' is a function or constant of the expression grammar; pick another "
                       "name", defs, name)
        e = parse_at(text, known, defs, name, file, what="sampler definition", functions=functions)
        # a matrix definition (B = chol(V)*bartlett(n)) stands as a matrix symbol until it is inlined
        known[name] = sp.MatrixSymbol(f"{name}__defined", *e.shape) if is_mat(e) else sp.Dummy(name, real=True)
        # each definition is inlined once, in terms of the draws and parameters only, so that the value and
        # the acceptance condition are rebuilt in one pass (not once per definition: seconds for the GIG's 13)
        subs.append((known[name], _bounded(e.xreplace(dict(subs)), defs, name, f"definition '{name}'")))
    return subs


def _mixed_sampler(expr, accept, components, raw, fl, file):
    """Components of different shapes: each value has its component's shape; the draws are matrix and vector
    draws (bartlett, normals) and scalar ones, no rejection."""
    if accept is not None:
        raise _err("sampler: a sampler of components with shapes has no acceptance condition", raw, "accept")
    for v, c in zip(expr, components):
        vs = v.shape if is_mat(v) else None
        cs = c.shape if is_mat(c) else None
        if vs != cs:
            raise SpecError(f"sampler: the value of '{c}' must have its shape ({'x'.join(map(str, cs)) if cs else 'scalar'})",
                            fl[0] or file, fl[1])
    if not expr.atoms(BartlettDraw, NormalVectorDraw) and not any(
            expr.has(sp.Symbol(n, real=True)) or expr.has(sp.Symbol(n, positive=True))
            for n in UNIFORM_DRAWS + NORMAL_DRAWS):
        raise SpecError("sampler: the values must use random draws (bartlett(n), normals(P), u, z, ...)",
                        fl[0] or file, fl[1])
    return expr


def matrix_draw_functions(P, vectors=False) -> dict:
    """What a matrix sampler may call besides the grammar's functions: ``chol(X)``, the lower Cholesky factor, and
    ``bartlett(n)``, one independent Bartlett draw A (P×P lower triangular, A Aᵀ ~ Wishart(n, I); each call is a
    new draw, so a sampler names it once in ``define`` and uses the name)."""
    count = [0]

    def chol(name, args):
        if len(args) != 1 or not is_mat(args[0]) or not args[0].is_square:
            raise SpecError("chol() takes one square matrix")
        return Cholesky(args[0])

    def bartlett(name, args):
        if len(args) != 1 or is_mat(args[0]):
            raise SpecError("bartlett() takes one scalar, the degrees of freedom n > P - 1")
        count[0] += 1
        return BartlettDraw(args[0], P, count[0])
    def normals(name, args):
        if len(args) != 1 or args[0] != P:
            raise SpecError(f"normals() takes the dimension {P}: normals({P}) is a {P} x 1 vector of N(0, 1) draws")
        count[0] += 1
        return NormalVectorDraw(P, count[0])
    out = {"chol": chol, "bartlett": bartlett}
    if vectors:
        out["normals"] = normals
    return out


def _sampler_value(raw, several, components, known, container, file, inline, key="value", functions=None):
    """The sampled value: one expression for a scalar variable, a list aligned with the components otherwise
    (returned as a sympy Tuple)."""
    if not several:
        return inline(parse_at(raw, known, container, key, file, what="sampler", logic=key == "sampler",
                               functions=functions))
    if not isinstance(raw, list) or len(raw) != len(components):
        raise _err(f"sampler: give a list of {len(components)} expressions, one per component "
                   f"({', '.join(map(str, components))})", container, key)
    return sp.Tuple(*[inline(parse_at(t, known, raw, i, file, what=f"sampler of {c}", functions=functions))
                      for i, (t, c) in enumerate(zip(raw, components))])
