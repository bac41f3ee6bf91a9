"""The torch printer's common subexpressions across programs (issue 39, item 2): a later program (a sample's
statistics) reads the lists an earlier one (the draw) computed instead of computing them again; a list changed in
place after it was computed is never offered.  Values are checked against numpy, and the seeded program against
the same program without seeds (bitwise: the same operations on the same values)."""
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
    ns = run(draw.lines, lists())
    kept = {f"_kept{n}": ns[n] for n in draw.memo.values()}
    got = run(stat.lines, dict(lists(), **kept))["s"]
    ref = run(plain.lines, lists())["s"]
    for a, b, hh, ee, gg in zip(got, ref, H, E, G):
        assert torch.equal(a, b)
        np.testing.assert_allclose(a.numpy(), ee * gg / np.sqrt(3.0 * (hh + 0.25)), rtol=1e-14)
    for a, hh, ee, mm in zip(ns["theta"], H, E, M):
        np.testing.assert_allclose(a.numpy(), ee / np.sqrt(3.0 * (hh + 0.25)) + mm, rtol=1e-14)


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
