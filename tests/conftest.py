import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "catalog"
GENERATED = CATALOG / "generated"


def load_module_from_path(path, name=None):
    name = name or f"_blr_gen_{Path(path).stem}_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_generated(recipe, target="numpy"):
    return load_module_from_path(GENERATED / target / f"{recipe}.py")


@pytest.fixture
def generated():
    return load_generated
