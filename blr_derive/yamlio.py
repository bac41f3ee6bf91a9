"""Safe YAML loading that remembers line numbers.

Only ``yaml.SafeLoader`` node composition is used (no Python object tags).  Mappings
become :class:`LDict` and sequences :class:`LList`; both know the 1-based line of
each entry so errors can name the line of the offending value.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from .errors import SpecError


class LDict(dict):
    """A dict that knows the source line of itself and of each key."""

    file: str | None = None
    line: int | None = None

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.lines: dict = {}

    def line_of(self, key) -> int | None:
        return self.lines.get(key, self.line)


class LList(list):
    file: str | None = None
    line: int | None = None

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.lines: list = []

    def line_of(self, i) -> int | None:
        return self.lines[i] if 0 <= i < len(self.lines) else self.line


_DEFAULT_TAGS = {yaml.MappingNode: "tag:yaml.org,2002:map", yaml.SequenceNode: "tag:yaml.org,2002:seq"}


def _convert(node, loader, file, seen=None):
    seen = set() if seen is None else seen
    if id(node) in seen:
        raise SpecError("YAML anchors and aliases are not supported", file, node.start_mark.line + 1)
    seen.add(id(node))
    if type(node) in _DEFAULT_TAGS and node.tag != _DEFAULT_TAGS[type(node)]:
        raise SpecError(f"YAML tag '{node.tag}' is not allowed", file, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out = LDict()
        out.file, out.line = file, node.start_mark.line + 1
        for knode, vnode in node.value:
            if not isinstance(knode, yaml.ScalarNode):
                raise SpecError("mapping keys must be plain strings", file, knode.start_mark.line + 1)
            key = loader.construct_object(knode)
            if not isinstance(key, str):
                key = str(key)
            if key in out:
                raise SpecError(f"duplicate key '{key}'", file, knode.start_mark.line + 1)
            out[key] = _convert(vnode, loader, file, seen)
            out.lines[key] = knode.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        out = LList()
        out.file, out.line = file, node.start_mark.line + 1
        for item in node.value:
            out.append(_convert(item, loader, file, seen))
            out.lines.append(item.start_mark.line + 1)
        return out
    return loader.construct_object(node)


MAX_NESTING = 64


def _check_nesting(text, file):
    """Reject deeply nested collections from the event stream (flat, no recursion) before composing nodes,
    which recurses once per level (``[[[[...]]]]`` would exhaust the Python stack)."""
    depth = 0
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_NESTING:
                raise SpecError(f"YAML nested deeper than {MAX_NESTING} levels", file, ev.start_mark.line + 1)
        elif isinstance(ev, yaml.CollectionEndEvent):
            depth -= 1


def load_yaml_text(text: str, file: str = "<string>"):
    loader = yaml.SafeLoader(text)
    try:
        _check_nesting(text, file)
        node = loader.get_single_node()
        if node is None:
            raise SpecError("empty document", file, 1)
        return _convert(node, loader, file)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = (exc.problem or exc.context or "malformed YAML").strip()
        raise SpecError(f"malformed YAML: {problem}", file, line) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"malformed YAML: {str(exc).splitlines()[0]}", file, None) from None
    finally:
        loader.dispose()


def load_yaml_file(path) -> object:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("file not found", str(path), None) from None
    except UnicodeDecodeError as exc:                  # name the line of the first byte that is not UTF-8
        line = exc.object[:exc.start].count(b"\n") + 1
        raise SpecError(f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x})", str(path), line) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read file ({type(exc).__name__})", str(path), None) from None
    return load_yaml_text(text, str(path))


def check_keys(mapping, allowed, required=(), what="mapping"):
    """Reject unknown keys and missing required keys with a located error."""
    if not isinstance(mapping, dict):
        raise SpecError(f"{what} must be a mapping", getattr(mapping, "file", None), getattr(mapping, "line", None))
    for key in mapping:
        if key not in allowed:
            raise SpecError(
                f"unknown key '{key}' in {what} (allowed: {', '.join(sorted(allowed))})",
                mapping.file if isinstance(mapping, LDict) else None,
                mapping.line_of(key) if isinstance(mapping, LDict) else None,
            )
    for key in required:
        if key not in mapping:
            raise SpecError(
                f"missing required key '{key}' in {what}",
                mapping.file if isinstance(mapping, LDict) else None,
                mapping.line if isinstance(mapping, LDict) else None,
            )


def where(container, key=None):
    """(file, line) of a container entry, for error messages."""
    file = getattr(container, "file", None)
    if key is None:
        return file, getattr(container, "line", None)
    if isinstance(container, (LDict, LList)):
        return file, container.line_of(key)
    return file, None
