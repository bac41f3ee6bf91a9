"""The Kronecker (matrix-normal) candidate: the BLR (Eq. 6) for one weight matrix W (rows × cols) under

    q(W) = MN(M, A⁻¹, G⁻¹),   vec(W) ~ N(vec(M), (A ⊗ G)⁻¹)                 (matrix_normal)

declared by a recipe over the full Gaussian (``family: gaussian_full``) with a ``kronecker: {rows, cols}`` section
(``blr_derive/spec/kronecker.py``).  Noisy K-FAC (Zhang, Sun, Duvenaud & Grosse, ICML 2018, Sec. 3.1, Alg. 1) and
K-FAC-style updates (Lin et al., "Structured inverse-free natural gradient", 2023/24) are this candidate with the
recipe's rules.  Derivation:

1. the full-Gaussian BLR over vec(W), derived by the single-family candidate with the recipe's other rules
   (Sec. 1.3.2, Eq. 12 with the delta method):  S ← (1-ρ)S + ρH,  m ← m - ρ S_{t+1}⁻¹ g;
2. its program mapped onto the structure: m = vec(M), S = A ⊗ G, the gradient oracle returns a rows×cols
   matrix, and the structure's rules act at three stages (``blr_derive/rules/kronecker.py``): a Kronecker Hessian
   (``kronecker_gauss_newton``), the prior's δI (``factored_tikhonov``), the precision update kept Kronecker
   (``kronecker_ema``);
3. the mean step read off the Kronecker identities (``kronecker_vec``): S⁻¹ vec(V) = vec(G⁻¹ V A⁻¹).

The full-Gaussian program is derived with its expectations E_q[∇ℓ], E_q[∇²ℓ] as oracle values at one point (the
``delta`` rule's program).  That point is the mean, unless the recipe names an expectation rule of the structure
(``monte_carlo``): its ``kronecker_expectation`` stage moves the oracles to samples W_k of q, and its
``kronecker_statistics`` stage averages what the other rules built from them (``blr_derive/rules/kronecker_sampling.py``).

Nothing here names an algorithm: the update is whatever the recipe's rules make of the full-Gaussian program.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import sympy as sp

from blr_derive.candidates.base import Candidate, register
from blr_derive.candidates.single import derive_single, parse_single
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.matexpr import is_mat, simplify_mat
from blr_derive.core.types import Expr, Sym
from blr_derive.core.yamlio import where
from blr_derive.families.library import load_family
from blr_derive.families.model import Family
from blr_derive.rules.args import Ctx
from blr_derive.rules.base import RULES, Derivation, OracleCall, Views
from blr_derive.rules.kronecker import Kron, KroneckerContext, interpret_matrix, interpret_vector
from blr_derive.spec.family import Param
from blr_derive.spec.hyper import Approx
from blr_derive.spec.kronecker import KroneckerRecipe, is_kronecker_spec, kronecker_recipe, split_kronecker

STAGES = ("kronecker_hessian", "kronecker_damping", "kronecker_statistics")
#: the expectation rule of the full-Gaussian program: its expectations as oracle values at one point
POINT_RULE = "delta"


@dataclass
class KroneckerFamily:
    """The matrix-normal candidate as the IR and the targets read a family: its state M, A, G."""
    name: str
    description: str
    reference: str
    params: dict[str, Param]
    base: Family                          # the full-Gaussian family over vec(W)
    symmetric: frozenset[Sym] = frozenset()
    gaussian_mean: Sym | None = None      # M
    gaussian_cov: Expr | None = None
    elementwise: bool = False
    mu_inverse: str = "symbolic"
    lam: list[Expr] = field(default_factory=list)
    eta: list[Expr] = field(default_factory=list)
    dim: Expr | None = None
    theta: Sym | None = None              # W (rows × cols)
    sampler_accept: Expr | None = None    # no rejection sampler
    ord_from_nat: dict[Sym, Expr] = field(default_factory=dict)   # no closed-form ordinary(λ) of (M, A, G)

    @property
    def is_gaussian(self) -> bool:
        return True

    @property
    def free_params(self):
        return list(self.params.values())


def matrix_normal(base, rows, cols):
    M = sp.MatrixSymbol("M", rows, cols)
    A = sp.MatrixSymbol("A", cols, cols)
    G = sp.MatrixSymbol("G", rows, rows)
    params = {"M": Param("M", M, "matrix", "real", description="mean of W (rows × cols)"),
              "A": Param("A", A, "matrix", "positive_definite", description="column (input) precision factor"),
              "G": Param("G", G, "matrix", "positive_definite", description="row (output) precision factor")}
    fam = KroneckerFamily("matrix_normal", f"MN(M, A⁻¹, G⁻¹): {base.name} over vec(W) with precision A ⊗ G",
                          "Gupta & Nagar (2000); Zhang et al. (2018) Sec. 3.1", params, base, frozenset({A, G}), M,
                          theta=sp.MatrixSymbol("W", rows, cols))
    return fam, M, A, G


def check_base(recipe):
    fam = recipe.family
    cov = fam.gaussian_cov
    if not (fam.is_gaussian and not fam.elementwise and is_mat(fam.gaussian_mean) and is_mat(cov)
            and cov.shape[1] != 1):
        raise SpecError(f"a kronecker section needs a full-covariance Gaussian over a vector (family: gaussian_full), "
                        f"not '{fam.name}'", *where(recipe.spec, "family"))


def fail(recipe, msg, approx=None):
    line = approx.line if approx is not None else recipe.kronecker.line
    return SpecError(msg, recipe.file, line)


def split_rules(recipe):
    """(the structure's rules with their entries, the other approximations: those of the full-Gaussian BLR)."""
    own, inner = [], []
    for a in recipe.approximations:
        r = RULES[a.name]
        if "kronecker" in r.structures:
            own.append((r, a))
        else:
            inner.append(a)
    sampled = [a for r, a in own if r.kind == "expectation"]
    if sampled:
        named = sampled + [a for a in inner if RULES[a.name].kind == "expectation"]
        if len(named) > 1:
            raise fail(recipe, "at most one expectation rule may be named (got " + ", ".join(a.name for a in named)
                       + ")", named[1])
        inner = [Approx(POINT_RULE, {}, sampled[0].line)] + inner
    return own, inner


def apply_stage(own, stage, kctx, D, *extra):
    """Every structure rule that takes part in ``stage``, in recipe order."""
    for r, a in own:
        fn = getattr(r, stage, None)
        if fn is not None:
            kctx.approx = a
            fn(kctx, Ctx(D, a), *extra)


def map_oracles(recipe, full, D, kctx, env, m):
    """The full Gaussian's vector oracles (at m) become rows×cols oracles at ``kctx.mean_point`` (M, or the sample
    W_k under monte_carlo); its P×P oracles (the Hessian) are left to a Kronecker Hessian rule.  Returns (the P×P oracle symbols, the gradient's full symbol)."""
    rows, cols, M = kctx.rows, kctx.cols, kctx.M
    hess_calls, grad_sym = [], None
    for sym, oracle, arg, desc in full.oracle_calls:
        if arg != m:
            raise fail(recipe, f"oracle '{oracle}' is not evaluated at the mean")
        if sym.shape == m.shape:
            msym = sp.MatrixSymbol(str(sym), rows, cols)
            D.symbol_names[msym] = full.symbol_names.get(sym, str(sym))
            if kctx.mean_point != M:
                desc = desc.replace("at the mean (delta method)", "at the sample")
            D.oracle_calls.append(OracleCall(msym, oracle, kctx.mean_point, desc.replace("θ", "W")))
            env[sym] = msym
            if oracle == "grad":
                kctx.grad, grad_sym = msym, sym
        else:
            hess_calls.append(sym)
    if kctx.grad is None:
        raise fail(recipe, "the full-Gaussian BLR has no gradient oracle to map")
    return hess_calls, grad_sym


def derive_kronecker(recipe: KroneckerRecipe) -> Derivation:
    check_base(recipe)
    own, inner = split_rules(recipe)
    full = derive_single(dataclasses.replace(recipe, approximations=inner))
    if full.sampling is not None or full.defs or full.aux_state or full.federated is not None:
        raise fail(recipe, "the Kronecker candidate maps the full-Gaussian BLR with oracles at the mean (the delta "
                           "method) and no update passes")
    ks = recipe.kronecker
    rows = sp.Symbol(ks.rows, integer=True, positive=True)
    cols = sp.Symbol(ks.cols, integer=True, positive=True)
    kfam, M, A, G = matrix_normal(recipe.family, rows, cols)
    D = Derivation(dataclasses.replace(recipe, family=kfam))
    D.symbol_names.update(full.symbol_names)
    D.symbol_names.update({M: r"\mathbf{M}", A: r"\mathbf{A}", G: r"\mathbf{G}"})
    base = recipe.family
    m, S = base.gaussian_mean, next(p.symbol for p in base.params.values() if is_mat(p.symbol)
                                     and p.symbol.shape[1] != 1)
    P = base.dim
    D.add("matrix_normal", RULES["matrix_normal"].equation, "Matrix-normal candidate",
          f"The candidate is the Gaussian over vec(W) (W: {rows} × {cols}, column-major vec, P = {rows}·{cols}) with "
          "mean vec(M) and precision A ⊗ G; the BLR of the full Gaussian is derived first and its program is "
          "then written in M, A, G.",
          [(m, sp.Symbol(r"\operatorname{vec}(\mathbf{M})")), (S, sp.KroneckerProduct(A, G))]
          + ([(P, rows * cols)] if P is not None else []))
    sampled = any(r.kind == "expectation" for r, _ in own)
    D.steps.extend(s for s in full.steps if not (sampled and s.rule == POINT_RULE))
    env = {S: Kron([(sp.Integer(1), A, G)]), m: M}
    kctx = KroneckerContext(recipe, D, rows, cols, M, A, G, D.recipe.hyper_symbol(recipe.learning_rate), M,
                            sym={A, G}, env=dict(env), base=(m, S))
    before = len(D.steps)
    apply_stage(own, "kronecker_expectation", kctx, D)
    if sampled:             # the samples' steps stand where the point's step stood in the full Gaussian's derivation
        new = D.steps[before:]
        del D.steps[before:]
        at = before - (len(full.steps) - 1) + next(i for i, s in enumerate(full.steps) if s.rule == POINT_RULE)
        D.steps[at:at] = new
    hess_calls, grad_sym = map_oracles(recipe, full, D, kctx, env, m)
    for stage in STAGES:
        apply_stage(own, stage, kctx, D)
    if hess_calls and kctx.hess is None:
        raise fail(recipe, "the Hessian of the full Gaussian is a P×P oracle: a Kronecker candidate needs a "
                           "Kronecker-factored Hessian (add 'kronecker_gauss_newton')")
    for h in hess_calls:
        env[h] = kctx.hess
    env[grad_sym] = kctx.grad
    sym = {A, G}
    A_new, G_new = sp.MatrixSymbol("A_new", cols, cols), sp.MatrixSymbol("G_new", rows, rows)
    M_new = sp.MatrixSymbol("M_new", rows, cols)
    D.symbol_names.update({A_new: r"\mathbf{A}_{t+1}", G_new: r"\mathbf{G}_{t+1}", M_new: r"\mathbf{M}_{t+1}"})
    updates = {name: (s, e) for name, s, e in full.updates}
    try:
        for name, s, e in full.updates:
            if name == S.name:
                S_new = interpret_matrix(e, env)
                apply_stage(own, "kronecker_projection", kctx, D, S_new)
                if kctx.precision_new is None:
                    raise fail(recipe, "the precision update (1-ρ)A ⊗ G + ρ L ⊗ R is not one Kronecker product: "
                                       "name how it is kept Kronecker (add 'kronecker_ema')")
                ea, eg = (simplify_mat(x, sym) for x in kctx.precision_new)
                D.updates += [("A", A_new, ea), ("G", G_new, eg)]
                env[s] = Kron([(sp.Integer(1), A_new, G_new)])
                sym |= {A_new, G_new}
        s_m, e_m = updates[m.name]
        env[m] = M
        new_mean = interpret_vector(e_m, env, sym)
    except DerivationError as exc:
        raise fail(recipe, f"cannot write the full-Gaussian update in the Kronecker structure: {exc}") from None
    D.updates.append(("M", M_new, new_mean))
    D.add("kronecker_vec", RULES["kronecker_vec"].equation, "Update of M",
          "The mean step of the full Gaussian, written with (A ⊗ G)⁻¹ = A⁻¹ ⊗ G⁻¹ and (A⁻¹ ⊗ G⁻¹) vec(V) = "
          "vec(G⁻¹ V A⁻¹) (A, G symmetric): no P×P matrix is formed.",
          [(s_m, e_m, r"\leftarrow"), (M_new, new_mean, r"\leftarrow")])
    D.views = Views(grad=kctx.grad, state={"M": M, "A": A, "G": G})
    return D


class Kronecker(Candidate):
    name = "kronecker"
    noun = "a Kronecker (matrix-normal)"
    declared_as = "kronecker: {rows: NAME, cols: NAME}"
    priority = 30

    def claims(self, spec) -> bool:
        return is_kronecker_spec(spec)

    def parse(self, spec, file, base_dir):
        inner, ks = split_kronecker(spec)
        recipe = parse_single(inner, file, base_dir, lambda ref: load_family(ref, base_dir))
        return kronecker_recipe(recipe, ks)

    def owns(self, recipe) -> bool:
        return isinstance(recipe, KroneckerRecipe)

    def derive(self, recipe):
        return derive_kronecker(recipe)


register(Kronecker())
