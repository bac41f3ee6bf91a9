"""Random valid inputs of a matrix update program for the check of generated code against the symbolic update
(``verify/update.py``): the sizes of its dimensions, its state and its oracles' values, drawn from what the
derivation records — the candidate family's parameters (their shapes and domains; a family with a sampler of its
own draws them jointly) and the state variables rules put in their place (``Derivation.state_vars``, e.g. the
factor A of C = A Aᵀ of ``exponential_coordinates``).  Nothing here tests a rule's or a recipe's name."""
from __future__ import annotations

import numpy as np
import sympy as sp

from blr_derive.core.errors import DerivationError
from blr_derive.core.matexpr import is_mat
from blr_derive.rules.base import StateVar

#: sizes of the dimensions other than the family's own (P) and the data's (7), first use first: all different, so
#: that an index transposed in the generated code changes a shape or a value
SIZES = (2, 4, 5, 6, 8, 9, 10, 11)


def shape_of(sym, dims) -> tuple:
    """The numeric shape of a matrix symbol (a column vector as a 1-D shape), () for a scalar."""
    if not is_mat(sym):
        return ()
    n, k = (int(sp.sympify(s).xreplace({d: sp.Integer(v) for d, v in dims.items()})) for s in sym.shape)
    return (n,) if k == 1 else (n, k)


def dimension_sizes(recipe, D, P) -> dict:
    """dimension symbol -> size: the family's dimension P, a data dimension of its own 7, and the other dimensions
    of the state and the oracles distinct sizes from :data:`SIZES`."""
    fam = recipe.family
    dims = {fam.dim: P} if fam.dim is not None else {}
    for d in recipe.data:
        for s_ in d.shape:
            if s_ != fam.dim:
                dims[s_] = 7
    symbols = ([p.symbol for p in D.recipe.family.params.values()] + [v.symbol for v in D.state_vars.values()]
               + [c.symbol for c in D.oracle_calls]
               + ([D.sampling.eps] + [s for s, _ in D.sampling.calls] if D.sampling is not None else []))
    free = iter(n for n in SIZES if n not in dims.values())
    for sym in symbols:
        for s_ in (sym.shape if is_mat(sym) else ()):
            for d in sorted(sp.sympify(s_).free_symbols, key=str):
                if d not in dims:
                    dims[d] = next(free)
    return dims


def draw(rng, domain: str, shape: tuple):
    """A random value of ``shape`` in ``domain`` (:data:`blr_derive.rules.base.STATE_DOMAINS`), well inside it:
    positive-definite matrices with eigenvalues at least 1/2, invertible ones U diag(s) Vᵀ with random orthogonal
    U, V and singular values s in [1/2, 2] (neither symmetric nor triangular)."""
    if domain == "real":
        return rng.normal(size=shape) if shape else float(rng.normal())
    if domain == "positive":
        return rng.uniform(0.5, 2.0, size=shape) if shape else float(rng.uniform(0.5, 2.0))
    if domain == "unit_interval":
        return rng.uniform(0.2, 0.8, size=shape) if shape else float(rng.uniform(0.2, 0.8))
    if len(shape) != 2 or shape[0] != shape[1]:
        raise DerivationError(f"a value in the domain '{domain}' is a square matrix, not of shape {shape}")
    n = shape[0]
    X = rng.normal(size=(n, n))
    if domain == "positive_definite":
        return X @ X.T / n + 0.5 * np.eye(n)
    if domain == "symmetric":
        return (X + X.T) / 2
    if domain == "invertible":
        U, _ = np.linalg.qr(X)
        V, _ = np.linalg.qr(rng.normal(size=(n, n)))
        return U @ np.diag(rng.uniform(0.5, 2.0, size=n)) @ V.T
    raise DerivationError(f"no random values for the domain '{domain}'")


def matrix_state(D, rng, P, env, dims) -> dict:
    """Random valid state of a matrix update program: the candidate family's parameters (by its own sampler where it
    has one, at dimension P, else each by its declared domain), a parameter a rule replaced by the state variable it
    recorded (``D.state_vars``) drawn in that variable's domain.  Values go into ``env`` by symbol."""
    fam = D.recipe.family
    state, described = {}, []
    own = [p for p in fam.params.values() if p.name not in D.renamed]
    for p in fam.params.values():
        if p.name not in D.renamed:
            continue
        new = D.renamed[p.name][0]
        if new not in D.state_vars:
            raise DerivationError(f"the state variable '{new}' that replaces '{p.name}' has no recorded domain "
                                  "(a rule that changes the state records it in Derivation.state_vars)")
        described.append(D.state_vars[new])
    sampler = getattr(fam, "sample_params", None)
    if own and sampler is not None:                 # the family's parameters, drawn jointly
        vals = sampler(rng, P)
        env.update(vals)
        state.update({p.name: vals[p.symbol] for p in own})
    else:                                           # a candidate's family (e.g. the matrix normal): by domain
        described = [StateVar(p.name, p.symbol, p.domain) for p in own] + described
    # an elementwise program over a matrix mean (the eigenbasis candidate's rotated coordinates): its scalar state
    # holds arrays of the mean's shape
    mean = getattr(fam, "gaussian_mean", None)
    entrywise = shape_of(mean, dims) if D.elementwise and is_mat(mean) else None
    for v in described:
        val = draw(rng, v.domain, shape_of(v.symbol, dims) or (entrywise if entrywise else ()))
        state[v.name] = val
        env[v.symbol] = val
    symmetric = getattr(fam, "symmetric", frozenset())
    for a in D.aux_state:           # state a rule adds without a default, or that holds arrays: drawn too
        copied = _copied_state(a, state)
        if a.name in state or (a.init is not None and entrywise is None and copied is None):
            continue
        if copied is not None:
            # a state that starts as a copy of another (natural_momentum's previous parameters, Eq. 80): drawn near
            # it, in its domain, so that the step reads a value of its own (it was left out, and every symbolic
            # update of a matrix family with natural_momentum was undefined: check failed with "no random input")
            src = state[copied]
            dom = fam.params[copied].domain if copied in fam.params else "real"
            val = src + 0.1 * draw(rng, dom if dom in ("positive", "positive_definite") else "real", np.shape(src))
        elif is_mat(a.symbol):
            val = draw(rng, "positive_definite" if a.symbol in symmetric else "real", shape_of(a.symbol, dims))
        else:
            val = draw(rng, "real", entrywise or ())
        state[a.name] = val
        env[a.symbol] = val
    return state


def _copied_state(a, state):
    """The name of the drawn state whose copy ``a`` starts as (its ``init`` is that state's symbol), or None."""
    init = getattr(a, "init", None)
    if init is None or not isinstance(init, (sp.Symbol, sp.MatrixSymbol)):
        return None
    name = str(init)
    return name if name in state else None


def oracle_value(rng, sym, dims):
    """A random value of an oracle's result: a number, a vector, a matrix — SPD where its shape is square by
    declaration (a Hessian), else any."""
    if not is_mat(sym):
        return float(rng.uniform(0.5, 2.0))
    shape = shape_of(sym, dims)
    if len(shape) == 1:
        return rng.normal(size=shape)
    v = rng.normal(size=shape)
    if sym.shape[0] == sym.shape[1]:
        v = v @ v.T + shape[0] * np.eye(shape[0])
    return v


def fixed_draw(sym, dims, value=0.37):
    """The fixed-noise value of a draw: ``value`` in every coordinate (see ``verify.update.FixedNoise``)."""
    shape = shape_of(sym, dims)
    return np.full(shape, value) if shape else value
