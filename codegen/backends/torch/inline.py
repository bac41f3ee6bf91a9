"""Which intermediate values of an elementwise program the torch target's planner substitutes into their readers
(see :mod:`codegen.backends.torch.inplace`): a tensor value read by exactly one later assignment, and a product that
a fused accumulation (``addcmul_``/``addcdiv_``) computes in each of its readers.  Decided from the IR alone."""
from __future__ import annotations

import sympy as sp


def _occurrences(expr, sym):
    return sum(1 for x in sp.preorder_traversal(expr) if x == sym)


def _reads(expr, sym):
    """How many times evaluating ``expr`` reads ``sym``: one branch of a Piecewise runs (its conditions are all
    read), so its values count by their maximum."""
    if expr == sym:
        return 1
    if isinstance(expr, sp.Piecewise):
        return (sum(_reads(c, sym) for _, c in expr.args)
                + max((_reads(v, sym) for v, _ in expr.args), default=0))
    return sum(_reads(a, sym) for a in expr.args)


def _fusable(e, tensors):
    """A product that one fused accumulation computes in its reader (``c·x·y``, ``c·x/y``, ``c·x²``: addcmul_,
    addcdiv_; ``c·x`` with a host factor c: the ``alpha`` of an ``add``, or folded into the coefficient of a
    state, ``x + c·x`` as ``x·(1 + c)``): substituted into each of several readers it costs no extra pass, saves
    a buffer, and rounds as torch.optim does (``g + δ·m`` in one ``add(g, m, alpha=δ)``, ``m·(1 - lr·δ)`` in one
    ``mul_``)."""
    if not isinstance(e, sp.Mul):
        return False
    factors = [f for f in e.args if f.free_symbols & tensors]
    if len(factors) == 1 and isinstance(factors[0], sp.Symbol):
        return True             # c·x: the alpha of its reader's add, or the coefficient of a state (torch's order)
    shapes = []
    for f in factors:
        base, ex = f.as_base_exp()
        if not isinstance(base, sp.Symbol) or ex not in (1, -1, 2):
            return False
        shapes += [ex] if ex != 2 else [1, 1]
    return sorted(shapes) in ([-1, 1], [1, 1])


def inline_single_use(assignments, keep, tensors):
    """Substitute every tensor intermediate that exactly one later assignment reads, once, into that
    assignment, and a fusable product (see _fusable) into each assignment that reads it once (not Piecewise
    values, not the symbols in ``keep``: outputs and values read elsewhere; ``tensors``: the symbols bound to
    tensor lists before the program)."""
    tensors = set(tensors)
    reads: dict[sp.Basic, int] = {}
    for _, e in assignments:
        for s in e.free_symbols:
            reads[s] = reads.get(s, 0) + _reads(e, s)
    all_tensors = set(tensors)
    for sym, e in assignments:
        if e.free_symbols & all_tensors:
            all_tensors.add(sym)
    fusable = {sym for sym, e in assignments if sym not in keep and reads.get(sym, 0) > 1
               and _fusable(e, all_tensors) and all(_reads(r, sym) <= 1 for _, r in assignments)}
    pinned = {x for sym, e in assignments if sym in fusable for x in e.free_symbols}   # its operands stay names
    inlined: dict[sp.Basic, sp.Basic] = {}
    out = []
    for sym, e in assignments:
        e = e.xreplace(inlined) if inlined else e
        if not e.free_symbols & tensors:
            out.append((sym, e))
            continue
        tensors.add(sym)
        if sym not in keep and sym not in pinned and not e.has(sp.Piecewise) and (
                reads.get(sym, 0) == 1 or sym in fusable):
            inlined[sym] = e
            continue
        out.append((sym, e))
    return out
