"""The torch printer's common subexpressions across programs (issue 39, item 2): a later program (a sample's
statistics) reads the lists an earlier one (the draw) computed instead of computing them again; a list changed in
place after it was computed is never offered; a product reads the largest product of its factors an earlier
program computed and applies the others after.  Values are checked against numpy and against the same program
without seeds."""
import numpy as np
import sympy as sp
import torch

from blr_derive.codegen.backends.torch.printer import ForeachCompiler

h, e, g, m = sp.symbols("h e g m", real=True)
c, w = sp.symbols("c w")            # host numbers
H = [np.linspace(0.5, 3.0, 7), np.linspace(1.0, 2.0, 5)]
E = [np.linspace(-2.0, 2.0, 7), np.linspace(-1.0, 1.5, 5)]
G = [np.linspace(0.3, -0.9, 7), np.linspace(2.0, -2.0, 5)]
M = [np.linspace(-1.0, 1.0, 7), np.linspace(0.2, 0.7, 5)]


def run(lines, ns):
    ns = dict(ns, torch=torch, math=__import__("math"))
    exec("\n".join(lines), ns)
    return ns


def lists():
    t = lambda arrs: [torch.tensor(a) for a in arrs]        # noqa: E731
    return {"h": t(H), "e": t(E), "g": t(G), "m": t(M), "c": 3.0, "w": 0.25}


def test_statistics_read_the_draws_lists_and_agree_bitwise():
    sigma = sp.sqrt(c * (h + w))
    draw = ForeachCompiler({h, e, m}, indent="")
    draw.assign(sp.Symbol("theta"), e / sigma + m)
    seed = {x: f"_kept{n}" for x, n in draw.memo.items()}
    stat = ForeachCompiler({h, e, g}, indent="", seed=seed)
    stat.assign(sp.Symbol("s"), e * g / sigma)
    plain = ForeachCompiler({h, e, g}, indent="")
    plain.assign(sp.Symbol("s"), e * g / sigma)
    assert stat.used_seed and not any("sqrt" in line for line in stat.lines)      # the spread is read, not made
    assert any("sqrt" in line for line in plain.lines)
    # the largest product the draw made (the scaled noise e/σ) is read whole: one operation, e/σ times g
    assert len(stat.lines) == 2 and "_foreach_mul(" in stat.lines[0] and len(plain.lines) > 3
    ns = run(draw.lines, lists())
    kept = {f"_kept{n}": ns[n] for n in draw.memo.values()}
    got = run(stat.lines, dict(lists(), **kept))["s"]
    ref = run(plain.lines, lists())["s"]
    for a, b, hh, ee, gg in zip(got, ref, H, E, G):
        t = torch.tensor
        assert torch.equal(a, t(ee) / torch.sqrt((t(hh) + 0.25) * 3.0) * t(gg))   # rounded in that order
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-15)
        np.testing.assert_allclose(a.numpy(), ee * gg / np.sqrt(3.0 * (hh + 0.25)), rtol=1e-14)
    for a, hh, ee, mm in zip(ns["theta"], H, E, M):
        np.testing.assert_allclose(a.numpy(), ee / np.sqrt(3.0 * (hh + 0.25)) + mm, rtol=1e-14)


def test_a_product_over_a_computed_sub_product_reads_it_with_what_is_left():
    """A seed that is a product of several factors of a later product (with a host coefficient and a divisor
    left over) is read once and the other factors applied after: the value is the product's, and the program
    has one operation per factor left, where the unseeded one has one per factor."""
    draw = ForeachCompiler({h, e, m}, indent="")
    draw.assign(sp.Symbol("u"), e * h + m)
    seed = {x: f"_kept{n}" for x, n in draw.memo.items()}
    stat = ForeachCompiler({h, e, g, m}, indent="", seed=seed)
    stat.assign(sp.Symbol("s"), c * e * h * g / (m + 2))
    assert stat.used_seed == {"_kept" + draw.memo[e * h]}
    plain = ForeachCompiler({h, e, g, m}, indent="")
    plain.assign(sp.Symbol("s"), c * e * h * g / (m + 2))
    assert len(stat.lines) == len(plain.lines) - 1        # e·h read, not made: one multiplication less
    ns = run(draw.lines, lists())
    got = run(stat.lines, dict(lists(), **{f"_kept{n}": ns[n] for n in draw.memo.values()}))["s"]
    for a, hh, ee, gg, mm in zip(got, H, E, G, M):
        np.testing.assert_allclose(a.numpy(), 3.0 * ee * hh * gg / (mm + 2), rtol=1e-14)


def test_a_list_changed_in_place_is_not_offered():
    comp = ForeachCompiler({h, g}, indent="")
    comp.assign(sp.Symbol("r"), 2 * h + 3 * g)          # 2h is computed, then g added into it in place
    assert sp.Mul(2, h) not in comp.memo
    ns = run(comp.lines, lists())
    for expr, name in comp.memo.items():                  # every remembered list holds its expression's value
        f = sp.lambdify((h, g), expr, "numpy")
        for k in range(2):
            np.testing.assert_allclose(ns[name][k].numpy(), f(H[k], G[k]) + 0 * H[k], rtol=1e-14)


def test_nothing_computed_under_a_condition_is_offered():
    comp = ForeachCompiler({h}, indent="")
    comp.assign(sp.Symbol("r"), sp.sqrt(h + w), sp.Symbol("flag"))
    assert comp.memo == {}
