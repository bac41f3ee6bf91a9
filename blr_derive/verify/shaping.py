"""Rank-shaped Monte Carlo (``Sampling.shaping``, e.g. NES utilities) in the check of generated code against the
symbolic update (``verify/update.py``).

Shaped values are centred (NES utilities sum to zero), so with every sample drawn alike (``FixedNoise``) the
averaged statistics vanish and the check would compare no step at all.  Here each sample gets a draw of its own,
handed to the generated module in draw order by :class:`SequenceNoise`, and the shaped oracle is a loss that
depends on θ (:func:`shaped_loss`), so that the ranks follow the losses: the symbolic side evaluates θ_k, the loss,
its rank (ties in draw order), the shaped value of that rank and the averages over the S samples."""
from __future__ import annotations

import numpy as np

from blr_derive.core.errors import DerivationError
from blr_derive.families.symbolic import evaluate
from blr_derive.verify.state import shape_of

#: the numpy Generator method behind each kind of draw
METHODS = {"normal": "standard_normal", "uniform": "random"}


class SequenceNoise:
    """An rng that hands out ``draws`` [(method, value)] in order: a call of another method or shape than the next
    draw, or one draw too many, is an error (the generated module draws otherwise than its program says)."""

    def __init__(self, draws):
        self.draws = list(draws)
        self.used = 0

    def _next(self, method, shape):
        if self.used >= len(self.draws):
            raise DerivationError(f"the generated module asked for more than the {len(self.draws)} draws of its "
                                  "samples")
        want, value = self.draws[self.used]
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)
        if want != method or shape != np.shape(value):
            raise DerivationError(f"draw {self.used + 1}: the generated module called {method}{shape!r}, the program "
                                  f"draws {want}{np.shape(value)!r}")
        self.used += 1
        return np.array(value, dtype=float)

    def standard_normal(self, shape):
        return self._next("standard_normal", shape)

    def random(self, shape):
        return self._next("random", shape)

    def finish(self):
        """After the step: every draw was used."""
        if self.used != len(self.draws):
            raise DerivationError(f"the generated module used {self.used} of the {len(self.draws)} draws of its "
                                  "samples")


def shaped_loss(x):
    """The shaped oracle's value at θ in the check: a quadratic, Σ (θ_i - 0.3)² + 0.5 (distinct samples get
    distinct values, hence ranks)."""
    return float(np.sum((np.asarray(x, dtype=float) - 0.3) ** 2) + 0.5)


def supports(sm) -> bool:
    """Shaped Monte Carlo with draws the module makes once per sample (no rejection sampler) and oracles at the
    sample alone (no reductions over the coordinates, no chained oracles)."""
    return (sm.shaping is not None and sm.draw in METHODS and sm.accept is None and not sm.reductions
            and not sm.chained and all(k in METHODS for _, k in sm.more_draws))


def shaped_statistics(sm, flags, env, dims, rng, oracle_vals):
    """Put the averaged statistics of shaped sampling ``sm`` into ``env``; returns (the rng to hand the generated
    module, {oracle name: function} to call in place of constant values)."""
    sh = sm.shaping
    S = int(evaluate(sm.samples.xreplace(flags), env, dims))
    shaped = [o for s, o in sm.calls if s == sh.call]
    if len(shaped) != 1:
        raise DerivationError(f"the shaped value {sh.call} is not one oracle call at the sample")
    draws, per_sample = [], []
    for _ in range(S):
        this = {}
        for sym, kind in [(sm.eps, sm.draw)] + list(sm.more_draws):
            shape = shape_of(sym, dims)
            v = rng.standard_normal(shape) if kind == "normal" else rng.random(shape)
            this[sym] = v if shape else float(v)
            draws.append((METHODS[kind], np.asarray(v, dtype=float)))
        per_sample.append(this)
    w = [float(sh.weight.xreplace({sh.rank: r, sh.count: S}).evalf(30)) for r in range(1, S + 1)]
    vals = [float(sh.value.xreplace({sh.weight_of_rank: w_r, sh.total: sum(w), sh.count: S}).evalf(30)) for w_r in w]
    samples = []
    for this in per_sample:
        env.update(this)
        env[sm.theta] = evaluate(sm.theta_expr.xreplace(flags), env, dims)
        theta = env[sm.theta]
        env_k = {sm.theta: theta, **this}
        for k_sym, oracle in sm.calls:
            if k_sym != sh.call:
                env_k[k_sym] = oracle_vals[oracle]
        samples.append((shaped_loss(theta), env_k))
    # rank r of each sample: 1 = lowest loss, ties in draw order (a stable sort)
    order = sorted(range(S), key=lambda k: samples[k][0])
    rank = {k: r for r, k in enumerate(order)}
    sums = {avg: 0.0 for avg, _ in sm.stats}
    for k, (_, env_k) in enumerate(samples):
        env.update(env_k)
        env[sh.call] = vals[rank[k]]
        for avg, e in sm.stats:
            sums[avg] = sums[avg] + evaluate(e.xreplace(flags), env, dims) / S
    env.update(sums)
    return SequenceNoise(draws), {shaped[0]: shaped_loss}


def fixed_noise_statistics(sm, flags, env, dims):
    """Shaped sampling that :func:`supports` does not cover, with ``FixedNoise``: every sample has the same draw and
    the same loss, so ranks follow the draw order and sample k gets the shaped value of rank k; the statistics are
    the averages over the S shaped values (centred values cancel: a weak check)."""
    sh = sm.shaping
    S = int(evaluate(sm.samples.xreplace(flags), env, dims))
    w = [float(sh.weight.xreplace({sh.rank: r, sh.count: S}).evalf(30)) for r in range(1, S + 1)]
    vals = [float(sh.value.xreplace({sh.weight_of_rank: w_r, sh.total: sum(w), sh.count: S}).evalf(30)) for w_r in w]
    sums = {avg: 0.0 for avg, _ in sm.stats}
    for v in vals:
        env[sh.call] = v
        for avg, e in sm.stats:
            sums[avg] = sums[avg] + evaluate(e.xreplace(flags), env, dims) / S
    env.update(sums)
