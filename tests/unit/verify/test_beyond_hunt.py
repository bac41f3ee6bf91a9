"""tests/hunt_findings.py's BEYOND_HUNT: each listed generated-module value at an extreme parameter point is still not
finite or wrong (relative error above 1e-6 of the largest entry) against the engine's form in mpmath (the check's
SymbolicRecord: 30 digits and more until the value settles), so that a fix fails here and removes its entry; each
entry of BEYOND_HUNT_FIXED (removed from it by a fix) is finite and equal to that form within 1e-13."""
import types
from pathlib import Path

import numpy as np
import pytest

from blr_derive.codegen.registry import emit
from blr_derive.families.library import load_family
from blr_derive.ir.build import family_ir
from blr_derive.verify.hunt import SymbolicRecord

from hunt_findings import BEYOND_HUNT, BEYOND_HUNT_FIXED  # noqa: E402

CASES = [(name, fn, point, what) for name, rows in BEYOND_HUNT.items() for fn, point, what in rows]
KEYS = {"log_partition": "A", "expectation_parameters": "mu", "fisher_information": "F"}


FIXED = [(name, row[0], row[1], row[2] if len(row) > 2 else 1e-13) for name, rows in BEYOND_HUNT_FIXED.items()
         for row in rows]


#: the corpus of user-written families (a name there is a file of it, else a built-in family)
CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "families"


def _values(name, fn, point):
    """The numpy module's value of ``fn`` at ``point`` and the engine's form's in mpmath (finite: an ordinary number)."""
    fam = load_family(str(CORPUS / f"{name}.yaml") if (CORPUS / f"{name}.yaml").exists() else name)
    mod = types.ModuleType(f"_beyond_{name}")
    exec(compile(emit(family_ir(fam, fam.name), "numpy"), name, "exec"), mod.__dict__)
    rec = SymbolicRecord(fam, None, settle=True)     # at the precision each value needs (1e-300: 960 digits)
    env = {p.symbol: point[p.name] for p in fam.free_params}
    lam = rec("eta", env)
    want = np.ravel(rec(KEYS[fn], dict(zip(fam.lam, lam))))
    assert np.all(np.isfinite(want))                       # the quantity is an ordinary number there
    with np.errstate(all="ignore"):
        got = np.ravel(np.asarray(getattr(mod, fn)(lam), dtype=float))
    return got, want


@pytest.mark.parametrize("name, fn, point, what", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_listed_extreme_point_is_still_wrong(name, fn, point, what):
    got, want = _values(name, fn, point)
    if what in ("inf", "nan"):
        assert not np.all(np.isfinite(got)), (name, fn, got, want)
    else:
        assert np.max(np.abs(got - want)) / np.max(np.abs(want)) > 1e-6, (name, fn, got, want)


@pytest.mark.parametrize("name, fn, point, bound", FIXED,
                         ids=[f"{c[0]}-{c[1]}-{list(c[2].values())}" for c in FIXED])
def test_fixed_extreme_point_is_right(name, fn, point, bound):
    got, want = _values(name, fn, point)
    assert np.all(np.isfinite(got)), (name, fn, got, want)
    assert np.max(np.abs(got - want)) <= bound * np.max(np.abs(want)), (name, fn, got, want)
