"""The family library: built-in families by name (``families/*.yaml``), family files by path, inline declarations;
each derived once per process and content (a bounded cache: derivations only read a Family)."""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from blr_derive.core import budget
from blr_derive.core.errors import SpecError
from blr_derive.core.resources import families_dir
from blr_derive.core.sizes import declared_sizes, resolve_sizes
from blr_derive.core.text import did_you_mean, quote
from blr_derive.core.yamlio import LDict, load_yaml_text, note_absent, read_text_file, where
from blr_derive.families import diskcache
from blr_derive.families.build import build_family
from blr_derive.families.model import Family
from blr_derive.spec.family import parse_family
from blr_derive.spec.vocabulary import FAMILY_KEYS


def family_from_spec(spec, file=None, sizes: tuple | None = None) -> Family:
    """Derive a family from its declaration (a located mapping); see ``blr_derive/families/build.py``.  The result
    is in the cache's canonical form (:func:`blr_derive.families.diskcache.canonical`) however it is loaded."""
    return diskcache.canonical(build_family(parse_family(spec, file, sizes)))


def load_family(ref, base_dir: Path | None = None) -> Family:
    """Load a family by built-in name, by path, or from an inline mapping."""
    if isinstance(ref, Family):          # already loaded (the notebook API passes Family objects)
        return ref
    given = None
    if isinstance(ref, dict) and "name" in ref and not set(ref) & (FAMILY_KEYS - {"name"}):
        # a reference with sizes: {name: categorical, K: 5} (blr_derive/core/sizes.py)
        given = LDict({k: v for k, v in ref.items() if k != "name"})
        given.file, given.line = getattr(ref, "file", None), getattr(ref, "line", None)
        given.lines = {k: ref.line_of(k) for k in given} if isinstance(ref, LDict) else {}
        ref = ref["name"]
        if not isinstance(ref, str) or not ref:
            raise SpecError("family name must be a built-in name or a path", given.file, given.line)
    if isinstance(ref, dict):
        return family_from_spec(ref, getattr(ref, "file", None))
    if not isinstance(ref, str) or not ref:
        raise SpecError("family must be a built-in name, a path or a mapping")
    candidates = []
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        p = Path(ref)
        if not p.is_absolute() and base_dir is not None:
            candidates.append(base_dir / p)
        candidates.append(p)
    else:
        candidates.append(families_dir() / f"{ref}.yaml")
    for c in candidates:
        try:
            found = c.exists()                         # special files are refused when read (read_text_file)
        except (OSError, ValueError):                  # e.g. a name too long for the file system, a NUL byte
            found = False
        if found:
            return _load_family_file(c, given)
        note_absent(c)                                 # creating it later would change what the name resolves to
    if len(candidates) > 1 or ref.endswith((".yaml", ".yml")):
        raise SpecError(f"family file '{ref}' not found")
    raise SpecError(f"unknown family '{quote(ref)}'{did_you_mean(ref, builtin_family_names())} "
                   f"(built-in: {', '.join(builtin_family_names())})")


#: families derived in this process, by (path, content, sizes): least recently used first, at most CACHE_SIZE
_FAMILY_CACHE: "OrderedDict" = OrderedDict()
CACHE_SIZE = 256
#: the resolved-size entry of each request for a sized family ({name: categorical} and {K: 3} share one)
_ALIASES: dict = {}


def _cached(key):
    fam = _FAMILY_CACHE.get(key)
    if fam is not None:
        _FAMILY_CACHE.move_to_end(key)
    return fam


def _remember(key, fam):
    _FAMILY_CACHE[key] = fam
    _FAMILY_CACHE.move_to_end(key)
    while len(_FAMILY_CACHE) > CACHE_SIZE:
        evicted, _ = _FAMILY_CACHE.popitem(last=False)
        _ALIASES.pop(evicted, None)


def _load_family_file(path: Path, given=None) -> Family:
    """Derive a family from its file once per process (keyed by path, content and the sizes it is
    instantiated at): deriving A, μ and the inverse maps is the costly part of loading a recipe, and catalog
    recipes share families.  Derivations only read a Family, never modify it."""
    text = read_text_file(path, "family file")
    asked = tuple(sorted((k, v if isinstance(v, int) else repr(v)) for k, v in (given or {}).items()))
    key = (str(path.resolve()), text, asked)
    if _cached(key) is not None:
        alias = _ALIASES.get(key)
        if alias is not None and alias not in _FAMILY_CACHE:
            _remember(alias, _cached(key))      # the resolved size's entry lives as long as this one
        return _cached(key)
    spec = load_yaml_text(text, str(path))
    if not isinstance(spec, dict) or not {"sufficient_statistics", "natural_parameters"} & set(spec):
        # never quote a file that is not a family declaration: it may be anything the recipe pointed at
        raise SpecError("not a family declaration (a family file declares name, variable, parameters, "
                        "sufficient_statistics and natural_parameters)", str(path), getattr(spec, "line", None) or 1)
    resolved = None
    if isinstance(spec, dict) and "sizes" in spec:
        resolved = resolve_sizes(declared_sizes(spec), given, (given, where(spec, "sizes")),
                                 f"family '{path.stem}'")
        rkey = (str(path.resolve()), text, "resolved", resolved)
        if _cached(rkey) is not None:
            _ALIASES[key] = rkey
            _remember(key, _cached(rkey))
            return _cached(key)
    elif given:
        name = next(iter(given))
        raise SpecError(f"'{name}' is not a size of the family '{path.stem}' (it declares no sizes)",
                        getattr(given, "file", None) or str(path),
                        given.line_of(name) if isinstance(given, LDict) else None)
    disk_key = (str(path.resolve()), text, resolved)
    fam = diskcache.load(disk_key)
    if fam is None:
        before = budget.location()
        budget.where(str(path), 1)          # a budget that runs out while the family derives names its file
        try:
            fam = family_from_spec(spec, str(path), resolved)
        finally:
            budget.where(*before)
        diskcache.store(disk_key, fam)
    _remember(key, fam)
    if resolved is not None:
        _ALIASES[key] = (str(path.resolve()), text, "resolved", resolved)
        _remember(_ALIASES[key], fam)
    return fam


def cached_entries(path: Path) -> list:
    """[(key, alias or None, family)] of the families derived in this process from the file ``path`` (every size
    it was instantiated at): what :func:`adopt` takes in another process (``blr-derive catalog`` derives the
    families in worker processes and hands them to the recipes' workers)."""
    name = str(Path(path).resolve())
    return [(k, _ALIASES.get(k), f) for k, f in _FAMILY_CACHE.items() if k[0] == name]


def adopt(entries) -> None:
    """Add families derived elsewhere (``cached_entries``) to this process's cache."""
    for key, alias, fam in entries:
        _remember(key, fam)
        if alias is not None:
            _ALIASES[key] = alias


def builtin_family_names():
    return sorted(p.stem for p in families_dir().glob("*.yaml"))
