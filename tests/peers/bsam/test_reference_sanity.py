"""Sanity checks of the hand-written bSAM / SAM references against updates written out with plain floats."""
import math
from pathlib import Path

import torch

from conftest import load_module_from_path

ref = load_module_from_path(Path(__file__).with_name("reference.py"), "_bsam_peer_reference")

D = torch.float64


def quad_grad(a):
    """Gradient of the mean loss 0.5 * sum_i a_i theta_i^2 (sub-batch k may scale a)."""
    def grad_fn(params, k):
        (theta,) = params
        return [torch.tensor(a, dtype=D) * (1.0 + k) * theta]
    return grad_fn


def test_bsam_one_step_literal_numbers():
    # w=1, a=2, N=4, s=1, n=0.5, rho=0.1, wdecay=0.25, damping=0.1, lr=0.5, beta1=0.9, beta2=0.999
    opt = ref.BSAMReference([torch.tensor([1.0], dtype=D)], Ndata=4, learningrate=0.5, beta1=0.9,
                            beta2=0.999, wdecay=0.25, rho=0.1, msharpness=1, s_init=1.0, damping=0.1)
    opt.step(quad_grad([2.0]), [torch.tensor([0.5], dtype=D)])
    # theta = 1 + sqrt(1/4)*0.5 = 1.25; g = 2.5; pert = 1 + 0.1*2.5 = 1.25; ge = 2.5
    # gm = 0.1*(2.5 + 0.25*1) = 0.275; w = 1 - 0.5*0.275 = 0.8625
    # s = 0.999 + 0.001*(sqrt(6.25) + 0.1 + 0.25) = 1.00185
    assert abs(opt.last["noisy_param"][0][0].item() - 1.25) < 1e-15
    assert abs(opt.last["perturbed_params"][0][0].item() - 1.25) < 1e-15
    assert abs(opt.gm[0].item() - 0.275) < 1e-15
    assert abs(opt.w[0].item() - 0.8625) < 1e-15
    assert abs(opt.s[0].item() - 1.00185) < 1e-14


def _bsam_by_hand(w, s, gm, a, noises, N, lr, b1, b2, wd, rho, damp, lrfactors):
    """Official bSAM (optim.py 125-167), one coordinate at a time, plain floats, msharpness = len(noise)."""
    w, s, gm = list(w), list(s), list(gm)
    for step, noise in enumerate(noises):
        for i in range(len(w)):
            gs_sum = ge_sum = 0.0
            for k, n in enumerate(noise):
                ak = a[i] * (1.0 + k)
                theta = w[i] + math.sqrt(1.0 / (N * s[i])) * n[i]
                g = ak * theta
                ge = ak * (w[i] + rho * g / s[i])
                gs_sum += math.sqrt(s[i] * g * g)
                ge_sum += ge
            gsm, gem = gs_sum / len(noise), ge_sum / len(noise)
            gm[i] = b1 * gm[i] + (1 - b1) * (gem + wd * w[i])
            w[i] = w[i] - lr * lrfactors[step] * gm[i] / s[i]        # old s
            s[i] = b2 * s[i] + (1 - b2) * (gsm + damp + wd)
    return w, s, gm


def test_bsam_three_steps_two_subbatches_match_hand_computation():
    a = [0.5, 2.0, 7.0]
    w0 = [1.0, -2.0, 0.3]
    hp = dict(N=50.0, lr=0.2, b1=0.8, b2=0.9, wd=0.02, rho=0.05, damp=0.1)
    gen = torch.Generator().manual_seed(0)
    noises = [[torch.randn(3, generator=gen, dtype=D) for _ in range(2)] for _ in range(3)]
    lrf = [1.0, 0.7, 0.3]
    opt = ref.BSAMReference([torch.tensor(w0, dtype=D)], Ndata=hp["N"], learningrate=hp["lr"], beta1=hp["b1"],
                            beta2=hp["b2"], wdecay=hp["wd"], rho=hp["rho"], msharpness=2, s_init=1.5,
                            damping=hp["damp"])
    for t in range(3):
        opt.step(quad_grad(a), [[n] for n in noises[t]], lrfactor=lrf[t])
    w, s, gm = _bsam_by_hand(w0, [1.5] * 3, [0.0] * 3, a, [[n.tolist() for n in nz] for nz in noises],
                             hp["N"], hp["lr"], hp["b1"], hp["b2"], hp["wd"], hp["rho"], hp["damp"], lrf)
    for got, want in ((opt.w[0], w), (opt.s[0], s), (opt.gm[0], gm)):
        assert max(abs(x - y) for x, y in zip(got.tolist(), want)) < 1e-12


def test_bsam_rho_zero_is_adam_like_von():
    # rho = 0: momentum uses the gradient at the MEAN w, s uses sqrt(s)|g| at the noisy sample
    a, w0, n = 3.0, 0.7, 1.3
    N, lr, b1, b2, wd, damp, s0 = 10.0, 0.1, 0.9, 0.99, 0.01, 0.05, 2.0
    opt = ref.BSAMReference([torch.tensor([w0], dtype=D)], Ndata=N, learningrate=lr, beta1=b1, beta2=b2,
                            wdecay=wd, rho=0.0, msharpness=1, s_init=s0, damping=damp)
    opt.step(quad_grad([a]), [torch.tensor([n], dtype=D)])
    g_mean = a * w0
    g_sample = a * (w0 + n / math.sqrt(N * s0))
    gm = (1 - b1) * (g_mean + wd * w0)
    assert abs(opt.w[0].item() - (w0 - lr * gm / s0)) < 1e-15
    assert abs(opt.s[0].item() - (b2 * s0 + (1 - b2) * (math.sqrt(s0) * abs(g_sample) + damp + wd))) < 1e-14
    assert torch.equal(opt.last["perturbed_params"][0][0], opt.w[0].new_tensor([w0]))


def test_bsam_defaults_follow_train_py():
    opt = ref.BSAMReference([torch.zeros(2, dtype=D)], Ndata=50000)
    assert (opt.learningrate, opt.beta1, opt.beta2, opt.rho, opt.msharpness, opt.s_init, opt.damping) == \
        (1.0, 0.9, 0.999, 0.1, 8, 1.0, 0.1)
    assert opt.wdecay == 25.0 / 50000
    assert torch.equal(opt.s[0], torch.ones(2, dtype=D)) and torch.equal(opt.gm[0], torch.zeros(2, dtype=D))
    assert set(opt.optstate) == {"w", "gm", "alpha", "s"}


def test_sam_perturbation_has_norm_rho_globally():
    gen = torch.Generator().manual_seed(1)
    params = [torch.randn(3, 4, generator=gen, dtype=D), torch.randn(5, generator=gen, dtype=D)]
    A = [torch.rand(3, 4, generator=gen, dtype=D) + 0.1, torch.rand(5, generator=gen, dtype=D) + 0.1]

    def grad_fn(ps, k):
        return [ai * p for ai, p in zip(A, ps)]

    opt = ref.SAMReference(params, learningrate=0.1, momentum=0.9, wdecay=1e-3, rho=0.05, msharpness=1)
    opt.step(grad_fn)
    e = opt.last["e"][0]
    norm = math.sqrt(sum(float((t ** 2).sum()) for t in e))
    assert abs(norm - 0.05) < 1e-15
    # e is parallel to the gradient at w
    g = grad_fn(params, 0)
    gn = math.sqrt(sum(float((t ** 2).sum()) for t in g))
    for ei, gi in zip(e, g):
        assert torch.allclose(ei, 0.05 * gi / gn, rtol=0, atol=1e-16)


def test_sam_two_steps_by_hand_and_equal_to_torch_sgd():
    a = [0.5, 2.0, 7.0]
    w0 = [1.0, -2.0, 0.3]
    lr, mom, wd, rho = 0.1, 0.9, 0.01, 0.05
    opt = ref.SAMReference([torch.tensor(w0, dtype=D)], learningrate=lr, momentum=mom, wdecay=wd, rho=rho,
                           msharpness=1)
    p = torch.tensor(w0, dtype=D, requires_grad=True)
    sgd = torch.optim.SGD([p], lr=lr, momentum=mom, dampening=0, weight_decay=wd, nesterov=False,
                          foreach=False)
    w, gm = list(w0), [0.0] * 3
    for _ in range(2):
        opt.step(quad_grad(a))
        g = [ai * wi for ai, wi in zip(a, w)]
        gn = math.sqrt(sum(x * x for x in g))
        ge = [ai * (wi + rho * gi / gn) for ai, wi, gi in zip(a, w, g)]
        gm = [mom * m + gei + wd * wi for m, gei, wi in zip(gm, ge, w)]
        w = [wi - lr * m for wi, m in zip(w, gm)]
        # torch SGD fed with the same perturbed gradient
        p.grad = opt.last["perturbed_grad_mean"][0].clone()
        sgd.step()
    assert max(abs(x - y) for x, y in zip(opt.w[0].tolist(), w)) < 1e-12
    assert max(abs(x - y) for x, y in zip(opt.gm[0].tolist(), gm)) < 1e-12
    assert torch.allclose(p.detach(), opt.w[0], rtol=0, atol=1e-15)


def test_sam_msharpness_averages_per_subbatch_perturbed_gradients():
    opt = ref.SAMReference([torch.tensor([1.0, 1.0], dtype=D)], learningrate=1.0, momentum=0.0, wdecay=0.0,
                           rho=0.5, msharpness=2)
    opt.step(quad_grad([1.0, 3.0]))
    # k=0: g=(1,3), |g|=sqrt(10); k=1: g=(2,6), |g|=2 sqrt(10): same direction, both e = 0.5 (1,3)/sqrt(10)
    e = [0.5 / math.sqrt(10.0), 1.5 / math.sqrt(10.0)]
    ge = [1.0 * (1 + e[0]) * 1.5, 3.0 * (1 + e[1]) * 1.5]  # mean of factors 1 and 2 = 1.5
    assert max(abs(x - (1.0 - y)) for x, y in zip(opt.w[0].tolist(), ge)) < 1e-15
