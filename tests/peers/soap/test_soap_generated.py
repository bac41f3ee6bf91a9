"""catalog/soap.yaml's generated numpy and jax modules against pytorch-optimizer's SOAP (4.1.0) step for step in
float64 on 2-D weights (4×4, 5×3, 3×6), ten steps with three refreshes of the basis (precondition_frequency 3),
with and without weight decay, and against the references of ``soap_reference.py`` (the peer's conventions with
numpy's QR, and the slides' Algorithm 1 with an eigh refresh).

The peer spends its first call on the statistics (L = (1 − β3) G₀G₀ᵀ, R likewise, Q_L, Q_R their eigenvectors, no
step); the generated module starts from that state (its step t is the peer's call t + 1).  A non-square W's first
statistics have a null space, where LAPACK's eigenvectors are arbitrary: the module starts from the peer's basis.
The peer casts the power iteration's matrix to float32 before its QR; the float64 comparison makes that cast a
no-op (``float64_torch``), and the shipped peer is compared at the float32 rounding it costs."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml
from pytorch_optimizer.optimizer import soap as soap_module

from blr_derive import api
from conftest import CATALOG, load_generated
from soap_reference import algorithm1, eig_desc, soap_peer_conventions
from test_soap_reference import EVERY, HYPER, SHAPES, STEPS, float64_torch, peer_kw, problem, rel, run_peer

B3 = HYPER["beta2"]          # the peer's shampoo_beta defaults to beta2


def run_generated(mod, W0, grads, basis, steps=STEPS, weight_decay=0.0, **extra):
    """The module from the state after the peer's initialising call; [W0, M after each step]."""
    G0 = grads.reset()(W0)
    state = mod.init(M=W0, L=(1 - B3) * G0 @ G0.T, R=(1 - B3) * G0.T @ G0, Q_L=basis[0], Q_R=basis[1])
    hyper = dict(lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]), shampoo_beta=B3, eps=HYPER["eps"],
                 weight_decay=weight_decay, precondition_frequency=EVERY, **extra)
    out = [W0]
    for _ in range(steps):
        state = mod.step(state, oracles={"grad": grads}, **hyper)
        out.append(np.asarray(state["M"]))
    return out, state


@pytest.fixture(scope="module")
def numpy_module():
    return load_generated("soap", "numpy")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_generated_numpy_equals_the_peer_in_float64(monkeypatch, numpy_module, shape, weight_decay):
    monkeypatch.setattr(soap_module, "torch", float64_torch())
    grads, W0 = problem(shape, 1)
    peer, basis = run_peer(W0, grads, STEPS, **peer_kw(weight_decay))
    gen, state = run_generated(numpy_module, W0, grads, basis, weight_decay=weight_decay)
    assert rel(peer, gen) < 1e-13
    assert int(state["step"]) == STEPS
    # the basis moved at the refreshes and stayed orthogonal
    assert np.abs(state["Q_L"] - basis[0]).max() > 1e-3
    np.testing.assert_allclose(state["Q_L"].T @ state["Q_L"], np.eye(shape[0]), atol=1e-13)
    np.testing.assert_allclose(state["Q_R"].T @ state["Q_R"], np.eye(shape[1]), atol=1e-13)


@pytest.mark.parametrize("shape", SHAPES)
def test_generated_numpy_against_the_shipped_peer(numpy_module, shape):
    """The peer as shipped: equal before the first refresh, then apart by its float32 QR (~1e-7 relative)."""
    grads, W0 = problem(shape, 2)
    peer, basis = run_peer(W0, grads, STEPS, **peer_kw(0.01))
    gen, _ = run_generated(numpy_module, W0, grads, basis, weight_decay=0.01)
    assert rel(peer[:EVERY + 1], gen[:EVERY + 1]) < 1e-13
    assert rel(peer, gen) < 1e-5


@pytest.mark.parametrize("shape", SHAPES)
def test_generated_numpy_equals_the_reference_with_its_own_basis(numpy_module, shape):
    """From its own eigh basis of the first statistics (no peer involved), 25 steps with 8 refreshes."""
    grads, W0 = problem(shape, 5)
    grads.noise = np.concatenate([grads.noise] * 3)
    G0 = grads.reset()(W0)
    basis = (eig_desc((1 - B3) * G0 @ G0.T), eig_desc((1 - B3) * G0.T @ G0))
    gen, _ = run_generated(numpy_module, W0, grads, basis, steps=25, weight_decay=0.02)
    ref = soap_peer_conventions(W0, grads.reset(), 25, weight_decay=0.02, basis=basis, **HYPER)
    assert rel(ref, gen) < 1e-12


def test_generated_jax_equals_the_numpy_module(numpy_module, x64):
    mod = load_generated("soap", "jax")
    grads, W0 = problem((5, 3), 6)
    G0 = grads.reset()(W0)
    basis = (eig_desc((1 - B3) * G0 @ G0.T), eig_desc((1 - B3) * G0.T @ G0))
    a, _ = run_generated(numpy_module, W0, grads, basis, weight_decay=0.01)
    b, _ = run_generated(mod, W0, grads, basis, weight_decay=0.01)
    assert rel(a, b) < 1e-12


def test_the_module_checks_its_state(numpy_module):
    """L and R are symmetric (checked), the matrices' shapes bind d_out and d_in."""
    rng = np.random.default_rng(0)
    good = dict(M=rng.standard_normal((3, 2)), L=np.eye(3), R=np.eye(2), Q_L=np.eye(3), Q_R=np.eye(2))
    numpy_module.init(**good)
    with pytest.raises(ValueError, match="L must be symmetric"):
        numpy_module.init(**{**good, "L": np.triu(np.ones((3, 3)))})
    with pytest.raises(ValueError, match="Q_R has shape"):
        numpy_module.init(**{**good, "Q_R": np.eye(3)})


@pytest.mark.parametrize("shape", SHAPES)
def test_the_eigh_refresh_variant_is_the_slides_algorithm1(shape):
    """catalog/soap.yaml with ``method: eigh`` (the refresh as the slides' Algorithm 1 writes it: Eig(L), Eig(R),
    the momentum rotated into the new basis, H kept) equals the transcription of Algorithm 1 with the peer's bias
    corrections, no weight decay, 10 steps and 3 refreshes."""
    spec = yaml.safe_load((CATALOG / "soap.yaml").read_text())
    for a in spec["approximations"]:
        if isinstance(a, dict) and "kronecker_eigenbasis" in a:
            a["kronecker_eigenbasis"]["method"] = "eigh"
    mod = api.derive(yaml.safe_dump(spec, sort_keys=False)).compile("numpy")
    grads, W0 = problem(shape, 3)
    G0 = grads.reset()(W0)
    L, R = (1 - B3) * G0 @ G0.T, (1 - B3) * G0.T @ G0
    basis = (eig_desc(L), eig_desc(R))
    gen, _ = run_generated(mod, W0, grads, basis)
    grads.reset()(W0)
    alg = algorithm1(W0, *basis, L, R, grads, alpha=HYPER["lr"], beta1=HYPER["beta1"], beta2=HYPER["beta2"],
                     beta3=B3, eps=HYPER["eps"], every=EVERY, steps=STEPS, debias=True)
    assert rel(alg, gen[1:]) < 1e-12


def test_a_1d_parameter_is_the_diagonal_update_with_the_same_conventions():
    """The peer leaves a 1-D parameter unrotated (precondition_1d=False, its default): Adam with SOAP's
    conventions, its first call again only initialising.  That is catalog/soap.yaml without its eigenbasis section
    and refresh rule (the diagonal Gaussian's program it rotates), equal to the peer in float64."""
    spec = yaml.safe_load((CATALOG / "soap.yaml").read_text())
    spec.pop("eigenbasis")
    spec["approximations"] = [a for a in spec["approximations"]
                              if not (isinstance(a, dict) and "kronecker_eigenbasis" in a)]
    mod = api.derive(yaml.safe_dump(spec, sort_keys=False)).compile("numpy")
    rng = np.random.default_rng(8)
    A, b = rng.standard_normal((6, 6)), rng.standard_normal(6)
    noise = rng.standard_normal((STEPS + 1, 6))
    calls = []

    def grads(w):
        calls.append(1)
        return A.T @ (A @ w - b) + w**3 + noise[len(calls) - 1]

    grads.reset = lambda: calls.clear() or grads
    w0 = rng.standard_normal(6)
    peer = run_peer_1d(w0, grads, 0.05)
    grads.reset()(w0)
    st, gen = mod.init(m=w0), [w0]
    for _ in range(STEPS):
        st = mod.step(st, oracles={"grad": grads}, lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]),
                      eps=HYPER["eps"], weight_decay=0.05)
        gen.append(st["m"])
    assert rel(peer, gen) < 1e-13
    assert np.abs(gen[-1] - w0).max() > 1e-2


def run_peer_1d(w0, grads, weight_decay):
    grads.reset()
    p = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float64))
    opt = soap_module.SOAP([p], **peer_kw(weight_decay))
    out = []
    for _ in range(STEPS + 1):
        p.grad = torch.tensor(grads(p.detach().numpy().copy()))
        opt.step()
        out.append(p.detach().numpy().copy())
    assert opt.state[p]["GG"] == [[]]                  # no preconditioner for the 1-D parameter
    return out
