"""``blr-derive catalog`` on a folder it did not make (README, "Safety model"), each attack through the real
command line:

* the catalog writes and reads only regular files inside its own ``generated/`` folder: a symbolic link (at an
  artifact, at ``generated/`` or at ``generated/<target>/``), a FIFO, a device or a directory at an artifact path
  is one located error line, exit 2, with nothing written; existing artifacts are read bounded (never a hang, a
  flood or an internal error);
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

CATALOG = ROOT / "catalog"
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
