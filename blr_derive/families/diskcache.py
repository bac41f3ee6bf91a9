"""A cache of derived families on disk, shared by processes (the CLI, test workers, notebooks).

Deriving a family (A(λ) by integration, μ = ∇A, the inverse maps, their numeric verification) takes 0.1-1 s and
every command that loads a recipe repeats it; the result depends only on the family file, the sizes it is
instantiated at and the engine's own source.  Entries are keyed by a SHA-256 of (path, content, sizes, engine
source) and hold the pickled :class:`~blr_derive.families.model.Family`.  The same folder keeps JSON entries
(:func:`load_json`: a catalog's generated artifacts) and the targets' compiled templates.

The folder is ``$BLR_DERIVE_CACHE_DIR``, else ``$XDG_CACHE_HOME/blr-derive`` or ``~/.cache/blr-derive``;
``BLR_DERIVE_CACHE=0`` turns the cache off.  Pickles and compiled templates are code, so one rule
(:func:`_untrusted`) decides what is used: the cache folder and its subfolders are created private (0700), and a
folder or entry owned by another user (``st_uid != geteuid()``) or writable by its group or others is not used
(one warning line on stderr per command, then everything is derived without it); an entry is a regular file of
bounded size, read without following a link, written 0600 and renamed into place, and records its own key (an
entry renamed or copied to another key's file is ignored).  Anything unreadable or stale is ignored and derived
again.  Only successfully derived families are stored.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import stat
import sys
import tempfile
from pathlib import Path

from blr_derive.core.errors import SpecError
from blr_derive.core.text import quote
from blr_derive.core.yamlio import read_file_bytes

_ENGINE_HASH = None
#: the packages whose source decides what a derived family holds
_ENGINE_PACKAGES = ("core", "spec", "families")
#: the largest entry read back (a family's pickle is a few kB; a catalog recipe's artifacts under 200 kB)
MAX_ENTRY_BYTES = 16 * 2**20
#: the first line of a family entry: the entry's own key (checked before the pickle is read)
_PICKLE_MAGIC = b"blr-derive family "


def _engine_hash() -> str:
    global _ENGINE_HASH
    if _ENGINE_HASH is None:
        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256()
        for pkg in _ENGINE_PACKAGES:
            for f in sorted((root / pkg).glob("*.py")):
                h.update(f.name.encode())
                h.update(f.read_bytes())
        _ENGINE_HASH = h.hexdigest()
    return _ENGINE_HASH


def cache_dir() -> Path | None:
    if os.environ.get("BLR_DERIVE_CACHE", "1") == "0":
        return None
    given = os.environ.get("BLR_DERIVE_CACHE_DIR")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "blr-derive"


# ------------------------------------------------------------------ who may have written a folder or an entry

def _untrusted(st, is_folder: bool = False):
    """Why a cache folder or entry with this ``stat`` must not be used (None if it may): a symbolic link, not a
    directory (a folder) or not a regular file (an entry), owned by another user (``st_uid`` other than the
    effective uid: root's cache is root's own too), or writable by its group or others.  The one ownership rule
    of every folder and entry of the cache (family pickles, JSON entries, compiled templates)."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if is_folder and not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if not is_folder and not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"is owned by another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by its group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _warning_token():
    """One byte in a pipe, shared by this process and the workers it forks (``blr-derive catalog --jobs``): the
    process that reads it prints the warning, so that a command prints at most one cache warning line."""
    try:
        r, w = os.pipe()
        os.write(w, b"!")
        os.close(w)
        os.set_blocking(r, False)
        return r
    except OSError:  # pragma: no cover - no file descriptors left
        return None


_WARNING_TOKEN = _warning_token()


def _warn(path, problem: str, what: str) -> None:
    """One line on stderr, once per command: the cache is only an optimisation, the command goes on without it."""
    try:
        if _WARNING_TOKEN is None or os.read(_WARNING_TOKEN, 1) != b"!":
            return
    except OSError:                              # taken by another process
        return
    sys.stderr.write(f"blr-derive: warning: {quote(path, 300)}: {what} {problem}: not used, the command goes on "
                     "without it\n")
    sys.stderr.flush()


class _Untrusted(Exception):
    pass


def _refuse_untrusted(st):
    problem = _untrusted(st)
    if problem is not None:
        raise _Untrusted(problem)


def _private_folder(path: Path, root: bool) -> bool:
    """Create ``path`` private (0700) if it does not exist; whether it may be used.  The cache folder itself may
    be reached through a symbolic link (a home on another disk) and is judged by what it names; a subfolder must
    be a directory itself."""
    try:
        try:
            st = os.stat(path) if root else os.lstat(path)
        except FileNotFoundError:
            if root:
                path.parent.mkdir(parents=True, exist_ok=True)   # e.g. ~/.cache: not the cache's own folder
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            st = os.stat(path) if root else os.lstat(path)
    except (OSError, ValueError):                # a read-only home, a name too long: derive each time
        return False
    problem = _untrusted(st, is_folder=True)
    if problem is not None:
        _warn(path, problem, "the cache folder")
        return False
    return True


def folder(sub: str) -> Path | None:
    """The cache's subfolder ``sub`` (``families``, ``artifacts``, ``templates``), created private with the cache
    folder, or None when the cache is off or either folder may not be used (:func:`_untrusted`, with a warning)."""
    root = cache_dir()
    if root is None or not _private_folder(root, True):
        return None
    path = root / sub
    return path if _private_folder(path, False) else None


def _read_entry(path: Path) -> bytes | None:
    """The bytes of a cache entry, or None: missing, unreadable, too large, not a regular file (a link is not
    followed) or untrusted (:func:`_untrusted`, with a warning)."""
    try:
        return read_file_bytes(path, "cache entry", MAX_ENTRY_BYTES, follow_links=False, check=_refuse_untrusted)
    except _Untrusted as exc:
        _warn(path, str(exc), "the cache entry")
    except SpecError:
        pass
    return None


def _write_entry(path: Path, data: bytes) -> None:
    """Write an entry atomically, private (0600) before it is renamed into place; failures are ignored (the cache
    is only an optimisation: a read-only home, a full disk)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except OSError:
        pass
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _digest(key) -> str:
    return hashlib.sha256(repr(key).encode()).hexdigest()


# ------------------------------------------------------------------ derived families (pickles)

def _entry(key):
    """(entry path, the digest the entry records) of a family key, or None when the cache is off."""
    where = folder("families")
    if where is None:
        return None
    digest = _digest((key, _engine_hash()))
    return where / f"{digest}.pickle", digest


def load(key):
    """The cached family for ``key``, or None."""
    entry = _entry(key)
    if entry is None:
        return None
    path, digest = entry
    data = _read_entry(path)
    head = _PICKLE_MAGIC + digest.encode() + b"\n"
    if data is None or not data.startswith(head):           # another key's entry (or an old format): derive
        return None
    try:
        return pickle.loads(data[len(head):])
    except Exception:  # truncated, from another sympy: derive again
        return None


def canonical(fam):
    """``fam`` as the cache returns it: a pickle round trip re-evaluates unevaluated sympy nodes (e.g.
    (√2/(2√π))/θ becomes √2/(2√π θ)), so a derived family is always used in this form and the generated code is
    the same whether the family was derived now or read from the cache."""
    try:
        return pickle.loads(pickle.dumps(fam, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # an unpicklable family is used as derived (and not cached)
        return fam


def store(key, fam) -> None:
    """Write ``fam`` for ``key`` (atomically; failures are ignored: the cache is only an optimisation)."""
    entry = _entry(key)
    if entry is None:
        return
    path, digest = entry
    try:
        data = pickle.dumps(fam, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # an unpicklable object: derive each time
        return
    _write_entry(path, _PICKLE_MAGIC + digest.encode() + b"\n" + data)


# ------------------------------------------------------------------ text entries (generated artifacts)

def source_hash(roots) -> str:
    """SHA-256 of every source file (``.py``, ``.j2``) below ``roots``, by relative path and content: a key
    component that changes whenever the code that produced an entry does."""
    h = hashlib.sha256()
    for root in roots:
        root = Path(root)
        for f in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".j2") and "__pycache__" not in p.parts):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _text_entry(kind, key):
    where = folder(kind)
    if where is None:
        return None
    digest = _digest(key)
    return where / f"{digest}.json", digest


def load_json(kind, key):
    """The JSON value stored for ``key`` (data, never code: a caller still checks it as it would fresh output),
    or None; the same ownership rules as the family entries, and the entry must record ``key`` itself."""
    entry = _text_entry(kind, key)
    if entry is None:
        return None
    path, digest = entry
    data = _read_entry(path)
    if data is None:
        return None
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):  # truncated, not UTF-8, nested too deeply: produce again
        return None
    if not isinstance(value, dict) or set(value) != {"key", "value"} or value["key"] != digest:
        return None                              # another key's entry, or an old format
    return value["value"]


def store_json(kind, key, value) -> None:
    """Write a JSON entry for ``key`` atomically (it records its key); failures are ignored."""
    entry = _text_entry(kind, key)
    if entry is None:
        return
    path, digest = entry
    try:
        data = json.dumps({"key": digest, "value": value}).encode("utf-8")
    except (TypeError, ValueError):
        return
    _write_entry(path, data)


# ------------------------------------------------------------------ compiled templates (jinja2 bytecode)

def template_bytecode_cache():
    """A jinja2 bytecode cache in the cache folder (``templates/``), or None when the cache is off: compiling the
    targets' templates took ~0.05 s of every command.  Compiled templates are code, so entries are read and
    written under the family entries' rules; jinja2 keys an entry by the template's name and checks its source's
    checksum."""
    where = folder("templates")
    if where is None:
        return None
    import jinja2

    class _PrivateBytecodeCache(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket):
            data = _read_entry(Path(self._get_cache_filename(bucket)))
            if data is not None:
                bucket.load_bytecode(io.BytesIO(data))

        def dump_bytecode(self, bucket):
            out = io.BytesIO()
            bucket.write_bytecode(out)
            _write_entry(Path(self._get_cache_filename(bucket)), out.getvalue())

    return _PrivateBytecodeCache(str(where), "%s.jinja2cache")
