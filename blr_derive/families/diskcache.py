"""A cache of derived families on disk, shared by processes (the CLI, test workers, notebooks).

Deriving a family (A(λ) by integration, μ = ∇A, the inverse maps, their numeric verification) takes 0.1-1 s and
every command that loads a recipe repeats it; the result depends only on the family file, the sizes it is
instantiated at and the engine's own source.  Entries are keyed by a SHA-256 of (path, content, sizes, engine
source) and hold the pickled :class:`~blr_derive.families.model.Family`.

The folder is ``$BLR_DERIVE_CACHE_DIR``, else ``$XDG_CACHE_HOME/blr-derive`` or ``~/.cache/blr-derive``;
``BLR_DERIVE_CACHE=0`` turns the cache off.  It is created private (0700) and an entry is read only when it is a
regular file owned by the current user and not writable by others (pickles are code: nobody else may write them);
anything unreadable or stale is ignored and derived again.  Only successfully derived families are stored.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import stat
import tempfile
from pathlib import Path

_ENGINE_HASH = None
#: the packages whose source decides what a derived family holds
_ENGINE_PACKAGES = ("core", "spec", "families")


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


def _entry(key) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    digest = hashlib.sha256(repr((key, _engine_hash())).encode()).hexdigest()
    return folder / "families" / f"{digest}.pickle"


def load(key):
    """The cached family for ``key``, or None."""
    path = _entry(key)
    if path is None:
        return None
    try:
        st = os.lstat(path)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
                or st.st_size > 16 * 2**20):
            return None
        with open(path, "rb") as fh:
            return pickle.load(fh)
    except Exception:  # missing, truncated, from another sympy: derive again
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
    path = _entry(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = pickle.dumps(fam, protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pickle")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except Exception:  # a read-only home, a full disk, an unpicklable object: derive each time
        return


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


def _text_entry(kind, key) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    return folder / kind / f"{hashlib.sha256(repr(key).encode()).hexdigest()}.json"


def load_json(kind, key):
    """A JSON entry (data, never code) for ``key``, or None; the same ownership rules as the family entries."""
    path = _text_entry(kind, key)
    if path is None:
        return None
    try:
        st = os.lstat(path)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
                or st.st_size > 64 * 2**20):
            return None
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except Exception:  # missing, truncated: produce again
        return None


def store_json(kind, key, value) -> None:
    """Write a JSON entry atomically; failures are ignored (the cache is only an optimisation)."""
    path = _text_entry(kind, key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(value, fh)
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except Exception:
        return


# ------------------------------------------------------------------ compiled templates (jinja2 bytecode)

def _trusted(path, limit) -> bool:
    """A regular file of the current user that nobody else can write, below ``limit`` bytes."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            and st.st_size <= limit)


def template_bytecode_cache():
    """A jinja2 bytecode cache in the cache folder (``templates/``), or None when the cache is off: compiling the
    targets' templates took ~0.05 s of every command.  Compiled templates are code, so an entry is read under the
    family entries' rules (a private folder, a regular file of the current user not writable by others); jinja2
    keys an entry by the template's name and checks its source's checksum, and writes it atomically."""
    folder = cache_dir()
    if folder is None:
        return None
    import jinja2

    class _PrivateBytecodeCache(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket):
            if _trusted(self._get_cache_filename(bucket), 16 * 2**20):
                super().load_bytecode(bucket)

        def dump_bytecode(self, bucket):
            try:
                super().dump_bytecode(bucket)
                os.chmod(self._get_cache_filename(bucket), 0o600)
            except OSError:  # a read-only home, a full disk: compile each time
                pass

    try:
        (folder / "templates").mkdir(parents=True, exist_ok=True, mode=0o700)
        if not os.path.isdir(folder / "templates") or os.stat(folder / "templates").st_uid != os.getuid():
            return None
    except OSError:
        return None
    return _PrivateBytecodeCache(str(folder / "templates"), "%s.jinja2cache")
