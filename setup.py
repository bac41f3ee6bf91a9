"""Package discovery: the packages are found, not listed (pyproject.toml holds everything else).

Four source folders are installed under ``blr_derive``: the engine ``blr_derive/``, the code generators
``codegen/`` (as ``blr_derive.codegen``), the family library ``families/`` and the recipe catalog ``catalog/`` (as
the package data ``blr_derive.data.families`` and ``blr_derive.data.catalog``).  Every folder with an
``__init__.py`` below them is a package; ``tests/unit/test_packaging.py`` checks that nothing installable is left out.
"""
from setuptools import find_packages, setup

#: installed package name -> its source folder
ROOTS = {
    "blr_derive": "blr_derive",
    "blr_derive.codegen": "codegen",
    "blr_derive.data.families": "families",
    "blr_derive.data.catalog": "catalog",
}


def package_dirs() -> dict:
    """Every package to install -> its source folder (the roots and each package found below them)."""
    out = {}
    for name, folder in ROOTS.items():
        out[name] = folder
        for sub in find_packages(folder):
            out[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return dict(sorted(out.items()))


if __name__ == "__main__":
    dirs = package_dirs()
    setup(packages=list(dirs), package_dir=dirs)
