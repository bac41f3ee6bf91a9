"""Resuming a float16/bfloat16 run (issue 39, item 1).

The generated torch optimizers keep the state of a float16/bfloat16 parameter in float32 and run the update in
float32 (the runtime's ``_work``).  torch's ``Optimizer.load_state_dict`` casts every floating state to the
parameter's dtype (``_process_value_according_to_param_policy``): the resumed Adam failed in ``_foreach_lerp_``
(bfloat16 state against float32 arithmetic) and SGD went on with a momentum buffer rounded to bfloat16.  Here
every catalog torch optimizer (the artifacts in catalog/generated/torch, never a list written here) runs k steps,
is saved through ``torch.save``, loaded into a fresh optimizer over fresh parameters, runs k more, and must equal
an uninterrupted run bit for bit (parameters and state, dtypes included); and a torch.optim.Adam checkpoint of a
bfloat16 model is loaded into the generated Adam, which continues as a float32-state Adam does.
"""
import io
import re

import pytest
import torch
import yaml

from conftest import CATALOG, GENERATED, load_generated

RECIPES = sorted(p.stem for p in (GENERATED / "torch").glob("*.py") if p.stem != "__init__")
DTYPES = (torch.bfloat16, torch.float16)
SHAPES = ((5, 4), (4,), ())
K = 3


def _optimizer_class(mod):
    return next(v for v in vars(mod).values()
                if isinstance(v, type) and issubclass(v, torch.optim.Optimizer) and v.__module__ == mod.__name__)


def _required(recipe):
    """Values for the recipe's required hyperparameters (read from its recipe file): a small learning rate, a
    data-set size, a population of a few samples."""
    spec = yaml.safe_load((CATALOG / f"{recipe}.yaml").read_text(encoding="utf-8"))
    out = {}
    for h, d in (spec.get("hyperparameters") or {}).items():
        if isinstance(d, dict) and d.get("required"):
            out[h] = 4 if d.get("type") == "int" else 0.05 if h.startswith("lr") else 50.0
    return out


class Run:
    """One catalog optimizer on a small smooth problem in a low-precision dtype: per step k the loss (computed
    in float32) is sum(a (p - t_k)^2 / 2 + 0.1 cos(3 p)); the sampling optimizers draw their noise from torch's
    global generator, seeded per step, and take their samples inside ``sampled_params(train=True)`` (as many as
    the group's population or Monte Carlo count asks; a chained sample's points one block each); attribute oracles (p.<name>) are the squared gradient."""

    def __init__(self, recipe, dtype):
        self.recipe, self.dtype = recipe, dtype
        self.mod = load_generated(recipe, "torch")
        self.cls = _optimizer_class(self.mod)
        self.kwargs = _required(recipe)
        text = (GENERATED / "torch" / f"{recipe}.py").read_text(encoding="utf-8")
        self.oracles = sorted(set(re.findall(r"_oracle\(params, lambda p: p\.(\w+)", text)))
        # an optimizer with per-parameter matrix state (REQUIRED_STATE: set by init_state) takes matrices and
        # vectors (one column), not 0-d parameters
        self.required = getattr(self.mod, "REQUIRED_STATE", ())
        shapes = [s for s in SHAPES if len(s) in (1, 2)] if self.required else SHAPES
        g = torch.Generator().manual_seed(0)
        self.init = [(0.5 * torch.randn(s, generator=g)).to(dtype) for s in shapes]
        self.scale = [0.5 + torch.rand(s, generator=g) for s in shapes]
        self.targets = [[torch.randn(s, generator=g) for s in shapes] for _ in range(2 * K)]

    def params(self, values=None):
        return [torch.nn.Parameter(v.detach().clone()) for v in (values or self.init)]

    def optimizer(self, params):
        opt = self.cls(params, **self.kwargs)
        for p in params if self.required else ():      # identity matrices of the declared shapes
            dims = dict(zip(self.mod.SHAPES[self.mod.MEAN], tuple(p.shape) + (1,) * (2 - p.ndim)))
            opt.init_state(p, **{n: torch.eye(dims[self.mod.SHAPES[n][0]]) for n in self.required})
        return opt

    def _loss(self, params, k):
        return sum((0.5 * a * (p.float() - t) ** 2 + 0.1 * torch.cos(3 * p.float())).sum()
                   for p, a, t in zip(params, self.scale, self.targets[k]))

    def _grads(self, opt, params, k):
        opt.zero_grad()
        loss = self._loss(params, k)
        loss.backward()
        for p in params:
            for name in self.oracles:
                setattr(p, name, p.grad.detach() ** 2)
        return loss

    def steps(self, opt, params, start, n):
        for k in range(start, start + n):
            torch.manual_seed(1000 + k)
            if hasattr(opt, "sampled_params"):
                group = opt.param_groups[0]
                for _ in range(int(group.get("popsize", group.get("mc_samples", 1)))):
                    while True:             # a chained sample (SAM-like) has several points, one block each
                        with opt.sampled_params(train=True) as tell:
                            loss = self._grads(opt, params, k)
                            if tell is not None:
                                tell(loss.detach())
                        if not getattr(opt, "_phase", 0):
                            break
            else:
                self._grads(opt, params, k)
            opt.step()


def _checkpoint(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def _assert_same(a, b, what):
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
    assert torch.equal(a, b) or (torch.isnan(a) == torch.isnan(b)).all() and torch.equal(
        a.nan_to_num(0.0), b.nan_to_num(0.0)), f"{what} differs"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("recipe", RECIPES)
def test_resume_is_bitwise_the_uninterrupted_run(recipe, dtype):
    run = Run(recipe, dtype)
    p_ref = run.params()
    ref = run.optimizer(p_ref)
    run.steps(ref, p_ref, 0, 2 * K)

    p_a = run.params()
    first = run.optimizer(p_a)
    run.steps(first, p_a, 0, K)
    saved = _checkpoint({"params": [p.detach() for p in p_a], "opt": first.state_dict()})
    p_b = run.params(saved["params"])
    resumed = run.optimizer(p_b)
    resumed.load_state_dict(saved["opt"])
    for p, q in zip(p_a, p_b):           # the policy holds right after the load: the state as it was saved
        for key, value in first.state[p].items():
            if torch.is_tensor(value) and key != "step":
                _assert_same(resumed.state[q][key], value, f"loaded state {key!r}")
    run.steps(resumed, p_b, K, K)

    assert any(not torch.equal(p.detach(), i) for p, i in zip(p_ref, run.init)), "the run did not move"
    for i, (p, q) in enumerate(zip(p_ref, p_b)):
        _assert_same(q.detach(), p.detach(), f"parameter {i}")
        keys = sorted(k for k, v in ref.state[p].items() if torch.is_tensor(v))
        assert keys == sorted(k for k, v in resumed.state[q].items() if torch.is_tensor(v)), i
        for key in keys:
            want = ref.state[p][key]
            if key != "step" and want.is_floating_point() and want.shape == p.shape:
                assert want.dtype == torch.float32, f"{key!r} of a {dtype} parameter is {want.dtype}"
            _assert_same(resumed.state[q][key], want, f"parameter {i} state {key!r}")


def test_a_torch_adam_checkpoint_of_a_bfloat16_model_continues():
    """torch.optim.Adam keeps a bfloat16 model's state in bfloat16; the generated Adam loads it widened to
    float32 (exactly) and continues as torch.optim.Adam does on a float32 copy of the parameters and of that
    state, rounded to bfloat16 after every step."""
    run = Run("adam", torch.bfloat16)
    kw = dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.01)
    p_torch = run.params()
    peer = torch.optim.Adam(p_torch, **kw)
    run.steps(peer, p_torch, 0, K)
    saved = _checkpoint(peer.state_dict())
    assert saved["state"][0]["exp_avg"].dtype == torch.bfloat16

    p_ours = run.params(p_torch)
    ours = run.cls(p_ours, **kw)
    ours.load_state_dict(saved)
    for i, p in enumerate(p_ours):
        for key in ("exp_avg", "exp_avg_sq"):
            got, want = ours.state[p][key], saved["state"][i][key]
            assert got.dtype == torch.float32 and torch.equal(got, want.float()), (i, key)

    # the reference: torch.optim.Adam on float32 copies (state widened the same way), rounded back every step
    p32 = [torch.nn.Parameter(p.detach().float()) for p in p_torch]
    ref = torch.optim.Adam(p32, **kw, foreach=False)
    state = _checkpoint(peer.state_dict())
    for st in state["state"].values():
        for key in ("exp_avg", "exp_avg_sq"):
            st[key] = st[key].float()
    ref.load_state_dict(state)
    run.steps(ours, p_ours, K, K)
    for k in range(K, 2 * K):
        ref.zero_grad()
        low = [p.detach().to(torch.bfloat16).requires_grad_() for p in p32]
        run._loss(low, k).backward()
        for p, q in zip(p32, low):
            p.grad = q.grad.float()
        ref.step()
        with torch.no_grad():
            for p in p32:
                p.copy_(p.to(torch.bfloat16).float())
    for i, (p, q) in enumerate(zip(p_ours, p32)):
        assert p.dtype == torch.bfloat16
        ulp = torch.finfo(torch.bfloat16).eps * q.detach().abs().clamp_min(1e-3)
        assert ((p.detach().float() - q.detach()).abs() <= ulp).all(), i
        assert not torch.equal(p.detach(), run.init[i]) or run.init[i].numel() == 0
