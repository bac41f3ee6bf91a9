"""Split-task continual learning with continual IVON: the posterior after each task becomes the prior site of the next.

`catalog/ivon_continual.yaml` is IVON with its isotropic prior replaced by a Gaussian prior site N(m_past,
diag(s_past)^-1) (rule `prior_site`; Khan & Rue 2023, Eq. 1 and Sec. 5.1; Khan 2025, "Knowledge Adaptation as
Posterior Correction"; continual IVON in the Bayes-duality slides).  Its generated torch optimizer
(`catalog/generated/torch/ivon_continual.py`) keeps m_past and s_past per parameter in its state; after each task

    opt.set_data(m_past=lambda p, st, g: p, s_past=lambda p, st, g: g["ess"] * (st["h"] + g["weight_decay"]))

merges the posterior N(m, 1/(ess (h + weight_decay))) into the prior.

Benchmark: sklearn's digits (8x8 images, 10 classes) split into 5 two-class tasks (0/1, 2/3, 4/5, 6/7, 8/9), learned
in sequence by one MLP (64-100-100-10) whose first two outputs answer every task ("first or second digit of the
pair": the domain-incremental split, where a shared head makes forgetting visible; SETTING = "task" gives each task
its own two outputs instead).  10 epochs per task, batches of 32.  After each task the accuracy on every task seen
so far is measured (at the mean of q for the IVON runs) for

    adam         plain Adam (torch.optim.Adam)
    ivon         the same generated optimizer without the prior update (the prior stays IVON's N(0, 1/(ess wd)))
    ivon_cont    continual IVON: set_data(...) after every task

The table is printed and a plot (one panel per task: its accuracy after each training stage) is written to
examples/out/continual_ivon_split.png.  CPU, about a minute.  Run from the repository root:

    python examples/continual_ivon_split.py [--seeds 5]

IVON: lr 0.1, hess_init 0.5, beta2 0.95 (the precision follows the task within its ~80 steps), weight_decay 1e-2,
one sample per step, ess = 10 x the task's size; Adam: lr 1e-3.
"""
import argparse
import importlib.util
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "examples" / "out"
TASKS = [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
EPOCHS, BATCH = 10, 32
SETTING = "domain"          # one two-way head for every task ("task": each task its own two outputs)
ESS_FACTOR = 10             # ess = 10 x the task's size: a tempered posterior (less weight noise on ~250 examples)
IVON_KW = dict(lr=0.1, hess_init=0.5, beta2=0.95, weight_decay=1e-2, mc_samples=1)


def load_optimizer():
    spec = importlib.util.spec_from_file_location("ivon_continual", ROOT / "catalog/generated/torch/ivon_continual.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.IVONContinual


def split_tasks(seed):
    """Per task: (train X, train y in {0, 1}, test X, test y), 70/30 split per class."""
    X, y = load_digits(return_X_y=True)
    X = torch.tensor(X / 16.0, dtype=torch.float32)
    rng = np.random.default_rng(seed)
    out = []
    for pair in TASKS:
        idx = np.flatnonzero(np.isin(y, pair))
        rng.shuffle(idx)
        cut = int(0.7 * len(idx))
        lab = torch.tensor((y[idx] == pair[1]).astype(np.int64))
        out.append((X[idx[:cut]], lab[:cut], X[idx[cut:]], lab[cut:]))
    return out


def make_net(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 100), torch.nn.ReLU(), torch.nn.Linear(100, 100), torch.nn.ReLU(),
                               torch.nn.Linear(100, 10))


def outputs(t):
    """The two outputs task t reads: its classes' (task-incremental) or the same two for every task (domain)."""
    return list(TASKS[t]) if SETTING == "task" else [0, 1]


def task_loss(net, X, y, t):
    return torch.nn.functional.cross_entropy(net(X)[:, outputs(t)], y)


@torch.no_grad()
def accuracy(net, X, y, t):
    return (net(X)[:, outputs(t)].argmax(1) == y).float().mean().item()


def batches(n, seed):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=g)
    return [perm[i:i + BATCH] for i in range(0, n, BATCH)]


def run(method, tasks, seed, IVONContinual):
    """Accuracy matrix A[i, j]: accuracy on task j after training on tasks 0..i (NaN for j > i)."""
    net = make_net(seed)
    ess = ESS_FACTOR * min(len(tr[1]) for tr in tasks)    # one ess for every task: s = ess (h + wd) throughout
    if method == "adam":
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    else:
        opt = IVONContinual(net.parameters(), ess=ess, **IVON_KW)
    A = np.full((len(tasks), len(tasks)), np.nan)
    for t, (Xtr, ytr, _, _) in enumerate(tasks):
        for epoch in range(EPOCHS):
            for b in batches(len(ytr), seed * 1000 + t * 100 + epoch):
                if method == "adam":
                    opt.zero_grad()
                    task_loss(net, Xtr[b], ytr[b], t).backward()
                else:
                    with opt.sampled_params(train=True):
                        opt.zero_grad()
                        task_loss(net, Xtr[b], ytr[b], t).backward()
                opt.step()
        if method == "ivon_cont":      # the posterior after this task is the prior site of the next
            opt.set_data(m_past=lambda p, st, g: p,
                         s_past=lambda p, st, g: g["ess"] * (st["h"] + g["weight_decay"]))
        for j in range(t + 1):
            A[t, j] = accuracy(net, tasks[j][2], tasks[j][3], j)
    return A


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    T = len(TASKS)
    fig, axes = plt.subplots(1, T, figsize=(3.2 * T, 3.0), sharey=True)
    for j, ax in enumerate(axes):
        for method, A in results.items():
            ax.plot(range(j + 1, T + 1), 100 * A[j:, j], marker="o", label=method)
        ax.set_title(f"task {j + 1}: digits {TASKS[j][0]}/{TASKS[j][1]}")
        ax.set_xlabel("after training on task")
        ax.set_xticks(range(1, T + 1))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (%)")
    axes[0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(4, torch.get_num_threads())))
    IVONContinual = load_optimizer()
    start = time.time()
    results = {m: [] for m in ("adam", "ivon", "ivon_cont")}
    for seed in range(args.seeds):
        tasks = split_tasks(seed)
        for m in results:
            results[m].append(run(m, tasks, seed, IVONContinual))
    results = {m: np.stack(v) for m, v in results.items()}       # (seeds, T, T)
    T = len(TASKS)
    print(f"split digits, {T} tasks, {args.seeds} seeds: test accuracy (%) on each task seen so far, mean over seeds")
    header = "after task  method     " + "".join(f"  task{j + 1}" for j in range(T)) + "   average"
    print(header)
    for t in range(T):
        for m, R in results.items():
            mean = R[:, t].mean(axis=0)          # NaN (not printed) for the tasks not seen yet
            cells = "".join(f"  {100 * mean[j]:5.1f}" if j <= t else "       " for j in range(T))
            print(f"{t + 1:>10}  {m:<10}{cells}   {100 * np.mean(mean[:t + 1]):6.1f}")
    print("final average accuracy (mean ± sd over seeds): " + ", ".join(
        f"{m} {100 * R[:, -1].mean(1).mean():.1f} ± {100 * R[:, -1].mean(1).std():.1f}" for m, R in results.items()))
    path = OUT / "continual_ivon_split.png"
    plot({m: R.mean(0) for m, R in results.items()}, path)
    print(f"plot: {path.relative_to(ROOT)}   ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
