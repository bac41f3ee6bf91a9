"""Plain-text (ASCII) rendering of sympy expressions, for generated-code headers and terminal output."""
from __future__ import annotations

import sympy as sp


def plain(e) -> str:
    """``x**2`` as ``x^2``, ``x**(-1)`` as ``x^-1`` (sympy's str printer otherwise)."""
    s = sp.sstr(e)
    return s.replace("**(-1)", "^-1").replace("**", "^")
