"""The standard problem set on which :func:`blr_derive.testing.equivalent` runs two optimizers side by side.

Each problem is a loss of a few parameter tensors (made from a seeded generator, so both optimizers start from the
same values) and the situations a real optimizer must get right: mini-batches, parameters that skip steps,
all-zero gradients, several parameter groups, a learning-rate scheduler and a checkpoint reloaded half-way
(the behaviours of PyTorch's ``test/test_optim.py`` that an equivalence test can exercise)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Problem:
    name: str
    shapes: tuple                       # parameter shapes
    kind: str = "quadratic"             # the loss: quadratic | nonconvex | mlp
    skip: tuple = ()                    # (parameter index, steps % 3 on which it gets no gradient)
    zero_steps: tuple = ()              # steps with all-zero gradients
    groups: bool = False                # two parameter groups, the second with half the learning rate
    scheduler: bool = False             # StepLR(step_size=3, gamma=0.5) after every step
    reload_at: int | None = None        # state_dict saved and loaded into a fresh optimizer before this step
    steps: int = 8

    def make_params(self, dtype, seed: int = 0) -> list:
        g = torch.Generator().manual_seed(seed)
        return [(torch.randn(s, generator=g, dtype=torch.float64) * 0.5).to(dtype).requires_grad_(True)
                for s in self.shapes]

    def data(self, dtype, seed: int = 0) -> dict:
        """The problem's constants (curvatures, targets, the MLP's data), the same for both optimizers."""
        g = torch.Generator().manual_seed(seed + 1)
        out = {"a": [torch.rand(s, generator=g, dtype=torch.float64).add_(0.5).to(dtype) for s in self.shapes],
               "c": [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in self.shapes]}
        if self.kind == "mlp":
            out["X"] = torch.randn(64, self.shapes[0][0], generator=g, dtype=torch.float64).to(dtype)
            out["y"] = torch.sin(out["X"].sum(1, keepdim=True)).to(dtype)
            out["batches"] = [torch.randperm(64, generator=g)[:16] for _ in range(self.steps)]
        return out

    def loss(self, params, data, step: int):
        if self.kind == "mlp":
            W1, b1, W2, b2 = params
            idx = data["batches"][step % len(data["batches"])]
            h = torch.tanh(data["X"][idx] @ W1 + b1)
            return ((h @ W2 + b2 - data["y"][idx]) ** 2).mean()
        total = 0
        for p, a, c in zip(params, data["a"], data["c"]):
            d = p - c
            total = total + (a * d * d).sum() / 2
            if self.kind == "nonconvex":
                total = total + (torch.sin(3 * p) + 0.1 * d ** 4).sum()
        return total

    def gradients(self, params, data, step: int):
        """The gradients at ``params`` for ``step``: autograd of :meth:`loss`, then the problem's situation
        (no gradient for a skipped parameter, zeros on a zero step)."""
        for p in params:
            p.grad = None
        self.loss(params, data, step).backward()
        for i, every in self.skip:
            if step % 3 == every:
                params[i].grad = None
        if step in self.zero_steps:
            for p in params:
                if p.grad is not None:
                    p.grad.zero_()


PROBLEMS = (
    Problem("quadratic", ((5,), (3, 4))),
    Problem("nonconvex", ((6,), (2, 3)), kind="nonconvex"),
    Problem("mlp minibatches", ((4, 8), (8,), (8, 1), (1,)), kind="mlp"),
    Problem("intermittent gradients", ((5,), (3,)), skip=((1, 1),)),
    Problem("all-zero gradients", ((4,), (2, 2)), zero_steps=(2, 5)),
    Problem("two param groups", ((4,), (3,)), groups=True),
    Problem("scheduler", ((4,), (3,)), scheduler=True),
    Problem("state_dict reload", ((4,), (2, 3)), kind="nonconvex", reload_at=4),
)

#: (rtol, atol) per dtype: what two correct implementations of one update agree to after a few steps
TOLERANCES = {"float64": (1e-9, 1e-12), "float32": (2e-5, 1e-6)}
#: (rtol, scale) of one step's increment: |Δyours − Δderived| ≤ rtol |Δderived| + scale (|before| + |before'|)
INCREMENT_TOLERANCES = {"float64": (1e-7, 1e-14), "float32": (1e-3, 3e-7)}


def agree(yours, derived, dtype: str, pre_yours=None, pre_derived=None) -> bool:
    """Whether two values (float64 numpy arrays) agree within the dtype's tolerance, and, given the values before
    the step, whether the step's increments do (an increment is ~lr times smaller than a value: comparing it
    finds a wrong eps placement or a missing bias correction at the step where it happens, not steps later)."""
    a, b = np.asarray(yours, dtype=np.float64), np.asarray(derived, dtype=np.float64)
    if a.size != b.size:
        return False
    a = a.reshape(b.shape)
    rtol, atol = TOLERANCES[dtype]
    if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        return False
    if pre_yours is None:
        return True
    pa = np.asarray(pre_yours, dtype=np.float64).reshape(b.shape)
    pb = np.asarray(pre_derived, dtype=np.float64).reshape(b.shape)
    irtol, scale = INCREMENT_TOLERANCES[dtype]
    da, db = a - pa, b - pb
    with np.errstate(invalid="ignore"):
        ok = np.abs(da - db) <= irtol * np.abs(db) + scale * (np.abs(pa) + np.abs(pb)) + 1e-300
    return bool(np.all(ok | (np.isnan(da) & np.isnan(db))))


def draw_seed(seed: int, step: int) -> int:
    """The seed of a step's random draws, the same for both optimizers (and for the localizing re-run)."""
    return seed * 100_003 + step


def completed(recipe: str, defaults: dict, values: dict) -> dict:
    """The hyperparameters of every run: ``values`` over the generated defaults; one without either (a default
    of None) is a ValueError saying how to give it."""
    out = {**defaults, **values}
    missing = [k for k, v in out.items() if v is None]
    if missing:
        raise ValueError(f"equivalent(): recipe '{recipe}' has hyperparameters without a default: "
                         f"{', '.join(missing)}; give them (values={{...}}, or --value NAME=NUMBER on the "
                         "command line)")
    return out


def describe(yours, derived) -> tuple[str, str]:
    """Both values for the report: numbers, or for arrays the entry where they differ most (with its index)."""
    if isinstance(yours, (torch.Tensor, np.ndarray)) or isinstance(derived, (torch.Tensor, np.ndarray)):
        a, b = (x.detach().cpu().to(torch.float64).numpy() if isinstance(x, torch.Tensor)
                else np.array(x, dtype=np.float64) for x in (yours, derived))
        if a.size != b.size:
            return f"shape {a.shape}", f"shape {b.shape}"
        a, b = a.reshape(-1), b.reshape(-1)
        if a.size == 1:
            return f"{float(a[0]):.17g}", f"{float(b[0]):.17g}"
        j = int(np.argmax(np.nan_to_num(np.abs(a - b), nan=np.inf)))
        return f"{float(a[j]):.17g} (entry {j})", f"{float(b[j]):.17g}"
    return repr(yours), repr(derived)


def settings_for(defaults: dict) -> list:
    """The hyperparameter settings to run: the defaults; every default that switches a term off (0) switched on
    and every tiny constant (eps) made visible; then each boolean default False turned on, one at a time; then
    every other float default halved (a setting both optimizers refuse is retried with one change undone at a
    time: compare.py)."""
    active = dict(defaults)
    for k, v in defaults.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if v == 0:
            active[k] = 0.1
        elif 0 < v < 1e-6:
            active[k] = 1e-3
    out = [dict(defaults), active]
    for k, v in defaults.items():
        if v is False:
            out.append({**active, k: True})
    # the other non-zero constants moved (β's, ρ, lr): an optimizer that hard-codes one of them differs here
    moved = {k: _moved(v) for k, v in defaults.items()}
    if moved != defaults:
        out.append(moved)
    return [s for i, s in enumerate(out) if s not in out[:i]]


def brief(setting, defaults) -> str:
    """A setting as the values that differ from the defaults."""
    changed = {k: v for k, v in setting.items() if defaults.get(k) != v}
    return "setting " + (", ".join(f"{k}={v!r}" for k, v in changed.items()) or "(defaults)")


def _moved(v):
    """A non-zero float default halved (each element of a tuple of them); flags, integers, zeros and tiny
    constants (eps: see ``active``) as they are."""
    if isinstance(v, tuple):
        return tuple(_moved(x) for x in v)
    if isinstance(v, float) and not isinstance(v, bool) and abs(v) >= 1e-6:
        return v / 2
    return v
