"""The eigenbasis candidate's identity ``eigenbasis_rotation`` and its refresh rule ``kronecker_eigenbasis``.

eigenbasis_rotation: with the basis fixed, the candidate's update of M is the diagonal Gaussian's (here Adam's, the
generated catalog/adam.yaml module, derived by the single-family candidate) run on the rotated coordinates
M' = Q_Lᵀ M Q_R with the rotated gradients Q_Lᵀ G Q_R, rotated back: checked over several steps for coupled weight
decay (the program reads the rotated mean) and decoupled weight decay (its part c·M' applied to M).

kronecker_eigenbasis: L, R are the moving averages of G Gᵀ, Gᵀ G; at a refresh the basis is orthogonal and is one
power iteration + QR in the Rayleigh order (or the eigenvectors, by decreasing eigenvalue, for method eigh); a carried
state is the same matrix in the original coordinates before and after (Q_L u Q_Rᵀ unchanged); the other elementwise
states are reordered with the basis' columns (power iteration) or kept (eigh); between refreshes nothing moves.
"""
import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError, UnsupportedTarget
from conftest import CATALOG, load_generated

RULES_CHECKED = ("kronecker_eigenbasis", "eigenbasis_rotation")


def recipe(**changes):
    spec = yaml.safe_load((CATALOG / "soap.yaml").read_text())
    for k, v in changes.items():
        if v is None:
            spec.pop(k, None)
        else:
            spec[k] = v
    return yaml.safe_dump(spec, sort_keys=False)


def refresh_args(**args):
    spec = yaml.safe_load((CATALOG / "soap.yaml").read_text())
    approx = [a for a in spec["approximations"] if not (isinstance(a, dict) and "kronecker_eigenbasis" in a)]
    if args is not None:
        base = {"rate": "shampoo_beta", "every": "precondition_frequency", "carry": ["u"]}
        base.update(args)
        approx.append({"kronecker_eigenbasis": {k: v for k, v in base.items() if v is not None}})
    return recipe(approximations=approx)


def orthogonal(rng, n):
    return np.linalg.qr(rng.standard_normal((n, n)))[0]


def adam_over_eigenbasis(decoupled):
    spec = yaml.safe_load((CATALOG / "adam.yaml").read_text())
    spec["eigenbasis"] = {"rows": "d_out", "cols": "d_in"}
    spec.pop("peer")
    return api.derive(yaml.safe_dump(spec, sort_keys=False)).compile("numpy")


@pytest.mark.parametrize("decoupled", [False, True])
def test_a_fixed_basis_is_the_diagonal_update_in_the_rotated_coordinates(decoupled):
    rng = np.random.default_rng(1)
    m, n = 4, 3
    QL, QR = orthogonal(rng, m), orthogonal(rng, n)
    A = rng.standard_normal((m, m))
    grad = lambda W: A.T @ (A @ W - 1.0) + W**3                 # noqa: E731
    W0 = rng.standard_normal((m, n))
    hyper = dict(lr=0.05, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, decoupled_weight_decay=decoupled)
    rot = adam_over_eigenbasis(decoupled)
    st = rot.init(M=W0, Q_L=QL, Q_R=QR)
    adam = load_generated("adam")
    sd = adam.init(m=QL.T @ W0 @ QR)
    for _ in range(6):
        st = rot.step(st, oracles={"grad": grad}, **hyper)
        sd = adam.step(sd, oracles={"grad": lambda Mr: QL.T @ grad(QL @ Mr @ QR.T) @ QR}, **hyper)
        np.testing.assert_allclose(st["M"], QL @ sd["m"] @ QR.T, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(st["s"], sd["s"], rtol=1e-12, atol=0)
        np.testing.assert_allclose(st["u"], sd["u"], rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(st["Q_L"], QL)
    assert np.abs(st["M"] - W0).max() > 1e-2


def state(rng, m, n):
    Lf, Rf = rng.standard_normal((m, m + 2)), rng.standard_normal((n, n + 2))
    return dict(M=rng.standard_normal((m, n)), s=rng.random((m, n)), u=rng.standard_normal((m, n)),
                L=Lf @ Lf.T, R=Rf @ Rf.T, Q_L=orthogonal(rng, m), Q_R=orthogonal(rng, n))


HYPER = dict(lr=0.01, betas=(0.9, 0.95), shampoo_beta=0.7, eps=1e-8, weight_decay=0.0)


def one_step(mod, st, G, every, t=0):
    st = mod.init(**st, step=t)
    return mod.step(st, oracles={"grad": lambda W: G}, precondition_frequency=every, **HYPER)


def no_refresh(mod, st, G):
    """The same step with the refresh far away: the values before the basis moves."""
    return one_step(mod, st, G, 1000)


@pytest.mark.parametrize("shape", [(4, 3), (2, 5)])
def test_power_iteration_refresh(shape):
    rng = np.random.default_rng(2)
    mod = api.derive(refresh_args()).compile("numpy")
    st0 = state(rng, *shape)
    G = rng.standard_normal(shape)
    plain, out = no_refresh(mod, st0, G), one_step(mod, st0, G, 1)
    b = HYPER["shampoo_beta"]
    np.testing.assert_allclose(out["L"], b * st0["L"] + (1 - b) * G @ G.T, rtol=1e-14)
    np.testing.assert_allclose(out["R"], b * st0["R"] + (1 - b) * G.T @ G, rtol=1e-14)
    np.testing.assert_array_equal(plain["Q_L"], st0["Q_L"])                # no refresh: nothing moves
    np.testing.assert_array_equal(out["M"], plain["M"])                     # the step used the old basis
    for Q0, S, Q, (k, other) in ((st0["Q_L"], out["L"], out["Q_L"], (0, 1)), (st0["Q_R"], out["R"], out["Q_R"], (1, 0))):
        np.testing.assert_allclose(Q.T @ Q, np.eye(len(Q)), atol=1e-14)
        P = S @ Q0
        order = np.argsort(-np.einsum("ij,ij->j", Q0, P))
        # Q spans the same columns as the ordered power iteration, with a triangular change (QR)
        Rfac = Q.T @ P[:, order]
        np.testing.assert_allclose(np.tril(Rfac, -1), 0, atol=1e-12)
        np.testing.assert_allclose(Q @ Rfac, P[:, order], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.take(out["s"], np.argsort(order), axis=k).shape, plain["s"].shape)
    oL = np.argsort(-np.einsum("ij,ij->j", st0["Q_L"], out["L"] @ st0["Q_L"]))
    oR = np.argsort(-np.einsum("ij,ij->j", st0["Q_R"], out["R"] @ st0["Q_R"]))
    np.testing.assert_array_equal(out["s"], plain["s"][oL][:, oR])
    # the carried momentum is the same matrix in the original coordinates
    np.testing.assert_allclose(out["Q_L"] @ out["u"] @ out["Q_R"].T, st0["Q_L"] @ plain["u"] @ st0["Q_R"].T,
                               rtol=1e-12, atol=1e-14)


def test_eigh_refresh_and_states_not_carried_stay():
    rng = np.random.default_rng(3)
    mod = api.derive(refresh_args(method="eigh", carry=[])).compile("numpy")
    st0 = state(rng, 3, 4)
    G = rng.standard_normal((3, 4))
    plain, out = no_refresh(mod, st0, G), one_step(mod, st0, G, 2, t=1)   # t = 2: a refresh
    for S, Q in ((out["L"], out["Q_L"]), (out["R"], out["Q_R"])):
        w = np.diag(Q.T @ S @ Q)
        np.testing.assert_allclose(S @ Q, Q * w, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(w, np.sort(np.linalg.eigvalsh(S))[::-1], rtol=1e-12)
    np.testing.assert_array_equal(out["u"], plain["u"])
    np.testing.assert_array_equal(out["s"], plain["s"])
    odd = one_step(mod, st0, G, 2, t=0)                                    # t = 1: none
    np.testing.assert_array_equal(odd["Q_L"], st0["Q_L"])


@pytest.mark.parametrize("args, message", [
    ({"method": "lanczos"}, "method must be one of power_iteration, eigh"),
    ({"carry": ["v"]}, "carry names 'v', which is not an elementwise state"),
    ({"carry": "u"}, "carry must be a list of state names"),
    ({"rate": None}, "missing argument 'rate'"),
    ({"every": 0}, "every must be a positive integer"),
    ({"depth": 2}, "unknown argument"),
])
def test_bad_arguments_are_located_errors(args, message):
    with pytest.raises(SpecError, match=message) as exc:
        api.derive(refresh_args(**args))
    assert exc.value.line is not None


def test_the_rule_needs_the_eigenbasis_candidate_and_the_candidate_a_diagonal_gaussian():
    with pytest.raises(SpecError, match="applies to eigenbasis candidates") as exc:
        api.derive(recipe(eigenbasis=None))
    assert exc.value.line is not None
    with pytest.raises(SpecError, match="needs the mean-field Gaussian") as exc:
        api.derive(recipe(family="gaussian_full"))
    with pytest.raises(SpecError, match="is a state or oracle name"):
        api.derive(recipe(eigenbasis={"rows": "Q_L", "cols": "d_in"}))


def test_programs_the_candidate_cannot_rotate_are_located_errors():
    spec = yaml.safe_load((CATALOG / "soap.yaml").read_text())
    with pytest.raises(SpecError, match="takes only the gradient at each sample") as exc:
        api.derive(yaml.safe_dump(dict(spec, approximations=[{"monte_carlo": {"samples": 1}}]), sort_keys=False))
    assert exc.value.line is not None
    newton = dict(spec, approximations=["delta"])
    with pytest.raises(SpecError, match=r"only oracle is the gradient at the mean \(got grad, hess\)"):
        api.derive(yaml.safe_dump(newton, sort_keys=False))
    twice = dict(spec, approximations=spec["approximations"] + [
        {"kronecker_eigenbasis": {"rate": "0.5", "every": 2}}])
    with pytest.raises(SpecError, match="already refreshed by another rule"):
        api.derive(yaml.safe_dump(twice, sort_keys=False))


def test_the_triton_target_refuses_it_naming_why():
    """The fused-kernel target is elementwise only; the torch target prints the array program per parameter
    (codegen/backends/torch/matrix.py, tests/peers/soap/test_soap_torch.py)."""
    with pytest.raises(UnsupportedTarget, match="is a matrix"):
        api.derive(recipe()).code("triton")
