"""The packages are discovered (setup.py ``package_dirs``), and what they discover is complete: every engine and
codegen package, the families, the catalog and its generated artifacts are installed, so a non-editable
``pip install .`` carries everything ``blr-derive`` loads at run time (templates, family files, KaTeX)."""
import runpy
import tomllib

from conftest import ROOT, TARGET_NAMES


def discovered():
    """installed package -> source folder (relative to the repository), as setup.py hands them to setuptools."""
    return runpy.run_path(str(ROOT / "setup.py"), run_name="setup_probe")["package_dirs"]()


def package_data():
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]


def test_every_folder_with_installable_files_is_a_discovered_package():
    """A folder below the four roots that holds a template, a family, a module or a recipe is installed: it is a
    package (has an ``__init__.py``) that the discovery finds — a new backend, template folder or catalog target
    needs no edit of the packaging."""
    dirs = discovered()
    folders = set(dirs.values())
    patterns = package_data()["*"]
    roots = {"blr_derive": "blr_derive", "blr_derive.codegen": "codegen", "blr_derive.data.families": "families",
             "blr_derive.data.catalog": "catalog"}
    assert {k: dirs[k] for k in roots} == roots
    for folder in set(roots.values()):
        for d in [ROOT / folder, *(p for p in (ROOT / folder).rglob("*") if p.is_dir())]:
            if "__pycache__" in d.parts or "assets" in d.relative_to(ROOT).parts:
                continue
            if any(f.is_file() and any(f.match(p) for p in patterns) for f in d.iterdir()):
                assert str(d.relative_to(ROOT)) in folders, f"{d.relative_to(ROOT)} would not be installed"


def test_the_discovered_packages_are_named_after_their_install_location():
    dirs = discovered()
    assert dirs["blr_derive.codegen.backends.jax.templates"] == "codegen/backends/jax/templates"
    assert dirs["blr_derive.data.families"] == "families" and dirs["blr_derive.data.catalog"] == "catalog"
    for target in TARGET_NAMES:
        assert dirs[f"blr_derive.data.catalog.generated.{target}"] == f"catalog/generated/{target}"
        assert f"blr_derive.codegen.backends.{target}" in dirs
    for name, folder in dirs.items():
        assert (ROOT / folder / "__init__.py").is_file(), name
        assert not name.startswith("tests") and "tests" not in folder.split("/"), name


def test_package_data_covers_templates_families_catalog_and_katex():
    data = package_data()
    patterns = set(data["*"])
    assert {"*.yaml", "*.j2", "*.py", "*.md"} <= patterns
    for folder in discovered().values():
        for f in (ROOT / folder).iterdir():
            if f.is_file() and not f.name.endswith((".pyc",)):
                assert any(f.match(p) for p in patterns), f"{f.relative_to(ROOT)} would not be installed"
    assert "assets/katex/fonts/*" in data["blr_derive"]
    assert (ROOT / "blr_derive" / "assets" / "katex" / "fonts").is_dir()
