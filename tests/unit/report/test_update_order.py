"""The update block of every catalog recipe's report (``blr-derive explain``) and of its generated modules' header:
every symbol an equation reads that another equation of the block defines (a debiased û, a state's new value
u_{t+1}, an intermediate such as s_used) is defined on an earlier line (issue 40: adam's report showed
û = u_{t+1}/(1 − β₁ᵗ) before the line u_{t+1} ← ...)."""
import pytest
import sympy as sp

from blr_derive.api import derive_file
from blr_derive.report.texprint import eq_tex, oracle_tex
from blr_derive.spec.product import FactorizedRecipe
from conftest import CATALOG

RECIPES = sorted(p.stem for p in CATALOG.glob("*.yaml"))


def _reads(e):
    return e.free_symbols if isinstance(e, sp.Basic) else set()


def _update_section(markdown: str) -> list[str]:
    lines = markdown.splitlines()
    start = lines.index("## Update") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return [l[3:-3] for l in lines[start:end] if l.startswith("$$ ")]


@pytest.mark.parametrize("name", RECIPES)
def test_every_symbol_of_the_update_is_defined_before_it_is_read(name):
    _, view = derive_file(CATALOG / f"{name}.yaml")
    D = view.record
    equations = D.final_equations()
    calls = list(getattr(D, "oracle_calls", ()))
    defined_by = {lhs: k for k, (lhs, _, _) in enumerate(equations) if isinstance(lhs, sp.Basic)}
    assert len(defined_by) == len([l for l, _, _ in equations if isinstance(l, sp.Basic)]), "a symbol defined twice"
    late = [(str(lhs), str(s)) for k, (lhs, rhs, _) in enumerate(equations)
            for s in _reads(rhs) if defined_by.get(s, -1) >= k]
    assert not late, f"{name}: read before (or where) it is defined: {late}"
    # the oracle calls are printed first: their points read nothing the block defines
    assert not [c for c in calls if _reads(c.argument) & defined_by.keys()]
    # explain prints exactly these equations in this order, after the oracle calls
    shown = _update_section(view.to_markdown())
    product = isinstance(D.recipe, FactorizedRecipe)
    expected = ([] if product else [oracle_tex(D, c) for c in calls]) + [eq_tex(D, l, r, op) for l, r, op in equations]
    assert shown == expected
    if product:
        return
    # the generated modules' header prints the same lines in the same order, a state's update by its name
    state_of = {s: n for n, s, _ in D.updates}
    header = D.update_lines()[-len(equations):] if equations else []
    assert [line.split(" ", 1)[0] for line in header] == [state_of.get(l, str(l)) for l, _, _ in equations]


def test_a_debiased_average_follows_the_update_it_reads():
    """The case of the issue, by its content: adam's û is printed after u_{t+1} ← β₁u + (1 − β₁)g_wd, and
    the scale's ŝ after both s_{t+1} and s_max,t+1 (s_used reads them)."""
    _, view = derive_file(CATALOG / "adam.yaml")
    shown = _update_section(view.to_markdown())
    first = {key: next(i for i, l in enumerate(shown) if l.startswith(key))
             for key in (r"u_{t+1} \leftarrow", r"\hat{u} =", r"s_{t+1} \leftarrow",
                         r"s_{\mathrm{max},t+1} \leftarrow", r"s_{\mathrm{used}} =", r"\hat{s} =", r"m_{t+1} \leftarrow")}
    assert first[r"u_{t+1} \leftarrow"] < first[r"\hat{u} ="] < first[r"m_{t+1} \leftarrow"]
    assert first[r"s_{t+1} \leftarrow"] < first[r"s_{\mathrm{used}} ="] < first[r"\hat{s} ="]
    assert first[r"s_{\mathrm{max},t+1} \leftarrow"] < first[r"s_{\mathrm{used}} ="]
