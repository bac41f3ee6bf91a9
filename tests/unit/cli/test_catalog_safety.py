"""``blr-derive catalog`` on a folder it did not make and with a cache folder others may reach (README, "Safety
model"), each attack through the real command line:

* the catalog writes and reads only regular files inside its own ``generated/`` folder: a symbolic link (at an
  artifact, at ``generated/`` or at ``generated/<target>/``), a FIFO, a device or a directory at an artifact path
  is one located error line, exit 2, with nothing written; existing artifacts are read bounded (never a hang, a
  flood or an internal error);
* a cached artifact is used only while every file its derivation read is unchanged (a family in a subfolder,
  outside the folder or in a ``.yml`` file included), only under its own key, and only when it passes the audit
  and the path containment of fresh output;
* a cache folder owned by another user or writable by others is not used (one warning line); the folders the
  cache creates are private (0700).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

CATALOG = ROOT / "catalog"
FAMILY = ROOT / "families" / "gaussian_fixed_cov.yaml"
ERROR = re.compile(r"blr-derive: error: (?P<path>.+?)(?::\d+)?: (?P<problem>.+)")


def catalog(*args, cwd, cache, timeout=120):
    """``blr-derive catalog ARGS`` in a subprocess with its own cache folder (``timeout``: a read that blocks fails
    the test instead of hanging it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONIOENCODING"] = "utf-8"
    env["BLR_DERIVE_CACHE_DIR"] = str(cache)
    for name in ("BLR_DERIVE_CACHE", "BLR_DERIVE_TRACEBACK", "PYTHONSTARTUP"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "blr_derive", "catalog", *map(str, args)], cwd=str(cwd), env=env,
                          capture_output=True, text=True, encoding="utf-8", timeout=timeout)


def generate(cat, cache, monkeypatch):
    """``blr-derive catalog --catalog CAT --target numpy`` in this process (one subprocess less for a test whose
    attack comes after a first generation): the artifacts written and kept in ``cache``."""
    from blr_derive.cli import main
    monkeypatch.setenv("BLR_DERIVE_CACHE_DIR", str(cache))
    assert main(["catalog", "--catalog", str(cat), "--target", "numpy", "--jobs", "1"]) == 0


def make_catalog(tmp_path, names=("gd", "sgd")) -> Path:
    cat = tmp_path / "cat"
    cat.mkdir()
    for name in names:
        shutil.copy(CATALOG / f"{name}.yaml", cat / f"{name}.yaml")
    return cat


def snapshot(folder: Path) -> dict:
    """Every entry below ``folder`` (links not followed): its kind and, for a regular file, its bytes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(folder))] = ("link", os.readlink(p)) if p.is_symlink() else \
                ("file", p.read_bytes()) if p.is_file() else ("dir" if p.is_dir() else "special", None)
    return out


def one_error(r, path: Path, problem: str):
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.splitlines()
    m = ERROR.fullmatch(line)
    assert m and m["path"] == str(path) and problem in m["problem"], line
    assert "Traceback" not in r.stderr


# ------------------------------------------------------------------------------------------ the generated tree
def _artifact_link(cat, outside):          # generated/numpy/sgd.py -> a file the user never named
    victim = outside / "victim.py"
    victim.write_text("precious\n")
    (cat / "generated" / "numpy").mkdir(parents=True)
    (cat / "generated" / "numpy" / "sgd.py").symlink_to(victim)
    return cat / "generated" / "numpy" / "sgd.py", "is a symbolic link"


def _generated_link(cat, outside):         # generated/ -> a folder elsewhere
    (outside / "numpy").mkdir()
    (outside / "numpy" / "sgd.py").write_text("precious\n")
    (cat / "generated").symlink_to(outside, target_is_directory=True)
    return cat / "generated", "is a symbolic link"


def _target_link(cat, outside):            # generated/numpy/ -> a folder elsewhere
    (outside / "sgd.py").write_text("precious\n")
    (cat / "generated").mkdir()
    (cat / "generated" / "numpy").symlink_to(outside, target_is_directory=True)
    return cat / "generated" / "numpy", "is a symbolic link"


def _fifo(cat, outside):
    (cat / "generated" / "numpy").mkdir(parents=True)
    os.mkfifo(cat / "generated" / "numpy" / "sgd.py")
    return cat / "generated" / "numpy" / "sgd.py", "is not a regular file"


def _dev_zero(cat, outside):               # a read of it would never end
    (cat / "generated" / "numpy").mkdir(parents=True)
    (cat / "generated" / "numpy" / "sgd.py").symlink_to("/dev/zero")
    return cat / "generated" / "numpy" / "sgd.py", "is a symbolic link"


def _directory(cat, outside):
    (cat / "generated" / "numpy" / "sgd.py").mkdir(parents=True)
    return cat / "generated" / "numpy" / "sgd.py", "is a directory"


@pytest.mark.parametrize("attack, mode", [
    (_artifact_link, "write"), (_artifact_link, "check"), (_generated_link, "write"), (_target_link, "write"),
    (_fifo, "write"), (_fifo, "check"), (_dev_zero, "check"), (_directory, "write"), (_directory, "check"),
], ids=lambda x: getattr(x, "__name__", x).strip("_"))
def test_a_link_or_special_file_in_the_generated_tree_is_refused_and_nothing_is_written(attack, mode, tmp_path):
    """The bad path is the last artifact (sgd sorts after gd): every artifact path is checked before the first is
    written, so gd.py is not written either; the files behind the links are unchanged."""
    cat = make_catalog(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    bad, problem = attack(cat, outside)
    before, before_outside = snapshot(cat), snapshot(outside)
    r = catalog("--catalog", cat, "--target", "numpy", *(["--check"] if mode == "check" else []), cwd=tmp_path,
                cache=tmp_path / "cache")
    one_error(r, bad, problem)
    assert snapshot(cat) == before and snapshot(outside) == before_outside
    assert r.stdout == ""


def test_a_generated_file_that_is_not_utf8_is_a_located_error_for_check_and_replaced_by_a_regeneration(tmp_path):
    """--check reads an existing artifact as a recipe is read: bytes that are not UTF-8 are one located line, exit
    2 (it was an internal error, exit 3); a regeneration replaces the file (a regular file inside the catalog)."""
    cat = make_catalog(tmp_path, ("gd",))
    art = cat / "generated" / "numpy" / "gd.py"
    art.parent.mkdir(parents=True)
    art.write_bytes(b"# fine\n\xff\xfe not UTF-8\n")
    r = catalog("--catalog", cat, "--target", "numpy", "--check", cwd=tmp_path, cache=tmp_path / "cache")
    assert r.returncode == 2 and r.stderr == f"blr-derive: error: {art}:2: not UTF-8 text (byte 0xff)\n", r.stderr
    r = catalog("--catalog", cat, "--target", "numpy", cwd=tmp_path, cache=tmp_path / "cache")
    assert r.returncode == 0 and "1 artifacts, 1 updated" in r.stdout, r.stdout + r.stderr
    assert art.read_text(encoding="utf-8").startswith("# Generated by blr-derive")


def test_a_generated_file_larger_than_the_bound_is_not_read(tmp_path):
    """A 16 MiB + 1 byte artifact (sparse: nothing of it is read) is one located line, exit 2."""
    cat = make_catalog(tmp_path, ("gd",))
    art = cat / "generated" / "numpy" / "gd.py"
    art.parent.mkdir(parents=True)
    with open(art, "wb") as fh:
        fh.truncate((16 << 20) + 1)
    r = catalog("--catalog", cat, "--target", "numpy", "--check", cwd=tmp_path, cache=tmp_path / "cache")
    assert r.returncode == 2
    assert r.stderr == f"blr-derive: error: {art}: generated file larger than {16 << 20} bytes\n", r.stderr


# ------------------------------------------------------------------------------------------ the artifact cache
def test_a_family_changed_anywhere_is_seen_by_the_next_check(tmp_path, monkeypatch):
    """The cache key covers every file the derivation read: a family in a subfolder, outside the catalog folder
    and in a ``.yml`` file.  Edited after the artifacts were generated (and cached), each recipe's artifact
    differs at the next --check (they were '0 differ': the key covered the folder's top-level *.yaml only); the
    recipe of an unchanged built-in family does not."""
    cat = make_catalog(tmp_path, ("gd",))
    (cat / "sub").mkdir()
    (tmp_path / "fams").mkdir()
    places = {"in_sub": "sub/fam.yaml", "outside": "../fams/fam.yaml", "yml": "fam.yml"}
    gd = (CATALOG / "gd.yaml").read_text(encoding="utf-8")
    for recipe, ref in places.items():
        shutil.copy(FAMILY, cat / ref)
        (cat / f"{recipe}.yaml").write_text(gd.replace("name: gd", f"name: {recipe}")
                                            .replace("family: gaussian_fixed_cov", f"family: {ref}"), encoding="utf-8")
    generate(cat, tmp_path / "cache", monkeypatch)
    assert len(list((tmp_path / "cache" / "artifacts").iterdir())) == 4
    for ref in places.values():
        text = (cat / ref).read_text(encoding="utf-8")
        (cat / ref).write_text(text.replace("name: gaussian_fixed_cov", "name: edited_family"), encoding="utf-8")
    r = catalog("--catalog", cat, "--target", "numpy", "--check", cwd=tmp_path, cache=tmp_path / "cache")
    assert r.returncode == 1, r.stdout + r.stderr
    assert sorted(re.findall(r"differs: .*/(\w+)\.py", r.stdout)) == sorted(places), r.stdout
    assert "4 artifacts, 3 differ" in r.stdout


def _entries(cache: Path) -> dict:
    """{recipe stem: its artifact entry file} of a cache folder."""
    out = {}
    for p in (cache / "artifacts").glob("*.json"):
        value = json.loads(p.read_text(encoding="utf-8"))["value"]
        (rel, _), = value["artifacts"]
        out[Path(rel).stem] = p
    return out


def test_a_swapped_cache_entry_is_ignored_and_the_cache_folders_are_private(tmp_path):
    """An entry records its key: gd's entry copied over sgd's file is not taken for sgd (it gave gd's artifact in
    sgd's place).  The cache folder, created with its parents, and its subfolders are 0700, the entries 0600.  An
    artifact that is a hard link to a file outside is a regular file: replaced by a rename, the file outside is
    unchanged."""
    cat = make_catalog(tmp_path)
    cache = tmp_path / "parent" / "cache"
    r = catalog("--catalog", cat, "--target", "numpy", cwd=tmp_path, cache=cache)
    assert r.returncode == 0, r.stderr
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    for sub in ("families", "artifacts", "templates"):
        assert oct((cache / sub).stat().st_mode & 0o777) == "0o700", sub
        assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in (cache / sub).iterdir())
    gen = cat / "generated" / "numpy"
    fresh = {p.name: p.read_bytes() for p in gen.iterdir()}
    entries = _entries(cache)
    shutil.copy(entries["gd"], entries["sgd"])
    (gen / "sgd.py").unlink()
    victim = tmp_path / "victim.py"
    victim.write_text("precious\n")
    (gen / "gd.py").unlink()
    os.link(victim, gen / "gd.py")
    r = catalog("--catalog", cat, "--target", "numpy", cwd=tmp_path, cache=cache)
    assert r.returncode == 0 and "2 artifacts, 2 updated" in r.stdout, r.stdout + r.stderr
    assert {p.name: p.read_bytes() for p in gen.iterdir()} == fresh
    assert victim.read_text() == "precious\n"


def test_a_cache_entry_is_audited_and_contained_like_fresh_output(tmp_path, monkeypatch):
    """Entries under their own key, with the files they were derived from unchanged, but whose content is not what
    a derivation gives: code that calls os.system, a path escaping the catalog.  Neither is used: the artifacts
    are derived again, nothing is written elsewhere."""
    cat = make_catalog(tmp_path)
    cache = tmp_path / "cache"
    generate(cat, cache, monkeypatch)
    gen = cat / "generated" / "numpy"
    fresh = {p.name: p.read_bytes() for p in gen.iterdir()}
    tamper = {"gd": lambda rel, text: (rel, text + "import os\nos.system('touch /tmp/blr_pwned')\n"),
              "sgd": lambda rel, text: ("generated/numpy/../../../escaped.py", text)}
    for stem, path in _entries(cache).items():
        entry = json.loads(path.read_text(encoding="utf-8"))
        entry["value"]["artifacts"] = [list(tamper[stem](*a)) for a in entry["value"]["artifacts"]]
        path.write_text(json.dumps(entry), encoding="utf-8")
        (gen / f"{stem}.py").unlink()
    r = catalog("--catalog", cat, "--target", "numpy", cwd=tmp_path, cache=cache)
    assert r.returncode == 0 and "2 artifacts, 2 updated" in r.stdout, r.stdout + r.stderr
    assert {p.name: p.read_bytes() for p in gen.iterdir()} == fresh
    assert not (tmp_path / "escaped.py").exists() and sorted(os.listdir(tmp_path)) == ["cache", "cat"]


def _group_writable(cache):
    os.chmod(cache, 0o775)
    return "is writable by its group or others (mode 0775)"


def _other_user(cache):
    """Owned by another uid: chown as root (the test runs as root here); a user who is not root cannot give a
    folder away, and gets a folder of root's instead."""
    if os.geteuid() == 0:
        os.chown(cache, 12345, -1)
        return "is owned by another user (uid 12345)"
    return None


@pytest.mark.parametrize("untrust", [_group_writable, _other_user], ids=["group_writable", "other_user"])
def test_a_cache_folder_others_can_write_is_not_used_with_one_warning(untrust, tmp_path, monkeypatch):
    """An entry tampered with, in a form the audit passes (a comment added), is not used from a cache folder that
    another user owns or can write: --check derives afresh (0 differ), the entry is not rewritten, and the command
    prints exactly one warning line, also with two worker processes that each find the folder.  From a folder of
    one's own the same entry is used (the test would see it)."""
    cat = make_catalog(tmp_path)
    cache = tmp_path / "cache"
    generate(cat, cache, monkeypatch)
    path = _entries(cache)["gd"]
    entry = json.loads(path.read_text(encoding="utf-8"))
    entry["value"]["artifacts"][0][1] += "# tampered\n"
    path.write_text(json.dumps(entry), encoding="utf-8")
    tampered = path.read_bytes()
    mode, uid = cache.stat().st_mode & 0o777, cache.stat().st_uid
    problem = untrust(cache)
    where = cache
    if problem is None:                                        # not root: a folder of root's
        where, problem = Path("/"), "is owned by another user (uid 0)"
    r = catalog("--catalog", cat, "--target", "numpy", "--check", "--jobs", "2", cwd=tmp_path, cache=where)
    assert r.returncode == 0 and "2 artifacts, 0 differ" in r.stdout, r.stdout + r.stderr
    (line,) = r.stderr.splitlines()
    assert line == (f"blr-derive: warning: {where}: the cache folder {problem}: not used, the command goes on "
                    "without it"), line
    assert path.read_bytes() == tampered
    os.chmod(cache, mode)                                      # one's own folder again: the entry is used
    if cache.stat().st_uid != uid:
        os.chown(cache, uid, -1)
    from blr_derive import api
    monkeypatch.setattr(api, "derive_record", None)          # nothing is derived: every artifact from the cache
    (_, gd), _ = api.catalog_artifacts(cat, ["numpy"], jobs=1)
    assert gd.endswith("# tampered\n")


# ------------------------------------------------------------------------------------------ the cache module
@pytest.fixture
def cache_module(tmp_path, monkeypatch):
    from blr_derive.families import diskcache
    monkeypatch.setenv("BLR_DERIVE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BLR_DERIVE_CACHE", raising=False)
    monkeypatch.setattr(diskcache, "_WARNING_TOKEN", diskcache._warning_token())    # this test's one warning
    return diskcache


def test_an_entry_others_could_write_is_ignored_with_one_warning(cache_module, tmp_path, capfd):
    dc = cache_module
    dc.store_json("artifacts", ("a",), {"x": 1})
    dc.store(("b",), {"y": 2})
    assert dc.load_json("artifacts", ("a",)) == {"x": 1} and dc.load(("b",)) == {"y": 2}
    (json_entry,) = (tmp_path / "cache" / "artifacts").iterdir()
    (pickle_entry,) = (tmp_path / "cache" / "families").iterdir()
    os.chmod(json_entry, 0o620)
    os.chmod(pickle_entry, 0o602)
    assert dc.load_json("artifacts", ("a",)) is None and dc.load(("b",)) is None
    err = capfd.readouterr().err.splitlines()
    assert err == [f"blr-derive: warning: {json_entry}: the cache entry is writable by its group or others (mode "
                   "0620): not used, the command goes on without it"]
    if os.geteuid() == 0:                                     # owned by another uid: only root can make one
        os.chmod(json_entry, 0o600)
        os.chown(json_entry, 12345, -1)
        assert dc.load_json("artifacts", ("a",)) is None
        os.chown(json_entry, 0, -1)
        assert dc.load_json("artifacts", ("a",)) == {"x": 1}
    assert capfd.readouterr().err == ""                         # one warning per command


def test_an_entry_is_tied_to_its_key_and_never_read_through_a_link(cache_module, tmp_path):
    dc = cache_module
    for kind in ("json", "pickle"):
        store, load = ((lambda k, v: dc.store_json("artifacts", k, v)), (lambda k: dc.load_json("artifacts", k))) \
            if kind == "json" else (dc.store, dc.load)
        folder = tmp_path / "cache" / ("artifacts" if kind == "json" else "families")
        store(("one", kind), "first")
        (a,) = folder.iterdir()
        store(("two", kind), "second")
        (b,) = set(folder.iterdir()) - {a}
        assert load(("one", kind)) == "first" and load(("two", kind)) == "second"
        shutil.copy(b, a)                                     # the other key's content under this key's name
        assert load(("one", kind)) is None and load(("two", kind)) == "second"
        a.unlink()
        a.symlink_to(b)
        assert load(("one", kind)) is None


def test_a_cache_folder_is_created_private_whatever_the_umask(cache_module, tmp_path):
    dc = cache_module
    old = os.umask(0)
    try:
        assert dc.folder("artifacts") == tmp_path / "cache" / "artifacts"
    finally:
        os.umask(old)
    assert oct((tmp_path / "cache").stat().st_mode & 0o777) == "0o700"
    assert oct((tmp_path / "cache" / "artifacts").stat().st_mode & 0o777) == "0o700"


# ------------------------------------------------------------------------------------------ the checks themselves
def test_tree_problem_names_the_first_entry_catalog_must_not_go_through(tmp_path):
    from blr_derive.core.io import tree_problem
    root = tmp_path / "cat"
    (root / "generated" / "numpy").mkdir(parents=True)
    art = root / "generated" / "numpy" / "gd.py"
    assert tree_problem(root, art) is None                               # absent: created when written
    art.write_text("x")
    assert tree_problem(root, art) is None
    assert tree_problem(root, root / "generated" / "numpy", folder=True) is None
    assert tree_problem(root, art, folder=True) == (art, "is not a directory (generated files go below it)")
    assert tree_problem(root, art / "deeper.py")[0] == art
    art.unlink()
    os.mkfifo(art)
    assert tree_problem(root, art)[1].startswith("is not a regular file")
    art.unlink()
    art.symlink_to(tmp_path / "nowhere")                                 # a dangling link too
    assert tree_problem(root, art)[1].startswith("is a symbolic link")
    assert tree_problem(root, tmp_path / "elsewhere.py")[1].startswith("is outside the folder")
    linked = tmp_path / "linked"
    linked.symlink_to(root)                                              # the folder the user names may be a link
    assert tree_problem(linked, linked / "generated" / "numpy" / "sgd.py") is None


def test_the_bounded_reader_refuses_special_files_without_reading_them(tmp_path):
    from blr_derive.core.errors import SpecError
    from blr_derive.core.yamlio import read_file_bytes, read_text_file
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)                                                      # opened non-blocking: no hang
    with pytest.raises(SpecError, match="is not a regular file"):
        read_text_file(fifo, "generated file")
    with pytest.raises(SpecError, match="is not a regular file"):
        read_text_file("/dev/zero", "generated file")
    link = tmp_path / "link"
    link.symlink_to("/dev/zero")
    with pytest.raises(SpecError, match="is a symbolic link"):
        read_file_bytes(link, "generated file", follow_links=False)
    with pytest.raises(SpecError, match="is a directory"):
        read_text_file(tmp_path, "generated file")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(SpecError, match="larger than 100 bytes"):
        read_file_bytes(big, "generated file", limit=100)
    assert read_file_bytes(big, limit=101) == b"x" * 101


def test_recorded_reads_are_every_file_read_and_every_family_path_found_absent(tmp_path, monkeypatch):
    """What a derivation read is what its cached result depends on: the recipe, its family in any folder, and the
    path a relative family name was first looked for at (creating it there would change the family)."""
    from blr_derive.api import derive_record
    from blr_derive.core.yamlio import recording_reads, unchanged
    (tmp_path / "sub").mkdir()
    shutil.copy(FAMILY, tmp_path / "elsewhere.yml")
    recipe = tmp_path / "sub" / "r.yaml"
    recipe.write_text((CATALOG / "gd.yaml").read_text(encoding="utf-8")
                      .replace("family: gaussian_fixed_cov", "family: elsewhere.yml"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)                       # elsewhere.yml: not beside the recipe, found in the cwd
    with recording_reads() as reads:
        derive_record(recipe)
    assert reads == {str(recipe): reads[str(recipe)], str(tmp_path / "elsewhere.yml"): reads[str(tmp_path / "elsewhere.yml")],
                     str(tmp_path / "sub" / "elsewhere.yml"): None}
    assert all(reads[str(p)] for p in (recipe, tmp_path / "elsewhere.yml"))
    assert unchanged(reads)
    shutil.copy(FAMILY, tmp_path / "sub" / "elsewhere.yml")           # now found beside the recipe instead
    assert not unchanged(reads)
    (tmp_path / "sub" / "elsewhere.yml").unlink()
    (tmp_path / "elsewhere.yml").write_text(FAMILY.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert not unchanged(reads)


def test_a_recipe_file_name_is_quoted_in_the_header_and_escaped_in_the_listing(tmp_path):
    """A catalog folder's file names are untrusted too: a recipe ``c d;rm -rf x.yaml`` gave the header
    ``regenerate with `blr-derive catalog/c d;rm -rf x.yaml --target numpy``` (a copied command that runs
    ``rm -rf x.yaml``), and ``a<LF>b.yaml`` a ``wrote:`` line broken in two."""
    cat = tmp_path / "cat"
    cat.mkdir()
    for name in ("c d;rm -rf x.yaml", "a\nb.yaml"):
        shutil.copy(CATALOG / "gd.yaml", cat / name)
    r = catalog("--catalog", cat, "--target", "numpy", "--jobs", "1", cwd=tmp_path, cache=tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    out = cat / "generated" / "numpy"
    assert r.stdout.splitlines() == [f"wrote: {out}/a\\nb.py", f"wrote: {out}/c d;rm -rf x.py",
                                     "2 artifacts, 2 updated"], r.stdout
    header = (cat / "generated" / "numpy" / "c d;rm -rf x.py").read_text(encoding="utf-8").splitlines()[1]
    assert header == "# DO NOT EDIT: regenerate with `blr-derive 'catalog/c d;rm -rf x.yaml' --target numpy`."


def test_a_module_no_recipe_generates_any_more_is_named_and_fails_the_check(tmp_path, monkeypatch):
    """A generated module whose recipe was renamed or deleted stayed in catalog/generated/ with '0 differ' from
    --check (helper-75's finding: em_gmm's jax modules briefly stopped being generated and the check passed).  It is
    now named, fails --check (exit 1), and is never deleted; the folders' __init__.py is no orphan."""
    cat = make_catalog(tmp_path, ("gd",))
    generate(cat, tmp_path / "cache", monkeypatch)
    folder = cat / "generated" / "numpy"
    (folder / "__init__.py").write_text("", encoding="utf-8")
    (folder / "old_rule.py").write_text("# Generated by blr-derive from a recipe since deleted\n", encoding="utf-8")
    r = catalog("--catalog", cat, "--target", "numpy", "--check", cwd=tmp_path, cache=tmp_path / "cache")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        f"no recipe generates: {folder / 'old_rule.py'} (delete it, or restore the recipe that made it)",
        "1 artifacts, 0 differ, 1 generated by no recipe"]
    assert (folder / "old_rule.py").exists()
    (folder / "old_rule.py").unlink()
    r = catalog("--catalog", cat, "--target", "numpy", "--check", cwd=tmp_path, cache=tmp_path / "cache")
    assert r.returncode == 0 and r.stdout == "1 artifacts, 0 differ\n", r.stdout + r.stderr
