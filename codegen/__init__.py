"""Code generation: the update IR (``blr_derive/ir``) rendered for a target.

Each target is a package ``codegen/backends/<target>/`` (SymForce's backend layout): ``config.py`` (a
:class:`~blr_derive.codegen.config.TargetConfig`: file suffix, allowed imports, template, the IR kinds it
renders), ``printer.py`` (sympy printer subclasses with ``KNOWN_FUNCTIONS`` tables), ``templates/`` (jinja2) and
the renderer in ``__init__.py``.  Adding a target is adding such a package: :data:`TARGET_NAMES` lists them
(without importing them, so that the command line can name the targets cheaply) and
:mod:`blr_derive.codegen.registry` loads them (``emit``, ``get_target``).  What every generated module shares —
escaping recipe text, validating names, auditing the output — is :mod:`blr_derive.codegen.inert`.
"""
from __future__ import annotations

import pkgutil
from pathlib import Path

#: the target names: the packages of codegen/backends, in name order
TARGET_NAMES = tuple(sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent / "backends")])
                            if m.ispkg))
