"""The generic behaviours of test/test_optim.py for the generated IVON against its peer, ivon-opt (0.1.3):
parameter groups that differ in every per-group hyperparameter ivon-opt has (lr, ess, hess_init, beta1,
beta2, weight_decay, clip_radius) under an lr scheduler; non-contiguous, zero-size and 0-d parameters; the
closure with several Monte Carlo samples.  Float64, parameters to 1e-12.  Both draw one flat standard-normal
vector per group per sample from torch's global generator, seeded per step here.  (tests/peers/ivon has the
basic comparisons; the argument checks are in test_torch_contract_api.py.)"""
import ivon  # a declared test dependency: ivon-opt==0.1.3
import pytest
import torch

from contract_helpers import Problem, assert_moved, assert_params_close, default_dtype, generated_class

SEED = 99


def _train(opt, params, problem, steps, samples=1, closure=False, schedulers=()):
    for k in range(steps):
        torch.manual_seed(SEED + k)

        def sample(k=k):
            opt.zero_grad()
            loss = problem.loss(params, k)
            loss.backward()
            return loss

        if closure:
            def sampled_closure():
                with opt.sampled_params(train=True):
                    return sample()
            opt.step(sampled_closure)
        else:
            for _ in range(samples):
                with opt.sampled_params(train=True):
                    sample()
            opt.step()
        for s in schedulers:
            s.step()


GROUP_A = dict(lr=0.05, ess=40.0, hess_init=0.5, beta1=0.8, beta2=0.99, weight_decay=1e-3)
GROUP_B = dict(lr=0.02, ess=80.0, hess_init=2.0, beta1=0.9, beta2=0.999, weight_decay=1e-2, clip_radius=0.05)


@pytest.mark.parametrize("hess_approx", ["price", "gradsq"])
def test_param_groups_and_lr_scheduler_match_ivon_opt(hess_approx):
    with default_dtype(torch.float64):
        problem = Problem(shapes=((5, 4), (4,), (3,), ()))
        runs = []
        for cls in (generated_class("ivon"), ivon.IVON):
            params = problem.params()
            opt = cls([{"params": params[:2], **GROUP_A}, {"params": params[2:], **GROUP_B}], lr=0.1, ess=10.0,
                      hess_approx=hess_approx)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
            _train(opt, params, problem, 10, schedulers=[sched])
            runs.append(params)
        assert_params_close(runs[0], runs[1])
        assert_moved(runs[1], problem.init)


def test_non_contiguous_zero_size_and_0d_parameters_match_ivon_opt():
    with default_dtype(torch.float64):
        problem = Problem(shapes=((5, 4), (0,), (4,), (), (2, 0)))
        runs = []
        for cls in (generated_class("ivon"), ivon.IVON):
            params = []
            for t in problem.init:
                buf = torch.zeros(*t.shape, 2, dtype=t.dtype)
                buf[..., 0] = t
                params.append(torch.nn.Parameter(buf[..., 0]))
            opt = cls(params, lr=0.05, ess=40.0, hess_init=0.5, weight_decay=1e-3)
            _train(opt, params, problem, 8)
            runs.append(params)
        assert_params_close(runs[0], runs[1])
        assert [tuple(p.shape) for p in runs[0]] == [(5, 4), (0,), (4,), (), (2, 0)]
        assert_moved(runs[1], problem.init)


@pytest.mark.parametrize("closure", [False, True], ids=["samples", "closure"])
def test_several_monte_carlo_samples_match_ivon_opt(closure):
    with default_dtype(torch.float64):
        problem = Problem()
        runs = []
        for cls in (generated_class("ivon"), ivon.IVON):
            params = problem.params()
            opt = cls(params, lr=0.05, ess=40.0, mc_samples=3, hess_init=0.5, beta2=0.99)
            _train(opt, params, problem, 6, samples=3, closure=closure)
            runs.append(params)
        assert_params_close(runs[0], runs[1])
        assert_moved(runs[1], problem.init)
