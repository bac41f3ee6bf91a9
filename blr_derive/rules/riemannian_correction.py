"""``riemannian_correction`` — the improved BLR of Lin, Schmidt & Khan (ICML 2020, *Handling the positive-definite
constraint in the Bayesian learning rule*): a parameter p of the family that the BLR moves by p ← p + ρG keeps its
constraint (a positive precision, a positive-definite precision matrix) when the step is completed to a second-order
retraction of the Fisher–Rao geometry,

    p ← p + ρG − ρ²/2 · Γ_p(G, G),

with Γ the Christoffel symbols of the Fisher metric (Lin et al. 2020, Eq. 8 and Sec. 3: the Riemannian gradient
step with a retraction; Khan & Rue 2023 Sec. 4.2 and IVON's precision update).  G = ∂p_{t+1}/∂ρ is read off the
derived update (an update of p that is not affine in ρ is refused).

Nothing is written per family: the correction is derived from the family's log-partition.  With the other
parameters held fixed, the family's natural parameters must be affine in p (checked: λ = (Sm, −S/2) is affine in S
for fixed m); then q is an exponential family in the coordinate p itself with log-partition Ã(p) = A(λ(p)) (Lin et
al.'s block-coordinate natural parameterization), its Fisher metric is g = D²Ã and its Levi-Civita symbols are

    g(Γ(U, V), W) = ½ D³Ã[U, V, W]            (the Christoffel symbols of the first kind of a Hessian metric),

taken by matrix differential calculus (``core/matcalc``) and solved for Γ(G, G).  For the Gaussian precision
Ã(S) = ½ mᵀSm − ½ log|S|, D²Ã[U, W] = ½ tr(S⁻¹US⁻¹W), D³Ã[G, G, W] = −tr(S⁻¹GS⁻¹GS⁻¹W), so Γ(G, G) = −G S⁻¹ G and

    S ← S + ρG + ρ²/2 · G S⁻¹ G = ½(S + (S + ρG) S⁻¹ (S + ρG))   (Lin et al. 2020, Eq. 12),

positive definite for any ρ and any symmetric G (an indefinite Hessian estimate); elementwise
s ← (1 − ρ)s + ρT + ρ²(s − T)²/(2s) (IVON's update, Shen et al. 2024), the same for an isotropic precision.

Where it acts (argument ``param``: the family's parameter):

* the update of ``param`` of a single-family recipe;
* the update of ``param`` of every free component of a mixture (one state per component, or the components as an
  array axis): the same derived term at each component's own parameters (Lin et al. 2020, App. J);
* with ``server: <condition>`` (a boolean hyperparameter or a comparison), also the server step of federated
  Bayesian ADMM (``blr_derive/rules/federated.py``): the server's solve is the BLR step
  λ_g = (1 − α) λ̄ + α (λ_0 + Σ_k η_k), α = 1/(1 + Kρ_s), from the clients' mean natural parameter λ̄, so its
  precision is completed at p̄ = p(λ̄) to p_g = p + (−½)Γ_p̄(p − p̄, p − p̄) (α cancels: ρ²/2 Γ(G, G) with
  G = (p − p̄)/α), which keeps q_g valid whatever the clients' duals are; the clients send their natural
  parameters as well (messages ``nat1``, ``nat2``, …).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from blr_derive.core import matcalc
from blr_derive.core.errors import DerivationError
from blr_derive.core.matexpr import is_mat, simplify_mat
from blr_derive.core.types import Expr, Sym
from blr_derive.families.mixture import MixtureFamily
from blr_derive.rules.base import Rule, register
from blr_derive.rules.blr import doit
from blr_derive.rules.exponential_coordinates import tangent
from blr_derive.rules.program import record, set_update, update_of


@dataclass
class Geometry:
    """The second-order term of the retraction for one parameter p of a family: ``term(G)`` = −½Γ_p(G, G) at the
    family's own parameter symbols (substitute a component's symbols for them), and the steps that derived it."""
    param: Sym               # p (the family's symbol)
    gamma: Expr              # Γ_p(V, V) as an expression of the family's parameters and the direction V
    direction: Sym           # V (a placeholder of p's shape)
    A_p: Expr                # Ã(p) = A(λ(p))
    metric: Expr             # D²Ã[V, W]
    third: Expr              # D³Ã[V, V, W]
    symmetric: frozenset[Sym]

    def term(self, G, at=None):
        """−½Γ_p(G, G) at the parameters ``at`` (family symbol -> the point's symbol or expression)."""
        e = (-self.gamma / 2) if not is_mat(self.gamma) else sp.MatMul(sp.Rational(-1, 2), self.gamma)
        e = e.xreplace({self.direction: G})
        if at:
            e = e.xreplace(at)
        return simplify_mat(doit(e), self.symmetric | {G} | set((at or {}).values())) if is_mat(e) else e


def _placeholder(name, p):
    return sp.MatrixSymbol(name, *p.shape) if is_mat(p) else sp.Symbol(name, real=True)


def _zero(e, sym):
    e = simplify_mat(doit(sp.expand(e)), sym) if is_mat(e) else sp.simplify(e)
    return e == 0 or isinstance(e, sp.ZeroMatrix)


def geometry(fam, pname, fail) -> Geometry:
    """Derive Γ_p for the family's parameter ``pname`` (see the module docstring)."""
    if pname not in fam.params or fam.params[pname].fixed:
        raise fail(f"'{pname}' is not a free parameter of family '{fam.name}'")
    p = fam.params[pname].symbol
    V, W = _placeholder("V_dir", p), _placeholder("W_dir", p)
    sym = frozenset(fam.symmetric) | ({V, W} if is_mat(p) and p in fam.symmetric else frozenset())
    # the natural parameters are affine in p with the other parameters fixed: q is an exponential family in p
    for i, e in enumerate(fam.eta):
        try:
            d2 = matcalc.differential(matcalc.differential(e, {p: V}), {p: W})
        except DerivationError as exc:
            raise fail(f"cannot differentiate λ{i + 1} = {e} in {pname}: {exc}") from None
        if not _zero(d2, sym):
            raise fail(f"the natural parameter λ{i + 1} = {e} of family '{fam.name}' is not affine in {pname} (the "
                       "correction needs the family to be an exponential family in the parameter it corrects)")
    A_p = fam.A.xreplace(dict(zip(fam.lam, fam.eta)))
    A_p = simplify_mat(doit(A_p), sym) if A_p.has(sp.Trace, sp.Determinant) else sp.simplify(A_p)
    try:
        d1 = matcalc.differential(A_p, {p: V})
        metric = matcalc.differential(d1, {p: W})            # D²Ã[V, W]
        third = matcalc.differential(metric, {p: V})         # D³Ã[V, W, V] = D³Ã[V, V, W]
    except DerivationError as exc:
        raise fail(f"cannot differentiate the log-partition of family '{fam.name}' in {pname}: {exc}") from None
    if not is_mat(p):
        metric, third = sp.simplify(metric), sp.simplify(third)
        c2 = sp.simplify(metric / (V * W))
        if c2 == 0 or c2.has(V, W):
            raise fail(f"the Fisher information of family '{fam.name}' in {pname} is {metric} (not a metric)")
        gamma = sp.simplify(third / W / (2 * c2))
        if gamma.has(W):
            raise fail(f"the third derivative of the log-partition in {pname} is not quadratic in the direction")
        return Geometry(p, gamma, V, A_p, metric, third, sym)
    # matrix p: g(Γ, W) = tr(M(Γ) W) and ½D³Ã[V, V, W] = tr(N W); M(Γ) = c·L Γ R solved for Γ
    wsym = sym | {W}
    N = simplify_mat(matcalc.gradient(third, [W], wsym)[0], sym)
    G_ph = _placeholder("Gamma_ph", p)
    M = simplify_mat(matcalc.gradient(metric.xreplace({V: G_ph}), [W], wsym | {G_ph})[0], sym | {G_ph})
    gamma = _solve_linear(M, sp.MatMul(sp.Rational(1, 2), N), G_ph, sym | {G_ph}, fail)
    return Geometry(p, simplify_mat(doit(gamma), sym), V, A_p, metric, third, sym)


def _solve_linear(M, rhs, X, sym, fail):
    """Solve M(X) = rhs for X when M(X) = c·L X R (one term, X once)."""
    t = simplify_mat(M, sym)
    if isinstance(t, sp.MatAdd):
        raise fail(f"cannot solve the metric {M} for the Christoffel symbols")
    coeff, mats = t.as_coeff_mmul()
    mats = list(mats.args) if isinstance(mats, sp.MatMul) else [mats]
    if mats.count(X) != 1 or any(m.has(X) for m in mats if m != X):
        raise fail(f"cannot solve the metric {M} for the Christoffel symbols")
    i = mats.index(X)
    L, R = mats[:i], mats[i + 1:]
    out = sp.MatMul(1 / coeff, *[sp.Inverse(a) for a in reversed(L)], rhs, *[sp.Inverse(a) for a in reversed(R)])
    return simplify_mat(doit(out), sym)


def velocity(D, name, sym_old, expr, rho, fail):
    """G = ∂p_{t+1}/∂ρ of an update p_{t+1} = p + ρG (refused when it is not affine in ρ or not a step from p); for a
    scalar p its negative p − T (T the target of (1 − ρ)p + ρT)."""
    if D.expand_defs(expr).has(rho) and not expr.has(rho):
        raise fail(f"the update of {name} reads the learning rate through a definition; it must be of the form "
                   f"{name} + ρ·G")
    if not is_mat(expr):
        # G = T − p with T the target of (1 − ρ)p + ρT; returned as p − T = −G (the correction is quadratic in G)
        target = sp.simplify((expr - (1 - rho) * sym_old) / rho)
        if target.has(rho):
            raise fail(f"the update of {name} is not of the form (1-ρ){name} + ρT")
        return sym_old - target
    sym = set(D.recipe.family.symmetric) | {sym_old}
    G = tangent(expr, rho, sym)
    rest = simplify_mat(doit(sp.expand(sp.MatAdd(expr, -sym_old, sp.MatMul(-rho, G)))), sym)
    if not isinstance(rest, sp.ZeroMatrix) or not G.free_symbols - {sym_old}:
        raise fail(f"the update of {name} is not of the form {name} + ρG (a step affine in ρ)")
    return G


def _mean_param(fam, p):
    """The family's Gaussian mean parameter when ``p`` is its precision (the covariance a function of p alone), else
    None: the mean's step is preconditioned by that precision."""
    mean, cov = getattr(fam, "gaussian_mean", None), getattr(fam, "gaussian_cov", None)
    if mean is None or cov is None or not cov.has(p) or (cov.free_symbols - {p} - {fam.dim}) \
            or getattr(cov, "free_symbols", set()) & {q.symbol for q in fam.params.values() if q.symbol != p}:
        return None
    return next((q for q in fam.params.values() if q.symbol == mean), None)


def _targets(D, fam, pname, fail):
    """(family, [(state name of p, state name of the Gaussian mean or None, the point's parameters {family symbol:
    component symbol})]) for every update of ``pname``: the parameter of a single family, each free component's
    copy of it in a mixture."""
    base = fam.base if isinstance(fam, MixtureFamily) else None
    if base is None:
        if pname not in fam.params:
            raise fail(f"'{pname}' is not a parameter of family '{fam.name}'")
        mean = _mean_param(fam, fam.params[pname].symbol)
        return fam, [(pname, mean.name if mean is not None else None, {})]
    if pname not in base.params:
        raise fail(f"'{pname}' is not a parameter of the components' family '{base.name}'")
    mean = _mean_param(base, base.params[pname].symbol)
    if fam.axis:
        axis = D.component_axis
        at = {p.symbol: s for s in axis.leaves for p in base.free_params
              if axis.leaves[s] == "k" and axis.names.get(s) == p.name and getattr(s, "name", "") == f"{p.name}_k"}
        return base, [(pname, mean.name if mean is not None else None, at)]
    out = []
    for c in fam.free_components:
        at = {k: v for k, v in c.subs.items() if isinstance(v, (sp.Symbol, sp.MatrixSymbol))}
        out.append((c.subs[base.params[pname].symbol].name,
                    at[mean.symbol].name if mean is not None and mean.symbol in at else None, at))
    return base, out


def precondition_mean(D, mean, m_old, p_new, plain, sym):
    """Rewrite the mean's update m_{t+1} = m − ρP⁻¹g (P = ``plain``, the plain BLR's new precision: Eq. 12) as
    m + p_{t+1}⁻¹(−ρg): the mean's step preconditioned by the corrected precision p_{t+1}, the mean step of Lin et
    al.'s block coordinates (μ, S); a λ₁-solve m = λ₁/p_{t+1} would move the mean by the correction.  −ρg =
    P(m_{t+1} − m) is formed with P written out, so that P cancels (s·m − (s + ρB)·m = −ρBm)."""
    _, expr = update_of(D, mean)
    if not expr.has(p_new):
        return None
    if is_mat(p_new):
        inc = sp.MatMul(p_new, sp.MatAdd(expr, -m_old)).doit()
        step = simplify_mat(doit(sp.expand(inc)), sym)
        if step.has(p_new):
            step = simplify_mat(doit(sp.expand(step.xreplace({p_new: plain}))), sym)
        new = simplify_mat(doit(sp.MatAdd(m_old, sp.MatMul(sp.Inverse(p_new), step))), sym)
    else:
        step = sp.Add(*[p_new * t for t in sp.Add.make_args(expr - m_old)])
        if step.has(p_new):
            step = sp.expand(sp.expand(step).xreplace({p_new: plain}))
        new = m_old + step / p_new
    set_update(D, mean, new)
    return new


class RiemannianCorrection(Rule):
    name = 'riemannian_correction'
    kind = 'pass'
    matrix_programs = True
    each_component = True        # acts on every free component of a mixture (its own parameters)
    equation = 'improved BLR, Lin et al. (2020) Eqs. 8, 12 (IVON)'
    summary = ('p <- p + rho*G - rho^2/2 Gamma_p(G, G), the Christoffel symbols of the Fisher metric derived from the '
               'log-partition: S + rho*G + rho^2/2 G S^-1 G (s <- (1-rho)s + rho*T + rho^2 (s - T)^2 / (2s) '
               'elementwise): keeps a precision positive (definite) for any rho and any Hessian estimate; also '
               'per mixture component and, with server, in the federated server step')

    def rewrite(self, ctx):
        D = ctx.D
        pname = ctx.name("param")
        server = ctx.expr("server", logic=True) if "server" in ctx.args else None
        ctx.done()
        if server is not None and (not isinstance(server, sp.logic.boolalg.Boolean)
                                   or (server.is_Symbol and server.is_real)):
            raise ctx.fail(f"'server' must be a condition (a boolean hyperparameter or a comparison), got {server}")
        if server is not None and D.recipe.federated is None:
            raise ctx.fail("'server' needs a recipe with a 'federated' section (the server step it corrects)")
        rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
        fam, targets = _targets(D, D.recipe.family, pname, ctx.fail)
        geo = geometry(fam, pname, ctx.fail)
        p = geo.param
        shown = []
        mean_param = _mean_param(fam, p)
        for name, mean, at in targets:
            sym_new, expr = update_of(D, name)
            old = at.get(p, p)
            G = velocity(D, name, old, expr, rho, ctx.fail)
            if is_mat(G):
                # the direction once, as a definition (the correction reads it twice); a product with an inverse
                # that the term holds (S⁻¹G) as a definition too: every target solves it with a leading inverse
                Gs = sp.MatrixSymbol(_free_def_name(D, f"G_{name}"), *old.shape)
                D.defs.append((Gs, G))
                shown.append((Gs, G, "="))
                term = _solves_as_defs(D, geo.term(Gs, at), name, shown)
                new = simplify_mat(doit(sp.MatAdd(expr, sp.MatMul(rho ** 2, term))),
                                   set(D.recipe.family.symmetric) | {Gs, old})
            else:
                # G is given as p − T = −(T − p) (Γ is quadratic in it): the form IVON's peers write
                new = expr + rho ** 2 * geo.term(G, at)
            set_update(D, name, new)
            shown.append((sym_new, new, r"\leftarrow"))
            if mean is not None:
                m_old = at.get(mean_param.symbol, mean_param.symbol)
                m_new = precondition_mean(D, mean, m_old, sym_new, expr, set(D.recipe.family.symmetric) | {old})
                if m_new is not None:
                    shown.append((update_of(D, mean)[0], m_new, r"\leftarrow"))
        D.corrected[pname] = server
        eqs = [(sp.Symbol(r"\tilde A(%s)" % p), geo.A_p, "="), (sp.Symbol(r"\Gamma_{%s}(V, V)" % p), geo.gamma, "=")]
        record(ctx, "Riemannian correction",
               f"The BLR moves {pname} by ρG.  With the other parameters fixed the family is an exponential family in "
               f"{pname} with log-partition Ã = A(λ({pname})); its Fisher metric D²Ã and the Christoffel symbols "
               f"g(Γ(V, V), W) = ½D³Ã[V, V, W] complete the step to the second-order retraction "
               f"{pname} + ρG − ρ²/2 Γ(G, G), which stays in the parameter's domain for any ρ (Lin et al. 2020).",
               eqs + shown)


def _solves_as_defs(D, e, name, shown):
    """``e`` with each factor X⁻¹Y of its products (X⁻¹ followed by the rest) named as a definition, so that the
    product is printed as a solve with a leading inverse (the component-axis printer solves no other form)."""
    if isinstance(e, sp.MatAdd):
        return sp.MatAdd(*[_solves_as_defs(D, a, name, shown) for a in e.args])
    if not isinstance(e, sp.MatMul):
        return e
    c, mats = e.as_coeff_mmul()
    mats = list(mats.args) if isinstance(mats, sp.MatMul) else [mats]
    for i, a in enumerate(mats):
        if isinstance(a, sp.Inverse) and 0 < i < len(mats) - 1:
            rest = sp.MatMul(*mats[i:]) if len(mats) - i > 1 else mats[i]
            X = sp.MatrixSymbol(_free_def_name(D, f"{name}inv_G"),
                                *rest.shape)
            D.defs.append((X, rest))
            shown.append((X, rest, "="))
            return sp.MatMul(c, *mats[:i], X) if c != 1 else sp.MatMul(*mats[:i], X)
    return e


def _free_def_name(D, base):
    taken = {str(s) for s, _ in D.defs} | {str(u[1]) for u in D.updates} | {str(c[0]) for c in D.oracle_calls} \
        | set(D.recipe.hyper_symbols()) | {a.name for a in D.aux_state}
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}{i}"
    return name


register(RiemannianCorrection())
