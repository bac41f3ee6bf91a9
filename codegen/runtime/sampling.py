"""Runtime source shared by the optimizer targets' Monte Carlo modules (torch and triton): copied into a generated
module by its templates (codegen/source.py), tested directly (tests/unit/codegen/test_runtime_sources.py)."""
from __future__ import annotations


def _ranks(values):
    """The rank of each value among them, 1 for the lowest; ties keep their order, NaN ranks last."""
    order = sorted(range(len(values)), key=lambda k: (values[k] != values[k], values[k] if values[k] == values[k] else 0.0))
    out = [0] * len(values)
    for r, k in enumerate(order):
        out[k] = r + 1
    return out
