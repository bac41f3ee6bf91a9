"""``exact`` on losses linear in matrix and vector statistics (``blr_derive/families/matstats.py``):
ℓ = c0 + Σ <C_i, T_i>.
The decomposition the rule finds is checked numerically — ℓ(X) against c0 + Σ tr(C_iᵀ T_i(X)) at random
positive-definite X and random data — and losses that are not linear in T are refused (None), never decomposed
wrongly."""
RULES_CHECKED = ("exact",)

import numpy as np
import pytest
import sympy as sp

from blr_derive.core.exprparse import parse_expression
from blr_derive.families.library import load_family
from blr_derive.families.matstats import linear_in_matrix_statistics

P = 3


def _spd(rng):
    B = rng.normal(size=(P, P))
    return B @ B.T / P + 0.5 * np.eye(P)


def _num(fam, e, vals):
    """Evaluate a (matrix) expression at P = 3 with the family's numeric evaluator."""
    return np.asarray(fam.evaluate(e, vals, P), dtype=float)


CASES = [
    ("wishart", "tr((S + W0)*X)/2 - (N_obs + n0 - 4)*logdet(X)/2"),
    ("wishart", "tr(S*X) + 3*tr(X) - logdet(X)"),
    ("wishart", "tr(A*X*B)"),                       # a non-symmetric coefficient: symmetrized on the statistic
    ("inverse_wishart", "tr((S + Psi0)*inv(X))/2 + (N_obs + n0 + 4)*logdet(X)/2"),
    ("inverse_wishart", "tr(inv(X)*S)/2 + tr(S*inv(X))/2 - 2*logdet(X) + 7"),
]


@pytest.mark.parametrize("family, loss", CASES)
def test_the_decomposition_reproduces_the_loss(family, loss):
    fam = load_family(family)
    Pd = fam.dim
    names = {"X": fam.theta, "P": Pd}
    for m in ("S", "W0", "Psi0", "A", "B"):
        names[m] = sp.MatrixSymbol(m, Pd, Pd)
    for s in ("N_obs", "n0"):
        names[s] = sp.Symbol(s, positive=True)
    expr = parse_expression(loss, names)
    lin = linear_in_matrix_statistics(fam, expr)
    assert lin is not None
    c0, cs = lin
    rng = np.random.default_rng(len(loss))
    for _ in range(3):
        vals = {names[m]: _spd(rng) for m in ("S", "W0", "Psi0")}
        vals.update({names["A"]: rng.normal(size=(P, P)), names["B"]: rng.normal(size=(P, P))})
        vals.update({names["N_obs"]: 17.0, names["n0"]: 6.5, fam.theta: _spd(rng)})
        want = _num(fam, expr, vals)
        got = _num(fam, c0, vals)
        for c, t in zip(cs, fam.T):
            C, Tv = _num(fam, c, vals), _num(fam, t, vals)
            got += float(np.sum(np.asarray(C) * np.asarray(Tv)))
        assert float(got) == pytest.approx(float(want), rel=1e-10)


@pytest.mark.parametrize("family, loss", [
    ("wishart", "tr(X*X)"),                          # quadratic in the statistic X
    ("wishart", "logdet(X)**2"),
    ("wishart", "tr(inv(X))"),                       # a function of X that is not a statistic
    ("inverse_wishart", "tr(X)"),
])
def test_losses_not_linear_in_the_statistics_are_refused(family, loss):
    fam = load_family(family)
    names = {"X": fam.theta, "P": fam.dim}
    assert linear_in_matrix_statistics(fam, parse_expression(loss, names)) is None


def test_a_recipe_with_a_nonlinear_matrix_loss_is_a_located_refusal(tmp_path):
    from blr_derive.cli import main
    f = tmp_path / "r.yaml"
    f.write_text("name: r\nfamily: wishart\nloss:\n  expression: tr(X*X)\napproximations: [exact, unit_learning_rate]\n")
    out = tmp_path / "out.py"
    assert main([str(f), "--target", "numpy", "-o", str(out)]) == 2
    assert not out.exists()
