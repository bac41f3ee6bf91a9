"""catalog/evon.yaml's generated numpy and jax modules against the slides' Algorithm 2 (``evon_reference.py``) step
for step in float64 with the same draws, and the exact Gaussian posterior of Bayesian linear regression at EVON's
fixed point.

The module starts from a state the caller gives (as for catalog/soap.yaml): L = (1 − β3) G₀G₀ᵀ, R likewise at the
initial mean, Q_L, Q_R their eigenvectors.  Algorithm 2 has no bias correction of Ḡ and its clips are unspecified:
the module runs with ``debias=False`` and ``clip_radius=inf``.  ζ is ``ess`` and δ is ``weight_decay`` (the module
stores H as ``h``, IVON's convention: the rotated precision is ess·(h + weight_decay))."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import UnsupportedTarget
from conftest import CATALOG, load_generated
from evon_reference import Grads, algorithm2, eig_desc

SHAPES = [(4, 4), (5, 3), (3, 6)]
STEPS, EVERY = 10, 3
HYPER = dict(lr=0.3, ess=20.0, weight_decay=0.05, beta1=0.8, beta2=0.7, shampoo_beta=0.9, hess_init=0.5,
             debias=False, clip_radius=np.inf, precondition_frequency=EVERY)


def start(shape, seed=0):
    rng = np.random.default_rng(seed)
    grads = Grads(rng, *shape)
    M0 = rng.standard_normal(shape)
    G0 = grads(M0)
    b3 = HYPER["shampoo_beta"]
    L, R = (1 - b3) * G0 @ G0.T, (1 - b3) * G0.T @ G0
    return grads, M0, L, R, eig_desc(L), eig_desc(R)


def reference(shape, refresh, seed=0, steps=STEPS, **clip):
    grads, M0, L, R, QL, QR = start(shape, seed)
    h = HYPER
    return algorithm2(M0, np.full(shape, h["hess_init"]), np.zeros(shape), L, R, QL, QR, grads,
                      np.random.default_rng(100 + seed), zeta=h["ess"], delta=h["weight_decay"], alpha=h["lr"],
                      beta1=h["beta1"], beta2=h["beta2"], beta3=h["shampoo_beta"], every=EVERY, steps=steps,
                      refresh=refresh, **clip)


def run_numpy(mod, shape, seed=0, steps=STEPS, **extra):
    grads, M0, L, R, QL, QR = start(shape, seed)
    state = mod.init(HYPER, M=M0, L=L, R=R, Q_L=QL, Q_R=QR)
    rng = np.random.default_rng(100 + seed)
    out = []
    for _ in range(steps):
        state = mod.step(state, oracles={"grad": grads}, rng=rng, **{**HYPER, **extra})
        out.append(state)
    return out


def max_err(ref, gen):
    """Largest relative error over the steps of M, H (h), Ḡ (momentum), L, R, Q_L, Q_R."""
    pairs = [("M", "M"), ("H", "h"), ("Gbar", "momentum"), ("L", "L"), ("R", "R"), ("Q_L", "Q_L"), ("Q_R", "Q_R")]
    return max(np.abs(np.asarray(g[b]) - r[a]).max() / max(1.0, np.abs(r[a]).max())
               for r, g in zip(ref, gen) for a, b in pairs)


@pytest.fixture(scope="module")
def numpy_module():
    return load_generated("evon", "numpy")


@pytest.mark.parametrize("shape", SHAPES)
def test_generated_numpy_is_algorithm2_with_the_power_refresh(numpy_module, shape):
    """Clip off (price_clip 0, the default)."""
    ref = reference(shape, "power")
    gen = run_numpy(numpy_module, shape)
    assert max_err(ref, gen) < 1e-12
    assert int(gen[-1]["step"]) == STEPS
    # three refreshes moved the basis and the H estimate is the Price estimate's (moved off hess_init)
    assert np.abs(gen[-1]["Q_L"] - start(shape)[4]).max() > 1e-3
    assert np.abs(gen[-1]["h"] - HYPER["hess_init"]).max() > 1e-2
    np.testing.assert_allclose(gen[-1]["Q_L"].T @ gen[-1]["Q_L"], np.eye(shape[0]), atol=1e-13)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_clipped_price_estimate_is_algorithm2_line4(numpy_module, shape):
    """price_clip 0.5: Ĥ clipped to ±0.5(H + clip_eps) — active in most entries of most steps here."""
    clip = dict(clip_ratio=0.5, clip_eps=1e-3)
    gen = run_numpy(numpy_module, shape, price_clip=0.5, clip_eps=1e-3)
    assert max_err(reference(shape, "power", **clip), gen) < 1e-12
    assert max_err(reference(shape, "power"), gen) > 1e-3         # the clip changed the run


@pytest.mark.parametrize("shape", SHAPES[:2])
def test_the_eigh_variant_is_algorithm2_as_written(shape):
    """catalog/evon.yaml with ``method: eigh``: line 11 as the slides write it (H kept, Ḡ rotated)."""
    spec = yaml.safe_load((CATALOG / "evon.yaml").read_text())
    for a in spec["approximations"]:
        if isinstance(a, dict) and "kronecker_eigenbasis" in a:
            a["kronecker_eigenbasis"]["method"] = "eigh"
    mod = api.derive(yaml.safe_dump(spec, sort_keys=False)).compile("numpy")
    assert max_err(reference(shape, "eigh"), run_numpy(mod, shape)) < 1e-12


class Draws:
    """The draws of the jax module (one ``jax.random.split`` key per sample, a normal of M's shape each) as a
    generator's ``standard_normal`` calls."""

    def __init__(self, keys):
        self.keys, self.k = keys, 0

    def standard_normal(self, shape):
        import jax
        z = np.asarray(jax.random.normal(jax.random.split(self.keys[self.k], 1)[0], shape))
        self.k += 1
        return z


@pytest.mark.slow      # ~10 s: the jax module's steps are traced one by one
def test_generated_jax_is_algorithm2_with_its_draws(x64):
    import jax
    mod = load_generated("evon", "jax")
    shape = (5, 3)
    grads, M0, L, R, QL, QR = start(shape)
    state = mod.init(HYPER, M=M0, L=L, R=R, Q_L=QL, Q_R=QR)
    steps = 4                       # one refresh (t = 3)
    keys = [jax.random.key(7 + i) for i in range(steps)]
    gen = []
    for k in keys:
        state = mod.step(state, oracles={"grad": grads}, key=k, **HYPER)
        gen.append({n: np.asarray(v) for n, v in state.items()})
    h = HYPER
    ref = algorithm2(M0, np.full(shape, h["hess_init"]), np.zeros(shape), L, R, QL, QR, grads, Draws(keys),
                     zeta=h["ess"], delta=h["weight_decay"], alpha=h["lr"], beta1=h["beta1"], beta2=h["beta2"],
                     beta3=h["shampoo_beta"], every=EVERY, steps=steps, refresh="power")
    assert max_err(ref, gen) < 1e-12


class TwoPoint:
    """Draws ±1 in turn: with mc_samples = 2 each step averages over z and −z with z² = 1, a two-point rule exact for
    the expectations of polynomials of degree ≤ 3 under N(0, 1) — for a quadratic loss the Monte Carlo averages of
    the step (the gradient and the Price estimate) are their expectations, so the step is EVON's expected update."""

    def __init__(self):
        self.sign = 1.0

    def standard_normal(self, shape):
        z = np.full(shape, self.sign)
        self.sign = -self.sign
        return z


def linear_regression(m=4, n=3, N=30, seed=3):
    """ℓ(W) = (1/(2N))‖A W B − Y‖²_F (a Gaussian likelihood of unit noise, averaged over N), prior N(0, (Nδ)⁻¹ I):
    the posterior of vec(W) (column-major) has precision P = BBᵀ ⊗ AᵀA + Nδ I and mean P⁻¹ vec(AᵀYBᵀ)."""
    rng = np.random.default_rng(seed)
    A, B, Y = rng.standard_normal((2 * m, m)), rng.standard_normal((n, 2 * n)), rng.standard_normal((2 * m, 2 * n))
    return A, B, Y, N


def test_linear_regression_fixed_point_is_the_exact_posterior(numpy_module):
    """The claim (Minut et al. 2026) checked where it holds exactly: with Q_L, Q_R the eigenbases of AᵀA and BBᵀ
    (the basis in which the posterior precision is diagonal; no refresh within the run: precondition_frequency
    above the number of steps), EVON's expected update (two-point draws) converges to, and stays at, mean = the
    posterior mean and covariance (Q_R ⊗ Q_L) diag(1/(ess(h + δ))) (Q_R ⊗ Q_L)ᵀ = P⁻¹, to 1e-10.  In another basis
    (the identity: IVON) the mean is still exact but the covariance is not: the claim needs the basis."""
    A, B, Y, N = linear_regression()
    m, n = A.shape[1], B.shape[0]
    delta = 0.1
    P = np.kron(B @ B.T, A.T @ A) + N * delta * np.eye(m * n)
    mean = np.linalg.solve(P, (A.T @ Y @ B.T).reshape(-1, order="F")).reshape((m, n), order="F")
    cov = np.linalg.inv(P)

    def grads(W):
        return A.T @ (A @ W @ B - Y) @ B.T / N

    hyper = dict(lr=0.5, ess=float(N), weight_decay=delta, beta1=0.5, beta2=0.5, shampoo_beta=0.9, hess_init=1.0,
                 debias=False, clip_radius=np.inf, precondition_frequency=10**9, mc_samples=2)

    def run(QL, QR):
        state = numpy_module.init(hyper, M=np.zeros((m, n)), L=np.eye(m), R=np.eye(n), Q_L=QL, Q_R=QR)
        rng = TwoPoint()
        for _ in range(300):
            state = numpy_module.step(state, oracles={"grad": grads}, rng=rng, **hyper)
        Q = np.kron(state["Q_R"], state["Q_L"])
        return state, rng, Q @ np.diag(1.0 / (N * (state["h"] + delta)).reshape(-1, order="F")) @ Q.T

    state, rng, got_cov = run(eig_desc(A.T @ A), eig_desc(B @ B.T))
    assert np.abs(state["M"] - mean).max() < 1e-10 * np.abs(mean).max()
    assert np.abs(got_cov - cov).max() < 1e-10 * np.abs(cov).max()
    ivon, _, ivon_cov = run(np.eye(m), np.eye(n))
    assert np.abs(ivon["M"] - mean).max() < 1e-10 * np.abs(mean).max()
    assert np.abs(ivon_cov - cov).max() > 0.1 * np.abs(cov).max()
    # a fixed point: one more step moves nothing
    nxt = numpy_module.step(state, oracles={"grad": grads}, rng=rng, **hyper)
    assert np.abs(nxt["M"] - state["M"]).max() < 1e-13 and np.abs(nxt["h"] - state["h"]).max() < 1e-12


def test_a_fixed_basis_is_catalog_ivon_in_the_rotated_coordinates():
    """catalog/evon.yaml without its refresh rule (Q_L, Q_R fixed parameters) is catalog/ivon.yaml's module (Price
    estimate, no lr rescaling) run on θ' = Q_Lᵀ W Q_R with the gradient Q_Lᵀ ∇ℓ(Q_L θ' Q_Rᵀ) Q_R, the same draws:
    two samples a step, debiased momentum and an active clip of the rotated step."""
    spec = yaml.safe_load((CATALOG / "evon.yaml").read_text())
    spec["approximations"] = [a for a in spec["approximations"]
                              if not (isinstance(a, dict) and "kronecker_eigenbasis" in a)]
    del spec["hyperparameters"]["shampoo_beta"], spec["hyperparameters"]["precondition_frequency"]
    fixed = api.derive(yaml.safe_dump(spec, sort_keys=False)).compile("numpy")
    ivon = load_generated("ivon", "numpy")
    rng = np.random.default_rng(5)
    grads, M0, _, _, _, _ = start((4, 3), 5)
    QL, QR = np.linalg.qr(rng.standard_normal((4, 4)))[0], np.linalg.qr(rng.standard_normal((3, 3)))[0]
    hyper = dict(lr=0.2, ess=20.0, weight_decay=0.05, beta1=0.8, beta2=0.7, hess_init=0.5, mc_samples=2,
                 clip_radius=0.05, debias=True)
    st = fixed.init(hyper, M=M0, Q_L=QL, Q_R=QR)
    sd = ivon.init(hyper, m=QL.T @ M0 @ QR)
    ra, rb = np.random.default_rng(9), np.random.default_rng(9)
    for _ in range(6):
        st = fixed.step(st, oracles={"grad": grads}, rng=ra, **hyper)
        sd = ivon.step(sd, oracles={"grad": lambda T: QL.T @ grads(QL @ T @ QR.T) @ QR}, rng=rb,
                       hess_approx="price", rescale_lr=False, **hyper)
        np.testing.assert_allclose(st["M"], QL @ sd["m"] @ QR.T, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(st["h"], sd["h"], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(st["momentum"], sd["momentum"], rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(st["Q_L"], QL)
    assert np.abs(st["M"] - M0).max() > 1e-2


def test_the_triton_target_refuses_it_naming_why():
    with pytest.raises(UnsupportedTarget, match="is a matri"):
        api.derive((CATALOG / "evon.yaml").read_text()).code("triton")


class TorchDraws:
    """The torch optimizer's draws (torch's global generator, one float64 ``randn`` of the parameter's matrix shape
    per parameter and sample) replayed for a numpy module: ``standard_normal`` returns the next recorded draw."""

    def __init__(self, draws):
        self.draws, self.k = draws, 0

    def standard_normal(self, shape):
        z = self.draws[self.k]
        assert z.shape == tuple(shape)
        self.k += 1
        return z


@pytest.mark.parametrize("mc_samples", [1, 3])
def test_generated_torch_equals_the_numpy_module_with_its_draws(numpy_module, mc_samples):
    """catalog/evon.yaml's torch optimizer (per-parameter matrix state, samples through sampled_params) on a 5x3
    weight and a 1-D bias of 5 (one column, Q_R = [1]) in one optimizer, 10 steps with 3 refreshes, against the
    numpy module on each parameter with the same draws: M, h, momentum, L, R, Q_L, Q_R step for step."""
    import torch
    shape, steps = (5, 3), STEPS
    grads, M0, L, R, QL, QR = start(shape)
    bgrads, b0, bL, bR, bQL, bQR = start((5, 1), seed=1)
    hyper = {**HYPER, "mc_samples": mc_samples, "price_clip": 0.5, "clip_eps": 1e-3}
    mod = load_generated("evon", "torch")
    pw, pb = torch.nn.Parameter(torch.tensor(M0)), torch.nn.Parameter(torch.tensor(b0[:, 0]))
    opt = mod.EVON([pw, pb], **hyper)
    opt.init_state(pw, L=L, R=R, Q_L=QL, Q_R=QR)
    opt.init_state(pb, L=bL, R=bR, Q_L=bQL, Q_R=bQR)

    def closure():
        pw.grad = torch.tensor(grads(pw.detach().numpy().copy()))
        pb.grad = torch.tensor(bgrads(pb.detach().numpy().copy()[:, None])[:, 0])
        return torch.zeros(())

    torch.manual_seed(3)
    got = []
    for _ in range(steps):
        opt.step(closure)
        got.append({"W": {k: np.asarray(v) for k, v in opt.state[pw].items()} | {"M": pw.detach().numpy().copy()},
                    "b": {k: np.asarray(v) for k, v in opt.state[pb].items()} | {"M": pb.detach().numpy()[:, None].copy()}})
    torch.manual_seed(3)                # the same stream: per step and sample, W's draw then b's
    draws = [(torch.randn(shape, dtype=torch.float64).numpy(), torch.randn((5, 1), dtype=torch.float64).numpy())
             for _ in range(steps * mc_samples)]
    for which, g, m0, l, r, ql, qr, pick in (("W", grads, M0, L, R, QL, QR, 0), ("b", bgrads, b0, bL, bR, bQL, bQR, 1)):
        state = numpy_module.init(hyper, M=m0, L=l, R=r, Q_L=ql, Q_R=qr)
        rng = TorchDraws([d[pick] for d in draws])
        for t in range(steps):
            state = numpy_module.step(state, oracles={"grad": g}, rng=rng, **hyper)
            for k in ("M", "h", "momentum", "L", "R", "Q_L", "Q_R"):
                np.testing.assert_allclose(got[t][which][k], state[k], rtol=1e-12, atol=1e-14, err_msg=f"{which} {k} {t}")
        assert int(got[-1][which]["step"]) == steps
    assert np.abs(got[-1]["W"]["Q_L"] - QL).max() > 1e-3
