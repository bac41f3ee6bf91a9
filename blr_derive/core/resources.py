"""Locate bundled data (families, catalog, templates) from any working directory.

In a source checkout (or editable install) the top-level ``families/`` and
``catalog/`` folders are used; in a regular install they are package data under
``blr_derive.data.families`` and ``blr_derive.data.catalog`` (see ``setup.py``).
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

_SRC_ROOT = Path(__file__).resolve().parents[2]


def source_root() -> Path | None:
    """The project checkout root if running from one, else None."""
    if (_SRC_ROOT / "pyproject.toml").is_file() and (_SRC_ROOT / "families").is_dir():
        return _SRC_ROOT
    return None


def data_dir(name: str) -> Path:
    root = source_root()
    if root is not None:
        return root / name
    return Path(str(resources.files(f"blr_derive.data.{name}")))


def families_dir() -> Path:
    return data_dir("families")


def catalog_dir() -> Path:
    return data_dir("catalog")
