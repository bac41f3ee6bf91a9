"""The check "generated code == symbolic update" (``verify.update.compare_update``) on states a rule or a candidate
put in place of the family's parameters — the factor A of C = A Aᵀ (``exponential_coordinates``), the matrix normal's
M, A, G (the Kronecker candidate) — on the matrix functions those rules introduce (expm, the entrywise exp), and on
rank-shaped samples; and that it stays a real check: one perturbed line of the generated module makes it fail."""
from __future__ import annotations

import dataclasses
import re
import types

import numpy as np
import pytest
import scipy.linalg
import sympy as sp

from blr_derive.api import derive_record
from blr_derive.codegen.registry import emit
from blr_derive.core.errors import DerivationError
from blr_derive.families.symbolic import evaluate
from blr_derive.ir.build import build_ir
from blr_derive.rules.elementwise_exponential import HadamardExp
from blr_derive.rules.exponential_coordinates import Expm
from blr_derive.rules.kronecker import CholeskyFactor
from blr_derive.verify.shaping import SequenceNoise
from blr_derive.verify.state import draw
from blr_derive.verify.update import compare_update

from conftest import ROOT  # noqa: E402

CATALOG = ROOT / "catalog"
#: the committed recipes whose state a rule or candidate changes (and one rank-shaped elementwise recipe)
RECIPES = ("xnes", "xnes_evosax", "noisy_kfac", "snes")


def derived(name):
    recipe, D = derive_record(CATALOG / f"{name}.yaml")
    return recipe, D, emit(build_ir(D, name), "numpy")


def module(source, name="perturbed"):
    mod = types.ModuleType(f"_test_{name}")
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


def worst_error(recipe, D, mod, seeds=range(3)):
    """max over seeds and state variables of max|generated - symbolic| / max(1, max|symbolic|)."""
    worst = 0.0
    for seed in seeds:
        for _, g, s in compare_update(recipe, D, mod, seed):
            worst = max(worst, float(np.max(np.abs(g - s)) / max(1.0, float(np.max(np.abs(s))))))
    return worst


def perturb(source, target, old, new):
    """``source`` with ``old`` replaced by ``new`` in the one line that assigns ``target`` and holds ``old``."""
    lines = source.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if re.match(rf"\s+{re.escape(target)} = ", line) and old in line]
    assert len(hits) == 1, f"{len(hits)} lines assign {target} with {old}"
    lines[hits[0]] = lines[hits[0]].replace(old, new, 1)
    out = "".join(lines)
    assert out != source
    return out


@pytest.mark.parametrize("name", RECIPES)
def test_generated_equals_symbolic_and_the_state_moves(name):
    recipe, D, source = derived(name)
    mod = module(source, name)
    seen = {}
    step = mod.step

    def recording_step(state, **kw):
        seen.update(state)
        return step(state, **kw)
    mod.step = recording_step
    for seed in range(3):
        pairs = compare_update(recipe, D, mod, seed)
        assert [n for n, _, _ in pairs] == [n for n, _, _ in D.updates]
        for n, g, s in pairs:
            np.testing.assert_allclose(g, s, rtol=1e-10, atol=1e-12)
            # not an empty check: every state variable takes a real step from the random input
            assert np.max(np.abs(np.reshape(seen[n], np.shape(s)) - s)) > 1e-3, (name, seed, n)


def test_matrix_states_are_drawn_from_the_recorded_description():
    recipe, D, _ = derived("noisy_kfac")
    mod = module(derived("noisy_kfac")[2])
    shapes = {}
    step = mod.step

    def recording_step(state, *, oracles, **kw):
        shapes.update({k: np.shape(v) for k, v in state.items()})
        shapes.update({k: np.shape(f(state["M"])) for k, f in oracles.items()})
        for k in ("A", "G"):
            assert np.allclose(state[k], state[k].T) and np.linalg.eigvalsh(state[k]).min() >= 0.5 - 1e-12
        return step(state, oracles=oracles, **kw)
    mod.step = recording_step
    compare_update(recipe, D, mod, 0)
    # d_out = 2, d_in = 4, n_a = 5, n_b = 6: all different, so a transposed index cannot pass
    assert shapes == {"M": (2, 4), "A": (4, 4), "G": (2, 2), "grad": (2, 4), "activations": (5, 4),
                      "output_grads": (6, 2)}
    recipe, D, _ = derived("xnes")
    assert D.state_vars["A"].domain == "invertible" and D.state_vars["A"].replaces == "S"


def test_a_replaced_parameter_without_a_recorded_domain_is_an_error():
    recipe, D, source = derived("xnes")
    with pytest.raises(DerivationError, match="'A' that replaces 'S' has no recorded domain"):
        compare_update(recipe, dataclasses.replace(D, state_vars={}), module(source), 0)


def test_xnes_with_the_entrywise_exponential_in_place_of_expm_fails():
    recipe, D, source = derived("xnes")
    assert worst_error(recipe, D, module(source)) < 1e-12
    bad = perturb(source, "A_new", "A @ _expm_sym(lr_A*M_A)", "A * numpy.exp(lr_A*M_A)")
    assert worst_error(recipe, D, module(bad)) > 1e-3


def test_xnes_evosax_with_a_perturbed_factor_step_fails():
    recipe, D, source = derived("xnes_evosax")
    assert worst_error(recipe, D, module(source)) < 1e-12
    bad = perturb(source, "A_new", "lr_A*M_A", "lr_A*1.001*M_A")
    assert 1e-6 < worst_error(recipe, D, module(bad)) < 1e-2


def test_xnes_with_the_utilities_given_to_reversed_ranks_fails():
    recipe, D, source = derived("xnes")
    bad = perturb(source, "loss_k", "_v[_rank[_k]]", "_v[::-1][_rank[_k]]")
    assert worst_error(recipe, D, module(bad)) > 1e-3


def test_noisy_kfac_with_the_old_factor_in_the_mean_step_fails():
    recipe, D, source = derived("noisy_kfac")
    assert worst_error(recipe, D, module(source)) < 1e-12
    bad = perturb(source, "M_new", "_spd_solve(A_new,", "_spd_solve(A,")
    assert worst_error(recipe, D, module(bad)) > 1e-3


def test_noisy_kfac_with_a_perturbed_factor_update_fails():
    recipe, D, source = derived("noisy_kfac")
    bad = perturb(source, "G_new", "(1 - rho)*G", "(1 - rho)*1.0001*G")
    assert 1e-7 < worst_error(recipe, D, module(bad)) < 1e-2


def test_evaluate_computes_the_matrix_functions_of_rules():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(3, 3))
    X = (X + X.T) / 2
    F = rng.normal(size=(3, 3))
    Xs, Fs, c = sp.MatrixSymbol("X", 3, 3), sp.MatrixSymbol("F", 3, 3), sp.Symbol("c", real=True)
    np.testing.assert_allclose(evaluate(Expm(Xs), {Xs: X}), scipy.linalg.expm(X), rtol=1e-13)
    np.testing.assert_allclose(evaluate(HadamardExp(Fs, c * Xs), {Fs: F, Xs: X, c: 0.7}), F * np.exp(0.7 * X),
                               rtol=1e-14)
    # inside an expression, nested, and of an inverse
    e = Fs * Expm(c * Expm(Xs) + sp.Inverse(Fs * Fs.T))
    want = F @ scipy.linalg.expm(0.7 * scipy.linalg.expm(X) + np.linalg.inv(F @ F.T))
    np.testing.assert_allclose(evaluate(e, {Fs: F, Xs: X, c: 0.7}), want, rtol=1e-10)
    S = F @ F.T + np.eye(3)
    np.testing.assert_allclose(evaluate(CholeskyFactor(Fs * Fs.T + sp.Identity(3)), {Fs: F}), np.linalg.cholesky(S),
                               rtol=1e-13)


def test_draws_are_in_their_domain():
    rng = np.random.default_rng(0)
    for _ in range(20):
        A = draw(rng, "invertible", (4, 4))
        s = np.linalg.svd(A, compute_uv=False)
        assert 0.5 - 1e-12 <= s.min() and s.max() <= 2 + 1e-12 and not np.allclose(A, A.T)
        S = draw(rng, "positive_definite", (3, 3))
        assert np.allclose(S, S.T) and np.linalg.eigvalsh(S).min() >= 0.5 - 1e-12
    with pytest.raises(DerivationError, match="square matrix"):
        draw(rng, "invertible", (2, 3))


def test_sequence_noise_refuses_draws_the_program_does_not_make():
    noise = SequenceNoise([("standard_normal", np.array([0.1, 0.2]))])
    with pytest.raises(DerivationError, match="called random"):
        noise.random((2,))
    np.testing.assert_array_equal(noise.standard_normal((2,)), [0.1, 0.2])
    with pytest.raises(DerivationError, match="more than the 1 draws"):
        noise.standard_normal((2,))
