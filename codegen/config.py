"""The configuration of a code generation target (SymForce's ``CodegenConfig`` model): what a backend package
declares in its ``config.py``; the renderer and printer live beside it (``__init__.py``, ``printer.py``) and the
jinja2 templates in its ``templates/`` folder."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TargetConfig:
    name: str
    suffix: str                       # of a generated file
    modules: frozenset[str]           # what a generated module may import (checked by codegen.inert.audit)
    template: str                     # the main template, in the backend's templates/ folder
    structures: tuple[str, ...] = ("single",)   # the IR kinds it renders: "single" (UpdateIR), "product" (FactorizedIR)
    description: str = ""
