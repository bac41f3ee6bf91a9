"""The torch target's runtime source: what every generated torch optimizer contains besides its derived update
(dtype policy, complex and DTensor handling, multi-tensor dispatch, step buckets, the fused path's compiled kernel),
written once as ordinary Python and copied into each generated module by its templates (codegen/source.py): the
text of a definition here is its text in every generated module.  Linted, type-checked and tested directly
(tests/unit/codegen/test_runtime_sources.py); never imported by the engine, which reads it as text.
"""
from __future__ import annotations

import math
import warnings

import torch

_LOW = (torch.float16, torch.bfloat16)


def _work(tensors):
    """Tensors for the arithmetic: float16/bfloat16 ones as float32 copies (their state is float32 too), the
    others as they are."""
    return [t.float() if t.dtype in _LOW else t for t in tensors]


def _real(tensors, complex_=True):
    """Complex tensors as real views (torch.optim's convention: real and imaginary parts are updated as two
    independent real numbers); the list itself where ``complex_`` is false (_complex found none)."""
    if not complex_:
        return tensors
    return [torch.view_as_real(t) if t is not None and t.is_complex() else t for t in tensors]


def _complex(*lists):
    """Whether any tensor of these lists (a group's parameters and the oracles other than their gradients) is
    complex.  A real parameter's state is real (created in its dtype or float32, and torch's load_state_dict
    casts a checkpoint's floating state to the parameter's dtype), and a gradient has its parameter's dtype
    (autograd accumulates it so, and assigning ``p.grad`` of another dtype raises), so one test of the
    parameters stands for the state and gradient lists too: ~1.5 us a list of 16 where the per-tensor test ran
    over every list of the step."""
    return any(t is not None and t.is_complex() for ts in lists for t in ts)



def _shard_like(x, p):
    """The noise x (the full tensor, the same on every rank: each rank seeds the same stream) as p holds it: for a
    DTensor parameter (FSDP2's fully_shard) the local shard of x on p's mesh and placements, cut on every rank
    from its own copy without communication, so that a sharded run draws what an unsharded one draws."""
    if hasattr(p, "device_mesh") and hasattr(p, "placements"):      # a DTensor: torch.distributed.tensor is loaded
        return torch.distributed.tensor.distribute_tensor(x, p.device_mesh, p.placements, src_data_rank=None)
    return x


def _start(value, p):
    """A state's initial value for parameter p: both parts of a complex parameter start at it (they are two
    independent real numbers, see _real)."""
    return complex(value, value) if torch.is_complex(p) else value


def _scalar(value):
    """A hyperparameter given as a one-element tensor, as a number."""
    return value.item() if isinstance(value, torch.Tensor) else value


def _foreach_copy(dst, src):
    """torch._foreach_copy_, tensor by tensor where the tensors are DTensors (FSDP2's shards): the multi-tensor
    copy has no sharding rule for them."""
    if any(hasattr(t, "device_mesh") for t in dst):
        for d, v in zip(dst, src):
            d.copy_(v)
    else:
        torch._foreach_copy_(dst, src)


def _foreach_bound_(name, tensors, other):
    """torch._foreach_maximum_/_foreach_minimum_ (name 'maximum' or 'minimum') with a number or a tensor list;
    tensor by tensor where the tensors are DTensors (FSDP2's shards), which have no sharding rule for them."""
    if not any(hasattr(t, "device_mesh") for t in tensors):
        if name == "maximum":
            torch._foreach_maximum_(tensors, other)
        else:
            torch._foreach_minimum_(tensors, other)
        return
    pick = torch.maximum if name == "maximum" else torch.minimum
    for i, t in enumerate(tensors):
        o = other[i] if isinstance(other, (list, tuple)) else torch.full_like(t, other)
        t.copy_(pick(t, o))


def _foreach_bound(name, tensors, other):
    """torch._foreach_maximum/_foreach_minimum into new tensors; tensor by tensor for DTensors (see
    _foreach_bound_)."""
    if not any(hasattr(t, "device_mesh") for t in tensors):
        if name == "maximum":
            return torch._foreach_maximum(tensors, other)
        return torch._foreach_minimum(tensors, other)
    out = [t.clone() for t in tensors]
    _foreach_bound_(name, out, other)
    return out


def _copy_back(params, values):
    """Write the new values into the parameters (only where the arithmetic ran on a copy)."""
    pairs = [(p, v) for p, v in zip(params, values) if p is not v]
    if pairs:
        _foreach_copy([p for p, _ in pairs], [v for _, v in pairs])


def _buckets(states, foreach, fresh=None, scalars=()):
    """The tensors updated together: those with the same step count (torch counts steps per parameter) and the
    same values of the states that are one number per tensor (``scalars``), or one at a time with
    foreach=False.  Returns [(step, indices or None for all)].  ``fresh`` (an update that reads only whether
    this is the first step, and keeps no count): step 1 where the state was just created."""
    if fresh is None and not scalars and torch.compiler.is_compiling():
        return _one_bucket(states)
    if fresh is not None:
        steps = [1 if f else 2 for f in fresh]
    else:
        steps = [int(_scalar(st.get("step", 1))) for st in states]      # no count kept: the update does not read it
    keys = [(t, *(_host_value(st[k]) for k in scalars)) for t, st in zip(steps, states)]
    if foreach is False:
        return [(k[0], [i]) for i, k in enumerate(keys)]
    if all(k == keys[0] for k in keys):
        return [(keys[0][0], None)]
    out = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return [(k[0], i) for k, i in out.items()]


def _buckets_plain(states, foreach, fresh=None, scalars=()):
    """The tensors updated together: those with the same step count (torch counts steps per parameter) and the
    same values of the states that are one number per tensor (``scalars``), or one at a time with
    foreach=False.  Returns [(step, indices or None for all)].  ``fresh`` (an update that reads only whether
    this is the first step, and keeps no count): step 1 where the state was just created."""
    if fresh is None and not scalars and torch.compiler.is_compiling():
        return _one_bucket(states)
    if fresh is not None:
        steps = [1 if f else 2 for f in fresh]
    else:
        steps = [int(_scalar(st.get("step", 1))) for st in states]      # no count kept: the update does not read it
    keys = [(t,) for t in steps]                                      # no per-tensor numbers in this optimizer
    if foreach is False:
        return [(k[0], [i]) for i, k in enumerate(keys)]
    if all(k == keys[0] for k in keys):
        return [(keys[0][0], None)]
    out = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return [(k[0], i) for k, i in out.items()]


def _one_bucket(states):
    """The compiled path's buckets (under torch.compile, where a step count read from its tensor is a traced
    number and comparing counts would break the graph): every tensor in one bucket at the first one's count,
    with a check at run time that the counts agree (a group whose parameters missed different steps fails
    there instead of being updated at one count)."""
    t = _scalar(states[0].get("step", 1))
    for st in states[1:]:
        torch._check(_scalar(st.get("step", 1)) == t)
    return [(t, None)]


def _positive(x):
    """x > 0 for a host number; on the compiled path, where x may be a traced number (a step count's
    function), required (checked at run time: a failure raises) and taken as true instead of branched on."""
    if torch.compiler.is_compiling():
        torch._check(x > 0)
        return True
    return x > 0


def _SCALAR_DTYPE():
    """The dtype of per-tensor numbers kept as 0-d tensors (torch.optim's _get_scalar_dtype)."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


def _host_value(value):
    """A per-tensor number kept in the state, as a Python float (a full tensor of an older checkpoint holds it
    in every element)."""
    return float(value.reshape(-1)[0]) if torch.is_tensor(value) else float(value)


def _set_host_value(states, key, value):
    for st in states:
        old = st[key]
        if torch.is_tensor(old) and old.dim() == 0:
            old.fill_(value)
        else:
            st[key] = torch.tensor(value, dtype=_SCALAR_DTYPE())


def _count_step(states):
    """Every tensor's step count + 1 (tensors, as torch.optim keeps them).  Counts on the CPU (torch.optim's
    default) are read and written back as host numbers, one ``fill_`` each: a Python number added to a 0-d
    tensor is first wrapped in a tensor, which costs several times a fill (~4 us per parameter, as much as the
    update of a small model's tensor); the count is an integer, so the sum is the same number.  Counts on a
    device (capturable) and under torch.compile (where reading a count would break the graph): one
    multi-tensor add."""
    steps = [st["step"] for st in states]
    if not all(isinstance(x, torch.Tensor) for x in steps):
        for st in states:
            st["step"] += 1
        return
    if not torch.compiler.is_compiling() and all(x.is_cpu and x.ndim == 0 for x in steps):
        for x in steps:
            x.fill_(x.item() + 1)
        return
    if len({x.device for x in steps}) == 1:
        torch._foreach_add_(steps, 1)
    else:
        for st in states:
            st["step"] += 1


def _sub(values, index):
    return values if index is None or values is None else [values[i] for i in index]


class _FlatList(list):
    """The one-tensor list of a group's values laid out flat (every parameter's elements one after the other, in
    parameter order): what a multi-tensor program runs on when a group's parameters share a dtype and device."""


#: the most elements a group laid out flat may have: above it the per-tensor lists are as fast or faster (the
#: launch per tensor is small against the work; IVON on a CPU, one thread: flat 0.84x the per-tensor step at 1e5
#: parameters in 6 tensors, 1.2x at 3e5, 2.3x at 1e6, where every flat temporary is a fresh multi-megabyte block)
_FLAT_MAX = 1 << 17


def _flat_ok(params, foreach):
    """Whether a group's elementwise programs may run on one flat tensor per quantity: a small group
    (_FLAT_MAX) of parameters of one dtype and device, real, not DTensors (FSDP2's shards), foreach not False,
    and not while torch.compile traces (its graph keeps the per-tensor lists).  One operation per quantity
    instead of one per tensor: on small models the multi-tensor operations cost a kernel launch per tensor."""
    if foreach is False or torch.compiler.is_compiling():
        return False
    first = params[0]
    dtype = first.dtype
    if dtype.is_complex or sum(p.numel() for p in params) > _FLAT_MAX:
        return False
    if any(p.dtype != dtype or hasattr(p, "device_mesh") for p in params):
        return False
    if first.is_cpu:                    # p.device builds a device object per call (~1 us each): CPU first
        return all(p.is_cpu for p in params)
    device = first.device
    return all(p.device == device for p in params)


def _flat_cat(tensors):
    """A new flat tensor of the tensors' elements, one after the other (logical order; torch's own
    torch._utils._flatten_dense_tensors, one call into C++ instead of a Python loop over the tensors; for a single
    tensor torch returns a view of it, copied here)."""
    if len(tensors) == 1:
        return tensors[0].reshape(-1).clone()
    return torch._C._nn.flatten_dense_tensors(tensors)


def _views(flat, like):
    """The tensors of ``like``'s shapes that the flat tensor holds one after the other (contiguous views, no
    copy; torch._utils._unflatten_dense_tensors)."""
    return torch._C._nn.unflatten_dense_tensors(flat, like)


def _own_storage(p):
    """Whether parameter p is contiguous and alone on its storage (it starts it and fills it): a parameter that is
    a view of a larger buffer (e.g. FSDP's flat parameter, or any buffer something else reads through) is not."""
    return (p.is_contiguous() and p.storage_offset() == 0
            and p.untyped_storage().nbytes() == p.numel() * p.element_size())


def _swap_data(params, values):
    """Point every parameter's ``data`` at the tensor of ``values`` in its place (one of its shape, dtype and
    device: a view of a flat sample, or a sample of its own), returning the tensors the parameters held before
    (what the caller puts back with _restore_data), or None, changing nothing, where a parameter is not alone on
    a contiguous storage of its own (_own_storage: its strides would change under the model, or something else
    reads the storage it shares).  Pointing instead of copying the sample in and the mean back: two passes over
    every parameter less per sample.  The parameters' own storage is untouched (the values it holds are still
    there when it is put back) and is theirs again outside the block that holds the swap."""
    if not all(_own_storage(p) for p in params):
        return None
    held = [p.data for p in params]
    for p, v in zip(params, values):
        p.data = v if v.is_contiguous() else v.contiguous()
    return held


def _restore_data(params, held):
    """Give every parameter back the tensor it held before _swap_data."""
    for p, d in zip(params, held):
        p.data = d


class _Swapped(list):
    """The means a draw saved as the parameters' own tensors (no copy), the parameters pointing at the sample
    (_swap_data) until the exit gives them back (_restore_data)."""


def _swappable(params):
    """Whether a group laid out per tensor may point its parameters at the sample (_swap_data): real parameters
    whose arithmetic runs in their own dtype (not float16/bfloat16: the sample is float32), not DTensors (FSDP2's
    shards), each alone on a contiguous storage of its own."""
    return all(not p.is_complex() and p.dtype not in _LOW and not hasattr(p, "device_mesh") and _own_storage(p)
               for p in params)


def _flat_buffer(cache, key, params):
    """A flat tensor for a group's parameters' values (float32 for float16/bfloat16 ones, as _work computes) and
    its views of the parameters' shapes, laid out once and reused (``cache``: key -> (flat, views, params)):
    writing the parameters into it (_foreach_copy into the views) and back costs two copies, where a fresh
    flat tensor and fresh views of it (torch's flatten/unflatten) cost ~10 us per call on small models.  Laid
    out again when the group's parameters, a shape, the dtype or the device changed (a model moved or cast
    after the optimizer was built).  Only for values that live between two calls of one phase (the means a
    draw saves until the exit, the parameters during step()); what is kept longer gets a tensor of its own."""
    entry = cache.get(key)
    first = params[0]
    dtype = torch.float32 if first.dtype in _LOW else first.dtype
    if entry is not None:
        flat, views, held = entry
        if (len(held) == len(params) and flat.dtype == dtype
                and (flat.is_cpu and first.is_cpu or flat.device == first.device)
                and all(a is b and v.shape == a.shape for a, b, v in zip(params, held, views))):
            return flat, views
    flat = torch.empty(sum(p.numel() for p in params), dtype=dtype, device=first.device)
    views = _views(flat, params)
    cache[key] = (flat, views, list(params))
    return flat, views


def _flat_states(cache, index, states, params, names):
    """The states ``names`` of a group as one flat tensor each ({name: tensor}), or None where they cannot be
    (a dtype, device or shape that differs, an entry only some parameters have).  The state of every parameter
    is a view of that tensor, so the flat update is the state's update: the first call (and any after the state
    was replaced, e.g. by load_state_dict) lays the state out once (``cache``: (group index, name) -> (flat
    tensor, its views, their ids)); later calls find the same views (the cache holds them, so their ids are
    theirs) and copy nothing."""
    out = {}
    for name in names:
        tensors = [st.get(name) for st in states]
        entry = cache.get((index, name))
        if entry is not None and list(map(id, tensors)) == entry[2]:
            out[name] = entry[0]
            continue
        if all(t is None for t in tensors):
            continue
        first = tensors[0]
        if not all(torch.is_tensor(t) and t.dtype == first.dtype and t.device == first.device and not t.is_sparse
                   and t.shape == p.shape and not torch.is_complex(t) and not hasattr(t, "device_mesh")
                   for t, p in zip(tensors, params)):
            return None
        flat = _flat_cat(tensors)
        views = _views(flat, tensors)
        for st, v in zip(states, views):
            st[name] = v
        cache[(index, name)] = (flat, views, list(map(id, views)))
        out[name] = flat
    return out


def _flat_counts(cache, index, states):
    """The step counts of a group as one flat tensor whose elements every parameter's ``state["step"]`` is a 0-d
    view of (torch.optim's per-parameter counts, so checkpoints keep their layout), or None where they cannot be
    (a count missing, not a 0-d tensor on the CPU, or of another dtype).  Laid out on the first call and again
    after the counts were replaced (e.g. by load_state_dict; ``cache`` as _flat_states'): then one add counts
    every parameter's step and one read gives every count, where a count per parameter costs a fill and a read
    each (~2 us per parameter, as much as a small model's update)."""
    steps = [st.get("step") for st in states]
    entry = cache.get((index, "step"))
    if entry is not None and list(map(id, steps)) == entry[2]:
        return entry[0]
    first = steps[0]
    if not all(torch.is_tensor(t) and t.ndim == 0 and t.is_cpu and t.dtype == first.dtype and not t.requires_grad
               and not hasattr(t, "device_mesh") for t in steps):
        return None
    flat = torch.stack(steps)
    views = flat.unbind()
    for st, v in zip(states, views):
        st["step"] = v
    cache[(index, "step")] = (flat, views, list(map(id, views)))
    return flat


def _flat_buckets(counts, states, foreach):
    """_buckets over counts laid out flat (_flat_counts): one bucket at their count where they agree (one read of
    the flat tensor), otherwise _buckets' own."""
    values = counts.tolist()
    first = values[0]
    if all(v == first for v in values):
        return [(int(first), None)]
    return _buckets(states, foreach)


def _unflat_samples(acc, params):
    """The statistics accumulated flat (``acc["flat"]``) as one tensor per parameter (views)."""
    if acc.pop("flat", False):
        for key, value in acc.items():
            if key not in ("count", "has_grad") and value is not None:
                acc[key] = _views(value[0], params)


def _dense(x):
    return x.to_dense() if x.is_sparse else x


def _no_sparse(params, name):
    for p in params:
        g = p.grad                  # read once: each read of ``p.grad`` is a call into torch (~0.1 us)
        if g is not None and g.is_sparse:
            raise RuntimeError(f"{name} does not support sparse gradients")


def _oracle(params, read, name):
    """Oracle values other than the gradient are read from an attribute of each parameter (p.<name>),
    set by the caller next to p.grad (e.g. per-example squared gradients from torch.func or BackPACK): a tensor
    of the parameter's shape on its device (another shape is refused, never broadcast)."""
    try:
        values = [read(p) for p in params]
    except AttributeError:
        raise RuntimeError(f"this optimizer needs p.{name} on every parameter (see the class docstring)") from None
    for p, value in zip(params, values):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"p.{name} must be a tensor, got {type(value).__name__}")
        if value.shape != p.shape:
            raise ValueError(f"p.{name} has shape {tuple(value.shape)}, the parameter {tuple(p.shape)}")
        if value.device != p.device:
            raise ValueError(f"p.{name} is on {value.device}, the parameter on {p.device}")
    return values


#: a stand-in for the module's own table (state key -> the key the optimizer stores it under; never copied)
_RENAMED: dict = {}


def _keep_low_state(opt, state_dict, renamed):
    """After torch.optim.Optimizer.load_state_dict: the floating state of every float16/bfloat16 parameter back
    in the dtype its arithmetic runs in (float32, see _work), from the checkpoint's own values.  torch casts
    state to the parameter's dtype (_process_value_according_to_param_policy), which rounds a float32 state
    to the parameter's 8 or 11 bits and makes the next step mix dtypes; a state torch.optim keeps in the
    parameter's dtype is widened to float32 exactly; a per-tensor number keeps the dtype it was saved in."""
    saved = [_i for g in state_dict["param_groups"] for _i in g["params"]]
    params = [_p for g in opt.param_groups for _p in g["params"]]
    for _i, _p in zip(saved, params):
        st = opt.state.get(_p)
        if _p.dtype not in _LOW or not isinstance(st, dict):
            continue
        for name, value in state_dict["state"].get(_i, {}).items():
            key = name if name in st else renamed.get(name)
            if name == "step" or key not in st or not torch.is_tensor(value) or not value.is_floating_point():
                continue
            value = value.to_dense() if value.is_sparse else value
            st[key] = value.to(device=_p.device, dtype=torch.float32 if value.dtype in _LOW else value.dtype)


class _Methods(torch.optim.Optimizer):
    """Methods every generated torch optimizer class has, copied into it (``_Methods.name``); never used here."""

    def load_state_dict(self, state_dict):
        """torch.optim.Optimizer.load_state_dict, keeping this optimizer's dtype policy: the state of a
        float16/bfloat16 parameter stays float32 (torch would cast it to the parameter's dtype)."""
        super().load_state_dict(state_dict)
        _keep_low_state(self, state_dict, _RENAMED)


def _kernel(*arrays):
    """A stand-in for the kernel a generated module renders from its update (never copied)."""
    raise NotImplementedError


#: a stand-in for the number of tensors the rendered kernel writes per parameter (never copied)
_KERNEL_OUTPUTS = 1


def _kernel_group(arrays, numbers, flags):
    """The kernel over every tensor of a group that shares a dtype and device, in one compiled call: one graph
    and one guard check per step instead of one per tensor (a compiled call costs ~40 µs on the host, as much as
    the update of 1e5 parameters).  The tensors arrive as they are and are flattened here, inside the compiled
    graph, where a view costs nothing (outside, one ``view`` per tensor and list was ~1 us each: ~60 us a step for
    16 parameters with four tensors each; the graph is specialized on each tensor's number of dimensions and on
    whether a parameter's tensors are all contiguous, see _flat).  The host arguments arrive as _host_args makes
    them: the numbers in one tensor, read here by position (0-d views, as the kernel's arithmetic had them as 0-d tensors), the flags
    as Python bools (None where a number goes)."""
    host, _j = [], 0
    for _f in flags:
        if _f is None:
            host.append(numbers[_j])
            _j += 1
        else:
            host.append(_f)
    for _k in range(len(arrays[0])):
        _kernel(*_flat([a[_k] for a in arrays]), *host)


def _host_args(host, dtype, device):
    """The kernel's host arguments for tensors of ``dtype`` on ``device``: its numbers as one 1-d tensor (one
    tensor built per step instead of one per number, ~3 us each on a CPU, and one compiled input instead of a
    dozen), and the flags, in order, with None where a number goes (a flag stays a Python bool, so that each
    setting gets its own specialized graph)."""
    return (torch.tensor([v for v in host if not isinstance(v, bool)], dtype=dtype, device=device),
            tuple(v if isinstance(v, bool) else None for v in host))


_COMPILED = {}


def _compiled_kernel():
    """The kernel compiled once per process (graph breaks allowed: a shape, dtype, flag or number of tensors
    torch.compile cannot specialize again runs eagerly instead of failing).  Shapes follow torch.compile's default
    (``dynamic=None``): static at first, dynamic where a later call's differ.  A parameter's shapes are static
    under either setting (dynamo's ``force_parameter_static_shapes``), and ``dynamic=True`` made the host numbers'
    length a symbol whose guard (``9 <= numbers.size(0)``, checked in Python on every call) cost ~12 us per step,
    a third of the compiled call for 16 small parameters.  On a CPU, inductor fuses
    loops of equal length into one (horizontal fusion): the loops of two parameters of the same size ran as one
    loop over twice the streams (14 for a kernel reading 4 and writing 3 tensors), ~10 % slower than a loop per
    parameter on the 2-core benchmark machine; at most _KERNEL_OUTPUTS loops fuse, the writes of one parameter.
    Inductor's wrapper asserts every input's sizes and strides again after dynamo's guards have checked them
    (``size_asserts``): ~40 us per step for 16 parameters' five tensors on a CPU, a quarter of the small-model step;
    they are off (the guards still decide which compiled graph runs)."""
    if "kernel" not in _COMPILED:
        try:
            _COMPILED["kernel"] = torch.compile(_kernel_group,
                                                options={"cpp.max_horizontal_fusion_size": _KERNEL_OUTPUTS,
                                                         "size_asserts": False})
        except RuntimeError:            # a torch whose inductor has no such option (checked here, not when called)
            _COMPILED["kernel"] = torch.compile(_kernel_group)
    return _COMPILED["kernel"]


def _flat(tensors):
    """One parameter's tensors for the kernel (its value, its state, its gradient...; None where a list is None),
    all laid out alike: each one flat (a view) where every one of them is contiguous, otherwise all as they are
    (they have one shape, and the kernel is elementwise, so any strides give each element the same value: a
    transposed, channels_last or sliced parameter whose gradient or state is laid out otherwise, which a flat
    view next to a strided tensor would broadcast against)."""
    if all(x is None or x.is_contiguous() for x in tensors):
        return [None if x is None else x.view(-1) for x in tensors]
    return tensors


def _kinds(work, params):
    """The indices of a fused group's parameters by (dtype of the arithmetic, device): one kernel call each.  One
    kind, the common case, is tested first without building the lists (dtypes are singletons: ``is``)."""
    d0, v0 = work[0].dtype, params[0].device
    if all(w.dtype is d0 for w in work) and all(p.device == v0 for p in params):
        return {(d0, v0): range(len(params))}
    kinds = {}
    for k in range(len(params)):
        kinds.setdefault((work[k].dtype, params[k].device), []).append(k)
    return kinds


def _pick(values, index, n):
    """The entries ``index`` of one of the kernel's lists of ``n`` tensors (the list itself where they are all of
    them: a group of one dtype and device); Nones where the list is None."""
    if values is None:
        return [None] * len(index)
    return values if len(index) == n else [values[i] for i in index]


def _fused_failed(name, exc):
    """Compilation failed: warn once, and use the multi-tensor path from now on."""
    if not _COMPILED.get("failed"):
        warnings.warn(f"{name}: fused=True could not be compiled ({type(exc).__name__}: {exc}); "
                      "using the multi-tensor (foreach) path instead", RuntimeWarning, stacklevel=3)
    _COMPILED["failed"] = True


# ------------------------------------------------------------------ array programs (a recipe with matrix state)
#: numpy's elementwise functions that an array program may call, as torch computes them on tensors ...
_UFUNC_TORCH: dict = {
    "sqrt": torch.sqrt, "exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "expm1": torch.expm1,
    "abs": torch.abs, "sign": torch.sign, "tanh": torch.tanh, "sin": torch.sin, "cos": torch.cos,
    "minimum": torch.minimum, "maximum": torch.maximum, "where": torch.where, "logaddexp": torch.logaddexp,
    "equal": torch.eq, "not_equal": torch.ne, "greater": torch.gt, "greater_equal": torch.ge, "less": torch.lt,
    "less_equal": torch.le, "mod": torch.remainder, "zeros_like": torch.zeros_like,
}
#: ... and on host numbers (hyperparameters, the step count): math's functions and Python's operators
_UFUNC_HOST: dict = {
    "sqrt": math.sqrt, "exp": math.exp, "log": math.log, "log1p": math.log1p, "expm1": math.expm1, "abs": abs,
    "sign": lambda x: float((x > 0) - (x < 0)), "tanh": math.tanh, "sin": math.sin, "cos": math.cos, "minimum": min,
    "maximum": max, "where": lambda c, a, b: a if c else b,
    "logaddexp": lambda a, b: max(a, b) + math.log1p(math.exp(-abs(a - b))),
    "equal": lambda a, b: a == b, "not_equal": lambda a, b: a != b, "greater": lambda a, b: a > b,
    "greater_equal": lambda a, b: a >= b, "less": lambda a, b: a < b, "less_equal": lambda a, b: a <= b,
    "mod": lambda a, b: a % b,
}


def _ufunc(name, *args):
    """numpy's elementwise function ``name`` on tensors or host numbers: torch's where an argument is a tensor (the
    numbers as tensors of the first floating tensor's dtype and device), the host's (math, operator) where all are
    numbers, so that a condition on hyperparameters and the step count stays a Python bool."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors:
        return _UFUNC_HOST[name](*args)
    like = next((a for a in tensors if a.is_floating_point()), tensors[0])
    return _UFUNC_TORCH[name](*[a if isinstance(a, torch.Tensor) else torch.as_tensor(a, dtype=like.dtype,
                                                                                       device=like.device)
                                for a in args])


def _eigenbasis(S):
    """The eigenvectors of the symmetric S as the columns of an orthogonal matrix, by decreasing eigenvalue."""
    return torch.linalg.eigh(S)[1].flip(-1)


def _rayleigh_order(S, Q):
    """The columns of Q by decreasing Rayleigh quotient diag(Qᵀ S Q) (a stable order)."""
    return torch.argsort(-(Q * (S @ Q)).sum(dim=0), stable=True)


def _power_basis(S, Q):
    """One power iteration of the symmetric S from the orthogonal Q, orthonormalised: the Q factor of the QR
    decomposition of S Q with its columns by decreasing Rayleigh quotient."""
    return torch.linalg.qr((S @ Q)[:, _rayleigh_order(S, Q)])[0]


def _reordered(X, SL, QL, SR, QR):
    """X with its rows in the order _power_basis gives the columns of QL, its columns in that of QR."""
    return X[_rayleigh_order(SL, QL)][:, _rayleigh_order(SR, QR)]
