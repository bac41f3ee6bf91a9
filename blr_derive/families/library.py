"""The family library: built-in families by name (``families/*.yaml``), family files by path, inline declarations;
each derived once per process and content (a bounded cache: derivations only read a Family)."""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from pathlib import Path

import sympy as sp

from blr_derive.core import budget
from blr_derive.core.errors import SpecError
from blr_derive.core.resources import families_dir
from blr_derive.core.sizes import declared_sizes, resolve_sizes
from blr_derive.core.text import Prose, did_you_mean, quote
from blr_derive.core.yamlio import LDict, LList, load_yaml_text, note_absent, read_text_file, where
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
        raise SpecError(f"family file '{quote(ref)}' not found")
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
    try:
        text = read_text_file(path, "family file")
    except SpecError as exc:
        if exc.line is not None:
            raise
        # a directory, a device, too large, unreadable: located at the recipe's family entry, as 'not found' is
        # (it was given the recipe's line under the family path's name: '/etc:10: is a directory')
        raise SpecError(f"family file '{quote(str(path))}': {exc.message}") from None
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
    math_key = ("mathematics", without_prose(spec), resolved)
    fam = _with_prose(_cached(math_key), spec, str(path), resolved)
    disk_key = (str(path.resolve()), text, resolved)
    if fam is None:
        fam = diskcache.load(disk_key)
    if fam is None:
        fam = _with_prose(diskcache.load(math_key), spec, str(path), resolved)
    derived = fam is None
    if derived:
        before = budget.location()
        budget.where(str(path), 1)          # a budget that runs out while the family derives names its file
        try:
            fam = family_from_spec(spec, str(path), resolved)
        finally:
            budget.where(*before)
        diskcache.store(disk_key, fam)
    if prose_sites(fam) is not None:        # reusable for the same mathematics with other prose
        if derived:
            diskcache.store(math_key, fam)
        _remember(math_key, fam)
    _remember(key, fam)
    if resolved is not None:
        _ALIASES[key] = (str(path.resolve()), text, "resolved", resolved)
        _remember(_ALIASES[key], fam)
    return fam


#: the keys of a family file whose values are prose (text_field): what a family derives never reads them
PROSE_KEYS = frozenset({"description", "reference"})


def without_prose(spec):
    """A hashable picture of a family declaration with every prose value left out: two files with the same
    picture declare the same mathematics, whatever their descriptions say and wherever their lines fall (a
    multi-line description moves the keys after it).  Lines matter only to the errors a derivation raises, and a
    family reused by this picture was derived without one (:func:`prose_sites` also requires that nothing in it
    remembers a line)."""
    if isinstance(spec, dict):
        return ("map", tuple((k, "<prose>" if k in PROSE_KEYS else without_prose(v)) for k, v in spec.items()))
    if isinstance(spec, list):
        return ("seq", tuple(without_prose(v) for v in spec))
    return (type(spec).__name__, spec)


def prose_sites(fam):
    """The places of a derived family that hold its file's prose — its description and reference, and each
    parameter's description — or None where prose (:class:`~blr_derive.core.text.Prose`, which cannot become
    plain text unnoticed: ``str`` and ``format`` of it raise) sits anywhere else in the family, or where the family
    keeps a part of its declaration that knows its lines (an ``LDict``/``LList``): such a family is only ever
    reused for the same text."""
    seen, others = set(), []

    def walk(x, path):
        if isinstance(x, str) and x == fam.file and path != ("file",):
            others.append(path)                 # the file's own name elsewhere than in ``file``
        if isinstance(x, sp.Basic) or isinstance(x, (str, bytes, int, float, bool, type(None))) or id(x) in seen:
            return
        seen.add(id(x))
        if isinstance(x, (LDict, LList)):
            others.append(path)
            return
        if isinstance(x, Prose):
            if not (path in (("description",), ("reference",)) or (len(path) == 3 and path[0] == "params"
                                                                    and path[2] == "description")):
                others.append(path)
            return
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            for f in dataclasses.fields(x):
                walk(getattr(x, f.name, None), path + (f.name,))
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(k, path + ("<key>",))
                walk(v, path + (k,))
        elif isinstance(x, (list, tuple, set, frozenset)):
            for i, v in enumerate(x):
                walk(v, path + (i,))
        elif hasattr(x, "__dict__") and not callable(x):
            for k, v in vars(x).items():
                walk(v, path + (k,))
    walk(fam, ())
    return None if others else ("description", "reference", "params")


def _with_prose(fam, spec, file, resolved):
    """A family derived from a declaration with the same mathematics as ``spec`` (:func:`without_prose`; in
    whichever file), given ``spec``'s file and prose: its description and reference and its parameters'
    descriptions, read as the declaration reads them (the other fields are the derivation's and are shared:
    derivations only read a Family).  None for None, or where prose or the file's name sits elsewhere
    (:func:`prose_sites`)."""
    if fam is None or prose_sites(fam) is None:
        return None
    decl = parse_family(spec, file, resolved)
    if set(decl.params) != set(fam.params):
        return None
    return dataclasses.replace(fam, file=file, description=decl.description, reference=decl.reference,
                               params={k: dataclasses.replace(p, description=decl.params[k].description)
                                       for k, p in fam.params.items()})


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
