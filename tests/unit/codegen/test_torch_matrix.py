"""The torch target's per-parameter path for recipes with matrix state (codegen/backends/torch/matrix.py): the
numpy target's printed array program with its names mapped to the torch module's, and what it refuses.  The
generated optimizers are checked against their peers in tests/peers/soap/test_soap_torch.py and
tests/peers/evon/test_evon.py."""
from __future__ import annotations

import types

import pytest

from blr_derive.codegen.backends.torch.matrix import UFUNCS, torch_code
from blr_derive.core.errors import UnsupportedTarget
from conftest import CATALOG

IR = types.SimpleNamespace(recipe="r")


def test_numpy_functions_become_the_modules_ufunc_and_constants_math():
    assert torch_code(IR, "numpy.sqrt(x) + numpy.minimum(c, numpy.maximum(y, -c))") == \
        '_ufunc("sqrt", x) + _ufunc("minimum", c, _ufunc("maximum", y, -c))'
    assert torch_code(IR, "(A if numpy.equal(numpy.mod(t, T), 0) else B)") == \
        '(A if _ufunc("equal", _ufunc("mod", t, T), 0) else B)'
    assert torch_code(IR, "numpy.where(x > 0, x, numpy.nan)") == '_ufunc("where", x > 0, x, math.nan)'
    assert torch_code(IR, "Q_L.T @ G @ Q_R") == "Q_L.T @ G @ Q_R"       # products and transposes as they are
    assert torch_code(IR, "mynumpy.sqrt(x)") == "mynumpy.sqrt(x)"         # only the module's own name


@pytest.mark.parametrize("code, name", [("numpy.linalg.det(A)", "numpy.linalg.det"),
                                        ("numpy.outer(a, b)", "numpy.outer"),
                                        ("scipy.special.gammaln(x)", "scipy.special.gammaln"),
                                        ("numpy.float64", "numpy.float64")])
def test_anything_else_is_refused_naming_it(code, name):
    with pytest.raises(UnsupportedTarget, match=f"{name} has no counterpart"):
        torch_code(IR, code)
    assert name.split(".")[1].split("(")[0] not in UFUNCS


def test_the_command_line_writes_soap_for_torch_and_triton_still_refuses_it(tmp_path, capsys):
    from blr_derive.cli import main
    out = tmp_path / "soap_opt.py"
    assert main([str(CATALOG / "soap.yaml"), "--target", "torch", "-o", str(out)]) == 0
    text = out.read_text()
    assert "class SOAP(torch.optim.Optimizer)" in text and "def init_state(self, _p, /, **state)" in text
    assert "_foreach" not in text and "import numpy" not in text
    capsys.readouterr()
    bad = tmp_path / "soap_triton.py"
    assert main([str(CATALOG / "soap.yaml"), "--target", "triton", "-o", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "soap.yaml:19:" in err and "is a matrix" in err and "Traceback" not in err
    assert not bad.exists()
