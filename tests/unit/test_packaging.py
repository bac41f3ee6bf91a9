"""The explicit package list of pyproject.toml is complete: every engine and codegen package (a folder with an
``__init__.py``), the families, the catalog and its generated artifacts are installed, so a non-editable
``pip install .`` carries everything ``blr-derive`` loads at run time (templates, family files, KaTeX)."""
import tomllib

from conftest import ROOT


def configured():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return set(cfg["packages"]), cfg["package-dir"], cfg["package-data"]


def source_dir(package, package_dir):
    if package in package_dir:
        return ROOT / package_dir[package]
    return ROOT.joinpath(*package.split("."))


def test_every_python_package_is_listed():
    packages, package_dir, _ = configured()
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "blr_derive").rglob("__init__.py")}
    found |= {"blr_derive.codegen" + "".join("." + x for x in p.parent.relative_to(ROOT / "codegen").parts)
              for p in (ROOT / "codegen").rglob("__init__.py")}
    found = {p for p in found if "__pycache__" not in p}
    assert found - packages == set(), f"packages missing from pyproject.toml: {sorted(found - packages)}"


def test_every_listed_package_exists_and_data_folders_are_mapped():
    packages, package_dir, _ = configured()
    for package in packages:
        assert source_dir(package, package_dir).is_dir(), package
    assert package_dir["blr_derive.data.families"] == "families"
    assert package_dir["blr_derive.data.catalog"] == "catalog"
    for target in ("jax", "numpy", "torch", "triton"):
        assert f"blr_derive.data.catalog.generated.{target}" in packages


def test_package_data_covers_templates_families_catalog_and_katex():
    packages, package_dir, data = configured()
    patterns = set(data["*"])
    assert {"*.yaml", "*.j2", "*.py", "*.md"} <= patterns
    for package in packages:
        folder = source_dir(package, package_dir)
        for f in folder.iterdir():
            if f.is_file() and not f.name.endswith((".pyc",)):
                assert any(f.match(p) for p in patterns), f"{f.relative_to(ROOT)} would not be installed"
    assert "assets/katex/fonts/*" in data["blr_derive"]
    assert (ROOT / "blr_derive" / "assets" / "katex" / "fonts").is_dir()
