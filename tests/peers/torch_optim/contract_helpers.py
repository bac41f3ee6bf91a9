"""Shared helpers of the torch-optimizer contract suite (test_torch_contract*.py).

The suite ports the generic tests of PyTorch's ``test/test_optim.py`` (``TestOptimRenewed``) to the generated
torch optimizers: every generated optimizer that has a peer in torch.optim is run next to it, step for step,
and compared numerically (float64 to 1e-12, float32 to 1e-6); the generated optimizers without a torch.optim
peer (IVON, OGN, VOGN, BayesBiNN, STE) take the peer-independent behaviour tests, and IVON is also compared
with ivon-opt.  The configurations and the invalid inputs come from torch's own ``optim_db``
(``torch.testing._internal.common_optimizers``).

That module imports ``expecttest`` (a PyTorch test dependency, not one of this project's): when it is not
installed, a stand-in module whose ``TestCase`` is ``unittest.TestCase`` is registered first; nothing of
expecttest is used by ``optim_db``.

Numerical comparisons of float64 runs are made under a float64 *default* dtype (``default_dtype``): torch
keeps its scalar state (``step``, NAdam's ``mu_product``) in the default dtype, so under a float32 default the
float64 peer rounds NAdam's momentum product to float32 at every step.
"""
import contextlib
import copy
import functools
import inspect
import re
import sys
import types
import unittest
import warnings

import torch

from conftest import load_generated


def _import_common_optimizers():
    try:
        import expecttest  # noqa: F401
    except ImportError:
        stub = types.ModuleType("expecttest")
        stub.TestCase = unittest.TestCase
        sys.modules["expecttest"] = stub
    with warnings.catch_warnings():          # common_utils installs warning filters of its own at import
        from torch.testing._internal import common_optimizers
    return common_optimizers


common_optimizers = _import_common_optimizers()
OptimizerErrorEnum = common_optimizers.OptimizerErrorEnum

PEERS = {"sgd": torch.optim.SGD, "rmsprop": torch.optim.RMSprop, "adam": torch.optim.Adam,
         "adamw": torch.optim.AdamW, "adagrad": torch.optim.Adagrad, "adamax": torch.optim.Adamax,
         "nadam": torch.optim.NAdam, "adadelta": torch.optim.Adadelta}
PEER_NAMES = tuple(PEERS)
NO_PEER = ("ivon", "ogn", "vogn", "bayesbinn", "ste")
ALL_NAMES = PEER_NAMES + NO_PEER
INFO = {name: next(o for o in common_optimizers.optim_db if o.optim_cls is cls) for name, cls in PEERS.items()}
FUSED_PEERS = tuple(n for n in PEER_NAMES if "cpu" in INFO[n].supports_fused_on)       # sgd adam adamw adagrad
SAMPLED = ("ivon", "vogn", "bayesbinn")          # gradients are taken inside opt.sampled_params(train=True)
NEEDS_GGN = ("ogn", "vogn")                      # read p.ggn next to p.grad

# one configuration per optimizer that switches on most of its options (float lr: valid with every flag)
RICH = {
    "sgd": dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.01),
    "rmsprop": dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.01, momentum=0.5, centered=True),
    "adam": dict(lr=0.02, betas=(0.8, 0.99), weight_decay=0.05, amsgrad=True),
    "adamw": dict(lr=0.02, betas=(0.85, 0.995), weight_decay=0.1, amsgrad=True),
    "adagrad": dict(lr=0.1, lr_decay=0.05, weight_decay=0.01, initial_accumulator_value=0.2, eps=1e-6),
    "adamax": dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05),
    "nadam": dict(lr=0.02, betas=(0.8, 0.99), weight_decay=0.05, momentum_decay=0.01),
    "adadelta": dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.01),
    "ivon": dict(lr=0.05, ess=50.0, hess_init=0.5, weight_decay=1e-3, beta2=0.999),
    "ogn": dict(ess=50.0, lr=0.05, beta=0.1),
    "vogn": dict(ess=50.0, lr=0.05, beta=0.1),
    "bayesbinn": dict(lr=0.05, train_set_size=50.0, momentum=0.5),
    "ste": dict(lr=0.05),
}
# configurations beyond optim_db's: the ones optim_db leaves out (nesterov, decoupled_weight_decay, amsgrad with
# maximize, ...) and the rich one
EXTRA_CONFIGS = {
    "sgd": [("nesterov_maximize", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01, maximize=True)),
            ("rich", RICH["sgd"])],
    "rmsprop": [("rich", RICH["rmsprop"]), ("rich_maximize", dict(RICH["rmsprop"], maximize=True))],
    "adam": [("decoupled_weight_decay", dict(lr=0.02, weight_decay=0.1, decoupled_weight_decay=True)),
             ("amsgrad_maximize", dict(lr=0.02, betas=(0.8, 0.99), amsgrad=True, maximize=True)),
             ("rich", RICH["adam"])],
    "adamw": [("amsgrad_maximize", dict(lr=0.02, amsgrad=True, maximize=True, weight_decay=0.05)),
              ("rich", RICH["adamw"])],
    "adagrad": [("rich_maximize", dict(RICH["adagrad"], maximize=True)), ("rich", RICH["adagrad"])],
    "adamax": [("rich_maximize", dict(RICH["adamax"], maximize=True)), ("rich", RICH["adamax"])],
    "nadam": [("decoupled_maximize", dict(RICH["nadam"], decoupled_weight_decay=True, maximize=True)),
              ("rich", RICH["nadam"])],
    "adadelta": [("rich_maximize", dict(RICH["adadelta"], maximize=True)), ("rich", RICH["adadelta"])],
}


def configs(name):
    """(description, kwargs) of every CPU configuration optim_db gives for the peer, then EXTRA_CONFIGS; fresh
    objects on every call (a tensor lr is mutated by schedulers)."""
    out = [(i.desc, i.kwargs) for i in INFO[name].optim_inputs_func(device="cpu")
           if not i.kwargs.get("capturable", False)]
    return out + [(d, copy.deepcopy(k)) for d, k in EXTRA_CONFIGS[name]]


def _slug(text):
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


CONFIG_CASES = [(n, i) for n in PEER_NAMES for i in range(len(configs(n)))]
CONFIG_IDS = [f"{n}-{i}-{_slug(configs(n)[i][0])}" for n, i in CONFIG_CASES]


@functools.lru_cache(maxsize=None)
def generated_module(name):
    """The generated module, loaded once per process and registered in sys.modules under its own name so that
    its optimizers pickle (by reference to their class) like torch.optim's."""
    mod = load_generated(name, "torch")
    sys.modules.setdefault(mod.__name__, mod)
    return mod


def generated_class(name, fresh=False):
    """The generated optimizer class of recipe ``name`` (fresh=True: from a new copy of the module, with its
    own torch.compile cache)."""
    mod = load_generated(name, "torch") if fresh else generated_module(name)
    return next(v for k, v in vars(mod).items() if k.lower() == name and isinstance(v, type))


# float64: 1e-12 absolute; float32: 1e-6 absolute plus torch's default relative tolerance for float32 (1.3e-6:
# a few ulps of rounding that another order of the same operations accumulates over a dozen steps)
TOL = {torch.float64: dict(rtol=0.0, atol=1e-12), torch.float32: dict(rtol=1.3e-6, atol=1e-6),
       torch.complex128: dict(rtol=0.0, atol=1e-12), torch.complex64: dict(rtol=1.3e-6, atol=1e-6)}
# state (Adagrad's sum grows past 1): the same absolute tolerance plus a tight relative one
STATE_TOL = {torch.float64: dict(rtol=1e-12, atol=1e-12), torch.float32: dict(rtol=1.3e-6, atol=1e-6),
             torch.complex128: dict(rtol=1e-12, atol=1e-12), torch.complex64: dict(rtol=1.3e-6, atol=1e-6)}


@contextlib.contextmanager
def default_dtype(dtype):
    """Run under the (real) default dtype matching ``dtype``: torch's scalar state follows the default dtype."""
    real = dtype.to_real() if dtype.is_complex else dtype
    old = torch.get_default_dtype()
    torch.set_default_dtype(real)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


SHAPES = ((5, 4), (4,), ())


class Problem:
    """A small random smooth problem: per step k, loss = sum_i sum(a_i (p_i - t_ik)^2 / 2 + 0.1 cos(3 p_i)),
    with fresh targets t_ik at every step (a mini-batch stand-in)."""

    def __init__(self, dtype=torch.float64, shapes=SHAPES, seed=0, n_targets=7):
        g = torch.Generator().manual_seed(seed)
        self.dtype, self.shapes = dtype, shapes
        self.init = [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]
        self.scale = [(0.5 + torch.rand(s, generator=g, dtype=torch.float64)).to(dtype) for s in shapes]
        self.targets = [[torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]
                        for _ in range(n_targets)]

    def params(self):
        return [torch.nn.Parameter(t.clone()) for t in self.init]

    def loss(self, params, k, mask=None):
        """The loss at step k over the parameters with mask(k, i) true (None if there is none)."""
        total = None
        for i, p in enumerate(params):
            if mask is not None and not mask(k, i):
                continue
            t = self.targets[k % len(self.targets)][i]
            term = (0.5 * self.scale[i] * (p - t) ** 2 + 0.1 * torch.cos(3 * p)).sum()
            total = term if total is None else total + term
        return total


def set_ggn(name, params):
    """OGN/VOGN read p.ggn next to p.grad: the squared gradient where there is a gradient, nothing elsewhere."""
    if name not in NEEDS_GGN:
        return
    for p in params:
        if p.grad is not None:
            p.ggn = p.grad.detach() ** 2
        elif hasattr(p, "ggn"):
            del p.ggn


def step_once(name, opt, params, loss_fn, closure=False):
    """One optimizer step of any generated (or torch) optimizer: loss_fn() gives the loss of the current
    parameters or None (no gradient at all); the sampling optimizers take it inside sampled_params.  Returns
    what step() returned with a closure, else the loss."""
    def fwd_bwd():
        opt.zero_grad()
        loss = loss_fn()
        if loss is not None:
            loss.backward()
        set_ggn(name, params)
        return loss

    if name in SAMPLED:
        if closure:
            def sampled_closure():
                with opt.sampled_params(train=True):
                    return fwd_bwd()
            return opt.step(sampled_closure)
        with opt.sampled_params(train=True):
            loss = fwd_bwd()
        opt.step()
        return loss
    if closure:
        return opt.step(fwd_bwd)
    loss = fwd_bwd()
    opt.step()
    return loss


def train(name, opt, params, problem, steps, start=0, mask=None, closure=False, schedulers=(), seed=None):
    """``steps`` steps of ``problem`` from step ``start``; the sampling optimizers' draws are seeded per step
    (seed + k) so that two runs see the same noise."""
    losses = []
    for k in range(start, start + steps):
        if seed is not None:
            torch.manual_seed(seed + k)
        loss = step_once(name, opt, params, lambda: problem.loss(params, k, mask), closure=closure)
        losses.append(loss)
        for s in schedulers:
            if isinstance(s, torch.optim.lr_scheduler.ReduceLROnPlateau):
                s.step(float(loss.detach()) if torch.is_tensor(loss) else 0.0)
            else:
                s.step()
    return losses


def assert_params_close(ours, theirs, what="parameter"):
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a.dtype == b.dtype, f"{what} {i}: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{what} {i}: shape {tuple(a.shape)} != {tuple(b.shape)}"
        torch.testing.assert_close(a.detach(), b.detach(), **TOL[b.dtype],
                                   msg=lambda m, i=i: f"{what} {i} differs from the peer's:\n{m}")


def assert_state_matches(opt, params, ref, ref_params):
    """Per parameter: the same state keys as torch, each value equal to torch's (shape and dtype included)."""
    for i, (p, q) in enumerate(zip(params, ref_params, strict=True)):
        ours, theirs = opt.state.get(p, {}), ref.state.get(q, {})
        assert sorted(ours) == sorted(theirs), f"param {i}: state keys {sorted(ours)}, torch has {sorted(theirs)}"
        for key, want in theirs.items():
            got = ours[key]
            if torch.is_tensor(want):
                assert torch.is_tensor(got), f"param {i}: state {key!r} is {type(got).__name__}, torch keeps a tensor"
                if want.is_sparse:      # torch's SGD keeps a sparse momentum buffer for sparse gradients; the
                    want = want.to_dense()      # generated optimizers keep state dense: the same numbers
                # the step counter's dtype is torch's own business (float32 when fused, else the default
                # dtype; load_state_dict converts it): its value and shape are compared, the rest exactly
                torch.testing.assert_close(got, want, **STATE_TOL[q.dtype], check_dtype=key != "step",
                                           msg=lambda m, i=i, key=key: f"param {i} state {key!r}:\n{m}")
            else:
                assert got == want, (i, key, got, want)


def assert_moved(params, init, threshold=1e-4):
    moved = max(((p.detach() - t).abs().max().item() for p, t in zip(params, init) if p.numel()), default=0.0)
    assert moved > threshold, f"the parameters moved by only {moved}: the comparison would prove nothing"


def clone_params(params):
    return [torch.nn.Parameter(p.detach().clone()) for p in params]


def make(name, params, **kwargs):
    """The generated optimizer ``name`` over ``params`` with RICH[name] updated by kwargs."""
    return generated_class(name)(params, **{**RICH[name], **kwargs})


def peer_signature(name):
    return inspect.signature(PEERS[name].__init__).parameters


def assert_nested_equal(a, b, path="state_dict"):
    """Exact equality of nested dicts/lists/tuples of tensors and plain values (tensors: same dtype, shape and
    values, NaN equal to NaN)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(map(str, a)) == sorted(map(str, b)), (path, list(a), list(b))
        for key in a:
            assert_nested_equal(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            assert_nested_equal(x, y, f"{path}[{i}]")
    elif torch.is_tensor(a):
        assert torch.is_tensor(b), (path, a, b)
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{path}: {m}")
    else:
        assert a == b or (a != a and b != b), (path, a, b)
