"""A torch optimizer with no state at all (gradient descent with a Gaussian prior: no step counter, no buffers)
renders valid Python (its lazy state initialisation had an empty ``if`` body) and equals torch.optim.SGD with
weight decay, step for step, in float64."""
import copy

import torch
import yaml

from blr_derive import api
from test_torch_optimizers import make_problem, run

RECIPE = yaml.safe_dump({"name": "gd_prior", "family": "gaussian_fixed_cov", "loss": "abstract",
                         "learning_rate": "lr", "hyperparameters": {"lr": 0.1, "weight_decay": 0.01},
                         "approximations": ["delta", {"weight_decay": {"coefficient": "weight_decay"}}]})


def test_stateless_optimizer_equals_sgd_with_weight_decay(tmp_path):
    source = api.generate(api_path(tmp_path), "torch")
    namespace = {"__name__": "gd_prior_torch"}
    exec(compile(source, "gd_prior_torch.py", "exec"), namespace)
    cls = namespace["GdPrior"]
    X, y, net_ref = make_problem(torch.float64)
    net_gen = copy.deepcopy(net_ref)
    kw = dict(lr=0.05, weight_decay=0.02)
    run(torch.optim.SGD, net_ref, X, y, kw)
    opt = run(cls, net_gen, X, y, kw)
    for a, b in zip(net_ref.parameters(), net_gen.parameters()):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-12)
    assert all(len(opt.state[p]) == 0 for p in net_gen.parameters())


def api_path(tmp_path):
    path = tmp_path / "gd_prior.yaml"
    path.write_text(RECIPE, encoding="utf-8")
    return path
