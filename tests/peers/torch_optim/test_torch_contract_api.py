"""The contract of the generated torch optimizers at their edges: invalid inputs raise what torch (or ivon-opt)
raises -- torch's own optim_error_inputs_func cases, every further invalid hyperparameter torch rejects (the
expected message taken from torch itself), ivon-opt's checks for IVON --; sparse gradients are refused like
torch refuses them, or handled like torch where it handles them (SGD, Adagrad); ``capturable=True`` and
``differentiable=True`` behave like torch or raise a clear error naming the argument; ``fused`` is refused in
the combinations torch refuses."""
import copy
import re
import warnings

import ivon  # a declared test dependency: ivon-opt==0.1.3
import pytest
import torch

from contract_helpers import (ALL_NAMES, FUSED_PEERS, INFO, PEER_NAMES, PEERS, RICH, OptimizerErrorEnum,
                              assert_params_close, assert_state_matches, common_optimizers, default_dtype,
                              generated_class, peer_signature)

REQUIRED = {"ivon": dict(lr=0.1, ess=10.0), "ogn": dict(ess=10.0), "vogn": dict(ess=10.0)}


def _error_inputs(name):
    """torch's error inputs for the peer; for the optimizers without a peer, the ones common to all optimizers
    (torch.optim.Optimizer's own checks on params and param groups), less the tensor-lr one."""
    if name in PEERS:
        return INFO[name].optim_error_inputs_func(device="cpu", dtype=torch.float32)
    return [e for e in common_optimizers.get_error_inputs_for_all_optims("cpu", torch.float32)
            if e.optimizer_error_input.desc != "Tensor lr must be 1-element"]


ERROR_CASES = [(n, i) for n in ALL_NAMES for i in range(len(_error_inputs(n)))]
ERROR_IDS = [f"{n}-{re.sub(r'[^A-Za-z0-9]+', '_', _error_inputs(n)[i].optimizer_error_input.desc)}"
             for n, i in ERROR_CASES]


def _expect(error_input, build):
    if issubclass(error_input.error_type, Warning):
        with pytest.warns(error_input.error_type, match=error_input.error_regex):
            build()
    else:
        with pytest.raises(error_input.error_type, match=error_input.error_regex):
            build()


def _tensor_hyper_with_foreach_is_exact(name, kwargs, error_input):
    """torch's Adam/AdamW refuse a tensor lr or beta with foreach=True (its multi-tensor kernels would need
    capturable); the generated optimizer reads hyperparameters on the host in either path, so it takes them and
    gives torch's own for-loop result (foreach=False, which torch accepts) -- a wider contract, not a silent one."""
    with pytest.raises(error_input.error_type, match=error_input.error_regex):
        PEERS[name]([torch.nn.Parameter(torch.randn(2, 2))], **copy.deepcopy(kwargs))
    # compared in float64 throughout (torch's for-loop does its scalar arithmetic in the tensors' dtype)
    kwargs = {k: (v.double() if torch.is_tensor(v) else tuple(x.double() if torch.is_tensor(x) else x for x in v)
                  if isinstance(v, tuple) else v) for k, v in kwargs.items()}
    init = torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    p, q = torch.nn.Parameter(init.clone()), torch.nn.Parameter(init.clone())
    opt = generated_class(name)([p], **copy.deepcopy(kwargs))
    ref = PEERS[name]([q], **{**copy.deepcopy(kwargs), "foreach": False})
    g = torch.Generator().manual_seed(2)
    for _ in range(5):
        grad = torch.randn(3, 4, generator=g, dtype=torch.float64)
        p.grad, q.grad = grad.clone(), grad.clone()
        opt.step()
        ref.step()
    assert_params_close([p], [q])
    assert (q.detach() - init).abs().max() > 1e-4


@pytest.mark.parametrize("name,index", ERROR_CASES, ids=ERROR_IDS)
def test_torch_error_inputs(name, index):
    """test_errors of test_optim.py over optim_error_inputs_func (params=None there means 'any valid params')."""
    error_input = _error_inputs(name)[index]
    oi = error_input.optimizer_error_input
    params = oi.params if oi.params is not None else [torch.nn.Parameter(torch.randn(2, 2))]
    kwargs = {**REQUIRED.get(name, {}), **oi.kwargs}
    cls = generated_class(name)
    if name in PEERS and oi.kwargs.get("foreach") and "capturable" in oi.desc and "Tensor" in oi.desc:
        _tensor_hyper_with_foreach_is_exact(name, oi.kwargs, error_input)
        return
    if error_input.error_on == OptimizerErrorEnum.CONSTRUCTION_ERROR:
        if name in PEERS:             # the input really is an error for the peer too
            _expect(error_input, lambda: PEERS[name](params, **copy.deepcopy(kwargs)))
        _expect(error_input, lambda: cls(params, **copy.deepcopy(kwargs)))
    else:
        opt = cls(params, **kwargs)
        _expect(error_input, opt.step)


_CANDIDATES = [dict(lr=-0.1), dict(eps=-1e-8), dict(weight_decay=-0.1), dict(betas=(0.9, 1.0)),
               dict(betas=(-0.1, 0.99)), dict(betas=(1.0, 0.99)), dict(betas=(0.9, -0.1)), dict(momentum=-0.5),
               dict(alpha=-0.1), dict(rho=-0.1), dict(rho=1.1), dict(lr_decay=-0.5),
               dict(initial_accumulator_value=-0.1), dict(momentum_decay=-0.2), dict(nesterov=True),
               dict(nesterov=True, momentum=0.9, dampening=0.1), dict(lr=torch.tensor([0.1, 0.2]))]


def _torch_rejects(name):
    """(kwargs, exception type, message) for every candidate that the peer's constructor rejects."""
    out = []
    for kw in _CANDIDATES:
        if not all(k in peer_signature(name) for k in kw):
            continue
        try:
            PEERS[name]([torch.nn.Parameter(torch.randn(2))], **kw)
        except Exception as e:  # noqa: BLE001  (whatever torch raises is the expectation)
            out.append((kw, type(e), str(e)))
    return out


INVALID = [(n, *case) for n in PEER_NAMES for case in _torch_rejects(n)]


@pytest.mark.parametrize("name,kwargs,error,message", INVALID,
                         ids=[re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items())}")
                              for n, kw, _, _ in INVALID])
def test_invalid_hyperparameters_raise_like_torch(name, kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        generated_class(name)([torch.nn.Parameter(torch.randn(2))], **kwargs)


IVON_INVALID = [("lr", dict(lr=-0.1)), ("ess", dict(ess=0.0)), ("ess", dict(ess=-1.0)),
                ("hess_init", dict(hess_init=0.0)), ("hess_init", dict(hess_init=-1.0)),
                ("beta1", dict(beta1=-0.1)), ("beta1", dict(beta1=1.5)), ("beta2", dict(beta2=-0.1)),
                ("beta2", dict(beta2=1.5)), ("weight_decay", dict(weight_decay=-1e-4)),
                ("mc_samples", dict(mc_samples=0)), ("clip_radius", dict(clip_radius=0.0)),
                ("clip_radius", dict(clip_radius=-1.0)), ("hess_approx", dict(hess_approx="newton"))]
# the argument's name, or ivon-opt's own wording of it
IVON_NAMES = {"lr": r"\blr\b|learning rate", "ess": r"\bess\b|effective sample size",
              "hess_init": r"hess_init|Hessian init", "beta1": "beta1", "beta2": "beta2",
              "weight_decay": r"weight_decay|weight decay", "mc_samples": r"mc_samples|MC samples",
              "clip_radius": r"clip_radius|clipping radius", "hess_approx": "hess_approx"}


@pytest.mark.parametrize("arg,kwargs", IVON_INVALID, ids=[f"{a}={v}" for a, kw in IVON_INVALID for v in kw.values()])
def test_ivon_invalid_hyperparameters_raise_like_ivon_opt(arg, kwargs):
    """ivon-opt's checks: lr >= 0, ess > 0, hess_init > 0, 0 <= beta1, beta2 <= 1, weight_decay >= 0,
    mc_samples >= 1, clip_radius > 0, hess_approx in (price, gradsq); a ValueError naming the argument."""
    full = {**REQUIRED["ivon"], **kwargs}
    with pytest.raises(ValueError):
        ivon.IVON([torch.nn.Parameter(torch.randn(2))], **full)
    with pytest.raises(ValueError, match=IVON_NAMES[arg]):
        generated_class("ivon")([torch.nn.Parameter(torch.randn(2))], **full)


def _sparse_grad(step, n=4, dtype=torch.float64):
    """An uncoalesced sparse gradient (repeated indices, test_rosenbrock_sparse's torture test)."""
    g = torch.Generator().manual_seed(step)
    idx = torch.tensor([[step % n, step % n, (step + 2) % n]])
    vals = torch.randn(3, generator=g, dtype=dtype)
    return torch.sparse_coo_tensor(idx, vals, (n,), check_invariants=True)


SPARSE_SUPPORTED = tuple(n for n in PEER_NAMES if INFO[n].supports_sparse)        # sgd, adagrad
SPARSE_CONFIGS = {"sgd": [dict(lr=0.1), dict(lr=0.1, momentum=0.9), dict(lr=0.1, maximize=True)],
                  "adagrad": [dict(lr=0.1), dict(lr=0.1, lr_decay=0.5, initial_accumulator_value=0.1),
                              dict(lr=0.1, maximize=True)]}
SPARSE_CASES = [(n, i) for n in SPARSE_SUPPORTED for i in range(len(SPARSE_CONFIGS[n]))]


@pytest.mark.parametrize("name", [n for n in PEER_NAMES if n not in SPARSE_SUPPORTED])
def test_sparse_gradients_are_refused_like_torch(name):
    p = torch.nn.Parameter(torch.randn(4, dtype=torch.float64))
    p.grad = _sparse_grad(0)
    with pytest.raises(RuntimeError, match="does not support sparse gradients"):
        PEERS[name]([p], **RICH[name]).step()
    p = torch.nn.Parameter(torch.randn(4, dtype=torch.float64))
    p.grad = _sparse_grad(0)
    with pytest.raises(RuntimeError, match="does not support sparse gradients"):
        generated_class(name)([p], **RICH[name]).step()


@pytest.mark.parametrize("name,index", SPARSE_CASES, ids=[f"{n}-{i}" for n, i in SPARSE_CASES])
def test_sparse_gradients_match_torch_where_torch_takes_them(name, index):
    """SGD and Adagrad accept sparse gradients in torch (test_rosenbrock_sparse): the same numbers."""
    kwargs = SPARSE_CONFIGS[name][index]
    with default_dtype(torch.float64):
        init = torch.randn(4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        p, q = torch.nn.Parameter(init.clone()), torch.nn.Parameter(init.clone())
        opt, ref = generated_class(name)([p], **kwargs), PEERS[name]([q], **kwargs)
        for k in range(10):
            p.grad, q.grad = _sparse_grad(k), _sparse_grad(k)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")       # torch's sparse-invariant-checks warning
                ref.step()
                opt.step()
        assert_params_close([p], [q])
        assert_state_matches(opt, [p], ref, [q])
        assert (q.detach() - init).abs().max() > 1e-2


def test_a_torch_sgd_checkpoint_with_a_sparse_momentum_buffer_loads_and_continues_identically():
    """torch's SGD keeps its momentum buffer sparse for sparse gradients; loaded into the generated SGD it
    becomes dense and both continue with the same numbers."""
    with default_dtype(torch.float64):
        init = torch.randn(4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        q = torch.nn.Parameter(init.clone())
        ref = PEERS["sgd"]([q], lr=0.1, momentum=0.9)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")       # torch's sparse-invariant-checks warning
            for k in range(3):
                q.grad = _sparse_grad(k)
                ref.step()
            assert ref.state[q]["momentum_buffer"].is_sparse
            p = torch.nn.Parameter(q.detach().clone())
            opt = generated_class("sgd")([p], lr=0.1, momentum=0.9)
            opt.load_state_dict(copy.deepcopy(ref.state_dict()))
            assert not opt.state[p]["momentum_buffer"].is_sparse
            for k in range(3, 8):
                p.grad, q.grad = _sparse_grad(k), _sparse_grad(k)
                ref.step()
                opt.step()
        assert_params_close([p], [q])
        assert_state_matches(opt, [p], ref, [q])


def test_adagrad_sparse_gradients_with_weight_decay_are_refused_like_torch():
    for cls in (PEERS["adagrad"], generated_class("adagrad")):
        p = torch.nn.Parameter(torch.randn(4, dtype=torch.float64))
        p.grad = _sparse_grad(0)
        with pytest.raises(RuntimeError, match="weight_decay option is not compatible with sparse gradients"):
            cls([p], lr=0.1, weight_decay=0.1).step()


def _clear_error(arg):
    return pytest.raises((RuntimeError, ValueError, NotImplementedError), match=arg)


@pytest.mark.parametrize("name", [n for n in PEER_NAMES if "capturable" in peer_signature(n)])
def test_capturable_behaves_like_torch_or_is_refused_clearly(name):
    """On CPU tensors torch accepts capturable=True and fails at step() (capturable needs CUDA-like devices);
    the generated optimizer may do the same or refuse capturable=True at construction with a clear error."""
    p = torch.nn.Parameter(torch.randn(3))
    p.grad = torch.randn(3)
    with pytest.raises(AssertionError, match="capturable=True"):
        PEERS[name]([p], capturable=True).step()
    try:
        opt = generated_class(name)([p], capturable=True)
    except (RuntimeError, ValueError, NotImplementedError) as e:
        assert "capturable" in str(e), f"the error does not name capturable: {e}"
        return
    assert opt.param_groups[0]["capturable"] is True
    with pytest.raises((AssertionError, RuntimeError, ValueError, NotImplementedError), match="capturable"):
        opt.step()


@pytest.mark.parametrize("name", PEER_NAMES)
def test_differentiable_behaves_like_torch_or_is_refused_clearly(name):
    """differentiable=True: either a clear error at construction, or torch's semantics -- a step of a non-leaf
    parameter p = p0.clone() with a gradient that requires grad gives torch's parameter and torch's derivatives
    of sum(w * p) with respect to p0 and to the gradient.  (One step: torch's own differentiable mode fails
    in backward after two steps for several of these configurations.)"""
    kwargs = dict(RICH[name], differentiable=True)
    try:
        generated_class(name)([torch.randn(2, requires_grad=True).clone()], **kwargs)
    except (RuntimeError, ValueError, NotImplementedError) as e:
        assert "differentiable" in str(e), f"the error does not name differentiable: {e}"
        return
    results = []
    with default_dtype(torch.float64), warnings.catch_warnings():
        warnings.simplefilter("ignore")      # .grad of a non-leaf tensor
        for cls in (generated_class(name), PEERS[name]):
            g = torch.Generator().manual_seed(0)
            p0 = torch.randn(4, generator=g, dtype=torch.float64).requires_grad_()
            grad = torch.randn(4, generator=g, dtype=torch.float64).requires_grad_()
            p = p0.clone()
            opt = cls([p], **kwargs)
            p.grad = grad * 1.0
            opt.step()
            w = torch.arange(1.0, 5.0, dtype=torch.float64)
            d = torch.autograd.grad((p * w).sum(), (p0, grad), allow_unused=True)
            results.append([p.detach()] + [torch.zeros(4) if x is None else x for x in d])
    for ours, theirs, what in zip(results[0], results[1], ("parameter", "d/dp0", "d/dgrad")):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12, msg=lambda m, what=what: f"{what}: {m}")


@pytest.mark.parametrize("name", FUSED_PEERS)
def test_fused_is_refused_with_foreach_or_differentiable_like_torch(name):
    cls = generated_class(name)
    p = torch.nn.Parameter(torch.randn(3))
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
        cls([p], fused=True, foreach=True)
    with _clear_error("differentiable"):          # torch: "`fused` does not support `differentiable`"
        cls([p], fused=True, differentiable=True)


@pytest.mark.parametrize("name", FUSED_PEERS)
def test_fused_with_complex_parameters_is_refused_like_torch_or_correct(name):
    """torch refuses fused=True for complex parameters (at the first step); the generated optimizer may refuse
    them the same way, or handle them -- then with the numbers of torch's unfused optimizer."""
    g = torch.Generator().manual_seed(0)
    init = torch.randn(4, generator=g, dtype=torch.complex128)
    grads = [torch.randn(4, generator=g, dtype=torch.complex128) for _ in range(4)]
    c = torch.nn.Parameter(init.clone())
    c.grad = grads[0]
    with pytest.raises(RuntimeError, match="`fused=True` requires all the params to be floating point Tensors"):
        PEERS[name]([c], fused=True).step()
    with default_dtype(torch.float64):
        runs = []
        for generated, cls, kwargs in ((True, generated_class(name), dict(RICH[name], fused=True)),
                                       (False, PEERS[name], RICH[name])):
            c = torch.nn.Parameter(init.clone())
            opt = cls([c], **kwargs)
            for grad in grads:
                c.grad = grad.clone()
                try:
                    opt.step()
                except RuntimeError as e:
                    assert generated and grad is grads[0], e
                    assert "`fused=True` requires all the params to be floating point Tensors" in str(e), e
                    return
            runs.append((opt, [c]))
        (opt, params), (ref, ref_params) = runs
        assert_params_close(params, ref_params)
        assert_state_matches(opt, params, ref, ref_params)
