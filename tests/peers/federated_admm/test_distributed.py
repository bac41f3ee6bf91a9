"""Generated torch optimizers across processes: torch.distributed (gloo, CPU) with 2 and 4 ranks.

Each rank holds one equal shard of a fixed data set (mean loss over its shard) and trains a copy of
the same small network; the parameters every rank ends with are compared with one process that trains
on the full batch (mean loss over all examples):

* ``adam``, ``sgd`` (momentum, Nesterov, weight decay): the model is wrapped in
  ``DistributedDataParallel``; the optimizers are used unchanged.  ``adam_fsdp2`` (AMSGrad): the model is
  sharded with FSDP2 (``fully_shard`` on each Linear and on the whole net): the optimizer updates DTensor
  shards with its unchanged multi-tensor program.  DDP averages the shard gradients, the
  mean of equal-shard means is the full-batch mean, so the runs agree up to the rounding of the sums.
* ``ivon`` with ``sync=True`` and the Price estimator, no DDP: every rank seeds the same noise stream
  (``torch.manual_seed``), so the samples θ_k are the same on every rank and in the single process.  The
  accumulated statistics mean_k g_k and mean_k ε_k g_k/σ are linear in the gradient, so their average over
  the ranks is the full-batch statistic: the single-process full-batch run is reproduced.
* ``ivon_fsdp2`` (Price estimator, a finite clip radius, so the bounds run): the model sharded with FSDP2 as above, no ``sync``:
  FSDP averages the gradients; every rank draws the full noise vector from the same stream and keeps its shard
  of it (``distribute_tensor`` without communication), so the samples are those of the single process; the
  multi-tensor copies and bounds that DTensors lack run tensor by tensor.
* ``ivon`` with ``sync=True`` and ``hess_approx='gradsq'``: mean_k g_k² is *not* linear in the gradient; the
  synchronized statistic is the average over ranks of the squared shard gradients (ivon-opt's ``sync``
  leaves this statistic unsynchronized, so its ranks drift apart).  Compared with one process that
  collects, for every sample, the gradients of every shard at the same θ_k (the same average, computed
  serially), and all ranks must agree.

Compared: every parameter tensor, float64, |Δ| ≤ 1e-12 (the observed differences are ~1e-16: the only
difference is the order of floating-point summation).

The same spawn (one start of 4 processes serves every test here) also runs federated Bayesian ADMM with the
clients and the server as ranks: see tests/peers/federated_admm/federated_problems.py.
"""
import os
import socket
import tempfile

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import federated_problems as fp
from conftest import GENERATED, load_module_from_path

TORCH_GENERATED = str(GENERATED / "torch")

N, D, STEPS = 24, 4, 6
TOL = 1e-12


def _data():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, D, generator=g, dtype=torch.float64)
    y = torch.sin(X @ torch.arange(1.0, D + 1, dtype=torch.float64)) + 0.1 * torch.randn(N, generator=g, dtype=torch.float64)
    return X, y


def _net():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(D, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1)).double()


def _loss(net, X, y):
    return torch.nn.functional.mse_loss(net(X).squeeze(-1), y)


CASES = {
    "adam": ("adam", dict(lr=0.05, weight_decay=1e-3), False),
    "adam_fsdp2": ("adam", dict(lr=0.05, weight_decay=1e-3, amsgrad=True), False),
    "sgd": ("sgd", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3), False),
    "ivon_price": ("ivon", dict(lr=0.05, ess=N, mc_samples=2, hess_approx="price"), True),
    "ivon_gradsq": ("ivon", dict(lr=0.05, ess=N, mc_samples=2, hess_approx="gradsq"), True),
    "ivon_fsdp2": ("ivon", dict(lr=0.05, ess=N, mc_samples=2, hess_approx="price", clip_radius=0.5), True),
}


def _placement(case):
    """(ddp, sync) for a case: DDP or FSDP2 averages the gradients over the ranks; IVON without either
    synchronizes its own statistics (sync=True)."""
    fsdp2 = case.endswith("_fsdp2")
    sampling = CASES[case][2]
    return fsdp2 or not sampling, sampling and not fsdp2


def _train(case, shards, ddp=False, sync=False):
    """Train one copy of the network; ``shards`` is a list of (X, y): with one shard per sample the
    gradients of all shards at the same sample are collected (the serial twin of a synced run)."""
    recipe, kw, sampling = CASES[case]
    net = _net()
    if ddp and case.endswith("_fsdp2"):         # FSDP2: every Linear and the whole net sharded over the ranks
        from torch.distributed.fsdp import fully_shard
        for layer in net:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        model = fully_shard(net)
    else:
        model = torch.nn.parallel.DistributedDataParallel(net) if ddp else net
    cls = getattr(load_module_from_path(os.path.join(TORCH_GENERATED, recipe + ".py")), {"adam": "Adam", "sgd": "SGD", "ivon": "IVON"}[recipe])
    opt = cls(net.parameters(), **kw, sync=sync) if sampling else cls(net.parameters(), **kw)
    torch.manual_seed(7)            # the same noise stream on every rank and in the single process
    for _ in range(STEPS):
        if not sampling:
            opt.zero_grad()
            _loss(model, *shards[0]).backward()
        else:
            for _ in range(kw["mc_samples"]):
                rng = torch.get_rng_state()
                for X, y in shards:
                    torch.set_rng_state(rng)        # every shard at the same sample θ_k
                    with opt.sampled_params(train=True):
                        opt.zero_grad()
                        _loss(model, X, y).backward()
        opt.step()
    return [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone() for p in net.parameters()]


def _worker(rank, ports, out):
    """One process, two worlds: first all four ranks, then ranks 0 and 1 alone (one spawn, not two)."""
    torch.set_num_threads(1)
    for world, port in zip((4, 2), ports):
        if rank >= world:
            break
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        try:
            X, y = _data()
            n = N // world
            shard = [(X[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n])]
            res = {case: _train(case, shard, *_placement(case)) for case in CASES}
            torch.save(res, os.path.join(out, f"world{world}_rank{rank}.pt"))
            if world == fp.K:
                np.save(os.path.join(out, f"federated_rank{rank}.npy"), fp.rank_runs(rank), allow_pickle=True)
            dist.barrier()          # nobody tears down its gloo pairs while a peer still talks to it
        finally:
            dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def spawned():
    """One spawn of 4 processes: (DDP/sync results per world size, federated results per rank)."""
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_worker, args=((_free_port(), _free_port()), out), nprocs=4, join=True)
        ddp = {w: [torch.load(os.path.join(out, f"world{w}_rank{r}.pt")) for r in range(w)] for w in (4, 2)}
        fed = [np.load(os.path.join(out, f"federated_rank{r}.npy"), allow_pickle=True).item() for r in range(fp.K)]
    return ddp, fed


def _check(world, ranks):
    X, y = _data()
    n = N // world
    full = [(X, y)]
    per_shard = [(X[r * n:(r + 1) * n], y[r * n:(r + 1) * n]) for r in range(world)]
    worst = 0.0
    for case in CASES:
        ref = _train(case, per_shard if case == "ivon_gradsq" else full)
        for r, res in enumerate(ranks):
            for a, b in zip(res[case], ref):
                err = (a - b).abs().max().item()
                worst = max(worst, err)
                assert err <= TOL, (world, case, r, err)
        # the run moved the parameters (the comparison is not between two untouched copies)
        assert max((a - b).abs().max().item() for a, b in zip(ref, _net().parameters())) > 1e-3
    return worst


def test_two_and_four_ranks_equal_single_process_full_batch(spawned):
    for world in (2, 4):
        _check(world, spawned[0][world])


def test_federated_ranks_equal_the_in_process_simulator(spawned):
    ref = fp.simulator_runs()
    for name, g in ref.items():
        for r, res in enumerate(spawned[1]):
            for key in g:
                err = np.max(np.abs(res[name][key] - g[key]))
                assert err <= 1e-12 * max(1.0, np.max(np.abs(g[key]))), (name, r, key, err)
    # the full-Gaussian round on the ranks is the centralized least-squares posterior
    ls = fp.least_squares()
    S = sum(A.T @ A for A, _ in ls) + fp.DELTA * np.eye(3)
    assert np.allclose(spawned[1][1]["full"]["m"], np.linalg.solve(S, sum(A.T @ b for A, b in ls)), rtol=1e-10, atol=0)


def test_bound_per_round_on_ranks_equals_the_in_process_simulator(spawned):
    """run_rank(client_loss=...): the three client ranks' losses at the mean of q_g are summed by all_reduce (the
    dedicated server adds 0) and every rank's callback gets the same global_objective as simulate's."""
    ref = fp.simulator_bounds()
    assert len(ref) == 3 and np.all(np.isfinite(ref))
    for r, res in enumerate(spawned[1]):
        assert np.allclose(res["admm_server_bounds"], ref, rtol=1e-12, atol=0), (r, res["admm_server_bounds"], ref)


def test_ivon_admm_on_ranks_reaches_fedavg_and_admm_accuracy(spawned):
    acc_ivon, acc_avg, acc_admm = fp.accuracies(spawned[1][0]["ivon"]["m"])
    print(f"test accuracy after {fp.ROUNDS} rounds: IVON-ADMM {acc_ivon:.4f}, FedAvg {acc_avg:.4f}, "
          f"federated ADMM {acc_admm:.4f}")
    assert acc_ivon >= acc_avg and acc_ivon >= acc_admm


def test_sync_without_process_group_is_a_no_op():
    X, y = _data()
    a = _train("ivon_price", [(X, y)], sync=True)
    b = _train("ivon_price", [(X, y)], sync=False)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
