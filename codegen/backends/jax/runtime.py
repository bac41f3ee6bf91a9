"""The jax target's runtime source: the helpers a plain-functions module defines when its code calls them (array
checks and run-time domain checks that skip traced values, Cholesky and triangular solves, the symmetric matrix
exponential, Gauss-Hermite expectations with host nodes, the inverse regularized incomplete gamma function jax
lacks) and what every optax transformation module shares (conditions that pick in Python unless traced, pytree
leaves of a kept state), written once as ordinary Python and copied into each module (codegen/source.py).  Tested
directly (tests/unit/codegen/test_runtime_sources.py); never imported by the engine, which reads it as text.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy

from blr_derive.codegen.runtime.arrays import _hermite_nodes  # the shared rule (a module gets its own copy)

#: stand-ins for what each generated module declares itself: the shape of each of its arrays, its symmetric ones
SHAPES: dict = {}
SYMMETRIC: frozenset = frozenset()
#: the module's switch of its run-time domain checks (a module with checks sets it True)
CHECK_DOMAINS = True


def _array(name, value, dims, oracle=None):
    """``value`` as a float jax array of the shape SHAPES[name] declares, binding the dimensions it names in
    ``dims``; a wrong shape, a dimension that differs from its other uses, or a matrix in SYMMETRIC that is not
    symmetric is a ValueError naming the variable (nothing is broadcast or read from one triangle silently).  A
    matrix in SYMMETRIC must be finite: a NaN or an infinity is reported as such, naming the ``oracle`` that
    returned the value (if any) and the entry, before the symmetry test that it would fail.  Shapes are static
    under jax.jit; the values of a traced array (a jax tracer) are not checked."""
    a = jnp.asarray(value, dtype=float)
    shape = SHAPES[name]
    if shape == "?" and a.ndim == 0:    # a number for every coordinate (fixed parameters, scalar data)
        return a
    if shape in ("*", "?"):             # elementwise: every such array has the shape of the first one
        if a.shape != dims.setdefault("*", a.shape):
            raise ValueError(f"{name} has shape {a.shape}; the other arrays of this update have shape {dims['*']}")
        return a
    if a.ndim != len(shape):
        raise ValueError(f"{name} must have shape ({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), "
                         f"got an array of shape {a.shape}")
    for d, n in zip(shape, a.shape):
        if (n != d) if isinstance(d, int) else (dims.setdefault(d, n) != n):
            raise ValueError(f"{name} has shape {a.shape}, but {d} = {d if isinstance(d, int) else dims[d]}")
    if name in SYMMETRIC and a.size and not isinstance(a, jax.core.Tracer):
        bad = jnp.argwhere(~jnp.isfinite(a))
        if len(bad):
            at = tuple(int(i) for i in bad[0])
            what = "NaN" if bool(jnp.isnan(a[at])) else "inf" if bool(a[at] > 0) else "-inf"
            source = f"oracle '{oracle}' returned" if oracle else f"{name} holds"
            raise ValueError(f"{source} {what} at {name}[{', '.join(map(str, at))}]")
        # a stack of matrices (a leading component axis) is checked matrix by matrix: the last two axes
        if not bool(jnp.allclose(a, jnp.swapaxes(a, -1, -2), rtol=0, atol=1e-8 * max(1.0, float(jnp.abs(a).max())))):
            raise ValueError(f"{name} must be symmetric (the update reads one triangle of it)")
    return a


def _check_domain(name, value, domain, component, step, hint, where="step"):
    """Raise FloatingPointError where the new value of ``name`` left its domain (``positive``: every entry > 0 and
    finite; ``positive_definite``: each matrix in the last two axes; ``finite``: every entry a finite number),
    naming the component (``"axis"``: the leading axis numbers them) and the step, instead of returning a state
    that is no longer a distribution of the family.
    A traced value (under jax.jit) is not checked: a jitted step cannot raise on its values.  CHECK_DOMAINS = False
    switches the checks off."""
    if not CHECK_DOMAINS or isinstance(value, jax.core.Tracer):
        return
    a = jnp.asarray(value, dtype=float)
    singular = False                    # an indefinite matrix only within rounding
    if domain == "positive_definite":
        stack = a.reshape((-1,) + a.shape[-2:])
        ok = jnp.isfinite(stack).all(axis=(1, 2))
        ok = ok & jnp.isfinite(jnp.linalg.cholesky(jnp.where(ok[:, None, None], stack, 1.0))).all(axis=(1, 2))
        if bool(ok.all()):
            return
        i = int(jnp.argmin(ok))
        M = stack[i]
        if bool(jnp.isfinite(M).all()):
            w = [float(x) for x in jnp.linalg.eigvalsh((M + M.T) / 2)]
            what, detail = "positive definite", f"smallest eigenvalue {w[0]:.6g}"
            if -w[0] <= 10 * len(w) * float(jnp.finfo(M.dtype).eps) * max(abs(x) for x in w):
                detail += f", within rounding of the largest, {w[-1]:.6g}"
                singular = True
        else:                           # NaN or inf entries: what the arithmetic did, not an indefinite matrix
            bad = tuple(int(x) for x in jnp.argwhere(~jnp.isfinite(M))[0])
            what = "a number" if bool(jnp.isnan(M).any()) else "finite"
            detail = f"entry {bad} is {float(M[bad]):.6g}"
        index = tuple(int(x) for x in jnp.unravel_index(i, a.shape[:-2])) if a.ndim > 2 else ()
    else:
        ok = jnp.isfinite(a)                    # NaN is not, nor inf (an overflowed E_q[ℓ]: s = inf, m = NaN)
        if domain != "finite":
            ok = ok & (a > 0)
        if bool(ok.all()):
            return
        index = tuple(int(x) for x in jnp.argwhere(~ok)[0]) if a.ndim else ()
        what = "a number" if bool(jnp.isnan(a[index])) else "finite" if bool(jnp.isinf(a[index])) else "positive"
        detail = f"value {float(a[index] if a.ndim else a):.6g}"
        detail += f" at index {index}" if index else ""
    if component == "axis":
        where_c = f" of component {index[0] + 1} (of {a.shape[0]})"
    elif component is not None:
        where_c = f" of component {component}"
    else:
        where_c = ""
    at = f" at step {int(step)}" if step is not None and not isinstance(step, jax.core.Tracer) else ""
    if singular:
        hint = ("it is singular to working precision, not shown indefinite (its eigenvalues span more than the "
                "precision resolves: a curvature that grows by 1e16 over the data, such as exp of large margins, or "
                "one that vanishes in a direction): scale the inputs or start nearer the data; " + hint)
    if what == "finite":
        hint = "its update overflowed (an expectation of the loss or of its derivatives is not finite at this state)"
    elif what == "a number":            # NaN: 0/0, inf − inf or 0·inf on the way
        hint = ("its arithmetic gave NaN (a root or logarithm of a negative number: the new λ is outside the natural-"
                "parameter space; or 0/0, inf − inf: an expectation of the loss that is infinite at this state, or a q "
                "so concentrated that F(λ) is singular in float64); " + hint)
    raise FloatingPointError(f"{where}(): the new {name}{where_c} is not {what} ({detail}){at}: the update left "
                             f"the family; {hint}")


def _logdet(a):
    """log det a (each matrix in the last two axes) from jnp.linalg.slogdet: finite where det itself over- or
    underflows in float64 (a 400 x 400 precision 1e3 I: det = 1e1200, log det = 2763); -inf for a singular matrix
    and NaN for a negative determinant, as log(det a) gives them (log of the sign: 0, -inf, NaN)."""
    sign, logabs = jnp.linalg.slogdet(a)
    return logabs + jnp.log(sign)


def _spd_solve(A, B):
    """Solve A X = B for symmetric A, no explicit inverse: Cholesky where A is positive definite (a precision, a
    covariance), else (the Cholesky solve not finite) the LU solve, e.g. for a sum of sites of any sign; a
    covariance that comes out indefinite is then refused by the step's domain check, which names it."""
    X = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(A, lower=True), B)
    ok = jnp.all(jnp.isfinite(X))
    if isinstance(ok, jax.core.Tracer):         # under jit/vmap: one branch is run (both under vmap)
        return jax.lax.cond(ok, lambda: X, lambda: jnp.linalg.solve(A, B))
    return X if bool(ok) else jnp.linalg.solve(A, B)


def _tri_solve(L, B, trans):
    """Solve L X = B (trans 0) or Lᵀ X = B (trans 1) for lower-triangular L (substitution; no explicit inverse)."""
    return jax.scipy.linalg.solve_triangular(L, B, lower=True, trans=trans)


def _expm_sym(M):
    """The matrix exponential of a symmetric matrix M, V diag(exp(w)) Vᵀ from its eigendecomposition."""
    w, V = jnp.linalg.eigh((M + M.T) / 2)
    return (V * jnp.exp(w)) @ V.T


def _eigenbasis(S):
    """The eigenvectors of the symmetric S as the columns of an orthogonal matrix, by decreasing eigenvalue."""
    return jnp.linalg.eigh(S)[1][:, ::-1]


def _rayleigh_order(S, Q):
    """The columns of Q by decreasing Rayleigh quotient diag(Qᵀ S Q) (a stable order)."""
    return jnp.argsort(-(Q * (S @ Q)).sum(axis=0), stable=True)


def _power_basis(S, Q):
    """One power iteration of the symmetric S from the orthogonal Q, orthonormalised: the Q factor of the QR
    decomposition of S Q with its columns by decreasing Rayleigh quotient."""
    return jnp.linalg.qr((S @ Q)[:, _rayleigh_order(S, Q)])[0]


def _reordered(X, SL, QL, SR, QR):
    """X with its rows in the order _power_basis gives the columns of QL, its columns in that of QR."""
    return X[_rayleigh_order(SL, QL)][:, _rayleigh_order(SR, QR)]


def _gauss_hermite(f, mean, var, nodes):
    """E[f(x)] for x ~ N(mean, var) entrywise, by Gauss-Hermite quadrature with `nodes` points (a Python int; the
    nodes and weights are computed on the host with numpy)."""
    z, w = _hermite_nodes(nodes)
    x = mean[:, None] + jnp.sqrt(var)[:, None] * z
    return jnp.broadcast_to(f(x), x.shape) @ (w / numpy.sqrt(2 * numpy.pi))


def _gauss_hermite_stein(f, mean, var, nodes):
    """E[f(x) (x - mean)] / var for x ~ N(mean, var) entrywise (= E[f'(x)], Stein's lemma), by Gauss-Hermite
    quadrature with `nodes` points (a Python int; nodes and weights from numpy on the host); 0 where var = 0."""
    z, w = _hermite_nodes(nodes)
    sd = jnp.sqrt(var)
    x = mean[:, None] + sd[:, None] * z
    fx = jnp.broadcast_to(f(x), x.shape)       # f may be a constant (a linear data sum)
    return jnp.where(sd > 0, (fx @ (w * z / numpy.sqrt(2 * numpy.pi))) / jnp.where(sd > 0, sd, 1.0), 0.0)


def _log_ndtr(x):
    """log Phi(x), the log of the standard normal CDF, to float64's precision for every x: jax.scipy.special.log_ndtr
    where x > -20, and from -20 down the asymptotic series log Phi(x) = -x^2/2 - log(-x) - log(2 pi)/2 + log(sum_k
    (-1)^k (2k - 1)!! / x^(2k)) to k = 16 (its error is below 1e-25 at x = -20; jax's own series there has
    ~2e-11 relative error, enough to move a truncated normal's Fisher information, whose terms cancel, by 1e-4).
    Elementwise, jax.jit- and jax.grad-compatible (each branch is evaluated at a safe argument)."""
    x = jnp.asarray(x)
    tail = x <= -20.0          # where jax switches to its short series
    t = jnp.where(tail, x, -20.0)
    z = 1.0 / (t * t)
    term = jnp.ones_like(t)
    total = jnp.ones_like(t)
    for k in range(1, 17):
        term = -term * (2 * k - 1) * z
        total = total + term
    series = -0.5 * t * t - jnp.log(-t) - 0.9189385332046727 + jnp.log(total)     # log(2 pi)/2
    return jnp.where(tail, series, jax.scipy.special.log_ndtr(jnp.where(tail, 0.0, x)))


def _gammaincinv(a, p):
    """x with P(a, x) = p for the regularized lower incomplete gamma function P (scipy.special.gammaincinv): a start
    from Wilson-Hilferty (a > 1; the small-x series x = (p Gamma(a + 1))^(1/a) in the lower tail) or Numerical
    Recipes' start (a <= 1), then 12 Halley steps in x (a jax.lax.fori_loop) on P(a, x) - p, written
    1 - p - Q(a, x) where p > 1/2 (the upper tail keeps its precision); 0 at p = 0, inf at p = 1.  Elementwise
    and jax.jit-compatible."""
    a, p = jnp.broadcast_arrays(jnp.asarray(a, dtype=float), jnp.asarray(p, dtype=float))
    q = 1 - p
    lower = p < 0.5
    a1 = a - 1
    gln = jax.scipy.special.gammaln(a)
    t = jnp.sqrt(-2 * jnp.log(jnp.where(lower, jnp.where(p > 0, p, 1.0), jnp.where(q > 0, q, 1.0))))
    z = (2.30753 + t * 0.27061) / (1 + t * (0.99229 + t * 0.04481)) - t
    z = jnp.where(lower, -z, z)
    x_wh = jnp.maximum(1e-3, a * (1 - 1 / (9 * a) - z / (3 * jnp.sqrt(a))) ** 3)
    x_series = jnp.exp((jnp.log(jnp.where(p > 0, p, 1.0)) + jax.scipy.special.gammaln(a + 1)) / a)
    t_small = 1 - a * (0.253 + a * 0.12)
    x_small = jnp.where(p < t_small, (p / t_small) ** (1 / a), 1 - jnp.log1p(-(p - t_small) / (1 - t_small)))
    x = jnp.where(a > 1, jnp.where(lower & (x_series < 0.05 * (a + 1)), x_series, x_wh), x_small)

    def halley(_, x):
        xs = jnp.maximum(x, 1e-300)
        err = jnp.where(lower, jax.scipy.special.gammainc(a, xs) - p, q - jax.scipy.special.gammaincc(a, xs))
        dens = jnp.exp(a1 * jnp.log(xs) - xs - gln)
        u = jnp.where(dens > 0, err / jnp.where(dens > 0, dens, 1.0), 0.0)
        new = x - u / (1 - 0.5 * jnp.minimum(1.0, u * (a1 / xs - 1)))
        return jnp.where(new <= 0, 0.5 * x, new)
    x = jax.lax.fori_loop(0, 12, halley, x)
    return jnp.where(p <= 0, 0.0, jnp.where(p >= 1, jnp.inf, x))


def _where(cond, a, b):
    """``a`` where ``cond`` holds, else ``b``.  A Python bool (hyperparameters given as numbers) picks in Python, so
    under jax.jit the other branch is dead code; a traced condition selects elementwise (jnp.where)."""
    if isinstance(cond, bool):
        return a if cond else b
    return jnp.where(cond, a, b)


def _and(*conds):
    if all(isinstance(c, bool) for c in conds):
        return all(conds)
    out = conds[0]
    for c in conds[1:]:
        out = jnp.logical_and(out, c)
    return out


def _or(*conds):
    if all(isinstance(c, bool) for c in conds):
        return any(conds)
    out = conds[0]
    for c in conds[1:]:
        out = jnp.logical_or(out, c)
    return out


def _not(cond):
    return (not cond) if isinstance(cond, bool) else jnp.logical_not(cond)


def _leaves(treedef, tree):
    """The leaves of ``tree`` in the order of ``treedef`` (a state that is not kept: None for every leaf)."""
    if tree is None:
        return [None] * treedef.num_leaves
    return treedef.flatten_up_to(tree)


def _tree(treedef, leaves):
    """The pytree of ``leaves`` (None for a state that is not kept)."""
    if leaves and all(x is None for x in leaves):
        return None
    return treedef.unflatten(leaves)


def _exp1(x):
    """E1(x), scipy.special.exp1: jax's exp1 only above 1, and below the power series -gamma - log x - sum_k
    (-x)^k/(k k!) (DLMF 6.6.2) to k = 18 (the next term is below 1/(19*19!) = 4.3e-19). jax's exp1 is a
    jnp.piecewise whose every branch runs on every element of an array, and its continued fraction (meant for
    x > 1) does not settle at a small x: on an array holding 1e-10 it did not return in 20 s (jax 0.10.2), so a
    module's function of such an array hung. E1(0) = inf and a negative x is NaN, as in scipy."""
    x = jnp.asarray(x, dtype=float)
    small = x <= 1
    near = jnp.where(small, x, 1.0)
    far = jnp.where(small, 2.0, x)
    total, term = jnp.zeros_like(near), jnp.ones_like(near)
    for k in range(1, 19):
        term = -term * near / k
        total = total + term / k
    return jnp.where(small, -0.5772156649015329 - jnp.log(near) - total, jax.scipy.special.exp1(far))


def _exp1e(x):
    """e^x E1(x) for x > 0 (the numpy runtime's _exp1e, codegen/scaled.py): e^x times E1 (_exp1) below 50 and the
    asymptotic series (1/x) sum_k (-1)^k k!/x^k (DLMF 6.12.1) to k = 19 above (relative error below 2.6e-16); each
    branch at an argument it is finite at, so that jnp.where's unused branch is neither inf nor NaN."""
    x = jnp.asarray(x, dtype=float)
    small = x < 50
    near = jnp.where(small, x, 50.0)
    far = jnp.where(small, 50.0, x)
    series, term = jnp.ones_like(far), jnp.ones_like(far)
    for k in range(1, 20):
        term = -term * k / far
        series = series + term
    return jnp.where(small, jnp.exp(near) * _exp1(near), series / far)
