"""Sums over data of one-dimensional functions, and their Gaussian expectations.

A loss such as the Bernoulli negative log-likelihood of logistic regression,
``sum(softplus(X*theta)) - y.T*X*theta + 0.5*alpha*theta.T*theta``, is a polynomial of
degree ≤ 2 in θ plus terms ``c Σ_n f(a_nᵀθ + b_n)`` (rows a_n of a data matrix A).  Such a
term depends on θ only through one-dimensional projections, so under q = N(m, C):

* its gradient and Hessian are ``Aᵀ f'(Aθ + b)`` and ``Aᵀ diag(f''(Aθ + b)) A``;
* ``a_nᵀθ ~ N(a_nᵀm + b_n, a_nᵀ C a_n)``, so ``E_q[f(a_nᵀθ + b_n)]``, ``E_q[f']`` and ``E_q[f'']``
  are one-dimensional Gaussian integrals, computed by Gauss–Hermite quadrature.

With Bonnet's and Price's theorems (Eqs. 10–11) these give ``E_q[∇ℓ]`` and ``E_q[∇²ℓ]``,
from which the engine derives the natural gradient (App. D).  Two expectation rules use
this module: ``delta`` for an explicit loss (derivatives at the mean: Laplace's method,
Sec. 4.4) and ``gauss_hermite`` (quadrature: non-conjugate VI, Sec. 5.4).

The sympy nodes below are data-size agnostic (N stays symbolic); each evaluates itself
numerically by ``doit()`` once its arguments are explicit matrices, and every code target
prints them (``codegen/backends/numpy/printer.py``).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core import specialfns
from blr_derive.core.errors import DerivationError, SpecError
from blr_derive.core.matcalc import differential, gradient, hessian_from_gradient
from blr_derive.core.matexpr import split_coeff, is_mat, scalarize, simplify_mat
from blr_derive.core.nodes import (U, DataSum, DiagOf, Elementwise, GaussHermite, GaussHermiteStein, RowQuadForm,
                                   expit, logistic_of)
from blr_derive.rules.args import Ctx
from blr_derive.rules.base import RULES, NaturalGradient

# ----------------------------------------------------------------------------- loss analysis

def _exp_as_sum(e, theta):
    """exp(aᵀθ + b) of a scalar affine argument (a 1×1 trace) as the one-row data sum Σ exp(·) of that 1×1
    product, so that its Gaussian expectation is the moment-generating function of one projection."""
    arg = e.args[0]
    traces = [t for t in sp.Add.make_args(arg) if t.has(theta)]
    if not traces or not all(isinstance(t, sp.Trace) or (isinstance(t, sp.Mul) and sum(
            isinstance(f, sp.Trace) for f in t.args) == 1) for t in traces):
        return e
    rest = sp.Add(*[t for t in sp.Add.make_args(arg) if not t.has(theta)])
    mats = []
    for t in traces:
        c = sp.Mul(*[f for f in sp.Mul.make_args(t) if not isinstance(f, sp.Trace)])
        (tr,) = [f for f in sp.Mul.make_args(t) if isinstance(f, sp.Trace)]
        if c.has(theta) or tr.arg.shape != (1, 1):
            return e
        mats.append(sp.MatMul(c, tr.arg) if c != 1 else tr.arg)
    v = sp.MatAdd(*mats) if len(mats) > 1 else mats[0]
    return DataSum(sp.Lambda(U, sp.exp(U + rest)), v)


def split_loss(loss, theta, symmetric=()):
    """loss = poly(θ) + Σ_k c_k Σ_n f_k(a_knᵀθ + b_kn): returns (poly, [(c, f, A, b)]).  A term exp(aᵀθ + b)
    outside a data sum counts as a data sum over one row."""
    loss = scalarize(loss)
    loss = loss.replace(lambda e: isinstance(e, sp.exp) and e.has(theta) and not e.has(DataSum),
                        lambda e: _exp_as_sum(e, theta))
    sums = sorted((s for s in loss.atoms(DataSum) if s.has(theta)), key=sp.default_sort_key)   # θ-free: constants
    dummies = {s: sp.Dummy(f"s{i}") for i, s in enumerate(sums)}
    flat = loss.xreplace(dummies)
    poly = flat.xreplace({d: 0 for d in dummies.values()})
    terms = []
    for s, d in dummies.items():
        c = sp.diff(flat, d)
        if c.has(theta) or any(c.has(o) for o in dummies.values()):
            raise DerivationError(f"the loss must be linear in each data sum: {s} has coefficient {c}")
        if s.fn.expr.has(theta):
            raise DerivationError(f"{s}: the summed function may depend on θ only through its argument")
        A, b = affine_parts(s.vec, theta, symmetric)
        terms.append((c, s.fn, A, b))
    return poly, terms


def affine_parts(v, theta, symmetric=()):
    """v = A θ + b with A, b free of θ (an error otherwise)."""
    dth = sp.MatrixSymbol("d_" + theta.name, *theta.shape)
    dv = simplify_mat(sp.expand(differential(v, {theta: dth})), symmetric)
    parts = dv.args if isinstance(dv, sp.MatAdd) else (dv,)
    As = []
    for p in parts:
        if isinstance(p, sp.ZeroMatrix):
            continue
        if p == dth:
            As.append(sp.Identity(theta.shape[0]))
            continue
        if not (isinstance(p, sp.MatMul) and p.args[-1] == dth) or sp.MatMul(*p.args[:-1]).has(theta, dth):
            raise DerivationError(f"the argument of a data sum must be affine in {theta}: {v}")
        As.append(_left_factor(p.args[:-1], theta.shape[0]))
    if not As:
        raise DerivationError(f"the argument of a data sum does not depend on {theta}: {v}")
    A = simplify_mat(sp.MatAdd(*As) if len(As) > 1 else As[0], symmetric)
    b = simplify_mat(sp.expand(v.xreplace({theta: sp.ZeroMatrix(*theta.shape)}).doit()), symmetric)
    if not is_mat(b):
        if b != 0:
            raise DerivationError(f"the argument of a data sum is not a vector: {v}")
        b = sp.ZeroMatrix(*v.shape)
    return A, b


def _left_factor(args, n):
    """The matrix M of a differential term M dθ (a scalar multiple of the identity when M is a scalar)."""
    c, mats = split_coeff(args)
    if not mats:
        return sp.MatMul(c, sp.Identity(n)) if c != 1 else sp.Identity(n)
    return sp.MatMul(c, *mats) if c != 1 else sp.MatMul(*mats)


def degree_in(e, x):
    """An upper bound of the polynomial degree of ``e`` in ``x``, or None when ``e`` is not a polynomial in ``x``
    (a function, a negative or symbolic power, an inverse of an expression in ``x``)."""
    if not e.has(x):
        return 0
    if e == x:
        return 1
    if isinstance(e, (sp.Add, sp.MatAdd, sp.Transpose, sp.Trace)):
        ds = [degree_in(a, x) for a in e.args]
        return None if None in ds else max(ds)
    if isinstance(e, (sp.Mul, sp.MatMul)):
        ds = [degree_in(a, x) for a in e.args]
        return None if None in ds else sum(ds)
    if isinstance(e, (sp.Pow, sp.MatPow)) and e.exp.is_Integer and e.exp >= 0:
        d = degree_in(e.base, x)
        return None if d is None else d * int(e.exp)
    return None


def polynomial_derivatives(poly, theta, symmetric=()):
    """(∇poly(θ), ∇²poly) for a polynomial of degree ≤ 2 in θ (the Hessian is constant).  Anything else is
    refused before it is differentiated (nested functions of θ grow without bound under the chain rule).  A loss
    that is data sums alone has the polynomial 0 (logistic regression without a prior)."""
    poly = sp.sympify(poly)
    d = degree_in(poly, theta)
    if d is None or d > 2:
        raise DerivationError(f"outside the data sums the loss must be a polynomial of degree <= 2 in {theta}")
    g = gradient(poly, [theta], symmetric)[0]
    try:
        H = hessian_from_gradient(g, theta, symmetric)
    except DerivationError:
        H = None
    if H is None or H.has(theta):
        raise DerivationError(f"outside the data sums the loss must be a polynomial of degree <= 2 in {theta}")
    return g, H


def derivative(f, k=1):
    """f^(k) as a Lambda (sympy's derivative, with the special functions' own ``fdiff``); logistic
    functions 1/(1 + e^(-x)) become ``expit`` before each further derivative."""
    e = f.expr.xreplace({f.variables[0]: U})
    for _ in range(k):
        e = sp.diff(e, U)
        e = e.replace(lambda n: logistic_of(n) is not None, logistic_of)
        e = e.replace(lambda n: isinstance(n, sp.Mul), _exp_times_expit)
        # |u|' is sympy's sign, whose derivative is the distribution 2δ(u) that no target prints: the grammar's
        # sign (derivative 0 almost everywhere, core/specialfns.py), as `sign(x)` written in a loss is
        e = e.replace(lambda n: type(n) is sp.sign, lambda n: specialfns.sign(n.args[0]))
    return sp.Lambda(U, e)


def _exp_times_expit(e):
    """e^b·σ(−b) → σ(b) in a product (e^b/(1 + e^b), the derivative of log1p(exp(b)) = softplus(b)): the same value,
    finite for every b, where the product is inf·0 = NaN from b ≈ 710 on."""
    factors = list(sp.Mul.make_args(e))
    for i, f in enumerate(factors):
        if not isinstance(f, sp.exp):
            continue
        for j, g in enumerate(factors):
            if isinstance(g, expit) and sp.expand(g.args[0] + f.args[0]) == 0:
                rest = [x for k, x in enumerate(factors) if k not in (i, j)]
                return sp.Mul(*rest, expit(f.args[0]))
    return e


def exponential_rate(f):
    """a when f(u) = Σ_k c_k exp(a u + b_k) (one rate a, the c_k and b_k free of u), else None.  Then, for
    x ~ N(η, σ²), E[f(x)] = f(η + aσ²/2), and the same for f' and f'' (each of the same form): the Gaussian
    moment-generating function E[e^{ax}] = e^{aη + a²σ²/2} (a closed form of the one-dimensional integrals that
    Gauss–Hermite quadrature approximates)."""
    u = f.variables[0]
    e = sp.expand(f.expr, power_exp=True)
    rate = None
    for term in sp.Add.make_args(e):
        if not term.has(u):
            return None                        # a constant part is a polynomial, not an exponential
        exps = [x for x in sp.Mul.make_args(term) if isinstance(x, sp.exp) and x.has(u)]
        rest = sp.Mul(*[x for x in sp.Mul.make_args(term) if not (isinstance(x, sp.exp) and x.has(u))])
        if rest.has(u) or not exps:
            return None
        arg = sp.expand(sp.Add(*[x.args[0] for x in exps]))
        a = sp.diff(arg, u)
        if a.has(u) or a == 0 or (rate is not None and sp.simplify(a - rate) != 0):
            return None
        rate = a
    return rate


def quadratic_curvature(f):
    """f'' when f(u) is a polynomial of degree ≤ 2 in u (``sum(v)`` reads f(u) = u), else None.  Then, for
    x ~ N(η, σ²), E[f'(x)] = f'(η) and E[f''(x)] = f'' exactly (f' is affine), and E[f(x)] = f(η) + f''σ²/2:
    the Gaussian moments, no quadrature."""
    u = f.variables[0]
    d = degree_in(f.expr, u)
    if d is None or d > 2:
        return None
    c2 = sp.diff(f.expr, u, 2)
    return None if c2.has(u) else c2


def mgf_point(arg, var, rate):
    """η + aσ²/2, where f(η + aσ²/2) = E[f(x)] for x ~ N(η, σ²) and f of rate a (see exponential_rate)."""
    return _plus(arg, sp.MatMul(rate / 2, var))


def _plus(a, b):
    if isinstance(a, sp.ZeroMatrix):
        return b
    if isinstance(b, sp.ZeroMatrix):
        return a
    return sp.MatAdd(a, b)


def expected_derivatives(theta, poly_grad, poly_hess, terms, mean, cov=None, nodes=None, symmetric=(), defs=None,
                         parts=None):
    """E_q[∇ℓ] and E_q[∇²ℓ] under q = N(mean, cov) by quadrature (``nodes``), or ∇ℓ(mean) and ∇²ℓ(mean)
    when ``cov`` is None (the delta method).  With a list ``defs``, the projected means and variances
    become named definitions ``eta``, ``eta_var`` appended to it; with a list ``parts``, the contribution
    (E[∇ℓ_f], E[∇²ℓ_f]) of each part of the loss (the polynomial, then each data sum) is appended to it."""
    g = poly_grad.xreplace({theta: mean})
    H = poly_hess
    if parts is not None:
        parts.append((g, H))
    for k, (c, f, A, b) in enumerate(terms):
        arg = simplify_mat(_plus(sp.MatMul(A, mean), b), symmetric)
        # a polynomial f of degree ≤ 2 under `exact`: E[f'] = f'(η) and E[f''] = f'', no variance needed
        curvature = quadratic_curvature(f) if cov is not None and nodes is None else None
        var = RowQuadForm(A, cov) if cov is not None and curvature is None else None
        if defs is not None:
            suffix = "" if len(terms) == 1 else str(k + 1)
            named = sp.MatrixSymbol("eta" + suffix, *arg.shape)
            defs.append((named, arg))
            arg = named
            if var is not None:
                named = sp.MatrixSymbol("eta_var" + suffix, *arg.shape)
                defs.append((named, var))
                var = named
        rate = exponential_rate(f) if cov is not None and nodes is None else None     # `exact`, not quadrature
        if cov is None or curvature is not None:
            d1, d2 = Elementwise(derivative(f, 1), arg), Elementwise(derivative(f, 2), arg)
        elif rate is not None:                 # the moment-generating function: exact, no quadrature
            shifted = mgf_point(arg, var, rate)
            if defs is not None:
                named = sp.MatrixSymbol("eta_mgf" + suffix, *arg.shape)
                defs.append((named, shifted))
                shifted = named
            d1, d2 = Elementwise(derivative(f, 1), shifted), Elementwise(derivative(f, 2), shifted)
        elif nodes is None:
            raise DerivationError(f"E_q[f(aᵀθ + b)] has no closed form for f(u) = {f.expr.xreplace({f.variables[0]: U})} "
                                  "(closed forms: sums of c·exp(a·u + b) with one rate a, and polynomials of degree "
                                  "<= 2 in u such as sum(v)); use 'gauss_hermite'")
        else:
            f1 = derivative(f, 1)
            d1, d2 = GaussHermite(f1, arg, var, nodes), GaussHermiteStein(f1, arg, var, nodes)
        g = _plus(g, sp.MatMul(c, A.T, d1))
        hess = (sp.ZeroMatrix(*A.shape[::-1][:1] * 2) if curvature == 0       # a linear f: no curvature
                else sp.MatMul(c, A.T, DiagOf(d2), A))
        H = _plus(H, hess)
        if parts is not None:
            parts.append((simplify_mat(sp.MatMul(c, A.T, d1), symmetric), simplify_mat(hess, symmetric)))
    return simplify_mat(g, symmetric), simplify_mat(H, symmetric)


def expected_loss(fam, poly, terms, mean, cov, nodes):
    """E_q[ℓ] as a function of (mean, cov): the polynomial part exactly, the data sums by quadrature."""
    e = fam.expect_gaussian(poly, mean=mean, cov=cov)
    for c, f, A, b in terms:
        arg, var = _plus(sp.MatMul(A, mean), b), RowQuadForm(A, cov)
        rate = exponential_rate(f) if nodes is None else None
        c2 = quadratic_curvature(f) if nodes is None else None
        if c2 is not None:                     # E[f(x)] = f(η) + f''σ²/2
            inner = Elementwise(f, arg) if c2 == 0 else sp.MatAdd(Elementwise(f, arg), sp.MatMul(c2 / 2, var))
        elif rate is not None:
            inner = Elementwise(f, mgf_point(arg, var, rate))
        else:
            inner = GaussHermite(f, arg, var, nodes)
        e = e + c * DataSum(sp.Lambda(U, U), inner)
    return e


# ----------------------------------------------------------------------------- the derivation step

def explicit_expectations(recipe, D, grads, Eg, EH, mean_mu, cov_mu, sym):
    """Replace E_q[∇ℓ], E_q[∇²ℓ] in the natural gradients (after Bonnet and Price, Eqs. 10–11) by their values
    for an explicit loss: derivatives at the mean (``delta``, App. C) or Gauss–Hermite quadrature of the
    one-dimensional projections (``gauss_hermite``).  They become definitions ``g``, ``H`` of the update."""
    fam = recipe.family
    theta = fam.theta
    approx = [a for a in recipe.approximations if a.name in ("delta", "gauss_hermite", "exact")][0]
    quadrature = approx.name in ("gauss_hermite", "exact")       # expectations under q (closed form or nodes)
    ctx = Ctx(D, approx)
    nodes = ctx.count("nodes", None) if approx.name == "gauss_hermite" else None
    ctx.done()
    try:
        poly, terms = split_loss(recipe.loss, theta, sym)
        pg, ph = polynomial_derivatives(poly, theta, sym)
    except DerivationError as exc:
        raise SpecError(f"approximation '{approx.name}': {exc}", recipe.file, approx.line) from None
    m, C = fam.gaussian_mean, fam.gaussian_cov
    projections, parts = [], []
    try:
        g_ord, H_ord = expected_derivatives(theta, pg, ph, terms, m, C if quadrature else None, nodes, sym,
                                            projections, parts)
    except DerivationError as exc:
        raise SpecError(f"approximation '{approx.name}': {exc}", recipe.file, approx.line) from None
    taken = {str(s) for s in fam.params} | {h.name for h in recipe.hyper} | {d.name for d in recipe.data}
    g = sp.MatrixSymbol("g" if "g" not in taken else "g_", *m.shape)
    H = sp.MatrixSymbol("H" if "H" not in taken else "H_", *C.shape)
    D.symbol_names[g] = r"\hat{g}"
    D.symbol_names[H] = r"\hat{H}"
    D.defs += projections + [(g, g_ord), (H, H_ord)]
    for s_, _ in projections:
        base, k = ((r"\boldsymbol{\sigma}^2", s_.name[7:]) if s_.name.startswith("eta_var") else
                   (r"\tilde{\boldsymbol{\eta}}", s_.name[7:]) if s_.name.startswith("eta_mgf") else
                   (r"\boldsymbol{\eta}", s_.name[3:]))
        D.symbol_names[s_] = base + (f"_{{{k}}}" if k else "")
    sym.add(H)
    # the exact natural gradient of the approximated E_q[ℓ], written in μ (for checks against finite differences)
    g_mu, H_mu = expected_derivatives(theta, pg, ph, terms, mean_mu, cov_mu if quadrature else None, nodes, sym)
    if quadrature:
        D.expected_loss = expected_loss(fam, poly, terms, mean_mu, cov_mu, nodes)
    D.natural_gradient = NaturalGradient([simplify_mat(x.xreplace({Eg: g_mu, EH: H_mu}).doit(), sym | {H_mu})
                                          for x in grads], Eg, EH)
    where = r"\mathbf{m}" if is_mat(m) else "m"
    if approx.name == "exact":
        text = ("The loss is a polynomial of degree ≤ 2 in θ plus exponentials c·exp(a·xₙ + b) of projections "
                "xₙ = aₙᵀθ + bₙ. Under q, xₙ is Gaussian with mean ηₙ = aₙᵀm + bₙ and variance σₙ² = aₙᵀS⁻¹aₙ, so "
                "the moment-generating function E[e^{a xₙ}] = e^{aηₙ + a²σₙ²/2} gives E_q[f'] (Bonnet) and E_q[f''] "
                "(Price) in closed form: f' and f'' evaluated at ηₙ + aσₙ²/2 (Eqs. 10-11). The polynomial part is "
                "exact (its gradient is affine and its Hessian constant).")
        eqs = []
        title = "Closed-form expectations of the exponential terms (moment-generating function)"
    elif quadrature:
        text = ("The loss is a polynomial of degree ≤ 2 in θ plus sums over data of one-dimensional functions "
                "f(aₙᵀθ + bₙ). Under q, xₙ = aₙᵀθ + bₙ is Gaussian with mean ηₙ = aₙᵀm + bₙ and variance "
                "σₙ² = aₙᵀS⁻¹aₙ, so E_q[f'] (Bonnet) and E_q[f''] (Price, in Stein's form E[f'(x)(x − η)]/σ²) are "
                f"one-dimensional integrals, computed by {nodes}-point Gauss–Hermite quadrature. The Stein form makes "
                "the natural gradient the exact gradient of the quadrature E_q[ℓ]. The polynomial part is exact "
                "(its gradient is affine and its Hessian constant).")
        eqs = []
        title = "Gauss–Hermite expectations of the data terms"
    else:
        text = ("The loss is explicit: the engine differentiates it (a polynomial of degree ≤ 2 in θ plus sums "
                "over data of one-dimensional functions, whose gradient is Aᵀf'(Aθ + b) and Hessian "
                "Aᵀdiag(f''(Aθ + b))A) and evaluates the derivatives at the mean (Eq. 13).")
        eqs = [(Eg, r"\nabla_\theta\bar\ell(%s)" % where, r"\approx"),
               (EH, r"\nabla^2_\theta\bar\ell(%s)" % where, r"\approx")]
        title = "Delta method with the derived gradient and Hessian"
    if quadrature:
        eqs = projections + [(g, g_ord), (H, H_ord), (Eg, g, r"\approx"), (EH, H, r"\approx")]
    else:
        eqs = eqs + projections + [(g, g_ord), (H, H_ord)]
    D.add(approx.name, RULES[approx.name].equation, title, text, eqs)
    _messages(recipe, D, grads, Eg, EH, parts, sym)
    return [simplify_mat(x.xreplace({Eg: g, EH: H}), sym) for x in grads]


def _messages(recipe, D, grads, Eg, EH, parts, sym):
    """The natural gradient split by the parts of the loss (Eq. 58): each part f sends the message
    λ̃_f = ∇_μ E_q[-ℓ_f] at μ_t, and λ_{t+1} = (1-ρ)λ_t + ρ Σ_f λ̃_f (Eq. 60 with ρ = 1: their sum)."""
    if len(parts) < 2:
        return
    fam = recipe.family
    at_state = dict(zip(fam.mu, fam.mu_ord))
    eqs = []
    for k, (gf, Hf) in enumerate(parts):
        who = "poly" if k == 0 else ("data" if len(parts) == 2 else f"data,{k}")
        for i, x in enumerate(grads):
            msg = simplify_mat(sp.MatMul(-1, x.xreplace({Eg: gf, EH: Hf})).doit().xreplace(at_state), sym | {Hf})
            eqs.append((r"\tilde{\lambda}^{(%d)}_{\mathrm{%s}}" % (i + 1, who), msg))
    D.add("factor_messages", RULES["factor_messages"].equation, "Messages of the parts of the loss",
          "The natural gradient is a sum over the parts of the loss (Eq. 58): the polynomial part of degree ≤ 2 "
          "(conjugate to the Gaussian: its message is exact and constant, Sec. 5.1) and each sum over data (the "
          "non-conjugate terms). Each sends the message λ̃_f = ∇_μ E_q[-ℓ_f] at the current "
          "q, and λ_{t+1} = (1-ρ)λ_t + ρ Σ_f λ̃_f; with ρ = 1 this is the message-passing form of Eq. 60 "
          "(non-conjugate VMP).", eqs)
