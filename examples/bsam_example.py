"""Bayesian SAM (bSAM) and SAM, derived from the Bayesian learning rule, training a small torch classifier.

The catalog recipes `catalog/bsam.yaml` and `catalog/sam.yaml` take the gradient of the mean step at an
adversarial point computed from an earlier gradient (rule `sharpness_aware`); their torch optimizers are
`catalog/generated/torch/{bsam,sam}.py`.  Each sub-batch (msharpness) is one sample: the loss is evaluated at the
sample θ_k of q and then at the adversarial point, each inside `with opt.sampled_params(train=True):`, which
`opt.step(closure)` does by calling the closure twice per sample.  Run from the repository root:

    python examples/bsam_example.py

It prints the training loss of both and bSAM's predictive accuracy averaged over samples of q.
"""
import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def generated(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "catalog" / "generated" / "torch" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def data(n=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 2, generator=g)
    y = ((X[:, 0] ** 2 + 0.5 * X[:, 1]) > 0.6).long()         # a curved boundary
    return X, y


def net():
    return torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))


def train(opt, model, X, y, msharpness, epochs=60, batch=64):
    calls = [0]

    def closure():
        k = (calls[0] // 2) % msharpness                       # two points per sub-batch: θ_k, then the ascent point
        calls[0] += 1
        rows = slice(start + k * sub, start + (k + 1) * sub)
        with opt.sampled_params(train=True):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(X[rows]), y[rows])
            loss.backward()
        return loss
    sub = batch // msharpness
    for _ in range(epochs):
        for start in range(0, len(X), batch):
            opt.step(closure)
    with torch.no_grad():
        return torch.nn.functional.cross_entropy(model(X), y).item()


def main():
    torch.manual_seed(0)
    X, y = data()
    m = 4
    bsam_net, sam_net = net(), net()
    sam_net.load_state_dict(bsam_net.state_dict())
    bsam = generated("bsam").BSAM(bsam_net.parameters(), ess=len(X), lr=0.5, rho=0.01, msharpness=m,
                                  wdecay=25.0 / len(X), s_init=1.0, damping=0.1)
    sam = generated("sam").SAM(sam_net.parameters(), lr=0.05, momentum=0.9, rho=0.05, msharpness=m,
                               wdecay=5e-4)
    print(f"bSAM training loss {train(bsam, bsam_net, X, y, m):.4f}")
    print(f"SAM  training loss {train(sam, sam_net, X, y, m):.4f}")
    with torch.no_grad():                                     # Bayesian model average over 20 samples of q
        probs = 0
        for _ in range(20):
            with bsam.sampled_params():
                probs = probs + torch.softmax(bsam_net(X), -1) / 20
        print(f"bSAM predictive accuracy (20 samples of q) {(probs.argmax(-1) == y).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
