"""The Kronecker candidate plugs into the candidate protocol: discovered, picked by its section (no driver special
case), its recipe errors located, torch/triton refusing the matrix update with a located message, and its
generated modules byte-identical from run to run."""
import subprocess
import sys

import pytest
import yaml

from blr_derive import api
from blr_derive.candidates import CANDIDATES
from blr_derive.candidates.base import for_spec
from blr_derive.core.errors import SpecError
from conftest import CATALOG, FUNCTION_TARGETS, GENERATED, OPTIMIZER_TARGETS


def text(**changes):
    spec = yaml.safe_load((CATALOG / "noisy_kfac.yaml").read_text())
    spec.update(changes)
    return yaml.safe_dump(spec, sort_keys=False)


def test_the_candidate_is_registered_and_claims_recipes_with_a_kronecker_section():
    assert "kronecker" in CANDIDATES
    assert for_spec({"family": "gaussian_full", "kronecker": {}}).name == "kronecker"
    assert for_spec({"family": "gaussian_full"}).name == "single"


@pytest.mark.parametrize("changes, message", [
    ({"family": "gaussian_diag"}, "needs a full-covariance Gaussian over a vector"),
    ({"kronecker": {"rows": "d", "cols": "d"}}, "rows and cols must be different"),
    ({"kronecker": {"rows": "A", "cols": "d_in"}}, "is a state or oracle name"),
    ({"kronecker": {"rows": "d_out"}}, "missing required key 'cols'"),
    ({"kronecker": {"rows": "d_out", "cols": "d_in", "depth": 2}}, "unknown key 'depth'"),
    ({"kronecker": {"rows": "d_out", "cols": "x-y"}}, "kronecker cols"),
])
def test_bad_recipes_are_located_errors(changes, message):
    with pytest.raises(SpecError, match=message) as exc:
        api.derive(text(**changes))
    assert exc.value.line is not None


def test_a_hyperparameter_may_not_shadow_the_state():
    spec = yaml.safe_load((CATALOG / "noisy_kfac.yaml").read_text())
    spec["hyperparameters"]["G"] = {"default": 1.0}
    with pytest.raises(SpecError, match="hyperparameter 'G'") as exc:
        api.derive(yaml.safe_dump(spec, sort_keys=False))
    assert exc.value.line is not None


@pytest.mark.parametrize("target", OPTIMIZER_TARGETS)
def test_elementwise_targets_refuse_with_one_located_line(target):
    r = subprocess.run([sys.executable, "-m", "blr_derive", str(CATALOG / "noisy_kfac.yaml"), "--target", target],
                       capture_output=True, text=True)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "noisy_kfac.yaml:" in lines[0]
    assert not (GENERATED / target / "noisy_kfac.py").exists()


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_generation_is_byte_identical_and_matches_the_golden_artifact(target):
    first = api.generate(CATALOG / "noisy_kfac.yaml", target, "catalog/noisy_kfac.yaml")
    second = api.generate(CATALOG / "noisy_kfac.yaml", target, "catalog/noisy_kfac.yaml")
    assert first == second == (GENERATED / target / "noisy_kfac.py").read_text(encoding="utf-8")
