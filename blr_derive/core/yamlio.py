"""Safe YAML loading that remembers line numbers.

Only ``yaml.SafeLoader`` node composition is used (no Python object tags).  Mappings
become :class:`LDict` and sequences :class:`LList`; both know the 1-based line of
each entry so errors can name the line of the offending value.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import stat
from contextlib import contextmanager

import yaml

from blr_derive.core.errors import SpecError
from blr_derive.core.text import Prose, did_you_mean, quote

#: recipe and family files are small (the largest bundled one is a few kB): a larger file, or anything that is
#: not a regular file (a FIFO, /dev/zero, a directory), is refused before it is read
MAX_FILE_BYTES = 1 << 20
#: integers beyond what a double can hold are not numbers any declaration needs
MAX_INT = 2 ** 1023
#: a base-60 integer (YAML 1.1's 1:30:00) of more parts than this is beyond MAX_INT (60**173 > 2**1022)
MAX_SEXAGESIMAL_PARTS = 180


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
            key = _convert(knode, loader, file, seen)
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
    if node.tag == "tag:yaml.org,2002:int" and node.value.count(":") > MAX_SEXAGESIMAL_PARTS:
        # YAML 1.1's base-60 integers (1:30:00) are built digit by digit, quadratic in their length: 500 000
        # parts took 86 s before 'number too large'; 60**180 is beyond MAX_INT whatever the digits
        raise SpecError("number too large", file, node.start_mark.line + 1)
    try:
        value = loader.construct_object(node)
    except (ValueError, OverflowError):          # e.g. an integer of 5000 digits (int-to-str limit)
        raise SpecError("number too large", file, node.start_mark.line + 1) from None
    if isinstance(value, str) and not node.style and _EXPONENT_FLOAT.fullmatch(value):
        # YAML 1.1 (PyYAML) reads 1e-8 as text, YAML 1.2 and every user as a number
        value = float(value)
        if not math.isfinite(value):
            raise SpecError("number too large", file, node.start_mark.line + 1)
    if isinstance(value, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise SpecError("a string holds an unpaired surrogate (\\ud800-\\udfff): not valid Unicode text", file,
                        node.start_mark.line + 1)
    if isinstance(value, float) and math.isnan(value):
        raise SpecError("not a number (NaN): numbers must be finite", file, node.start_mark.line + 1)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise SpecError("number too large", file, node.start_mark.line + 1)
    return value


#: a number with an exponent that PyYAML's YAML 1.1 resolver reads as text, a float in YAML 1.2 and to every user:
#: no dot (1e-8, 2E5), or a dot and an exponent without its sign (1.5e3, 1.0e308, .5e3; 1.5e+3 is a float to both)
_EXPONENT_FLOAT = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+")

MAX_NESTING = 64


def _check_nesting(text, file, loader=yaml.SafeLoader):
    """Reject anchors, and deeply nested collections, from the event stream (flat, no recursion) before composing nodes,
    which recurses once per level (``[[[[...]]]]`` would exhaust the Python stack); ``loader``: the parser whose
    events are read (libyaml's on the fast path)."""
    depth = 0
    for ev in yaml.parse(text, Loader=loader):
        # an anchor is refused where it is declared, used or not (docs/safety.md: anchors and aliases are errors;
        # an alias is also caught as a shared node when converting, but an unused '&x' was accepted)
        if getattr(ev, "anchor", None) is not None:
            raise SpecError("YAML anchors and aliases are not supported", file, ev.start_mark.line + 1)
        if isinstance(ev, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_NESTING:
                raise SpecError(f"YAML nested deeper than {MAX_NESTING} levels", file, ev.start_mark.line + 1)
        elif isinstance(ev, yaml.CollectionEndEvent):
            depth -= 1


def _libyaml_load(text: str, file: str):
    """(the document,) composed by libyaml's parser (PyYAML's C binding, ~20x faster than its pure-Python parser:
    every command line reads two or three files, the fuzz tests thousands), or None where libyaml is missing or
    anything at all goes wrong on the way — the file is then read again by the pure-Python path, which alone
    words every refusal, so messages and lines are the same with and without libyaml.  The text has passed the
    pure-Python reader's check (printable characters) first; the same nesting bound holds before composing;
    scalars are constructed and mappings converted by the same code (:func:`_convert`) on libyaml's nodes.
    tests/unit/core/test_yaml_fast_path.py checks that both paths give the same documents, lines included."""
    if not getattr(yaml, "__with_libyaml__", False):
        return None
    try:
        _check_nesting(text, file, yaml.CSafeLoader)     # too deep: None, and the pure-Python path refuses it
        loader = yaml.CSafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            return (_convert(node, loader, file),)
        finally:
            loader.dispose()
    except Exception:                   # noqa: BLE001 - the pure-Python path reads it again and words the problem
        return None


def load_yaml_text(text: str, file: str = "<string>"):
    if not isinstance(text, str):
        raise SpecError("YAML input must be text", file, None)
    if len(text) > MAX_FILE_BYTES:
        raise SpecError(f"larger than {MAX_FILE_BYTES} characters", file, None)
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:            # control characters, NUL: checked before parsing starts
        line = text[:max(exc.position, 0)].count("\n") + 1
        raise SpecError(f"malformed YAML: {_reader_problem(exc)}", file, line) from None
    fast = _libyaml_load(text, file)
    if fast is not None:
        loader.dispose()
        return fast[0]
    try:
        _check_nesting(text, file)
        node = loader.get_single_node()
        if node is None:
            raise SpecError("empty document", file, 1)
        return _convert(node, loader, file)
    except yaml.reader.ReaderError as exc:
        line = text[:max(exc.position, 0)].count("\n") + 1
        raise SpecError(f"malformed YAML: {_reader_problem(exc)}", file, line) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = (exc.problem or exc.context or "malformed YAML").strip()
        raise SpecError(f"malformed YAML: {quote(problem)}", file, line) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"malformed YAML: {quote(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}",
                        file, None) from None
    except RecursionError:
        raise SpecError("YAML nested too deeply", file, None) from None
    finally:
        loader.dispose()


def _reader_problem(exc) -> str:
    """What PyYAML's reader refused (a control character, NUL, invalid UTF-8), without quoting the input."""
    ch = exc.character if isinstance(exc.character, int) else ord(exc.character)
    if exc.encoding != "unicode":
        return f"byte 0x{ch:02x} is not valid {exc.encoding}"
    return f"character U+{ch:04X} is not allowed (control characters are not printable YAML)"


def read_file_bytes(path, what: str = "file", limit: int = MAX_FILE_BYTES, follow_links: bool = True,
                    check=None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes: every bounded read of a file the user did not write
    (recipes, families, a catalog's generated artifacts, cache entries) goes through here.  Special files (FIFOs,
    devices, sockets, directories) are refused without reading from them: the file is opened non-blocking and
    checked with ``fstat`` before one bounded read.  ``follow_links=False`` refuses a symbolic link at the path
    itself (``O_NOFOLLOW``); ``check(st)``, if given, is called with the ``fstat`` of the open file and may raise
    to refuse it (the cache's ownership rules).  Problems are a :class:`SpecError` located at the path."""
    name = str(path)
    flags = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
             | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0)))
    try:
        fd = os.open(name, flags)
    except FileNotFoundError:
        raise SpecError("file not found", name, None) from None
    except IsADirectoryError:
        raise SpecError(f"is a directory, not a {what}", name, None) from None
    except (OSError, ValueError) as exc:                 # permissions, a NUL byte in the name, a name too long
        if not follow_links and isinstance(exc, OSError) and os.path.islink(name):     # O_NOFOLLOW: ELOOP
            raise SpecError(f"is a symbolic link; a {what} must be a regular file", name, None) from None
        raise SpecError(f"cannot read {what} ({_os_problem(exc)})", name, None) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise SpecError(f"is a directory, not a {what}", name, None)
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(f"is not a regular file (a device, FIFO or socket); a {what} must be a regular file",
                            name, None)
        if check is not None:
            check(st)
        if st.st_size > limit:
            raise SpecError(f"{what} larger than {limit} bytes", name, None)
        data = os.read(fd, limit + 1)
        while len(data) <= limit:                         # a file that grew, or short reads
            more = os.read(fd, limit + 1 - len(data))
            if not more:
                break
            data += more
    except OSError as exc:
        raise SpecError(f"cannot read {what} ({_os_problem(exc)})", name, None) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise SpecError(f"{what} larger than {limit} bytes", name, None)
    return data


def read_text_file(path, what: str = "file", limit: int = MAX_FILE_BYTES, follow_links: bool = True) -> str:
    """The text of a regular file of at most ``limit`` bytes (:func:`read_file_bytes`), decoded as UTF-8 (a
    located error names the line of the first byte that is not).  While :func:`recording_reads` is active, the
    file's path and content digest are recorded: the files a derivation read are what its results depend on."""
    data = read_file_bytes(path, what, limit, follow_links)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:                  # name the line of the first byte that is not UTF-8
        line = data[:exc.start].count(b"\n") + 1
        raise SpecError(f"not UTF-8 text (byte 0x{data[exc.start]:02x})", str(path), line) from None
    if _RECORDERS:
        _record(path, hashlib.sha256(data).hexdigest())
    return text


#: the active :func:`recording_reads` records, innermost last
_RECORDERS: list = []


def _record(path, digest) -> None:
    name = os.path.abspath(str(path))
    for reads in _RECORDERS:
        reads.setdefault(name, digest)


@contextmanager
def recording_reads():
    """Record the files read (:func:`read_text_file`) and looked for but absent (:func:`note_absent`) while the
    block runs: a dict {absolute path: SHA-256 of the bytes read, or None for an absent path}.  A result computed
    in the block is a function of these files (and of the engine), whatever folder or extension they have; see
    :func:`unchanged`."""
    reads: dict = {}
    _RECORDERS.append(reads)
    try:
        yield reads
    finally:
        _RECORDERS.remove(reads)


def note_absent(path) -> None:
    """Record (see :func:`recording_reads`) that ``path`` was looked for and not found: creating it later could
    change what a reference resolves to (a family named by a relative path is looked for in two folders)."""
    if _RECORDERS:
        _record(path, None)


def unchanged(reads) -> bool:
    """Whether every file of a :func:`recording_reads` record still holds the bytes read then (through the same
    bounded reader) and every absent path is still absent."""
    for name, digest in reads.items():
        if digest is None:
            if os.path.lexists(name):
                return False
            continue
        try:
            data = read_file_bytes(name)
        except SpecError:
            return False
        if hashlib.sha256(data).hexdigest() != digest:
            return False
    return True


def _os_problem(exc) -> str:
    return exc.strerror or type(exc).__name__ if isinstance(exc, OSError) else type(exc).__name__


def load_yaml_file(path, what: str = "YAML file") -> object:
    """The parsed YAML of a recipe or family file the command line names.  A file that cannot be read as one (a
    directory, a FIFO or device, one larger than the limit, one the user may not read) is refused at its line 1,
    so that every refusal of an input file is one ``FILE:LINE: problem`` line (docs/safety.md); only a missing
    file keeps ``FILE: file not found``, which has no line to name."""
    try:
        text = read_text_file(path, what)
    except SpecError as exc:
        if exc.line is None and exc.message != "file not found":
            exc.line = 1
        raise
    return load_yaml_text(text, str(path))


def finite_number(value, container, key, what: str, allow_infinite: bool = False):
    """``value`` if it is a finite int or float (``+inf`` too when ``allow_infinite``), else a located error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{what} must be a number", *where(container, key))
    if isinstance(value, float) and not math.isfinite(value) and not (allow_infinite and value == math.inf):
        hint = " (a bound that may be infinite declares allow_infinite: true)" if value == math.inf else ""
        raise SpecError(f"{what} must be a finite number, got {value!r}{hint}", *where(container, key))
    return value


def check_keys(mapping, allowed, required=(), what="mapping"):
    """Reject unknown keys and missing required keys with a located error."""
    if not isinstance(mapping, dict):
        raise SpecError(f"{what} must be a mapping", getattr(mapping, "file", None), getattr(mapping, "line", None))
    for key in mapping:
        if key not in allowed:
            raise SpecError(
                f"unknown key '{quote(key)}' in {what}{did_you_mean(key, allowed)} (allowed: {', '.join(sorted(allowed))})",
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


def text_field(container, key, default: str = "") -> Prose:
    """A free-text entry (a title, a description, a paper or family reference) as :class:`~blr_derive.core.text.Prose`
    (untrusted text, which an output renders only through its escaping function): text or a number; a list,
    mapping, flag, date or null is a located error (it was rendered with str(): '# ['a', 'b']', '# None')."""
    if key not in container:
        return Prose(default)
    value = container[key]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SpecError(f"'{key}' must be text", *where(container, key))
    return Prose(str(value))


def where(container, key=None):
    """(file, line) of a container entry, for error messages."""
    file = getattr(container, "file", None)
    if key is None:
        return file, getattr(container, "line", None)
    if isinstance(container, (LDict, LList)):
        return file, container.line_of(key)
    return file, None
