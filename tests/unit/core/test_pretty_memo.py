"""The plain printer remembers the text of (expression, nested): a Piecewise is parenthesized only below the top
level, whether it was printed before at the top level or nested, and in either order."""
import sympy as sp

from blr_derive.core import pretty as P


def test_piecewise_text_depends_on_nesting_not_on_what_was_printed_before():
    x, y = sp.symbols("x y")
    pw = sp.Piecewise((x, x > 0), (y, True))
    top, nested = "x if x > 0 else y", "(x if x > 0 else y)"
    for order in ((pw, pw + y**2), (pw + y**2, pw)):
        P._MEMO.clear()
        out = [P.pretty(e) for e in order]
        texts = {str(e): t for e, t in zip(order, out)}
        assert texts[str(pw)] == top
        assert nested in texts[str(pw + y**2)] and texts[str(pw + y**2)].count("(") == 1


class _NoMemo(dict):
    def get(self, key, default=None):
        return None


def test_memo_gives_the_same_text_as_printing_without_it(monkeypatch):
    a, b, c = sp.symbols("a b c", positive=True)
    shared = sp.log(a + b) * sp.sqrt(c) + sp.polygamma(1, a)
    exprs = [shared**2 + shared / (1 + c), sp.exp(shared) - a * shared, shared]
    P._MEMO.clear()
    with_memo = [P.pretty(e) for e in exprs]
    monkeypatch.setattr(P, "_MEMO", _NoMemo())
    fresh = [P.pretty(e) for e in exprs]
    assert with_memo == fresh
    assert "trigamma(a)" in with_memo[2] and "sqrt(c)" in with_memo[2]
