"""eps_inside_sqrt (optax's convention, not a BLR step): the scale enters square-root scaling as s + ε, so the mean
is preconditioned by √(s + ε) (optax.rmsprop's default eps_in_sqrt=True, optax.adagrad's scale_by_rss; Tieleman &
Hinton 2012, Duchi et al. 2011) instead of √s + ε (torch, Adam: ``square_root_scaling: {eps}``).

Checked numerically, the generated numpy step against the formula written out here:
* RMSprop's recursion (Eqs. 36-38) with ε inside the root, from s = 0 and from s > 0, over 10 steps; the same
  recipe with ε outside (``square_root_scaling: {eps}``, no rule) equals √s + ε, and the two differ;
* ``when`` false is bit for bit the recipe without the rule (and without ε);
* after ``centered``: √(s − ū² + ε) (optax's scale_by_stddev);
* Adagrad's sum (``accumulated_sum``) from a zero accumulator: a coordinate whose gradient is exactly 0 stays put
  (optax's where(sum > 0, ...) guard is not needed for ε > 0);
* bad arguments are refused at the approximation's line.
"""
import functools

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError

# Same operations in the same order up to grouping (sqrt is correctly rounded): a few ulps per step over ≤ 10 steps
# of a contracting iteration.  1e-12 relative is a wide margin; ε on the wrong side of the root changes the step by
# ~ε/(2s) relative (≈ 1e-2 here, C = 0.05 on s ~ 1), a missing ε by as much.
RTOL, ATOL = 1e-12, 1e-14
LR, BETA, C = 0.05, 0.1, 0.05


def recipe(inside=True, outside=False, when=None, centered=False, adagrad=False, extra=None):
    hp = {"lr": LR, "beta": BETA, "c": C}
    approx = ["delta", "squared_gradient_hessian"]
    approx.append({"accumulated_sum": {"param": "s"}} if adagrad else {"separate_learning_rates": {"s": "beta"}})
    if centered:
        approx.append({"centered": {"param": "s", "rate": "1 - beta"}})
    if inside:
        args = {"param": "s", "eps": "c"}
        if when is not None:
            args["when"] = "flag"
            hp["flag"] = when
        args.update(extra or {})
        approx.append({"eps_inside_sqrt": args})
    approx.append({"square_root_scaling": {"param": "s", "eps": "c"} if outside else {"param": "s"}})
    return yaml.safe_dump({"name": "eps_inside_test", "family": "gaussian_diag", "loss": "abstract",
                           "learning_rate": "lr", "hyperparameters": hp, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


def problem(seed=0, n=6):
    """A separable, non-quadratic loss: ∇ℓ(θ) = a(θ − b) + 0.3 sin θ."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    b = rng.normal(size=n)
    return rng.normal(size=n), rng.uniform(0.2, 1.0, size=n), lambda x: a * (x - b) + 0.3 * np.sin(x)


def run(mod, m0, s0, grad, steps=10, **hp):
    state = mod.init(m=m0, s=s0)
    hp = {k: v for k, v in dict(lr=LR, beta=BETA, c=C, **hp).items() if k in mod.HYPERPARAMETERS}   # the ones used
    out = []
    for _ in range(steps):
        state = mod.step(state, oracles={"grad": grad}, **hp)
        out.append(state)
    return out


def hand(m, s, grad, inside, steps=10):
    out = []
    for _ in range(steps):
        g = grad(m)
        s = (1 - BETA) * s + BETA * g * g
        m = m - LR * g / (np.sqrt(s + C) if inside else np.sqrt(s) + C)
        out.append((m, s))
    return out


@pytest.mark.parametrize("start", ["zero", "positive"])
def test_rmsprop_with_eps_inside_and_outside_by_hand(start):
    m0, s_pos, grad = problem()
    s0 = np.zeros_like(m0) if start == "zero" else s_pos
    inside = run(compiled(recipe()), m0, s0, grad)
    outside = run(compiled(recipe(inside=False, outside=True)), m0, s0, grad)
    for got, want in ((inside, hand(m0, s0, grad, True)), (outside, hand(m0, s0, grad, False))):
        for st, (m, s) in zip(got, want):
            np.testing.assert_allclose(st["s"], s, rtol=RTOL, atol=0)
            np.testing.assert_allclose(st["m"], m, rtol=RTOL, atol=ATOL)
    assert np.max(np.abs(inside[-1]["m"] - outside[-1]["m"])) > 1e-4      # the convention is visible


def test_when_false_is_the_update_without_the_rule():
    m0, s0, grad = problem(1)
    a = run(compiled(recipe(when=True)), m0, s0, grad, flag=False)
    b = run(compiled(recipe(inside=False)), m0, s0, grad)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x["m"], y["m"])
        np.testing.assert_array_equal(x["s"], y["s"])
    c = run(compiled(recipe(when=True)), m0, s0, grad, flag=True)
    for st, (m, _) in zip(c, hand(m0, s0, grad, True)):
        np.testing.assert_allclose(st["m"], m, rtol=RTOL, atol=ATOL)


def test_after_centered_the_root_is_of_the_variance_plus_eps():
    m0, s0, grad = problem(2)
    got = run(compiled(recipe(centered=True)), m0, s0, grad)
    m, s, u = m0.copy(), s0.copy(), np.zeros_like(m0)
    for st in got:
        g = grad(m)
        s = (1 - BETA) * s + BETA * g * g
        u = (1 - BETA) * u + BETA * g
        m = m - LR * g / np.sqrt(s - u * u + C)
        np.testing.assert_allclose(st["m"], m, rtol=RTOL, atol=ATOL)


def test_adagrad_sum_from_zero_keeps_zero_gradient_coordinates():
    """s ← s + g², m ← m − ρg/√(s + ε) (Duchi et al. 2011; optax.adagrad); coordinates 0 and 3 never see a gradient:
    s stays 0 and the step there is 0/√ε = 0, what optax's where(s > 0, ..., 0) gives."""
    m0, _, grad0 = problem(3)
    mask = np.ones_like(m0)
    mask[[0, 3]] = 0.0
    grad = lambda x: grad0(x) * mask
    got = run(compiled(recipe(adagrad=True)), m0, np.zeros_like(m0), grad)
    m, s = m0.copy(), np.zeros_like(m0)
    for st in got:
        g = grad(m)
        s = s + g * g
        m = m - LR * g / np.sqrt(s + C)
        np.testing.assert_allclose(st["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(st["m"], m, rtol=RTOL, atol=ATOL)
    assert np.all(got[-1]["m"][[0, 3]] == m0[[0, 3]]) and np.all(got[-1]["s"][[0, 3]] == 0)


def _line_of(text, key):
    return next(i for i, line in enumerate(text.splitlines(), 1) if key in line)


@pytest.mark.parametrize("case,match", [
    ("no_root", "name 'square_root_scaling: {param: s}' after it"),
    ("root_first", "name 'square_root_scaling: {param: s}' after it"),
    ("unknown_param", "'q' is not a parameter or state"),
    ("unknown_arg", "unknown argument"),
    ("missing_eps", "missing argument 'eps'"),
    ("bad_when", "'when' must be a condition"),
])
def test_bad_arguments_are_refused_at_the_rule_line(case, match):
    d = yaml.safe_load(recipe())
    approx = d["approximations"]
    rule = next(a for a in approx if isinstance(a, dict) and "eps_inside_sqrt" in a)
    args = rule["eps_inside_sqrt"]
    if case == "no_root":
        approx.pop()
    elif case == "root_first":
        approx.remove(rule)
        approx.append(rule)
    elif case == "unknown_param":
        args["param"] = "q"
        approx[-1]["square_root_scaling"]["param"] = "q"
    elif case == "unknown_arg":
        args["inside"] = "c"
    elif case == "missing_eps":
        del args["eps"]
    elif case == "bad_when":
        args["when"] = "c"
    text = yaml.safe_dump(d, sort_keys=False)
    with pytest.raises(SpecError, match=match) as exc:
        api.derive(text)
    assert exc.value.line == _line_of(text, "eps_inside_sqrt")
