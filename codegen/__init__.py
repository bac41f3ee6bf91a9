"""Code generation: the update IR (``blr_derive/ir``) rendered for a target.

Each target is a package ``codegen/backends/<target>/`` (SymForce's backend layout): ``config.py`` (a
:class:`~blr_derive.codegen.config.TargetConfig`: file suffix, allowed imports, template, the IR kinds it
renders), ``printer.py`` (sympy printer subclasses with ``KNOWN_FUNCTIONS`` tables), ``templates/`` (jinja2) and
the renderer in ``__init__.py``.  Targets are discovered in one place (:mod:`blr_derive.codegen.registry`);
what every generated module shares — escaping recipe text, validating names, auditing the output — is
:mod:`blr_derive.codegen.inert`.
"""
from __future__ import annotations

from blr_derive.codegen.registry import TARGETS, emit, get_target

__all__ = ["TARGETS", "emit", "get_target"]
