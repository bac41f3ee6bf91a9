"""Mean-field (product) candidates: what their rules share (Secs. 5.2-5.4), applied by
``blr_derive/candidates/product.py`` block by block.

* identities: ``mean_field`` (Eq. 55), ``factor_messages`` (Eqs. 58-60), ``plate_sum`` (Eq. 54),
  ``stationarity`` (Sec. 5.2) and ``robbins_monro`` (Sec. 5.3);
* the record of a product derivation (:class:`FactorizedDerivation`) and its plate statistics
  (:class:`PlateSums`);
* expectations over the other blocks (exact for statistics they are linear in, Sec. 5.1).

The block steps themselves are rules' stages: ``exact`` (``Exact.product_block``: natural-gradient messages of
the factors) and ``delta`` (``Delta.product_block``: the stationary point of a parameter block).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from blr_derive.core import matcalc, matexpr
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.matexpr import is_mat, simplify_mat
from blr_derive.core.nodes import ComponentLogSumExp, ComponentSum
from blr_derive.core.specialfns import logsumexp
from blr_derive.core.pretty import pretty
from blr_derive.core.types import Assignment, Sym
from blr_derive.families.statistics import NotLinearInStatistics, separate_scalars, statistics_decomposition
from blr_derive.rules.base import RULES, Derivation, TexForm, rule
from blr_derive.spec.product import FactorizedRecipe

rule('mean_field', 'identity', 'Eq. 55; Secs. 5.2-5.3',
     "a candidate q = Π_b q_b over blocks of variables, updated coordinate-wise with the others' current q")
rule('factor_messages', 'identity', 'Eqs. 58-60',
     "λ_b ← (1-ρ_b)λ_b + ρ_b Σ_f λ̃_f: per-factor natural-gradient messages summed into the block's λ")
rule('plate_sum', 'identity', 'Eq. 54',
     'messages of i.i.d. data factors add up: per-row quantities enter the global blocks through plate sums')
rule('stationarity', 'identity', 'Sec. 5.2 (M-step)',
     'a delta block with ρ = 1 jumps to the stationary point ∇_θ E_q[ℓ] = 0 of its expected loss')
rule('robbins_monro', 'identity', 'Sec. 5.3 (SVI); Hoffman et al. (2013)',
     'learning-rate schedule ρ_t = (t + delay)^(-forgetting), forgetting in (1/2, 1]')


@dataclass
class FactorizedDerivation(Derivation[FactorizedRecipe]):
    """The record of a product candidate's derivation: the per-row program of the local blocks, the plate
    statistics, and the global program in coordinate order."""
    local_assign: list[Assignment] = field(default_factory=list)       # per plate row, in order
    local_outputs: list[tuple[str, Sym]] = field(default_factory=list)  # (name, symbol): per-row values returned
    stats: list[Assignment] = field(default_factory=list)              # (symbol, per-row expr): plate statistics
    scale: Assignment | None = None                                    # the minibatch scale N/B, or None
    count: Sym | None = None                                           # the statistic Σ_n 1 (rows of the plate)
    assignments: list[Assignment] = field(default_factory=list)        # global program, in order
    outputs: list[tuple[str, Sym]] = field(default_factory=list)       # (state name, symbol)
    row_symbols: set[Sym] = field(default_factory=set)                 # per-row symbols (plate data, local values)
    prelude: list[Assignment] = field(default_factory=list)            # first: parameters of message-form blocks
    #: block name -> [(state name, symbol, factor, index)]: one natural parameter per factor kept as state (Eq. 60)
    message_state: dict[str, list[tuple[str, Sym, str, int]]] = field(default_factory=dict)
    #: the rule that gave the bound under ``BOUND_KEY`` in the outputs (em_bound, mean_field_bound), or None
    bound_rule: str | None = None

    def update_lines(self, text=pretty):
        out = [f"{s} = {text(e)}" for s, e in self.prelude]
        if self.local_assign:
            idx = self.recipe.plate["index"]
            out.append(f"for each row {idx} of the plate:")
            out += [f"  {s} = {text(e)}" for s, e in self.local_assign]
        for s, e in self.stats:
            out.append(f"{s} = sum_{self.recipe.plate['index']} {text(e)}")
        if self.scale is not None:
            out.append(f"{self.scale[0]} = {text(self.scale[1])}")
        for s, e in self.assignments:
            out.append(f"{s} = {text(e)}")
        return out

    def final_equations(self):
        """The per-row program, the plate sums, the minibatch scale and the global program, as (lhs, rhs, op)."""
        idx = self.recipe.plate["index"] if self.recipe.plate else "n"
        return ([(s, e, "=") for s, e in self.local_assign]
                + [(s, TexForm(r"\sum_{%s} %s", (sp.Symbol(idx), e)), "=") for s, e in self.stats]
                + ([(self.scale[0], self.scale[1], "=")] if self.scale is not None else [])
                + [(s, e, r"\leftarrow") for s, e in self.assignments])


class PlateSums:
    """Bookkeeping of one derivation: plate statistics and the symbols that vary per row."""

    def __init__(self, R, D):
        self.R, self.D = R, D
        self.row = set()
        if R.plate:
            self.row |= {d.symbol for d in R.plate["data"]}
        self.dims = set(R.dims.values())
        self.stats = {}          # per-row expr -> statistic symbol
        self.rates = {}          # learning-rate schedule expression -> its symbol
        self.implied = {}        # block name -> (its last one-hot component, the symbol of that component's mean)
        self.sym = {b.variables[0] for b in R.blocks if b.symmetric}
        self.scale = None
        if R.plate is not None and R.plate.get("minibatch") is not None:
            self.scale = sp.Symbol("batch_scale", positive=True)
            D.symbol_names[self.scale] = r"\frac{N}{B}"

    def is_row(self, e):
        syms = e.free_symbols if isinstance(e, sp.Basic) else set()
        return bool(syms & self.row)

    def stat(self, d):
        if isinstance(d, sp.Transpose):
            return sp.Transpose(self.stat(d.arg))
        if d in self.stats:
            return self.stats[d]
        k = len(self.stats) + 1
        s = (sp.MatrixSymbol(f"sum{k}", *d.shape) if is_mat(d) else sp.Symbol(f"sum{k}", real=True))
        self.stats[d] = s
        self.D.stats.append((s, d))
        if d == 1:
            self.D.count = s
        return s

    def _split_scalar(self, c):
        row, glob = [], []
        for f in sp.Mul.make_args(c):
            if self.is_row(f):
                if (f.free_symbols - self.row - self.dims):
                    raise DerivationError(f"cannot separate the plate sum: {f} mixes per-row and global quantities")
                row.append(f)
            else:
                glob.append(f)
        row, glob = sp.Mul(*row), sp.Mul(*glob)
        if row.could_extract_minus_sign():       # one statistic for d and -d
            row, glob = -row, -glob
        return row, glob

    def _trace_sum(self, term, tr):
        """Σ_n of ``term`` = (scalar factors) × tr(chain) whose chain mixes per-row and global matrices: the chain
        is rotated (tr(AB) = tr(BA)) until its per-row factors are adjacent, and summed as a matrix chain, so
        Σ_n z_n tr(yₙᵀ L yₙ) = tr(L Σ_n z_n yₙ yₙᵀ)."""
        rest = sp.Mul(*[f for f in sp.Mul.make_args(term) if f is not tr])
        c, mats = matexpr.split_coeff(tr.arg.args) if isinstance(tr.arg, sp.MatMul) else (sp.Integer(1), [tr.arg])
        rest = rest * c
        n = len(mats)
        for r in range(n):
            chain = mats[r:] + mats[:r]
            idx = [i for i, m in enumerate(chain) if self.is_row(m)]
            if idx and idx == list(range(idx[0], idx[-1] + 1)):
                break
        else:
            raise DerivationError(f"cannot separate the plate sum of {term}: per-row factors are not adjacent")
        crow, cglob = self._split_scalar(rest)
        summed = self.plate_sum(sp.MatMul(crow, *chain) if crow != 1 else sp.MatMul(*chain))
        return cglob * sp.Trace(summed)

    def _mixed(self, f):
        """Whether ``f`` is a trace that holds per-row and global quantities together (tr(xₙᵀβ))."""
        return isinstance(f, sp.Trace) and self.is_row(f) and bool(f.free_symbols - self.row - self.dims)

    def _unrolled(self, term):
        """The factors of a product, a power tr(·)ᵏ of a mixed trace written as k factors (k ≤ 8)."""
        out = []
        for f in sp.Mul.make_args(term):
            if isinstance(f, sp.Pow) and self._mixed(f.base) and f.exp.is_Integer and 1 < f.exp <= 8:
                out += [f.base] * int(f.exp)
            else:
                out.append(f)
        return out

    def _one_by_one(self, tr):
        """The chains C with tr(·) = C, a 1×1 product: the rotations of the trace's product and of its transpose
        that are 1×1 (tr(βxᵀ) = xᵀβ = βᵀx); [] when there is none."""
        c, mats = matexpr.split_coeff(tr.arg.args) if isinstance(tr.arg, sp.MatMul) else (sp.Integer(1), [tr.arg])
        flipped = [simplify_mat(sp.Transpose(m), self.sym) for m in reversed(mats)]
        return c, [r for chain in (mats, flipped) for r in (chain[i:] + chain[:i] for i in range(len(chain)))
                   if r[0].shape[0] == 1 and r[-1].shape[1] == 1]

    def _contiguous(self, chain):
        idx = [i for i, m in enumerate(chain) if self.is_row(m)]
        if not idx or idx != list(range(idx[0], idx[-1] + 1)):
            return False
        return not any((m.free_symbols - self.row - self.dims) for m in chain[idx[0]:idx[-1] + 1])

    def _absorb(self, chain, traces, cyclic):
        """A chain equal to chain·Π tr(Cᵢ) (each tr(Cᵢ) a 1×1 product Cᵢ, placed where the chain's inner dimension
        is 1: s·x xᵀ = x (s) xᵀ, s·x = x s) whose per-row factors are adjacent, or None.  ``cyclic``: the chain is
        inside a trace, so any rotation of it will do."""
        coeff, forms = sp.Integer(1), []
        for t in traces:
            c, f = self._one_by_one(t)
            if not f:
                return None, coeff
            coeff *= c
            forms.append(f)
        budget = [20000]

        def places(ch):
            n = len(ch)
            dims = [ch[0].shape[0]] + [ch[i].shape[1] for i in range(n)]     # dims[i]: the dimension before ch[i]
            return [i for i in range(n + 1) if dims[i] == 1 and not (cyclic and i == n)]

        def search(ch, k):
            budget[0] -= 1
            if budget[0] < 0:
                return None
            if k == len(forms):
                rots = [ch[i:] + ch[:i] for i in range(len(ch))] if cyclic else [ch]
                return next((r for r in rots if self._contiguous(r)), None)
            for i in places(ch):
                for f in forms[k]:
                    got = search(ch[:i] + list(f) + ch[i:], k + 1)
                    if got is not None:
                        return got
            return None
        return search(list(chain), 0), coeff

    def _traces_sum(self, factors, mixed):
        """Σ_n of a product of scalars and several mixed traces: tr(A)·tr(C) = tr(A C) for a 1×1 product C, placed
        so that the per-row factors are adjacent: Σ_n (xₙᵀβ)² = βᵀ(Σ_n xₙxₙᵀ)β."""
        main, others = mixed[0], mixed[1:]
        rest = list(factors)
        for t in mixed:
            rest.remove(t)
        c, mats = matexpr.split_coeff(main.arg.args) if isinstance(main.arg, sp.MatMul) else (sp.Integer(1), [main.arg])
        chain, c2 = self._absorb(mats, others, cyclic=True)
        if chain is None:
            raise DerivationError(f"cannot separate the plate sum of {sp.Mul(*factors)}: its per-row and global "
                                  "factors do not separate into one product")
        crow, cglob = self._split_scalar(sp.Mul(*rest) * c * c2)
        summed = self.plate_sum(sp.MatMul(crow, *chain) if crow != 1 else sp.MatMul(*chain))
        return cglob * sp.Trace(summed)

    def _matrix_term(self, term, c, mats, sc):
        """Σ_n c·A₁⋯A_m (one term of a matrix expression) with its per-row factors summed into a plate statistic."""
        factors = self._unrolled(c)
        mixed = [f for f in factors if self._mixed(f)]
        if mixed:                    # Σ_n xₙ(xₙᵀβ) = (Σ_n xₙxₙᵀ)β: the traces' 1×1 products join the chain
            chain, c2 = self._absorb(mats, mixed, cyclic=False)
            if chain is None:
                raise DerivationError(f"cannot separate the plate sum of {term}: its per-row and global "
                                      "factors do not separate into one product")
            for t in mixed:
                factors.remove(t)
            c, mats = sp.Mul(*factors) * c2, chain
        crow, cglob = self._split_scalar(c)
        idx = [i for i, m in enumerate(mats) if self.is_row(m)]
        if idx and idx != list(range(idx[0], idx[-1] + 1)):
            raise DerivationError(f"cannot separate the plate sum of {term}: per-row factors are not adjacent")
        if idx:
            rowpart = mats[idx[0]:idx[-1] + 1]
            rm = rowpart[0] if len(rowpart) == 1 else sp.MatMul(*rowpart)
            if rm.free_symbols - self.row - self.dims:
                raise DerivationError(f"cannot separate the plate sum of {term}")
            d = rm if crow == 1 else sp.MatMul(crow, rm)
            if crow != 1 and isinstance(rm, sp.Transpose):
                d = sp.Transpose(sp.MatMul(crow, rm.arg))
            new = mats[:idx[0]] + [self.stat(d)] + mats[idx[-1] + 1:]
        else:
            new = [self.stat(crow) * mats[0]] + mats[1:] if mats else []
        cglob = cglob * sc
        return sp.MatMul(cglob, *new) if cglob != 1 else (sp.MatMul(*new) if len(new) > 1 else new[0])

    def plate_sum(self, e):
        """Σ_n e(row n) with per-row parts collected into plate statistics (sums the generated code forms)."""
        sc = self.scale if self.scale is not None else sp.Integer(1)
        if not is_mat(e):
            total = sp.Integer(0)
            for term in sp.Add.make_args(sp.expand(e)):
                factors = self._unrolled(term)
                mixed = [f for f in factors if self._mixed(f)]
                if len(mixed) == 1 and len(factors) == len(sp.Mul.make_args(term)):
                    # Σ_n c_n tr(mᵀ y_n) = tr(mᵀ Σ_n c_n y_n): the chain's row part summed
                    total += self._trace_sum(term, mixed[0])
                    continue
                if mixed:
                    total += self._traces_sum(factors, mixed)
                    continue
                row, glob = self._split_scalar(term)
                total += sc * glob * self.stat(row)
            return total
        e = simplify_mat(sp.expand(e), self.sym)
        terms = e.args if isinstance(e, sp.MatAdd) else (e,)
        out = []
        for term in terms:
            c, mats = matexpr.split_coeff(term.args) if isinstance(term, sp.MatMul) else (sp.Integer(1), [term])
            if any(self._mixed(t) for t in c.atoms(sp.Trace)):
                # a coefficient with traces of per-row and global quantities: each of its terms on its own
                out += [self._matrix_term(term, a, mats, sc) for a in sp.Add.make_args(sp.expand(c))]
                continue
            try:
                out.append(self._matrix_term(term, c, mats, sc))
            except DerivationError:
                parts = sp.Add.make_args(sp.expand(c))
                if len(parts) == 1:
                    raise
                # a coefficient that adds per-row and global scalars ((1 - z_n σ²)·w): each of its terms on its own
                out += [self._matrix_term(term, a, mats, sc) for a in parts]
        return simplify_mat(sp.MatAdd(*out) if len(out) > 1 else out[0], self.sym)


def tex_name(name):
    return r"\mathrm{%s}" % name.replace("_", r"\_")


def name_states(D, R):
    for b in R.blocks:
        for name, s, p in b.state:
            if p is not None:
                D.symbol_names[s] = r"{%s^{(%s)}}" % (sp.latex(p), tex_name(b.name))
            elif is_mat(s):
                D.symbol_names[s] = r"\mathbf{%s}" % b.name


def linear_in_block(b, e, symmetric=()):
    """linear_in_statistics of block b's family, with the block's variables renamed to the family's (other
    symbols that happen to share a name with the family's variable are kept apart); raises
    :class:`NotLinearInStatistics` whose message names the term and the block's statistics, in the recipe's names."""
    fam = b.family
    e = e.xreplace(b.constraint)         # a one-hot block's last component is one minus the others here
    fvars = set(b.to_family.values())
    protect = {s: sp.Dummy(s.name) for s in e.free_symbols if s in fvars and s not in b.to_family}
    back = {d: s for s, d in protect.items()}
    try:
        lin = statistics_decomposition(fam, e.xreplace(protect).xreplace(b.to_family), symmetric)
    except NotLinearInStatistics as exc:
        names = {**{f: v for v, f in b.to_family.items()}, **back}
        raise NotLinearInStatistics(*[x.xreplace(names) if x is not None else None for x in (exc.term, exc.part,
                                                                                              exc.inside)],
                                    [t.xreplace(names) for t in fam.T]) from None
    return lin[0].xreplace(back), [c.xreplace(back) for c in lin[1]]


def linear_in_log(e, w, symmetric=()):
    """(c0, c) with e = c0 + c·log w, both free of w (logarithms expanded; log w may sit inside matrix products, whose
    scalars are then taken out of the traces); None when e is not of that form."""
    t = sp.Dummy("log_w")
    for separate in (False, True):
        try:
            et = sp.expand(sp.expand_log(separate_scalars(e, symmetric) if separate else e, force=True))
            et = et.xreplace({sp.log(w): t})
            c = sp.diff(et, t)
        except (DerivationError, NotImplementedError, TypeError, ValueError):
            continue
        if not (et.has(w) or c.has(t, sp.Derivative)):
            return sp.expand(et.xreplace({t: 0})), c
    return None


def expect_over_blocks(R, ctx, e, skip, current):
    """E over every exact block except ``skip`` (mean field: one block at a time, each linear in its T)."""
    for b in R.blocks:
        if b is skip or not any(e.has(v) for v in b.variables):
            continue
        if b.one_hot:                  # the categorical over the components: z_k → its probability
            z = b.variables[0]
            if sp.diff(e, z).has(z):
                raise DerivationError(f"E over block '{b.name}' of {e} has no closed form: it is not linear in "
                                      f"the one-hot '{z}'")
            e = e.xreplace({z: b.state[0][1]})
            continue
        if b.simplex and b.family is None and b.approximation == "exact":     # the Dirichlet over the components
            w, a = b.variables[0], b.state[0][1]
            lin = linear_in_log(e, w)
            if lin is None:
                raise DerivationError(f"E over block '{b.name}' has no closed form: the expression is not linear in "
                                      f"log({w})")
            e = lin[0] + lin[1] * (sp.digamma(a) - sp.digamma(ComponentSum(a)))
            continue
        if b.family is None:
            continue
        try:
            c0, cs = linear_in_block(b, e, ctx.sym)
        except NotLinearInStatistics as exc:
            raise DerivationError(f"E over block '{b.name}' has no closed form: {exc}") from None
        mus = [m.xreplace({p: s for _, s, p in b.state}) for m in b.family.mu_ord]
        one_hot = one_hot_expectation(b, e, mus, ctx.implied.get(b.name))
        e = one_hot if one_hot is not None else c0 + sum((c * m for c, m in zip(cs, mus)), sp.Integer(0))
    return e.xreplace(current)


def one_hot_expectation(b, e, mus, implied):
    """E over a one-hot block whose last component's mean is a symbol of its own (``implied``: the block's step
    computed it directly from λ, e.g. exp(−logsumexp(0, λ)) for a categorical): each component replaced by its
    mean, so that the last one's probability is never 1 − Σ others (which loses all relative precision when it is
    small).  Valid when ``e`` is linear in the components jointly (each derivative free of them) and the family's
    statistics are the other components (then μ_k = E[θ_k]); None otherwise (the minimal-statistics path)."""
    if implied is None or not b.constraint:
        return None
    last, mean_last = implied
    comps = list(b.variables)
    fam_stats = [b.to_family[v] for v in comps[:-1]]
    if list(b.family.T) != fam_stats or len(mus) != len(fam_stats):
        return None
    if any(sp.diff(e, v).has(*comps) for v in comps):
        return None
    return e.xreplace({**dict(zip(comps[:-1], mus)), last: mean_last})


def positive_inverses(e, sym):
    """c·(X)⁻¹ becomes (X/c)⁻¹ with the scalar absorbed term by term, so that the generated Cholesky solve sees the
    positive-definite matrix (e.g. a covariance rather than minus half a scatter matrix times a count)."""
    if not is_mat(e):
        return e

    def flip_inv(c, inv):
        terms = []
        for t in inv.arg.args:
            tc, tm = matexpr.split_coeff(t.args) if isinstance(t, sp.MatMul) else (sp.Integer(1), [t])
            k = sp.factor_terms(sp.cancel(tc / c))
            terms.append(sp.MatMul(k, *tm) if k != 1 else (sp.MatMul(*tm) if len(tm) > 1 else tm[0]))
        return sp.Integer(1), sp.Inverse(sp.MatAdd(*terms))

    def flip(node):
        if isinstance(node, sp.MatAdd):
            return sp.MatAdd(*[flip(a) for a in node.args])
        c, mats = (matexpr.split_coeff(node.args) if isinstance(node, sp.MatMul) else (sp.Integer(1), [node]))
        if len(mats) == 1 and isinstance(mats[0], sp.Inverse) and isinstance(mats[0].arg, sp.MatAdd):
            c, inv = flip_inv(c, mats[0])
            return sp.MatMul(c, inv) if c != 1 else inv
        return node
    return flip(e)


def expected_gradients(R, D, ctx, b):
    """∇_θ E_{q_{−θ}}[ℓ] of a parameter block under the delta method (its value at the block's point, averaged
    over the other blocks), each plate factor's summed over the rows into plate statistics (Eq. 54)."""
    grads = None
    eqs = []
    for f in R.factors:
        if not any(f.expr.has(v) for v in b.variables):
            continue
        try:
            e = expect_over_blocks(R, ctx, f.expr, b, {})
            if is_mat(b.variables[0]):
                g = [matcalc.gradient(e, b.variables, ctx.sym)[0]]
            else:
                g = [sp.diff(sp.expand(e), v) for v in b.variables]
            if f.plate:
                g = [ctx.plate_sum(x) for x in g]
        except DerivationError as exc:
            raise SpecError(f"block '{b.name}', factor '{f.name}': {exc}", R.file, f.line or b.line) from None
        eqs += [(sp.Symbol(r"\nabla_{%s}\mathbb{E}[\bar\ell_{%s}]" % (sp.latex(v), tex_name(f.name))), x)
                for v, x in zip(b.variables, g)]
        grads = g if grads is None else [a + x for a, x in zip(grads, g)]
    if grads is None:
        raise SpecError(f"block '{b.name}' appears in no factor", R.file, b.line)
    D.add("delta", RULES["delta"].equation, f"Block `{b.name}`: delta method",
          f"q({b.name}) = N({b.name}_t, I) (Eq. 55): with the delta method the expected loss is its value at the mean, "
          "averaged over the other blocks; its gradient, summed over the plate rows into plate statistics "
          "(Eq. 54):", eqs)
    return grads


rule('em_bound', 'identity', 'Sec. 5.2 (EM); Eqs. 2, 56',
     'with point (delta) global blocks and the exact local E-step, min over q(z_n) of E[ℓ_n] − H(q(z_n)) is '
     '−log Σ_z exp(−ℓ_n(z, θ)) = c0_n − A(λ_n): the bound Σ_n (A(λ_n) − c0_n) − Σ_f ℓ_f(θ) is log p(y, θ) '
     'up to the constants the factors drop')

#: the key of the EM bound in the state a factorized module's step returns, and the symbol holding it
BOUND_KEY = "bound"
BOUND_SYMBOL = "evidence_bound"


def em_bound(R, D, ctx):
    """The bound an EM recipe reports per iteration (rule ``em_bound``), added to the derivation's outputs under
    ``BOUND_KEY``; nothing where it does not apply.

    It applies to a recipe with a plate (not a minibatch), one local block first in the order with the exact rule
    and ρ = 1 (the E-step, Eq. 56) whose family has base measure 1 and statistics its variables (the categorical,
    minimal or over the components), and only point (delta) global blocks (the M-step).  Then each plate factor is
    linear in the local statistics, ℓ_n = c0_n + ⟨c_n, T(z)⟩ at the state θ the step starts from, the E-step sets
    λ_n = −c_n, and min over q(z_n) of E_q[ℓ_n] − H(q(z_n)) (Eq. 2) is c0_n − A(λ_n) = −log Σ_z exp(−ℓ_n(z, θ)).
    The global factors (priors) enter at the point, the delta method (their entropy is a constant, dropped).  So
    −L = Σ_n (A(λ_n) − c0_n) − Σ_f ℓ_f(θ) = log p(y, θ) (+ the constants the factors drop): the marginal
    log-likelihood (plus the log-prior) at θ, which an EM step never decreases."""
    if R.plate is None or ctx.scale is not None:
        return
    local = [b for b in R.blocks if b.local]
    if (len(local) != 1 or R.blocks[0] is not local[0] or local[0].approximation != "exact" or local[0].rho != 1
            or any(b.approximation != "delta" for b in R.blocks if not b.local)):
        return
    b = local[0]
    # a name of the recipe's own (state, hyperparameter, data, variable) or of the derivation keeps it out
    names = ({name for bb in R.blocks for name, _, _ in bb.state} | {str(s) for s, _ in D.local_assign + D.assignments}
             | {str(v) for bb in R.blocks for v in bb.variables} | {h.name for h in R.hyper} | {d.name for d in R.data}
             | {d.name for d in R.plate["data"]})
    if names & {BOUND_KEY, BOUND_SYMBOL, f"{local[0].name}_row_bound"}:
        return
    row_loss = sp.Add(*[f.expr for f in R.factors if f.plate])
    glob = [f for f in R.factors if not f.plate]
    if b.one_hot:
        c0 = sp.simplify(row_loss.xreplace({b.variables[0]: 0}))
        log_z = sp.Symbol(f"{b.name}_log_partition", real=True)
        if c0 != 0 or log_z not in dict(D.local_assign):
            return
        row = log_z
        row_eqs = [(log_z, ComponentLogSumExp(sp.Symbol(f"{b.name}_lambda", real=True)), "=")]
    else:
        fam = b.family
        if fam is None:
            return
        n, thetas = len(fam.T), list(fam.theta) if isinstance(fam.theta, (list, tuple, sp.MatrixBase)) else [fam.theta]
        # T(z) = the first variables, the others implied by the one-hot constraint: T = 0 fixes z (a Gaussian's
        # T = (θ, θ²) and base measure are not this case: no bound)
        if (fam.log_h != 0 or list(fam.T) != thetas[:n]
                or any(v not in b.constraint for v in b.variables[n:])):
            return
        lam_new = [sp.Symbol(f"{b.name}_lambda{i + 1}", real=True) for i in range(len(fam.lam))]
        assigned = dict(D.local_assign)
        if any(l not in assigned for l in lam_new):
            return
        A = fam.A.xreplace(dict(zip(fam.lam, lam_new)))
        if isinstance(A, sp.log) and isinstance(A.args[0], sp.Add):
            parts = []
            for t in A.args[0].args:
                if isinstance(t, sp.exp):
                    parts.append(t.args[0])
                elif t.is_number and t.is_positive:
                    parts.append(sp.log(t))
                else:
                    parts = None
                    break
            if parts:
                A = logsumexp(*parts)
        zero = row_loss.xreplace(b.constraint).xreplace({v: 0 for v in b.variables})
        c0 = sp.expand(zero)
        row = sp.Symbol(f"{b.name}_row_bound", real=True)
        D.symbol_names[row] = r"B_{%s}" % tex_name(b.name)
        D.local_assign.append((row, A - c0))
        ctx.row.add(row)
        row_eqs = [(row, A - c0, "=")]
    total = ctx.stat(row)
    prior = sp.Add(*[ComponentSum(f.expr) if f.components else f.expr for f in glob])
    bound = sp.Symbol(BOUND_SYMBOL, real=True)
    D.symbol_names[bound] = r"\mathcal{B}"
    D.assignments.insert(0, (bound, total - prior))
    D.outputs.append((BOUND_KEY, bound))
    D.bound_rule = "em_bound"
    D.add("em_bound", RULES["em_bound"].equation, "The EM bound per iteration",
          "The global blocks are points and the local step is exact with ρ = 1, so at the state θ the step starts "
          "from, min over q(z_n) of E[ℓ_n] − H(q(z_n)) (Eq. 2) is −log Σ_z exp(−ℓ_n(z, θ)) = c0_n − A(λ_n), A the "
          "local family's log-partition at the E-step's λ_n and c0_n the factors at T(z) = 0.  Summed over the plate, "
          "with the global factors at the point (the delta method), −L(q) is the evidence bound the step returns as "
          f"'{BOUND_KEY}': log p(y, θ) at the state before the step, up to the constants the factors drop; an EM step "
          "never decreases it.",
          row_eqs + [(total, TexForm(r"\sum_{%s} %s", (sp.Symbol(R.plate["index"]), row)), "="),
                     (bound, total - prior, "=")])


rule('mean_field_bound', 'identity', 'Sec. 5.3 (VMP); Eqs. 2, 58',
     'with every block global, exact in a family (or a point) and the whole data set as the plate, each factor is '
     'linear in each block\'s statistics, so E_q[ℓ_f] under the product is its coefficients at the blocks\' μ: the '
     'bound −L(q) = Σ_b H(q_b) − Σ_n E_q[ℓ_n] − Σ_f E_q[ℓ_f] at the state the step starts from')

#: which rule gave a factorized derivation's bound (``FactorizedDerivation.bound_rule``)
BOUND_RULES = ("em_bound", "mean_field_bound")


def mean_field_bound(R, D, ctx):
    """The bound −L(q) (Eq. 2) of a product candidate whose blocks are all global and each exact in a family whose
    parameters are its state (or a point, the delta method: its constant entropy dropped), with the whole data set
    as the plate (not a minibatch), no message-form block and no component axis; added to the outputs under
    ``BOUND_KEY`` (rule ``mean_field_bound``), nothing where it does not apply or another rule gave the bound.

    Every factor is linear in each block's statistics (the condition of the blocks' exact steps), so under the
    product q = Π_b q_b its expectation is taken one block at a time, T_b replaced by μ_b (``expect_over_blocks``,
    the same expectation the messages use), the plate factors' summed over the rows into plate statistics; the
    entropy of each block is its family's, H(q_b) = A(λ) − ⟨λ, μ⟩ − E[log h] (App. B), in its state.  So
    −L(q) = Σ_b H(q_b) − Σ_n E_q[ℓ_n] − Σ_f E_q[ℓ_f] at the state the step starts from: the evidence lower bound
    up to the constants the factors drop.  A coordinate-wise exact step with ρ = 1 (VMP) never decreases it."""
    if any(name == BOUND_KEY for name, _ in D.outputs) or ctx.scale is not None or D.message_state:
        return
    if R.components is not None or any(b.local or b.one_hot for b in R.blocks):
        return
    if any(b.approximation not in ("exact", "delta") for b in R.blocks):
        return
    exact = [b for b in R.blocks if b.approximation == "exact"]
    if not exact or any(b.family is None or any(p is None for _, _, p in b.state) for b in exact):
        return
    names = ({name for bb in R.blocks for name, _, _ in bb.state} | {str(s) for s, _ in D.assignments}
             | {str(v) for bb in R.blocks for v in bb.variables} | {h.name for h in R.hyper} | {d.name for d in R.data}
             | ({d.name for d in R.plate["data"]} if R.plate is not None else set()))
    if names & {BOUND_KEY, BOUND_SYMBOL}:
        return
    try:
        entropy = sp.Integer(0)
        for b in exact:
            H = b.family.entropy()
            if not isinstance(H, sp.Basic) or H.has(sp.Integral) or is_mat(H):
                return
            entropy += H.xreplace({p.symbol if hasattr(p, "symbol") else p: s for _, s, p in b.state})
        rows = sp.Add(*[f.expr for f in R.factors if f.plate])
        glob = sp.Add(*[f.expr for f in R.factors if not f.plate])
        e_rows = expect_over_blocks(R, ctx, rows, None, {}) if rows != 0 else sp.Integer(0)
        e_glob = expect_over_blocks(R, ctx, glob, None, {}) if glob != 0 else sp.Integer(0)
        total = ctx.plate_sum(e_rows) if rows != 0 else sp.Integer(0)
    except (DerivationError, NotImplementedError, TypeError, ValueError):
        return
    if any(is_mat(x) for x in (entropy, total, e_glob)):
        return
    bound = sp.Symbol(BOUND_SYMBOL, real=True)
    D.symbol_names[bound] = r"\mathcal{B}"
    value = entropy - total - e_glob
    D.assignments.insert(0, (bound, value))
    D.outputs.append((BOUND_KEY, bound))
    D.bound_rule = "mean_field_bound"
    D.add("mean_field_bound", RULES["mean_field_bound"].equation, "The mean-field bound per iteration",
          "Every block is global, exact in its family (or a point) and the plate is the whole data set.  Each "
          "factor is linear in each block's statistics, so its expectation under the product q = Π_b q_b is taken "
          "one block at a time (T_b replaced by μ_b), the plate factors' summed into plate statistics; with the "
          "blocks' entropies (App. B), −L(q) (Eq. 2) at the state the step starts from is the evidence lower bound "
          f"the step returns as '{BOUND_KEY}', up to the constants the factors drop (the points' entropies, "
          "constants, are dropped).  A coordinate-wise exact step with ρ = 1 never decreases it.",
          [(sp.Symbol(r"H_{%s}" % tex_name(b.name)), b.family.entropy(), "=") for b in exact]
          + [(bound, value, "=")])
