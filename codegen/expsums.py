"""Sums of exponentials: the lowering every target's printer applies to an expression before it prints it, after the
scaled Bessel functions (:meth:`codegen.printing.HostConditionalMixin.doprint`, :mod:`codegen.scaled`), so that no
target forms inf, inf/inf or inf − inf on the way to a value that is an ordinary number.

A log-partition A(λ) derived by summation over a finite support is the logarithm of a sum of exponentials (the
Bernoulli on {−1, +1}: A = log(e^λ + e^{−λ}); a categorical: log(1 + Σ_k e^{λ_k})), and its gradient μ = ∇A (the
expectation parameters of the Bayesian learning rule, Eq. 6 of Khan & Rue 2023) and Hessian F = ∇²A are quotients
of such sums (e^λ/(e^λ + e^{−λ})).  In double precision e^x is +inf from x ≈ 709.8, so A is inf at |λ| = 1000 and μ
is inf/inf = NaN there, although A ≈ |λ| and μ → ±1.

:func:`stable_exp_sums` decides from the expression alone (no family is named).  An *exponential sum* is a sum
S = Σ_i c_i·e^{a_i} whose every term is a coefficient c_i free of exp times exponentials (a term without one has
a_i = 0), with an exponent a_i that is not a number (a sum of numbers cannot overflow on its own).  It is *positive*
when every c_i is positive (sympy's assumptions: numbers, positive hyperparameters); then

    log S = LSE(a_i + log c_i),   LSE(x, y) = logaddexp(x, y) = max(x, y) + log1p(e^{−|x − y|}),

folded pairwise over the terms (terms of the same exponent first merged: Σ c·e^{a} = (Σ c)e^{a}), the pair (0, x)
printed as softplus(x) = log(1 + e^x) (:class:`core.specialfns.softplus`).  Each fold is finite for finite
arguments and accurate to a few units in the last place of its value (log1p keeps log(1 + e^{−40}) ≈ 4.2e-18).
Any other exponential sum is written e^{M}·S̃ with M = max_i a_i (exponents that differ by a number merged into the
larger) and S̃ = Σ_i c_i e^{a_i − M}, whose terms are bounded by |c_i| (one of them is c_i itself), so S̃ is finite
where the c_i are.  Then, where such a sum meets what would overflow with it:

* a logarithm of a product with an exponential-sum factor (and any factors) takes the exponentials out as exponents:
  log(Π_j S_j^{k_j} · Π_l e^{b_l} · r) = Σ_j k_j·(LSE_j or M_j) + Σ_l b_l + log(Π S̃_j^{k_j} · r) (log(e^{E}·R) =
  E + log R for R > 0, which it is where the argument was: e^{E} > 0), so A = log(e^λ + e^{−λ}) becomes
  logaddexp(λ, −λ) and the continuous Bernoulli's log((e^λ − 1)/λ) becomes max(λ, 0) + log(S̃/λ);
* a product with an exponential-sum factor in its denominator (a negative power) has every exponential factor
  gathered into one e^{E}: e^{b} as it is, each exponential sum S^{k} as e^{k·M}·S̃^{k}, so
  e^λ/(e^λ + e^{−λ}) = e^{λ − M}/(e^{λ − M} + e^{−λ − M}) with M = max(λ, −λ), 1/(e^{2λ} + 1) =
  e^{−M}/(e^{2λ − M} + e^{−M}) with M = max(0, 2λ), and a categorical's e^{λ₁}/(1 + e^{λ₁} + e^{λ₂}) is the softmax
  normalized by max(0, λ₁, λ₂): never inf/inf, nor an e^{x} that overflows on the way to a quotient that is merely
  small (whose derivative, in jax or torch autograd, would be inf/inf).  The dominant term of each S̃ is e^0 = 1
  exactly and the others are e^{d} with d a difference of exponents, so the quotient keeps the accuracy of the
  original where that did not overflow (e^{λ − LSE} would lose a few units in the last place of |λ|: 2e-13 at
  λ₁ = λ₂ = 1e4).

Nothing else changes: a sum of exponentials not under a logarithm nor in a denominator (e^λ itself, a Poisson's A,
which is inf where e^λ is), sums whose exponents are numbers, a sum under a logarithm that is positive only where its
exponentials are bounded (:func:`bounded_where_positive`), and exponents that already hold this lowering's max, LSE or
softplus (so that a rewritten node is never rewritten again).  The value is the same function of the symbols in exact
arithmetic, and where the largest exponent is 0 at run time the same doubles: a normalized sum prints its terms in
the original sum's order (:func:`print_order`).  Each target prints logaddexp with its own function (numpy ``numpy.logaddexp``, jax ``jnp.logaddexp``,
torch ``torch.logaddexp``, Triton and the host max + log1p(exp(−|x − y|))) and max as its two-argument maximum
(``Max``, :class:`codegen.printing.HostConditionalMixin`; torch's elementwise printer takes a number in it as
``torch.clamp``'s bound, as torch.maximum takes tensors only).
"""
from __future__ import annotations

import functools

import sympy as sp

from blr_derive.core.specialfns import softplus


class logaddexp(sp.Function):
    """log(e^x + e^y) = max(x, y) + log1p(e^{−|x − y|}), finite for finite arguments; only :func:`stable_exp_sums`
    writes it."""

    nargs = 2

    def _eval_evalf(self, prec):
        x, y = self.args
        if x.is_number and y.is_number:
            return sp.log(sp.exp(x) + sp.exp(y)).evalf(sp.core.evalf.prec_to_dps(prec))
        return None

    def _eval_rewrite_as_log(self, x, y, **kwargs):
        return sp.log(sp.exp(x) + sp.exp(y))


#: what this lowering writes into exponents: an exponent holding one of them is never taken as an exponential sum's
_MARKS = (sp.Max, softplus, logaddexp)


def stable_exp_sums(expr):
    """``expr`` with every logarithm of a sum of exponentials written as a log-sum-exp and every quotient of such sums
    normalized by the largest exponent (module docstring): the same value, without the intermediate overflow.  An
    expression without exp (or anything that is not a sympy expression) is returned as it is."""
    if not isinstance(expr, sp.Basic) or not expr.has(sp.exp):
        return expr
    if isinstance(expr, sp.MatrixBase):
        return expr.applyfunc(stable_exp_sums)
    return _walk(expr)


def _walk(node, factor=False):
    """``node`` rewritten bottom-up; ``factor``: it is a factor of a product, which rewrites its powers itself (so
    that all the product's exponentials meet in one e^{E})."""
    if not node.args or not node.has(sp.exp):
        return node
    product = isinstance(node, sp.Mul)
    args = tuple(_walk(a, product) for a in node.args)
    new = node if args == node.args else node.func(*args)
    if isinstance(new, sp.log):
        return _log_of(new)
    if isinstance(new, sp.Mul) or (isinstance(new, sp.Pow) and not factor):
        return _quotient(new)
    return new


def exp_factor(term, numeric_powers=False):
    """(c, a) with ``term`` = c·e^{a}, c holding no top-level exponential (a = 0: none); with ``numeric_powers`` a
    power (e^{b})^k is taken into a only for a number k (codegen/cancel.py's reading), else for any k."""
    a, rest = sp.Integer(0), []
    for f in sp.Mul.make_args(term):
        if isinstance(f, sp.exp):
            a += f.args[0]
        elif isinstance(f, sp.Pow) and isinstance(f.base, sp.exp) and (f.exp.is_number or not numeric_powers):
            a += f.exp * f.base.args[0]
        else:
            rest.append(f)
    return sp.Mul(*rest), a


def exp_terms(add):
    """[(c_i, a_i)] with ``add`` = Σ c_i·e^{a_i}, each c_i free of exp (an exponential sum, module docstring), or
    None: not a sum, a term whose coefficient holds exp, an exponent that is complex or holds this lowering's own
    functions, or exponents that are all numbers."""
    if not isinstance(add, sp.Add) or not add.is_commutative:
        return None
    terms = []
    for term in add.args:
        coeff, a = exp_factor(term)
        if coeff.has(sp.exp) or a.has(*_MARKS) or a.has(sp.I) or a.is_real is False:
            return None
        terms.append((coeff, a))
    if all(a.is_number for _, a in terms):
        return None
    return terms


def _is_positive(terms):
    return all(c.is_positive is True for c, _ in terms)


def _grouped(terms):
    """{exponent: summed coefficient}, in the terms' order."""
    out: dict = {}
    for c, a in terms:
        out[a] = out.get(a, sp.Integer(0)) + c
    return out


def log_sum_exp(terms):
    """log Σ c_i e^{a_i} of a positive exponential sum: the pairwise fold of logaddexp over a_i + log c_i (numbers
    first, then in sympy's canonical order), a pair with 0 as softplus."""
    pieces = [a + sp.log(c) for a, c in _grouped(terms).items()]
    pieces.sort(key=lambda p: (not p.is_number, sp.default_sort_key(p)))
    out = pieces[0]
    for p in pieces[1:]:
        if out == 0:
            out = softplus(p)
        elif p == 0:
            out = softplus(out)
        else:
            out = logaddexp(out, p)
    return out


def largest_exponent(terms):
    """M = max_i a_i, exponents whose difference is a number merged into the larger one (a single exponent: itself)."""
    keep: list = []
    keys: list = []
    for a in _grouped(terms):
        key = _symbolic_key(a)
        for i, b in enumerate(keep):
            if keys[i] != key:                # a − b holds a symbol: not a number
                continue
            d = a - b
            if d.is_number and d.is_real:
                if d > 0:
                    keep[i] = a
                break
        else:
            keep.append(a)
            keys.append(key)
    keep = _extreme_multiples(keep)
    if len(keep) == 1:
        return keep[0]
    return LargestOf(*keep) if len(keep) > _EVALUATED_MAX else sp.Max(*keep)


def _symbolic_key(a):
    """The terms of ``a`` that hold a symbol, with their number coefficients (the split sympy's Add collects terms by):
    two exponents differ by a number only where their keys are equal.  Compared before subtracting, which was
    quadratic in sympy's arithmetic (8 s for the 190 distinct exponents of a 20-point support's Fisher information
    written over its pairs of points)."""
    out: dict = {}
    for t in sp.Add.make_args(a):
        c, r = t.as_coeff_Mul()
        if not r.is_number:
            out[r] = out.get(r, 0) + c
    return frozenset((r, c) for r, c in out.items() if c != 0)


class LargestOf(sp.Max):
    """max of many exponents, never evaluated: sympy's Max compares every pair of its arguments by their assumptions
    (~4 ms a pair for a·k + b·k²: 70 s over a 21-point support's μ and F), also when a rewrite rebuilds it (exp's
    logcombine of an exponent with log k in it).  A Max to every printer (they print it by its class's MRO), with its
    arguments in sympy's canonical order."""

    def __new__(cls, *args, **assumptions):
        if all(getattr(a, "is_number", False) for a in args):     # numbers (a substitution): their max, as Max
            return sp.Max(*args)
        return super().__new__(cls, *args, evaluate=False)


#: the most exponents whose Max sympy evaluates (drops those that are never the largest, orders its arguments);
#: above it the Max is kept as it is written, its arguments in sympy's canonical order
_EVALUATED_MAX = 4


def _extreme_multiples(exponents):
    """Exponents k·u of one expression u with number factors k (0 among them: k = 0) have their largest at the
    smallest or the largest k (max_k k·u = max(k_min·u, k_max·u)): only those two are kept, in the given order."""
    split = [(sp.Integer(0), None) if a == 0 else a.as_coeff_Mul() for a in exponents]
    bases = {u for _, u in split if u is not None}
    if len(exponents) <= 2 or len(bases) != 1 or not all(k.is_real for k, _ in split):
        return exponents
    ks = [k for k, _ in split]
    lo, hi = ks.index(min(ks)), ks.index(max(ks))
    return [a for i, a in enumerate(exponents) if i in (lo, hi)]


def _scaled(terms, m):
    """S̃ = Σ c_i e^{a_i − M}."""
    return sp.Add(*[c * sp.exp(a - m) for c, a in terms])


def _factors(expr):
    """The factors of a product: ('exp', exponent) for e^{b}, ('sum', terms, power, factor) for an exponential sum
    to a real number power, ('other', factor) for anything else."""
    out: list[tuple] = []
    for f in sp.Mul.make_args(expr):
        if isinstance(f, sp.exp):
            out.append(("exp", f.args[0]))
            continue
        base, k = f.as_base_exp()
        terms = exp_terms(base) if k.is_number and k.is_real else None
        out.append(("sum", terms, k, f) if terms else ("other", f))
    return out


def bounded_where_positive(terms):
    """Whether every term whose coefficient is not known to be negative has a number exponent (c_0 − Σ c_i e^{a_i},
    c_i > 0): such a sum is positive only where each e^{a_i} < c_0/c_i, so under a logarithm it never overflows
    where the logarithm is real, and is left as it is (−log(1 − e^λ) keeps the printers' log1p, accurate to 1e-16 of
    its value where e^λ is small)."""
    return all(a.is_number for c, a in terms if c.is_negative is not True)


def _log_of(node):
    """log of a product with an exponential-sum factor: its exponentials taken out as exponents (module docstring)."""
    factors: list[tuple] = [("other", f[3]) if f[0] == "sum" and bounded_where_positive(f[1]) else f
                            for f in _factors(node.args[0])]
    if not any(f[0] == "sum" for f in factors):
        return node
    outside, inside = sp.Integer(0), []
    for f in factors:
        if f[0] == "exp":
            outside += f[1]
        elif f[0] == "other":
            inside.append(f[1])
        elif _is_positive(f[1]):
            outside += f[2] * log_sum_exp(f[1])
        else:
            m = largest_exponent(f[1])
            outside += f[2] * m
            inside.append(_scaled(f[1], m) ** f[2])
    rest = sp.Mul(*inside)
    return outside if rest == 1 else outside + sp.log(rest)


def _quotient(node):
    """A product with an exponential sum in its denominator as e^{E} times what is left (module docstring); any other
    product as it is."""
    factors = _factors(node)
    if not any(f[0] == "sum" and f[2] < 0 for f in factors):
        return node
    exponent, rest = sp.Integer(0), []
    for f in factors:
        if f[0] == "exp":
            exponent += f[1]
        elif f[0] == "other":
            rest.append(f[1])
        else:
            m = largest_exponent(f[1])
            exponent += f[2] * m
            rest.append(_scaled(f[1], m) ** f[2])
    return sp.exp(exponent) * sp.Mul(*rest)


@functools.lru_cache(maxsize=1 << 16)
def _normalized(node) -> bool:
    """Whether ``node`` holds an exponential of an expression with a Max (a term this lowering normalized),
    remembered per node: the printer asks it of every sum, and a sum's atoms walked afresh each time were quadratic
    in the expression (44 s of printing a 64-point support's μ and F)."""
    if isinstance(node, sp.exp) and node.args[0].has(sp.Max):
        return True
    return any(_normalized(a) for a in node.args)


@functools.lru_cache(maxsize=1 << 16)
def _maxima(node) -> frozenset:
    """``node.atoms(sp.Max)``, remembered per node: a sum's atoms walked afresh at each sum printed were 8 s of printing
    a Fisher information whose terms share the same normalized sums (blr_derive/families/partition.py
    centred_fisher)."""
    own = frozenset([node]) if isinstance(node, sp.Max) else frozenset()
    return own.union(*[_maxima(a) for a in node.args]) if node.args else own


def print_order(add, terms):
    """The order a printer writes the terms of a sum in (``terms``, the printer's own order) for a sum this lowering
    normalized: that of the sum it came from, each largest exponent M set to 0 (e^{a − M} → e^{a}), so that where
    M = 0 at run time the printed operations are the original's, in the original's order, and give its values bit
    for bit (a sum that cancels, the continuous Bernoulli's F next to λ = 0, keeps its rounding).  Any other sum, or
    one whose terms would not come back distinct, keeps the printer's order."""
    if not isinstance(add, sp.Add) or not _normalized(add):
        return terms
    zero = {m: sp.Integer(0) for m in _maxima(add)}
    originals = [t.xreplace(zero) for t in terms]
    if len(set(originals)) != len(originals):
        return terms
    order = sp.Add(*originals).as_ordered_terms()
    if set(order) != set(originals):
        return terms
    rank = {o: i for i, o in enumerate(order)}
    return [t for _, t in sorted(zip(originals, terms), key=lambda p: rank[p[0]])]
