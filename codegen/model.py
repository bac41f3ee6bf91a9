"""Which kind of update IR a target is asked to render."""
from __future__ import annotations

from blr_derive.ir.model import FactorizedIR


def structure_of(ir) -> str:
    return "product" if isinstance(ir, FactorizedIR) else "single"
