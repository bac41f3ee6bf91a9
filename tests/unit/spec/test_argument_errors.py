"""Bad arguments of the newer approximations are one-line located errors (no traceback, no silent acceptance)."""
import pytest

from blr_derive.derive.driver import derive
from blr_derive.core.errors import SpecError
from blr_derive.candidates.load import load_recipe

BASE = """name: bad
family: {family}
loss: {loss}
hyperparameters:
  rho: {{default: 0.1}}
approximations:
{approximations}
"""
DATA_LOSS = "{expression: 'sum(exp(X*theta))', data: {X: {shape: [N, P]}}}"
SPIKE = "{mixture: gaussian_diag, components: 2, fixed: {2: {m: 0, s: 1}}}"


@pytest.mark.parametrize("family, loss, approximations, line, message", [
    ("gaussian_full", DATA_LOSS, "  - gauss_hermite: {nodes: 0}", 7, "nodes must be a positive integer"),
    ("gaussian_full", DATA_LOSS, "  - gauss_hermite: {nodes: 2.5}", 7, "nodes must be a positive integer"),
    (SPIKE, "abstract", "  - delta\n  - dropout_masks: {samples: 0}", 8, "samples must be a positive integer"),
    (SPIKE, "abstract", "  - delta\n  - dropout_masks: {samples: -2}", 8, "samples must be a positive integer"),
    ("gaussian_diag", "abstract", "  - delta\n  - posterior_correction: {x: 1}", 8, "takes no arguments"),
    ("gaussian_diag", "abstract", "  - monte_carlo: {samples: 0}", 7, "samples must be a positive integer"),
    ("bernoulli_logit", "abstract", "  - concrete_relaxation: {temperature: 0}", 7, "temperature must be positive"),
    ("bernoulli_logit", "abstract", "  - concrete_relaxation: {temperature: -1.5}", 7, "temperature must be positive"),
    ("bernoulli_logit", "abstract", "  - concrete_relaxation: {temperature: 1, samples: 1.5}", 7,
     "samples must be a positive integer"),
], ids=["nodes0", "nodes_float", "samples0", "samples_negative", "poco_args", "mc_samples0", "temperature0",
        "temperature_negative", "relaxation_samples_float"])
def test_bad_argument_is_a_located_error(tmp_path, family, loss, approximations, line, message):
    p = tmp_path / "bad.yaml"
    p.write_text(BASE.format(family=family, loss=loss, approximations=approximations))
    with pytest.raises(SpecError, match=message) as exc:
        derive(load_recipe(p))
    assert (exc.value.file, exc.value.line) == (str(p), line)
