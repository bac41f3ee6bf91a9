"""Generated code under misuse (issue 13): copies and pickles of the sampling optimizers, nested samples,
sparse and low-precision gradients, binary weights at lam = 0 or NaN; numpy modules that check shapes,
symmetry and missing inputs instead of broadcasting or reading one triangle."""
from __future__ import annotations

import copy
import io
import pickle

import numpy as np
import pytest
import torch

import ivon  # ivon-opt, the peer of IVON

import sys

from conftest import GENERATED, load_module_from_path


def load_generated(recipe, target="numpy"):
    """A generated module registered in sys.modules (pickle finds classes by module name)."""
    name = f"_robust_{recipe}_{target}"
    if name not in sys.modules:
        sys.modules[name] = load_module_from_path(GENERATED / target / f"{recipe}.py", name)
    return sys.modules[name]


def _mlp(seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).to(dtype)


def _data(dtype=torch.float64):
    g = torch.Generator().manual_seed(3)
    return torch.randn(32, 4, generator=g, dtype=dtype), torch.randint(0, 2, (32,), generator=g)


def _sample_step(opt, net, X, y, samples=1):
    for _ in range(samples):
        with opt.sampled_params(train=True):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(X), y).backward()
    opt.step()


SAMPLING = {"ivon": dict(lr=0.05, ess=32), "vogn": dict(lr=0.05, ess=32), "bayesbinn": dict(lr=0.01)}


def _vogn_ggn(net):
    for p in net.parameters():          # VOGN reads the Gauss-Newton diagonal from p.ggn (any non-negative array)
        p.ggn = p.grad.detach() ** 2


def _step(name, opt, net, X, y):
    with opt.sampled_params(train=True):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(X), y).backward()
        if name == "vogn":
            _vogn_ggn(net)
    opt.step()


@pytest.mark.parametrize("name", sorted(SAMPLING))
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copies_of_sampling_optimizers_step_like_the_original(name, how):
    """copy.deepcopy and pickle once broke the next step() (_samples and _sync were not restored); a copy now
    continues exactly as the original does, also with samples collected but not yet applied."""
    mod = load_generated(name, "torch")
    cls = getattr(mod, [c for c in dir(mod) if isinstance(getattr(mod, c), type)
                        and issubclass(getattr(mod, c), torch.optim.Optimizer)][0])
    X, y = _data()
    net = _mlp()
    opt = cls(net.parameters(), **SAMPLING[name], sync=False)
    for _ in range(2):
        _step(name, opt, net, X, y)
    with opt.sampled_params(train=True):                   # a pending sample, collected before the copy
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(X), y).backward()
        if name == "vogn":
            _vogn_ggn(net)
    if how == "deepcopy":
        net2, opt2 = copy.deepcopy((net, opt))
    else:
        buf = io.BytesIO()
        torch.save((net, opt), buf)
        buf.seek(0)
        net2, opt2 = torch.load(buf, weights_only=False)
    for o, n in ((opt, net), (opt2, net2)):
        o.step()
        torch.manual_seed(11)
        _step(name, o, n, X, y)
    for a, b in zip(net.parameters(), net2.parameters()):
        assert torch.equal(a, b)
    assert opt2._sync is False and opt2._sampling is False


def test_pickle_keeps_sync():
    mod = load_generated("ivon", "torch")
    opt = mod.IVON(_mlp().parameters(), lr=0.1, ess=10, sync=True)
    assert pickle.loads(pickle.dumps(opt))._sync is True


@pytest.mark.parametrize("name", sorted(SAMPLING))
def test_nested_samples_are_an_error_and_the_means_come_back(name):
    mod = load_generated(name, "torch")
    cls = [getattr(mod, c) for c in dir(mod) if isinstance(getattr(mod, c), type)
           and issubclass(getattr(mod, c), torch.optim.Optimizer)][0]
    net = _mlp()
    opt = cls(net.parameters(), **SAMPLING[name])
    before = [p.detach().clone() for p in net.parameters()]
    with opt.sampled_params():
        with pytest.raises(RuntimeError, match="already active"):
            with opt.sampled_params():
                pass
    for a, b in zip(before, net.parameters()):
        assert torch.equal(a, b)
    with opt.sampled_params():                            # usable again afterwards
        pass


@pytest.mark.parametrize("name, kw", [("adam", {}), ("rmsprop", {}), ("adamw", {}),
                                      ("ogn", {"ess": 10}), ("ste", {}), ("ivon", {"lr": 0.1, "ess": 10})])
def test_sparse_gradients_are_refused_like_torch_optim(name, kw):
    """(SGD and Adagrad take sparse gradients, as torch.optim's do: tests/peers/torch_optim/test_torch_contract_api.py)"""
    mod = load_generated(name, "torch")
    cls = [getattr(mod, c) for c in dir(mod) if isinstance(getattr(mod, c), type)
           and issubclass(getattr(mod, c), torch.optim.Optimizer)][0]
    emb = torch.nn.Embedding(10, 3, sparse=True)
    opt = cls(emb.parameters(), **kw)
    def backward():
        emb(torch.tensor([1, 2])).sum().backward()
    if name == "ivon":
        with pytest.raises(RuntimeError, match="does not support sparse gradients"):
            with opt.sampled_params(train=True):
                backward()
    else:
        backward()
        with pytest.raises(RuntimeError, match="does not support sparse gradients"):
            opt.step()


def test_ivon_in_float16_stays_finite_like_ivon_opt():
    """ess = 1e5 overflows float16 (h * ess > 65504): the state and the arithmetic are float32 for float16
    parameters, so the parameters stay finite and close to ivon-opt's."""
    mod = load_generated("ivon", "torch")
    X, y = _data(torch.float32)
    nets = [_mlp(0, torch.float16), _mlp(0, torch.float16)]
    opts = [mod.IVON(nets[0].parameters(), lr=0.05, ess=1e5), ivon.IVON(nets[1].parameters(), lr=0.05, ess=1e5)]
    for st in range(5):
        for o, n in zip(opts, nets):
            torch.manual_seed(st)
            with o.sampled_params(train=True):
                o.zero_grad()
                torch.nn.functional.cross_entropy(n(X.half()).float(), y).backward()
            o.step()
    for p, q in zip(*(n.parameters() for n in nets)):
        assert p.dtype == torch.float16 and torch.isfinite(p).all() and torch.isfinite(q).all()
    state = opts[0].state[next(nets[0].parameters())]
    assert state["h"].dtype == torch.float32 and torch.isfinite(state["h"]).all()


@pytest.mark.parametrize("name", ["ste", "bayesbinn"])
def test_binary_weights_stay_binary_at_zero_and_nan(name):
    """A latent weight of exactly 0 (or NaN) once wrote a weight of 0.0: the parameter holds binary(lam), always
    -1 or +1."""
    mod = load_generated(name, "torch")
    cls = [getattr(mod, c) for c in dir(mod) if isinstance(getattr(mod, c), type)
           and issubclass(getattr(mod, c), torch.optim.Optimizer)][0]
    w = torch.nn.Parameter(torch.tensor([0.0, -0.0, float("nan"), 0.5, -2.0]))
    cls([w])
    assert set(w.detach().tolist()) <= {-1.0, 1.0}
    assert w.detach().tolist()[:2] == [1.0, 1.0] and w.detach().tolist()[3:] == [1.0, -1.0]
    num = load_generated(name, "numpy")
    assert list(num.parameter({"lam": np.array([0.0, -0.0, np.nan, -1e-300]),
                               **({"grad_avg": np.zeros(4)} if name == "bayesbinn" else {})})) == [1, 1, 1, -1]


# ---------------------------------------------------------------------------------------------- numpy
def _newton_inputs(P=3, seed=0):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(P, P))
    return {"m": rng.normal(size=P), "S": B @ B.T + P * np.eye(P)}


def test_numpy_rejects_a_nonsymmetric_hessian():
    mod = load_generated("newton", "numpy")
    st = mod.init(**_newton_inputs())
    H = np.array([[2.0, 1.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]])     # only its lower triangle was read
    with pytest.raises(ValueError, match="H must be symmetric"):
        mod.step(st, oracles={"grad": lambda m: m, "hess": lambda m: H})
    with pytest.raises(ValueError, match="S must be symmetric"):
        mod.init(m=np.zeros(2), S=np.array([[1.0, 0.5], [0.0, 1.0]]))


@pytest.mark.parametrize("grad, words", [
    (lambda m: m.reshape(-1, 1), "g must have shape \\(P,\\)"),            # (P, 1) once turned m into P×P
    (lambda m: np.ones(4), "g has shape \\(4,\\), but P = 3"),
    (lambda m: 1.0, "g must have shape"),
])
def test_numpy_rejects_wrong_oracle_shapes(grad, words):
    mod = load_generated("newton", "numpy")
    st = mod.init(**_newton_inputs())
    with pytest.raises(ValueError, match=words):
        mod.step(st, oracles={"grad": grad, "hess": lambda m: 2 * np.eye(3)})


def test_numpy_rejects_inconsistent_state_and_scalar_matrices():
    mod = load_generated("newton", "numpy")
    with pytest.raises(ValueError, match="S has shape \\(2, 2\\), but P = 3"):
        mod.init(m=np.zeros(3), S=np.eye(2))
    ridge = load_generated("ridge", "numpy")
    st = ridge.init(m=np.zeros(2), S=np.eye(2))
    with pytest.raises(ValueError, match="X must have shape \\(N, P\\)"):
        ridge.step(st, data={"X": 3.0, "y": np.ones(5)})              # a scalar once became a full matrix


def test_numpy_names_missing_inputs():
    ridge = load_generated("ridge", "numpy")
    st = ridge.init(m=np.zeros(2), S=np.eye(2))
    with pytest.raises(TypeError, match="step\\(\\) needs the data y"):
        ridge.step(st, data={"X": np.ones((5, 2))})
    with pytest.raises(TypeError, match="needs the data X, y"):
        ridge.step(st)
    newton = load_generated("newton", "numpy")
    with pytest.raises(TypeError, match="needs the oracles hess"):
        newton.step(newton.init(**_newton_inputs()), oracles={"grad": lambda m: m})
    with pytest.raises(TypeError, match="needs the state S"):
        newton.step({"m": np.zeros(3)}, oracles={"grad": lambda m: m, "hess": lambda m: np.eye(3)})


def test_numpy_elementwise_state_must_match_the_mean():
    adam = load_generated("adam", "numpy")
    st = adam.init(m=np.zeros(4))
    st["s"] = np.zeros(3)
    with pytest.raises(ValueError, match="s has shape \\(3,\\); the other arrays of this update have shape \\(4,\\)"):
        adam.step(st, oracles={"grad": lambda m: m + 1})
    with pytest.raises(ValueError, match="g has shape"):
        adam.step(adam.init(m=np.zeros(4)), oracles={"grad": lambda m: np.ones((4, 1))})


def test_numpy_fixed_parameters_may_be_one_number():
    """A fixed parameter of an elementwise update (the dropout family's precision) may be one number."""
    mod = load_generated("dropout_sgd", "numpy")
    state = {name: np.zeros(5) if name not in ("s", "pi1") else 1.0 for name in mod.REQUIRED_STATE}
    assert set(mod.init(**state)) >= set(mod.REQUIRED_STATE)
