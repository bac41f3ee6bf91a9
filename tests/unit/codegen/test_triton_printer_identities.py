"""The Triton printer's core-math identities (codegen/backends/triton/printer.py) evaluated in Triton against float64.

Functions without a Triton core primitive are printed through identities (tanh, sech, log1p, softplus,
xlogy, logsumexp, cosh, sign, expm1, log1mexp).  Each is compiled here into a one-line kernel and run by the Triton
interpreter (``TRITON_INTERPRET=1``, set before triton is imported, as in tests/unit/codegen/test_triton.py) on
float32 inputs that include saturated and tiny arguments; the results are compared with float64 values."""
import importlib.util
import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import sympy as sp  # noqa: E402
import torch  # noqa: E402

from blr_derive.codegen.cancel import expm1, log1mexp  # noqa: E402
from blr_derive.core.specialfns import logsumexp, softplus, xlogy  # noqa: E402
from blr_derive.codegen.backends.triton.printer import HELPERS, TritonPrinter  # noqa: E402

X, Y = sp.symbols("x y", real=True)
XS = np.array([-60.0, -20.0, -9.5, -3.0, -0.7, -1e-3, -1e-9, 0.0, 1e-9, 1e-3, 0.4, 2.5, 9.5, 20.0, 60.0,
               -30.0, 30.0, 5e-8, -5e-8, 1.0, 7.0, -7.0, 15.0, -15.0, 0.25, -0.25, 3.3, -3.3, 12.0, -12.0,
               0.05, -0.05])
YS = np.linspace(0.05, 8.0, XS.size)

CASES = [   # (name, expression, float64 reference of (x, y)); observed worst errors: absolute <= 5e-7,
            # relative <= 3e-7 elsewhere
    ("tanh", sp.tanh(X), lambda x, y: np.tanh(x)),
    ("sech", sp.sech(X), lambda x, y: 1 / np.cosh(x)),
    ("log1p", sp.log(1 + X), lambda x, y: np.log1p(x)),
    ("softplus", softplus(X), lambda x, y: np.logaddexp(0, x)),
    ("xlogy", xlogy(X, Y), lambda x, y: np.where(x == 0, 0.0, x * np.log(y))),
    ("logsumexp", logsumexp(X, Y), lambda x, y: np.logaddexp(x, y)),
    ("cosh", sp.cosh(X), lambda x, y: np.cosh(x)),
    ("sign", sp.sign(X), lambda x, y: np.sign(x)),
    ("pow5", X**5, lambda x, y: x**5),                 # integer powers of negative numbers (beyond x*x*x*x)
    ("pow6_over", Y / X**6, lambda x, y: y / x**6),
    ("expm1", expm1(X), lambda x, y: np.expm1(x)),                      # the difference lowering's (codegen/cancel.py)
    ("log1mexp", log1mexp(X), lambda x, y: np.where(x > -np.log(2), np.log(-np.expm1(x)),
                                                    np.log1p(-np.exp(np.minimum(x, -np.log(2)))))),
]
ARG = {"log1p": np.abs, "cosh": lambda x: np.clip(x, -30, 30), "pow5": lambda x: np.clip(x, -9, 9),
       "pow6_over": lambda x: np.where(np.abs(x) < 0.05, -1.5, np.clip(x, -9, 9)),
       "log1mexp": lambda x: np.where(x == 0, -1e-30, -np.abs(x))}      # inputs in the function's domain


def kernel_module(tmp_path, name, expr):
    p = TritonPrinter()
    body = p.doprint(expr)
    src = ["import triton", "import triton.language as tl", ""]
    src += [HELPERS[h] for h in sorted(p.helpers)]
    src += ["@triton.jit",
            "def kernel(X, Y, OUT, N: tl.constexpr):",
            "    offs = tl.arange(0, N)",
            "    x = tl.load(X + offs)",
            "    y = tl.load(Y + offs)",
            f"    tl.store(OUT + offs, {body})", ""]
    path = tmp_path / f"_triton_identity_{name}.py"
    path.write_text("\n".join(src))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.filterwarnings("ignore:(divide by zero|invalid value|overflow):RuntimeWarning")
@pytest.mark.parametrize("name, expr, ref", CASES, ids=[c[0] for c in CASES])
def test_printed_identity_equals_float64(tmp_path, name, expr, ref):
    x = ARG.get(name, lambda v: v)(XS).astype(np.float32)
    y = YS.astype(np.float32)
    out = torch.empty(x.size, dtype=torch.float32)
    kernel_module(tmp_path, name, expr).kernel[(1,)](torch.from_numpy(x), torch.from_numpy(y), out, N=x.size)
    want = ref(x.astype(np.float64), y.astype(np.float64))
    got = out.numpy().astype(np.float64)
    assert np.all(np.isfinite(got)), (name, got)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7, err_msg=name)
    if name in ("tanh", "sech", "sign", "expm1", "log1mexp"):   # tiny arguments (and values) keep their relative accuracy
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=0, err_msg=name)
