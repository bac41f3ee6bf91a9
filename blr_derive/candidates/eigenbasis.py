"""The eigenbasis candidate: the BLR (Eq. 6) for one weight matrix W (rows × cols) under a Gaussian whose precision is
diagonal in a Kronecker basis,

    vec(W) ~ N(vec(M), S⁻¹),   S = Q diag(vec(s)) Qᵀ,   Q = Q_R ⊗ Q_L orthogonal           (eigenbasis_rotation)

declared by a recipe over the mean-field Gaussian (``family: gaussian_diag``) with an ``eigenbasis: {rows, cols}``
section (``blr_derive/spec/eigenbasis.py``).  Derivation:

1. the diagonal Gaussian's BLR in the coordinates θ' = Qᵀ vec(W), derived by the single-family candidate with the
   recipe's other rules (Sec. 1.3.2, Eq. 12 with a diagonal precision; the delta method and the rules that make it
   RMSprop/Adam, Sec. 4.2, Eqs. 34-38): an elementwise program over rows × cols arrays;
2. its gradient oracle mapped onto the structure: g' = Q_Lᵀ G Q_R with G = ∇_W ℓ at M (the chain rule of the
   orthogonal change of variables); the mean's step rotated back, M ← M + Q_L ΔM' Q_Rᵀ, where ΔM' is the program's
   step of the rotated mean (a part c·M' with c a number is applied to M directly: cM' = Q_Lᵀ(cM)Q_R); the rotated
   mean M' = Q_Lᵀ M Q_R is computed only where the program reads it otherwise;
3. the structure's rules at the stage ``eigenbasis_refresh`` (how the basis moves, e.g. ``kronecker_eigenbasis``);
   without one the basis stays as given.

Nothing here names an algorithm: the update is whatever the recipe's rules make of the diagonal Gaussian's program.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import sympy as sp

from blr_derive.candidates.base import Candidate, register
from blr_derive.candidates.single import derive_single, parse_single
from blr_derive.core.errors import SpecError
from blr_derive.core.types import Expr, Sym
from blr_derive.core.yamlio import where
from blr_derive.families.library import load_family
from blr_derive.families.model import Family
from blr_derive.rules.args import Ctx
from blr_derive.rules.base import RULES, Derivation, OracleCall, Sampling, StateVar, Views
from blr_derive.rules.eigenbasis import EigenbasisContext, EntryOf, Entrywise
from blr_derive.spec.eigenbasis import EigenbasisRecipe, eigenbasis_recipe, is_eigenbasis_spec, split_eigenbasis
from blr_derive.spec.family import Param


@dataclass
class EigenbasisFamily:
    """The candidate as the IR and the targets read a family: its state M, s, Q_L, Q_R."""
    name: str
    description: str
    reference: str
    params: dict[str, Param]
    base: Family                          # the mean-field Gaussian of the rotated coordinates
    symmetric: frozenset[Sym] = frozenset()
    gaussian_mean: Sym | None = None      # M
    gaussian_cov: Expr | None = None
    elementwise: bool = False
    mu_inverse: str = "symbolic"
    lam: list[Expr] = field(default_factory=list)
    eta: list[Expr] = field(default_factory=list)
    dim: Expr | None = None
    theta: Sym | None = None              # W (rows × cols)
    sampler_accept: Expr | None = None
    ord_from_nat: dict[Sym, Expr] = field(default_factory=dict)

    @property
    def is_gaussian(self) -> bool:
        return True

    @property
    def free_params(self):
        return list(self.params.values())

    def entropy(self):
        """H(q) of vec(W) ~ N(vec(M), (Q diag(vec(s)) Qᵀ)⁻¹): Q is orthogonal (|det Q| = 1), so it is the entropy of
        the mean-field Gaussian of the rotated coordinates θ' = Qᵀ vec(W) (App. B), per coordinate in s."""
        return self.base.entropy()


def fail(recipe, msg, approx=None):
    line = approx.line if approx is not None else recipe.eigenbasis.line
    return SpecError(msg, recipe.file, line)


def check_base(recipe):
    fam = recipe.family
    if not (fam.is_gaussian and fam.elementwise and fam.gaussian_mean is not None):
        raise SpecError(f"an eigenbasis section needs the mean-field Gaussian (family: gaussian_diag), not "
                        f"'{fam.name}'", *where(recipe.spec, "family"))


def split_rules(recipe):
    own, inner = [], []
    for a in recipe.approximations:
        r = RULES[a.name]
        (own if "eigenbasis" in r.structures else inner).append((r, a) if "eigenbasis" in r.structures else a)
    return own, inner


def derive_eigenbasis(recipe: EigenbasisRecipe) -> Derivation:
    check_base(recipe)
    own, inner = split_rules(recipe)
    diag = derive_single(dataclasses.replace(recipe, approximations=inner))
    if diag.federated is not None or diag.component_axis is not None:
        raise fail(recipe, "the eigenbasis candidate maps the diagonal Gaussian's BLR of one weight matrix (not a "
                           "federated or mixture program)")
    base = recipe.family
    m = base.gaussian_mean
    sm = diag.sampling
    if sm is not None:
        check_sampling(recipe, diag, m)
        g = sm.calls[0][0]
    else:
        grads = [c for c in diag.oracle_calls if c.oracle == "grad"]
        if len(diag.oracle_calls) != 1 or not grads or grads[0].argument != m:
            raise fail(recipe, "the eigenbasis candidate maps a program whose only oracle is the gradient at the mean "
                               f"(got {', '.join(c.oracle for c in diag.oracle_calls) or 'none'}); estimate the "
                               "Hessian from the gradient (e.g. squared_gradient_hessian, or price_estimator at "
                               "samples of monte_carlo) and use an abstract loss")
        g = grads[0].symbol
    es = recipe.eigenbasis
    rows = sp.Symbol(es.rows, integer=True, positive=True)
    cols = sp.Symbol(es.cols, integer=True, positive=True)
    M = sp.MatrixSymbol("M", rows, cols)
    G = sp.MatrixSymbol("G", rows, cols)
    QL, QR = sp.MatrixSymbol("Q_L", rows, rows), sp.MatrixSymbol("Q_R", cols, cols)
    mean_name = next(p.name for p in base.params.values() if p.symbol == m)
    params = {"M": Param("M", M, "matrix", "real", description="mean of W (rows × cols)")}
    for p in base.params.values():
        if p.symbol != m:
            params[p.name] = p
    params["Q_L"] = Param("Q_L", QL, "matrix", "real", description="left (row) basis, orthogonal")
    params["Q_R"] = Param("Q_R", QR, "matrix", "real", description="right (column) basis, orthogonal")
    fam = EigenbasisFamily("eigenbasis_gaussian", f"{base.name} in the basis Q_R ⊗ Q_L: vec(W) ~ N(vec(M), "
                           "(Q diag(s) Qᵀ)⁻¹)", "Khan & Rue (2023) Eq. 6 in θ' = Qᵀθ", params, base,
                           gaussian_mean=M, theta=sp.MatrixSymbol("W", rows, cols))
    D = Derivation(dataclasses.replace(recipe, family=fam))
    # the loss the objective reads (ir/objective.py): a scale (minibatch) is the same in any basis; an added prior
    # R(θ') is written in the rotated coordinates, whose expectation in M, s, Q_L, Q_R is not derived: not followed
    lm = diag.loss_model
    D.loss_model = dataclasses.replace(lm)
    if lm.prior != 0 or lm.family_prior is not None:
        D.loss_model.unfollow("the loss model adds a prior in the rotated coordinates θ' = Qᵀ vec(W) of the "
                              "Kronecker eigenbasis (Q = Q_R ⊗ Q_L), whose expectation in the state (M, the "
                              "precisions, Q_L, Q_R) is not derived")
    D.symbol_names.update(diag.symbol_names)
    D.renamed.update(diag.renamed)      # change_variable: the state stores the new variable
    D.state_vars.update(diag.state_vars)
    for old, (new, nsym, _) in diag.renamed.items():
        # the random valid states of the checks draw it as the elementwise checks draw a renamed coordinate: in the
        # domain of the parameter it replaces (e.g. IVON's h for s = ess (h + δ): positive values are valid)
        D.state_vars.setdefault(new, StateVar(new, nsym, base.params[old].domain, old))
    D.symbol_names.update({M: r"\mathbf{M}", G: r"\mathbf{G}", QL: r"\mathbf{Q}_L", QR: r"\mathbf{Q}_R"})
    D.add("eigenbasis_rotation", RULES["eigenbasis_rotation"].equation, "Gaussian diagonal in a Kronecker basis",
          f"The candidate is the Gaussian over vec(W) (W: {rows} × {cols}) with mean vec(M) and precision "
          "Q diag(vec(s)) Qᵀ, Q = Q_R ⊗ Q_L orthogonal.  With the basis fixed, θ' = Qᵀ vec(W) = vec(Q_Lᵀ W Q_R) "
          "is a mean-field Gaussian: the diagonal Gaussian's BLR is derived first, in θ', and its program is then "
          "written in M, s, Q_L, Q_R.",
          [(sp.Symbol(r"\theta'"), QL.T * sp.MatrixSymbol("W", rows, cols) * QR)])
    D.steps.extend(diag.steps)
    D.step_symbol = diag.step_symbol
    D.elementwise = True
    D.aux_state = list(diag.aux_state)
    D.frozen, D.verbatim = set(diag.frozen), set(diag.verbatim)
    if sm is None:
        D.oracle_calls.append(OracleCall(G, "grad", M, grads[0].description.replace("θ", "W")))
        D.defs.append((g, QL.T * G * QR))
    else:
        G = sample_in_basis(D, sm, m, M, QL, QR, rows, cols)
    updates = list(diag.updates)
    s_m, e_m = next((s, e) for n, s, e in updates if n == mean_name)
    others = [e for _, e in diag.defs] + [e for n, _, e in updates if n != mean_name]
    step_m = sp.expand(e_m - m)
    c = step_m.coeff(m) if step_m.is_Add or step_m.has(m) else sp.Integer(0)
    rest = sp.expand(step_m - c * m)
    elementwise = {p.symbol for p in base.params.values()} | {a.symbol for a in diag.aux_state} \
        | {a.new_symbol for a in diag.aux_state} | {s for s, _ in diag.defs} | {s for _, s, _ in updates} | {g} \
        | ({a for a, _ in sm.stats} if sm is not None else set())
    scalar_c = not (c.free_symbols & elementwise)
    if not scalar_c:
        c, rest = sp.Integer(0), step_m
    rotated_mean = any(e.has(m) for e in others) or rest.has(m)
    if rotated_mean:
        D.defs.append((m, QL.T * M * QR))
    D.defs.extend(diag.defs)
    M_new = sp.MatrixSymbol("M_new", rows, cols)
    new_M = (1 + c) * M + QL * Entrywise(sp.factor_terms(rest), rows, cols) * QR.T
    D.symbol_names[M_new] = r"\mathbf{M}_{t+1}"
    D.add("eigenbasis_rotation", RULES["eigenbasis_rotation"].equation, "Update of M",
          "The diagonal program's gradient is the rotated gradient g' = Q_Lᵀ G Q_R (chain rule of θ' = Qᵀθ, Q "
          "orthogonal), and its step of the rotated mean is rotated back: M ← M + Q_L ΔM' Q_Rᵀ"
          + (" (the part proportional to M' applied to M directly)." if c != 0 else "."),
          [(g, QL.T * G * QR, "="), (M_new, new_M, r"\leftarrow")])
    ectx = EigenbasisContext(D, rows, cols, G, QL, QR, step=D.step_symbol,
                             carried={n: s for n, s, _ in updates if n != mean_name})
    for r, a in own:
        fn = getattr(r, "eigenbasis_refresh", None)
        if fn is not None:
            ectx.approx = a
            fn(ectx, Ctx(D, a))
    for n, s, e in updates:
        if n == mean_name:
            D.updates.append(("M", M_new, new_M))
        elif n in ectx.state_after:
            out, expr = ectx.state_after[n]
            D.defs.append((s, e))
            D.updates.append((n, out, expr))
        else:
            D.updates.append((n, s, e))
    fam.symmetric = frozenset(ectx.symmetric)
    if ectx.QL_new is None:              # no rule moves the basis: it is a fixed parameter, returned as given
        for k in ("Q_L", "Q_R"):
            fam.params[k] = dataclasses.replace(fam.params[k], fixed=True)
    else:
        D.updates += [("Q_L", sp.MatrixSymbol("Q_L_new", rows, rows), ectx.QL_new),
                      ("Q_R", sp.MatrixSymbol("Q_R_new", cols, cols), ectx.QR_new)]
    D.views = Views(grad=G, state={"M": M, "Q_L": QL, "Q_R": QR})
    return D


def check_sampling(recipe, diag, m):
    """The Monte Carlo programs the candidate maps: normal draws, one gradient at each sample θ_k = m + δ(ε, state)
    (the diagonal Gaussian's reparameterisation), averaged statistics of the draw, the state and that gradient."""
    sm = diag.sampling
    dev = sp.expand(sm.theta_expr - m)
    ok = (sm.draw == "normal" and not sm.more_draws and sm.accept is None and sm.shaping is None
          and not sm.reductions and not sm.chained and not sm.views and sm.covariance_factor is None
          and not diag.oracle_calls and [o for _, o in sm.calls] == ["grad"] and not dev.has(m)
          and not dev.has(sm.theta) and not any(e.has(sm.theta) for _, e in sm.stats))
    if not ok:
        raise fail(recipe, "the eigenbasis candidate samples the rotated coordinates with normal draws and takes "
                           "only the gradient at each sample (monte_carlo with price_estimator or a gradient "
                           "Hessian estimate, an abstract loss)")


def sample_in_basis(D, sm, m, M, QL, QR, rows, cols):
    """The diagonal program's Monte Carlo over θ' = Qᵀ vec(W) written in W: the rotated sample θ'_k = m' + δ_k is
    W_k = M + Q_L [δ_k] Q_Rᵀ (vec(Q_L X Q_Rᵀ) = Q vec(X)); the gradient there, G_k = ∇_W ℓ(W_k), enters every
    per-sample statistic rotated, g'_k = Q_Lᵀ G_k Q_R (chain rule); the structure's rules read the average Ḡ of the
    G_k.  Returns Ḡ."""
    g_k = sm.calls[0][0]
    W_k = sp.MatrixSymbol("W_k", rows, cols)
    G_k = sp.MatrixSymbol("G_k", rows, cols)
    G_bar = sp.MatrixSymbol("G_bar", rows, cols)
    dev = sp.expand(sm.theta_expr - m)
    rotated = EntryOf(QL.T * G_k * QR)
    stats = [(a, e.xreplace({g_k: rotated})) for a, e in sm.stats]
    stats.append((G_bar, G_k))
    theta = M + QL * Entrywise(sp.factor_terms(dev), rows, cols) * QR.T
    D.sampling = Sampling(sm.samples, sm.eps, W_k, theta, [(G_k, "grad")], stats, draw="normal")
    D.symbol_names.update({W_k: r"\mathbf{W}_k", G_k: r"\mathbf{G}_k", G_bar: r"\bar{\mathbf{G}}"})
    D.add("eigenbasis_rotation", RULES["eigenbasis_rotation"].equation, "Samples in the basis",
          "The diagonal program's samples of θ' = Qᵀ vec(W) are θ'_k = M' + δ_k with δ_k a draw of the rotated "
          "Gaussian; in W they are W_k = M + Q_L δ_k Q_Rᵀ.  The gradient at W_k enters the program's per-sample "
          "statistics rotated, g'_k = Q_Lᵀ G_k Q_R; the basis' rules read the average Ḡ of the gradients.",
          [(W_k, theta, "="), (g_k, QL.T * G_k * QR, "=")])
    return G_bar


class EigenbasisCandidate(Candidate):
    name = "eigenbasis"
    noun = "an eigenbasis (diagonal in a Kronecker basis)"
    declared_as = "eigenbasis: {rows: NAME, cols: NAME}"
    priority = 31

    def claims(self, spec) -> bool:
        return is_eigenbasis_spec(spec)

    def parse(self, spec, file, base_dir):
        inner, es = split_eigenbasis(spec)
        recipe = parse_single(inner, file, base_dir, lambda ref: load_family(ref, base_dir))
        return eigenbasis_recipe(recipe, es)

    def owns(self, recipe) -> bool:
        return isinstance(recipe, EigenbasisRecipe)

    def derive(self, recipe):
        return derive_eigenbasis(recipe)


register(EigenbasisCandidate())
