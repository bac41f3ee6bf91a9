"""benchmarks/gpu_check.py (issue 39, item 7): the script a CUDA machine runs to compare the generated torch and
Triton optimizers with torch.optim.  Without a GPU it runs on CPU tensors (the Triton kernels in Triton's
interpreter, which tests/conftest.py turns on): every default and foreach path of the generated torch optimizers
equals torch.optim's bit for bit, every comparison is within float32 rounding, and a comparison outside the
tolerance is reported as a failure with exit status 1."""
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rows():
    return gpu_check.check("cpu", numel=48, tensors=2, steps=3, tol=1e-5)


def test_every_catalog_peer_is_compared_on_every_path(rows):
    seen = {(r, t, p) for r, t, p, _, _ in rows}
    for recipe in gpu_check.PEERS:
        assert {(recipe, "torch", p) for p in gpu_check.PATHS} <= seen
        assert (recipe, "triton", "kernel") in seen
    assert not [r for r in rows if r[3] == "FAIL"], rows


def test_default_and_foreach_paths_are_bitwise(rows):
    bitwise = {(r, p): what for r, t, p, status, what in rows if t == "torch" and p in ("default", "foreach")}
    # NAdam's default path on CPU is torch's for-loop, whose sqrt(s/(1-b2^t)) the foreach path computes as
    # sqrt(s)/sqrt(1-b2^t): the generated NAdam equals the foreach path (tests/peers/torch_optim/
    # test_torch_order_bitwise.py), and differs from the for-loop by float32 rounding only
    assert all(float(d) == 0.0 for (r, p), d in bitwise.items() if (r, p) != ("nadam", "default")), bitwise
    assert float(bitwise[("nadam", "default")]) < 1e-6


def test_a_difference_beyond_the_tolerance_fails_with_status_1(rows):
    # the tensors of the rows fixture (two of 48 elements), after it (the fixture makes the test run on its xdist
    # worker, tests/conftest.py): the fused paths' kernels are those the fixture compiled, read from torch inductor's
    # cache instead of compiled again
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--numel",
                          "48", "--tensors", "2", "--steps", "2", "--tol", "0", "--targets", "torch"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL" in out.stdout and " failed" in out.stdout and "0 failed" not in out.stdout


def test_without_cuda_the_gpu_run_says_so_and_exits_0():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0 and "no CUDA device here" in out.stdout, out.stdout + out.stderr
