"""The torch target's buffer planner (codegen/backends/torch/inplace.py): what it inlines and which in-place
programs it writes, each program run on random tensors against the expression it compiles (float64)."""
import math

import sympy as sp
import torch

from blr_derive.codegen.backends.torch.inline import _fusable, _reads, inline_single_use
from blr_derive.codegen.backends.torch.inplace import PlannedCompiler

g, s, buf, m, root, d = sp.symbols("g s buf m root d", real=True)
a, lr, mom, eps = sp.symbols("a lr mom eps", positive=True)
flag = sp.Symbol("flag")
TENSORS = {g, s, buf, m}


def test_reads_counts_one_branch_of_a_piecewise():
    e = sp.Piecewise((d + buf, flag), (2 * d, True))
    assert _reads(e, d) == 1 and _reads(d * d + d, d) == 2 and _reads(e, flag) == 1


def test_a_fusable_product_is_inlined_into_each_reader_and_its_operands_stay_names():
    assert _fusable(g / root, {g, root}) and _fusable(3 * g * s, {g, s}) and _fusable(a * g ** 2, {g})
    assert not _fusable(g / (root + 1), {g, root}) and not _fusable(g * s * buf, {g, s, buf})
    prog = [(root, eps + sp.sqrt(s)), (d, g / root),
            (sp.Symbol("buf_new", real=True), mom * buf + d), (sp.Symbol("m_new", real=True), m - lr * d)]
    out = dict(inline_single_use(prog, {sp.Symbol("buf_new", real=True), sp.Symbol("m_new", real=True)}, TENSORS))
    assert d not in out and root in out                  # d = g/root went into both readers; root stayed a name
    assert out[sp.Symbol("m_new", real=True)] == m - lr * g / root


def _run(program, dests, final, values, host):
    comp = PlannedCompiler(set(TENSORS), dests, final, indent="")
    lines = comp.compile_program(program, {})
    env = {"torch": torch, **host, **{k: [v.clone() for v in vs] for k, vs in values.items()}}
    exec("\n".join(lines), env)           # noqa: S102 -- the planner's own output on test data
    return lines, env


def test_state_updates_are_written_in_place_with_fused_accumulations():
    rng = torch.Generator().manual_seed(0)
    vals = {str(x): [torch.rand(5, generator=rng, dtype=torch.float64) + 0.1 for _ in range(2)] for x in TENSORS}
    host = {"a": 0.9, "lr": 0.1, "mom": 0.5, "eps": 1e-8}
    s_new, m_new, t0 = sp.Symbol("s_new", real=True), sp.Symbol("m_new", real=True), sp.Symbol("t_0", real=True)
    program = [(t0, 1 - a), (s_new, a * s + t0 * g ** 2), (m_new, m - lr * g / (eps + sp.sqrt(s_new))),
               (sp.Symbol("buf_new", real=True), a * buf + t0 * g)]
    dests = {s_new: ("s", s), m_new: ("m", m), sp.Symbol("buf_new", real=True): ("buf", buf)}
    lines, env = _run(program, dests, set(dests), vals, host)
    text = "\n".join(lines)
    assert "_foreach_addcmul_(s, g, g" in text and "_foreach_addcdiv_(m, g," in text
    assert "_foreach_lerp_(buf, g, t_0)" in text        # a·buf + (1 − a)·g through the host name t_0
    for i in range(2):
        gi, si, mi, bi = (vals[k][i] for k in ("g", "s", "m", "buf"))
        s2 = 0.9 * si + 0.1 * gi ** 2
        torch.testing.assert_close(env["s"][i], s2, rtol=1e-14, atol=0)
        torch.testing.assert_close(env["m"][i], mi - 0.1 * gi / (1e-8 + s2.sqrt()), rtol=1e-14, atol=0)
        torch.testing.assert_close(env["buf"][i], 0.9 * bi + 0.1 * gi, rtol=1e-14, atol=0)


def test_terms_linear_in_the_state_are_collected():
    rng = torch.Generator().manual_seed(1)
    vals = {str(x): [torch.rand(4, generator=rng, dtype=torch.float64) for _ in range(2)] for x in TENSORS}
    m_new = sp.Symbol("m_new", real=True)
    lines, env = _run([(m_new, m - lr * a * m - lr * g)], {m_new: ("m", m)}, {m_new}, vals, {"lr": 0.1, "a": 0.3})
    assert "_foreach_mul_(m, " in "\n".join(lines) and "_foreach_copy_" not in "\n".join(lines)
    for i in range(2):
        torch.testing.assert_close(env["m"][i], vals["m"][i] * (1 - 0.03) - 0.1 * vals["g"][i], rtol=1e-14, atol=0)


def test_the_square_root_of_a_scaled_tensor_is_printed_in_torchs_order():
    """sqrt(c·x) for a host factor c: the root of the tensor, divided by sqrt(d) where c = 1/d (torch.optim's
    ``sqrt(s)/sqrt(1 - β^t)``), multiplied by sqrt(c) otherwise; the plain form (scale, then root) where the
    host test c > 0 fails.  float32 values against the two orders computed directly by torch."""
    b, t = sp.symbols("b t")          # no assumptions: the sign of 1 - b**t is tested on the host
    r_new = sp.Symbol("r_new", real=True)
    rng = torch.Generator().manual_seed(3)
    x = [torch.rand(64, generator=rng) * 1e-3 for _ in range(2)]
    for c, host, want in [
            (1 / (1 - b ** t), {"b": 0.999, "t": 7}, lambda v: v.sqrt() / math.sqrt(1 - 0.999 ** 7)),
            (a, {"a": 0.3}, lambda v: v.sqrt() * math.sqrt(0.3)),                  # a positive factor: no test
            (1 / (1 - b ** t), {"b": 2.0, "t": 1}, lambda v: (v * (1 / (1 - 2.0))).sqrt())]:   # c < 0: NaN, as written
        comp = PlannedCompiler({s}, {}, {r_new}, indent="")
        lines = comp.compile_program([(r_new, sp.sqrt(c * s))], {})
        env = {"torch": torch, "math": math, "_positive": lambda v: v > 0, **host, "s": [v.clone() for v in x]}
        exec("\n".join(lines), env)        # noqa: S102 -- the planner's own output on test data
        text = "\n".join(lines)
        assert ("if " in text) == (not c.is_positive), text
        for got, v in zip(env["r_new"], x):
            assert torch.equal(got.nan_to_num(-1.0), want(v).nan_to_num(-1.0)), text
    assert "_foreach_div_(_f1, math.sqrt(1 - b**t))" in "\n".join(
        PlannedCompiler({s}, {}, {r_new}, indent="").compile_program([(r_new, sp.sqrt(s / (1 - b ** t)))], {}))


def test_a_scaled_tensor_read_twice_is_folded_into_its_readers():
    """c·x (a host factor times one tensor) read by two assignments is not kept in a buffer: its readers take it
    as an add's alpha (g + δ·m as ``add(g, m, alpha=δ)``) and as a state's coefficient (m - lr·δ·m as
    ``mul_(m, 1 - lr·δ)``), as torch.optim rounds them."""
    delta = sp.Symbol("delta", positive=True)
    t0, gw, m_new = (sp.Symbol(n, real=True) for n in ("t_0", "g_wd", "m_new"))
    assert _fusable(delta * m, {m}) and not _fusable(delta * m * g * s, {m, g, s})
    program = [(t0, delta * m), (gw, g + t0), (m_new, m - lr * t0 - lr * g)]
    out = dict(inline_single_use(program, {gw, m_new}, TENSORS))
    assert t0 not in out
    rng = torch.Generator().manual_seed(4)
    vals = {str(v): [torch.rand(6, generator=rng) for _ in range(2)] for v in TENSORS}
    lines, env = _run(list(out.items()), {m_new: ("m", m)}, {gw, m_new}, vals, {"delta": 0.01, "lr": 0.1})
    text = "\n".join(lines)
    assert "_foreach_add(g, m, alpha=delta)" in text and "_foreach_mul_(m, -delta*lr + 1)" in text, text
    for i in range(2):
        gi, mi = vals["g"][i], vals["m"][i]
        assert torch.equal(env["g_wd"][i], torch.add(gi, mi, alpha=0.01)), i
        assert torch.equal(env["m"][i], (mi * (1 - 0.1 * 0.01)).add(gi, alpha=-0.1)), i


def test_a_quotient_of_computed_tensors_is_formed_before_the_plain_factor():
    """x·√a/√b with x a plain tensor and the roots computed: ``(√a / √b)·x``, as torch's Adadelta computes its
    delta; float32 values equal to that order computed directly by torch (and not, on these draws, to
    ``(x·√a)/√b``, the order the planner printed before)."""
    d_new = sp.Symbol("d_new", real=True)
    rng = torch.Generator().manual_seed(5)
    vals = {str(v): [torch.rand(256, generator=rng) + 0.01 for _ in range(2)] for v in TENSORS}
    lines, env = _run([(d_new, g * sp.sqrt(buf + eps) / sp.sqrt(s + eps))], {}, {d_new}, vals, {"eps": 1e-6})
    text = "\n".join(lines)
    assert "_foreach_mul_(_f1, g)" in text and text.index("_foreach_div_") < text.index("_foreach_mul_"), text
    other = 0
    for i in range(2):
        gi, si, bi = vals["g"][i], vals["s"][i], vals["buf"][i]
        torch_order = (bi + 1e-6).sqrt().div((si + 1e-6).sqrt()).mul(gi)
        assert torch.equal(env["d_new"][i], torch_order), i
        other += int((env["d_new"][i] != (gi * (bi + 1e-6).sqrt()).div((si + 1e-6).sqrt())).sum())
    assert other > 0                        # the two orders do round differently here


def test_a_sum_over_a_divisor_accumulated_into_a_state_is_one_addcdiv_per_summand():
    """m - lr·(c₁·g + c₂·buf)/y: the divisor computed once, then ``addcdiv_(m, g, y, -lr·c₁)`` and
    ``addcdiv_(m, buf, y, -lr·c₂)`` in the sum's order (torch's NAdam); float32 values equal to that order."""
    c1, c2 = sp.symbols("c1 c2", positive=True)
    m_new = sp.Symbol("m_new", real=True)
    rng = torch.Generator().manual_seed(6)
    vals = {str(v): [torch.rand(256, generator=rng) for _ in range(2)] for v in TENSORS}
    host = {"lr": 0.01, "c1": 0.3, "c2": 0.6, "eps": 1e-8}
    lines, env = _run([(m_new, m - lr * (c1 * g + c2 * buf) / (sp.sqrt(s) + eps))], {m_new: ("m", m)}, {m_new},
                      vals, host)
    text = "\n".join(lines)
    assert text.count("_foreach_addcdiv_(m, ") == 2 and text.count("_foreach_sqrt") == 1, text
    for i in range(2):
        gi, si, bi, mi = (vals[k][i] for k in ("g", "s", "buf", "m"))
        y = si.sqrt() + 1e-8
        names = [n for n in ("g", "buf") if f"_foreach_addcdiv_(m, {n}," in text]
        want = mi.clone()
        for n in sorted(names, key=lambda n: text.index(f"_foreach_addcdiv_(m, {n},")):
            want.addcdiv_({"g": gi, "buf": bi}[n], y, value=-0.01 * (0.3 if n == "g" else 0.6))
        assert torch.equal(env["m"][i], want), i


def test_a_state_branch_on_the_step_count_is_a_select_when_compiling():
    """buf ← (g if t == 1 else mom·buf + g): eager, the ``if``; under torch.compile a ``torch.where`` on a 0-d
    tensor of the count where the count is traced (not an int known on the host).  Both blocks run here (the
    compiled one by patching is_compiling) for t = 1 and t = 3 and equal the formula; a condition on
    hyperparameters alone stays a plain branch."""
    t = sp.Symbol("t", positive=True)
    buf_new = sp.Symbol("buf_new", real=True)
    e = sp.Piecewise((g, sp.Eq(t, 1)), (mom * buf + g, True))
    rng = torch.Generator().manual_seed(7)
    vals = {str(v): [torch.rand(8, generator=rng, dtype=torch.float64) for _ in range(2)] for v in TENSORS}
    comp = PlannedCompiler(set(TENSORS), {buf_new: ("buf", buf)}, {buf_new}, indent="", step=t)
    lines = comp.compile_program([(buf_new, e)], {})
    text = "\n".join(lines)
    assert "if torch.compiler.is_compiling() and not isinstance(t, int):" in text and "torch.where((_step_t == 1)" in text, text
    plain = PlannedCompiler(set(TENSORS), {buf_new: ("buf", buf)}, {buf_new}, indent="", step=t).compile_program(
        [(buf_new, sp.Piecewise((g, mom > 1), (mom * buf + g, True)))], {})
    assert "is_compiling" not in "\n".join(plain)
    real = torch.compiler.is_compiling
    for compiling in (False, True):
        for step in (1, 3, 1.0, 3.0):       # an int count keeps the branch; a float (a traced count's type) selects
            env = {"torch": torch, "t": step, "mom": 0.5, "_foreach_copy": torch._foreach_copy_,
                   **{k: [v.clone() for v in vs] for k, vs in vals.items()}}
            torch.compiler.is_compiling = (lambda: True) if compiling else real
            try:
                exec(text, env)           # noqa: S102 -- the planner's own output on test data
            finally:
                torch.compiler.is_compiling = real
            assert ("_step_t" in env) == (compiling and isinstance(step, float))
            for i in range(2):
                want = vals["g"][i] if step == 1 else 0.5 * vals["buf"][i] + vals["g"][i]
                torch.testing.assert_close(env["buf"][i], want, rtol=1e-15, atol=0)
