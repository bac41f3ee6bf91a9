"""A Triton kernel's signature and its launches come from one description (codegen/backends/triton/kernels.py):
printed from it, and in every generated triton module each launch passes the constexprs its kernel declares."""
from __future__ import annotations

import ast

import pytest

from blr_derive.codegen.backends.triton.kernels import Kernel, KernelArg, arg, constexpr
from conftest import GENERATED


def test_signature_and_launch_from_one_description():
    k = Kernel("_k", (arg("_chunks", "chunks"), KernelArg(("_buf_a", "_buf_b"), "*_stats", "stats"),
                      KernelArg((), "*flags", "flags"), constexpr("BLOCK", "BLOCK")))
    assert k.signature == "_chunks, _buf_a, _buf_b, BLOCK: tl.constexpr"
    assert k.launch() == "_k[(chunks.shape[0],)](chunks, *_stats, *flags, BLOCK=BLOCK)"
    assert k.launch(_chunks="rows", BLOCK="256") == "_k[(chunks.shape[0],)](rows, *_stats, *flags, BLOCK=256)"
    with pytest.raises(KeyError, match="_k has no argument _seed"):
        k.launch(_seed="0")


def _kernels_and_launches(tree):
    defs, calls = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name.endswith("_kernel"):
            defs[node.name] = [a.arg for a in node.args.args]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
              and isinstance(node.func.value, ast.Name) and node.func.value.id.endswith("_kernel")):
            calls.append((node.func.value.id, node))
    return defs, calls


@pytest.mark.parametrize("path", sorted(p for p in (GENERATED / "triton").glob("*.py") if p.stem != "__init__"),
                         ids=lambda p: p.stem)
def test_every_launch_matches_its_kernel(path):
    """Each launch names a kernel of the module, passes as keywords exactly the kernel's upper-case constexprs, and
    no more positional arguments than the kernel has parameters before them (a starred group may stand for none)."""
    defs, calls = _kernels_and_launches(ast.parse(path.read_text(encoding="utf-8")))
    assert calls and "_update_kernel" in defs
    for name, call in calls:
        params = defs[name]
        keywords = [p for p in params if p.isupper()]
        assert [kw.arg for kw in call.keywords] == keywords, name
        positional = [a for a in call.args if not isinstance(a, ast.Starred)]
        assert len(positional) <= len(params) - len(keywords), name
        if not any(isinstance(a, ast.Starred) for a in call.args):
            assert len(call.args) == len(params) - len(keywords), name
