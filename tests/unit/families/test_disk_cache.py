"""The on-disk cache of derived families (blr_derive/families/diskcache.py): a warm cache gives the same family
(and the same generated code) as a fresh derivation, entries that others could have written are ignored, and
the cache can be switched off."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = """
import sys, time
from blr_derive import api
from blr_derive.families import library
t = time.perf_counter()
f = api.family("log_normal")
print(repr(f.h), repr(f.A), repr(f.mu_ord))
print(api.generate("catalog/gamma_poisson.yaml", "numpy"))
print("seconds", time.perf_counter() - t, file=sys.stderr)
"""


def run(env):
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_warm_cache_equals_cold_cache_equals_no_cache(tmp_path):
    env = {"BLR_DERIVE_CACHE_DIR": str(tmp_path)}
    cold = run(env)
    entries = list((tmp_path / "families").glob("*.pickle"))
    assert entries                                                     # the derivations were stored
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in entries)
    warm = run(env)
    off = run({"BLR_DERIVE_CACHE": "0", "BLR_DERIVE_CACHE_DIR": str(tmp_path / "unused")})
    assert cold == warm == off
    assert not (tmp_path / "unused").exists()


def test_entries_writable_by_others_are_ignored(tmp_path):
    from blr_derive.families import diskcache
    os.environ["BLR_DERIVE_CACHE_DIR"] = str(tmp_path)
    try:
        diskcache.store(("k",), {"value": 1})
        assert diskcache.load(("k",)) == {"value": 1}
        (entry,) = (tmp_path / "families").glob("*.pickle")
        os.chmod(entry, 0o666)
        assert diskcache.load(("k",)) is None
        os.chmod(entry, 0o600)
        entry.write_bytes(b"not a pickle")
        assert diskcache.load(("k",)) is None
    finally:
        del os.environ["BLR_DERIVE_CACHE_DIR"]


@pytest.mark.parametrize("name", ["log_normal", "gaussian_full"])
def test_a_derived_family_is_already_in_canonical_form(name):
    from blr_derive.families import diskcache
    from blr_derive.families.library import load_family
    f = load_family(name)
    g = diskcache.canonical(f)
    assert repr(g.h) == repr(f.h) and repr(g.A) == repr(f.A) and repr(g.mu_ord) == repr(f.mu_ord)


def test_a_sized_family_stays_one_object_after_its_resolved_entry_is_evicted():
    """{name: categorical} and {name: categorical, K: 3} are one derivation even when the in-process LRU dropped the
    entry of the resolved size (the suite's many families did that with the old size of 64)."""
    from blr_derive.families import library
    cat = library.load_family("categorical")
    for key in [k for k in library._FAMILY_CACHE if k[2] == "resolved"]:
        del library._FAMILY_CACHE[key]
    assert library.load_family("categorical") is cat                       # refreshes the alias
    assert library.load_family({"name": "categorical", "K": 3}) is cat


# ------------------------------------------------------------------ compiled templates
def test_compiled_templates_are_cached_privately_and_give_the_same_code(tmp_path):
    """The jinja2 bytecode cache (blr_derive.families.diskcache.template_bytecode_cache): a second process reads the
    compiled templates and writes the same bytes; an entry others could have written is ignored (it is code), even
    when it holds garbage."""
    from blr_derive.codegen.inert import template_env
    import blr_derive.codegen.backends.numpy as numpy_backend

    env = {"BLR_DERIVE_CACHE_DIR": str(tmp_path)}
    first = run(env)
    entries = sorted((tmp_path / "templates").iterdir())
    assert entries and all(oct(p.stat().st_mode & 0o777) == "0o600" for p in entries)
    assert oct((tmp_path / "templates").stat().st_mode & 0o777) == "0o700"
    assert run(env) == first

    old = os.environ.get("BLR_DERIVE_CACHE_DIR")
    os.environ["BLR_DERIVE_CACHE_DIR"] = str(tmp_path)
    try:
        jenv = template_env(os.path.join(os.path.dirname(numpy_backend.__file__), "templates"))
        name = "module.py.j2"
        source, filename, _ = jenv.loader.get_source(jenv, name)
        assert jenv.bytecode_cache.get_bucket(jenv, name, filename, source).code is not None    # read back
        for p in entries:                                # others could write them: never read
            p.write_bytes(b"not a cache entry")
            p.chmod(0o666)
        assert jenv.bytecode_cache.get_bucket(jenv, name, filename, source).code is None
    finally:
        if old is None:
            del os.environ["BLR_DERIVE_CACHE_DIR"]
        else:
            os.environ["BLR_DERIVE_CACHE_DIR"] = old
    assert run(env) == first
