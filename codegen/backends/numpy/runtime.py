"""The numpy target's runtime source: the helpers a generated module defines when its code calls them (array checks,
run-time domain checks of new values, Cholesky and triangular solves, the symmetric matrix exponential,
Gauss-Hermite expectations), written once as ordinary Python and copied into each module by the printer's
``HELPERS`` (codegen/source.py).  Tested directly (tests/unit/codegen/test_runtime_sources.py); never imported by the
engine, which reads it as text.
"""
from __future__ import annotations

import numpy
import scipy.linalg
import scipy.special

from blr_derive.codegen.runtime.arrays import _hermite_nodes  # the shared rule (a module gets its own copy)

#: stand-ins for what each generated module declares itself: the shape of each of its arrays, its symmetric ones
SHAPES: dict = {}
SYMMETRIC: frozenset = frozenset()
#: the module's switch of its run-time domain checks (a module with checks sets it True)
CHECK_DOMAINS = True


def _array(name, value, dims, oracle=None):
    """``value`` as a float array of the shape SHAPES[name] declares, binding the dimensions it names in ``dims``;
    a wrong shape, a dimension that differs from its other uses, or a matrix in SYMMETRIC that is not symmetric
    is a ValueError naming the variable (nothing is broadcast or read from one triangle silently).  A matrix in
    SYMMETRIC must be finite: a NaN or an infinity is reported as such, naming the ``oracle`` that returned the
    value (if any) and the entry, before the symmetry test that it would fail."""
    a = numpy.asarray(value, dtype=float)
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
    if name in SYMMETRIC and a.size:
        bad = numpy.argwhere(~numpy.isfinite(a))
        if len(bad):
            at = tuple(int(i) for i in bad[0])
            what = "NaN" if numpy.isnan(a[at]) else "inf" if a[at] > 0 else "-inf"
            source = f"oracle '{oracle}' returned" if oracle else f"{name} holds"
            raise ValueError(f"{source} {what} at {name}[{', '.join(map(str, at))}]")
        # a stack of matrices (a leading component axis) is checked matrix by matrix: the last two axes
        if not numpy.allclose(a, numpy.swapaxes(a, -1, -2), rtol=0, atol=1e-8 * max(1.0, numpy.abs(a).max())):
            raise ValueError(f"{name} must be symmetric (the update reads one triangle of it)")
    return a


def _check_domain(name, value, domain, component, step, hint, where="step"):
    """Raise FloatingPointError where the new value of ``name`` left its domain (``positive``: every entry > 0 and
    finite; ``positive_definite``: each matrix in the last two axes; ``finite``: every entry a finite number),
    naming the component (``"axis"``: the leading axis numbers them) and the step, instead of returning a state
    that is no longer a distribution of the family.
    CHECK_DOMAINS = False switches the checks off."""
    if not CHECK_DOMAINS:
        return
    a = numpy.asarray(value, dtype=float)
    singular = False                    # an indefinite matrix only within rounding
    if domain == "positive_definite":
        try:                            # a Cholesky factor exists, and is finite (NaN passes LAPACK's test)
            if numpy.isfinite(numpy.linalg.cholesky(a)).all():
                return
        except numpy.linalg.LinAlgError:
            pass
        stack = a.reshape((-1,) + a.shape[-2:])
        finite = numpy.isfinite(stack).all(axis=(1, 2))
        low = numpy.full(len(stack), numpy.nan)
        low[finite] = numpy.linalg.eigvalsh((stack[finite] + numpy.swapaxes(stack[finite], -1, -2)) / 2)[:, 0]
        i = int(numpy.flatnonzero(~(low > 0))[0])
        M = stack[i]
        if numpy.isfinite(M).all():
            w = numpy.linalg.eigvalsh((M + M.T) / 2)
            what, detail = "positive definite", f"smallest eigenvalue {w[0]:.6g}"
            if -w[0] <= 10 * len(w) * numpy.finfo(float).eps * numpy.abs(w).max():
                detail += f", within rounding of the largest, {w[-1]:.6g}"
                singular = True
        else:                           # NaN or inf entries: what the arithmetic did, not an indefinite matrix
            bad = tuple(int(x) for x in numpy.argwhere(~numpy.isfinite(M))[0])
            what = "a number" if numpy.isnan(M).any() else "finite"
            detail = f"entry {bad} is {float(M[bad]):.6g}"
        index = tuple(int(x) for x in numpy.unravel_index(i, a.shape[:-2])) if a.ndim > 2 else ()
    else:
        ok = numpy.isfinite(a)                  # NaN is not, nor inf (an overflowed E_q[ℓ]: s = inf, m = NaN)
        if domain != "finite":
            ok &= a > 0
        if ok.all():
            return
        index = tuple(int(x) for x in numpy.argwhere(~ok)[0]) if a.ndim else ()
        what = "a number" if numpy.isnan(a[index]) else "finite" if numpy.isinf(a[index]) else "positive"
        detail = f"value {float(a[index] if a.ndim else a):.6g}"
        detail += f" at index {index}" if index else ""
    if component == "axis":
        where_c = f" of component {index[0] + 1} (of {a.shape[0]})"
    elif component is not None:
        where_c = f" of component {component}"
    else:
        where_c = ""
    at = f" at step {int(step)}" if step is not None else ""
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
    """log det a (each matrix in the last two axes) from numpy.linalg.slogdet: finite where det itself over- or
    underflows in float64 (a 400 x 400 precision 1e3 I: det = 1e1200, log det = 2763); -inf for a singular matrix
    and NaN for a negative determinant, as log(det a) gives them (log of the sign: 0, -inf, NaN)."""
    sign, logabs = numpy.linalg.slogdet(a)
    return logabs + numpy.log(sign)


def _spd_solve(A, B):
    """Solve A X = B for symmetric A, no explicit inverse: Cholesky where A is positive definite (a precision, a
    covariance), else the symmetric indefinite (LDLᵀ) solve, e.g. a sum of sites of any sign; a covariance that
    comes out indefinite is then refused by the step's domain check, which names it."""
    try:
        return scipy.linalg.cho_solve(scipy.linalg.cho_factor(A, lower=True), B)
    except scipy.linalg.LinAlgError:
        return scipy.linalg.solve(A, B, assume_a="sym")


def _tri_solve(L, B, trans):
    """Solve L X = B (trans 0) or Lᵀ X = B (trans 1) for lower-triangular L (substitution; no explicit inverse)."""
    return scipy.linalg.solve_triangular(L, B, lower=True, trans=trans)


def _expm_sym(M):
    """The matrix exponential of a symmetric matrix M, V diag(exp(w)) Vᵀ from its eigendecomposition."""
    w, V = numpy.linalg.eigh((M + M.T) / 2)
    return (V * numpy.exp(w)) @ V.T


def _gauss_hermite(f, mean, var, nodes):
    """E[f(x)] for x ~ N(mean, var) entrywise, by Gauss-Hermite quadrature with `nodes` points."""
    z, w = _hermite_nodes(nodes)
    x = mean[:, None] + numpy.sqrt(var)[:, None] * z
    return numpy.broadcast_to(f(x), x.shape) @ (w / numpy.sqrt(2 * numpy.pi))


def _gauss_hermite_stein(f, mean, var, nodes):
    """E[f(x) (x - mean)] / var for x ~ N(mean, var) entrywise (= E[f'(x)], Stein's lemma), by Gauss-Hermite
    quadrature with `nodes` points; 0 where var = 0."""
    z, w = _hermite_nodes(nodes)
    sd = numpy.sqrt(var)
    x = mean[:, None] + sd[:, None] * z
    fx = numpy.broadcast_to(f(x), x.shape)       # f may be a constant (a linear data sum)
    return numpy.divide(fx @ (w * z / numpy.sqrt(2 * numpy.pi)), sd, out=numpy.zeros_like(sd), where=sd > 0)


def _eigenbasis(S):
    """The eigenvectors of the symmetric S as the columns of an orthogonal matrix, by decreasing eigenvalue."""
    return numpy.linalg.eigh(S)[1][:, ::-1]


def _rayleigh_order(S, Q):
    """The columns of Q by decreasing Rayleigh quotient diag(Qᵀ S Q) (a stable order)."""
    return numpy.argsort(-(Q * (S @ Q)).sum(axis=0), kind="stable")


def _power_basis(S, Q):
    """One power iteration of the symmetric S from the orthogonal Q, orthonormalised: the Q factor of the QR
    decomposition of S Q with its columns by decreasing Rayleigh quotient."""
    return numpy.linalg.qr((S @ Q)[:, _rayleigh_order(S, Q)])[0]


def _reordered(X, SL, QL, SR, QR):
    """X with its rows in the order _power_basis gives the columns of QL, its columns in that of QR."""
    return X[_rayleigh_order(SL, QL)][:, _rayleigh_order(SR, QR)]


def _exp1e(x):
    """e^x E1(x) for x > 0, the exponentially scaled exponential integral (codegen/scaled.py): e^x times scipy's exp1
    below 50, where neither overflows, and the asymptotic series (1/x) sum_k (-1)^k k!/x^k (DLMF 6.12.1) to k = 19
    above, whose next term 20!/50^20 = 2.6e-16 bounds its relative error; finite where e^x alone overflows (x > 709)."""
    x = numpy.asarray(x, dtype=float)
    small = x < 50
    near = numpy.where(small, x, 50.0)
    far = numpy.where(small, 50.0, x)
    series, term = numpy.ones_like(far), numpy.ones_like(far)
    for k in range(1, 20):
        term = -term * k / far
        series = series + term
    return numpy.where(small, numpy.exp(near) * scipy.special.exp1(near), series / far)


def _ive(nu, x):
    """e^-x I_nu(x) for x > 0 (codegen/scaled.py): scipy's ive (AMOS) up to 1e8, and above the asymptotic series
    (2 pi x)^-1/2 sum_k (-1)^k a_k(nu)/x^k, a_k(nu) = prod_{j<=k} (4 nu^2 - (2j - 1)^2)/(k! 8^k) (DLMF 10.40.1), to
    k = 4 (the next term is below 3e-23 there for nu < 100): scipy's ive is NaN above x = 2^30."""
    x = numpy.asarray(x, dtype=float)
    big = x > 1e8
    near = numpy.where(big, 1.0, x)
    far = numpy.where(big, x, 1e8)
    m = 4.0 * numpy.asarray(nu, dtype=float) ** 2
    series, term = numpy.ones_like(far), numpy.ones_like(far)
    for k in range(1, 5):
        term = -term * (m - (2 * k - 1) ** 2) / (8 * k * far)
        series = series + term
    return numpy.where(big, series / numpy.sqrt(2 * numpy.pi * far), scipy.special.ive(nu, near))
