"""Runtime source shared by the array targets (numpy, and jax's plain-function modules): helpers copied into a
generated module by its printer when its code calls them (codegen/source.py); tested directly
(tests/unit/codegen/test_runtime_sources.py).  Host code: numpy in both targets."""
from __future__ import annotations

import numpy


def _need(given, names, what):
    """The mapping ``given`` must hold every name in ``names`` (a TypeError says which are missing)."""
    missing = [name for name in names if given is None or name not in given]
    if missing:
        raise TypeError(f"step() needs {what} {', '.join(missing)}")


def _tanh_sinh(n):
    """Nodes u_k in (0, 1) and weights w_k of the tanh-sinh rule with n points (an even n uses n - 1, at least 3):
    u = sigmoid(pi sinh t), t = k h, k = -(n-1)/2 .. (n-1)/2, up to pi sinh t = 34 (1 - u stays above 0 in float64);
    the weights are normalized to sum to 1 (a change below 4e-11 from 21 points on; a coarse rule stays exact for
    constants)."""
    m = max((int(n) - 1) // 2, 1)
    h = numpy.arcsinh(34 / numpy.pi) / m
    t = numpy.arange(-m, m + 1) * h
    x = numpy.pi * numpy.sinh(t)
    u = 1 / (1 + numpy.exp(-x))
    w = h * numpy.pi * numpy.cosh(t) * u * (1 - u)
    return u, w / w.sum()


def _hermite_nodes(nodes, _cache={}):
    """Nodes z_k and weights w_k of the Gauss-Hermite rule for the weight e^(-z^2/2) with ``nodes`` points (numpy's
    hermegauss convention: the weights sum to sqrt(2 pi)).  hermegauss's recurrence overflows from about 360 nodes
    (NaN weights); above 300 the rule is Golub-Welsch's: the eigenvalues of the Jacobi matrix of the probabilists'
    Hermite polynomials (off-diagonal sqrt(k)) and the squared first components of its eigenvectors times sqrt(2 pi).
    Host code (numpy) in both targets; the engine's own rule is blr_derive/core/nodes.py gauss_hermite_rule.
    Computed once per count in a process and kept (read-only arrays): the dense eigendecomposition of the
    1001-point rule (the most a recipe may ask) took 19 s on a loaded 2-core machine, and a step reads the rule
    twice (the mean's expectation and Stein's), so ten steps of a logistic regression took 285 s."""
    n = int(nodes)
    cache = _cache                      # one per generated module (its own copy of this function)
    if n not in cache:
        if n <= 300:
            z, w = numpy.polynomial.hermite_e.hermegauss(n)
        else:
            k = numpy.sqrt(numpy.arange(1.0, n))
            z, v = numpy.linalg.eigh(numpy.diag(k, 1) + numpy.diag(k, -1))
            w = numpy.sqrt(2 * numpy.pi) * v[0] ** 2
        z.flags.writeable = False
        w.flags.writeable = False
        cache[n] = (z, w)
    return cache[n]
