"""Typed hand-offs from a target's renderer to its templates (issue 38, item 3): each template is rendered from
one dataclass, its *render context*, whose fields are the names the template reads (and the views inside it are
TypedDicts with their keys), instead of tens of keyword arguments and untyped dicts.  A field a template reads that
the context lacks is an error when the template is rendered (the environment is strict about undefined names)."""
from __future__ import annotations

import dataclasses
from typing import Any, Protocol


class _Environment(Protocol):
    def get_template(self, name: str) -> Any: ...


def fields_of(context: Any) -> dict[str, Any]:
    """The context's fields by name, as the template reads them (not copied: views stay the objects built)."""
    if not dataclasses.is_dataclass(context) or isinstance(context, type):
        raise TypeError(f"a render context is a dataclass instance, not {type(context).__name__}")
    return {f.name: getattr(context, f.name) for f in dataclasses.fields(context)}


def render(env: _Environment, template: str, context: Any) -> str:
    """Render the template named ``template`` of ``env`` with the fields of ``context``."""
    return env.get_template(template).render(fields_of(context))
