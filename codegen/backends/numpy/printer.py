"""The numpy target's printer: the shared array printer (:mod:`blr_derive.codegen.arrays.printer`) with its numpy
and scipy names as they are, and the sources of the helpers a module defines when its code calls them."""
from __future__ import annotations

import inspect
from pathlib import Path

from blr_derive.codegen.arrays.printer import MATH_FALLBACKS, ArrayPrinter, known_function_table
from blr_derive.codegen.source import SHARED, definition
from blr_derive.core import specialfns

__all__ = ["HELPERS", "MATH_FALLBACKS", "RUNTIME", "BLRNumPyPrinter", "known_function_table"]

#: the target's runtime source (codegen/source.py)
RUNTIME = Path(__file__).parent / "runtime.py"

#: helper name -> its source in a generated module: the numpy target's runtime source, the one it shares with
#: the jax target (codegen/runtime/arrays.py), and the engine's own ∂ⁿK_ν(x)/∂νⁿ (the trapezoidal rule on its
#: integral, copied into the module)
HELPERS = {
    **{name: definition(SHARED / "arrays.py", name) for name in ("_tanh_sinh", "_need", "_hermite_nodes")},
    "_dbesselk": inspect.getsource(specialfns.dbesselk_numpy).replace("def dbesselk_numpy(", "def _dbesselk(", 1),
    **{name: definition(RUNTIME, name) for name in ("_array", "_check_domain", "_spd_solve", "_logdet", "_tri_solve",
                                                     "_expm_sym", "_gauss_hermite", "_gauss_hermite_stein",
                                                     "_eigenbasis", "_rayleigh_order", "_power_basis",
                                                     "_reordered", "_exp1e", "_ive")},
}


class BLRNumPyPrinter(ArrayPrinter):
    """numpy and scipy expressions of the update IR (vectors as 1-D arrays, solves as Cholesky solves); no
    ``math.*`` name (the array printer's known-function table: :data:`MATH_FALLBACKS`), every printed module
    recorded in ``imports``."""
