"""Write the example notebooks (``examples/*.ipynb``) from the cell sources below, without outputs.

    python examples/make_notebooks.py

The notebooks are valid nbformat 4 documents (checked with ``nbformat.validate``); cell ids are fixed so
that regenerating gives identical files. ``tests/unit/cli/test_examples.py`` executes every notebook with
nbclient, checks that it shows a figure inline (``%matplotlib inline``: an ``image/png`` output) and checks the
PNG plots it also writes into ``$BLR_EXAMPLES_OUTPUT`` (default: a folder in the temp dir).
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat import v4

HERE = Path(__file__).resolve().parent

SETUP = '''\
import os
import tempfile
from pathlib import Path

%matplotlib inline
import matplotlib.pyplot as plt            # figures show inline and are saved as PNG files into OUT
import numpy as np

from blr_derive import api as blr

OUT = Path(os.environ.get("BLR_EXAMPLES_OUTPUT") or Path(tempfile.gettempdir()) / "blr-derive-examples")
OUT.mkdir(parents=True, exist_ok=True)'''

NEWTON = [
    ("md", """\
# Newton's method from the full Gaussian

The Bayesian learning rule (Khan & Rue 2023, Eq. 6) over the full Gaussian candidate
$q(\\theta) = \\mathcal{N}(\\theta \\mid m, S^{-1})$ with the **delta method** (expectations at the mean)
gives Newton's method: with $\\rho = 1$ the classical step $m \\leftarrow m - H^{-1} g$ (Eq. 8), with
$\\rho < 1$ an online variant whose precision $S$ tracks a smoothed Hessian (Eqs. 12–13)."""),
    ("code", SETUP),
    ("md", "The catalog recipe `newton` names the family, the loss and the one approximation; `derive` carries out "
           "the BLR step by step. The derivation renders in the notebook."),
    ("code", 'd = blr.derive("newton")\nd.recipe'),
    ("code", "d"),
    ("md", "Every step is inspectable: `d.step(key)` picks one by rule name, title word or number and renders "
           "it; its `equations` are sympy pairs `(lhs, rhs[, op])` (strings only for the oracle notation), and "
           "`latex()` gives them as LaTeX."),
    ("code", 'd.step("delta")'),
    ("code", 'display(d.update["S"], d.update["m"])      # sympy expressions'),
    ("md", "The same algorithm declared inline, from the family and the approximation alone:"),
    ("code", '''\
mine = blr.derive(family="gaussian_full", loss="abstract", approximations=["delta"],
                  hyperparameters={"rho": 1.0}, name="my_newton")
assert {k: str(v) for k, v in mine.update.items()} == {k: str(v) for k, v in d.update.items()}
[s.rule for s in mine.steps]'''),
    ("md", "Generate numpy code, load it, and run it on L2-regularised logistic regression. The reference "
           "optimum comes from scipy's trust-region Newton solver."),
    ("code", '''\
newton = d.compile("numpy")
print("\\n".join(newton.EQUATIONS))

rng = np.random.default_rng(0)
N, P, delta = 200, 3, 1.0
X = rng.standard_normal((N, P))
y = (rng.random(N) < 1 / (1 + np.exp(-X @ np.array([1.5, -2.0, 0.5])))).astype(float)

def loss(w):
    z = X @ w
    return np.sum(np.logaddexp(0, z) - y * z) + 0.5 * delta * w @ w

def grad(w):
    return X.T @ (1 / (1 + np.exp(-X @ w)) - y) + delta * w

def hess(w):
    p = 1 / (1 + np.exp(-X @ w))
    return (X * (p * (1 - p))[:, None]).T @ X + delta * np.eye(P)

from scipy.optimize import minimize
ref = minimize(loss, np.zeros(P), jac=grad, hess=hess, method="trust-exact", options={"gtol": 1e-12})
ref.x'''),
    ("md", "The BLR minimizes $\\mathcal{L}(q) = \\mathbb{E}_q[\\ell(\\theta)] - \\mathcal{H}(q)$ (Eq. 2). With the "
           "delta method the generated module's `objective(state, oracles={\"loss\": loss})` reports the "
           "delta-method value $\\ell(m) - \\mathcal{H}(q)$ (labelled `'delta'`), with "
           "$\\mathcal{H}(q) = \\tfrac{P}{2}\\log 2\\pi e - \\tfrac12 \\log\\det S$. Where $S$ has reached the "
           "Hessian at the optimum it is $\\ell(m^*) + \\tfrac12\\log\\det \\nabla^2\\ell(m^*) - "
           "\\tfrac{P}{2}\\log 2\\pi e$: Laplace's approximation of $-\\log \\int e^{-\\ell}$ less $P/2$, the "
           "$\\tfrac12 \\mathrm{tr}(\\nabla^2\\ell\\, S^{-1})$ by which $\\mathbb{E}_q[\\ell]$ exceeds $\\ell(m)$ "
           "and which the delta method drops."),
    ("code", '''\
errors, objective = {}, {}
for rho in (1.0, 0.5, 0.2):
    state = newton.init(m=np.zeros(P), S=np.eye(P))
    errors[rho], objective[rho] = [], [newton.objective(state, oracles={"loss": loss})["objective"]]
    for t in range(40):
        state = newton.step(state, oracles={"grad": grad, "hess": hess}, rho=rho)
        errors[rho].append(np.linalg.norm(state["m"] - ref.x))
        objective[rho].append(newton.objective(state, oracles={"loss": loss})["objective"])
print({rho: f"{e[-1]:.1e}" for rho, e in errors.items()})
assert errors[1.0][7] < 1e-9             # Newton's method: quadratic convergence
assert errors[0.5][-1] < 1e-9 and errors[0.2][-1] < 1e-3

# l(m*) - H(N(m*, H(m*)^-1)): Laplace's -log evidence less P/2 (the delta method's E_q[l] is l(m))
laplace = loss(ref.x) + 0.5 * np.linalg.slogdet(hess(ref.x))[1] - 0.5 * P * np.log(2 * np.pi * np.e)
print({rho: f"{L[0]:.4f} -> {L[-1]:.8f}" for rho, L in objective.items()}, f"at the Laplace q: {laplace:.8f}")
assert abs(objective[1.0][-1] - laplace) < 1e-8 and abs(objective[0.5][-1] - laplace) < 1e-8
assert all(L[-1] < L[0] for L in objective.values())'''),
    ("code", '''\
fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4))
for rho, e in errors.items():
    ax.semilogy(range(1, len(e) + 1), np.maximum(e, 1e-16), marker="o", ms=3, label=f"rho = {rho}")
ax.set_xlabel("iteration"); ax.set_ylabel("|m - m*|  (m*: scipy, gtol 1e-12)"); ax.set_title("generated Newton (BLR, full Gaussian + delta)")
ax.legend()
for rho, L in objective.items():
    ax2.semilogy(range(len(L)), np.maximum(np.abs(np.array(L) - laplace), 1e-16), marker="o", ms=3, label=f"rho = {rho}")
ax2.set_xlabel("iteration"); ax2.set_ylabel("|L(q) - L at q = N(m*, H(m*)^-1)|")
ax2.set_title(f"the BLR objective l(m) - H(q) (delta method): {objective[1.0][0]:.1f} -> {laplace:.4f}"); ax2.legend()
fig.tight_layout()
fig.savefig(OUT / "newton_convergence.png", dpi=80)
plt.show()'''),
]

DIAG = [
    ("md", """\
# RMSprop, Adam and IVON from the diagonal Gaussian

All three come from the BLR over the mean-field Gaussian $\\mathcal{N}(\\theta \\mid m, \\mathrm{diag}(s)^{-1})$
(Sec. 4.2): RMSprop and Adam with the delta method and the squared-gradient Hessian (Eqs. 36–38),
IVON with Monte Carlo samples of $q$ (weight perturbation, Sec. 4.4). The recipes differ only in their
approximations. We derive each, generate a `torch.optim.Optimizer`, and train a small network with it
and with its peer (`torch.optim.RMSprop`, `torch.optim.Adam`, `ivon.IVON` from ivon-opt): the curves coincide."""),
    ("code", SETUP + '''
import ivon
import torch

torch.set_num_threads(1)                   # a tiny problem: one thread is fastest (and steady on a busy machine)'''),
    ("code", '''\
derived = {name: blr.derive(name) for name in ("rmsprop", "adam", "ivon")}
for name, d in derived.items():
    print(f"{name:8s} family={d.recipe.family.name}  approximations={[a.name for a in d.recipe.approximations]}")'''),
    ("md", "What separates RMSprop from Adam (the Table 1 view):"),
    ("code", 'print(blr.compare("rmsprop", "adam"))'),
    ("code", 'derived["adam"].update["m"]'),
    ("code", 'derived["ivon"].step("monte_carlo")'),
    ("md", "A small regression problem (float64, full batch), the same initial network for every run."),
    ("code", '''\
g = torch.Generator().manual_seed(0)
X = torch.randn(256, 8, generator=g, dtype=torch.float64)
y = torch.tanh(X @ torch.randn(8, 1, generator=g, dtype=torch.float64)) + 0.1 * torch.randn(256, 1, generator=g, dtype=torch.float64)

def make_net():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()

def train(make_opt, steps=100, sampled=False):
    net = make_net()
    opt = make_opt(net.parameters())
    torch.manual_seed(5)                   # the same weight-perturbation noise for IVON and its peer
    losses = []
    for _ in range(steps):
        if sampled:
            with opt.sampled_params(train=True):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(net(X), y)
                loss.backward()
        else:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(net(X), y)
            loss.backward()
        opt.step()
        losses.append(loss.item())
    return net, np.array(losses)'''),
    ("code", '''\
generated = {name: getattr(d.compile("torch"), d.recipe.class_name) for name, d in derived.items()}
runs = {
    "rmsprop": (lambda p: generated["rmsprop"](p, lr=1e-2), lambda p: torch.optim.RMSprop(p, lr=1e-2), False),
    "adam": (lambda p: generated["adam"](p, lr=1e-2), lambda p: torch.optim.Adam(p, lr=1e-2), False),
    "ivon": (lambda p: generated["ivon"](p, lr=0.05, ess=256), lambda p: ivon.IVON(p, lr=0.05, ess=256), True),
}
curves = {}
for name, (ours, peer, sampled) in runs.items():
    net_a, loss_a = train(ours, sampled=sampled)
    net_b, loss_b = train(peer, sampled=sampled)
    diff = max((a - b).abs().max().item() for a, b in zip(net_a.parameters(), net_b.parameters()))
    print(f"{name:8s} loss {loss_a[0]:.4f} -> {loss_a[-1]:.4f}   max |generated - peer| weights {diff:.1e}, "
          f"losses {np.abs(loss_a - loss_b).max():.1e}")
    assert diff < 1e-10 and np.abs(loss_a - loss_b).max() < 1e-10
    assert loss_a[-1] < 0.5 * loss_a[0]
    curves[name] = (loss_a, loss_b)'''),
    ("code", '''\
peers = {"rmsprop": "torch.optim.RMSprop", "adam": "torch.optim.Adam", "ivon": "ivon.IVON (ivon-opt)"}
fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
for ax, (name, (a, b)) in zip(axes, curves.items()):
    ax.semilogy(a, lw=3, alpha=0.5, label=f"generated ({name})")
    ax.semilogy(b, "k--", lw=1, label=peers[name])
    ax.set_title(name); ax.set_xlabel("step"); ax.legend()
axes[0].set_ylabel("training loss (MSE)")
fig.tight_layout()
fig.savefig(OUT / "diag_gaussian_optimizers.png", dpi=80)
plt.show()'''),
    ("md", """\
The objective the BLR minimizes, $\\mathcal{L}(q) = \\mathbb{E}_q[\\ell(\\theta)] - \\mathcal{H}(q)$ (Eq. 2), is
what a variational run should watch. The generated optimizer's `objective()` estimates it at its state: for
IVON, $\\ell = N \\cdot \\mathrm{MSE} + \\tfrac{\\delta N}{2}\\lVert\\theta\\rVert^2$ (the recipe's `minibatch` and
`weight_decay`), $\\mathbb{E}_q$ of the MSE by Monte Carlo at fresh samples of $q$ (with its standard error), the
prior's expectation and the entropy in closed form. `step()` keeps returning the loss, as `torch.optim` does."""),
    ("code", '''\
net = make_net()
opt = generated["ivon"](net.parameters(), lr=0.05, ess=256)
mse = lambda: torch.nn.functional.mse_loss(net(X), y)
torch.manual_seed(5)
at, L, se = [], [], []
for t in range(101):
    if t % 10 == 0:
        out = opt.objective(mse, samples=16)
        at.append(t); L.append(out["objective"]); se.append(out["standard_error"])
    with opt.sampled_params(train=True):
        opt.zero_grad()
        mse().backward()
    opt.step()
L, se = np.array(L), np.array(se)
print(f"L(q): {L[0]:.1f} -> {L[-1]:.1f} (standard error at the end {se[-1]:.2f}), estimate: {out['estimate']}")
assert L[-1] < L[0] - 10 * se[0]
fig, ax = plt.subplots(figsize=(5, 3.5))
ax.errorbar(at, L, yerr=2 * se, marker="o", capsize=3)
ax.set_xlabel("step"); ax.set_ylabel("L(q) = E_q[loss] - H(q)  (± 2 SE)"); ax.set_title("IVON: the BLR objective")
fig.tight_layout()
fig.savefig(OUT / "ivon_objective.png", dpi=80)
plt.show()'''),
]

USER = [
    ("md", """\
# A family of your own: Nakagami

Declare a family inline (YAML), and the engine derives the rest: the log-partition function
$A(\\lambda)$ by symbolic integration, $\\mu = \\nabla A(\\lambda)$, the inverse maps and the BLR update.
The Nakagami family $q(\\theta) \\propto \\theta^{2a-1} e^{-b\\theta^2}$ on $\\theta > 0$ (so $\\theta^2$ is
Gamma$(a, b)$) is a natural posterior for an inverse standard deviation."""),
    ("code", SETUP),
    ("code", '''\
nakagami = blr.family("""
name: nakagami
description: Nakagami distribution (theta^2 ~ Gamma(a, b)), for a positive scale
variable: theta
support: positive
parameters:
  a: {domain: positive, description: shape}
  b: {domain: positive, description: rate of theta^2}
sufficient_statistics: [log(theta), theta**2]
base_measure: 1
natural_parameters: [2*a - 1, -b]
""")
nakagami'''),
    ("code", 'nakagami.A, nakagami.mu_ord, nakagami.mu_inverse'),
    ("md", "Check the derived family numerically (normalisation, $\\mu$ against quadrature and Monte Carlo, "
           "Fisher information, entropy, round trips), as `blr-derive check` does for files:"),
    ("code", '''\
from blr_derive.verify.check import check_family
checks = check_family(nakagami, points=2, seed=0, mc_samples=5000)
for c in checks:
    print(f"{c.name:28s} {c.value:10.3g}  {'pass' if c.passed else 'FAIL'}")
assert all(c.passed for c in checks)'''),
    ("md", """\
A model: $y_i \\sim \\mathcal{N}(0, 1/\\theta^2)$ with a Nakagami$(a_0, b_0)$ prior on $\\theta$. The
negative log joint $\\ell(\\theta) = \\tfrac12 \\theta^2 \\sum_i y_i^2 - n \\log\\theta - (2a_0 - 1)\\log\\theta + b_0\\theta^2$
is linear in the sufficient statistics, so the `exact` rule applies and the BLR with $\\rho = 1$ lands on
the exact posterior (Sec. 5.1)."""),
    ("code", '''\
d = blr.derive(
    family=nakagami, name="nakagami_scale",
    loss={"expression": "0.5*sy2*theta**2 - n*log(theta) - (2*a0 - 1)*log(theta) + b0*theta**2",
          "data": {"sy2": {"shape": []}, "n": {"shape": []}}},
    approximations=["exact"],
    hyperparameters={"rho": 0.3, "a0": 1.0, "b0": 1.0},
)
d.update'''),
    ("code", '[f"{i}. {s.rule}: {s.title}" for i, s in enumerate(d.steps, 1)]'),
    ("code", '''\
mod = d.compile("numpy")
rng = np.random.default_rng(0)
ys = rng.normal(0.0, 1 / 2.0, size=50)                # true theta = 2
data = {"sy2": np.sum(ys**2), "n": len(ys)}

# the exact posterior by quadrature on a grid
grid = np.linspace(1e-4, 6, 30_001)
logp = -(0.5 * data["sy2"] * grid**2 - data["n"] * np.log(grid) - np.log(grid) + grid**2)
post = np.exp(logp - logp.max()); post /= np.trapezoid(post, grid)
post_mean = np.trapezoid(grid * post, grid)

from scipy.special import gammaln
def q_mean(a, b):                                      # E[theta] under Nakagami(a, b)
    return np.exp(gammaln(a + 0.5) - gammaln(a)) / np.sqrt(b)

one = mod.step(mod.init(a=1.0, b=1.0), data=data, rho=1.0)   # rho = 1: one step to the posterior
print("rho = 1:", {k: float(v) for k, v in one.items()}, "E[theta] =", q_mean(one["a"], one["b"]), "quadrature:", post_mean)
assert abs(q_mean(one["a"], one["b"]) - post_mean) < 1e-7'''),
    ("md", "The BLR minimizes $\\mathcal{L}(q) = \\mathbb{E}_q[\\ell(\\theta)] - \\mathcal{H}(q)$ (Eq. 2); the "
           "generated module's `objective(state, data=...)` evaluates it exactly here (the derivation closes "
           "$\\mathbb{E}_q[\\ell]$ and the entropy of the declared family). Its minimum over all $q$ is "
           "$-\\log \\int e^{-\\ell(\\theta)} d\\theta$ (minus the log evidence), reached at the exact posterior, "
           "which is in the family: quadrature gives the reference."),
    ("code", '''\
state = mod.init(a=1.0, b=1.0)
gaps, L = [], [mod.objective(state, data=data)["objective"]]
for t in range(30):
    state = mod.step(state, data=data)                 # rho = 0.3 (the recipe's default)
    gaps.append(abs(q_mean(state["a"], state["b"]) - post_mean))
    L.append(mod.objective(state, data=data)["objective"])
assert gaps[-1] < 1e-3 * gaps[0]
log_evidence = np.log(np.trapezoid(np.exp(logp - logp.max()), grid)) + logp.max()
print(f"L(q): {L[0]:.6f} -> {L[-1]:.10f}; -log evidence (quadrature) {-log_evidence:.10f}; "
      f"after the rho = 1 step {mod.objective(one, data=data)['objective']:.10f}")
assert np.all(np.diff(L) < 0) and L[-1] - (-log_evidence) < 1e-6
assert abs(mod.objective(one, data=data)["objective"] + log_evidence) < 1e-8

# the generated module also carries the family's parameter maps; mu -> (a, b) is solved by Newton's method
mu = mod.expectation_parameters(mod.natural_parameters(state["a"], state["b"]))
back = mod.ordinary_from_expectation(mu)
print("mu =", mu, "-> (a, b) =", back)
assert np.allclose([back["a"], back["b"]], [state["a"], state["b"]], rtol=1e-10)'''),
    ("code", '''\
fig, (ax1, ax3, ax2) = plt.subplots(1, 3, figsize=(14, 3.5))
ax1.semilogy(range(1, len(gaps) + 1), gaps, marker="o", ms=3)
ax1.set_xlabel("BLR iteration (rho = 0.3)"); ax1.set_ylabel("|E_q[theta] - posterior mean|")
ax3.semilogy(range(len(L)), np.array(L) + log_evidence, marker="o", ms=3)
ax3.set_xlabel("BLR iteration (rho = 0.3)"); ax3.set_ylabel("L(q) + log evidence  (exact objective)")
a, b = float(one["a"]), float(one["b"])
x = grid[(grid > 1) & (grid < 3)][::20]
ax2.plot(x, np.exp(np.log(2) + a * np.log(b) - gammaln(a) + (2 * a - 1) * np.log(x) - b * x**2), lw=3,
         alpha=0.5, label="BLR: Nakagami(a, b)")
ax2.plot(x, np.interp(x, grid, post), "k--", label="exact posterior (quadrature)")
ax2.set_xlabel("theta"); ax2.legend()
fig.tight_layout()
fig.savefig(OUT / "nakagami_posterior.png", dpi=80)
plt.show()'''),
]

BAYESBINN = [
    ("md", """\
# BayesBiNN from the Bernoulli

Binary weights $\\theta \\in \\{-1, +1\\}^P$ with a mean-field Bernoulli candidate, parameterised by its
natural parameter $\\lambda$ (the real-valued latent weight): the BLR with the Concrete relaxation of
temperature $\\tau$ (gradients at relaxed samples $\\tanh((\\lambda + \\delta)/\\tau)$, Eqs. 50–51) gives
BayesBiNN's update $\\lambda \\leftarrow (1 - \\rho)\\lambda - \\rho\\, s \\odot \\nabla\\ell$ (Eq. 52, Sec. 4.5).
The trained model uses $\\mathrm{sign}(\\lambda)$, the mode of $q$."""),
    ("code", SETUP),
    ("code", 'd = blr.derive("bayesbinn")\nd.recipe.family'),
    ("code", "d"),
    ("code", 'd.update["lam"]'),
    ("md", "A binary-weight linear classifier: labels $y = \\mathrm{sign}(x^\\top w^* + \\text{noise})$ with "
           "$w^* \\in \\{-1, +1\\}^{32}$, logistic loss, mini-batches of 100 (the oracle returns the mini-batch "
           "mean, scaled by the training-set size $N$, Eq. 34)."),
    ("code", '''\
bayesbinn = d.compile("numpy")
print("\\n".join(bayesbinn.EQUATIONS))

rng = np.random.default_rng(0)
N, P = 1000, 32
X = rng.standard_normal((N, P))
w_true = rng.choice([-1.0, 1.0], P)
y = np.sign(X @ w_true + 0.5 * rng.standard_normal(N))
c = np.sqrt(P)

def loss(theta):
    return np.mean(np.logaddexp(0, -y * (X @ theta) / c))

def grad_on(idx):                         # mini-batch mean gradient at (relaxed) weights theta
    def grad(theta):
        z = y[idx] * (X[idx] @ theta) / c
        return -(X[idx] * (y[idx] / c / (1 + np.exp(z)))[:, None]).mean(axis=0)
    return grad'''),
    ("code", '''\
state = bayesbinn.init(lam=np.zeros(P))
history, objective = [], []
rng_L = np.random.default_rng(1)          # the objective's own draws: the run is the same with or without it
for t in range(201):
    if t % 10 == 0:   # L(q) = E_q[N*loss - log p0] - H(q): Monte Carlo at the module's (relaxed) samples of q
        out = bayesbinn.objective(state, oracles={"loss": loss}, rng=rng_L, samples=32, lr=0.05, train_set_size=N)
        objective.append((t, out["objective"], out["standard_error"]))
    if t == 200:
        break
    idx = rng.choice(N, 100, replace=False)
    state = bayesbinn.step(state, oracles={"grad": grad_on(idx)}, rng=rng, lr=0.05, train_set_size=N)
    w = np.sign(state["lam"])
    history.append((loss(w), np.mean(np.sign(X @ w) == y), np.mean(w == w_true)))
history = np.array(history)
print("final: loss %.4f, accuracy %.3f, signs recovered %.3f" % tuple(history[-1]))
assert history[-1, 2] == 1.0 and history[-1, 1] >= 0.95
p_plus = 1 / (1 + np.exp(-2 * state["lam"]))   # q(theta_j = +1) = sigmoid(2 lam_j)
print("q(theta = +1), first 8 weights:", np.round(p_plus[:8], 3))
objective = np.array(objective)
print("L(q): %.1f (SE %.1f) at step 0 -> %.1f (SE %.1f) at step 200" % (*objective[0, 1:], *objective[-1, 1:]))
assert np.all(np.isfinite(objective[:, 1])) and objective[0, 1] - objective[-1, 1] > 10 * objective[0, 2]'''),
    ("code", '''\
fig, (ax1, ax3, ax2) = plt.subplots(1, 3, figsize=(14, 3.5))
ax1.plot(history[:, 0]); ax1.set_xlabel("step"); ax1.set_ylabel("training loss of sign(lam)")
ax3.errorbar(objective[:, 0], objective[:, 1], yerr=2 * objective[:, 2], marker="o", ms=3, capsize=2)
ax3.set_xlabel("step"); ax3.set_ylabel("L(q) (Monte Carlo, ± 2 SE)")
ax2.plot(history[:, 1], label="accuracy of sign(lam)")
ax2.plot(history[:, 2], label="fraction of w* recovered")
ax2.set_xlabel("step"); ax2.set_ylim(0.5, 1.02); ax2.legend()
fig.suptitle("generated BayesBiNN (BLR, Bernoulli + Concrete relaxation)")
fig.tight_layout()
fig.savefig(OUT / "bayesbinn_training.png", dpi=80)
plt.show()'''),
]

RECIPE = [
    ("md", """\
# Writing a recipe from scratch: from online Newton to Adam, and a variant

A recipe names a candidate family, a loss and the approximations you accept (README, *Recipe format*;
every key and every rule's arguments: `docs/recipes.md`). Here we start from the mean-field Gaussian
$q(\\theta) = \\mathcal{N}(\\theta \\mid m, \\mathrm{diag}(s)^{-1})$, an abstract loss (known through its gradient
oracle) and the delta method, which give online Newton with a diagonal Hessian (Eq. 37). Then we add one
approximation at a time and watch the derived update change until it is Adam (Sec. 4.2, Eqs. 36–38, App. F).
We check the derivation numerically, train a small network with the generated `torch.optim.Optimizer`
against `torch.optim.Adam`, and finally derive a variant that is not in the catalog."""),
    ("code", SETUP + """
import torch
import yaml
from IPython.display import Latex, display

torch.set_num_threads(1)                   # a tiny problem: one thread is fastest"""),
    ("code", 'q = blr.family("gaussian_diag")\nq'),
    ("md", """\
The recipe's fixed part. Hyperparameters follow the peer's conventions, as the catalog recipes do
(`catalog/adam.yaml`): `lr` is the BLR learning rate $\\rho$ of the mean, `betas` is a pair whose elements
are named `beta1`, `beta2` in expressions, and `eps` is Adam's $\\epsilon$. `state_init` starts the scale at
zero (Adam's `exp_avg_sq`), and the `peer:` block names the optimizer state as torch does, so that
`optimizer.state[p]` holds `exp_avg`, `exp_avg_sq` and `step`."""),
    ("code", """\
HYPER = {
    "lr": {"default": 1e-3, "description": "learning rate of the mean"},
    "betas": {"default": [0.9, 0.999], "names": ["beta1", "beta2"],
              "description": "EMA rates of the gradient and of the scale"},
    "eps": {"default": 1e-8, "description": "added to the square root of the scale"},
}
KEYS = dict(family="gaussian_diag", loss="abstract", learning_rate="lr", hyperparameters=HYPER,
            state_init={"s": 0}, class_name="MyAdam",
            peer={"state_names": {"u": "exp_avg", "s": "exp_avg_sq"}, "counts_steps": True})

def show(d, rule):
    \"\"\"The step that ``rule`` added (rendered), then the whole update after it.\"\"\"
    display(d.steps_for(rule)[-1])
    display(Latex(d._repr_latex_()))"""),
    ("md", "**1. The delta method.** Gradient and Hessian at the mean: online Newton, $s$ a smoothed Hessian "
           "that preconditions the mean step."),
    ("code", """\
approximations = ["delta"]
d = blr.derive(name="my_adam", approximations=approximations, **KEYS)
print([s.rule for s in d.steps])
show(d, "increment_form")"""),
    ("md", "**2. `squared_gradient_hessian`** (Eqs. 38, 45): the Hessian oracle is replaced by $\\hat g^2$, so "
           "only a gradient is needed."),
    ("code", """\
approximations.append("squared_gradient_hessian")
d = blr.derive(name="my_adam", approximations=approximations, **KEYS)
show(d, "squared_gradient_hessian")"""),
    ("md", "**3. `separate_learning_rates`** (Eq. 36): the scale gets its own rate $1 - \\beta_2$; the mean keeps "
           "`lr`. An argument is an expression of the hyperparameters."),
    ("code", """\
approximations.append({"separate_learning_rates": {"s": "1 - beta2"}})
d = blr.derive(name="my_adam", approximations=approximations, **KEYS)
show(d, "separate_learning_rates")"""),
    ("md", "**4. `ema_momentum`** (App. F, Eq. 77): the mean step uses an exponential moving average $u$ of the "
           "gradient, a new state (its name is the argument `state`)."),
    ("code", """\
approximations.append({"ema_momentum": {"rate": "beta1", "state": "u"}})
d = blr.derive(name="my_adam", approximations=approximations, **KEYS)
show(d, "ema_momentum")"""),
    ("md", "**5. `debias`**, twice (Adam's convention, not a BLR step): both averages start at zero and are "
           "divided by $1 - \\beta^t$; the step counter $t$ becomes state."),
    ("code", """\
approximations += [{"debias": {"param": "u", "rate": "beta1"}}, {"debias": {"param": "s", "rate": "beta2"}}]
d = blr.derive(name="my_adam", approximations=approximations, **KEYS)
show(d, "debias")"""),
    ("md", "**6. `square_root_scaling`** (Eq. 38): precondition with $\\sqrt{\\hat s} + \\epsilon$. This is Adam. "
           "Passes rewrite the update in the order listed: the same pass *before* the bias correction would "
           "debias $\\sqrt{s} + \\epsilon$ instead of $s$, which is not Adam."),
    ("code", """\
approximations.append({"square_root_scaling": {"param": "s", "eps": "eps"}})
d = blr.derive(name="my_adam", approximations=approximations, **KEYS)
show(d, "square_root_scaling")

misordered = approximations[:4] + approximations[-1:] + approximations[4:6]
wrong = blr.derive(name="misordered", approximations=misordered, **KEYS)
print("debias after square_root_scaling:", wrong.definitions["s_hat"])
print("debias before (Adam):            ", d.definitions["s_root"])"""),
    ("md", "The recipe as a file would hold it (`blr-derive my_adam.yaml --target torch` generates the same "
           "optimizer), and the whole derivation, step by step:"),
    ("code", """\
spec = {"name": "my_adam", **KEYS, "approximations": approximations}
text = yaml.safe_dump(spec, sort_keys=False, default_flow_style=None)
(OUT / "my_adam.yaml").write_text(text)
print(text)
assert {k: str(v) for k, v in blr.derive(text).update.items()} == {k: str(v) for k, v in d.update.items()}"""),
    ("code", "d"),
    ("md", """\
**Check it numerically.** `check_family` compares what the engine derived for the family with quadrature,
Monte Carlo and finite differences; `check_recipe_updates` runs the generated numpy update against the
symbolic one at random inputs (what `blr-derive check my_adam.yaml` prints)."""),
    ("code", """\
from blr_derive.verify.family import check_family
from blr_derive.verify.recipe import check_recipe_updates
checks = check_family(q, points=2, seed=0, mc_samples=5000) + check_recipe_updates(d.recipe)
for c in checks:
    print(f"{c.name:40s} {c.value:10.3g}  {'pass' if c.passed else 'FAIL'}")
assert all(c.passed for c in checks)"""),
    ("md", "**Compile and train.** A small MLP on synthetic regression data (float64, full batch), the same "
           "initial weights for every optimizer; the generated `MyAdam` against `torch.optim.Adam`."),
    ("code", """\
MyAdam = d.compile("torch").MyAdam

g = torch.Generator().manual_seed(0)
X = torch.randn(256, 8, generator=g, dtype=torch.float64)
y = torch.tanh(X @ torch.randn(8, 1, generator=g, dtype=torch.float64)) + 0.1 * torch.randn(256, 1, generator=g, dtype=torch.float64)

def make_net():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()

def train(make_opt, steps=200):
    net = make_net()
    opt = make_opt(net.parameters())
    losses, weights = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(X), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        weights.append(torch.cat([p.detach().flatten() for p in net.parameters()]))
    return opt, np.array(losses), torch.stack(weights)

hyper = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
opt_a, loss_a, w_a = train(lambda p: MyAdam(p, **hyper))
opt_b, loss_b, w_b = train(lambda p: torch.optim.Adam(p, **hyper))
gap = (w_a - w_b).abs().max().item()
print(f"loss {loss_a[0]:.4f} -> {loss_a[-1]:.4f}; max |MyAdam - torch.optim.Adam| over the trajectory: "
      f"weights {gap:.1e}, losses {np.abs(loss_a - loss_b).max():.1e}")
assert gap < 1e-10 and np.abs(loss_a - loss_b).max() < 1e-10
p0 = next(iter(opt_a.state))
print("optimizer state:", sorted(opt_a.state[p0]))"""),
    ("md", """\
**Its objective.** The generated optimizer also reports $\\mathcal{L}(q) = \\mathbb{E}_q[\\ell] - \\mathcal{H}(q)$
(Eq. 2) at its state: with the delta method, `opt.objective(closure)` is $\\ell(m) - \\mathcal{H}(q)$
(labelled `'delta'`), $q = \\mathcal{N}(m, \\mathrm{diag}(s)^{-1})$ with $s$ the state `exp_avg_sq`. Adam's $s$
is a running average of $g^2$, tiny next to a Hessian, so $q$ is very wide and $-\\mathcal{H}(q)$ dominates; and
since $s$ grows as the average fills in, $\\mathcal{L}$ *rises* while the loss falls: Adam's conventions
(bias correction, the square root) leave the BLR, which would descend $\\mathcal{L}$. We check the value
against the entropy written here from `exp_avg_sq`."""),
    ("code", """\
net = make_net()
opt = MyAdam(net.parameters(), **hyper)
mse = lambda: torch.nn.functional.mse_loss(net(X), y)
watched = []
for t in range(200):
    opt.zero_grad(); mse().backward(); opt.step()
    with torch.no_grad():
        out = opt.objective(mse)                       # the closure is called once, at the mean
    watched.append((out["objective"], out["expected_loss"], out["entropy"]))
watched = np.array(watched)
with torch.no_grad():
    H = sum(float(np.sum(0.5 * np.log(2 * np.pi * np.e / st["exp_avg_sq"].numpy()))) for st in opt.state.values())
    assert abs(watched[-1, 0] - (float(mse()) - H)) < 1e-9 * abs(H)
print(f"L(q): {watched[0, 0]:.1f} -> {watched[-1, 0]:.1f} (loss {watched[0, 1]:.4f} -> {watched[-1, 1]:.4f}, "
      f"H(q) {watched[0, 2]:.1f} -> {watched[-1, 2]:.1f}); estimate: {out['estimate']}")
assert out["estimate"] == "delta" and watched[-1, 1] < 0.1 * watched[0, 1]"""),
    ("md", """\
**A new variant.** Swap the Hessian estimate: `absolute_gradient_hessian` takes $|\\hat g| + \\epsilon$
(Adamax's estimate) in place of $\\hat g^2$. Since $|\\hat g|$ already has the units of the gradient, we
drop the square root: the mean step is $u/s$, a smoothed sign descent. Nothing else changes."""),
    ("code", """\
variant = ["delta", {"absolute_gradient_hessian": {"eps": "eps"}}] + approximations[2:6]
HYPER_ABS = dict(HYPER, eps={"default": 1e-8, "description": "added to |g|"})
dv = blr.derive(name="my_adam_abs", approximations=variant,
                **dict(KEYS, hyperparameters=HYPER_ABS, class_name="MyAdamAbs"))
show(dv, "absolute_gradient_hessian")
(OUT / "my_adam_abs.yaml").write_text(yaml.safe_dump({"name": "my_adam_abs", **KEYS, "hyperparameters": HYPER_ABS,
                                                       "approximations": variant}, sort_keys=False))
print(blr.compare(OUT / "my_adam.yaml", OUT / "my_adam_abs.yaml"))
assert check_recipe_updates(dv.recipe)[0].passed
MyAdamAbs = dv.compile("torch").MyAdamAbs
_, loss_c, _ = train(lambda p: MyAdamAbs(p, **hyper))
print(f"MyAdamAbs: loss {loss_c[0]:.4f} -> {loss_c[-1]:.4f}")
assert loss_c[-1] < 0.1 * loss_c[0]"""),
    ("code", """\
fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4))
ax.semilogy(loss_a, lw=3, alpha=0.5, label="MyAdam (derived)")
ax.semilogy(loss_b, "k--", lw=1, label="torch.optim.Adam")
ax.semilogy(loss_c, lw=2, label="MyAdamAbs (derived variant: |g| Hessian, no square root)")
ax.set_xlabel("step"); ax.set_ylabel("training loss (MSE)"); ax.set_title("a recipe written from scratch")
ax.legend()
ax2.plot(range(1, len(watched) + 1), watched[:, 0])
ax2.set_xlabel("step"); ax2.set_ylabel("L(q) = l(m) - H(q)  (delta method)")
ax2.set_title("MyAdam's L(q), q = N(m, diag(exp_avg_sq)^-1): it rises")
fig.tight_layout()
fig.savefig(OUT / "recipe_from_scratch.png", dpi=80)
plt.show()"""),
]

NOTEBOOKS = {
    "01_newton_full_gaussian.ipynb": NEWTON,
    "02_rmsprop_adam_ivon_diag_gaussian.ipynb": DIAG,
    "03_bayesbinn_bernoulli.ipynb": BAYESBINN,
    "04_user_declared_family.ipynb": USER,
    "05_writing_a_recipe.ipynb": RECIPE,
}


def build(cells, stem):
    nb = v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}}
    for i, (kind, src) in enumerate(cells):
        cell = v4.new_markdown_cell(src) if kind == "md" else v4.new_code_cell(src)
        cell.id = f"{stem[:2]}-{i:02d}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def main(argv=None):
    for name, cells in NOTEBOOKS.items():
        nb = build(cells, name)
        with open(HERE / name, "w", encoding="utf-8", newline="\n") as fh:
            nbformat.write(nb, fh)
        print(f"wrote examples/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
