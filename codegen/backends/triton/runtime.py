"""The triton target's runtime source: what every generated Triton optimizer contains besides its derived kernels
(the block size and dtypes, the rounding to the parameter dtype, the kernels' libdevice-free helpers, the group
layout with its fp32 buffers, chunk and pointer tables, per-parameter step buckets, oracle reads), written once as
ordinary Python and copied into each generated module by its templates (codegen/source.py).  Tested directly
(tests/unit/codegen/test_runtime_sources.py); never imported by the engine, which reads it as text.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024        # elements per program (a power of two)
_TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


@triton.jit
def _log1p(x):
    """log(1 + x) without libdevice (Goldberg): log(u)*x/(u - 1) with u = 1 + x is accurate for small x."""
    u = 1.0 + x
    return tl.where(u == 1.0, x, tl.log(u) * tl.div_rn(x, tl.where(u == 1.0, 1.0, u - 1.0)))


@triton.jit
def _expm1(x):
    """e^x - 1 without libdevice (Kahan): (u - 1)*x/log(u) with u = e^x is accurate where u - 1 cancels (u = 1:
    x itself; u - 1 = -1 or u = inf: u - 1, exact there)."""
    u = tl.exp(x)
    d = u - 1.0
    ok = (u != 1.0) & (d != -1.0) & (u != float("inf"))
    return tl.where(u == 1.0, x, tl.where(ok, d * tl.div_rn(x, tl.log(tl.where(ok, u, 2.0))), d))


@triton.jit
def _tanh(x):
    """tanh without libdevice: sign(x)(1 - e)/(1 + e), e = exp(-2|x|); below |x| = 0.05, where 1 - e cancels,
    the odd series x(1 - x²/3 + 2x⁴/15) (truncation < 1e-9 relative): relative error ~1e-6 everywhere."""
    a = tl.abs(x)
    e = tl.exp(-2.0 * a)
    r = tl.div_rn(1.0 - e, 1.0 + e)
    x2 = x * x
    return tl.where(a < 0.05, x * (1.0 + x2 * (-0.3333333333333333 + x2 * 0.13333333333333333)),
                    tl.where(x < 0, -r, r))


@triton.jit
def _sech(x):
    """sech without libdevice: 2e/(1 + e*e), e = exp(-|x|) (no overflow)."""
    e = tl.exp(-tl.abs(x))
    return tl.div_rn(2.0 * e, 1.0 + e * e)


@triton.jit
def _to_param(x, PDT: tl.constexpr):
    """fp32 -> the parameter dtype, rounding to nearest even (bf16 by integer arithmetic, so the
    interpreter rounds exactly as the GPU does)."""
    if PDT == tl.bfloat16:
        u = x.to(tl.uint32, bitcast=True)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).to(tl.uint16)
        r = tl.where(x != x, 0x7FC0, r).to(tl.uint16)
        return r.to(tl.bfloat16, bitcast=True)
    else:
        return x.to(PDT)


def _oracle(p, read, name):
    """Oracle values other than the gradient are read from an attribute of each parameter (p.<name>),
    set by the caller next to p.grad (e.g. per-example squared gradients from torch.func or BackPACK): a tensor
    of the parameter's shape on its device (the kernels read it through a pointer, as many elements as the
    parameter has: another shape or device is refused before any launch)."""
    try:
        value = read(p)
    except AttributeError:
        raise RuntimeError(f"this optimizer needs p.{name} on every parameter (see the class docstring)") from None
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"p.{name} must be a tensor, got {type(value).__name__}")
    if value.shape != p.shape:
        raise ValueError(f"p.{name} has shape {tuple(value.shape)}, the parameter {tuple(p.shape)}")
    if value.device != p.device:
        raise ValueError(f"p.{name} is on {value.device}, the parameter on {p.device}")
    return value


def _step_buckets(state, params, idx):
    """(t, indices): the parameters of ``idx`` grouped by their own next step count (a parameter that
    skipped steps keeps its own count, as torch.optim's), in increasing order of t."""
    buckets = {}
    for _i in idx:
        buckets.setdefault(int(state[params[_i]]["step"].item()) + 1, []).append(_i)
    return sorted(buckets.items())


class _Layout:
    """One parameter group laid out for the kernels: element offsets, fp32 state buffers, chunk tables."""

    def __init__(self, params):
        self.params = params
        self.key = tuple((id(p), p.numel()) for p in params)
        self.device = params[0].device
        for p in params:
            if p.device != self.device:
                raise RuntimeError("the triton target needs every parameter of a group on one device")
            if p.dtype not in _TL_DTYPES:
                raise RuntimeError(f"the triton target updates float32, bfloat16 or float16 parameters, not {p.dtype}")
            if not p.is_contiguous():
                raise RuntimeError("the triton target needs contiguous parameters")
        self.sizes = [p.numel() for p in params]
        self.offsets = []
        total = 0
        for n in self.sizes:        # each parameter starts 16-element aligned in the flat buffers
            self.offsets.append(total)
            total += -(-n // 16) * 16
        if total >= 2 ** 31:
            raise RuntimeError("the triton target indexes a group with int32 offsets: split groups above 2**31 elements")
        self.total = total
        self.buffers = {}
        self.views = {}
        self._chunks = {}
        self._ptrs = {}

    def buffer(self, name):
        if name not in self.buffers:
            self.buffers[name] = torch.zeros(self.total, dtype=torch.float32, device=self.device)
        return self.buffers[name]

    def buckets(self, idx):
        """The parameters ``idx`` split by dtype: one kernel launch each."""
        out = {}
        for i in idx:
            out.setdefault(self.params[i].dtype, []).append(i)
        return list(out.items())

    def chunks(self, idx):
        """int64 rows (table row, start in the tensor, length, offset in the group) of BLOCK-sized blocks."""
        key = (tuple(idx), BLOCK)
        if key not in self._chunks:
            rows = []
            for row, i in enumerate(idx):
                n, o = self.sizes[i], self.offsets[i]
                rows += [(row, s, min(BLOCK, n - s), o + s) for s in range(0, n, BLOCK)]
            self._chunks[key] = torch.tensor(rows, dtype=torch.int64, device=self.device).reshape(-1, 4)
        return self._chunks[key]

    def pointers(self, tensors):
        """The pointer table: one row per parameter (the parameter, its oracle arrays, then 1 when all of
        them are 16-byte aligned: the kernels then use vector accesses for whole blocks)."""
        key = [[0 if x is None else x.data_ptr() for x in row] for row in tensors]
        key = tuple(tuple(row + [int(all(a % 16 == 0 for a in row))]) for row in key)
        if key not in self._ptrs:
            self._ptrs.clear()
            self._ptrs[key] = torch.tensor(key, dtype=torch.int64, device=self.device)
        return self._ptrs[key]
