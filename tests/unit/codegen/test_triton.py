"""Generated Triton optimizers (catalog/generated/triton) against the torch target of the same recipe.

No GPU is needed: ``TRITON_INTERPRET=1`` makes ``@triton.jit`` return interpreted kernels that run on CPU
torch tensors.  Triton reads the variable when a kernel is decorated, i.e. when a generated module is
loaded, so it is set here, before this module or any generated module imports triton (no other test
module imports triton; torch does not import it on CPU).  The interpreter is slow per program, so the
tests use few parameter tensors and a large BLOCK (one or two programs per tensor).
"""
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import contextlib  # noqa: E402

import pytest  # noqa: E402
import sympy as sp  # noqa: E402
import torch  # noqa: E402

from blr_derive.api import generate  # noqa: E402
from blr_derive.core.errors import CodegenError  # noqa: E402
from conftest import CATALOG, GENERATED, load_generated  # noqa: E402

# masked lanes of the last block divide zeros by zeros in the interpreter; their results are never stored
pytestmark = pytest.mark.filterwarnings("ignore:(divide by zero|invalid value):RuntimeWarning")

SHAPES = [(64, 256), (37,)]          # 16421 elements: two whole blocks (vector path) and a ragged one
BLOCK = 8192


def optimizer_class(mod):
    return [v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, torch.optim.Optimizer)
            and v.__module__ == mod.__name__][0]


def triton_module(name):
    mod = load_generated(name, "triton")
    mod.BLOCK = BLOCK
    return mod


def make_params(seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(dtype)) for s in SHAPES]


def states_close(opt_a, params_a, opt_b, params_b, **tol):
    for a, b in zip(params_a, params_b):
        for k, v in opt_b.state[b].items():
            if k == "step":
                assert float(opt_a.state[a][k]) == float(v)
            else:       # a per-tensor number (NAdam's mu_product, 0-d in the torch target) is elementwise here
                torch.testing.assert_close(opt_a.state[a][k], v.float().expand_as(opt_a.state[a][k]), **tol)


# ----------------------------------------------------------------- deterministic recipes, 20 steps
DETERMINISTIC = [
    ("sgd", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("adam", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    ("adamw", dict(lr=1e-2)),
    ("rmsprop", dict(lr=1e-2, centered=True, momentum=0.5)),
    ("ogn", dict(lr=0.1, ess=100.0)),
    ("adagrad", dict(lr=0.05, lr_decay=0.01, weight_decay=0.01)),
    ("adamax", dict(lr=1e-2, weight_decay=0.05)),
    ("nadam", dict(lr=1e-2, weight_decay=0.05, decoupled_weight_decay=True)),
    ("adadelta", dict(lr=0.5, weight_decay=0.01)),
]
#: fp32 agreement: 1e-6, except NAdam: its momentum-schedule coefficients (1 - mu_product, 1 - mu_product*mu_next)
#: are computed per element in float32 in the Triton kernel (its per-tensor numbers are elementwise buffers there),
#: while the torch target computes them on the host in float64 from the stored float32 product, as
#: torch.optim.NAdam(foreach=True) does (bit for bit: tests/peers/torch_optim/test_torch_order_bitwise.py); the two
#: roundings differ by up to ~13 float32 ulps after 20 steps (1.6e-6 relative measured), within torch.testing's
#: float32 defaults (rtol 1.3e-6, atol 1e-5), which torch's own optimizer tests use
FP32_TOL = {"nadam": dict(rtol=1.3e-6, atol=1e-5)}


@pytest.mark.parametrize("name,kw", DETERMINISTIC, ids=[n for n, _ in DETERMINISTIC])
def test_deterministic_recipe_equals_torch_target(name, kw):
    tr, to = triton_module(name), load_generated(name, "torch")
    pa, pb = make_params(), make_params()
    opt_a, opt_b = optimizer_class(tr)(pa, **kw), optimizer_class(to)(pb, **kw)
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        for a, b in zip(pa, pb):
            grad = torch.randn(a.shape, generator=g) + 0.3 * a.detach()
            a.grad, b.grad = grad.clone(), grad.clone()
            if name == "ogn":
                a.ggn = b.ggn = torch.rand(a.shape, generator=g) + 0.5
        opt_a.step()
        opt_b.step()
        for a, b in zip(pa, pb):
            # fp32 agreement; not bitwise because torch's CPU _foreach_sqrt is not correctly rounded
            torch.testing.assert_close(a, b, **FP32_TOL.get(name, dict(rtol=1e-6, atol=1e-6)))
    states_close(opt_a, pa, opt_b, pb, **FP32_TOL.get(name, dict(rtol=1e-6, atol=1e-6)))
    if name == "sgd":                    # no square roots: the same fp32 operations, bit for bit
        assert all(torch.equal(a, b) for a, b in zip(pa, pb))


def test_one_launch_per_group_and_step(monkeypatch):
    tr = triton_module("adam")
    launches = []

    class Counting:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            launches.append(grid)
            return self.kernel[grid]

    monkeypatch.setattr(tr, "_update_kernel", Counting(tr._update_kernel))
    pa, pb = make_params(), make_params(seed=3)
    opt = optimizer_class(tr)([{"params": pa}, {"params": pb, "lr": 1e-3}], lr=1e-2)
    for p in pa + pb:
        p.grad = torch.ones_like(p)
    opt.step()
    opt.step()
    assert len(launches) == 4                          # 2 groups x 2 steps, all tensors of a group at once
    assert launches[0] == (2 + 1,)                     # 16384 + 37 elements in BLOCK-sized programs
    # the state is one contiguous fp32 buffer per group, self.state[p] holds views of it
    s0, s1 = opt.state[pa[0]]["exp_avg_sq"], opt.state[pa[1]]["exp_avg_sq"]
    assert s0.untyped_storage().data_ptr() == s1.untyped_storage().data_ptr() and s0.dtype == torch.float32


def test_unaligned_parameters_take_the_masked_path():
    """A parameter whose storage is not 16-byte aligned is updated by the masked (scalar) code path."""
    tr, to = triton_module("adam"), load_generated("adam", "torch")
    base = torch.randn(2 * BLOCK + 1, generator=torch.Generator().manual_seed(8))
    pa, pb = [torch.nn.Parameter(base[1:])], [torch.nn.Parameter(base[1:].clone())]
    assert pa[0].data_ptr() % 16 != 0
    opt_a, opt_b = optimizer_class(tr)(pa, lr=1e-2), optimizer_class(to)(pb, lr=1e-2)
    for i in range(3):
        grad = torch.randn(2 * BLOCK, generator=torch.Generator().manual_seed(i))
        pa[0].grad, pb[0].grad = grad.clone(), grad.clone()
        opt_a.step()
        opt_b.step()
    torch.testing.assert_close(pa[0], pb[0], rtol=1e-6, atol=1e-6)
    assert opt_a._layouts[id(opt_a.param_groups[0])].pointers([[pa[0], pa[0].grad]])[0, -1].item() == 0


def test_state_dict_round_trip():
    tr = triton_module("adam")
    cls = optimizer_class(tr)
    pa, pb = make_params(), make_params()
    opt_a = cls(pa, lr=1e-2)
    g = torch.Generator().manual_seed(2)
    grads = [[torch.randn(s, generator=g) for s in SHAPES] for _ in range(6)]

    def run(opt, params, gs):
        for step in gs:
            for p, x in zip(params, step):
                p.grad = x.clone()
            opt.step()

    run(opt_a, pa, grads)
    opt_b = cls(pb, lr=1e-2)
    run(opt_b, pb, grads[:3])
    opt_c = cls(pb, lr=1e-2)
    opt_c.load_state_dict(opt_b.state_dict())
    run(opt_c, pb, grads[3:])
    assert all(torch.equal(a, b) for a, b in zip(pa, pb))


# ----------------------------------------------------------------- Monte Carlo recipes
@contextlib.contextmanager
def torch_draws(eps):
    """Make the torch target's one flat standard-normal draw per group return ``eps``."""
    orig = torch.randn

    def randn(n, dtype=None, device=None):
        assert n == eps.numel()
        return eps.clone().to(dtype)

    torch.randn = randn
    try:
        yield
    finally:
        torch.randn = orig


def quadratic(params, A, C):
    return sum((0.5 * a * (p - c) ** 2).sum() for a, p, c in zip(A, params, C))


SAMPLING = [
    ("ivon", dict(lr=0.05, ess=100.0), 10),
    ("ivon", dict(lr=0.05, ess=100.0, mc_samples=2, hess_approx="gradsq", weight_decay=0.0), 5),
    ("vogn", dict(lr=0.05, ess=100.0, mc_samples=2), 5),
]


@pytest.mark.parametrize("name,kw,steps", SAMPLING, ids=["ivon", "ivon-gradsq-2", "vogn-2"])
def test_sampling_recipe_equals_torch_target_given_the_kernel_noise(name, kw, steps):
    tr, to = triton_module(name), load_generated(name, "torch")
    g = torch.Generator().manual_seed(5)
    A = [torch.rand(s, generator=g) + 0.5 for s in SHAPES]
    C = [torch.randn(s, generator=g) for s in SHAPES]
    pa, pb = make_params(), make_params()
    opt_a, opt_b = optimizer_class(tr)(pa, **kw), optimizer_class(to)(pb, **kw)
    torch.manual_seed(0)
    for _ in range(steps):
        for _ in range(kw.get("mc_samples", 1)):
            with opt_a.sampled_params(train=True):
                opt_a.zero_grad()
                quadratic(pa, A, C).backward()
                for p, a in zip(pa, A):
                    p.ggn = a
                theta_a = [p.detach().clone() for p in pa]
            eps = opt_a.noise(0)                          # regenerated from the sample's Philox seed
            with torch_draws(eps), opt_b.sampled_params(train=True):
                opt_b.zero_grad()
                quadratic(pb, A, C).backward()
                for p, a in zip(pb, A):
                    p.ggn = a
                theta_b = [p.detach().clone() for p in pb]
            for a, b in zip(theta_a, theta_b):
                torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
        opt_a.step()
        opt_b.step()
        for a, b in zip(pa, pb):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    states_close(opt_a, pa, opt_b, pb, rtol=1e-6, atol=1e-6)


def test_sampling_noise_distribution_and_restore():
    tr = triton_module("ivon")
    params = [torch.nn.Parameter(torch.zeros(60000)), torch.nn.Parameter(torch.zeros(40000))]
    opt = optimizer_class(tr)(params, lr=0.1, ess=4.0, hess_init=1.0, weight_decay=0.0)
    means = [p.detach().clone() for p in params]
    draws = []
    for _ in range(2):
        with opt.sampled_params():
            theta = torch.cat([p.detach().flatten() for p in params])
        eps = opt.noise(0)
        # θ = m + ε/sqrt(ess*(h + δ)) with the ε that noise() regenerates from the seed
        torch.testing.assert_close(theta, eps / 2.0, rtol=1e-6, atol=1e-7)
        draws.append(eps)
        assert all(torch.equal(p, m) for p, m in zip(params, means))     # means restored on exit
    n = draws[0].numel()
    for eps in draws:                                   # N(0, 1): mean and variance within 5 standard errors
        assert abs(eps.mean().item()) < 5 / n ** 0.5
        assert abs(eps.var().item() - 1) < 5 * (2 / n) ** 0.5
    corr = torch.corrcoef(torch.stack(draws))[0, 1].item()
    assert abs(corr) < 5 / n ** 0.5                     # a fresh seed per sample
    with pytest.raises(ZeroDivisionError):              # restored also when the body raises
        with opt.sampled_params(train=True):
            1 / 0
    assert all(torch.equal(p, m) for p, m in zip(params, means))


def test_copies_of_the_triton_ivon_continue_like_the_original_and_samples_do_not_nest():
    """copy.deepcopy and pickle re-lay the groups out from self.state (the fp32 buffers are not state_dict
    entries); a copy steps exactly as the original.  Nested sampled_params is an error."""
    import copy
    import io
    tr = triton_module("ivon")
    sys.modules[tr.__name__] = tr                       # pickle finds the class by its module's name
    g = torch.Generator().manual_seed(5)
    A = [torch.rand(s, generator=g) + 0.5 for s in SHAPES]
    C = [torch.randn(s, generator=g) for s in SHAPES]
    params = make_params()
    opt = optimizer_class(tr)(params, lr=0.05, ess=100.0, sync=True)

    def step(o, ps):
        with o.sampled_params(train=True):
            o.zero_grad()
            quadratic(ps, A, C).backward()
        o.step()
    torch.manual_seed(0)
    step(opt, params)
    params2, opt2 = copy.deepcopy((params, opt))
    buf = io.BytesIO()
    torch.save((params, opt), buf)
    buf.seek(0)
    params3, opt3 = torch.load(buf, weights_only=False)
    for o, ps in ((opt, params), (opt2, params2), (opt3, params3)):
        torch.manual_seed(1)
        step(o, ps)
    for a, b, c in zip(params, params2, params3):
        assert torch.equal(a, b) and torch.equal(a, c)
    assert opt2._sync is True and opt3._sync is True
    with opt.sampled_params():
        with pytest.raises(RuntimeError, match="already active"):
            with opt.sampled_params():
                pass


# ----------------------------------------------------------------- recipes whose parameter is an expression of the state
@contextlib.contextmanager
def torch_uniform_draws(u):
    """Make the torch target's one flat uniform draw per group return ``u``."""
    orig = torch.rand

    def rand(n, dtype=None, device=None):
        assert n == u.numel()
        return u.clone().to(dtype)

    torch.rand = rand
    try:
        yield
    finally:
        torch.rand = orig


def test_ste_binary_weights_equal_torch_target():
    tr, to = triton_module("ste"), load_generated("ste", "torch")
    pa, pb = make_params(), make_params()
    opt_a, opt_b = optimizer_class(tr)(pa, lr=0.05), optimizer_class(to)(pb, lr=0.05)
    assert all(torch.equal(a, b) for a, b in zip(pa, pb)) and set(pa[0].unique().tolist()) <= {-1.0, 1.0}
    g = torch.Generator().manual_seed(6)
    for _ in range(20):
        for a, b in zip(pa, pb):
            grad = torch.randn(a.shape, generator=g)
            a.grad, b.grad = grad.clone(), grad.clone()
        opt_a.step()
        opt_b.step()
    assert all(torch.equal(a, b) for a, b in zip(pa, pb))                      # sign(lam)
    states_close(opt_a, pa, opt_b, pb, rtol=1e-6, atol=1e-6)


def test_bayesbinn_equals_torch_target_given_the_kernel_uniform_draws():
    """Concrete samples tanh((lam + logit(u)/2)/tau) with u from tl.rand; tanh and sech are printed through exp
    identities (no libdevice), so θ agrees to a few 1e-7 and the statistics, which divide by sech(lam)^2, to
    1e-5 relative.  A linear loss keeps the gradients independent of θ's last bits."""
    tr, to = triton_module("bayesbinn"), load_generated("bayesbinn", "torch")
    kw = dict(lr=0.01, train_set_size=10.0, momentum=0.5, temperature=0.5)
    g = torch.Generator().manual_seed(7)
    A = [torch.randn(s, generator=g) for s in SHAPES]
    pa, pb = make_params(), make_params()
    opt_a, opt_b = optimizer_class(tr)(pa, **kw), optimizer_class(to)(pb, **kw)
    torch.manual_seed(0)
    for _ in range(3):
        with opt_a.sampled_params(train=True):
            opt_a.zero_grad()
            sum((a * p).sum() for a, p in zip(A, pa)).backward()
            theta_a = [p.detach().clone() for p in pa]
        u = opt_a.noise(0)
        assert 0 <= u.min() and u.max() < 1 and abs(u.mean().item() - 0.5) < 5 * (1 / 12 / u.numel()) ** 0.5
        with torch_uniform_draws(u), opt_b.sampled_params(train=True):
            opt_b.zero_grad()
            sum((a * p).sum() for a, p in zip(A, pb)).backward()
            theta_b = [p.detach().clone() for p in pb]
        for a, b in zip(theta_a, theta_b):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
        opt_a.step()
        opt_b.step()
    assert all(torch.equal(a, b) for a, b in zip(pa, pb))                      # sign(lam)
    states_close(opt_a, pa, opt_b, pb, rtol=1e-5, atol=1e-4)


# ----------------------------------------------------------------- low-precision parameters
def test_bf16_params_fp32_state():
    """bf16 parameters and gradients, fp32 state and arithmetic: the torch target run in fp32 whose parameters
    are rounded to bf16 after every step gives the same state, and parameters within one bf16 rounding."""
    tr, to = triton_module("adam"), load_generated("adam", "torch")
    pa = make_params(dtype=torch.bfloat16)
    pb = [torch.nn.Parameter(p.detach().float()) for p in pa]
    opt_a, opt_b = optimizer_class(tr)(pa, lr=1e-2), optimizer_class(to)(pb, lr=1e-2)
    g = torch.Generator().manual_seed(4)
    for _ in range(20):
        for a, b in zip(pa, pb):
            grad = torch.randn(a.shape, generator=g).bfloat16()
            a.grad, b.grad = grad, grad.float()
        opt_a.step()
        opt_b.step()
        for a, b in zip(pa, pb):
            assert a.dtype == torch.bfloat16
            torch.testing.assert_close(a.float(), b.bfloat16().float(), rtol=2 ** -8, atol=1e-6)
            with torch.no_grad():
                b.copy_(a.float())                      # the bf16 mean both continue from
    assert all(opt_a.state[p]["exp_avg_sq"].dtype == torch.float32 for p in pa)
    states_close(opt_a, pa, opt_b, pb, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------- code generation
def test_triton_target_covers_the_torch_recipes_and_rejects_the_rest():
    names = {p.stem for p in (GENERATED / "triton").glob("*.py")} - {"__init__"}
    assert {"sgd", "rmsprop", "adam", "adamw", "ogn", "vogn", "ivon", "ste", "bayesbinn"} <= names
    with pytest.raises(CodegenError, match="triton target needs an elementwise"):
        generate(CATALOG / "newton.yaml", "triton")


def test_kernel_source_has_one_update_kernel_and_no_libdevice():
    text = (GENERATED / "triton" / "ivon.py").read_text(encoding="utf-8")
    assert text.count("def _update_kernel(") == 1 and text.count("@triton.jit") >= 3
    assert "libdevice" not in text and "tl.randn(_seed" in text
    assert "beta1**t" in text.split("def step(")[1]      # host scalar: computed on the host, not in the kernel


def test_printer_rejects_libdevice_functions():
    from blr_derive.codegen.backends.triton.printer import TritonPrinter
    x = sp.Symbol("x")
    with pytest.raises(CodegenError, match="libdevice"):
        TritonPrinter().doprint(sp.loggamma(x))
    p = TritonPrinter()
    assert p.doprint(sp.log(1 + x)) == "_log1p(x)" and "_log1p" in p.helpers


# ----------------------------------------------------------------- the GPU path, compiled without a GPU
COMPILE_CHECK = r"""
import contextlib, inspect, json, sys, warnings
warnings.simplefilter("ignore")
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
sys.path.insert(0, sys.argv[1])
from conftest import load_generated
report = {}
for name in sys.argv[2:]:
    mod = load_generated(name, "triton")          # TRITON_INTERPRET unset: JIT kernels, never launched here
    calls = {}

    class Recorder:
        def __init__(self, name, calls):
            self.name, self.calls = name, calls
        def __getitem__(self, grid):
            return lambda *args, **kwargs: self.calls.setdefault(self.name, (args, kwargs))

    kernels = [k for k in ("_update_kernel", "_draw_kernel", "_collect_kernel", "_point_kernel") if hasattr(mod, k)]
    jit = {k: getattr(mod, k) for k in kernels}
    for k in kernels:
        setattr(mod, k, Recorder(k, calls))
    cls = [v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, torch.optim.Optimizer)
           and v.__module__ == mod.__name__][0]
    params = [torch.nn.Parameter(torch.randn(3000).bfloat16()) for _ in range(2)]
    opt = cls(params, lr=1e-2, **({"ess": 10.0} if name == "ivon" else {}))
    with (opt.sampled_params(train=True) if hasattr(opt, "sampled_params") else contextlib.nullcontext()):
        for p in params:
            p.grad = torch.ones_like(p)
    opt.step()
    out = {}
    for k, (args, kwargs) in calls.items():
        kernel = jit[k]
        names = list(inspect.signature(kernel.fn).parameters)
        values = dict(zip(names, args), **kwargs)
        sig, consts, attrs = {}, {}, {}
        for i, (n, param) in enumerate(zip(names, kernel.params)):
            v = values[n]
            if param.is_constexpr:
                sig[n], consts[(i,)] = "constexpr", v
            elif torch.is_tensor(v):
                sig[n] = {torch.float32: "*fp32", torch.int64: "*i64"}[v.dtype]
                if v.data_ptr() % 16 == 0:            # as the launcher specializes aligned pointers
                    attrs[(i,)] = [["tt.divisibility", 16]]
            else:
                sig[n] = "i32" if isinstance(v, int) else "fp32"
        c = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs),
                           target=GPUTarget("cuda", 90, 32))
        ptx = c.asm["ptx"]
        out[k] = {"cubin": len(c.asm["cubin"]), **{op: ptx.count(op) for op in ("div.rn.f32", "sqrt.rn.f32", "st.global",
                                                                                "ld.global.v4", "st.global.v4")}}
    report[name] = out
print(json.dumps(report))
"""


def test_kernels_compile_for_a_gpu():
    """The interpreter does not run Triton's compiler: compile every kernel a step launches (with that launch's
    constexpr flags and bf16 parameters) to PTX and a cubin for sm_90, with the ptxas bundled in the triton
    wheel, in a fresh process (an interpreted launch leaves triton.language patched for the interpreter)."""
    import json
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", COMPILE_CHECK, str(GENERATED.parent.parent / "tests"), "adam", "ivon",
                        "bayesbinn"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(out["adam"]) == {"_update_kernel"}
    assert set(out["ivon"]) == {"_update_kernel", "_draw_kernel", "_collect_kernel"}
    assert set(out["bayesbinn"]) == {"_update_kernel", "_draw_kernel", "_collect_kernel", "_point_kernel"}
    assert all(v["cubin"] > 0 and v["st.global"] > 0 for r_ in out.values() for v in r_.values())
    # IEEE division and square root, as torch computes them
    assert out["adam"]["_update_kernel"]["div.rn.f32"] > 0 and out["adam"]["_update_kernel"]["sqrt.rn.f32"] > 0
    assert out["ivon"]["_draw_kernel"]["sqrt.rn.f32"] > 0
    # whole aligned blocks use 128-bit accesses: Adam's update loads m, g (bf16) and u, s, stores m, u, s vectorized
    assert out["adam"]["_update_kernel"]["ld.global.v4"] >= 2 + 2 * 2 and out["adam"]["_update_kernel"]["st.global.v4"] >= 5


def test_per_parameter_step_counts_follow_the_torch_target():
    """A parameter that starts receiving gradients late keeps its own step count (bias correction), as in the
    torch target and torch.optim: the group's tensors are launched in buckets of equal step."""
    tr, to = triton_module("adam"), load_generated("adam", "torch")
    pa, pb = make_params(), make_params()
    opt_a, opt_b = optimizer_class(tr)(pa, lr=1e-2), optimizer_class(to)(pb, lr=1e-2)
    g = torch.Generator().manual_seed(5)
    for k in range(6):
        for i, (a, b) in enumerate(zip(pa, pb)):
            grad = torch.randn(a.shape, generator=g) if (i == 0 or k >= 3) else None
            a.grad, b.grad = (None, None) if grad is None else (grad.clone(), grad.clone())
        opt_a.step()
        opt_b.step()
    assert [float(opt_a.state[p]["step"]) for p in pa] == [6.0, 3.0]
    for a, b in zip(pa, pb):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    states_close(opt_a, pa, opt_b, pb, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------- the BLR objective (issue 42)
OBJECTIVE = [("adam", dict(lr=1e-2, weight_decay=0.1), 1.25), ("ogn", dict(lr=0.1, ess=100.0), 1.25),
             ("ivon", dict(lr=0.05, ess=100.0), [1.0, 3.0, 2.5]), ("vogn", dict(lr=0.05, ess=100.0), [1.0, 3.0]),
             ("bayesbinn", dict(lr=0.01, train_set_size=10.0, prior_p=0.3), [0.5, 0.25]),
             ("ste", dict(lr=0.05), 0.75),
             # the gradient at an adversarial point: sam's delta value at m, bsam's Monte Carlo value (issue 42)
             ("sam", dict(lr=0.1, wdecay=0.2), 1.25), ("bsam", dict(ess=20.0, wdecay=0.05), [1.0, 1.5, 0.25])]


@pytest.mark.parametrize("name,kw,loss", OBJECTIVE, ids=[n for n, _, _ in OBJECTIVE])
def test_objective_equals_torch_target(name, kw, loss):
    """objective() of the Triton optimizer (a host-side float64 computation from its fp32 state buffers) equals
    the torch target's at the same state: every state set to the same positive values."""
    tr, to = triton_module(name), load_generated(name, "torch")
    pa, pb = make_params(), make_params()
    opt_a, opt_b = optimizer_class(tr)(pa, **kw), optimizer_class(to)(pb, **kw)
    opt_a._layout(opt_a.param_groups[0])
    g = torch.Generator().manual_seed(11)
    for a, b in zip(pa, pb):
        st_b = opt_b._state(b, opt_b.param_groups[0])
        for key, v in st_b.items():
            if key != "step" and v.shape == b.shape:
                x = torch.rand(b.shape, generator=g) + 0.5
                v.copy_(x)
                opt_a.state[a][key].copy_(x)
    got, want = opt_a.objective(loss), opt_b.objective(loss)
    assert got["estimate"] == want["estimate"] and got["samples"] == want["samples"]
    for k in ("objective", "expected_loss", "entropy"):
        assert abs(got[k] - want[k]) <= 1e-13 * max(1.0, abs(want[k])), (k, got[k], want[k])
